"""The archiver service: the event store -> the Parquet lake. Room: services/archiver."""

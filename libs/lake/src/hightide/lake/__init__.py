"""hightide.lake: the Parquet lake of archived events. Room: libs/lake (over runtime, under the services)."""

"""The broker-replica service: argv/env -> runtime + core + storage. Room: services/broker."""

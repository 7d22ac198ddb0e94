"""hightide.history: the history service, PySpark jobs over the event lake (rebuild, audit, report).

Room: services/history. It reads the Parquet lake the archiver writes, with explicit schemas, and runs the rules
`hightide.audit` specifies in plain Python as DataFrame operations and window functions (no Python UDFs on the hot
path), on `local[*]` by default or any Spark master. A test holds the two to identical findings.
"""

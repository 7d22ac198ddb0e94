"""The audit's invariants as Spark jobs: each name of `hightide.audit.checks` with a function from the ordered
events (`hightide.history.events.read_lake`) to a DataFrame of `hightide.history.findings.FINDINGS_SCHEMA`.

Room: services/history. DataFrame operations and window functions only, no Python UDFs on the hot path.
"""

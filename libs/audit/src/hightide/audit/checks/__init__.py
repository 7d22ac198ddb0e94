"""The audit's invariants, one small named check each, over a `History`: `CHECKS` maps a name to its check.

Room: libs/audit (pure). Each check's docstring states the rule and cites its source (Kafka's code, or the TLA+
property of ../shared/reference/reliability.md §8). The PySpark jobs (`hightide.history.checks`) implement the same
names and must return the same findings, row for row.
"""

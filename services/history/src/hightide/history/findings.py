"""Findings as Spark rows: the explicit schema of `hightide.audit.findings.Finding`, and the collect back to it.

Room: services/history. Every check of `hightide.history.checks` returns a DataFrame of exactly `FINDINGS_SCHEMA`
(build its rows with `finding_columns`), and `collect_findings` turns the union into sorted `Finding`s, the form a
test compares with the plain-Python audit.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hightide.audit.findings import COLUMNS, Finding, from_row

FINDINGS_SCHEMA: Final = T.StructType(
    [
        T.StructField("invariant", T.StringType(), False),
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("replica", T.IntegerType(), False),
        T.StructField("first_offset", T.LongType(), False),
        T.StructField("last_offset", T.LongType(), False),
        T.StructField("records", T.ArrayType(T.StringType(), False), False),
        T.StructField("events", T.ArrayType(T.StringType(), False), False),
        T.StructField("cause", T.StringType(), False),
        T.StructField("detail", T.StringType(), False),
    ]
)
assert tuple(FINDINGS_SCHEMA.fieldNames()) == COLUMNS


def finding_columns(
    invariant: str,
    *,
    topic: Column | None = None,
    partition: Column | None = None,
    replica: Column | None = None,
    first_offset: Column | None = None,
    last_offset: Column | None = None,
    records: Column | None = None,
    events: Column | None = None,
    cause: Column | None = None,
    detail: Column | None = None,
) -> list[Column]:
    """The select list of a findings DataFrame: each column cast to its type, sentinels where not given, and the
    arrays sorted and deduplicated (as `hightide.audit.findings.finding` does)."""

    def text(column: Column | None) -> Column:
        return F.lit("") if column is None else F.coalesce(column.cast("string"), F.lit(""))

    def number(column: Column | None, kind: str) -> Column:
        return F.lit(-1).cast(kind) if column is None else F.coalesce(column.cast(kind), F.lit(-1).cast(kind))

    def strings(column: Column | None) -> Column:
        empty = F.array().cast("array<string>")
        return empty if column is None else F.array_sort(F.array_distinct(F.coalesce(column, empty)))

    return [
        F.lit(invariant).alias("invariant"),
        text(topic).alias("topic"),
        number(partition, "int").alias("partition"),
        number(replica, "int").alias("replica"),
        number(first_offset, "bigint").alias("first_offset"),
        number(last_offset, "bigint").alias("last_offset"),
        strings(records).alias("records"),
        strings(events).alias("events"),
        text(cause).alias("cause"),
        text(detail).alias("detail"),
    ]


def collect_findings(findings: DataFrame) -> list[Finding]:
    """The rows as sorted Findings."""
    return sorted(from_row(row.asDict()) for row in findings.collect())

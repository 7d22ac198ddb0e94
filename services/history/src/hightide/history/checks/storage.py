"""What a broker does once its storage refuses a change, on Spark: `storage_refusal_takes_replica_offline` over
`read_lake`'s DataFrame.

Room: services/history. The twin of `hightide.audit.checks.storage` (the specification), with the same findings row
for row: within one broker incarnation and replica (the lake's `topic` and `partition` columns), ordered by
position, a StorageRefused is broken when the first serving event after it comes before any ReplicaOffline after
it (window functions over the rows that follow, folded from the last row back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from hightide.audit.checks.storage import NAME, SERVING_TYPES
from hightide.history.events import payload_of
from hightide.history.findings import finding_columns
from hightide.protocol import events

_PAYLOAD: Final = T.StructType(
    [
        T.StructField("replica", T.IntegerType(), True),
        T.StructField("operation", T.StringType(), True),
        T.StructField("error", T.StringType(), True),
    ]
)
REFUSED, OFFLINE = events.StorageRefused.TYPE, events.ReplicaOffline.TYPE
_REPLICA: Final = ("service", "emitter_id", "incarnation", "topic", "partition")  # one incarnation's replica


def storage_refusal_takes_replica_offline(lake_events: DataFrame) -> DataFrame:
    """After a broker incarnation's StorageRefused for a replica, its ReplicaOffline comes before the next event of
    that incarnation that shows the replica in service (see the specification)."""
    names = [REFUSED, OFFLINE, *SERVING_TYPES]
    placed = lake_events.where(F.col("type").isin(*names) & F.col("topic").isNotNull() & F.col("partition").isNotNull())
    # Only a replica of an incarnation whose storage refused something can break the rule: its rows alone are
    # parsed and ordered, not the whole lake's fetches and produces (few keys, so the semi-join is broadcast).
    refusing = placed.where(F.col("type") == REFUSED).select(*_REPLICA).distinct()
    rows = placed.join(F.broadcast(refusing), list(_REPLICA), "left_semi").withColumn("_p", payload_of(_PAYLOAD, names))
    # A failed answer (a FetchServed or ProduceCompleted whose error is not NONE) is not service.
    serving = F.col("type").isin(*SERVING_TYPES) & F.coalesce(F.col("_p.error") == "NONE", F.lit(True))
    # The rows after each row, as a growing frame over the reversed order: Spark folds a frame that starts at the
    # partition's first row incrementally, but recomputes one that ends at its last row for every row (quadratic in
    # a replica's events, which are mostly fetches). The least struct is the earliest serving event: position first.
    after = Window.partitionBy(*_REPLICA).orderBy(F.col("position").desc()).rowsBetween(Window.unboundedPreceding, -1)
    served = F.struct(F.col("position").alias("position"), F.col("event_id").alias("id"), F.col("type").alias("type"))
    looked = rows.withColumn("_served", F.min(F.when(serving, served)).over(after)).withColumn(
        "_offline", F.min(F.when(F.col("type") == OFFLINE, F.col("position"))).over(after)
    )
    broken = looked.where(
        (F.col("type") == REFUSED)
        & F.col("_served").isNotNull()
        & (F.col("_offline").isNull() | (F.col("_offline") > F.col("_served.position")))
    )
    return broken.select(
        *finding_columns(
            NAME,
            topic=F.col("topic"),
            partition=F.col("partition"),
            replica=F.col("_p.replica"),
            events=F.array(F.col("event_id"), F.col("_served.id")),
            detail=F.format_string(
                "broker %d's storage refused %s (%s); the replica stayed in service: %s",
                F.col("_p.replica"),
                F.col("_p.operation"),
                F.col("_p.error"),
                F.col("_served.type"),
            ),
        )
    )


CHECKS: Final[dict[str, Callable[[DataFrame], DataFrame]]] = {NAME: storage_refusal_takes_replica_offline}

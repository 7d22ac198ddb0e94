"""`hightide history rebuild` and `hightide history snapshot`: the state at an instant, and the hourly snapshots.

Room: services/history (a command's wiring: arguments, a Spark session, printing). The rules are in
`hightide.history.rebuild` and `hightide.history.snapshot`. `add_parser(subparsers)` adds both commands to the
`hightide history` parser; `python -m hightide.history.rebuild_cli rebuild|snapshot ...` runs them alone. Bad input
(no lake, a timestamp that is not one) is one line on stderr and exit code 2, never a traceback.

```
hightide history rebuild --lake DIR --at TIMESTAMP [--topic T] [--format text|json] [--out DIR] [--master URL]
hightide history snapshot --lake DIR [--master URL]
```

TIMESTAMP is ISO-8601 (a time without a zone is UTC) or milliseconds since the epoch; the instant holds the events
with wall_ms <= it. `--out DIR` writes the full timelines up to the instant as Parquet: DIR/replicas,
DIR/partitions and DIR/epochs (`hightide.history.rebuild.REPLICA_TIMELINE_SCHEMA`, `PARTITION_TIMELINE_SCHEMA`,
`EPOCH_TIMELINE_SCHEMA`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hightide.history.audit_cli import master_url
from hightide.lake.layout import HOUR_MS, LakeError

if TYPE_CHECKING:  # Spark loads only when a command runs: every `hightide` call builds this parser
    from pyspark.sql import DataFrame, SparkSession

    from hightide.history.snapshot import RebuiltAt

EXIT_OK = 0
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input: the message is the one line the command prints."""


def add_parser(subparsers: Any) -> None:
    """Add `rebuild` and `snapshot` to a `hightide history` subparsers object."""
    rebuild = subparsers.add_parser("rebuild", help="the cluster's state at an instant, from the lake")
    rebuild.add_argument("--lake", required=True, type=Path, help="the event lake directory")
    rebuild.add_argument("--at", required=True, help="ISO-8601 time or ms since the epoch")
    rebuild.add_argument("--topic", help="only this topic")
    rebuild.add_argument("--format", choices=("text", "json"), default="text")
    rebuild.add_argument("--out", type=Path, help="write the full timelines up to the instant as Parquet here")
    rebuild.add_argument("--master", type=master_url, default="local[*]", help="Spark master URL (default local[*])")
    rebuild.add_argument("--no-snapshots", action="store_true", help="fold the whole history, ignoring snapshots")
    rebuild.set_defaults(run=_guarded(run_rebuild))
    snapshot = subparsers.add_parser("snapshot", help="write the rebuilt state at each hour boundary into the lake")
    snapshot.add_argument("--lake", required=True, type=Path, help="the event lake directory")
    snapshot.add_argument("--master", type=master_url, default="local[*]", help="Spark master URL (default local[*])")
    snapshot.set_defaults(run=_guarded(run_snapshot))


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The command, with bad input (UsageError, LakeError) as one line on stderr and exit code 2, whoever calls it."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (UsageError, LakeError) as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_USAGE

    return run


def parse_instant(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 time (UTC when it names no zone) or of a number of ms."""
    if text.strip().lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--at {text!r} is neither an ISO-8601 time nor milliseconds since the epoch") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def spark_session(master: str, app: str, *, short: bool = False) -> SparkSession:
    from hightide.history.spark import session  # noqa: PLC0415 (Spark only when a command runs)

    return session(master, app, short=short)


def _check_lake(lake: Path) -> None:
    if not lake.is_dir():
        raise UsageError(f"no lake at {lake}")


def run_rebuild(args: argparse.Namespace) -> int:
    at_ms = parse_instant(args.at)
    _check_lake(args.lake)
    spark = spark_session(args.master, "hightide-history-rebuild", short=short_job(args, at_ms))
    state = state_at(spark, args.lake, at_ms, args.topic, not args.no_snapshots)
    if args.out is not None:
        write_timelines(spark, args.lake, at_ms, args.out)
    if args.format == "json":
        print(json.dumps(state, sort_keys=True))
    else:
        print(render(state))
    return EXIT_OK


def short_job(args: argparse.Namespace, at_ms: int) -> bool:
    """Whether the command is a short job: the state at the instant from a snapshot, and no timelines to write (a
    look at the lake's file names and the snapshots' manifests, before any JVM starts)."""
    from hightide.history.snapshot import lake_files, latest_valid  # noqa: PLC0415 (as above)

    if args.no_snapshots or args.out is not None:
        return False
    return latest_valid(args.lake, at_ms, lake_files(args.lake)) is not None


def state_at(spark: SparkSession, lake: Path, at_ms: int, topic: str | None, use_snapshots: bool) -> dict[str, Any]:
    """The state at `at_ms` as a plain dict: partitions (each with its replicas), sorted by topic and partition."""
    from hightide.history.snapshot import rebuild_at  # noqa: PLC0415 (as above)

    return _shown(rebuild_at(spark, lake, at_ms, use_snapshots, topic), at_ms)


def _shown(rebuilt: RebuiltAt, at_ms: int) -> dict[str, Any]:
    held: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rebuilt.partitions:
        held[(row.topic, row.partition)] = {
            "topic": row.topic,
            "partition": row.partition,
            "leader": row.leader,
            "leader_epoch": row.leader_epoch,
            "partition_epoch": row.partition_epoch,
            "replicas": list(row.replicas),
            "isr": list(row.isr),
            "elr": list(row.elr),
            "last_known_elr": list(row.last_known_elr),
            "replica_states": [],
        }
    for row in rebuilt.replicas:
        partition = held.setdefault(
            (row.topic, row.partition), {"topic": row.topic, "partition": row.partition, "replica_states": []}
        )
        partition["replica_states"].append(
            {
                "replica": row.replica,
                "log_end_offset": row.log_end_offset,
                "high_watermark": row.high_watermark,
                "log_start_offset": row.log_start_offset,
                "epoch_entries": [[int(epoch), int(start)] for epoch, start in row.epoch_entries],
            }
        )
    for partition in held.values():
        partition["replica_states"].sort(key=lambda replica: replica["replica"])
    offline, abandoned = controller_lists(rebuilt)
    for key, marked in offline.items():
        partition = held.setdefault(key, {"topic": key[0], "partition": key[1], "replica_states": []})
        partition["offline_replicas"] = marked
    return {
        "at_ms": at_ms,
        "snapshot_hour": rebuilt.snapshot_hour,
        "note": rebuilt.note,
        "partitions": [held[key] for key in sorted(held)],
        "abandoned": abandoned,
    }


# -- issue 12 (gaps): the lists the plain rebuild gives besides the state -------------------------------------------


def controller_lists(rebuilt: RebuiltAt) -> tuple[dict[tuple[str, int], list[int]], list[dict[str, Any]]]:
    """(each partition's replicas marked offline at the instant, the controller decisions abandoned by then), as
    `hightide.audit.rebuild` lists them: `rebuild_at` collected them with the state, from the ordered events the
    folds read (their controller side is the one the partition fold gathered and ordered:
    `rebuild.controller_side`, `rebuild.metadata_order`), so the lists add no read and no second ordering of it."""
    listed = {(row.topic, row.partition): list(row.replicas) for row in rebuilt.offline}
    abandoned = [
        {
            "event_id": row.event_id,
            "event_type": row.event_type,
            "controller_epoch": row.controller_epoch,
            "metadata_offset": row.metadata_offset,
            "committed_below": row.committed_below,
        }
        for row in rebuilt.abandoned
    ]
    return listed, abandoned


def render(state: dict[str, Any]) -> str:
    at = datetime.fromtimestamp(state["at_ms"] / 1000, tz=UTC).isoformat(timespec="milliseconds")
    source = (
        f"from the snapshot at hour {state['snapshot_hour']}" if state["snapshot_hour"] is not None else "full replay"
    )
    lines = [f"state at {at} ({state['at_ms']} ms; {source})"]
    if state["note"]:
        lines.append(f"note: {state['note']}")
    if not state["partitions"]:
        lines.append("no partition exists at that instant")
    for partition in state["partitions"]:
        name = f"{partition['topic']}-{partition['partition']}"
        if "leader" in partition:
            lines.append(
                f"{name}  leader {partition['leader']}  leader epoch {partition['leader_epoch']}  partition epoch "
                f"{partition['partition_epoch']}  replicas {partition['replicas']}  ISR {partition['isr']}  "
                f"ELR {partition['elr']}  last-known ELR {partition['last_known_elr']}"
            )
        else:
            lines.append(f"{name}  (no partition in the metadata: replicas left on disk)")
        if partition.get("offline_replicas"):
            lines.append(f"  offline replicas {partition['offline_replicas']} (marked by the controller)")
        for replica in partition["replica_states"]:
            epochs = " ".join(f"{epoch}@{start}" for epoch, start in replica["epoch_entries"]) or "-"
            lines.append(
                f"  replica {replica['replica']}  LEO {replica['log_end_offset']}  HW {replica['high_watermark']}  "
                f"log start {replica['log_start_offset']}  epochs {epochs}"
            )
    for intent in state.get("abandoned", []):
        lines.append(
            f"abandoned intent {intent['event_id']} ({intent['event_type']}): controller epoch "
            f"{intent['controller_epoch']} at metadata offset {intent['metadata_offset']}, never committed (its epoch "
            f"wrote nothing from offset {intent['committed_below']})"
        )
    return "\n".join(lines)


def write_timelines(spark: SparkSession, lake: Path, at_ms: int, out: Path) -> None:
    """The full timelines up to `at_ms` (a replay from the beginning) as Parquet: out/replicas, out/partitions and
    out/epochs (each leader epoch cache entry with the events from and until which its replica held it)."""
    from pyspark import StorageLevel  # noqa: PLC0415 (as above)
    from pyspark.sql import functions as F  # noqa: PLC0415

    from hightide.history.events import incarnation_bounds  # noqa: PLC0415
    from hightide.history.rebuild import all_timelines  # noqa: PLC0415
    from hightide.history.snapshot import lake_files, ordered_with_starts, read_rows  # noqa: PLC0415

    parts = [part for hour, found in lake_files(lake).items() if hour <= at_ms // HOUR_MS for part in found]
    rows = read_rows(spark, lake, parts).where(F.col("wall_ms") <= at_ms)
    # Ordered without looking for copies where the incarnations' bounds say there are none. Not cached: the replica
    # side reads the lake once, and what is kept for the epoch timeline is its folded rows (narrow), not the events
    # with their payloads; the controller side keeps its own few rows.
    events = ordered_with_starts(rows, None, bounds=incarnation_bounds(rows))
    held: list[DataFrame] = []

    def hold(frame: DataFrame) -> DataFrame:
        held.append(frame.persist(StorageLevel.MEMORY_AND_DISK))
        return held[-1]

    replicas, partitions, epochs = all_timelines(events, hold)
    replicas.write.mode("overwrite").parquet(str(out / "replicas"))
    partitions.write.mode("overwrite").parquet(str(out / "partitions"))
    epochs.write.mode("overwrite").parquet(str(out / "epochs"))
    for frame in held:
        frame.unpersist()


def run_snapshot(args: argparse.Namespace) -> int:
    _check_lake(args.lake)
    from hightide.history.snapshot import write_snapshots  # noqa: PLC0415 (as above)

    spark = spark_session(args.master, "hightide-history-snapshot")
    written = write_snapshots(spark, args.lake)
    done = [f"snapshots written at hours {written.hours}"] if written.hours else []
    done += ["the tail since the last snapshot written"] if written.tail else []
    print("; ".join(done) if done else "every snapshot is up to date")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hightide history")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())

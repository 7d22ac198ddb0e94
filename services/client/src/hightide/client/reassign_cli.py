"""`hightide reassign`: kafka-reassign-partitions.sh's --execute, --verify and --cancel over the controller's
AlterPartitionReassignments and ListPartitionReassignments.

Room: services/client. Reads Kafka's reassignment JSON (`{"version":1,"partitions":[{"topic":"t","partition":0,
"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}`; `log_dirs` optional and only "any": Hightide has one log
directory per broker), checks it as ReassignPartitionsCommand does, and prints Kafka's text. The rules of a
reassignment live in the controller (hightide.core.controller); this module only asks and reports.

`--cancel` (Kafka's, beyond CONTRACT.md's two actions) sends a null target for each of the file's partitions still
in progress. Exit codes (CONTRACT.md): 0 success; 1 the operation failed (a Kafka error code, an unknown broker,
a reassignment already in progress without --additional, and for --verify: a partition whose reassignment is not
complete yet); 2 an unreadable or invalid JSON file.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TypeGuard

from hightide.client import commands
from hightide.client.admin import Admin
from hightide.client.connection import ClusterConnection
from hightide.protocol.errors import ErrorCode

ANY_LOG_DIR: Final = "any"
CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE: Final = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one."
)
PARTITIONS_MAX: Final = 10_000

Target = tuple[str, int, tuple[int, ...]]

HELP: Final = """Move partitions' replicas to other brokers (Kafka's kafka-reassign-partitions.sh).
--execute starts the reassignments of the JSON file and prints the current assignment first (keep it: it is the
file that moves them back). --verify prints, per partition, whether its reassignment is completed or still in
progress; it exits 0 when every one is completed and 1 while any is not (Kafka's tool exits 0 either way; here
1 is "not done yet", so a script can wait with a loop). --cancel reverts the file's partitions still being
moved. Exit 2: the file is not valid reassignment JSON."""


def add_reassign_command(subparsers: Any, common: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "reassign",
        parents=[common],
        help="move partitions to other brokers (--execute, --verify)",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--reassignment-json-file", type=Path, required=True, metavar="FILE")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the reassignments in the file")
    action.add_argument("--verify", action="store_true", help="are they complete? exit 0 if all are, 1 if not")
    action.add_argument("--cancel", action="store_true", help="cancel the file's reassignments still in progress")
    parser.add_argument(
        "--additional", action="store_true", help="--execute even while other reassignments are in progress"
    )
    parser.set_defaults(run=reassign)


def reassign(args: argparse.Namespace) -> int:
    targets = parse_reassignment_json(_read(args.reassignment_json_file))

    async def action(admin: Admin, _conn: ClusterConnection) -> int:
        if args.verify:
            return await _verify(admin, targets)
        if args.cancel:
            return await _cancel(admin, targets)
        return await _execute(admin, targets, additional=args.additional)

    return asyncio.run(commands._admin_call(args, action))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise commands.UsageError(f"cannot read {path}: {error}") from None


# -- the file ------------------------------------------------------------------------------------------------------


def parse_reassignment_json(text: str) -> list[Target]:
    """ReassignPartitionsCommand's parsePartitionReassignmentData and parseExecuteAssignmentArgs: version 1, each
    partition's topic, partition and replicas (and `log_dirs`, "any" each); no empty lists, no partition twice, no
    broker twice in one list. Anything else is a UsageError naming the problem."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise commands.UsageError(f"the reassignment file is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise commands.UsageError("the reassignment file must hold a JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise commands.UsageError(f"Not supported version field value {version}")
    entries = data.get("partitions")
    if not isinstance(entries, list) or not entries:
        raise commands.UsageError("Partition reassignment list cannot be empty")
    if len(entries) > PARTITIONS_MAX:
        raise commands.UsageError(f"at most {PARTITIONS_MAX} partitions per reassignment")
    targets = [_target(entry) for entry in entries]
    counts = Counter((t, p) for t, p, _ in targets)
    duplicates = sorted(tp for tp, count in counts.items() if count > 1)
    if duplicates:
        listed = ",".join(f"{t}-{p}" for t, p in duplicates)
        raise commands.UsageError(f"Partition reassignment contains duplicate topic partitions: {listed}")
    repeated = [(t, p, sorted({r for r in rs if rs.count(r) > 1})) for t, p, rs in targets if len(set(rs)) != len(rs)]
    if repeated:
        detail = ". ".join(f"{t}-{p} contains multiple entries for {','.join(map(str, rs))}" for t, p, rs in repeated)
        raise commands.UsageError(f"Partition replica lists may not contain duplicate entries: {detail}")
    return targets


def _target(entry: object) -> Target:
    if not isinstance(entry, dict):
        raise commands.UsageError(f"each partition must be a JSON object, got {entry!r}")
    topic, partition, replicas = entry.get("topic"), entry.get("partition"), entry.get("replicas")
    if not isinstance(topic, str) or not topic:
        raise commands.UsageError(f"a partition without a topic name: {entry}")
    if not _is_int(partition) or partition < 0:
        raise commands.UsageError(f"{topic}: partition must be a non-negative integer, got {partition!r}")
    if not isinstance(replicas, list) or not all(_is_int(r) and r >= 0 for r in replicas):
        raise commands.UsageError(f"{topic}-{partition}: replicas must be a list of broker ids, got {replicas!r}")
    if not replicas:
        raise commands.UsageError("Partition replica list cannot be empty")
    log_dirs = entry.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
    if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
        raise commands.UsageError(
            f"Size of replicas list {replicas} is different from size of log dirs list {log_dirs} "
            f"for partition {topic}-{partition}"
        )
    if any(d != ANY_LOG_DIR for d in log_dirs):
        raise commands.UsageError(f'{topic}-{partition}: log_dirs must be "any" (one log directory per broker)')
    unknown = sorted(set(entry) - {"topic", "partition", "replicas", "log_dirs"})
    if unknown:
        raise commands.UsageError(f"{topic}-{partition}: unknown fields {unknown}")
    return topic, int(partition), tuple(int(r) for r in replicas)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def reassignment_json(assignment: Sequence[Target]) -> str:
    """Kafka's formatAsReassignmentJson: compact, partitions in topic then partition order, log_dirs all "any"."""
    partitions = [
        {"topic": t, "partition": p, "replicas": list(rs), "log_dirs": [ANY_LOG_DIR] * len(rs)}
        for t, p, rs in sorted(assignment)
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


# -- execute and verify ----------------------------------------------------------------------------------------------


async def _execute(admin: Admin, targets: list[Target], *, additional: bool) -> int:
    """executeAssignment: refuse while others are in progress (unless --additional), check the brokers, print
    the current assignment (the rollback file), start, and report."""
    ongoing = await admin.list_partition_reassignments()
    if ongoing.error:
        return commands._failed("reassign", ongoing.error, ongoing.message)
    if ongoing.reassignments and not additional:
        return commands._failed(
            "reassign", ErrorCode.REASSIGNMENT_IN_PROGRESS, CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE
        )
    cluster = await admin.describe_cluster()
    if cluster.error:
        return commands._failed("reassign", cluster.error, cluster.message)
    known = {b.broker_id for b in cluster.brokers}
    unknown = sorted({r for _, _, rs in targets for r in rs} - known)
    if unknown:
        return commands._failed("reassign", ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Unknown broker id {unknown[0]}")
    current = await _current_assignment(admin, targets)
    if isinstance(current, str):
        return commands._failed("reassign", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, current)
    print("Current partition replica assignment\n")
    print(reassignment_json(current))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    answer = await admin.alter_partition_reassignments(tuple((t, p, rs) for t, p, rs in targets))
    if answer.error:
        return commands._failed("reassign", answer.error, answer.message)
    failures = sorted((r.topic, r.partition, ErrorCode(r.error), r.message) for r in answer.results if r.error)
    if failures:
        lines = "\n".join(f"{t}-{p}: {error.name}: {message}" for t, p, error, message in failures)
        print(f"hightide reassign: Error reassigning partition(s):\n{lines}", file=sys.stderr)
        return commands.EXIT_FAILED
    names = ",".join(f"{t}-{p}" for t, p, _ in sorted(targets))
    print(f"Successfully started partition reassignment{'' if len(targets) == 1 else 's'} for {names}")
    return commands.EXIT_OK


async def _current_assignment(admin: Admin, targets: list[Target]) -> list[Target] | str:
    """Each target partition's replicas now (during a reassignment: the target followed by the ones being
    removed, as Kafka's describe shows them), or the message for the first partition that does not exist."""
    metadata = await admin.describe_topics(tuple(sorted({t for t, _, _ in targets})))
    topics = {topic.name: topic for topic in metadata.topics if not topic.error}
    current: list[Target] = []
    for topic_name, partition_id, _ in sorted(targets):
        topic = topics.get(topic_name)
        if topic is None or partition_id >= len(topic.partitions):
            return f"Unable to find partition: {topic_name}-{partition_id}"
        current.append((topic_name, partition_id, tuple(topic.partitions[partition_id].replicas)))
    return current


async def _verify(admin: Admin, targets: list[Target]) -> int:
    """verifyAssignment's partition half: in progress while the controller lists it; otherwise completed when
    the replicas equal the target, or "no active reassignment, but ..." when they differ."""
    ongoing = await admin.list_partition_reassignments(tuple((t, p) for t, p, _ in targets))
    if ongoing.error:
        return commands._failed("reassign", ongoing.error, ongoing.message)
    moving = {(r.topic, r.partition) for r in ongoing.reassignments}
    metadata = await admin.describe_topics(tuple(sorted({t for t, _, _ in targets})))
    topics = {topic.name: topic for topic in metadata.topics if not topic.error}
    print("Status of partition reassignment:")
    status = commands.EXIT_OK
    for topic_name, partition_id, replicas in sorted(targets):
        name = f"{topic_name}-{partition_id}"
        if (topic_name, partition_id) in moving:
            print(f"Reassignment of partition {name} is still in progress.")
            status = commands.EXIT_FAILED
            continue
        topic = topics.get(topic_name)
        exists = topic is not None and partition_id < len(topic.partitions)
        found = topic.partitions[partition_id].replicas if topic is not None and exists else ()
        if tuple(found) == replicas:
            print(f"Reassignment of partition {name} is completed.")
        else:
            print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{','.join(map(str, found))} rather than {','.join(map(str, replicas))}."
            )
            status = commands.EXIT_FAILED
    return status


async def _cancel(admin: Admin, targets: list[Target]) -> int:
    """cancelAssignment's partition half: cancel the file's partitions the controller lists as in progress.
    Unlike Kafka's tool, which skips a partition only being added to (its filter keeps those with no adding
    replica or some removing one), every listed partition is cancelled."""
    ongoing = await admin.list_partition_reassignments(tuple((t, p) for t, p, _ in targets))
    if ongoing.error:
        return commands._failed("reassign", ongoing.error, ongoing.message)
    moving = sorted((r.topic, r.partition) for r in ongoing.reassignments)
    if not moving:
        print("None of the specified partition reassignments are active.")
        return commands.EXIT_OK
    answer = await admin.alter_partition_reassignments(tuple((t, p, None) for t, p in moving))
    if answer.error:
        return commands._failed("reassign", answer.error, answer.message)
    failures = sorted((r.topic, r.partition, ErrorCode(r.error), r.message) for r in answer.results if r.error)
    plural = "" if len(moving) == 1 else "s"
    if failures:
        lines = "\n".join(f"{t}-{p}: {error.name}: {message}" for t, p, error, message in failures)
        print(f"hightide reassign: Error cancelling partition reassignment{plural} for:\n{lines}", file=sys.stderr)
        return commands.EXIT_FAILED
    names = ",".join(f"{t}-{p}" for t, p in moving)
    print(f"Successfully cancelled partition reassignment{plural} for: {names}")
    return commands.EXIT_OK

"""`hightide reassign` reads Kafka's reassignment JSON as ReassignPartitionsCommand does and prints Kafka's text;
`topic describe` shows a reassignment in progress as kafka-topics.sh does.

Method: the parser and the formatters are pure, so each case is an input and the exact output or the one-line
error (exit 2, no traceback) through `hightide.client.cli.main`; nothing here talks to a cluster (a bad file is
refused before connecting). The commands against a real cluster are in tests/e2e/test_reassign.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hightide.client import cli
from hightide.client.commands import UsageError, describe_lines
from hightide.client.reassign_cli import parse_reassignment_json, reassignment_json
from hightide.protocol import wire


def test_kafkas_format_round_trips() -> None:
    text = '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3,4],"log_dirs":["any","any","any"]}]}'
    assert parse_reassignment_json(text) == [("t", 0, (2, 3, 4))]
    assert reassignment_json([("t", 0, (2, 3, 4))]) == text
    # log_dirs may be left out; partitions print in topic, then partition order
    assert parse_reassignment_json('{"partitions":[{"topic":"t","partition":1,"replicas":[1]}]}') == [("t", 1, (1,))]
    two = reassignment_json([("t", 1, (1,)), ("s", 0, (2,))])
    assert two.index('"topic":"s"') < two.index('"topic":"t"')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON"),
        ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
        ('{"version":1,"partitions":[]}', "Partition reassignment list cannot be empty"),
        (
            '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[]}]}',
            "Partition replica list cannot be empty",
        ),
        (
            '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
            '{"topic":"t","partition":0,"replicas":[2]}]}',
            "Partition reassignment contains duplicate topic partitions: t-0",
        ),
        (
            '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,1]}]}',
            "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1",
        ),
        (
            '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
            "Size of replicas list [1, 2] is different from size of log dirs list ['any'] for partition t-0",
        ),
        (
            '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/data"]}]}',
            'log_dirs must be "any"',
        ),
        ('{"version":1,"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}', "partition must be"),
        ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[true]}]}', "replicas must be"),
    ],
)
def test_bad_files_are_refused_with_kafkas_message(text: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_reassignment_json(text)
    assert message in str(refused.value)


def test_a_bad_file_exits_2_with_one_line_and_no_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "r.json"
    bad.write_text('{"version":1,"partitions":[]}')
    assert cli.main(["reassign", "--reassignment-json-file", str(bad), "--execute"]) == 2
    err = capsys.readouterr().err
    assert err == "hightide reassign: error: Partition reassignment list cannot be empty\n"
    missing = tmp_path / "missing.json"
    assert cli.main(["reassign", "--reassignment-json-file", str(missing), "--verify"]) == 2
    assert capsys.readouterr().err.startswith("hightide reassign: error: cannot read")


def test_execute_and_verify_are_one_or_the_other(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as usage:
        cli.main(["reassign", "--reassignment-json-file", str(tmp_path / "r.json"), "--execute", "--verify"])
    assert usage.value.code == 2


def partition(
    replicas: tuple[int, ...], isr: tuple[int, ...], adding: tuple[int, ...] = (), removing: tuple[int, ...] = ()
) -> wire.PartitionMetadata:
    return wire.PartitionMetadata(
        partition=0,
        leader=isr[0],
        leader_epoch=0,
        partition_epoch=1,
        replicas=replicas,
        isr=isr,
        adding_replicas=adding,
        removing_replicas=removing,
    )


def test_describe_shows_adding_and_removing_before_elr_during_a_reassignment() -> None:
    """TopicCommand: `Adding Replicas` and `Removing Replicas` follow `Isr` while a reassignment is in progress,
    and the ReplicationFactor is the replicas less the ones being added."""
    moving = wire.TopicMetadata(
        name="t", topic_id="id", partitions=(partition((2, 3, 4, 1), (1, 2, 3), adding=(4,), removing=(1,)),)
    )
    header, line = describe_lines(moving)
    assert "\tReplicationFactor: 3\t" in header
    assert line == (
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 2,3,4,1\tIsr: 1,2,3\tAdding Replicas: 4\t"
        "Removing Replicas: 1\tElr: \tLastKnownElr: "
    )
    # RF 3 with 3 in the ISR: not under-replicated while the fourth is being added
    assert describe_lines(moving, under_replicated=True) == [header]
    settled = wire.TopicMetadata(name="t", topic_id="id", partitions=(partition((2, 3, 4), (2, 3, 4)),))
    assert (
        describe_lines(settled)[1]
        == "\tTopic: t\tPartition: 0\tLeader: 2\tReplicas: 2,3,4\tIsr: 2,3,4\tElr: \tLastKnownElr: "
    )

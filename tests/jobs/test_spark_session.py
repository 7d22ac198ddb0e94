"""The history's Spark sessions resolve each JVM name once (`hightide.history.spark.resolve_names_once`), and cut
a lake's scans by its size (`read_tasks`).

Method: the tier's session (which the fixture makes as the commands do) is asked for classes and static members
through its py4j view, with the gateway client's commands counted: a second look-up of the same class or static
method must send nothing, while calls and static fields still reach the JVM each time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from py4j.protocol import MEMORY_COMMAND_NAME, MEMORY_DEL_SUBCOMMAND_NAME, Py4JError
from pyspark.sql import SparkSession

from hightide.history.spark import READ_TASKS_PER_CORE, read_tasks

# The first two lines of py4j's release of a Java object: the memory command, its delete subcommand.
RELEASE = (MEMORY_COMMAND_NAME + MEMORY_DEL_SUBCOMMAND_NAME).rstrip("\n")


@pytest.fixture
def sent(spark: SparkSession) -> Iterator[list[str]]:
    """The py4j commands sent while the test runs, their first two lines each, but for the releases of Java objects
    whose Python proxies were collected (`m` `d`: any garbage collection sends them, whatever the test asks)."""
    client: Any = spark.sparkContext._gateway._gateway_client  # type: ignore[union-attr]
    commands: list[str] = []
    send = client.send_command

    def counted(command: str, *args: Any, **kwargs: Any) -> Any:
        head = "\n".join(command.split("\n", 2)[:2])
        if head != RELEASE:
            commands.append(head)
        return send(command, *args, **kwargs)

    client.send_command = counted
    try:
        yield commands
    finally:
        client.send_command = send


def test_a_class_and_its_static_method_are_asked_for_once(spark: SparkSession, sent: list[str]) -> None:
    view: Any = spark.sparkContext._jvm
    functions = getattr(view, "org.apache.spark.sql.functions")
    lit = functions.lit
    asked = len(sent)
    assert getattr(view, "org.apache.spark.sql.functions") is functions
    assert functions.lit is lit
    assert len(sent) == asked, sent[asked:]
    assert lit(7).toString() == "7"  # the kept method still calls the JVM
    assert len(sent) > asked


def test_a_static_field_is_read_each_time_and_an_unknown_name_is_not_kept(spark: SparkSession, sent: list[str]) -> None:
    view: Any = spark.sparkContext._jvm
    integer = getattr(view, "java.lang.Integer")
    assert integer.MAX_VALUE == 2**31 - 1
    asked = len(sent)
    assert integer.MAX_VALUE == 2**31 - 1
    assert len(sent) == asked + 1  # a field's value is not kept: it is read again
    with pytest.raises(Py4JError):
        integer.noSuchMember  # noqa: B018
    with pytest.raises(Py4JError):
        integer.noSuchMember  # noqa: B018


MB = 1024 * 1024


@pytest.mark.parametrize(
    ("sizes", "tasks"),
    [
        ([int(3.7 * MB)] * 5, 2),  # the 1M bench lake: Spark's own split, a task a core
        ([int(3.7 * MB)] * 41, 2 * READ_TASKS_PER_CORE),  # the 10M one: 316 MB as Spark counts it, capped
        ([92 * MB] * 2, 6),  # 192 MB counted: a task per 32 MB
        ([], 2),  # no file: still a task a core, never none
    ],
)
def test_a_lakes_scans_get_a_task_per_32_mb_from_one_to_four_a_core(
    spark: SparkSession, sizes: list[int], tasks: int
) -> None:
    assert spark.sparkContext.defaultParallelism == 2  # the tier's local[2]
    key = "spark.sql.files.minPartitionNum"
    held = spark.conf.get(key, None)
    try:
        assert read_tasks(spark, sizes) == tasks
        assert spark.conf.get(key) == str(tasks)
    finally:
        if held is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, held)

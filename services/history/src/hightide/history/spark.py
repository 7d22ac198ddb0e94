"""The Spark session of the history jobs: `session(master)`.

Room: services/history. One place decides how the jobs meet Spark: `local[*]` unless told otherwise (or unless
`spark-submit` started this process, whose `--master` then holds), the driver on 127.0.0.1 when the executors run
on this machine, no web UI, UTC as the SQL session's time zone (event times are UTC), few shuffle partitions (a
history of millions of events is still small for Spark; adaptive execution merges what is left), and quiet logs,
so that a command's own output is what a person reads.

`session(..., short=True)` is for a job of a few seconds over few rows (`hightide history rebuild --at` from a
snapshot): its driver JVM compiles with the client compiler only (`-XX:TieredStopAtLevel=1`). Such a job's cost is
the driver's planning and code generation in a cold JVM, and the optimising compiler's threads spent more CPU than
they won back: on the 1M lake's `rebuild --at` the driver JVM's CPU fell from 28 to 17 s with it (measured A/B).
It also collects with the parallel collector rather than G1, whose concurrent threads take a core of two from a
job of seconds: `rebuild --at`'s first query on the 1M lake (with the class archive, quiet, A/B) 8.0-9.3 s against
8.5-10.6 s with G1.
Long jobs (a rebuild of the whole history, the audit) keep the default: the optimised code pays off there. They
also keep HotSpot's refusal to compile methods over 8,000 bytes of bytecode, though reading the lake's typed payload
columns (no `from_json`, which cuts a stage's generated code in two) lets Spark fuse whole map sides into such
methods, which then run interpreted. Compiling them (`-XX:-DontCompileHugeMethods`) was measured on the 10M bench
lake (2026-12-03, local[2], fresh JVMs, quiet): the audit 254.7 -> 225.9 s, but the rebuild's second and third runs
33.1-34.5 -> 39.2-46.9 s, its window stage's executor CPU 12-27 -> 27-36 s (the huge methods queue ahead of the hot
ones for the optimising compiler on two cores), so it is not set here.

A short session also runs without generated code (`INTERPRETED`: whole-stage code generation off, expressions
interpreted): for a few thousand rows, compiling each plan's classes with Janino in a cold JVM costs more than it wins.
The audit and the report of a small history (`small_history`: up to `SMALL_HISTORY_EVENTS` events, such as a demo's
or a test's lake) run as short jobs: the audit of a 100k-event lake took 126 s of driver JVM CPU as a long job and
82 s as a short one, and at 300k events the two were within 10% (measured A/B at load 10-17), so larger histories
keep the long job's settings.

Every session turns PySpark's DataFrame debugging off (`spark.python.sql.dataFrameDebugging.enabled`): with it,
PySpark 4 wraps each DataFrame and Column function to capture the Python call site for error messages (a walk of
the stack and about five py4j calls besides the function's own). Building the frames of `rebuild --at` made 13.9k
py4j calls with it and 6.4k without, and the Python process's CPU for the query fell from 1.7 to 0.6 s (an error
still names the failing operation, without the Python line that built it).

A driver JVM a session starts maps the history's class archive when this install has one (`class_archive`:
Spark's classes loaded once, per JDK and Spark install): start-up 8 -> 3.5 s and the first query of `rebuild --at`
about 5 s shorter.

Every session also resolves each JVM name once (`resolve_names_once`). PySpark names a JVM class for almost every
function it builds a column with (`functions.col`, `PythonUtils.toSeq`, ...), and py4j asks the JVM each time: a
round trip for the class, another for its method, and for a short name (`functions`, `PythonUtils`) a
`Class.forName` under each of the gateway's imported packages, each miss a search of all of Spark's ~280 jars. The
audit of a small simulated history asked 14.2k such questions (7.1k each) for its 16k calls, and the JVM spent 10%
of its CPU samples answering them (Java Flight Recorder, warm audit). A class's name and its static methods do not
change while the JVM lives, so the answers are kept; a static field's value is still read each time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final
from urllib.parse import urlparse

from py4j.java_gateway import JavaClass, JavaMember, JavaPackage, JVMView
from pyspark import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from hightide.history import class_archive

DEFAULT_MASTER: Final = "local[*]"
APP_NAME: Final = "hightide-history"
SHUFFLE_PARTITIONS: Final = 8
LOG_LEVEL: Final = "ERROR"
# The driver JVM's heap when this process starts it (spark-submit says its own): with local masters the executors
# live in it too, and Spark's 1g default ran out of memory rebuilding 4M events.
DRIVER_MEMORY: Final = "4g"
LOOPBACK: Final = "127.0.0.1"
LOG4J2_CONFIG: Final = Path(__file__).with_name("log4j2.properties")
SHORT_JOB_JAVA_OPTIONS: Final = "-XX:TieredStopAtLevel=1 -XX:+UseParallelGC"
INTERPRETED: Final = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",  # expressions, projections and orderings interpreted
}
SMALL_HISTORY_EVENTS: Final = 100_000
# Stages in tasks enough that the cores end them together. On two cores a stage of three tasks runs two, then one
# alone. Spark cuts a scan into splits of the bytes over the cores (each file counted `FILE_OPEN_BYTES` more, packed
# file by file), and adaptive execution merges shuffle partitions into ~64 MB: the 10M bench lake (41 files, 152 MB)
# was read in 3 tasks and its 169 MB shuffle went to the rebuild's windows in 3. A read of the lake's files asks for
# a task per `READ_TASK_BYTES` of them, from one to `READ_TASKS_PER_CORE` a core (`read_tasks`: a large lake
# keeps Spark's 128 MB cap, a small one Spark's split), and a long job's shuffles merge to `SHUFFLE_TASK_BYTES` at
# most (tiny ones still into one: Spark keeps partitions of 1 MB at least). Those two stages then ran 10 and 8
# tasks, and the 10M rebuild went from 24.7-29.7 s warm to 21.0-24.2 s (fresh JVMs, local[2], quiet; the bench's
# docstring has the figures). A small lake keeps Spark's split: four tasks a core would cut the 1M lake's 15 MB
# into a task per 3.7 MB file for each of the audit's ~40 scans, and bought nothing there.
READ_TASKS_PER_CORE: Final = 4
READ_TASK_BYTES: Final = 32 * 1024 * 1024
FILE_OPEN_BYTES: Final = 4 * 1024 * 1024  # spark.sql.files.openCostInBytes, Spark's default
SHUFFLE_TASK_BYTES: Final = "16m"
# PySpark 4 records the Python call site of every DataFrame and Column function it is given (for error messages'
# query context) by walking the stack and setting it in the JVM around the call: five py4j calls besides the
# function's own. A static setting: only a session's builder can turn it off.
DATAFRAME_DEBUGGING: Final = "spark.python.sql.dataFrameDebugging.enabled"


def session(
    master: str | None = None, app_name: str = APP_NAME, *, short: bool = False, archive_to: Path | None = None
) -> SparkSession:
    """A Spark session for the history jobs on `master` (default `local[*]`; under spark-submit, its master);
    `short`: the driver JVM set for a job of seconds (see the module docstring), when this process starts it.
    A driver JVM this process starts maps the class archive when there is one (`class_archive`); `archive_to`
    (the archive's training run) writes one instead, at that JVM's exit."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit launched this Python and owns its settings
    starts_jvm = not submitted and SparkContext._gateway is None
    if archive_to is None:
        archive = class_archive.java_options()
    else:
        archive = [f"-XX:ArchiveClassesAtExit={archive_to}", *class_archive.JVM_LOGGING]
    try:
        spark = _builder(master, app_name, short, archive if starts_jvm else [], submitted).getOrCreate()
    except PySparkRuntimeError as error:
        # A JVM that would not start with the archive (it aborts on a damaged one): without it, and never again.
        if error.getCondition() != "JAVA_GATEWAY_EXITED" or not class_archive.discard(archive):
            raise
        spark = _builder(master, app_name, short, list(class_archive.JVM_LOGGING), submitted).getOrCreate()
    spark.sparkContext.setLogLevel(LOG_LEVEL)
    resolve_names_once(spark)
    if not short:
        even_waves(spark)
    return spark


def even_waves(spark: SparkSession) -> None:
    """A long job's shuffles merged into partitions of `SHUFFLE_TASK_BYTES` at most (see `READ_TASKS_PER_CORE`)."""
    spark.conf.set("spark.sql.adaptive.advisoryPartitionSizeInBytes", SHUFFLE_TASK_BYTES)


def read_tasks(spark: SparkSession, sizes: Sequence[int]) -> int:
    """Set how many tasks at least the session's scans of files of these byte sizes are cut into: one per
    `READ_TASK_BYTES` (each file counted as Spark counts it), at least one a core and at most `READ_TASKS_PER_CORE`
    (see there). The setting holds for every scan the session plans after it (the jobs read one lake a session);
    returns it. It shapes the tasks only, never what a job finds."""
    cores = max(int(spark.sparkContext.defaultParallelism), 1)
    counted = sum(size + FILE_OPEN_BYTES for size in sizes)
    tasks = max(cores, min(READ_TASKS_PER_CORE * cores, counted // READ_TASK_BYTES))
    spark.conf.set("spark.sql.files.minPartitionNum", str(tasks))
    return tasks


def _builder(
    master: str | None, app_name: str, short: bool, archive: list[str], submitted: bool
) -> SparkSession.Builder:
    builder = SparkSession.builder.appName(app_name)
    if master is not None or not submitted:
        builder = builder.master(master or DEFAULT_MASTER)
    if not submitted:
        # The executors' Python, should any Python run there (none does: the jobs have no Python UDFs); under
        # spark-submit that is the submitter's to say.
        builder = builder.config("spark.pyspark.python", sys.executable).config("spark.driver.memory", DRIVER_MEMORY)
        # The driver's own JVM: quiet from its first line (setLogLevel below only applies once it is up).
        java_options = [f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}", *archive]
        if short:
            java_options.append(SHORT_JOB_JAVA_OPTIONS)
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(java_options))
    if on_this_machine(master or ("" if submitted else DEFAULT_MASTER)):
        builder = builder.config("spark.driver.bindAddress", LOOPBACK).config("spark.driver.host", LOOPBACK)
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config(DATAFRAME_DEBUGGING, "false")
    )
    if short:
        for key, value in INTERPRETED.items():
            builder = builder.config(key, value)
    return builder


class _NamesOnceView(JVMView):  # type: ignore[misc]  # py4j has no types
    """A py4j JVM view that keeps what each name resolved to: a class (as a `_MembersOnceClass`) or a package."""

    def __getattr__(self, name: str) -> object:
        return _kept(self, name, super().__getattr__(name), (JavaClass, JavaPackage))


class _MembersOnceClass(JavaClass):  # type: ignore[misc]  # py4j has no types
    """A py4j Java class that keeps its static methods and inner classes once looked up (not its fields' values)."""

    def __getattr__(self, name: str) -> object:
        return _kept(self, name, super().__getattr__(name), (JavaMember, JavaClass))


def _kept(holder: object, name: str, found: object, kinds: tuple[type, ...]) -> object:
    """`found` (what py4j resolved `name` to), kept on `holder` when it is one of `kinds`; a class found keeps its
    own members in turn."""
    if isinstance(found, JavaClass):
        found.__class__ = _MembersOnceClass
    if isinstance(found, kinds) and not name.startswith("__"):
        holder.__dict__[name] = found
    return found


def resolve_names_once(spark: SparkSession) -> None:
    """Make the session's py4j view of the JVM keep the classes and static methods it resolves (see the module
    docstring). The view is PySpark's one object (`SparkContext._jvm`, the session's `_jvm`), changed in place."""
    view = spark.sparkContext._jvm
    if type(view) is JVMView:
        view.__class__ = _NamesOnceView


def small_history(events: int) -> bool:
    """Whether a history of `events` events is small enough for a short session (see the module docstring)."""
    return events <= SMALL_HISTORY_EVENTS


def on_this_machine(master: str) -> bool:
    """Whether the executors of `master` run on this machine, so the driver can listen on the loopback only."""
    if master.startswith("local"):
        return True
    if master.startswith("spark://"):
        hosts = [urlparse(f"spark://{part}").hostname for part in master.removeprefix("spark://").split(",")]
        return all(host in (LOOPBACK, "localhost") for host in hosts)
    return False

"""The history commands' class archive (`hightide.history.class_archive`): made once per JDK and Spark install,
mapped by every driver JVM a session starts after it, never required, and never a JVM that cannot start.

The first test makes a real archive with a real JVM and Spark in a cache directory of its own (a minute or two);
the others check the bookkeeping around it (where an archive lives, the lock, the pruning) on stand-in installs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hightide.history import class_archive

# A command's session as `spark.session` starts it, one tiny job, then what the driver JVM mapped: a dynamic
# archive in use is a file mapping of the JVM (/proc/PID/maps), and the one line printed is all of stdout.
PROBE = """
import json
from pathlib import Path
from hightide.history import class_archive
from hightide.history.spark import session
spark = session("local[1]", "class-archive-probe", short=True)
count = spark.range(3).count()
pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
archive = class_archive.archive_path()
maps = Path(f"/proc/{pid}/maps").read_text()
print(json.dumps({"count": count, "maps_archive": archive is not None and str(archive) in maps}))
spark.stop()
"""


def _run(arguments: list[str], cache: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYSPARK_GATEWAY_")}
    environment["XDG_CACHE_HOME"] = str(cache)
    return subprocess.run(
        [sys.executable, *arguments],
        check=False,
        capture_output=True,
        text=True,
        env=environment,
        cwd=cwd,
        timeout=900,
    )


def test_an_archive_made_once_is_mapped_by_later_sessions_and_a_damaged_one_is_dropped(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    made = _run(["-m", "hightide.history.class_archive"], cache, tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    assert made.stdout.startswith("class archive: made ("), made.stdout
    left = sorted(path.name for path in (cache / "hightide").iterdir())
    assert len(left) == 1 and left[0].startswith("spark-driver-") and left[0].endswith(".jsa"), left
    archive = cache / "hightide" / left[0]

    again = _run(["-m", "hightide.history.class_archive"], cache, tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("class archive: already made"), again.stdout

    mapped = _run(["-c", PROBE], cache, tmp_path)
    assert mapped.returncode == 0, mapped.stderr[-2000:]
    assert json.loads(mapped.stdout) == {"count": 3, "maps_archive": True}  # stdout is the probe's line alone

    # A damaged archive aborts the JVM that maps it: the session drops it and starts without one.
    archive.write_bytes(archive.read_bytes()[:1_000_000])
    damaged = _run(["-c", PROBE], cache, tmp_path)
    assert damaged.returncode == 0, damaged.stderr[-2000:]
    assert json.loads(damaged.stdout.strip().splitlines()[-1]) == {"count": 3, "maps_archive": False}
    assert not archive.exists()


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in JDK and Spark install (a `java` file, two jars) and a cache directory, all under tmp_path."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    for name in ("spark-core.jar", "spark-sql.jar"):
        (jars / name).write_bytes(b"PK")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "spark"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_the_archive_is_named_for_its_jdk_and_its_jars(install: Path) -> None:
    first = class_archive.archive_path()
    assert first is not None and first.parent == install / "cache" / "hightide"
    assert class_archive.archive_path() == first
    jar = install / "spark" / "jars" / "spark-sql.jar"
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    after_jar = class_archive.archive_path()
    assert after_jar != first
    (install / "jdk" / "bin" / "java").write_text("#!/bin/sh\n# another build\n")
    assert class_archive.archive_path() not in (first, after_jar)


def test_a_session_maps_the_archive_only_when_it_is_there(install: Path) -> None:
    assert class_archive.java_options() == list(class_archive.JVM_LOGGING)
    archive = class_archive.archive_path()
    assert archive is not None
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    options = class_archive.java_options()
    assert options == [f"-XX:SharedArchiveFile={archive}", *class_archive.JVM_LOGGING]
    assert class_archive.discard(options) and not archive.exists()
    assert not class_archive.discard(list(class_archive.JVM_LOGGING))


def test_one_process_makes_the_archive_at_a_time_and_a_dead_ones_lock_is_taken_over(install: Path) -> None:
    archive = class_archive.archive_path()
    assert archive is not None
    archive.parent.mkdir(parents=True)
    lock = archive.with_name(archive.name + ".lock")
    assert class_archive._locked(lock)
    assert not class_archive._locked(lock)
    path, _, state = class_archive.make()  # the lock is held: no training run starts
    assert path is None and state.startswith("another process is making it"), state
    assert lock.exists() and not archive.exists()
    long_ago = time.time() - class_archive.STALE_LOCK_S - 60
    os.utime(lock, (long_ago, long_ago))
    assert class_archive._locked(lock)


def test_making_an_archive_prunes_what_no_session_used_for_a_week(install: Path) -> None:
    folder = install / "cache" / "hightide"
    folder.mkdir(parents=True)
    kept = folder / "spark-driver-new.jsa"
    stale = folder / "spark-driver-old.jsa"
    recent = folder / "spark-driver-other.jsa"
    dead = folder / "spark-driver-old.jsa.123.partial"
    running = folder / "spark-driver-other.jsa.456.partial"
    for path in (kept, stale, recent, dead, running):
        path.write_bytes(b"x")
    week_ago = time.time() - class_archive.KEEP_UNUSED_S - 60
    os.utime(stale, (week_ago, week_ago))
    os.utime(kept, (week_ago, week_ago))
    hour_ago = time.time() - class_archive.STALE_LOCK_S - 60
    os.utime(dead, (hour_ago, hour_ago))
    class_archive._prune(kept)
    assert sorted(path.name for path in folder.iterdir()) == sorted([kept.name, recent.name, running.name])


def test_a_cache_that_cannot_be_written_leaves_the_commands_without_an_archive(
    install: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = install / "not-a-directory"
    blocked.write_text("a file where the cache directory would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))

    path, _, state = class_archive.make()

    assert path is None and state.startswith(f"cannot write under {blocked / 'hightide'}"), state
    assert class_archive.java_options() == list(class_archive.JVM_LOGGING)

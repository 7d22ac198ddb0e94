"""The driver JVM's class archive: Spark's classes loaded once per JDK and Spark install, then mapped by every
history command (`python -m hightide.history.class_archive`).

Room: services/history. A history command's driver JVM loads and verifies about 11,000 classes before and during
its first query: Spark's core and SQL, Parquet, Hadoop's file system, Scala's collections. Java 17's class-data
sharing keeps them in a file the JVM maps at start: a dynamic archive, written at the exit of a JVM started with
`-XX:ArchiveClassesAtExit` and mapped by later JVMs with `-XX:SharedArchiveFile` (the JDK's base archive under it).
On the 1M and 10M lakes' `rebuild --at` from a snapshot (quiet machine, `local[2]`, a fresh JVM each):

| the driver JVM           | start-up (s)  | first query (s)   | first query's driver JVM CPU (s) |
| ------------------------ | ------------- | ----------------- | -------------------------------- |
| without the archive      | 7.6-8.4       | 13.9-15.2         | 18.8-20.6                        |
| with it                  | 3.2-3.8       | 8.5-10.0          | 11.9-14.3                        |

An archive holds the classes of one JDK build and one class path (the JVM checks both, and maps nothing when
either differs), so it is made here, by a training run, and kept under the user's cache directory
(`$XDG_CACHE_HOME/hightide`, else `~/.cache/hightide`) with a name derived from the `java` executable and Spark's
jars (`archive_path`). The training run (`make`): a Spark session like a command's short one, with
`-XX:ArchiveClassesAtExit`, over a small generated lake: its hourly snapshots, a rebuild from a snapshot and a
full replay. Making it takes one to two minutes and ~160 MB; `make test`, `make demo` and `make bench` make it
first (`make class-archive`); the history image makes one as its runtime user at build time, under
`XDG_CACHE_HOME=/opt/hightide/cache` (infra/Dockerfile; a read-only root at runtime maps it all the same:
tests/containers/test_history_image.py), and that build fails without one. A session finds it (`java_options`) or
runs without it: nothing is ever required of it.

Written whole or not at all: the JVM writes a temporary file, renamed over the archive's name only once that JVM
has exited cleanly (a truncated archive aborts the JVM that maps it; a file that is not an archive at all is
ignored). Should a JVM still fail to start with an archive, `hightide.history.spark.session` deletes it and starts
without one. The JVM's own log lines about the archive are off, and every other JVM warning goes to stderr: a
command's stdout is its output (JSON for `--format json`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

# Unified logging: nothing on stdout, warnings and errors on stderr, nothing about the archive (a missing or
# mismatched archive is not the user's concern: the JVM loads the classes from the jars instead).
JVM_LOGGING: Final = ("-Xlog:disable", "-Xlog:all=warning:stderr", "-Xlog:cds*=off:stderr")
PREFIX: Final = "spark-driver-"
SUFFIX: Final = ".jsa"
TRAINING_TIMEOUT_S: Final = 900.0
STALE_LOCK_S: Final = 1_800.0  # a lock older than this belongs to a training run that died
KEEP_UNUSED_S: Final = 7 * 86_400.0  # an archive no session has mapped for a week is removed when another is made
TRAINING_EVENTS: Final = 5_000  # two hours: one snapshot boundary, a rebuild from it and a full replay
TRAINING_EVENTS_PER_HOUR: Final = 3_000


def own_jvm_environment() -> dict[str, str]:
    """This process's environment for a child that must start a Spark JVM of its own: without the gateway that
    spark-submit hands down (a child would otherwise join this process's JVM)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("PYSPARK_GATEWAY_")}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hightide"


def java_executable() -> Path | None:
    """The `java` that Spark's launcher runs (`$JAVA_HOME/bin/java`, else the first on PATH), resolved."""
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if found is None or not Path(found).exists():
        return None
    return Path(found).resolve()


def spark_jars() -> Path | None:
    from pyspark.find_spark_home import _find_spark_home  # noqa: PLC0415 (pyspark's own rule for SPARK_HOME)

    jars = Path(_find_spark_home()) / "jars"  # type: ignore[no-untyped-call]
    return jars if jars.is_dir() else None


def archive_path() -> Path | None:
    """Where the archive for this JDK and these Spark jars lives (made or not); None when either is not found."""
    java, jars = java_executable(), spark_jars()
    if java is None or jars is None:
        return None
    key = hashlib.sha256()
    for path in (java, *sorted(jars.glob("*.jar"))):
        stat = path.stat()
        key.update(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return cache_dir() / f"{PREFIX}{key.hexdigest()[:20]}{SUFFIX}"


def java_options() -> list[str]:
    """The driver JVM's options for the archive: mapped when it is there, and the JVM's logging as above."""
    path = archive_path()
    if path is None or not path.is_file():
        return list(JVM_LOGGING)
    with contextlib.suppress(OSError):
        os.utime(path)  # in use: kept by `_prune`
    return [f"-XX:SharedArchiveFile={path}", *JVM_LOGGING]


def discard(options: Sequence[str]) -> bool:
    """Delete the archive named in `options` (a JVM failed to start with it); whether there was one."""
    for option in options:
        if option.startswith("-XX:SharedArchiveFile="):
            with contextlib.suppress(OSError):  # a read-only cache: the session still starts without it
                Path(option.partition("=")[2]).unlink(missing_ok=True)
            return True
    return False


def make(timeout_s: float = TRAINING_TIMEOUT_S) -> tuple[Path | None, float, str]:
    """Make this install's archive unless it is there: (its path, seconds spent, what happened)."""
    started = time.perf_counter()
    target = archive_path()
    if target is None:
        return None, 0.0, "no java or no Spark jars found: nothing to archive"
    if target.is_file():
        return target, 0.0, "already made"
    lock = target.with_name(target.name + ".lock")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if not _locked(lock):
            return None, time.perf_counter() - started, f"another process is making it ({lock})"
    except OSError as error:  # a read-only home, a full disk: the commands run without an archive
        return None, time.perf_counter() - started, f"cannot write under {target.parent}: {error.strerror}"
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hightide.history.class_archive", "--train", str(partial)],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=own_jvm_environment(),
        )
        if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return None, time.perf_counter() - started, "the training run failed: " + " | ".join(tail)
        os.replace(partial, target)
        _prune(target)
        return target, time.perf_counter() - started, "made"
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - started, f"the training run took over {timeout_s:.0f} s: stopped"
    except OSError as error:
        return None, time.perf_counter() - started, f"cannot write under {target.parent}: {error.strerror}"
    finally:
        partial.unlink(missing_ok=True)
        lock.unlink(missing_ok=True)


def _locked(lock: Path) -> bool:
    """Take `lock` (a file made exclusively); a lock left by a training run that died long ago is taken over."""
    for _ in range(2):
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
            return True
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime < STALE_LOCK_S:
                    return False
                lock.unlink()
            except FileNotFoundError:
                pass
    return False


def _prune(kept: Path) -> None:
    """Remove the archives of other installs that no session has mapped for a week, and dead runs' leftovers."""
    now = time.time()
    for path in kept.parent.glob(f"{PREFIX}*"):
        if path == kept or path.name.endswith(".lock"):
            continue
        try:
            unused = now - path.stat().st_mtime
            if (path.name.endswith(SUFFIX) and unused > KEEP_UNUSED_S) or (
                path.name.endswith(".partial") and unused > STALE_LOCK_S
            ):
                path.unlink()
        except FileNotFoundError:
            pass


def _train(partial: Path) -> None:
    """The training run (a child process of `make`): the work a command's short session does, then the JVM's
    exit, at which it writes the classes it loaded to `partial`."""
    from pyspark import SparkContext  # noqa: PLC0415

    from hightide.history.generate import generate_lake  # noqa: PLC0415
    from hightide.history.rebuild_cli import state_at  # noqa: PLC0415
    from hightide.history.snapshot import lake_files, write_snapshots  # noqa: PLC0415
    from hightide.history.spark import session  # noqa: PLC0415
    from hightide.lake.layout import HOUR_MS  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="hightide-class-archive-") as work:
        lake = Path(work) / "lake"
        generate_lake(lake, TRAINING_EVENTS, events_per_hour=TRAINING_EVENTS_PER_HOUR)
        spark = session("local[2]", "hightide-class-archive", short=True, archive_to=partial)
        write_snapshots(spark, lake)
        last_ms = (max(lake_files(lake)) + 1) * HOUR_MS - 1
        state_at(spark, lake, last_ms, None, use_snapshots=True)
        state_at(spark, lake, last_ms, None, use_snapshots=False)
        gateway = SparkContext._gateway
        spark.stop()
        jvm = gateway.proc if gateway is not None else None
        if jvm is None or jvm.stdin is None:
            raise RuntimeError("the training run's JVM was not started by this process")
        jvm.stdin.close()  # PySpark's gateway server exits at the end of its stdin, and the JVM writes the archive
        if jvm.wait(timeout=TRAINING_TIMEOUT_S) != 0:
            raise RuntimeError(f"the training run's JVM exited with {jvm.returncode}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hightide.history.class_archive",
        description="Make the history commands' driver JVM class archive for this JDK and Spark install.",
    )
    parser.add_argument("--train", type=Path, help=argparse.SUPPRESS)  # `make`'s child process
    args = parser.parse_args(argv)
    if args.train is not None:
        _train(args.train)
        return 0
    path, seconds, what = make()
    print(f"class archive: {what}" + (f" ({path}, {seconds:.1f} s)" if path is not None else f" ({seconds:.1f} s)"))
    return 0 if path is not None else 1  # made or already there; the Makefile goes on without one, an image does not


if __name__ == "__main__":
    sys.exit(main())

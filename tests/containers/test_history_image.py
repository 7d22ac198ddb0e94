"""The history image brings its driver JVM's class archive (room: infra; `hightide.history.class_archive`).

Method: `make images` built `hightide-history` with a training run as the runtime user; a container of it, with a
read-only root as a locked-down pod runs it, starts a Spark session and reads its driver JVM's memory map: the
archive the image made must be mapped there. Runs only in container mode (`make test-containers`).
"""

from __future__ import annotations

import subprocess

import pytest

from support.containers import IMAGE_TAG, containers_enabled

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not containers_enabled(), reason="container mode only (make test-containers)"),
]

IMAGE = f"hightide-history:{IMAGE_TAG}"
PROBE = """
from hightide.history import class_archive, spark
session = spark.session("local[1]")
pid = session._jvm.java.lang.ProcessHandle.current().pid()
archive = class_archive.archive_path()
with open(f"/proc/{pid}/maps") as maps:
    mapped = archive is not None and str(archive) in maps.read()
print(f"archive {archive} mapped={mapped}")
"""


def test_the_history_images_driver_jvm_maps_the_class_archive_it_was_built_with() -> None:
    ran = subprocess.run(
        [
            *("docker", "run", "--rm", "--read-only", "--tmpfs", "/tmp", "--label", "hightide.test=history-image"),
            *("--entrypoint", "python", IMAGE, "-c", PROBE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stdout.strip().splitlines()  # the probe's line alone: the JVM writes nothing to stdout
    assert len(lines) == 1, ran.stdout
    assert lines[0].startswith("archive /opt/hightide/cache/hightide/spark-driver-"), lines[0]
    assert lines[0].endswith(".jsa mapped=True"), lines[0]

"""How a background service steps behind the data path for the CPU: its niceness, and on Linux its autogroup's.

Room: libs/runtime. The archiver runs behind the brokers by design: it may lag, the EVENTS stream keeps what it has
not archived yet, and its Parquet writes (about 0.1 s of CPU once a second in the Kafka benchmark's latency run)
must not hold a core that an acks=all round trip waits for. `os.nice` alone does not do that on most Linux
machines. With the scheduler's autogroups (`kernel.sched_autogroup_enabled`, on by default where the kernel has
CONFIG_SCHED_AUTOGROUP), every session gets a task group of its own, the CPU is shared between the groups by the
groups' niceness, and a process's own niceness only orders it among the processes of its session. `hightide cluster
up` starts every service in a session of its own (so a terminal's signals do not reach them), so a niced archiver
still had a broker's full share: measured on 2 cores in the Kafka benchmark's 10,000 records/s latency run, the
brokers' time waiting for a core doubled to tripled during each of the archiver's writes (issue 15), and its
`SCHED_IDLE` changed nothing for the same reason.

`lower_cpu_priority` raises the niceness, and, when the process leads its session (so the autogroup holds it and
only what it starts), the autogroup's too, through `/proc/self/autogroup`. A process that does not lead its session
shares its autogroup with the rest of that session (a user's shell and whatever else it started), so that group is
left alone. Raising either niceness needs no privilege. Where autogroups do not apply (no such file; a process in a
cgroup of its own, as in a container, where the cgroup's CPU weight decides) writing it changes nothing.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

AUTOGROUP: Final = Path("/proc/self/autogroup")
RATE_LIMIT_S: Final = 0.1  # the kernel takes one autogroup niceness a tenth of a second from unprivileged writers
RATE_LIMIT_DEADLINE_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class Priority:
    """What `lower_cpu_priority` left: the process's niceness, and its autogroup's line (`/autogroup-N nice M`), or
    why that was not changed."""

    niceness: int
    autogroup: str


def lower_cpu_priority(increment: int) -> Priority:
    """Add `increment` (> 0) to this process's niceness and, if it leads its session, set its autogroup's niceness
    to the process's new one."""
    if increment <= 0:
        raise ValueError(f"a niceness increment must be positive, not {increment}")
    niceness = os.nice(increment)
    if os.getsid(0) != os.getpid():
        return Priority(niceness, "left as it is: the process does not lead its session")
    deadline = time.monotonic() + RATE_LIMIT_DEADLINE_S
    while True:
        try:
            AUTOGROUP.write_text(f"{niceness}\n")
            return Priority(niceness, AUTOGROUP.read_text().strip())
        except OSError as error:
            # EAGAIN: another process set an autogroup's niceness in the last tenth of a second (one limit for all)
            if error.errno != errno.EAGAIN or time.monotonic() >= deadline:
                return Priority(niceness, f"left as it is: {error.strerror or error}")  # e.g. no autogroups here
        time.sleep(RATE_LIMIT_S)  # the kernel's rate limit: a retry after it, bounded by the deadline

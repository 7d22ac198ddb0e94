"""lower_cpu_priority: a process that leads its session steps behind the others with its whole autogroup, one that
does not leaves its session's group alone (issue 15: a niced archiver in a session of its own still had a broker's
share of the CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hightide.runtime.priority import AUTOGROUP, lower_cpu_priority

# Lowers its priority by 7, then prints its niceness, what the call reported, and the autogroup line /proc shows.
_LOWER = """
import json, os
from pathlib import Path
from hightide.runtime.priority import lower_cpu_priority
done = lower_cpu_priority(7)
own = Path("/proc/self/autogroup")
shown = own.read_text().strip() if own.exists() else None
print(json.dumps([os.getpriority(os.PRIO_PROCESS, 0), done.niceness, done.autogroup, shown]))
"""


def _lower(*, own_session: bool) -> tuple[int, int, str, str | None]:
    done = subprocess.run(
        [sys.executable, "-c", _LOWER],
        capture_output=True,
        text=True,
        check=True,
        start_new_session=own_session,
    )
    niceness, reported, autogroup, shown = json.loads(done.stdout)
    return niceness, reported, autogroup, shown


def _autogroup_nice(line: str) -> int:
    return int(line.rsplit("nice", 1)[1])


def test_a_session_leader_lowers_its_autogroup_with_itself() -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)
    niceness, reported, autogroup, shown = _lower(own_session=True)
    assert niceness == reported == min(base + 7, 19)
    if not AUTOGROUP.exists():  # no autogroups in this kernel: the niceness is all there is, and the call says so
        assert shown is None
        assert autogroup.startswith("left as it is")
        return
    assert shown is not None
    assert autogroup == shown
    assert _autogroup_nice(shown) == niceness


def test_a_process_in_a_shared_session_leaves_the_group_alone() -> None:
    before = AUTOGROUP.read_text().strip() if AUTOGROUP.exists() else None
    niceness, _, autogroup, shown = _lower(own_session=False)
    assert niceness == min(os.getpriority(os.PRIO_PROCESS, 0) + 7, 19)
    assert autogroup == "left as it is: the process does not lead its session"
    assert shown == before  # the child shares this session's group, and its niceness is what it was
    if before is not None:
        assert Path("/proc/self/autogroup").read_text().strip() == before


@pytest.mark.parametrize("increment", [0, -1])
def test_only_a_positive_increment_is_taken(increment: int) -> None:
    before = os.getpriority(os.PRIO_PROCESS, 0)
    with pytest.raises(ValueError, match="must be positive"):
        lower_cpu_priority(increment)
    assert os.getpriority(os.PRIO_PROCESS, 0) == before

"""Two clocks, two types: wall-clock and monotonic milliseconds, which mypy tells apart.

Room: libs/core (vocabulary of time; no clock is read here). The shells read the clocks and pass the time in.

- `WallMs`: milliseconds since the Unix epoch, from the wall clock. Record timestamps are wall-clock time, so
  everything compared with them is too: retention (`retention.ms`), rolling (`segment.ms`), the time index.
  The wall clock may be skewed between brokers and may jump.
- `MonoMs`: a monotonic clock's milliseconds, meaningful only as differences on one process: timeouts, lag
  (`replica.lag.time.max.ms`), sessions, backoffs, purgatory deadlines.

A monotonic `now` where retention compares record timestamps is the bug that made time-based retention never
fire in a running broker; with two NewTypes the type checker refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

WallMs = NewType("WallMs", int)
MonoMs = NewType("MonoMs", int)


@dataclass(frozen=True, slots=True)
class Now:
    """Both clocks read at one instant: what a shell passes into the core with each input."""

    mono_ms: MonoMs
    wall_ms: WallMs


__all__ = ["MonoMs", "Now", "WallMs"]

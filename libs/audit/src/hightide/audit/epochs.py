"""A leader epoch cache as a value: Kafka's LeaderEpochFileCache mutators over a tuple of (epoch, start offset).

Room: libs/audit (the history's rules, pure). The audit may not import libs/core, so this is written again from
Kafka's LeaderEpochFileCache (storage/.../epoch/LeaderEpochFileCache.java), not shared with the broker's cache:
two independent readings of the same rules, which a property test holds equal. Every function returns a new
tuple; entries are oldest first, epochs and start offsets strictly increasing.

| function                        | Kafka             | result                                                 |
| ------------------------------- | ----------------- | ------------------------------------------------------ |
| assign(entries, e, s)           | assign            | unchanged if e is the latest epoch and s >= its start; |
|                                 |                   | else drop entries from the end while epoch >= e or     |
|                                 |                   | start >= s, then append (e, s)                         |
| truncate_from_end(entries, o)   | truncateFromEnd   | drop every entry with start >= o; o < 0: unchanged     |
| truncate_from_start(entries, o) | truncateFromStart | drop every entry with start <= o and put the last of   |
|                                 |                   | them back starting at o; o < 0, or no entry at or      |
|                                 |                   | below o: unchanged                                     |
"""

from __future__ import annotations

from itertools import pairwise
from typing import Final

EpochEntries = tuple[tuple[int, int], ...]
NO_ENTRIES: Final[EpochEntries] = ()


class InvalidEpochEntry(ValueError):
    """A negative epoch or start offset: Kafka's assign throws IllegalArgumentException for these."""


def assign(entries: EpochEntries, epoch: int, start_offset: int) -> EpochEntries:
    """`epoch` starts at `start_offset` (a batch of a new epoch was appended, or a leader started its epoch)."""
    if epoch < 0 or start_offset < 0:
        raise InvalidEpochEntry(f"leader epoch entry ({epoch}, {start_offset}) is negative")
    if entries and entries[-1][0] == epoch and start_offset >= entries[-1][1]:
        return entries  # an epoch is assigned once: a later batch of the latest epoch changes nothing
    kept = len(entries)
    # Kafka's maybeTruncateNonMonotonicEntries: whatever would break the order goes, from the end.
    while kept > 0 and (entries[kept - 1][0] >= epoch or entries[kept - 1][1] >= start_offset):
        kept -= 1
    return (*entries[:kept], (epoch, start_offset))


def truncate_from_end(entries: EpochEntries, end_offset: int) -> EpochEntries:
    """The log was cut at `end_offset`: epochs that started there or later never happened here."""
    if end_offset < 0:
        return entries
    return tuple(entry for entry in entries if entry[1] < end_offset)


def truncate_from_start(entries: EpochEntries, start_offset: int) -> EpochEntries:
    """The log now starts at `start_offset`: the epoch it falls in starts there, older epochs are gone."""
    if start_offset < 0:
        return entries
    removed = [entry for entry in entries if entry[1] <= start_offset]
    if not removed:
        return entries
    kept = tuple(entry for entry in entries if entry[1] > start_offset)
    return ((removed[-1][0], start_offset), *kept)


def is_well_formed(entries: EpochEntries) -> bool:
    """Epochs and start offsets non-negative and strictly increasing (what every mutator keeps)."""
    return all(epoch >= 0 and start >= 0 for epoch, start in entries) and all(
        a[0] < b[0] and a[1] < b[1] for a, b in pairwise(entries)
    )

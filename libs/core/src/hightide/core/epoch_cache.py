"""The leader epoch cache: Kafka's `LeaderEpochFileCache`, in memory.

Room: libs/core (rules as pure objects). Owns one replica's `[leader epoch -> start offset]` vector (KIP-101) and
the answers it gives: where an epoch ends (OffsetsForLeaderEpoch, and the Fetch v12 divergence check), and how the
vector changes when the log is appended to, truncated at its end or has its start moved. It never touches the
`leader-epoch-checkpoint` file: every mutator returns whether the entries changed, and the caller (libs/storage)
writes the checkpoint when they did, as Kafka's cache does after each change.

Entries are kept in two parallel lists (epochs and start offsets), both strictly increasing, and searched with
`bisect`; a cache holds one entry per leader election, so it stays small.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Final, NamedTuple

# Kafka's OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET.
UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1


class EpochEntry(NamedTuple):
    """One leader epoch and the first offset written in it (field names as `hightide.storage.checkpoint`'s)."""

    epoch: int
    start_offset: int


class EpochEndOffset(NamedTuple):
    """An epoch and the offset where it ends (exclusive); `(-1, -1)` means undefined."""

    epoch: int
    end_offset: int


UNDEFINED_EPOCH_END_OFFSET: Final = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@dataclass(slots=True)
class _EpochVector:
    """The entries as parallel lists, index i being one entry; both lists strictly increasing."""

    epochs: list[int] = field(default_factory=list)
    start_offsets: list[int] = field(default_factory=list)

    def check_invariants(self) -> None:
        assert len(self.epochs) == len(self.start_offsets)
        assert all(a < b for a, b in pairwise(self.epochs)), self.epochs
        assert all(a < b for a, b in pairwise(self.start_offsets)), self.start_offsets
        assert not self.epochs or (self.epochs[0] >= 0 and self.start_offsets[0] >= 0)


class LeaderEpochCache:
    """Kafka's `LeaderEpochFileCache` without the file.

    `end_offset_for(requested_epoch, log_end_offset)`:

    | case                                              | returns (epoch, end_offset)                          |
    | ------------------------------------------------- | ---------------------------------------------------- |
    | requested == -1                                   | (-1, -1)                                             |
    | requested == the latest epoch                     | (requested, log_end_offset)                          |
    | no epoch above requested (empty, or > the latest) | (-1, -1)                                             |
    | requested below every cached epoch                | (requested, start of the first entry)                |
    | otherwise                                         | (largest epoch <= requested, start of the next entry) |

    Mutators (each returns True when the entries changed, so the caller knows to write the checkpoint):

    | call                     | effect                                                                          |
    | ------------------------ | ------------------------------------------------------------------------------- |
    | `assign(e, s)`           | nothing if e is the latest epoch and s >= its start; otherwise drop entries     |
    |                          | from the end while epoch >= e or start >= s, then append (e, s)                 |
    | `truncate_from_end(o)`   | drop every entry with start >= o; o < 0 (-1) does nothing                       |
    | `truncate_from_start(o)` | drop every entry with start <= o and put the last one back with start o;        |
    |                          | o < 0 (-1) does nothing                                                         |
    | `clear()`                | drop everything                                                                 |

    Because `assign` drops any entry whose start is not below the new one, start offsets are strictly increasing
    (two epochs with no record between them keep only the later), and so are epochs.
    """

    __slots__ = ("_vector",)

    def __init__(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        """Load `(epoch, start_offset)` entries read from a checkpoint (any such NamedTuple, or plain pairs).

        Raises ValueError unless epochs strictly increase and start offsets never decrease, both non-negative.
        Like Kafka's constructor, which assigns each checkpointed entry in turn, entries sharing a start offset
        (older Kafka versions wrote such pairs for an election with no record in between) keep only the later epoch.
        """
        given = [EpochEntry(*entry) for entry in entries]
        for entry in given:
            if entry.epoch < 0 or entry.start_offset < 0:
                raise ValueError(f"invalid leader epoch entry {entry}: epoch and start offset must be >= 0")
        for before, after in pairwise(given):
            if after.epoch <= before.epoch or after.start_offset < before.start_offset:
                raise ValueError(f"leader epoch entries out of order: {before} then {after}")
        self._vector = _EpochVector()
        for entry in given:
            self.assign(entry.epoch, entry.start_offset)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({list(self.entries)!r})"

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        """Every entry, oldest first: what the checkpoint file should hold."""
        v = self._vector
        return tuple(EpochEntry(e, s) for e, s in zip(v.epochs, v.start_offsets, strict=True))

    @property
    def latest_entry(self) -> EpochEntry | None:
        v = self._vector
        return EpochEntry(v.epochs[-1], v.start_offsets[-1]) if v.epochs else None

    @property
    def latest_epoch(self) -> int | None:
        """The epoch still being written to (on a leader, its current leader epoch), or None if empty."""
        return self._vector.epochs[-1] if self._vector.epochs else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        v = self._vector
        return EpochEntry(v.epochs[0], v.start_offsets[0]) if v.epochs else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        """The entry of exactly this epoch, if cached (Kafka's `epochEntry`)."""
        v = self._vector
        i = bisect_left(v.epochs, epoch)
        return EpochEntry(epoch, v.start_offsets[i]) if i < len(v.epochs) and v.epochs[i] == epoch else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at `offset` was written in, or None before the first entry (`epochForOffset`)."""
        v = self._vector
        i = bisect_right(v.start_offsets, offset)
        return v.epochs[i - 1] if i > 0 else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True if the entries changed.

        Called for every appended batch with its partition leader epoch and base offset, and by a new leader
        with its new epoch at its log end offset. An epoch is assigned once: a later, larger start for the
        latest epoch changes nothing. Anything that would break monotonicity (a smaller start for the latest
        epoch, or an epoch from the past) drops the conflicting entries from the end first, as Kafka's
        `maybeTruncateNonMonotonicEntries` does, so that searches can assume sorted entries.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {EpochEntry(epoch, start_offset)}")
        v = self._vector
        if v.epochs and epoch == v.epochs[-1] and start_offset >= v.start_offsets[-1]:
            return False
        while v.epochs and (v.epochs[-1] >= epoch or v.start_offsets[-1] >= start_offset):
            v.epochs.pop()
            v.start_offsets.pop()
        v.epochs.append(epoch)
        v.start_offsets.append(start_offset)
        v.check_invariants()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's `endOffsetFor`: the largest epoch <= requested and the offset where it ends (see the table)."""
        assert log_end_offset >= 0, log_end_offset
        v = self._vector
        if requested_epoch == UNDEFINED_EPOCH:
            # A bootstrapping follower, or one on a message format without epochs.
            return UNDEFINED_EPOCH_END_OFFSET
        if v.epochs and requested_epoch == v.epochs[-1]:
            # The latest epoch is the one still being written to: it ends at the log end offset.
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = bisect_right(v.epochs, requested_epoch)
        if higher == len(v.epochs):
            return UNDEFINED_EPOCH_END_OFFSET
        if higher == 0:
            # Older than every cached epoch: its data is gone from this log (or was never here), so the
            # answer is where the log's known history begins, under the epoch that was asked for.
            return EpochEndOffset(requested_epoch, v.start_offsets[0])
        return EpochEndOffset(v.epochs[higher - 1], v.start_offsets[higher])

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop every entry starting at or after `end_offset` (the log was truncated to it); True if any went.

        A negative offset (UNDEFINED_EPOCH_OFFSET) does nothing, as in Kafka.
        """
        if end_offset < 0:
            return False
        v = self._vector
        first_removed = bisect_left(v.start_offsets, end_offset)
        if first_removed == len(v.start_offsets):
            return False
        del v.epochs[first_removed:]
        del v.start_offsets[first_removed:]
        v.check_invariants()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start moved to `start_offset`: the epoch it falls in now starts there; True if that changed.

        Every entry starting at or before `start_offset` is dropped, and the last of them comes back starting at
        `start_offset` (so truncate_from_start(6) keeps an entry at 6). A negative offset matches nothing.
        """
        v = self._vector
        removed = bisect_right(v.start_offsets, start_offset)
        if removed == 0 or (removed == 1 and v.start_offsets[0] == start_offset):
            return False
        del v.epochs[: removed - 1]
        del v.start_offsets[: removed - 1]
        v.start_offsets[0] = start_offset
        v.check_invariants()
        return True

    def clear(self) -> None:
        """Drop every entry (Kafka's `clearAndFlush` without the flush: the caller writes the empty checkpoint)."""
        self._vector.epochs.clear()
        self._vector.start_offsets.clear()

"""The canary's rules: what its records carry, and what reading them back says about the cluster.

Room: libs/core (pure). The canary client service (services/client `canary.py`, like LinkedIn's Xinfra Monitor)
sends, to every partition of its monitor topic in turn, records whose value names the canary's incarnation, the
partition, a per-partition sequence number (0, 1, 2, ... for each partition, one per send) and the send time; it
reads every partition back. This module owns the value's format, the per-partition bookkeeping that classifies each
record read, and the bounded windows behind the availability and latency figures. It must never read a clock or
draw a random number: `now_ms` and the incarnation are passed in.

A `PartitionTracker` hears three things about its partition's sequences: the producer acknowledged one (acks=all:
it is committed), the producer failed it (definitely or not: it was never acknowledged), and the consumer read one.
The consumer's reads are classified against the next sequence it expects (`next_sequence`):

| read sequence s                         | verdict     | effect                                                    |
| --------------------------------------- | ----------- | --------------------------------------------------------- |
| another incarnation's, or partition's   | `foreign`   | none (an earlier canary's records, or a misrouted one)    |
| s == next                               | `in_order`  | next = s + 1                                              |
| s > next                                | `ahead`     | next..s-1 are passed over (below); next = s + 1           |
| s < next, s was passed over             | `late`      | counted reordered (an idempotent producer never reorders) |
| s < next, otherwise                     | `duplicate` | counted duplicated                                        |

A sequence passed over is *lost* when the producer acknowledged it, whether the acknowledgement came before the
read that passed it or after: an acknowledged acks=all record the consumer never gets is Kafka's broken promise.
One the producer failed is not lost (it was never promised); one without an outcome yet waits for it. And an
acknowledged record is lost when another record turns up at its offset (the acknowledgement names the offset):
read there by the consumer, or acknowledged there by the producer. After an unclean election the new leader's log
may lack records the canary had acknowledged (and read); later records take their offsets. (Xinfra's
ConsumeService counts every gap as lost and every lower index as duplicated; the canary knows its sends' outcomes,
so it tells a broken promise from a send that failed in plain sight, and a late record from a duplicate.)

Every set is bounded (`tracked_sequences_max`): a consumer that falls that far behind its producer forgets the
oldest sequences it was holding, and counts them in `forgotten`, rather than growing without bound; and a read
past a gap wider than that holds only the gap's last `tracked_sequences_max` sequences as passed over.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from hightide.core.clock import MonoMs, WallMs

VALUE_SEPARATOR: Final = ":"
TRACKED_SEQUENCES_MAX: Final = 100_000
TRACKED_OFFSETS_MAX: Final = 10_000  # the latest acknowledged offsets kept to compare reads against
INCARNATION_CHARACTERS_MAX: Final = 32


class InvalidCanaryValue(ValueError):
    """A record value that is not a canary record's."""


@dataclass(frozen=True, slots=True)
class CanaryValue:
    """What one canary record carries: `incarnation:partition:sequence:send_ms`, short enough that the client
    events name it whole (they keep a value's last 64 characters)."""

    incarnation: str
    partition: int
    sequence: int
    send_ms: int

    def __post_init__(self) -> None:
        if not 0 < len(self.incarnation) <= INCARNATION_CHARACTERS_MAX or not self.incarnation.isalnum():
            raise InvalidCanaryValue(f"incarnation must be 1..{INCARNATION_CHARACTERS_MAX} letters or digits")
        if self.partition < 0 or self.sequence < 0 or self.send_ms < 0:
            raise InvalidCanaryValue("partition, sequence and send time are never negative")

    def encode(self) -> str:
        return VALUE_SEPARATOR.join((self.incarnation, str(self.partition), str(self.sequence), str(self.send_ms)))

    @classmethod
    def decode(cls, text: str) -> CanaryValue:
        parts = text.split(VALUE_SEPARATOR)
        if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
            raise InvalidCanaryValue(f"not a canary value: {text[:80]!r}")
        return cls(parts[0], int(parts[1]), int(parts[2]), int(parts[3]))


class Verdict(Enum):
    IN_ORDER = "in_order"
    AHEAD = "ahead"
    LATE = "late"
    DUPLICATE = "duplicate"
    FOREIGN = "foreign"


@dataclass(frozen=True, slots=True)
class Reading:
    """What one read record says: its verdict, how many acknowledged records it showed lost (passed over, or
    replaced at their offset), and its end-to-end delay (read time minus send time; -1 for a foreign record)."""

    verdict: Verdict
    lost: int
    delay_ms: int


class _Bounded:
    """An insertion-ordered set of sequences holding at most `limit`; adding past it forgets the oldest."""

    __slots__ = ("_items", "forgotten", "limit")

    def __init__(self, limit: int) -> None:
        assert limit > 0, limit
        self._items: dict[int, None] = {}
        self.limit = limit
        self.forgotten = 0

    def add(self, sequence: int) -> None:
        self._items[sequence] = None
        while len(self._items) > self.limit:
            del self._items[next(iter(self._items))]
            self.forgotten += 1

    def discard(self, sequence: int) -> bool:
        """Remove `sequence`; whether it was there."""
        return self._items.pop(sequence, 0) is None

    def items(self) -> list[int]:
        return list(self._items)

    def __contains__(self, sequence: object) -> bool:
        return sequence in self._items

    def __len__(self) -> int:
        return len(self._items)


class _BoundedOffsets:
    """Acknowledged offset -> sequence, holding at most `limit`; adding past it forgets the oldest."""

    __slots__ = ("_items", "limit")

    def __init__(self, limit: int) -> None:
        assert limit > 0, limit
        self._items: dict[int, int] = {}
        self.limit = limit

    def put(self, offset: int, sequence: int) -> int | None:
        """Hold `offset` as acknowledged for `sequence`; the other sequence acknowledged there before, if any."""
        before = self._items.pop(offset, None)
        self._items[offset] = sequence
        while len(self._items) > self.limit:
            del self._items[next(iter(self._items))]
        return before if before != sequence else None

    def replaced(self, offset: int, sequence: int | None) -> int | None:
        """The sequence acknowledged at `offset` if it is not `sequence` (None: not a record of ours), else None;
        a replaced offset is forgotten, so each replacement counts once."""
        acknowledged = self._items.get(offset)
        if acknowledged is None or acknowledged == sequence:
            return None
        del self._items[offset]
        return acknowledged


@dataclass(slots=True)
class PartitionTracker:
    """One partition's sequences of one canary incarnation (see the module docstring's table)."""

    incarnation: str
    partition: int
    tracked_sequences_max: int = TRACKED_SEQUENCES_MAX
    next_sequence: int = 0
    consumed: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    _acknowledged: _Bounded = field(init=False)  # acknowledged, not yet read nor passed over
    _failed: _Bounded = field(init=False)  # failed, not yet read nor passed over
    _passed: _Bounded = field(init=False)  # passed over, no outcome yet
    _lost: _Bounded = field(init=False)  # passed over and acknowledged: lost (unless they turn up late)
    _offsets: _BoundedOffsets = field(init=False)  # acknowledged offset -> its sequence

    def __post_init__(self) -> None:
        self._offsets = _BoundedOffsets(TRACKED_OFFSETS_MAX)
        self._acknowledged = _Bounded(self.tracked_sequences_max)
        self._failed = _Bounded(self.tracked_sequences_max)
        self._passed = _Bounded(self.tracked_sequences_max)
        self._lost = _Bounded(self.tracked_sequences_max)

    @property
    def forgotten(self) -> int:
        return sum(s.forgotten for s in (self._acknowledged, self._failed, self._passed, self._lost))

    @property
    def awaiting_outcome(self) -> int:
        """Sequences the consumer passed over whose send outcome is not known yet."""
        return len(self._passed)

    def acknowledged(self, sequence: int, offset: int = -1) -> int:
        """The producer acknowledged `sequence` (at `offset`, -1 if unknown): how many records this shows lost: the
        one acknowledged before at the same offset (the log was rewound under it), and this one if the consumer
        passed it over."""
        assert sequence >= 0, sequence
        replaced = self._offsets.put(offset, sequence) if offset >= 0 else None
        lost = 0 if replaced is None else self._lose(replaced)
        if self._passed.discard(sequence):
            self._lost.add(sequence)
            lost += 1
        elif sequence >= self.next_sequence:
            self._acknowledged.add(sequence)
        self.lost += lost
        return lost

    def _lose(self, sequence: int) -> int:
        """`sequence`, acknowledged, is known lost (another record holds its offset): 1, unless it was already."""
        if sequence in self._lost:
            return 0
        self._acknowledged.discard(sequence)
        self._passed.discard(sequence)
        self._lost.add(sequence)
        return 1

    def failed(self, sequence: int) -> None:
        """The producer failed `sequence` (never acknowledged): a gap there is explained."""
        assert sequence >= 0, sequence
        if not self._passed.discard(sequence) and sequence >= self.next_sequence:
            self._failed.add(sequence)

    def read(self, value: CanaryValue | None, now_ms: WallMs, offset: int = -1) -> Reading:
        """The consumer read `value` (None: a record that is no canary's) at `offset` and `now_ms`: the wall
        clock, as `value.send_ms` (the sender may be another process; a skewed or stepped clock skews the delay,
        never the verdict)."""
        ours = value is not None and value.incarnation == self.incarnation and value.partition == self.partition
        gone = self._offsets.replaced(offset, value.sequence if value is not None and ours else None)
        replaced = 0 if gone is None else self._lose(gone)
        self.lost += replaced
        if value is None or not ours:
            return Reading(Verdict.FOREIGN, replaced, -1)
        delay_ms = max(now_ms - value.send_ms, 0)
        sequence = value.sequence
        self.consumed += 1
        if sequence < self.next_sequence:
            if self._passed.discard(sequence) or self._lost.discard(sequence):
                self.reordered += 1
                return Reading(Verdict.LATE, replaced, delay_ms)
            self.duplicated += 1
            return Reading(Verdict.DUPLICATE, replaced, delay_ms)
        # A gap wider than the tracked sequences is looked at only in its last tracked_sequences_max sequences.
        first = max(self.next_sequence, sequence - self.tracked_sequences_max)
        lost = self._pass_over_untracked(first) if first > self.next_sequence else 0
        lost += sum(self._pass_over(s) for s in range(first, sequence))
        self._acknowledged.discard(sequence)
        self._failed.discard(sequence)
        verdict = Verdict.IN_ORDER if sequence == self.next_sequence else Verdict.AHEAD
        self.next_sequence = sequence + 1
        return Reading(verdict, lost + replaced, delay_ms)

    def _pass_over_untracked(self, first: int) -> int:
        """Pass over next_sequence..first-1 by what is held of them (at most tracked_sequences_max each): the
        acknowledged are lost, the failed explained. The others are not held: their outcome, if one comes, is not
        judged (the tracker's memory stays bounded; such a gap is wider than the sequences it keeps)."""
        held_acknowledged = [s for s in self._acknowledged.items() if s < first]
        held_failed = [s for s in self._failed.items() if s < first]
        for sequence in held_acknowledged:
            self._pass_over(sequence)
        for sequence in held_failed:
            self._failed.discard(sequence)
        return len(held_acknowledged)

    def _pass_over(self, sequence: int) -> int:
        if self._acknowledged.discard(sequence):
            self._lost.add(sequence)
            self.lost += 1
            return 1
        if not self._failed.discard(sequence):
            self._passed.add(sequence)
        return 0


class AvailabilityWindow:
    """Outcomes (success or not) of the last `window_ms` (at most `samples_max` of them): the fraction that
    succeeded, Xinfra's `produce-availability-avg` / `consume-availability-avg` over a sliding window, on the
    monotonic clock (a window is a duration on one process). An empty window is 1.0: nothing was asked of it."""

    def __init__(self, window_ms: int, samples_max: int = 100_000) -> None:
        assert window_ms > 0 and samples_max > 0, (window_ms, samples_max)
        self.window_ms = window_ms
        self._samples: deque[tuple[int, bool]] = deque(maxlen=samples_max)

    def record(self, now_ms: MonoMs, ok: bool) -> None:
        self._samples.append((now_ms, ok))

    def ratio(self, now_ms: MonoMs) -> float:
        while self._samples and self._samples[0][0] <= now_ms - self.window_ms:
            self._samples.popleft()
        if not self._samples:
            return 1.0
        return sum(1 for _, ok in self._samples if ok) / len(self._samples)


class DelayWindow:
    """The last `samples_max` end-to-end delays, for percentiles (Xinfra's `records-delay-ms-99th`)."""

    def __init__(self, samples_max: int = 10_000) -> None:
        assert samples_max > 0, samples_max
        self._samples: deque[int] = deque(maxlen=samples_max)

    def record(self, delay_ms: int) -> None:
        assert delay_ms >= 0, delay_ms
        self._samples.append(delay_ms)

    def percentile(self, fraction: float) -> int:
        """The nearest-rank percentile (0 < fraction <= 1) of the window; -1 when it is empty."""
        assert 0 < fraction <= 1, fraction
        if not self._samples:
            return -1
        ordered = sorted(self._samples)
        rank = max(math.ceil(fraction * len(ordered)), 1)
        return ordered[rank - 1]


def preferred_leader_gaps(live_brokers: list[int], preferred_leaders: list[int]) -> list[int]:
    """The live brokers that are no partition's preferred leader (first replica), in id order: each needs a new
    partition, as Xinfra's topic-management keeps a partition led by every broker."""
    have = set(preferred_leaders)
    return [b for b in sorted(live_brokers) if b not in have]


def replicas_led_by(leader: int, live_brokers: list[int], replication_factor: int) -> tuple[int, ...]:
    """A replica list whose preferred leader is `leader`, the rest the next live brokers after it in id order."""
    ordered = sorted(live_brokers)
    assert leader in ordered and 0 < replication_factor <= len(ordered), (leader, ordered, replication_factor)
    start = bisect.bisect_left(ordered, leader)
    return tuple(ordered[(start + i) % len(ordered)] for i in range(replication_factor))


def monitor_topic_shape(live_brokers: int) -> tuple[int, int, int]:
    """(partitions, replication factor, min.insync.replicas) of a new monitor topic: a partition per live broker,
    RF min(3, brokers) and min ISR 2 (Kafka's recommended acks=all setup), or 1 when there is one broker."""
    assert live_brokers > 0, live_brokers
    replication_factor = min(3, live_brokers)
    return live_brokers, replication_factor, min(2, replication_factor)

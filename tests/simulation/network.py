"""The simulated network: messages between nodes with seeded delay, loss, duplication, reordering and cuts.

Every message is delivered at `now + delay`, delays drawn per message. Messages from one node to another keep their
order, as NATS delivers one connection's messages to a subscriber (a delay is never shorter than the one before it
on that link); messages on different links race freely, so a broker may learn a commit from the metadata log before
the controller's answer to its AlterPartition, or the reverse. A duplicate arrives right after the original (a
retry that crossed its answer). A cut between two nodes drops everything between them until healed.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NetworkFaults:
    delay_ms_max: int = 5
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0


@dataclass(order=True)
class _InFlight:
    deliver_at_ms: int
    sequence: int
    source: int = field(compare=False)
    destination: int = field(compare=False)
    message: object = field(compare=False)


class Network:
    def __init__(self, rng: random.Random, faults: NetworkFaults) -> None:
        self._rng = rng
        self.faults = faults
        self._queue: list[_InFlight] = []
        self._sequence = 0
        self._cut: set[frozenset[int]] = set()
        self._last_delivery: dict[tuple[int, int], int] = {}  # per link: the latest delivery time given
        self.sent = self.dropped = 0

    def send(self, now_ms: int, source: int, destination: int, message: object) -> None:
        self.sent += 1
        if frozenset((source, destination)) in self._cut or self._rng.random() < self.faults.drop_probability:
            self.dropped += 1
            return
        copies = 2 if self._rng.random() < self.faults.duplicate_probability else 1
        delay = self._rng.randint(1, max(self.faults.delay_ms_max, 1))
        at_ms = max(now_ms + delay, self._last_delivery.get((source, destination), 0))
        self._last_delivery[(source, destination)] = at_ms
        for _ in range(copies):
            self._sequence += 1  # same time: the queue's sequence keeps the link's order
            heapq.heappush(self._queue, _InFlight(at_ms, self._sequence, source, destination, message))

    def next_delivery_ms(self) -> int | None:
        return self._queue[0].deliver_at_ms if self._queue else None

    def pop_due(self, now_ms: int) -> tuple[int, int, object] | None:
        """The next message due by `now_ms` (dropped instead if a cut now separates its ends)."""
        while self._queue and self._queue[0].deliver_at_ms <= now_ms:
            item = heapq.heappop(self._queue)
            if frozenset((item.source, item.destination)) in self._cut:
                self.dropped += 1
                continue
            return item.source, item.destination, item.message
        return None

    def cut(self, a: int, b: int) -> None:
        self._cut.add(frozenset((a, b)))

    def isolate(self, node: int, others: list[int]) -> None:
        for other in others:
            if other != node:
                self.cut(node, other)

    def blocked(self, a: int, b: int) -> bool:
        return frozenset((a, b)) in self._cut

    def heal(self) -> None:
        self._cut.clear()

    @property
    def is_cut(self) -> bool:
        return bool(self._cut)

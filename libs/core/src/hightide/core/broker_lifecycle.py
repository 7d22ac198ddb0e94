"""Broker lifecycle: the states a registered broker moves through, and the controller's heartbeat sessions.

Room: libs/core (rules, pure). Kafka's BrokerHeartbeatManager: `next_broker_state` is calculateNextBrokerState,
and `BrokerSessions` is the controller's soft state of each broker (last contact, reported metadata offset,
controlled shutdown progress), never written to the metadata log. The registration, heartbeat and fencing
decisions that use them, and the records they write, are `ReplicationControl`'s (hightide.core.controller).

The state is read from the image (fenced, in controlled shutdown), so it survives a controller failover:

| state               | heartbeat asks                       | next state          | records                      |
| ------------------- | ------------------------------------ | ------------------- | ---------------------------- |
| FENCED              | shutdown                             | SHUTDOWN_NOW        | none (already fenced)        |
| FENCED              | not fence, caught up (*)             | UNFENCED            | unfence, elect leaderless    |
| UNFENCED            | fence (and shutdown)                 | FENCED/SHUTDOWN_NOW | leave ISRs, elect, fence     |
| UNFENCED            | shutdown, leads partitions           | CONTROLLED_SHUTDOWN | shutting down, leave ISRs    |
| UNFENCED            | shutdown, leads nothing              | SHUTDOWN_NOW        | leave ISRs, fence            |
| CONTROLLED_SHUTDOWN | leads nothing, others caught up (**) | SHUTDOWN_NOW        | fence                        |
| any unfenced        | (tick) no heartbeat for the session  | FENCED              | leave ISRs, elect, fence     |

(*) its metadata offset has reached its own registration record, and it did not start a controlled shutdown.
(**) every active broker has read up to the last record of its controlled shutdown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from hightide.core.metadata_image import MetadataImage

_UNBOUNDED_OFFSET: Final = 2**63 - 1


class BrokerState(Enum):
    """Kafka's BrokerControlState."""

    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


@dataclass(slots=True)
class BrokerSession:
    """The controller's soft state of one broker (Kafka's BrokerHeartbeatState): never in the log. A new active
    controller starts every session at its first look, as Kafka's does on activation."""

    last_contact_ms: int
    metadata_offset: int | None = None
    """The broker's last reported metadata offset; None: it reports none and counts as caught up."""
    controlled_shutdown_offset: int = -1
    """The last offset of its controlled shutdown records; -1: not shutting down."""


def next_broker_state(
    current: BrokerState,
    *,
    want_fence: bool,
    want_shutdown: bool,
    caught_up: bool,
    leads_partitions: bool,
    others_caught_up: bool,
    started_controlled_shutdown: bool,
) -> BrokerState:
    """Kafka's calculateNextBrokerState (the table in the module docstring)."""
    if current is BrokerState.FENCED:
        if want_shutdown:
            return BrokerState.SHUTDOWN_NOW
        if not want_fence and caught_up and not started_controlled_shutdown:
            return BrokerState.UNFENCED
        return BrokerState.FENCED
    if current is BrokerState.UNFENCED:
        if want_fence:
            return BrokerState.SHUTDOWN_NOW if want_shutdown else BrokerState.FENCED
        if want_shutdown:
            return BrokerState.CONTROLLED_SHUTDOWN if leads_partitions else BrokerState.SHUTDOWN_NOW
        return BrokerState.UNFENCED
    if current is BrokerState.CONTROLLED_SHUTDOWN:
        if leads_partitions or not others_caught_up:
            return BrokerState.CONTROLLED_SHUTDOWN
        return BrokerState.SHUTDOWN_NOW
    return BrokerState.SHUTDOWN_NOW


def current_broker_state(fenced: bool, in_controlled_shutdown: bool) -> BrokerState:
    """A registered broker's state as the image holds it (never SHUTDOWN_NOW: that one is fenced)."""
    if fenced:
        return BrokerState.FENCED
    return BrokerState.CONTROLLED_SHUTDOWN if in_controlled_shutdown else BrokerState.UNFENCED


class BrokerSessions:
    """Every broker's session with this controller (Kafka's BrokerHeartbeatManager). A session starts at the
    controller's first look at a broker, so a new active controller gives every broker a full session timeout."""

    def __init__(self, session_timeout_ms: int) -> None:
        assert session_timeout_ms >= 1
        self.session_timeout_ms = session_timeout_ms
        self._sessions: dict[int, BrokerSession] = {}

    @property
    def view(self) -> Mapping[int, BrokerSession]:
        return self._sessions

    def start(self, broker_id: int, now_ms: int) -> BrokerSession:
        """A fresh session: the broker (re)registered."""
        session = self._sessions[broker_id] = BrokerSession(last_contact_ms=now_ms)
        return session

    def session(self, broker_id: int, now_ms: int) -> BrokerSession:
        """The broker's session, started now if this controller has not seen the broker yet."""
        session = self._sessions.get(broker_id)
        return session if session is not None else self.start(broker_id, now_ms)

    def remove(self, broker_id: int) -> None:
        self._sessions.pop(broker_id, None)

    def has_valid_session(self, image: MetadataImage, broker_id: int, now_ms: int) -> bool:
        """Registered, unfenced, and heard from within the session timeout."""
        registration = image.broker(broker_id)
        if registration is None or registration.fenced:
            return False
        return self.session(broker_id, now_ms).last_contact_ms + self.session_timeout_ms >= now_ms

    def expired(self, image: MetadataImage, now_ms: int) -> list[int]:
        """The unfenced brokers whose session expired, the longest silent first (then by id)."""
        stale = sorted(
            (self.session(broker_id, now_ms).last_contact_ms, broker_id)
            for broker_id, registration in image.brokers.items()
            if not registration.fenced and not self.has_valid_session(image, broker_id, now_ms)
        )
        return [broker_id for _, broker_id in stale]

    def lowest_active_offset(self, image: MetadataImage) -> int:
        """The least metadata offset any active broker reported (Kafka's lowestActiveOffset)."""
        offsets = [
            _UNBOUNDED_OFFSET if session.metadata_offset is None else session.metadata_offset
            for broker_id, session in self._sessions.items()
            if image.is_active(broker_id)
        ]
        return min(offsets, default=_UNBOUNDED_OFFSET)

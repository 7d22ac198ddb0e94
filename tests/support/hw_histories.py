"""Hand-written histories for the replica-state and high-watermark invariants (`hightide.audit.checks.high_watermark`),
each the events one broker (and a controller) would emit, in envelopes.

Each scenario uses its own topic and its own emitter incarnations, so several can be stored in one lake and audited
together (the parity test does). `Broker` numbers a broker's events and hands out their ids for the assertions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hightide.audit.findings import envelope_id
from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event

T0_MS = 1_700_000_000_000


@dataclass
class Broker:
    """One broker incarnation's events for one topic's partition 0, in the order it emitted them."""

    broker_id: int
    topic: str
    incarnation: str = ""
    first_wall_ms: int = T0_MS
    envelopes: list[Envelope] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.incarnation = self.incarnation or f"{self.topic}-{self.broker_id}"

    def emit(self, event: Event) -> str:
        """Record `event` as this broker's next; returns its event id."""
        sequence = len(self.envelopes)
        emitter = Emitter("broker", self.broker_id, self.incarnation)
        envelope = Envelope("test", emitter, sequence, self.first_wall_ms + sequence, sequence, event)
        self.envelopes.append(envelope)
        return envelope_id(envelope)

    # -- a replica's log ----------------------------------------------------------------------------------------

    def opened(self, leo: int = 0, hw: int = 0, lso: int = 0) -> str:
        return self.emit(
            events.LogOpened(
                topic=self.topic,
                partition=0,
                replica=self.broker_id,
                log_start_offset=lso,
                log_end_offset=leo,
                high_watermark=hw,
                leader_epochs=(),
                reason="created" if leo == 0 else "recovered",
            )
        )

    def appended(self, base: int, last: int, epoch: int = 1, as_leader: bool = True) -> str:
        return self.emit(
            events.RecordsAppended(
                topic=self.topic,
                partition=0,
                replica=self.broker_id,
                leader_epoch=epoch,
                base_offset=base,
                last_offset=last,
                record_count=last - base + 1,
                size_bytes=100,
                log_end_offset=last + 1,
                as_leader=as_leader,
            )
        )

    def hw_advanced(self, previous: int, hw: int, epoch: int = 1) -> str:
        return self.emit(
            events.HighWatermarkAdvanced(
                topic=self.topic,
                partition=0,
                replica=self.broker_id,
                leader_epoch=epoch,
                previous=previous,
                high_watermark=hw,
            )
        )

    def truncated(self, before: int, to: int, hw_before: int, hw: int, reason: str = "divergence") -> str:
        return self.emit(
            events.LogTruncated(
                topic=self.topic,
                partition=0,
                replica=self.broker_id,
                log_end_offset_before=before,
                truncated_to=to,
                high_watermark_before=hw_before,
                high_watermark=hw,
                leader_epoch=1,
                reason=reason,
            )
        )

    def log_start_advanced(self, lso: int) -> str:
        return self.emit(
            events.LogStartOffsetAdvanced(
                topic=self.topic, partition=0, replica=self.broker_id, log_start_offset=lso, reason="retention"
            )
        )

    def deleted(self, leo: int) -> str:
        return self.emit(
            events.LogDeleted(
                topic=self.topic, partition=0, replica=self.broker_id, log_end_offset=leo, reason="not_a_replica"
            )
        )

    # -- leadership ---------------------------------------------------------------------------------------------

    def became_leader(
        self, epoch: int, isr: tuple[int, ...], leo: int = 0, hw: int = 0, replicas: tuple[int, ...] = (1, 2, 3)
    ) -> str:
        return self.emit(
            events.BecameLeader(
                topic=self.topic,
                partition=0,
                replica=self.broker_id,
                leader_epoch=epoch,
                partition_epoch=epoch,
                replicas=replicas,
                isr=isr,
                log_end_offset=leo,
                high_watermark=hw,
            )
        )

    def became_follower(self, leader: int, epoch: int, leo: int = 0, hw: int = 0) -> str:
        return self.emit(
            events.BecameFollower(
                topic=self.topic,
                partition=0,
                replica=self.broker_id,
                leader=leader,
                leader_epoch=epoch,
                partition_epoch=epoch,
                log_end_offset=leo,
                high_watermark=hw,
            )
        )

    def follower_at(self, follower: int, leo: int) -> str:
        return self.emit(
            events.FollowerStateUpdated(
                topic=self.topic,
                partition=0,
                leader=self.broker_id,
                replica=follower,
                log_end_offset=leo,
                last_caught_up_time_ms=0,
            )
        )

    def isr_proposed(self, isr: tuple[int, ...], proposed: tuple[int, ...], change: str, epoch: int = 1) -> str:
        return self.emit(
            events.IsrChangeProposed(
                topic=self.topic,
                partition=0,
                leader=self.broker_id,
                leader_epoch=epoch,
                partition_epoch=epoch,
                isr=isr,
                proposed_isr=proposed,
                change=change,
            )
        )

    def isr_completed(self, isr: tuple[int, ...], error: str = "NONE", change: str = "", epoch: int = 1) -> str:
        return self.emit(
            events.IsrChangeCompleted(
                topic=self.topic,
                partition=0,
                leader=self.broker_id,
                leader_epoch=epoch,
                partition_epoch=epoch,
                isr=isr,
                error=error,
                change=change,
            )
        )


def controller_events(topic: str, *happened: Event) -> list[Envelope]:
    emitter = Emitter("controller", 100, f"{topic}-controller")
    return [Envelope("test", emitter, i, T0_MS + i, i, event) for i, event in enumerate(happened)]


def topic_created(topic: str, configs: tuple[tuple[str, str], ...] = ()) -> events.TopicCreated:
    return events.TopicCreated(topic=topic, topic_id=f"{topic}-id", partitions=1, replication_factor=3, configs=configs)


# -- scenarios: (history, the ids the tests name) -----------------------------------------------------------------


@dataclass
class Scenario:
    history: list[Envelope]
    ids: dict[str, str]


def hw_past_leo() -> Scenario:
    """A replica with LEO 5 and HW 3 truncated to 2 keeps HW 3; then a log start moved past the HW on another
    replica's log of the same partition (broker 2): two breaks of log start <= HW <= LEO."""
    one, two = Broker(1, "b1"), Broker(2, "b1")
    ids = {"opened": one.opened(), "appended": one.appended(0, 4), "hw": one.hw_advanced(0, 3)}
    ids["cut"] = one.truncated(5, 2, hw_before=3, hw=3)
    ids["appended_again"] = one.appended(2, 3)  # LEO 4 > HW 3 again: in order, and broken later is a new finding
    two.opened(leo=6, hw=4)
    ids["lso_past_hw"] = two.log_start_advanced(5)
    ids["lso_more"] = two.log_start_advanced(6)  # still broken: not reported again
    return Scenario(one.envelopes + two.envelopes, ids)


def log_start_past_hw_after_a_cut() -> Scenario:
    """A replica truncated to 2 (the log start at most 2 from then on) grows again to LEO 10 and HW 8, then its log
    start is set to 9: past the HW. The earlier cut no longer bounds the log start: it counts only until a log start
    is set outright."""
    one = Broker(1, "b1cut")
    one.opened()
    one.appended(0, 9)
    one.hw_advanced(0, 8)
    one.truncated(10, 2, hw_before=8, hw=2)
    one.appended(2, 9)
    one.hw_advanced(2, 8)
    return Scenario(one.envelopes, {"lso_past_hw": one.log_start_advanced(9)})


def replica_in_order() -> Scenario:
    """Every rule of the fold in order: open, append, HW, truncate, start over, log start, delete, re-open."""
    one = Broker(1, "b1clean")
    one.opened()
    one.appended(0, 9)
    one.hw_advanced(0, 8)
    one.log_start_advanced(4)
    one.truncated(10, 8, hw_before=8, hw=8)
    one.truncated(8, 3, hw_before=8, hw=3)  # below the log start (4): the log start becomes 3
    one.truncated(3, 20, hw_before=3, hw=20, reason="start_over")  # log start, HW and LEO all 20
    one.appended(20, 21)
    one.deleted(22)
    one.appended(0, 0)  # a replica starts empty again after it was deleted (an anomaly, but in order)
    one.opened(leo=3, hw=1, lso=1)
    return Scenario(one.envelopes, {})


def leader_hw_goes_down() -> Scenario:
    """Leader 1 of epoch 1 (HW 0) advances its HW to 3, then to 2: down within its tenure. A later advance that
    does not chain (from 4 while it held 2) is a second finding."""
    one = Broker(1, "c1")
    ids = {"opened": one.opened(), "leader": one.became_leader(1, (1,), replicas=(1,))}
    one.appended(0, 5)
    ids["to3"] = one.hw_advanced(0, 3)
    ids["to2"] = one.hw_advanced(3, 2)
    ids["from4"] = one.hw_advanced(4, 5)
    return Scenario(one.envelopes, ids)


def hw_monotonic_tenures() -> Scenario:
    """Clean: a leader's HW goes up in a chain; a follower's HW may go down (truncation) and its advances are not
    checked; a new tenure starts from its BecameLeader's HW."""
    one = Broker(1, "c1clean")
    one.opened()
    one.became_leader(1, (1,), replicas=(1,))
    one.appended(0, 5)
    one.hw_advanced(0, 2)
    one.hw_advanced(2, 6)
    one.became_follower(2, 2, leo=6, hw=6)
    one.truncated(6, 4, hw_before=6, hw=4)
    one.appended(4, 4, as_leader=False)
    one.hw_advanced(4, 5)  # a follower's: from its own HW after the truncation
    one.became_leader(3, (1,), leo=5, hw=5, replicas=(1,))
    one.appended(5, 7)
    one.hw_advanced(5, 8)
    return Scenario(one.envelopes, {})


def hw_past_lagging_member() -> Scenario:
    """Leader 1 of epoch 1 (replicas 1, 2, 3; ISR 1, 2) proposes adding 3; its maximal ISR is then 1, 2, 3. With
    follower 2 at LEO 5 and follower 3 never heard from, it advances its HW from 3 to 5; later, with 3 known at LEO
    4, to 6 (2 at 6)."""
    one = Broker(1, "c2")
    ids = {"leader": one.became_leader(1, (1, 2))}
    one.appended(0, 5)
    ids["two_at_3"] = one.follower_at(2, 3)
    ids["to3"] = one.hw_advanced(0, 3)  # fine: 2 holds 0..2
    ids["proposed"] = one.isr_proposed((1, 2), (1, 2, 3), "expand")
    ids["two_at_5"] = one.follower_at(2, 5)
    ids["to5"] = one.hw_advanced(3, 5)  # 3 is in the maximal ISR and unknown
    ids["three_at_4"] = one.follower_at(3, 4)
    ids["two_at_6"] = one.follower_at(2, 6)
    ids["to6"] = one.hw_advanced(5, 6)  # 3 is known at 4 only
    return Scenario(one.envelopes, ids)


def _shrinks_alone_then_advances(topic: str) -> tuple[Broker, dict[str, str]]:
    """Leader 1 of epoch 1 (ISR 1, 2) with 4 records advances its HW to 2 (follower 2 at LEO 2), its shrink to ISR 1
    completes, and it advances its HW from 2 to 4."""
    one = Broker(1, topic)
    ids = {"leader": one.became_leader(1, (1, 2))}
    one.appended(0, 4)
    one.follower_at(2, 2)
    ids["to2"] = one.hw_advanced(0, 2)
    ids["proposed"] = one.isr_proposed((1, 2), (1,), "shrink")
    ids["completed"] = one.isr_completed((1,), change="shrink")
    ids["to4"] = one.hw_advanced(2, 4)
    return one, ids


def hw_below_min_isr() -> Scenario:
    """Topic c2min is created with min.insync.replicas=2 (then altered to 3: the least value counts). Leader 1's
    shrink to ISR 1 completes; it advances its HW from 2 to 4 with maximal ISR [1]."""
    one, ids = _shrinks_alone_then_advances("c2min")
    controller = controller_events(
        "c2min",
        topic_created("c2min", (("min.insync.replicas", "2"),)),
        events.TopicConfigsAltered(topic="c2min", configs=(("min.insync.replicas", "3"),)),
    )
    return Scenario(controller + one.envelopes, ids)


def hw_below_cluster_min_isr() -> Scenario:
    """In a cluster of its own ("strict"), the controller takes over with min.insync.replicas=2 as its own default
    (ControllerElected names it); topic c2default sets none, so 2 applies to it. Leader 1's shrink to ISR 1
    completes; it advances its HW from 2 to 4."""
    one, ids = _shrinks_alone_then_advances("c2default")
    controller = controller_events(
        "c2default",
        events.ControllerElected(controller=100, controller_epoch=1, metadata_offset=0, min_insync_replicas=2),
        topic_created("c2default"),
    )
    return Scenario([dataclasses.replace(e, cluster_id="strict") for e in controller + one.envelopes], ids)


def isr_shrunk_unasked() -> Scenario:
    """Leader 1 of epoch 1 (ISR 1, 2, 3) with follower 2 at LEO 4 and follower 3 at LEO 2 "completes" a shrink to
    1, 2 that it never proposed (the controller never heard of it), then advances its HW from 0 to 4."""
    one = Broker(1, "c2alone")
    ids = {"leader": one.became_leader(1, (1, 2, 3))}
    one.appended(0, 4)
    one.follower_at(2, 4)
    ids["three_at_2"] = one.follower_at(3, 2)
    ids["completed"] = one.isr_completed((1, 2), change="shrink")
    ids["to4"] = one.hw_advanced(0, 4)
    return Scenario(one.envelopes, ids)


def hw_on_pending_expansion_below_min_isr() -> Scenario:
    """Topic c2grow has min.insync.replicas=2. Leader 1 with ISR 1 proposes adding 2; with 2 at LEO 4 it advances
    its HW from 0 to 4 before the controller commits the expansion: its committed ISR is [1]."""
    one = Broker(1, "c2grow")
    controller = controller_events("c2grow", topic_created("c2grow", (("min.insync.replicas", "2"),)))
    ids = {"leader": one.became_leader(1, (1,))}
    one.appended(0, 3)
    ids["proposed"] = one.isr_proposed((1,), (1, 2), "expand")
    one.follower_at(2, 4)
    ids["to4"] = one.hw_advanced(0, 4)
    return Scenario(controller + one.envelopes, ids)


def followers_forgotten() -> Scenario:
    """Leader 1 of epoch 1 knew follower 2 at LEO 5; it followed in epoch 2 and leads again in epoch 3 (ISR 1, 2),
    where it advances its HW from 0 to 3 before 2 fetches: what it knew of 2 went when it followed."""
    one = Broker(1, "c2forgot")
    one.became_leader(1, (1, 2))
    one.appended(0, 4)
    one.follower_at(2, 5)
    one.became_follower(2, 2, leo=5)
    ids = {"leader": one.became_leader(3, (1, 2), leo=5)}
    ids["to3"] = one.hw_advanced(0, 3)
    return Scenario(one.envelopes, ids)


def hw_guarded() -> Scenario:
    """Clean, as the core emits it: each follower's state update comes before the advance it allows; a pending
    shrink keeps the old members until refused (then they no longer count); a proposal whose answer says to wait
    for metadata stays pending; a follower known in an earlier tenure of the same leader still counts. The topic
    sets no min ISR: the default (1) applies."""
    one = Broker(1, "c2clean")
    one.opened()
    one.became_leader(1, (1, 2, 3))
    one.appended(0, 9)
    one.follower_at(2, 4)
    one.follower_at(3, 3)
    one.hw_advanced(0, 3)
    one.isr_proposed((1, 2, 3), (1, 2), "shrink")
    one.follower_at(2, 6)
    one.isr_completed((1, 2, 3), error="INELIGIBLE_REPLICA", change="shrink")  # refused: 3 stays, no pending
    one.follower_at(3, 6)
    one.hw_advanced(3, 6)
    one.isr_proposed((1, 2, 3), (1, 2), "shrink")
    one.isr_completed((1, 2, 3), error="FENCED_LEADER_EPOCH", change="shrink")  # still pending: 3 still counts
    one.follower_at(2, 10)
    one.follower_at(3, 8)
    one.hw_advanced(6, 8)
    one.became_leader(2, (1, 2), leo=10, hw=8)  # a new epoch while leading: what it knew of 2 stays
    one.hw_advanced(8, 10)
    one.became_follower(2, 3, leo=10, hw=10)
    one.became_leader(4, (1,), leo=10, hw=10)  # alone: nothing to wait for
    one.appended(10, 11)
    one.hw_advanced(10, 12)
    controller = controller_events("c2clean", topic_created("c2clean"))
    return Scenario(controller + one.envelopes, {})


VIOLATING = (
    hw_past_leo,
    log_start_past_hw_after_a_cut,
    leader_hw_goes_down,
    hw_past_lagging_member,
    hw_below_min_isr,
    hw_below_cluster_min_isr,
    isr_shrunk_unasked,
    hw_on_pending_expansion_below_min_isr,
    followers_forgotten,
)
CLEAN = (replica_in_order, hw_monotonic_tenures, hw_guarded)


def every_scenario() -> list[Envelope]:
    """All the scenarios above as one history (each has its own topic and emitter incarnations)."""
    return [envelope for make in (*VIOLATING, *CLEAN) for envelope in make().history]

"""Hand-written histories for the metadata invariants (hightide.audit.checks.metadata): one clean history and one
that breaks each rule, built as a controller and brokers would emit them (envelopes with controller epochs and
metadata offsets). The unit tests walk through them; the Spark parity test runs both audits on them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Final

from hightide.audit.findings import event_id
from hightide.protocol import events
from hightide.protocol.envelope import Emitter, Envelope
from hightide.protocol.events import Event

T = "orders"
CONTROLLER = Emitter("controller", 100, "c")


def broker(broker_id: int, incarnation: str = "a") -> Emitter:
    return Emitter("broker", broker_id, incarnation)


def emitted(emitter: Emitter, first_wall_ms: int, *happened: Event) -> list[Envelope]:
    """One incarnation's events in order, one ms apart."""
    return [Envelope("test", emitter, i, first_wall_ms + i, i, event) for i, event in enumerate(happened)]


def cid(sequence: int, controller: int = 100) -> str:
    """The id of the controller's event at `sequence` (its place in `decisions`)."""
    return event_id("controller", controller, "c", sequence)


def bid(broker_id: int, sequence: int, incarnation: str = "a") -> str:
    return event_id("broker", broker_id, incarnation, sequence)


def elected(epoch: int = 1, offset: int = 0, min_insync_replicas: int = -1) -> events.ControllerElected:
    return events.ControllerElected(
        controller=100, controller_epoch=epoch, metadata_offset=offset, min_insync_replicas=min_insync_replicas
    )


def created(offset: int, configs: Sequence[tuple[str, str]] = (), topic_id: str = "id-1") -> events.TopicCreated:
    return events.TopicCreated(
        topic=T,
        topic_id=topic_id,
        partitions=1,
        replication_factor=3,
        configs=tuple(configs),
        controller_epoch=1,
        metadata_offset=offset,
    )


def changed(
    offset: int,
    leader: int,
    leader_epoch: int,
    partition_epoch: int,
    isr: Sequence[int] = (1, 2, 3),
    elr: Sequence[int] = (),
    replicas: Sequence[int] = (1, 2, 3),
    reason: str = "election",
    controller_epoch: int = 1,
) -> events.PartitionChanged:
    return events.PartitionChanged(
        topic=T,
        partition=0,
        replicas=tuple(replicas),
        isr=tuple(isr),
        elr=tuple(elr),
        last_known_elr=(),
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        reason=reason,
        controller_epoch=controller_epoch,
        metadata_offset=offset,
    )


def leader_elected(offset: int, previous: int, leader: int, leader_epoch: int, election: str = "clean") -> Event:
    return events.LeaderElected(
        topic=T,
        partition=0,
        previous_leader=previous,
        leader=leader,
        leader_epoch=leader_epoch,
        election=election,
        controller_epoch=1,
        metadata_offset=offset,
    )


def became_leader(b: int, leader_epoch: int, partition_epoch: int) -> events.BecameLeader:
    return events.BecameLeader(
        topic=T,
        partition=0,
        replica=b,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        log_end_offset=0,
        high_watermark=0,
    )


def became_follower(b: int, leader: int, leader_epoch: int, partition_epoch: int) -> events.BecameFollower:
    return events.BecameFollower(
        topic=T,
        partition=0,
        replica=b,
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        log_end_offset=0,
        high_watermark=0,
    )


def log_deleted(b: int, reason: str = "topic_deleted") -> events.LogDeleted:
    return events.LogDeleted(topic=T, partition=0, replica=b, log_end_offset=0, reason=reason)


def stamp(event: Event, controller_epoch: int, offset: int) -> Event:
    return events.stamped(event, controller_epoch, offset)


# -- the histories -------------------------------------------------------------------------------------------------


def clean_lives() -> list[Envelope]:
    """A topic created with min.insync.replicas=2, an ISR shrink, a fenced leader replaced from the ISR, an intent
    of a deposed controller that never committed (it names another leader for epoch 2 at offset 4, where epoch 2
    took over), the topic deleted and created again with broker 2 leading epoch 0 this time, and the brokers
    following along (broker 2 deleting its log between the lives, broker 1 restarting)."""
    controller2 = Emitter("controller", 101, "d")
    later = [
        stamp(changed(5, 2, 1, 3, isr=(2, 3), reason="isr_expand"), 2, 5),
        stamp(events.TopicDeleted(topic=T, topic_id="id-1"), 2, 6),
        stamp(created(7, topic_id="id-2"), 2, 7),
        stamp(changed(7, 2, 0, 0, isr=(2, 3, 1), replicas=(2, 3, 1), reason="created"), 2, 7),
    ]
    return [
        *emitted(
            CONTROLLER,
            1_000,
            elected(1, 0),
            created(1, [("min.insync.replicas", "2")]),
            changed(1, 1, 0, 0, reason="created"),
            changed(2, 1, 0, 1, isr=(1, 2), reason="isr_shrink"),
            changed(3, 2, 1, 2, isr=(2,), elr=(1,), reason="broker_fenced"),
            leader_elected(3, 1, 2, 1),
            changed(4, 3, 2, 3, isr=(3,), reason="broker_fenced"),  # abandoned: epoch 2 took over at offset 4
            elected(2, 4),
        ),
        *emitted(controller2, 2_000, elected(2, 4), *later),
        *emitted(
            broker(2),
            1_000,
            became_follower(2, 1, 0, 0),
            became_follower(2, 1, 0, 1),
            became_leader(2, 1, 2),
            became_leader(2, 1, 3),
            log_deleted(2),
            became_leader(2, 0, 0),
        ),
        *emitted(broker(1), 1_000, became_leader(1, 0, 0), became_leader(1, 0, 1)),
        *emitted(broker(1, "b"), 3_000, became_follower(1, 2, 0, 0)),
    ]


def two_leaders_in_one_epoch() -> list[Envelope]:
    """Leader epoch 1 given to broker 2 (controller sequence 2) and then to broker 3 (sequence 3)."""
    return emitted(
        CONTROLLER,
        1_000,
        created(0),
        changed(1, 1, 0, 0, reason="created"),
        changed(2, 2, 1, 1),
        changed(3, 3, 1, 2),
    )


def unbacked_leader() -> list[Envelope]:
    """The controller made broker 1 leader of epoch 0; broker 2 (its sequence 1) says it leads epoch 0 too, and
    broker 3 (its sequence 0) that it leads epoch 7, which the controller never reached."""
    return [
        *emitted(CONTROLLER, 1_000, created(0), changed(1, 1, 0, 0, reason="created")),
        *emitted(broker(1), 1_000, became_leader(1, 0, 0)),
        *emitted(broker(2), 1_000, became_follower(2, 1, 0, 0), became_leader(2, 0, 0)),
        *emitted(broker(3), 1_000, became_leader(3, 7, 0)),
    ]


def epochs_going_back() -> list[Envelope]:
    """The leader moves from broker 1 to 2 in epoch 0 (sequence 2); the next change repeats partition epoch 1."""
    return emitted(
        CONTROLLER,
        1_000,
        created(0),
        changed(1, 1, 0, 0, reason="created"),
        changed(2, 2, 0, 1),
        changed(3, 2, 0, 1, isr=(2, 3)),
    )


def broker_epoch_going_down() -> list[Envelope]:
    """Broker 3 follows in epoch 4, again in 4 (a partition-epoch-only change), then in 3 (its sequence 2); after a
    restart (incarnation b) in epoch 2."""
    return [
        *emitted(
            CONTROLLER,
            1_000,
            created(0),
            changed(1, 1, 0, 0, reason="created"),
            changed(2, 1, 2, 1),
            changed(3, 1, 3, 2),
            changed(4, 1, 4, 3),
            changed(5, 1, 4, 4, isr=(1, 3)),
        ),
        *emitted(
            broker(3),
            1_000,
            became_follower(3, 1, 4, 3),
            became_follower(3, 1, 4, 4),
            became_follower(3, 1, 3, 2),
        ),
        *emitted(broker(3, "b"), 5_000, became_follower(3, 1, 2, 1)),
    ]


def leader_outside_isr() -> list[Envelope]:
    return emitted(CONTROLLER, 1_000, created(0), changed(1, 3, 0, 0, isr=(1, 2), reason="created"))


def malformed_isr_and_elr(min_isr: str | None = "2") -> list[Envelope]:
    """ISR [1,2,2], ELR [2,4] in replicas [1,2,3] (sequence 1), in a topic with min.insync.replicas `min_isr`."""
    configs = [] if min_isr is None else [("min.insync.replicas", min_isr)]
    bad = changed(1, 1, 0, 0, isr=(1, 2, 2), elr=(2, 4), reason="created")
    return emitted(CONTROLLER, 1_000, created(0, configs), bad)


def min_isr_altered_later() -> list[Envelope]:
    """ISR [1,2] with ELR [3] before (sequence 1) and after (sequence 3) min.insync.replicas is set to 2, and after
    (sequence 5) it is removed again."""
    altered = events.TopicConfigsAltered(
        topic=T, configs=(("min.insync.replicas", "2"),), controller_epoch=1, metadata_offset=2
    )
    removed = events.TopicConfigsAltered(
        topic=T, configs=(("min.insync.replicas", None),), controller_epoch=1, metadata_offset=4
    )
    return emitted(
        CONTROLLER,
        1_000,
        created(0),
        changed(1, 1, 0, 0, isr=(1, 2), elr=(3,), reason="created"),
        altered,
        changed(3, 1, 0, 1, isr=(1, 2), elr=(3,), reason="isr_shrink"),
        removed,
        changed(5, 1, 0, 2, isr=(1, 2), elr=(3,), reason="isr_expand"),
    )


def elr_kept_at_the_controllers_min_isr() -> list[Envelope]:
    """A controller whose own min.insync.replicas is 2 (its ControllerElected, sequence 0, says so) creates a topic
    without the config; a change (sequence 2) keeps ELR [3] while ISR [1,2] reaches 2. It is controller 101's, so
    that its term (and default) stays its own beside the other histories (`cid(2, 101)`)."""
    return emitted(
        dataclasses.replace(CONTROLLER, emitter_id=101),
        1_000,
        elected(1, 0, min_insync_replicas=2),
        created(1),
        changed(2, 1, 0, 0, isr=(1, 2), elr=(3,), reason="created"),
    )


def election_outside_isr(election: str = "clean") -> list[Envelope]:
    """ISR [1,2] led by 1 (sequence 1); broker 3 elected (sequence 2) and recorded as `election` (sequence 3)."""
    return emitted(
        CONTROLLER,
        1_000,
        created(0),
        changed(1, 1, 0, 0, isr=(1, 2), reason="created"),
        changed(2, 3, 1, 1, isr=(3,)),
        leader_elected(2, 1, 3, 1, election),
    )


def elr_election(chosen: int = 3) -> list[Envelope]:
    """An empty ISR with ELR [2] (sequence 1); an elr election of `chosen` (sequences 2 and 3)."""
    return emitted(
        CONTROLLER,
        1_000,
        created(0),
        changed(1, -1, 1, 1, isr=(), elr=(2,), reason="broker_fenced"),
        changed(2, chosen, 2, 2, isr=(chosen,)),
        leader_elected(2, -1, chosen, 2, "elr"),
    )


VIOLATING: Final[dict[str, Callable[[], list[Envelope]]]] = {
    "two_leaders_in_one_epoch": two_leaders_in_one_epoch,
    "unbacked_leader": unbacked_leader,
    "epochs_going_back": epochs_going_back,
    "broker_epoch_going_down": broker_epoch_going_down,
    "leader_outside_isr": leader_outside_isr,
    "malformed_isr_and_elr": malformed_isr_and_elr,
    "min_isr_altered_later": min_isr_altered_later,
    "elr_kept_at_the_controllers_min_isr": elr_kept_at_the_controllers_min_isr,
    "election_outside_isr": election_outside_isr,
    "elr_election": elr_election,
}
"""Each hand-written history that breaks a metadata rule, by name."""


# -- partition reassignment (issue 13) -------------------------------------------------------------------------


def reassignment_election(chosen: int = 6) -> list[Envelope]:
    """Replicas 1,2,3 moving to 6,4,5 (sequence 1: ISR 1,2,3,4,5 after two expansions); the leader's AlterPartition
    bringing 6 in completes it (sequence 2: replicas 6,4,5, ISR 4,5,6 less the removed, leader 1 replaced by the
    first target replica in that ISR, 6) and records the election as `reassignment` (sequence 3). Choosing 6 is
    Kafka's rule; a `chosen` outside the ISR the change left is not."""
    return emitted(
        CONTROLLER,
        1_000,
        created(0),
        changed(1, 1, 0, 3, isr=(1, 2, 3, 4, 5), replicas=(6, 4, 5, 1, 2, 3), reason="isr_expand"),
        changed(2, chosen, 1, 4, isr=(4, 5, 6), replicas=(6, 4, 5), reason="reassignment"),
        leader_elected(2, 1, chosen, 1, "reassignment"),
    )


VIOLATING["reassignment_election_outside_its_isr"] = lambda: reassignment_election(3)

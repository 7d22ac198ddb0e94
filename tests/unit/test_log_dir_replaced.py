"""A broker that comes back on a new (wiped or replaced) log dir: the controller's rule and the dir's identity.

Method: the controller is driven as its shell drives it (unit.test_controller.Cluster, every image checked); the log
dir is a real directory. Kafka's reference: KIP-858 (a log dir's `directory.id` in meta.properties; replicas on a
directory the broker no longer registers are not in sync) and KIP-966 (a broker registering after an unclean shutdown
leaves every ISR and ELR). Found by a session: a follower killed, its disk wiped, came back as the last ISR member and
was elected with an empty log.
"""

from __future__ import annotations

from pathlib import Path

from hightide.core.clock import WallMs
from hightide.core.controller import log_dir_replaced
from hightide.core.metadata_image import MetadataImage
from hightide.protocol import events
from hightide.protocol.metadata import NO_LEADER
from hightide.storage.checkpoint import TopicPartition
from hightide.storage.config import LogConfig
from hightide.storage.manager import META_PROPERTIES, LogManager
from unit.test_controller import Cluster


def three(**settings: int | bool) -> Cluster:
    cluster = Cluster(**settings)
    for broker_id in (1, 2, 3):
        cluster.register(broker_id, directory=f"dir-{broker_id}")
    cluster.unfence(1, 2, 3)
    return cluster


def test_only_two_known_and_different_directory_ids_make_a_replacement() -> None:
    assert log_dir_replaced("a", "b")
    assert not log_dir_replaced("a", "a")
    assert not log_dir_replaced("", "b")  # a registration from before directory ids
    assert not log_dir_replaced("a", "")  # a broker that sends none


def test_a_cleanly_stopped_broker_back_on_a_new_dir_leaves_isr_and_elr_and_says_so() -> None:
    """Given foo-0 on [1, 2, 3] (min ISR 3) whose ISR lost 3, so 3 is in the ELR, when broker 3 stops cleanly and
    registers again with a clean-shutdown marker but a new directory id, then it leaves the ELR (a fencing alone would
    keep it there), and LogDirReplaced and a PartitionChanged of reason log_dir_replaced say so."""
    cluster = three()
    cluster.create("foo", [[1, 2, 3]], min_insync_replicas="3")
    cluster.fence(3)
    assert cluster.partition("foo").elr == (3,)
    cluster.register(3, clean=True, directory="dir-3-new")
    assert (cluster.partition("foo").isr, cluster.partition("foo").elr) == ((1, 2), ())
    replaced = cluster.events_of(events.LogDirReplaced)
    assert [(e.broker, e.previous_directory_id, e.directory_id) for e in replaced] == [(3, "dir-3", "dir-3-new")]
    assert cluster.events_of(events.PartitionChanged)[-1].reason == "log_dir_replaced"
    assert cluster.image.broker(3) is not None and cluster.image.broker(3).directory_id == "dir-3-new"


def test_the_same_clean_restart_on_its_own_dir_keeps_the_elr_member() -> None:
    cluster = three()
    cluster.create("foo", [[1, 2, 3]], min_insync_replicas="3")
    cluster.fence(3)
    cluster.register(3, clean=True, directory="dir-3")
    assert cluster.partition("foo").elr == (3,)
    assert cluster.events_of(events.LogDirReplaced) == []


def test_a_wiped_follower_never_leads_and_is_let_back_once_in_sync() -> None:
    """The session's scenario with ELR (the default): foo-0 on [1, 2, 3], min ISR 2, ISR [1, 2] (3 fell behind).
    Follower 2 is killed and its disk wiped; leader 1 stops cleanly, so 2 (still registered) leads; then 2 comes
    back on its new dir. It leaves the ISR, and with 1 in the ELR nothing is elected until 1 is back: 1 leads, not
    the empty replica. 2 rejoins the ISR only by the leader's AlterPartition, once it has caught up."""
    cluster = three()
    cluster.create("foo", [[1, 2, 3]], min_insync_replicas="2")
    cluster.alter("foo", 0, [1, 2])
    cluster.shut_down(1)
    assert cluster.shut_down(1).response.should_shut_down
    assert (cluster.leader_and_isr("foo"), cluster.partition("foo").elr) == ((2, (2,)), (1,))
    cluster.fence(1, 2)  # the killed process's session expires: it joins the ELR, its log then intact for all we know
    assert (cluster.leader_and_isr("foo"), cluster.partition("foo").elr) == ((NO_LEADER, ()), (1, 2))
    cluster.register(2, clean=False, directory="dir-2-wiped")
    cluster.unfence(2)
    assert (cluster.leader_and_isr("foo"), cluster.partition("foo").elr) == ((NO_LEADER, ()), (1,))
    assert 2 not in cluster.partition("foo").last_known_elr
    cluster.register(1)
    cluster.unfence(1)
    assert cluster.leader_and_isr("foo") == (1, (1,))
    assert cluster.events_of(events.LeaderElected)[-1].election == "elr"
    cluster.alter("foo", 0, [1, 2])
    assert cluster.leader_and_isr("foo") == (1, (1, 2))


def test_a_wiped_last_known_leader_is_not_kept_for_balanced_recovery() -> None:
    """min ISR 1: the wiped replica was the last leader, so it is the last known ELR; electing it would lose every
    record, so the replacement takes it out and the partition waits."""
    cluster = three()
    cluster.create("foo", [[1, 2, 3]])
    cluster.alter("foo", 0, [1, 2])
    cluster.shut_down(1)
    cluster.shut_down(1)
    assert cluster.leader_and_isr("foo") == (2, (2,))
    cluster.fence(1, 2)
    assert cluster.partition("foo").last_known_elr == (2,)
    cluster.register(2, clean=True, directory="dir-2-wiped")  # a marker copied with the dir: clean-looking
    cluster.unfence(2)
    registration = cluster.partition("foo")
    assert (registration.leader, registration.isr, registration.elr, registration.last_known_elr) == (
        NO_LEADER,
        (),
        (),
        (),
    )


def test_without_elr_the_wiped_last_isr_member_is_kept_and_elected() -> None:
    """The legacy mode keeps the last ISR member (KRaft never empties an ISR without ELR): the same schedule elects
    the empty replica. This is the loss the history audit reports (empty_leader_elected)."""
    cluster = three(eligible_leader_replicas_enable=False)
    cluster.create("foo", [[1, 2, 3]], min_insync_replicas="2")
    cluster.alter("foo", 0, [1, 2])
    cluster.shut_down(1)
    cluster.shut_down(1)
    cluster.fence(1, 2)
    cluster.register(2, clean=False, directory="dir-2-wiped")
    assert cluster.leader_and_isr("foo") == (NO_LEADER, (2,))
    cluster.unfence(2)
    assert cluster.leader_and_isr("foo") == (2, (2,))


def test_a_standby_replaying_the_log_knows_each_brokers_directory() -> None:
    cluster = three()
    cluster.fence(2)
    cluster.register(2, clean=True, directory="dir-2-new")
    replayed = MetadataImage().apply_all(cluster.records)
    assert {b: r.directory_id for b, r in replayed.brokers.items()} == {1: "dir-1", 2: "dir-2-new", 3: "dir-3"}


# -- the log dir's identity (libs/storage) ------------------------------------------------------------------------

NOW = WallMs(1_700_000_000_000)


def test_a_new_dir_gets_a_directory_id_that_survives_restarts(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path / "logs", LogConfig(), NOW)
    first, created = manager.directory_id, manager.directory_created
    manager.shutdown(broker_epoch=5)
    again = LogManager.open(tmp_path / "logs", LogConfig(), NOW)
    assert (created, again.directory_created, again.directory_id) == (True, False, first)
    assert f"directory.id={first}" in (tmp_path / "logs" / META_PROPERTIES).read_text().splitlines()
    again.abandon()


def test_a_wiped_dir_comes_back_with_another_id(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path / "logs", LogConfig(), NOW)
    manager.get_or_create_log(TopicPartition("foo", 0), NOW)
    first = manager.directory_id
    manager.abandon()
    for path in sorted((tmp_path / "logs").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    wiped = LogManager.open(tmp_path / "logs", LogConfig(), NOW)
    assert wiped.directory_created and wiped.directory_id != first
    wiped.abandon()


def test_a_dir_from_before_directory_ids_is_given_one_but_is_not_new(tmp_path: Path) -> None:
    manager = LogManager.open(tmp_path / "logs", LogConfig(), NOW)
    manager.get_or_create_log(TopicPartition("foo", 0), NOW)
    manager.shutdown(broker_epoch=3)
    (tmp_path / "logs" / META_PROPERTIES).unlink()
    upgraded = LogManager.open(tmp_path / "logs", LogConfig(), NOW)
    assert upgraded.directory_id and not upgraded.directory_created
    assert upgraded.previous_clean_shutdown is not None
    upgraded.abandon()

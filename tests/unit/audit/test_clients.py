"""The clients' invariants of `hightide.audit.checks.clients`, each on a hand-written history that breaks it.

Method: given a few events as producers, a consumer, brokers and a controller emit them (tests/support/
client_histories.py), when a check audits the history, then it names exactly the offsets, values and events that
break its rule, and a history that keeps every promise gives no finding at all.
"""

from __future__ import annotations

from hightide.audit.checks.clients import CHECKS
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.protocol.envelope import Envelope
from support import client_histories as stories


def audit(name: str, envelopes: list[Envelope]) -> list[Finding]:
    return sorted(CHECKS[name](History.of(envelopes)))


def ids(*envelopes: Envelope) -> tuple[str, ...]:
    return tuple(sorted(History.id(e) for e in envelopes))


def test_a_read_above_every_leaders_high_watermark_is_found() -> None:
    # given a leader whose HW is 2 (a follower's 5 does not count) and a read of offsets 2 and 3 before it rose
    story, (bad,) = stories.read_above_high_watermark()
    # when audited, then the finding names offsets 2..3, their values and the read
    (found,) = audit("consumers_below_high_watermark", story.envelopes)
    assert (found.topic, found.partition, found.first_offset, found.last_offset) == ("e1", 0, 2, 3)
    assert found.records == ("v2", "v3")
    assert found.events == ids(bad)
    assert found.is_violation
    assert found.detail == "consumer 7 read offsets 2..3 while the highest leader high watermark was 2"


def test_a_skip_a_repeat_and_an_unexplained_jump_are_found_but_a_reset_to_the_log_start_is_not() -> None:
    story, (first, skip, again, reset, jump) = stories.reads_out_of_order()
    found = audit("consumers_in_order", story.envelopes)
    assert [(f.first_offset, f.last_offset, f.records, f.events) for f in found] == [
        (2, 2, ("a1", "a3"), ids(first, skip)),  # 1 then 3: offset 2 skipped
        (3, 3, ("a3",), ids(skip, again)),  # 3 read twice
        (11, 19, ("a10", "a20"), ids(reset, jump)),  # 10 then 20: no log start explains it
    ]
    assert [f.detail for f in found] == [
        "consumer 7 skipped offsets 2..2: read 1 then 3",
        "consumer 7 read offset 3 after offset 3",
        "consumer 7 skipped offsets 11..19: read 10 then 20",
    ]
    # 3 then 10 is not among them: the log start moved to 10 at t=35, before the read at t=40.


def test_a_definitely_failed_value_that_is_read_is_found_but_an_unknown_one_is_not() -> None:
    story, (failed, read) = stories.failed_then_read()
    (found,) = audit("definite_failure_invisible", story.envelopes)
    assert (found.first_offset, found.last_offset, found.records) == (4, 4, ("f9",))
    assert found.events == ids(failed, read)
    assert found.detail == (
        "value f9 failed definitely (NOT_ENOUGH_REPLICAS) but was read or acknowledged at offsets 4..4"
    )


def test_an_offset_seen_with_two_values_is_a_violation_unless_an_acks1_ack_was_lost_in_a_leader_change() -> None:
    story, (ack3, read3, ack5, read5) = stories.inconsistent_offsets()
    found = audit("consistent_offsets", story.envelopes)
    assert [(f.first_offset, f.records, f.events, f.cause) for f in found] == [
        (3, ("x1", "x2"), ids(ack3, read3), ""),  # acks=all: a violation
        (5, ("y1", "y2"), ids(ack5, read5), "acks1_leader_change"),  # acks=1 before commit, then epoch 1
    ]
    assert found[0].is_violation and not found[1].is_violation


def test_a_value_seen_at_two_offsets_is_found() -> None:
    story, (ack, read, again) = stories.duplicated_value()
    (found,) = audit("no_duplicates", story.envelopes)
    assert (found.first_offset, found.last_offset, found.records) == (4, 6, ("d5",))
    assert found.events == ids(ack, read, again)
    assert found.detail == "value d5 was observed at 2 different offsets"


def test_a_reread_after_a_last_known_leader_election_is_an_attributed_loss_not_a_violation() -> None:
    story, (first, again) = stories.reread_after_a_last_known_leader_election()
    (backwards,) = audit("consumers_in_order", story.envelopes)
    (two_values,) = audit("consistent_offsets", story.envelopes)
    assert (backwards.first_offset, backwards.last_offset, backwards.events) == (1, 2, ids(first, again))
    assert (two_values.first_offset, two_values.records, two_values.events) == (1, ("r1", "s1"), ids(first, again))
    assert backwards.cause == two_values.cause == "last_known_leader_election"
    assert not backwards.is_violation and not two_values.is_violation
    assert backwards.detail == "consumer 7 read offset 1 after offset 2 (cause: last_known_leader_election)"


def test_a_history_that_keeps_every_promise_gives_no_finding_across_a_topic_life() -> None:
    # given sends acknowledged and read once each, then the topic deleted and created again, offset 0 reused
    clean = stories.clean_across_a_topic_life().envelopes
    for name in CHECKS:
        assert audit(name, clean) == [], name


def test_each_story_breaks_only_its_own_client_invariant_among_those_it_can() -> None:
    # The stories together are one valid history: each check finds exactly the violations of its own story (the
    # last-known-leader story adds attributed losses, not violations).
    together = stories.all_stories()
    for name, story in [
        ("consumers_in_order", stories.reads_out_of_order),
        ("definite_failure_invisible", stories.failed_then_read),
        ("consistent_offsets", stories.inconsistent_offsets),
        ("no_duplicates", stories.duplicated_value),
    ]:
        violations = [f for f in audit(name, together) if f.is_violation]
        assert violations == [f for f in audit(name, story()[0].envelopes) if f.is_violation], name


def test_values_two_producers_both_sent_name_no_one_record_so_they_are_neither_failed_reads_nor_duplicates() -> None:
    # given two verifiable producers counting 0, 1, ...: one's 0 and 1 refused, the other's acknowledged and read,
    # then the first's 0 again at offset 2
    twins = stories.two_producers_count_alike().envelopes
    # then no check mistakes one producer's record for the other's
    for name in CHECKS:
        assert audit(name, twins) == [], name
    # while one producer alone sending a failed value that is read is still found
    story, _ = stories.failed_then_read()
    assert audit("definite_failure_invisible", story.envelopes) != []

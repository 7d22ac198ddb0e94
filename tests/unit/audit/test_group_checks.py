"""The group invariants as checks of the history audit (`hightide.audit.checks.groups`), each on a hand-written
lake history that breaks it, and on the group simulation's runs.

Method: given group events as coordinators (brokers) and a consumer emit them (tests/support/group_histories.py),
when the registered checks audit the history, then each names exactly the group, generation, member, partition,
offsets and events that break its rule; a history that keeps every promise, and the real coordinator's simulated
runs, give no finding; a coordinator that accepts stale commits is caught by the audit as by the simulation.
"""

from __future__ import annotations

import pytest

from hightide.audit import audit
from hightide.audit.checks.groups import CHECKS, group_order
from hightide.audit.checks.registry import all_checks
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.protocol.envelope import Envelope
from support import group_histories as stories


def checked(envelopes: list[Envelope]) -> list[Finding]:
    history = History.of(envelopes)
    return sorted(f for check in CHECKS.values() for f in check(history))


def ids(*envelopes: Envelope) -> tuple[str, ...]:
    return tuple(sorted(History.id(e) for e in envelopes))


def test_the_group_checks_are_registered() -> None:
    assert set(CHECKS) == {
        "one_generation_at_a_time",
        "one_owner_per_partition",
        "no_stale_commit",
        "resumes_at_commit",
    }
    assert set(CHECKS) <= set(all_checks())


@pytest.mark.parametrize("name", ["kept_promises", "across_processes"])
def test_a_history_that_keeps_every_promise_has_no_finding(name: str) -> None:
    story, _ = stories.STORIES[name]()
    assert checked(story.envelopes) == []
    assert [f for f in audit(story.envelopes) if f.invariant in CHECKS] == []


# story -> (invariant, topic, partition, first offset, last offset, detail)
EXPECTED = {
    "started_twice": ("one_generation_at_a_time", "", -1, -1, -1, "generation 2 of group twice started a second time"),
    "going_back": ("one_generation_at_a_time", "", -1, -1, -1, "generation 2 of group back started after generation 3"),
    "handed_out_again": (
        "one_generation_at_a_time", "", -1, -1, -1, "generation 2 of group again started a second time",
    ),
    "loaded_below": (
        "one_generation_at_a_time", "", -1, -1, -1,
        "group below was loaded at generation 1, below generation 2 already handed out",
    ),
    "two_owners": (
        "one_owner_per_partition", "t", 0, -1, -1, "t-0 is assigned to both a and b in generation 1 of group owners",
    ),
    "two_assignments": (
        "one_owner_per_partition", "", -1, -1, -1,
        "generation 1 of group assignments was given two different assignments",
    ),
    "stale_commit": (
        "no_stale_commit", "", -1, -1, -1,
        "member b committed in generation 1 of group stale while generation 2 was current",
    ),
    "commit_without_generation": (
        "no_stale_commit", "", -1, -1, -1,
        "a commit with no generation was accepted while group nogen had 1 members in generation 1",
    ),
    "told_a_stale_commit": (
        "resumes_at_commit", "t", 0, 4, 8,
        "member b of group told in generation 2 was told the commit of t-0 is 4, but the last commit is 9",
    ),
    "starts_elsewhere": (
        "resumes_at_commit", "t", 0, 9, 11,
        "member b of group elsewhere in generation 2 starts t-0 at 12, not at its committed offset 9",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", EXPECTED)
def test_each_broken_promise_is_found_with_what_shows_it(name: str) -> None:
    story, involved = stories.STORIES[name]()
    (found,) = checked(story.envelopes)
    invariant, topic, partition, first, last, detail = EXPECTED[name]
    assert (found.invariant, found.topic, found.partition) == (invariant, topic, partition)
    assert (found.first_offset, found.last_offset) == (first, last)
    assert found.events == ids(*involved)
    assert found.detail == detail
    assert found.is_violation
    assert found in audit(story.envelopes)  # the whole audit runs it


def test_every_group_check_has_a_story_that_breaks_it() -> None:
    assert {invariant for invariant, *_ in EXPECTED.values()} == set(CHECKS)


def test_each_emitter_keeps_its_own_order_even_when_its_clock_steps_back() -> None:
    story, _ = stories.across_processes()
    ordered = [(e.wall_ms, e.emitter.service) for e in group_order(History.of(story.envelopes))]
    assert ordered == [(100, "broker"), (90, "broker"), (101, "broker"), (102, "broker"), (102, "consumer")]


@pytest.mark.parametrize("seed", range(4))
def test_the_real_coordinators_simulated_runs_are_clean(seed: int) -> None:
    envelopes, found = stories.simulated_group_history(seed)
    assert found == []
    assert checked(envelopes) == []


def test_a_coordinator_that_accepts_stale_commits_is_caught_by_the_audit() -> None:
    envelopes, found = stories.simulated_group_history(stories.BAD_COMMIT_SEED, bad_commit_check=True)
    assert found == ["no_stale_commit"]
    findings = checked(envelopes)
    assert findings and {f.invariant for f in findings} == {"no_stale_commit"}

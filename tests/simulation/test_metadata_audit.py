"""The metadata invariants (hightide.audit.checks.metadata) hold on what the simulated cluster really does.

Method: simulated runs with faults (crashes, lossy restarts, controller failovers, ELR and last-known-leader
elections), healed and converged, keep every event in its envelope; the plain-Python metadata checks run over the
history and must find nothing: a finding on a correct run is a false positive of the rule or a bug of the core.
A topic deleted and created again (its epochs start over) and the configurations that allow unclean elections
must stay clean too; the election mutants are shown to record what they do.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable

import pytest

from hightide.audit.checks.metadata import CHECKS
from hightide.audit.findings import Finding
from hightide.audit.history import History
from hightide.protocol import events
from hightide.protocol.envelope import Envelope
from simulation.mutants import MUTANTS
from simulation.simulator import HEALED_STEPS_MAX, SimConfig, Simulation

STEPS = 2_000


def findings(history: list[Envelope]) -> list[Finding]:
    held = History.of(history)
    return [f for check in CHECKS.values() for f in check(held)]


def elections(history: list[Envelope]) -> Counter[str]:
    return Counter(e.election for _, e in History.of(history).of_type(events.LeaderElected))


def recorded(seed: int, config: SimConfig | None = None, mutant_name: str | None = None) -> Simulation:
    mutant = next(m for m in MUTANTS if m.name == mutant_name) if mutant_name else None
    simulation = Simulation(seed, config, mutant=mutant)
    simulation.history = []
    return simulation


def test_faulty_runs_break_no_metadata_invariant() -> None:
    seen: Counter[str] = Counter()
    for seed in range(12):
        simulation = recorded(seed)
        simulation.run(STEPS)
        assert simulation.history is not None
        assert findings(simulation.history) == [], f"seed {seed}"
        seen += elections(simulation.history)
    # The runs must have had the elections that make these rules hard (measured over seeds 0-11 since KAFKA-9952:
    # 43 clean, 13 ELR and 5 last-known-leader elections; 39, 2 and 16 before it).
    assert seen["clean"] > 0 and seen["elr"] > 0 and seen["last_known_leader"] > 0, seen


@pytest.mark.parametrize(
    "config",
    [
        SimConfig(unclean_leader_election_enable=True, eligible_leader_replicas_enable=False),
        SimConfig(legacy_truncate_to_high_watermark=True),
    ],
    ids=["unclean-elections", "legacy-truncation"],
)
def test_configurations_that_may_lose_data_still_keep_the_metadata_rules(config: SimConfig) -> None:
    for seed in range(5):
        simulation = recorded(seed, config)
        with contextlib.suppress(AssertionError):  # they may lose records: the simulator says so, not this test
            simulation.run(STEPS)
        assert simulation.history is not None
        assert findings(simulation.history) == [], f"seed {seed}"


@pytest.mark.parametrize("mutant", ["unclean_election", "no_eligible_leader_replicas"])
def test_the_election_mutants_record_their_elections_and_break_no_metadata_rule(mutant: str) -> None:
    """unclean_election elects out-of-sync replicas while the topic's setting forbids it, but the controller records
    each as an unclean election (the history cannot tell the cluster's setting apart: the loss attribution reports
    those elections); no_eligible_leader_replicas elects the last ISR member although it lost its tail, a clean
    election from the ISR. Neither breaks a metadata rule: their damage is to the records."""
    seen: Counter[str] = Counter()
    for seed in range(4):
        simulation = recorded(seed, mutant_name=mutant)
        with contextlib.suppress(AssertionError):
            simulation.run(STEPS)
        assert simulation.history is not None
        assert findings(simulation.history) == [], f"{mutant} seed {seed}"
        seen += elections(simulation.history)
    if mutant == "unclean_election":
        assert seen["unclean"] > 0, seen
    else:
        assert set(seen) == {"clean"}, seen


def _step_until(simulation: Simulation, done: Callable[[], bool]) -> None:
    for _ in range(HEALED_STEPS_MAX):
        simulation.step()
        if done():
            return
    raise AssertionError("the cluster did not get there")


def test_a_topic_deleted_and_created_again_starts_its_epochs_over_without_a_finding() -> None:
    """Given a converged run with broker 2 down, when the topic is deleted and (once broker 2 is back and has
    deleted its replicas) created again, then its partitions lead epoch 0 again in their second life and no rule
    compares the two lives."""
    simulation = recorded(7)
    simulation.run(STEPS)
    down = simulation.brokers[2]
    down.crash(lossy=False)
    simulation.restarts.append((simulation.now_ms + 400, down.broker_id))
    simulation.delete_topic()
    _step_until(simulation, lambda: down.alive and down.registered and not simulation.cores(down))
    simulation.create_topic()
    _step_until(simulation, simulation._converged)
    assert simulation.history is not None
    created = [e for _, e in History.of(simulation.history).of_type(events.TopicCreated)]
    assert len(created) == 2
    assert findings(simulation.history) == []

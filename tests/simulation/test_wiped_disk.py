"""A follower killed with its disk wiped, while the leader is gone: the simulation of the session's data-loss find.

Method: a simulated cluster (the real cores and controller, tests/simulation/simulator.py) with no random fault, one
partition on two replicas, min.insync.replicas=2. The schedule, scripted: the leader L is cut off from everyone (its
session expires as a killed leader's would, but its disk and process stay); while the controller still counts the
follower F alive, F is killed and its disk wiped, so F is elected leader of nothing; F's session then expires, F
restarts on its new log dir and registers; once F is unfenced, L comes back.

With eligible leader replicas (the default), L joined the ELR when it left the ISR and F's registration after an
unclean shutdown (and on a new dir) takes F out of the ISR and ELR: L is elected again from the ELR, F copies its log,
and nothing committed is lost; the run's history audits clean. In the legacy mode (ELR off) KRaft keeps F as the last
ISR member and elects it with an empty log; L truncates to it and the committed records are gone: the simulator's own
invariants and the history audit both say so (leader_completeness, acks_all_acknowledged_committed), not attributed to
any cause, since one lossy replica is fewer than min.insync.replicas.

Why the leader is cut off rather than killed: a killed leader restarts uncleanly and leaves the ELR too (KIP-966), and
then only an unclean recovery (Kafka's balanced recovery, not implemented) could elect anyone.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hightide.audit.auditor import audit
from hightide.core.effects import CONTROLLER
from hightide.core.metadata_image import TopicPartition
from hightide.protocol import events
from simulation import simulator
from simulation.invariants import InvariantViolation
from simulation.simulator import HEALED_STEPS_MAX, SimConfig, Simulation
from support.unchecked_simulation import UncheckedSimulation

SEED = 3
# Retention off: the acknowledged records the loss takes must still be in the logs for the audit to find them gone.
# (With the producers' five batches in flight the first 20 records are committed within 60 ms, and a wall clock skewed
# seconds ahead deleted them by retention.ms before the loss, which the audit then rightly does not count.)
CONFIG = SimConfig(
    partitions=1,
    replication_factor=2,
    min_insync_replicas=2,
    fault_probability=0.0,
    retention_ms=-1,
    retention_bytes=-1,
)
TP = (CONFIG.topic, 0)


class NeverGotThere(RuntimeError):
    """The schedule stalled (not an invariant of the simulator failing, which is an AssertionError)."""


def _until(simulation: Simulation, done: Callable[[], bool], what: str) -> None:
    for _ in range(HEALED_STEPS_MAX):
        simulation.step()
        if done():
            return
    raise NeverGotThere(f"the simulation never got to: {what}")


def _committed(simulation: Simulation) -> int:
    """The highest high watermark any replica's disk holds (the unchecked run keeps no history of commits)."""
    logs = [b.disk.logs.get(TopicPartition(*TP)) for b in simulation.brokers.values()]
    return max((d.log.high_watermark for d in logs if d is not None), default=0)


def _run_schedule(simulation: Simulation) -> tuple[int, int]:
    """The schedule of the module docstring; returns (L, F)."""
    simulation.history = []
    simulation.total_steps = 0  # no faulty phase: the schedule is the only fault
    _until(simulation, lambda: _committed(simulation) >= 20, "20 committed records")
    view = simulation.controller.views()[TP]
    old_leader = view.leader
    (follower,) = [r for r in view.replicas if r != old_leader]
    _until(simulation, lambda: set(simulation.controller.views()[TP].isr) == {old_leader, follower}, "a full ISR")
    simulation.network.isolate(old_leader, [*simulation.brokers, CONTROLLER])
    cut_at = simulation.now_ms
    _until(simulation, lambda: simulation.now_ms >= cut_at + CONFIG.session_timeout_ms // 2, "half a session")
    doomed = simulation.brokers[follower]
    doomed.crash(lossy=False)
    doomed.disk.wipe()
    simulation.restarts.append((simulation.now_ms + 50, follower))
    _until(simulation, lambda: simulation.controller.views()[TP].leader == follower, "the dead follower elected")
    _until(simulation, lambda: doomed.alive and doomed.registered, "the wiped follower registered again")
    _until(
        simulation,
        lambda: follower not in simulation.controller.control.image.fenced_brokers(),
        "the wiped follower unfenced",
    )
    simulation.heal()
    _until(simulation, simulation._converged, "convergence")
    return old_leader, follower


def test_with_elr_the_wiped_follower_never_leads_and_nothing_committed_is_lost() -> None:
    simulation = Simulation(SEED, CONFIG)
    old_leader, follower = _run_schedule(simulation)
    simulation.check_end()
    assert simulation.history is not None
    replaced = [e for e in simulation.history if isinstance(e.event, events.LogDirReplaced)]
    assert [e.event.broker for e in replaced] == [follower]
    leaders = [e.event.leader for e in simulation.history if isinstance(e.event, events.LeaderElected)]
    assert leaders[-1] == old_leader  # back from the ELR, not the empty replica
    assert [f for f in audit(simulation.history) if f.is_violation] == []


def test_without_elr_the_wiped_follower_is_elected_and_the_audit_reports_the_loss(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    legacy = SimConfig(**{**CONFIG.__dict__, "eligible_leader_replicas_enable": False})
    with pytest.raises(InvariantViolation, match="committed"):  # the simulator's own invariants see the loss
        _run_schedule(Simulation(SEED, legacy))
    monkeypatch.setattr(simulator, "check_truncation", lambda *_: None)
    simulation = UncheckedSimulation(SEED, legacy)
    _old_leader, follower = _run_schedule(simulation)
    assert simulation.history is not None
    elected = [e.event for e in simulation.history if isinstance(e.event, events.LeaderElected)]
    assert (elected[-1].leader, elected[-1].election) == (follower, "clean")
    violations = {f.invariant for f in audit(simulation.history) if f.is_violation}
    assert {"leader_completeness", "acks_all_acknowledged_committed"} <= violations, violations

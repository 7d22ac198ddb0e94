"""A simulated run that keeps going where the simulator's own invariants would stop it, so that a known-bad
variant's whole history (the violation and what follows it) reaches the audit.

The simulator raises at the first broken invariant, before the step's remaining events are recorded; an audit test
needs the events themselves. Here the per-step, acknowledgement and end checks are switched off (the truncation
and retention checks the simulator makes inline stay off too: their functions are not called), and the run heals
and converges as `Simulation.run` does, for at most `healed_steps_max` steps.
"""

from __future__ import annotations

from hightide.protocol.envelope import Envelope
from simulation import simulator
from simulation.mutants import MUTANTS, Mutant
from simulation.simulator import SimBroker, Simulation, wire

HEALED_STEPS_MAX = 5_000


class UncheckedSimulation(Simulation):
    def check_invariants(self) -> None:
        return None

    def check_end(self) -> None:
        return None

    def _check_acknowledgement(self, broker: SimBroker, request_tag: int, response: wire.ProduceResponse) -> None:
        return None


def mutant(name: str) -> Mutant:
    return next(m for m in MUTANTS if m.name == name)


def unchecked_history(seed: int, mutant_name: str | None = None, steps: int = 2_000) -> list[Envelope]:
    """The whole history of a run (of the named mutant, or of the real core), healed, with no invariant checked."""
    original = (simulator.check_truncation, simulator.check_retention_honoured)
    simulator.check_truncation = lambda *_: None  # type: ignore[assignment]
    simulator.check_retention_honoured = lambda *_: None  # type: ignore[assignment]
    try:
        simulation = UncheckedSimulation(seed, mutant=None if mutant_name is None else mutant(mutant_name))
        simulation.history = []
        simulation.total_steps = steps
        for _ in range(steps):
            simulation.step()
        simulation.heal()
        for _ in range(HEALED_STEPS_MAX):
            simulation.step()
            if simulation._converged():
                break
    finally:
        simulator.check_truncation, simulator.check_retention_honoured = original
    return simulation.history

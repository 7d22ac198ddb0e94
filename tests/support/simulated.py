"""Simulated histories for the audit's tests: a clean run (faults, then healed until it converged), a run of a
known-bad core variant (`simulation.mutants`), cut short where the simulator caught it, and a clean run damaged on
the way to the lake."""

from __future__ import annotations

import contextlib
import dataclasses

from hightide.protocol.envelope import Envelope
from simulation.mutants import MUTANTS, Mutant

__all__ = ["MUTANTS", "clean_history", "damaged", "mutant", "mutant_history"]
from simulation.simulator import Simulation

STEPS = 1_000


def clean_history(seed: int, steps: int = STEPS) -> list[Envelope]:
    """A faulty run healed until it converged; its invariants held (the simulator checks them as it goes)."""
    simulation = Simulation(seed)
    simulation.history = []
    simulation.run(steps)
    return simulation.history


def mutant_history(mutant: Mutant, seed: int, steps: int = STEPS) -> list[Envelope]:
    """A run of a known-bad variant: its whole history, or the history up to where the simulator caught it."""
    simulation = Simulation(seed, mutant=mutant)
    simulation.history = []
    # Caught (an InvariantViolation, or the harness's own check first): the history so far is the evidence.
    with contextlib.suppress(AssertionError):
        simulation.run(steps)
    assert simulation.history is not None
    return simulation.history


def mutant(name: str) -> Mutant:
    (found,) = [m for m in MUTANTS if m.name == name]
    return found


def damaged(history: list[Envelope]) -> list[Envelope]:
    """The history with events lost (a whole run of one emitter's events, and one at another's start) and one
    sequence given to a different event, as a broken relay or archive could leave it."""
    emitters = sorted({e.emitter for e in history}, key=lambda e: (e.service, e.emitter_id, e.incarnation))
    longest = max(emitters, key=lambda emitter: sum(e.emitter == emitter for e in history))
    mine = [e for e in history if e.emitter == longest]
    lost = {id(e) for e in mine[5:8]}
    first_of_other = next(e for e in history if e.emitter == emitters[0] and e.sequence == 0)
    lost.add(id(first_of_other))
    kept = [e for e in history if id(e) not in lost]
    clashing = dataclasses.replace(mine[10], wall_ms=mine[10].wall_ms + 1)
    return [*kept, clashing]

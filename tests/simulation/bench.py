"""Simulated steps per second, printed for `make bench` (never asserted).

Run: `PYTHONPATH=tests python -m simulation.bench [seeds]`.
"""

from __future__ import annotations

import sys
import time

from simulation.simulator import Simulation

STEPS = 2_000


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    start = time.perf_counter()
    steps = 0
    for seed in range(seeds):
        simulation = Simulation(seed)
        simulation.run(STEPS)
        steps += simulation.step_count
    seconds = time.perf_counter() - start
    print(
        f"{'simulate':<9} {f'{seeds} seeds x {STEPS} faulty steps, then healed':<44} {steps / seconds:>14,.2f} steps/s"
    )


if __name__ == "__main__":
    main()

"""Interference on every k-th run (a periodic job) against the sequential policy's run orders, A/A.

    python benchmarks/periodic_interference.py [--draws 20000] [--jobs N] [--version 6 --version 5]
        [--pct 8] [--cv 0.5] [--periods 2-12]

Prints, per design version, a table of false adoption and false regression for every period and phase (the
first slowed run position), and the worst cell. Every number comes from gatekit.simulate (`gate simulate
--policy sequential --periodic-pct 8 --period K --phase P`); the seed is fixed, so the table is reproducible.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

from gatekit.simulate import Scenario, SimulationResult, simulate

SEED = 20261202


def _one(job: tuple[int, float, float, int, int, int]) -> SimulationResult:
    version, pct, cv, period, phase, draws = job
    scenario = Scenario(cv_off_pct=cv, periodic_pct=pct, period=period, phase=phase)
    return simulate("sequential", scenario, draws=draws, seed=SEED, version=version)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--version", type=int, action="append")
    parser.add_argument("--pct", type=float, default=8.0)
    parser.add_argument("--cv", type=float, default=0.5)
    parser.add_argument("--periods", default="2-12")
    args = parser.parse_args()
    low, _, high = args.periods.partition("-")
    periods = range(int(low), int(high or low) + 1)
    for version in args.version or [None]:
        jobs = [(version, args.pct, args.cv, k, phase, args.draws) for k in periods for phase in range(k)]
        with ProcessPoolExecutor(max(1, args.jobs)) as pool:
            results = list(pool.map(_one, jobs))
        print(f"\nsequential v{version or 'current'}: A/A, CV {args.cv:g} %, every k-th run +{args.pct:g} %, "
              f"{args.draws} draws per cell, seed {SEED}")
        print("| period | phase | false adoption % | false regression % | runs/arm |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for (_, _, _, k, phase, _), r in zip(jobs, results):
            print(f"| {k} | {phase} | {r.adopted.pct:.2f} ± {r.adopted.se_pct:.2f} | "
                  f"{r.rates['regression'].pct:.2f} ± {r.rates['regression'].se_pct:.2f} | {r.runs_per_arm:.2f} |")
        worst = max(zip(jobs, results), key=lambda jr: max(jr[1].adopted.pct, jr[1].rates["regression"].pct))
        (_, _, _, k, phase, _), r = worst
        print(f"worst: period {k} phase {phase}: adoption {r.adopted.pct:.2f} %, regression "
              f"{r.rates['regression'].pct:.2f} %")


if __name__ == "__main__":
    main()

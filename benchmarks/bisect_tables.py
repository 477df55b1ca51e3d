"""The bisect planning table of docs/benchmarks.md: `gate simulate-bisect` for each scenario below, one
process per scenario, the same code and seed as the command (so each row is reproducible by the command
printed beside it).

    python benchmarks/bisect_tables.py [--draws 1000] [--jobs 6] [--pairs-per-probe 1] [--rows 1] [--json FILE]
    python benchmarks/bisect_tables.py --outcomes [--draws 2500] [--jobs 2] [--neighbour-rule 2]

--outcomes: how gatekit's bisects end where one step is not the whole story (two culprits in one range,
endpoints too noisy to say no change, no change at all), beside the planning rows: the outcomes and a commit
that is no culprit named at the confidence, ± one Monte-Carlo standard error. --neighbour-rule: the rule a named
step must pass between its neighbours (gatekit.bisect.checks.NEIGHBOUR_RULES; 1 is the rule before the current).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from concurrent.futures import ProcessPoolExecutor

from gatekit.bisect.checks import NEIGHBOUR_RULE
from gatekit.bisect.search import PROBE_PAIRS
from gatekit.bisect.simulation import BisectScenario, outcome_table, simulate_bisect, table

SCENARIOS = (  # (effect %, CV %, max parallel)
    (2.0, 0.5, 1), (2.0, 0.5, 4), (2.0, 2.0, 1), (5.0, 0.5, 1), (5.0, 2.0, 1), (5.0, 2.0, 4))
COMMITS = 128
OUTCOME_SCENARIOS = (  # (effect %, second culprit's effect %, CV %)
    (1.5, 1.5, 1.0), (1.5, 1.5, 0.5), (3.0, 0.0, 1.0), (0.0, 0.0, 0.5), (0.0, 0.0, 1.0), (2.0, 0.0, 0.5))


def _outcomes(args: tuple[float, float, float, int, int]):  # type: ignore[no-untyped-def]
    effect, second, cv, draws, rule = args
    began = time.monotonic()
    result = simulate_bisect(BisectScenario(commits=COMMITS, effect_pct=effect, second_effect_pct=second, cv_pct=cv,
                                            neighbour_rule=rule), draws=draws, seed=0)
    return result, time.monotonic() - began


def _one(args: tuple[float, float, int, int, int]):  # type: ignore[no-untyped-def]
    effect, cv, parallel, pairs, draws = args
    began = time.monotonic()
    result = simulate_bisect(BisectScenario(commits=COMMITS, effect_pct=effect, cv_pct=cv, max_parallel=parallel,
                                            pairs_per_probe=pairs), draws=draws, seed=0)
    return result, time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=len(SCENARIOS))
    parser.add_argument("--pairs-per-probe", type=int, default=PROBE_PAIRS)
    parser.add_argument("--rows", type=int, default=len(SCENARIOS), help="the first ROWS scenarios only")
    parser.add_argument("--json")
    parser.add_argument("--outcomes", action="store_true", help="the outcome table instead")
    parser.add_argument("--neighbour-rule", type=int, default=NEIGHBOUR_RULE, help="with --outcomes: the rule")
    parser.add_argument("--outcome-rows", type=int, default=len(OUTCOME_SCENARIOS),
                        help="with --outcomes: the first ROWS scenarios only")
    args = parser.parse_args()
    if args.outcomes:
        with ProcessPoolExecutor(args.jobs) as pool:
            done = list(pool.map(_outcomes, [(e, s, c, args.draws, args.neighbour_rule)
                                             for e, s, c in OUTCOME_SCENARIOS[:args.outcome_rows]]))
        print(outcome_table([result for result, _ in done]))
        print(f"\n{args.draws} draws a row, seed 0, {COMMITS} commits, neighbour rule {args.neighbour_rule}; "
              f"{sum(seconds for _, seconds in done):.0f} s of CPU on {platform.processor() or platform.machine()}")
        return
    scenarios = SCENARIOS[:args.rows]
    with ProcessPoolExecutor(args.jobs) as pool:
        done = list(pool.map(_one, [(e, c, k, args.pairs_per_probe, args.draws) for e, c, k in scenarios]))
    print(table([result for result, _ in done]))
    print()
    for (effect, cv, parallel), (_, seconds) in zip(scenarios, done):
        print(f"gate simulate-bisect --commits {COMMITS} --effect {effect:g} --cv {cv:g} --max-parallel {parallel} "
              f"--pairs-per-probe {args.pairs_per_probe} --draws {args.draws}   # {seconds:.0f} s")
    print(f"\nMachine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; python "
          f"{platform.python_version()}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([result.to_dict() for result, _ in done], handle, indent=2)


if __name__ == "__main__":
    main()

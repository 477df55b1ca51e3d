"""Regenerate the simulated tables of docs/statistics.md (between its `<!-- simulate:… -->` markers).

    python benchmarks/statistics_tables.py --write docs/statistics.md [--draws 200000] [--big-draws 1000000]

Every number comes from gatekit.simulate, the code behind `gate simulate`; the seed is fixed, so the
tables are reproducible. Timings are measured here and depend on the machine (reported with it).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from gatekit.policy import SEQUENTIAL
from gatekit.simulate import SUITE, Rate, Scenario, ThresholdSpec, run_suite, simulate, simulate_runs
from gatekit.verdict import ADOPTED

SEED = 20261130
POLICIES = ("classic", "sequential", "welch", "bootstrap")


def cell(rate: Rate) -> str:
    return f"{rate.pct:.2f} ± {rate.se_pct:.2f}"


def suite_table(draws: int) -> str:
    results = run_suite(POLICIES, draws=draws, seed=SEED)
    by = {(r.scenario.name, r.policy): r for r in results}
    header = ["scenario", "adopted is", *[f"{p} %" for p in POLICIES], "sequential runs/arm",
              "sequential equivalent / inconclusive %"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for scenario in SUITE:
        seq = by[(scenario.name, "sequential")]
        lines.append("| " + " | ".join([
            scenario.name, seq.meaning, *[cell(by[(scenario.name, p)].adopted) for p in POLICIES],
            f"{seq.runs_per_arm:.2f}",
            f"{seq.rates['equivalent'].pct:.1f} / {seq.rates['inconclusive'].pct:.1f}"]) + " |")
    return "\n".join(lines)


def target_table(draws: int) -> str:
    """The issue's targets for the sequential policy, at a larger number of draws."""
    checks = [(s, "≤ 5 % false adoption") for s in SUITE if s.effect_pct == 0]
    checks += [(next(s for s in SUITE if s.name == "−2 %, CV 0.5 %"), "≥ 95 % power"),
               (next(s for s in SUITE if s.name == "−5 %, CV 2 %"), "≥ 95 % power")]
    lines = ["| scenario | target | sequential adopted % | runs/arm | met |", "| --- | --- | --- | --- | --- |"]
    for scenario, target in checks:
        r = simulate("sequential", scenario, draws=draws, seed=SEED)
        met = (r.adopted.pct + 2 * r.adopted.se_pct <= 5.0) if "≤" in target else \
            (r.adopted.pct - 2 * r.adopted.se_pct >= 95.0)
        met = met and r.runs_per_arm <= 8
        lines.append(f"| {scenario.name} | {target}, ≤ 8 runs/arm | {cell(r.adopted)} | {r.runs_per_arm:.2f} | "
                     f"{'yes' if met else 'NO'} |")
    return "\n".join(lines)


def order_table(draws: int) -> str:
    """The classic rule at n = 4 under each order: drift and a cold first run."""
    scenarios = [Scenario(cv_off_pct=0.5, drift_pct_per_run=-0.25, n=4, name="A/A, CV 0.5 %, drift −0.25 %/run"),
                 Scenario(cv_off_pct=0.5, effect_pct=-2.0, cold_first_pct=3.0, n=4,
                          name="−2 %, CV 0.5 %, +3 % cold first run"),
                 Scenario(cv_off_pct=0.5, effect_pct=-2.0, cold_first_pct=3.0, n=4, warmup=1,
                          name="−2 %, CV 0.5 %, +3 % cold first run, warm-up 1")]
    orders = ("abab", "abba", "random", "thue-morse")
    lines = ["| scenario (classic rule, n = 4) | " + " | ".join(orders) + " |",
             "| --- |" + " --- |" * len(orders)]
    for scenario in scenarios:
        row = [cell(simulate("classic", replace(scenario, order=o), draws=draws, seed=SEED).adopted) for o in orders]
        lines.append(f"| {scenario.name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def df_table(draws: int) -> str:
    """Why the sequential policy uses df = min(n) − 1: the Satterthwaite df is liberal at n = 4."""
    scenarios = [s for s in SUITE if s.effect_pct == 0 and s.drift_pct_per_run == 0 and s.cold_first_pct == 0]
    scenarios += [s for s in SUITE if s.name in ("−2 %, CV 0.5 %", "−5 %, CV 2 %")]
    lines = ["| scenario | adopted %, df = min(n) − 1 (the policy) | adopted %, Welch–Satterthwaite df |",
             "| --- | --- | --- |"]
    for scenario in scenarios:
        cells = []
        for mode in ("conservative", "satterthwaite"):
            rng = np.random.default_rng(SEED)
            off, on, _, _ = simulate_runs(scenario, "thue-morse", 8, draws, rng)
            codes, _ = SEQUENTIAL.simulate(off, on, ThresholdSpec(), df_mode=mode)
            cells.append(cell(Rate.of(codes == ADOPTED)))
        lines.append(f"| {scenario.name} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def timing_table() -> str:
    lines = ["| policy | 100 000 gates of one scenario (s) |", "| --- | --- |"]
    for policy in POLICIES:
        best = math.inf
        for _ in range(3):
            began = time.perf_counter()
            simulate(policy, Scenario(cv_off_pct=2.0), draws=100_000, seed=SEED)
            best = min(best, time.perf_counter() - began)
        lines.append(f"| {policy} | {best:.2f} |")
    lines.append(f"\nMeasured on {platform.machine()} with {os.cpu_count()} CPU(s), Python "
                 f"{platform.python_version()}, numpy {np.__version__} (best of 3).")
    return "\n".join(lines)


def replace_block(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- simulate:{name}:begin -->\n).*?(<!-- simulate:{name}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"docs: marker simulate:{name} missing")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, required=True)
    parser.add_argument("--draws", type=int, default=200_000)
    parser.add_argument("--big-draws", type=int, default=1_000_000)
    args = parser.parse_args()
    text = args.write.read_text()
    blocks = {"suite": lambda: suite_table(args.draws), "targets": lambda: target_table(args.big_draws),
              "orders": lambda: order_table(args.draws), "df": lambda: df_table(args.draws),
              "timing": timing_table}
    for name in blocks:  # every marker first, before minutes of simulation
        replace_block(text, name, "")
    for name, make in blocks.items():
        text = replace_block(text, name, make())
        print(f"{name}: done")
    args.write.write_text(text)


if __name__ == "__main__":
    main()

"""Regenerate the simulated tables of docs/statistics.md (between its `<!-- simulate:… -->` markers).

    python benchmarks/statistics_tables.py --write docs/statistics.md [--draws 200000] [--big-draws 200000]
        [--jobs N] [--only BLOCK …]

Every number comes from gatekit.simulate, the code behind `gate simulate`; the seed is fixed, so the
tables are reproducible (and the same with any --jobs: each cell is its own simulation). The sequential
policy is shown in the design a new series preregisters beside version 4 (`gate simulate
--sequential-version 8 --sequential-version 4`). The duet section's blocks (`duet-…`) are the tables of
benchmarks/duet_calibration.py, made by its functions with the draws and seed each states beside it
(duet_calibration.DOC_BLOCKS; --draws does not change them). Timings are measured here and depend on the
machine (reported with it).
"""

from __future__ import annotations

import argparse
import math
from concurrent.futures import ProcessPoolExecutor
import os
import platform
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from gatekit.diagnostics import ci_arrays, p_better_arrays, welch_arrays
from gatekit.policies.sequential import SEQUENTIAL, gain_bounds
from gatekit.policy_descriptors import describe, policy_for
from gatekit.simulate import (CENSORED_ROWS, LARGE_N_ROWS, NOT_EQUIVALENT, SUITE, TARGETS, Rate, Scenario, SimulationResult,
                              ThresholdSpec, meets, runs_at_once, simulate, simulate_runs, suite_pairs, target_of)
from gatekit.verdict import ADOPTED, CONTINUE, EQUIVALENT, INCONCLUSIVE, REGRESSION, REJECTED

sys.path.insert(0, str(Path(__file__).resolve().parent))  # a script beside this one, also when loaded by path
import duet_calibration  # noqa: E402

SEED = 20261130
POLICIES = ("classic", "sequential", "welch", "bootstrap")
V4 = 4  # the sequential design shown beside the current one
JOBS = 1  # processes for the cells (--jobs)


def cell(rate: Rate) -> str:
    return f"{rate.pct:.2f} ± {rate.se_pct:.2f}"


def pool_map(work: Callable[[Any], Any], jobs: Iterable[Any]) -> list[Any]:
    """`work` over `jobs` in order, over JOBS processes (the duet tables' cells)."""
    jobs = list(jobs)
    if JOBS <= 1 or len(jobs) <= 1:
        return [work(job) for job in jobs]
    with ProcessPoolExecutor(min(JOBS, len(jobs))) as pool:
        return list(pool.map(work, jobs))


def _cell_result(job: tuple[str, Scenario, int, int | None]) -> SimulationResult:
    policy, scenario, draws, version = job
    return simulate(policy, scenario, draws=draws, seed=SEED, version=version)


_DONE: dict[tuple[str, Scenario, int, int | None], SimulationResult] = {}  # a cell two tables share runs once


def simulate_all(jobs: list[tuple[str, Scenario, int, int | None]]) -> list[SimulationResult]:
    """Each (policy, scenario, draws, version) simulated with SEED, in order, over JOBS processes."""
    missing = [job for job in dict.fromkeys(jobs) if job not in _DONE]
    if JOBS <= 1:
        _DONE.update((job, _cell_result(job)) for job in missing)
    else:
        with ProcessPoolExecutor(JOBS) as pool:
            _DONE.update(zip(missing, pool.map(_cell_result, missing)))
    return [_DONE[job] for job in jobs]


def suite_table(draws: int) -> str:
    rows = [scenario for scenario, _ in TARGETS]  # the duet's own rows are in duet_calibration.py's table
    jobs = [(policy, replace(scenario, **({"n": suite_pairs(policy)} if runs_at_once(policy) else {})), draws, None)
            for scenario in rows for policy in POLICIES
            if scenario.guard_drop is None or policy_for(policy).simulates_guard]
    jobs += [("sequential", scenario, draws, V4) for scenario in rows]
    by = {(r.scenario.name, r.label): r for r in simulate_all(jobs)}
    columns = [*POLICIES[:2], f"sequential v{V4}", *POLICIES[2:]]
    header = ["scenario", "adopted is", *[f"{p} %" for p in columns], "sequential runs/arm",
              "sequential equivalent / inconclusive %", "sequential regression %"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for scenario, _ in TARGETS:  # the duet's own rows are in duet_calibration.py's table
        seq = by[(scenario.name, "sequential")]
        if seq.guard_pass is not None:  # a guard scenario: only the sequential policy has a paired guard
            lines.append("| " + " | ".join([
                scenario.name, "guard false pass", *[cell(by[(scenario.name, p)].guard_pass)  # type: ignore[arg-type]
                                                     if p.startswith("sequential") else "—" for p in columns],
                "—", "—", "—"]) + " |")
            continue
        lines.append("| " + " | ".join([
            scenario.name, seq.meaning, *[cell(by[(scenario.name, p)].adopted) for p in columns],
            f"{seq.runs_per_arm:.2f}",
            f"{seq.rates['equivalent'].pct:.1f} / {seq.rates['inconclusive'].pct:.1f}",
            f"{seq.rates['regression'].pct:.2f}"]) + " |")
    return "\n".join(lines)


def target_table(draws: int) -> str:
    """The issues' targets for the sequential policy (every row of simulate.TARGETS), version 4 and the classic
    rule beside."""
    jobs = [job for scenario, _ in TARGETS for job in (("sequential", scenario, draws, None),
                                                       ("sequential", scenario, draws, V4),
                                                       ("classic", scenario, draws, None))
            if scenario.guard_drop is None or job[0] == "sequential"]
    by = {(r.scenario.name, r.label): r for r in simulate_all(jobs)}
    lines = [f"| scenario | target | sequential % (the rate the target bounds) | regression % | runs/arm | met | v{V4} % | v{V4} regression % | "
             f"v{V4} runs/arm | v{V4} met | classic % (n = 3, abab) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def rate_of(r: SimulationResult) -> Rate:
        """The rate the row's target bounds: a guard's false pass, equivalence (a change of the mean), else
        adoption."""
        if r.guard_pass is not None:
            return r.guard_pass
        return r.rates["equivalent"] if target_of("sequential", r.scenario) == NOT_EQUIVALENT else r.adopted

    def verdict(r: SimulationResult) -> str:
        return "yes" if meets(r) else f"**not met**: {rate_of(r).pct:.2f} %"

    for scenario, target in TARGETS:
        r, old = by[(scenario.name, "sequential")], by[(scenario.name, f"sequential v{V4}")]
        classic = by.get((scenario.name, "classic"))
        lines.append(f"| {scenario.name} | {target} | {cell(rate_of(r))} | {r.rates['regression'].pct:.2f} | "
                     f"{r.runs_per_arm:.2f} | {verdict(r)} | {cell(rate_of(old))} | "
                     f"{old.rates['regression'].pct:.2f} | {old.runs_per_arm:.2f} | {verdict(old)} | "
                     f"{cell(classic.adopted) if classic else '—'} |")
    return "\n".join(lines)


def classic_table(draws: int) -> str:
    """The classic rule at n = 3 as a gate decides it, rules.max_threshold_pct = 10 % (a gate file's default):
    every outcome, and how many gates `gate simulate` called rejected before it applied the limit."""
    scenarios = [Scenario(cv_off_pct=cv, effect_pct=effect, name=f"{f'−{-effect:g} %' if effect else 'A/A'}, "
                                                                  f"CV {cv:g} %")
                 for effect, cvs in ((0.0, (0.5, 2.0, 3.0, 5.0, 8.0)), (-10.0, (3.0, 5.0, 8.0))) for cv in cvs]
    lines = ["| scenario | adopted % | regression % | rejected % | inconclusive % | rejected % with no limit |",
             "| --- | --- | --- | --- | --- | --- |"]
    for scenario in scenarios:
        r = simulate("classic", scenario, draws=draws, seed=SEED)
        unlimited = simulate("classic", scenario, draws=draws, seed=SEED, max_threshold_pct=0.0)
        lines.append(f"| {scenario.name} | {cell(r.adopted)} | {cell(r.rates['regression'])} | "
                     f"{cell(r.rates['rejected'])} | {cell(r.rates['inconclusive'])} | "
                     f"{cell(unlimited.rates['rejected'])} |")
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


def v2_codes(off_log: np.ndarray, on_log: np.ndarray, floor_pct: float = 1.0) -> np.ndarray:
    """The sequential policy before v3, for comparison: Welch t on log values, df = min(n) − 1, one-sided
    α = 0.0325 per look, the same floor and outcomes, unpaired."""
    alpha, (first, last) = 0.0325, SEQUENTIAL.design.runs[:2]  # v2 looked at 4, then 8 runs per arm
    g_adopt, g_regress = gain_bounds(floor_pct, "lower")
    f = floor_pct / 100

    def look(n: int, final: bool) -> np.ndarray:
        diff, se, df = welch_arrays(off_log[:, :n], on_log[:, :n], "conservative")
        lo, hi = ci_arrays(diff, se, df, 1 - 2 * alpha)
        adopted = (p_better_arrays(diff, se, df, "lower") < alpha) & (-diff >= g_adopt)
        regression = (p_better_arrays(diff, se, df, "higher") < alpha) & (-diff <= g_regress)
        equivalent = (lo > math.log1p(-f)) & (hi < math.log1p(f))
        rejected = -lo < g_adopt
        return np.select([adopted, regression, equivalent, rejected], [ADOPTED, REGRESSION, EQUIVALENT, REJECTED],
                         default=INCONCLUSIVE if final else CONTINUE)

    look1 = look(first, False)
    return np.where(look1 != CONTINUE, look1, look(last, True))


def df_table(draws: int) -> str:
    """v2 (Welch, α 0.0325 per look), v3 (two looks) and v4 against v5 on the rows where the issue measured v2
    failing; the same simulated gates for all (v2 and v3 read their first 8 rounds)."""
    names = ("A/A, σ_on = 10σ_off (1 → 10 %)", "A/A, σ_on = 10σ_off (3 → 30 %)", "A/A, CV 2 %, t tails df 3",
             "−2 %, CV 0.5 %, drift −0.5 %/run", "−2 %, CV 0.5 %, outliers 5 % × +10 %",
             "−5 %, CV 2 %, outliers 5 % × +10 %", "−2 %, CV 0.5 %, t tails df 3")
    lines = ["| scenario | adopted %, v2 (Welch, α 0.0325 per look) | adopted %, v3 (4, then 8) | "
             "adopted %, v4 | adopted %, v5 (the policy) |",
             "| --- | --- | --- | --- | --- |"]
    for scenario in (s for s in SUITE if s.name in names):
        off, on, _, _ = simulate_runs(scenario, "thue-morse", SEQUENTIAL.design.runs[-1], draws, np.random.default_rng(SEED))
        v3, _ = policy_for("sequential", 3).simulate(off[:, :8], on[:, :8], ThresholdSpec())
        v4, _ = policy_for("sequential", 4).simulate(off, on, ThresholdSpec())
        v5, _ = SEQUENTIAL.simulate(off, on, ThresholdSpec())
        lines.append(f"| {scenario.name} | {cell(Rate.of(v2_codes(off, on) == ADOPTED))} | "
                     f"{cell(Rate.of(v3 == ADOPTED))} | {cell(Rate.of(v4 == ADOPTED))} | "
                     f"{cell(Rate.of(v5 == ADOPTED))} |")
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


def duet_block(name: str) -> str:
    """A duet block: duet_calibration's table with its own draws and seed, and the line that says them."""
    spec = duet_calibration.DOC_BLOCKS[name]
    return duet_calibration.make_table(spec.table, spec.draws, spec.seed, pool_map) + "\n\n" + \
        duet_calibration.footer(name)


CENSORED_DRAWS = 20_000  # the censored policy fits each gate by Newton's method: 20 000 gates a row, SE ≤ 0.3 %


def censored_table() -> str:
    """The censored policy's rows (simulate.CENSORED_ROWS): times to a target, some runs censored."""
    results = simulate_all([("censored", scenario, CENSORED_DRAWS, None) for scenario, _ in CENSORED_ROWS])
    lines = ["| scenario | target | adopted % | regression % | equivalent / inconclusive % | runs/arm | met |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for (scenario, target), r in zip(CENSORED_ROWS, results):
        lines.append(f"| {scenario.name} | {target} | {cell(r.adopted)} | {r.rates['regression'].pct:.2f} | "
                     f"{r.rates['equivalent'].pct:.1f} / {r.rates['inconclusive'].pct:.1f} | {r.runs_per_arm:.0f} | "
                     f"{'yes' if meets(r) else 'NO'} |")
    return "\n".join(lines)


LARGE_N_DRAWS = 20_000  # 200 runs per arm a gate: 20 000 gates a row, SE ≤ 0.16 %
CAMPAIGNS = 2_000  # campaigns of 100 gates a row
CAMPAIGN_ROWS = (("classic", 3), ("classic", 6), ("sequential", 3))  # (policy, n per arm of a fixed-n gate)


def large_n_table() -> str:
    """The robust policy's rows (simulate.LARGE_N_ROWS): hundreds of heavy-tailed runs per arm, the classic rule
    beside it on the same runs."""
    results = simulate_all([(policy, scenario, LARGE_N_DRAWS, None) for scenario, _ in LARGE_N_ROWS
                            for policy in ("robust", "classic")])
    lines = ["| scenario | target | robust adopted % | regression % | rejected % | equivalent / inconclusive % | met | "
             "classic adopted % | classic inconclusive % |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (scenario, target), robust, classic in zip(LARGE_N_ROWS, results[::2], results[1::2]):
        lines.append(f"| {scenario.name} | {target} | {cell(robust.adopted)} | {robust.rates['regression'].pct:.2f} | "
                     f"{robust.rates['rejected'].pct:.1f} | {robust.rates['equivalent'].pct:.1f} / "
                     f"{robust.rates['inconclusive'].pct:.1f} | {'yes' if meets(robust) else 'NO'} | "
                     f"{cell(classic.adopted)} | {classic.rates['inconclusive'].pct:.1f} |")
    return "\n".join(lines)


def campaign_table() -> str:
    """A campaign's false discovery rate (gate simulate --campaign): 90 null and 10 real (−2 %, CV 0.5 %) gates,
    each policy's own decisions beside those Benjamini–Hochberg keeps at 5 %."""
    from gatekit.fdr_simulation import CampaignScenario, simulate_campaigns

    lines = ["| policy | FDR own rule % | FDR controlled % | power own rule % | power controlled % | "
             "false discoveries / campaign (own → controlled) |", "| --- | --- | --- | --- | --- | --- |"]
    for policy, n in CAMPAIGN_ROWS:
        r = simulate_campaigns(policy, CampaignScenario(Scenario(cv_off_pct=0.5, effect_pct=-2.0, n=n)),
                               campaigns=CAMPAIGNS, seed=SEED)
        name = policy if describe(policy).fixes_schedule else f"{policy}, n = {n}"
        lines.append(f"| {name} | {cell(r.fdr_own)} | {cell(r.fdr_controlled)} | {cell(r.power_own)} | "
                     f"{cell(r.power_controlled)} | {r.false_own:.3f} → {r.false_controlled:.3f} |")
    return "\n".join(lines)


# Every block of docs/statistics.md (`<!-- simulate:NAME:begin -->` … `<!-- simulate:NAME:end -->`) and what
# writes it, from the parsed arguments; tests/test_docs.py checks that the page and this agree.
BLOCKS: dict[str, Callable[[argparse.Namespace], str]] = {
    "suite": lambda args: suite_table(args.draws), "targets": lambda args: target_table(args.big_draws),
    "classic": lambda args: classic_table(args.draws), "orders": lambda args: order_table(args.draws),
    "df": lambda args: df_table(args.draws), "timing": lambda args: timing_table(),
    "censored": lambda args: censored_table(),
    "large-n": lambda args: large_n_table(), "campaign": lambda args: campaign_table(),
    **{name: (lambda args, name=name: duet_block(name)) for name in duet_calibration.DOC_BLOCKS},
}


def replace_block(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- simulate:{name}:begin -->\n).*?(<!-- simulate:{name}:end -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"docs: marker simulate:{name} missing")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, required=True)
    parser.add_argument("--draws", type=int, default=200_000)
    parser.add_argument("--big-draws", type=int, default=200_000, help="gates per cell of the targets table")
    parser.add_argument("--only", action="append", default=[],
                        help="regenerate only this block (repeatable; default: every block)")
    parser.add_argument("--jobs", type=int, default=1, help="processes for the cells (the numbers do not change)")
    args = parser.parse_args()
    global JOBS
    JOBS = args.jobs
    text = args.write.read_text()
    unknown = set(args.only) - set(BLOCKS)
    if unknown:
        raise SystemExit(f"--only: no block {', '.join(sorted(unknown))} (blocks: {', '.join(BLOCKS)})")
    blocks = {name: make for name, make in BLOCKS.items() if not args.only or name in args.only}
    for name in blocks:  # every marker first, before minutes of simulation
        replace_block(text, name, "")
    began_all = time.perf_counter()
    for name, make in blocks.items():
        began = time.perf_counter()
        text = replace_block(text, name, make(args))
        print(f"{name}: done in {time.perf_counter() - began:.0f} s", flush=True)
    args.write.write_text(text)
    print(f"all {len(blocks)} block(s): {time.perf_counter() - began_all:.0f} s with --jobs {JOBS}")


if __name__ == "__main__":
    main()

"""The duet policy's error rates, checked by simulation (gatekit/policies/duet.py holds the rule), its default
number of pairs, and its precision against interleaving at equal wall time.

Version 1 (slots swapped every pair, OLS, Student t with n − 2 df) needed no calibrated constant; version 2
(Thue–Morse slots with a drawn mirror, the Huber M-estimate, sandwich SE) takes its critical values from
benchmarks/duet_critical.py; version 3 (v2's slots and fit) takes them from the same script's `--family
two-states`, the largest over normal noise and two speed states. Tables (v3 beside v2, and v1 where it was shown):

- `suite`: `gate simulate --suite` under the three versions side by side (the same seed 0), with the duet's
  targets.
- `rates`: false adoption and power of the versions where the exact t of v1 does not hold: slots that differ
  in noise, an arm noisier than the other, heavy tails, outliers — always with a ±1 % slot effect and 10 %
  shared noise, the measured situation of two GPUs of one host.
- `pairs`: the duet's targets against the number of pairs (the trade-off that chose the default).
- `two-states-pairs`: the largest false adoption and false regression over the 18 two-state A/A rows at every
  even number of pairs from 4 to 32, v3 (from 10) beside v2, with v3's critical value (issue 30: ≤ 5 % at
  every n v3 runs).
- `wall`: the median width of the two-sided 95 % CI of Δ of a duet of 2k pairs against an interleaved gate of
  k + k runs (equal wall time: a pair costs the slower of its two runs, about one run) on the suite's scenarios.
- `two-states`: the suite's two-state rows (each run slow by m % with probability p) under the versions, false
  adoption and false regression side by side (the `suite` table's own cells: the same draws).
- `two-states-why`: why version 2 goes above the level at p 0.5: its studentized Δ̂ against the calibrated c,
  split by whether the fit ended as least squares, the c that each mixture would need, and what a c calibrated
  under the two-state mixtures too would cost in power (a proposal, not a design: version 2 is unchanged).

Most rows run `gatekit.simulate.simulate` (the function behind `gate simulate --policy duet`, `duet-v2`,
`duet-v1`); the
rows with unequal slot noise and the CI widths draw their own runs and score them with the policy's own design.

Run: .venv/bin/python benchmarks/duet_calibration.py [--draws N] [--seed S] [--table suite|rates|pairs|wall|…]
`make statistics` (benchmarks/statistics_tables.py) writes each table into docs/statistics.md from the functions
here (DOC_BLOCKS: the block, its table, its draws and seed), spread over its --jobs processes.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

import numpy as np

from gatekit.diagnostics import ci_arrays, welch_arrays
from gatekit.policies.duet import ALPHA, DESIGNS, HUBER_K, MAD_NORMAL, TEST_ALPHA, DuetDesign, two_state_critical
from gatekit.policy_descriptors import describe
from gatekit.policies.sequential import gain_bounds, look_codes
from gatekit.simulate import (DUET_ROWS, FALSE_EITHER, POWER_ANY_RUNS, TARGETS, Scenario, SimulationResult, meets,
                              simulate, simulate_runs, suite_cells, suite_pairs, target_of)
from gatekit.verdict import ADOPTED, REGRESSION

# How a table's cells are computed: the builtin map (one process) or a process pool's map (statistics_tables
# --jobs); every cell is its own seeded simulation, so the figures do not depend on which.
Pool = Callable[[Callable[[Any], Any], Iterable[Any]], Iterable[Any]]

SEED = 20261201
VERSIONS = ("duet", "duet-v2", "duet-v1")  # v3 (the current design), v2, v1
DESIGN_OF = {"duet": 3, "duet-v2": 2, "duet-v1": 1}
LABEL = {"duet": "v3", "duet-v2": "v2", "duet-v1": "v1"}


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    n: int
    meaning: str  # false adoption | power
    rates: tuple[tuple[float, float] | None, ...]  # (adopted %, its SE) per version, VERSIONS' order; None: n too few


def runs(policy: str, n: int) -> bool:
    """Whether a duet version decides from n pairs (version 3: at least 8)."""
    return n >= describe(policy).min_n


def _simulated(job: tuple[str, Scenario, int, int, int | None]) -> SimulationResult | None:
    """One cell: `gate simulate --policy P` of one scenario (a process pool's unit of work); None where the
    version cannot run that many pairs."""
    policy, scenario, draws, seed, version = job
    if not runs(policy, scenario.n):
        return None
    return simulate(policy, scenario, draws=draws, seed=seed, version=version)


def _rate(hits: np.ndarray) -> tuple[float, float]:
    p = float(np.mean(hits))
    return 100 * p, 100 * math.sqrt(p * (1 - p) / hits.size)


def unequal_slots(design: DuetDesign, n: int, cv_slot0_pct: float, cv_slot1_pct: float, effect_pct: float,
                  draws: int, rng: np.random.Generator) -> np.ndarray:
    """Adopted or not, per gate, when a run on slot 1 is noisier than one on slot 0 (shared noise and the
    slot effect cancel or are removed, so they are left out here)."""
    s0, s1 = (math.sqrt(math.log1p((cv / 100) ** 2)) for cv in (cv_slot0_pct, cv_slot1_pct))
    on_slot1 = design.on_slot1(n, draws, rng)
    off = np.where(on_slot1, s0, s1) * rng.standard_normal((draws, n))
    on = math.log1p(effect_pct / 100) + np.where(on_slot1, s1, s0) * rng.standard_normal((draws, n))
    signs = design.signs(np.arange(1, n + 1))
    return design.codes(on - off, signs, floor_pct=1.0, direction="lower") == ADOPTED


def _unequal_rate(job: tuple[int, int, int, int]) -> tuple[float, float] | None:
    """One cell of the unequal-slot rows: version, pairs, draws, seed → adopted % and its SE."""
    version, n, draws, seed = job
    if n < DESIGNS[version].min_pairs:
        return None
    return _rate(unequal_slots(DESIGNS[version], n, 2.0, 8.0, 0.0, draws, np.random.default_rng(seed)))


def rate_rows(draws: int, seed: int, pool: Pool = map) -> list[Row]:
    host = {"shared_cv_pct": 10.0}
    cases: list[tuple[str, dict[str, float]]] = [
        ("A/A, CV 5 %, slot +1 %", {"cv_off_pct": 5.0, "slot_effect_pct": 1.0}),
        ("A/A, CV 5 %, slot −1 %", {"cv_off_pct": 5.0, "slot_effect_pct": -1.0}),
        ("A/A, CV 20 %, slot +1 %", {"cv_off_pct": 20.0, "slot_effect_pct": 1.0}),
        ("A/A, CV 0.5 %, slot +1 %", {"cv_off_pct": 0.5, "slot_effect_pct": 1.0}),
        ("A/A, CV 2 % / on 8 %, slot +1 %", {"cv_off_pct": 2.0, "cv_on_pct": 8.0, "slot_effect_pct": 1.0}),
        ("A/A, CV 5 %, t tails df 3, slot +1 %", {"cv_off_pct": 5.0, "tails": 3.0, "slot_effect_pct": 1.0}),
        ("A/A, CV 5 %, outliers 5 % × +10 %, slot +1 %",
         {"cv_off_pct": 5.0, "outlier_rate": 0.05, "outlier_pct": 10.0, "slot_effect_pct": 1.0}),
        ("−1 %, CV 0.5 %, slot +1 %", {"cv_off_pct": 0.5, "effect_pct": -1.0, "slot_effect_pct": 1.0}),
        ("−2 %, CV 0.5 %, slot +1 %", {"cv_off_pct": 0.5, "effect_pct": -2.0, "slot_effect_pct": 1.0}),
        ("−2 %, CV 2 %, slot +1 %", {"cv_off_pct": 2.0, "effect_pct": -2.0, "slot_effect_pct": 1.0}),
        ("−5 %, CV 2 %, slot −1 %", {"cv_off_pct": 2.0, "effect_pct": -5.0, "slot_effect_pct": -1.0}),
    ]
    sizes = (4, 8, 12)  # version 3 runs from 8 pairs: "—" at 4
    jobs = [(v, Scenario(n=n, **host, **fields), draws, seed, None)  # type: ignore[arg-type]
            for _, fields in cases for n in sizes for v in VERSIONS]
    results = iter(list(pool(_simulated, jobs)))
    found = []
    for name, _ in cases:
        for n in sizes:
            cell = [next(results) for _ in VERSIONS]
            meaning = next(r.meaning for r in cell if r is not None)
            found.append(Row(name + ", shared 10 %", n, meaning,
                             tuple((r.adopted.pct, r.adopted.se_pct) if r is not None else None for r in cell)))
    unequal = iter(list(pool(_unequal_rate, [(DESIGN_OF[v], n, draws, seed) for n in sizes for v in VERSIONS])))
    for n in sizes:
        found.append(Row("A/A, slot 0 CV 2 % / slot 1 CV 8 %", n, "false adoption",
                         tuple(next(unequal) for _ in VERSIONS)))
    return found


def rates_table(found: list[Row]) -> str:
    """The rows of `rate_rows`, and the largest false adoption of versions 3 and 2 among them."""
    versions = " | ".join(f"duet {LABEL[v]} adopted %" for v in VERSIONS)
    lines = [f"| scenario | pairs | {versions} | means | target |",
             "|" + " --- |" * (len(VERSIONS) + 4)]
    for r in found:
        target = f"≤ {100 * ALPHA:g} %" if r.meaning == "false adoption" else "(shown)"
        cells = " | ".join(f"{rate[0]:.2f} ± {rate[1]:.2f}" if rate else "—" for rate in r.rates)
        lines.append(f"| {r.scenario} | {r.n} | {cells} | {r.meaning} | {target} |")
    for which in (0, 1):
        rows = [r for r in found if r.meaning == "false adoption" and r.rates[which] is not None]
        worst = max(rows, key=lambda r: r.rates[which][0])  # type: ignore[index]
        pct, se = worst.rates[which]  # type: ignore[misc]
        lines.append(f"\nlargest {LABEL[VERSIONS[which]]} false adoption: {pct:.2f} ± {se:.2f} % "
                     f"({worst.scenario}, n {worst.n})")
    return "\n".join(lines)


PAIRS = (4, 6, 8, 10, 12, 16)


def pairs_table(draws: int, seed: int, pool: Pool = map) -> str:
    """Issue 18's duet targets at each number of pairs, versions 3, 2 and 1 (version 3 from 8 pairs)."""
    power = next(s for s, _ in TARGETS if s.name == "−2 %, CV 0.5 %, outliers 5 % × +10 %")
    rows = [(s, t) for s, t in DUET_ROWS] + [(power, "power ≥ 95 %")]

    def at(scenario: Scenario, n: int) -> Scenario:  # a late step stays within the pairs run
        return replace(scenario, n=n, slot_step_from=scenario.slot_step_from if scenario.slot_step_from is None
                       or abs(scenario.slot_step_from) <= n else -n)

    jobs = [(v, at(scenario, n), draws, seed, None) for scenario, _ in rows for n in PAIRS for v in VERSIONS]
    adopted = iter([r.adopted.pct if r is not None else None for r in pool(_simulated, jobs)])
    header = ["scenario", "target", *[f"{n} pairs v3 / v2 / v1 %" for n in PAIRS]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]

    def shown(pct: float | None, target: str) -> str:
        if pct is None:
            return "—"
        ok = pct <= 5.0 if "false" in target else pct >= 95.0
        return f"{pct:.2f}{'' if ok else ' ✗'}"

    for scenario, target in rows:
        cells = []
        for _ in PAIRS:
            v3, v2, v1 = next(adopted), next(adopted), next(adopted)
            cells.append(f"{shown(v3, target)} / {shown(v2, target)} / {v1:.2f}")
        lines.append(f"| {scenario.name} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


TWO_STATE_PAIRS = tuple(range(4, 33, 2))  # every number of pairs a duet may run up to 32


def _two_state_cell(job: tuple[str, Scenario, int, int]) -> tuple[float, float] | None:
    policy, scenario, draws, seed = job
    result = _simulated((policy, scenario, draws, seed, None))
    return None if result is None else (result.adopted.pct, result.rates["regression"].pct)


def two_state_pairs_table(draws: int, seed: int, pool: Pool = map) -> str:
    """Issue 30 item 8: the largest false adoption and false regression over the 18 two-state A/A rows (runs slow
    by m % with probability p, CV 0.5 and 2 %) at every even number of pairs, v3 beside v2 (v3 from its fewest
    pairs), with v3's critical value."""
    rows = [s for s in TWO_STATE_ROWS if s.outlier_rate and not s.outlier_on_only]
    jobs = [(policy, replace(s, n=n), draws, seed) for n in TWO_STATE_PAIRS for s in rows
            for policy in ("duet", "duet-v2")]
    cells = iter(list(pool(_two_state_cell, jobs)))
    lines = ["| pairs | v3 c | v3 largest adopted % | v3 largest regression % | v2 largest adopted % | "
             "v2 largest regression % | v3 / v2 at most 5 % |", "|" + " --- |" * 7]
    for n in TWO_STATE_PAIRS:
        found = [(next(cells), next(cells)) for _ in rows]
        v3 = [c for c, _ in found if c is not None]
        v2 = [c for _, c in found if c is not None]
        critical = two_state_critical(n)
        level = "— (too few pairs)" if math.isnan(critical) else f"{critical:.4f}"
        v3_cells = (f"{max(a for a, _ in v3):.2f} | {max(r for _, r in v3):.2f}" if v3 else "— | —")
        v2_adopt, v2_regress = max(a for a, _ in v2), max(r for _, r in v2)
        ok3 = "—" if not v3 else "yes" if max(max(a, r) for a, r in v3) <= 5.0 else "**no**"
        ok2 = "yes" if max(v2_adopt, v2_regress) <= 5.0 else "**no**"
        lines.append(f"| {n} | {level} | {v3_cells} | {v2_adopt:.2f} | {v2_regress:.2f} | {ok3} / {ok2} |")
    return "\n".join(lines)


WALL_K = (2, 3, 4, 6, 8)  # interleaved runs per arm; the duet runs 2k pairs in the same wall time


def ci_widths(scenario: Scenario, k: int, draws: int, seed: int) -> tuple[float, float, float, float]:
    """Median widths (in log points ×100) of the 95 % CI of Δ: duet v3, v2 and v1 of 2k pairs, interleaved
    k + k (the Welch CI every interleaved finding reports, on the gate's default abab order); nan where v3
    cannot run 2k pairs."""
    rng = np.random.default_rng(seed)
    n = 2 * k
    widths = []
    for version in (3, 2, 1):
        design = DESIGNS[version]
        on_slot1 = design.on_slot1(n, draws, rng)
        off, on, _, _ = simulate_runs(replace(scenario, order=None), "abab", n, draws, rng, concurrent=True,
                                      on_slot1=on_slot1)
        signs = design.signs(np.arange(1, n + 1))
        if n < design.min_pairs:
            widths.append(math.nan)
            continue
        delta, se, _, _ = design.fit_arrays(on - off, signs)
        widths.append(float(np.nanmedian(2 * design.critical(n, 0.025) * se)))
    off, on, _, _ = simulate_runs(replace(scenario, order=None), "abab", k, draws, rng)
    diff, se, df = welch_arrays(off, on)
    lo, hi = ci_arrays(diff, se, df, 0.95)
    widths.append(float(np.nanmedian(hi - lo)))
    return widths[0] * 100, widths[1] * 100, widths[2] * 100, widths[3] * 100


def _widths(job: tuple[Scenario, int, int, int]) -> tuple[float, float, float, float]:
    return ci_widths(*job)


def wall_table(draws: int, seed: int, pool: Pool = map) -> str:
    scenarios = [s for s, _ in TARGETS if s.guard_drop is None]
    widths = iter(list(pool(_widths, [(scenario, k, draws, seed) for scenario in scenarios for k in WALL_K])))
    header = ["scenario", *[f"{2 * k} pairs vs {k} + {k}: v3 / v2 / v1 / interleaved" for k in WALL_K]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    ratios: dict[tuple[int, int], list[float]] = {(k, v): [] for k in WALL_K for v in (3, 2)}
    for scenario in scenarios:
        cells = []
        for k in WALL_K:
            v3, v2, v1, inter = next(widths)
            ratios[(k, 2)].append(v2 / inter)
            if not math.isnan(v3):
                ratios[(k, 3)].append(v3 / inter)
            cells.append(f"{'—' if math.isnan(v3) else f'{v3:.2f}'} / {v2:.2f} / {v1:.2f} / {inter:.2f}")
        lines.append(f"| {scenario.name} | " + " | ".join(cells) + " |")
    for version in (3, 2):
        lines.append(f"| **largest v{version} / interleaved** | " + " | ".join(
            f"**{max(ratios[(k, version)]):.2f}×**" if ratios[(k, version)] else "—" for k in WALL_K) + " |")
    return "\n".join(lines)


_SUITES: dict[tuple[int, int], list[SimulationResult]] = {}  # the suite and two-states tables share its cells


def suite_results(draws: int, seed: int, pool: Pool = map) -> list[SimulationResult]:
    """`gate simulate --suite --policy duet --policy duet-v2 --policy duet-v1` (gatekit.simulate.run_suite's
    cells), once per draws and seed."""
    if (draws, seed) not in _SUITES:
        jobs = [(policy, scenario, draws, seed, version) for policy, scenario, version in suite_cells(VERSIONS)]
        _SUITES[(draws, seed)] = list(pool(_simulated, jobs))
    return _SUITES[(draws, seed)]


def suite_table(results: list[SimulationResult]) -> str:
    """`gate simulate --suite --policy duet --policy duet-v2 --policy duet-v1` side by side: every row, its
    target for the current duet, versions 3 and 2 at their default pairs and version 1 at its suite's 8; met:
    version 3, then version 2 held to the same target."""
    by = {(r.scenario.name, r.policy): r for r in results}
    lines = ["| scenario | target (duet) | duet v3, 12 pairs: adopted % | v3 regression % | duet v2, 12 pairs: "
             "adopted % | duet v1, 8 pairs: adopted % | means | v3 inconclusive % | met v3 / v2 |",
             "|" + " --- |" * 9]

    def met_words(result: SimulationResult, as_current: SimulationResult) -> str:
        met = meets(replace(result, policy=as_current.policy))  # v2 read against the current duet's target
        return "—" if met is None else "yes" if met else "**not met**"

    for name in dict.fromkeys(r.scenario.name for r in results):
        v3, v2, v1 = by[(name, "duet")], by[(name, "duet-v2")], by[(name, "duet-v1")]
        lines.append(f"| {name} | {target_of('duet', v3.scenario) or '—'} | {v3.adopted.pct:.2f} ± "
                     f"{v3.adopted.se_pct:.2f} | {v3.rates['regression'].pct:.2f} | {v2.adopted.pct:.2f} ± "
                     f"{v2.adopted.se_pct:.2f} | {v1.adopted.pct:.2f} ± {v1.adopted.se_pct:.2f} | {v3.meaning} | "
                     f"{v3.rates['inconclusive'].pct:.1f} | {met_words(v3, v3)} / {met_words(v2, v3)} |")
    return "\n".join(lines)


TWO_STATE_ROWS = tuple(s for s, target in TARGETS if target == FALSE_EITHER)  # p × m at CV 0.5 % and 2 %
TWO_STATE_POWER = next(s for s, target in TARGETS if target == POWER_ANY_RUNS)


def two_state_table(results: list[SimulationResult]) -> str:
    """The suite's two-state rows under the versions (the suite's own cells), false regression beside false
    adoption: a duet of two runs at once sees both arms' states as independent, just as an interleaved gate."""
    by = {(r.scenario.name, r.policy): r for r in results}
    lines = ["| scenario | duet v3, 12 pairs: adopted % | v3 regression % | duet v2, 12 pairs: adopted % | "
             "v2 regression % | v2 inconclusive % | duet v1, 8 pairs: adopted % | v1 regression % | means |",
             "|" + " --- |" * 9]
    for scenario in (*TWO_STATE_ROWS, TWO_STATE_POWER):
        v3, v2, v1 = (by[(scenario.name, policy)] for policy in VERSIONS)
        lines.append(f"| {scenario.name} | {v3.adopted.pct:.2f} ± {v3.adopted.se_pct:.2f} | "
                     f"{v3.rates['regression'].pct:.2f} ± {v3.rates['regression'].se_pct:.2f} | "
                     f"{v2.adopted.pct:.2f} ± {v2.adopted.se_pct:.2f} | "
                     f"{v2.rates['regression'].pct:.2f} ± {v2.rates['regression'].se_pct:.2f} | "
                     f"{v2.rates['inconclusive'].pct:.1f} | {v1.adopted.pct:.2f} ± {v1.adopted.se_pct:.2f} | "
                     f"{v1.rates['regression'].pct:.2f} ± {v1.rates['regression'].se_pct:.2f} | {v3.meaning} |")
    return "\n".join(lines)


def pair_log_ratios(scenario: Scenario, draws: int, seed: int) -> np.ndarray:
    """[draws, pairs] d = ln on − ln off of the gates `gate simulate --policy duet` draws for this scenario and
    seed: the slots first where they differ, then the runs, as it draws them (in one chunk)."""
    design = DESIGNS[2]
    rng = np.random.default_rng(seed)
    on_slot1 = design.on_slot1(scenario.n, draws, rng) if scenario.changes_slots else None
    off, on, _, _ = simulate_runs(scenario, "duet", scenario.n, draws, rng, concurrent=True, on_slot1=on_slot1)
    return on - off


def version_2_fit(job: tuple[Scenario, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Δ̂, SE, whether the fit ended as least squares) of version 2 on those gates. Least squares: every
    residual within k·s, so no pair was down-weighted."""
    d = pair_log_ratios(*job)
    signs = DESIGNS[2].signs(np.arange(1, d.shape[-1] + 1))
    delta, se, slot, _ = DESIGNS[2].fit_arrays(d, signs)
    residual = np.abs(d - delta[:, None] - slot[:, None] * signs)
    scale = np.median(residual, axis=-1) / MAD_NORMAL
    return delta, se, np.all(residual <= HUBER_K * scale[:, None], axis=-1)


# The rows the proposal's cost is read on: the duet's power targets, the suite's two-state power row, normal noise
# of CV 2 % (its false adoption) and the rates table's −2 % at CV 2 % behind a slot effect and shared noise.
PROPOSAL_ROWS = (*(s for s, _ in TARGETS if s.name in ("−2 %, CV 0.5 %, outliers 5 % × +10 %",
                                                         "−5 %, CV 2 %, outliers 5 % × +10 %", "−5 %, CV 2 %",
                                                         "A/A, CV 2 %")),
                 TWO_STATE_POWER,
                 Scenario(cv_off_pct=2.0, effect_pct=-2.0, shared_cv_pct=10.0, slot_effect_pct=1.0,
                          name="−2 %, CV 2 %, slot +1 %, shared 10 %"))


def two_state_why_table(draws: int, seed: int, pool: Pool = map) -> str:
    """Version 2 on the two-state rows: the rate at which Δ̂/SE passes c (the test alone, no floor), that rate
    among gates whose fit ended as least squares and among the rest, and the c each mixture needs (the
    1 − 2·TEST_ALPHA quantile of |Δ̂/SE|, as benchmarks/duet_critical.py takes it under normal noise). Then the
    proposal: c* = the largest of those, and what it does to both errors and to the power rows."""
    n = suite_pairs("duet")
    c = float(DESIGNS[2].critical(n, TEST_ALPHA))
    rows = [replace(s, n=n) for s in (*TWO_STATE_ROWS, *PROPOSAL_ROWS)]
    fits = list(pool(version_2_fit, [(s, draws, seed) for s in rows]))
    needed = [float(np.quantile(np.abs(delta / se)[np.isfinite(delta / se)], 1 - 2 * TEST_ALPHA))
              for delta, se, _ in fits[:len(TWO_STATE_ROWS)]]
    c_star = max(needed)

    def codes(delta: np.ndarray, se: np.ndarray, critical: float) -> np.ndarray:
        return look_codes(delta, se, floor_pct=1.0, direction="lower", final=True, critical=critical)

    def pct(hits: np.ndarray) -> str:
        return f"{100 * float(np.mean(hits)):.2f}" if hits.size else "—"

    lines = [f"| scenario (12 pairs) | v2 adopted % | v2 regression % | Δ̂/SE beyond c = {c:.3f}, better side % | "
             "fit ended as least squares: share % | … its adopted % | the rest: adopted % | c needed | "
             f"c* = {c_star:.3f}: adopted % | c*: regression % |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for scenario, (delta, se, ls), need in zip(rows, fits, needed):
        now, then = codes(delta, se, c), codes(delta, se, c_star)
        lines.append(f"| {scenario.name} | {pct(now == ADOPTED)} | {pct(now == REGRESSION)} | "
                     f"{pct(-delta / se > c)} | {pct(ls)} | {pct(now[ls] == ADOPTED)} | {pct(now[~ls] == ADOPTED)} | "
                     f"{need:.3f} | {pct(then == ADOPTED)} | {pct(then == REGRESSION)} |")
    lines += ["", "| the proposal's cost (12 pairs) | means | v2 adopted % | c*: adopted % |", "| --- | --- | --- | --- |"]
    for scenario, (delta, se, _) in zip(rows[len(TWO_STATE_ROWS):], fits[len(TWO_STATE_ROWS):]):
        meaning = "power" if scenario.effect_pct < 0 else "false adoption"
        lines.append(f"| {scenario.name} | {meaning} | {pct(codes(delta, se, c) == ADOPTED)} | "
                     f"{pct(codes(delta, se, c_star) == ADOPTED)} |")
    return "\n".join(lines)


SIGN_FLIP_ROWS = ("A/A, CV 0.5 %, two states 50 % × +20 %", "A/A, CV 0.5 %, two states 50 % × +5 %",
                  "A/A, CV 2 %", "−2 %, CV 0.5 %, outliers 5 % × +10 %", "−2 %, CV 2 %, slot +1 %, shared 10 %")


def _sign_flip_cell(job: tuple[Scenario, int, int, int]) -> tuple[float, float, float, float]:
    """Adopted and regression % of version 2 as it is, and of its Δ̂/SE read against B random relabellings of
    the pairs instead of c: pair k's (d_k, σ_k) → (−d_k, −σ_k), its off and on runs swapped (so on sits on the
    other slot). Under A/A with a pair's two runs exchangeable — normal or not, two states included — that
    leaves each pair's law unchanged; the slot order does change (relabelled series are not in Thue–Morse
    order), so the test is exact only for a slot order drawn pair by pair, and otherwise as close as the law
    of Δ̂/SE is to not depending on the order. p = (1 + #{relabelled Δ̂/SE at least as good}) / (1 + B)
    (Phipson & Smyth 2010)."""
    scenario, draws, seed, flips = job
    design = DESIGNS[2]
    d = pair_log_ratios(scenario, draws, seed)
    signs = design.signs(np.arange(1, scenario.n + 1))
    delta, se, _, _ = design.fit_arrays(d, signs)
    t_obs = delta / se
    rng = np.random.default_rng([seed, 1])  # the relabellings, apart from the runs
    better, worse = np.zeros(draws), np.zeros(draws)
    for start in range(0, draws, 500):
        part = slice(start, min(start + 500, draws))
        relabel = np.where(rng.random((part.stop - part.start, flips, scenario.n)) < 0.5, -1.0, 1.0)
        dl, sl, _, _ = design.fit_arrays(d[part, None, :] * relabel, signs * relabel)
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.where(np.isfinite(dl / sl), dl / sl, 0.0)  # one slot order only: no statistic, counts as 0
        better[part] = (1 + (t <= t_obs[part, None]).sum(-1)) / (1 + flips)
        worse[part] = (1 + (t >= t_obs[part, None]).sum(-1)) / (1 + flips)
    g_adopt, g_regress = gain_bounds(1.0, "lower")  # the rule's floor, as look_codes reads it (gain = −Δ̂)
    codes = design.codes(d, signs, floor_pct=1.0, direction="lower")
    return (100 * float(np.mean(codes == ADOPTED)), 100 * float(np.mean(codes == REGRESSION)),
            100 * float(np.mean((better <= TEST_ALPHA) & (-delta >= g_adopt))),
            100 * float(np.mean((worse <= TEST_ALPHA) & (-delta <= g_regress))))


def sign_flip_table(draws: int, seed: int, pool: Pool = map, flips: int = 199) -> str:
    """The second proposal (a randomisation test in place of the calibrated c), on a few rows: too slow for
    `make statistics` (B Huber fits per gate), so printed only."""
    n = suite_pairs("duet")
    rows = [replace(s, n=n) for s in (*TWO_STATE_ROWS, *PROPOSAL_ROWS) if s.name in SIGN_FLIP_ROWS]
    found = list(pool(_sign_flip_cell, [(s, draws, seed, flips) for s in rows]))
    lines = [f"| scenario (12 pairs) | v2 adopted % | v2 regression % | {flips} relabellings: adopted % | "
             "relabellings: regression % |", "| --- | --- | --- | --- | --- |"]
    for scenario, (a, r, fa, fr) in zip(rows, found):
        se = 100 * math.sqrt(fa / 100 * (1 - fa / 100) / draws)
        lines.append(f"| {scenario.name} | {a:.2f} | {r:.2f} | {fa:.2f} ± {se:.2f} | {fr:.2f} |")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class DocBlock:
    """One table of docs/statistics.md's duet section: `make statistics` writes it between
    `<!-- simulate:NAME:begin -->` and its end marker, with the draws and seed its figures were measured with."""

    table: str  # --table here
    draws: int
    seed: int


DOC_BLOCKS = {
    "duet-suite": DocBlock("suite", 200_000, 0),  # the seed of `gate simulate --suite`, so the figures are its own
    "duet-pairs": DocBlock("pairs", 100_000, SEED),
    "duet-two-states-pairs": DocBlock("two-states-pairs", 200_000, 0),  # the suite's seed
    "duet-wall": DocBlock("wall", 20_000, SEED),
    "duet-rates": DocBlock("rates", 200_000, SEED),
    "duet-two-states": DocBlock("two-states", 200_000, 0),  # the suite's cells
    "duet-two-states-why": DocBlock("two-states-why", 200_000, 0),  # the same gates as the suite's
}
TABLES = (*(block.table for block in DOC_BLOCKS.values()), "sign-flip")
SIGN_FLIP = DocBlock("sign-flip", 10_000, 0)  # printed only: 199 Huber fits per gate


def make_table(table: str, draws: int, seed: int, pool: Pool = map) -> str:
    """One table, its cells over `pool`."""
    if table == "suite":
        return suite_table(suite_results(draws, seed, pool))
    if table == "two-states":
        return two_state_table(suite_results(draws, seed, pool))
    if table == "two-states-why":
        return two_state_why_table(draws, seed, pool)
    if table == "rates":
        return rates_table(rate_rows(draws, seed, pool))
    if table == "pairs":
        return pairs_table(draws, seed, pool)
    if table == "two-states-pairs":
        return two_state_pairs_table(draws, seed, pool)
    if table == "sign-flip":
        return sign_flip_table(draws, seed, pool)
    return wall_table(draws, seed, pool)


def footer(block: str, draws: int | None = None, seed: int | None = None) -> str:
    """The line under a table: its draws and seed, and the commands that print it and write it."""
    spec = DOC_BLOCKS[block]
    draws, seed = spec.draws if draws is None else draws, spec.seed if seed is None else seed
    return (f"{spec.table}: {draws} gates per cell, seed {seed}, test level {TEST_ALPHA:g} one-sided, floor 1 %; "
            f"`.venv/bin/python benchmarks/duet_calibration.py --table {spec.table} --draws {draws} --seed {seed}` "
            f"prints it, `make statistics` writes it (`benchmarks/statistics_tables.py --write docs/statistics.md "
            f"--only {block}`)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, help="gates per cell (default: the docs' own, DOC_BLOCKS)")
    parser.add_argument("--seed", type=int, help="default: the docs' own (0 for suite and two-states, else "
                                                 f"{SEED})")
    parser.add_argument("--table", choices=TABLES, nargs="*", default=list(TABLES))
    args = parser.parse_args()
    for table in args.table:
        block = next((name for name, spec in DOC_BLOCKS.items() if spec.table == table), None)
        spec = DOC_BLOCKS[block] if block else SIGN_FLIP
        draws, seed = args.draws or spec.draws, spec.seed if args.seed is None else args.seed
        began = time.monotonic()
        print(make_table(table, draws, seed))
        said = footer(block, draws, seed) if block else f"{table}: {draws} gates per cell, seed {seed}"
        print(f"\n{said}\n\n{table}: {time.monotonic() - began:.0f} s\n")


if __name__ == "__main__":
    main()

"""The duet policy's error rates, checked by simulation (gatekit/policies/duet.py holds the rule), its default
number of pairs, and its precision against interleaving at equal wall time.

Version 1 (slots swapped every pair, OLS, Student t with n − 2 df) needed no calibrated constant; version 2
(Thue–Morse slots with a drawn mirror, the Huber M-estimate, sandwich SE) takes its critical values from
benchmarks/duet_critical.py. Tables:

- `suite`: `gate simulate --suite` under both versions side by side (the same seed 0), with the duet's targets.
- `rates`: false adoption and power of both versions where the exact t of v1 does not hold: slots that differ
  in noise, an arm noisier than the other, heavy tails, outliers — always with a ±1 % slot effect and 10 %
  shared noise, the measured situation of two GPUs of one host.
- `pairs`: issue 18's duet targets against the number of pairs (the trade-off that chose the default).
- `wall`: the median width of the two-sided 95 % CI of Δ of a duet of 2k pairs against an interleaved gate of
  k + k runs (equal wall time: a pair costs the slower of its two runs, about one run) on the suite's scenarios.

Most rows run `gatekit.simulate.simulate` (the function behind `gate simulate --policy duet`, `duet-v1`); the
rows with unequal slot noise and the CI widths draw their own runs and score them with the policy's own design.

Run: .venv/bin/python benchmarks/duet_calibration.py [--draws N] [--seed S] [--table rates|pairs|wall ...]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, replace

import numpy as np

from gatekit.diagnostics import ci_arrays, welch_arrays
from gatekit.policies.duet import ALPHA, DESIGNS, TEST_ALPHA, DuetDesign
from gatekit.simulate import (DUET_ROWS, TARGETS, Scenario, SimulationResult, meets, run_suite, simulate,
                              simulate_runs, target_of)
from gatekit.verdict import ADOPTED

SEED = 20261201
DRAWS = 200_000
VERSIONS = ("duet", "duet-v1")


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    n: int
    meaning: str  # false adoption | power
    rates: tuple[tuple[float, float], ...]  # (adopted %, its SE) per version, VERSIONS' order


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


def rate_rows(draws: int, seed: int) -> list[Row]:
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
    found = []
    for name, fields in cases:
        for n in (4, 8, 12):
            results = [simulate(v, Scenario(n=n, **host, **fields), draws=draws, seed=seed)  # type: ignore[arg-type]
                       for v in VERSIONS]
            found.append(Row(name + ", shared 10 %", n, results[0].meaning,
                             tuple((r.adopted.pct, r.adopted.se_pct) for r in results)))
    for n in (4, 8, 12):
        rates = tuple(_rate(unequal_slots(DESIGNS[2 if v == "duet" else 1], n, 2.0, 8.0, 0.0, draws,
                                          np.random.default_rng(seed))) for v in VERSIONS)
        found.append(Row("A/A, slot 0 CV 2 % / slot 1 CV 8 %", n, "false adoption", rates))
    return found


def rates_table(found: list[Row]) -> str:
    lines = ["| scenario | pairs | duet v2 adopted % | duet v1 adopted % | means | target |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in found:
        target = f"≤ {100 * ALPHA:g} %" if r.meaning == "false adoption" else "(shown)"
        cells = " | ".join(f"{pct:.2f} ± {se:.2f}" for pct, se in r.rates)
        lines.append(f"| {r.scenario} | {r.n} | {cells} | {r.meaning} | {target} |")
    return "\n".join(lines)


PAIRS = (4, 6, 8, 10, 12, 16)


def pairs_table(draws: int, seed: int) -> str:
    """Issue 18's duet targets at each number of pairs, version 2 and version 1."""
    power = next(s for s, _ in TARGETS if s.name == "−2 %, CV 0.5 %, outliers 5 % × +10 %")
    rows = [(s, t) for s, t in DUET_ROWS] + [(power, "power ≥ 95 %")]
    header = ["scenario", "target", *[f"{n} pairs v2 / v1 %" for n in PAIRS]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for scenario, target in rows:
        cells = []
        for n in PAIRS:
            fixed = replace(scenario, n=n, slot_step_from=scenario.slot_step_from if scenario.slot_step_from is None
                            or abs(scenario.slot_step_from) <= n else -n)
            v2, v1 = (simulate(v, fixed, draws=draws, seed=seed).adopted.pct for v in VERSIONS)
            ok = v2 <= 5.0 if "false" in target else v2 >= 95.0
            cells.append(f"{v2:.2f}{'' if ok else ' ✗'} / {v1:.2f}")
        lines.append(f"| {scenario.name} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


WALL_K = (2, 3, 4, 6, 8)  # interleaved runs per arm; the duet runs 2k pairs in the same wall time


def ci_widths(scenario: Scenario, k: int, draws: int, seed: int) -> tuple[float, float, float]:
    """Median widths (in log points ×100) of the 95 % CI of Δ: duet v2 and v1 of 2k pairs, interleaved k + k
    (the Welch CI every interleaved finding reports, on the gate's default abab order)."""
    rng = np.random.default_rng(seed)
    n = 2 * k
    widths = []
    for version in (2, 1):
        design = DESIGNS[version]
        on_slot1 = design.on_slot1(n, draws, rng)
        off, on, _, _ = simulate_runs(replace(scenario, order=None), "abab", n, draws, rng, concurrent=True,
                                      on_slot1=on_slot1)
        delta, se, _, _ = design.fit_arrays(on - off, design.signs(np.arange(1, n + 1)))
        widths.append(float(np.nanmedian(2 * design.critical(n, 0.025) * se)))
    off, on, _, _ = simulate_runs(replace(scenario, order=None), "abab", k, draws, rng)
    diff, se, df = welch_arrays(off, on)
    lo, hi = ci_arrays(diff, se, df, 0.95)
    widths.append(float(np.nanmedian(hi - lo)))
    return widths[0] * 100, widths[1] * 100, widths[2] * 100


def wall_table(draws: int, seed: int) -> str:
    scenarios = [s for s, _ in TARGETS if s.guard_drop is None]
    header = ["scenario", *[f"{2 * k} pairs vs {k} + {k}: v2 / v1 / interleaved" for k in WALL_K]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    worst = {k: 0.0 for k in WALL_K}
    for scenario in scenarios:
        cells = []
        for k in WALL_K:
            v2, v1, inter = ci_widths(scenario, k, draws, seed)
            worst[k] = max(worst[k], v2 / inter)
            cells.append(f"{v2:.2f} / {v1:.2f} / {inter:.2f}")
        lines.append(f"| {scenario.name} | " + " | ".join(cells) + " |")
    lines.append("| **largest v2 / interleaved** | " + " | ".join(f"**{worst[k]:.2f}×**" for k in WALL_K) + " |")
    return "\n".join(lines)


def suite_table(results: list[SimulationResult]) -> str:
    """`gate simulate --suite --policy duet --policy duet-v1` side by side: every row, its target for the
    current duet, version 2 at its default pairs and version 1 at its suite's 8."""
    by = {(r.scenario.name, r.policy): r for r in results}
    lines = ["| scenario | target (duet) | duet v2, 12 pairs: adopted % | duet v1, 8 pairs: adopted % | means | "
             "v2 inconclusive % | met |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in dict.fromkeys(r.scenario.name for r in results):
        v2, v1 = by[(name, "duet")], by[(name, "duet-v1")]
        met = meets(v2)
        lines.append(f"| {name} | {target_of('duet', v2.scenario) or '—'} | {v2.adopted.pct:.2f} ± "
                     f"{v2.adopted.se_pct:.2f} | {v1.adopted.pct:.2f} ± {v1.adopted.se_pct:.2f} | {v2.meaning} | "
                     f"{v2.rates['inconclusive'].pct:.1f} | {'—' if met is None else 'yes' if met else '**not met**'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--table", choices=("suite", "rates", "pairs", "wall"), nargs="*",
                        default=["suite", "rates", "pairs", "wall"])
    parser.add_argument("--wall-draws", type=int, default=20_000, help="gates per cell of the CI width table")
    args = parser.parse_args()
    for name in args.table:
        began = time.monotonic()
        if name == "suite":  # the seed of `gate simulate --suite` (0), so the figures are its own
            print(suite_table(run_suite(VERSIONS, draws=args.draws, seed=0)))
        elif name == "rates":
            found = rate_rows(args.draws, args.seed)
            print(rates_table(found))
            worst = max((r for r in found if r.meaning == "false adoption"), key=lambda r: r.rates[0][0])
            print(f"\nlargest v2 false adoption: {worst.rates[0][0]:.2f} ± {worst.rates[0][1]:.2f} % ({worst.scenario}, "
                  f"n {worst.n})")
        elif name == "pairs":
            print(pairs_table(args.draws, args.seed))
        else:
            print(wall_table(args.wall_draws, args.seed))
        draws = args.wall_draws if name == "wall" else args.draws
        seed = 0 if name == "suite" else args.seed
        print(f"\n{name}: {draws} gates per cell, seed {seed}, test level {TEST_ALPHA:g} one-sided, floor 1 %; "
              f"{time.monotonic() - began:.0f} s\n")


if __name__ == "__main__":
    main()

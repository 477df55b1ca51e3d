"""The duet policy's error rates, checked by simulation (gatekit/policies/duet.py holds the rule).

The duet rule needs no calibrated constant: under normal non-shared noise its studentized Δ̂ is exactly
Student t with n − 2 df, so the critical value is t_{1−TEST_ALPHA, n−2}. This script checks that claim and
measures the margin to ALPHA = 5 % where the exact t does not hold: slots that differ in noise, an arm
noisier than the other, heavy tails, outliers — always with a ±1 % slot effect and 10 % shared noise, the
measured situation of two GPUs of one host. Power rows show what a duet of n pairs detects.

Most rows run `gatekit.simulate.simulate` (the function behind `gate simulate --policy duet`); the rows with
unequal slot noise draw their own runs (the simulator gives both slots the same noise) and score them with
`gatekit.policies.duet.pair_codes`, the same rule.

Run: .venv/bin/python benchmarks/duet_calibration.py [--draws N] [--seed S]
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np

from gatekit.policies.duet import ALPHA, TEST_ALPHA, pair_codes, parity_signs
from gatekit.simulate import Scenario, simulate
from gatekit.verdict import ADOPTED

SEED = 20261201
DRAWS = 200_000


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    n: int
    meaning: str  # false adoption | power
    adopted_pct: float
    se_pct: float


def _row(name: str, n: int, effect_pct: float, hits: np.ndarray) -> Row:
    p = float(np.mean(hits))
    return Row(name, n, "power" if effect_pct < 0 else "false adoption", 100 * p, 100 * math.sqrt(p * (1 - p) / hits.size))


def unequal_slots(n: int, cv_slot0_pct: float, cv_slot1_pct: float, effect_pct: float, draws: int,
                  rng: np.random.Generator) -> np.ndarray:
    """Adopted or not, per gate, when a run on slot 1 is noisier than one on slot 0 (shared noise and the
    slot effect cancel or are removed, so they are left out here)."""
    s0, s1 = (math.sqrt(math.log1p((cv / 100) ** 2)) for cv in (cv_slot0_pct, cv_slot1_pct))
    signs = parity_signs(np.arange(1, n + 1))
    on_slot1 = signs > 0
    off = np.where(on_slot1, s0, s1) * rng.standard_normal((draws, n))
    on = math.log1p(effect_pct / 100) + np.where(on_slot1, s1, s0) * rng.standard_normal((draws, n))
    return pair_codes(on - off, signs, floor_pct=1.0, direction="lower") == ADOPTED


def rows(draws: int, seed: int) -> list[Row]:
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
        for n in (4, 8):
            result = simulate("duet", Scenario(n=n, **host, **fields), draws=draws, seed=seed)  # type: ignore[arg-type]
            found.append(Row(name + ", shared 10 %", n, result.meaning, result.adopted.pct, result.adopted.se_pct))
    rng = np.random.default_rng(seed)
    for n in (4, 8):
        hits = unequal_slots(n, 2.0, 8.0, 0.0, draws, rng)
        found.append(_row("A/A, slot 0 CV 2 % / slot 1 CV 8 %", n, 0.0, hits))
    return found


def table(found: list[Row]) -> str:
    lines = ["| scenario | pairs | adopted % | means | target |", "| --- | --- | --- | --- | --- |"]
    for r in found:
        target = f"≤ {100 * ALPHA:g} %" if r.meaning == "false adoption" else "(shown)"
        lines.append(f"| {r.scenario} | {r.n} | {r.adopted_pct:.2f} ± {r.se_pct:.2f} | {r.meaning} | {target} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    began = time.monotonic()
    found = rows(args.draws, args.seed)
    print(table(found))
    print(f"\n{args.draws} gates per row, seed {args.seed}, test level {TEST_ALPHA:g} one-sided, floor 1 %; "
          f"{time.monotonic() - began:.0f} s")
    worst = max((r for r in found if r.meaning == "false adoption"), key=lambda r: r.adopted_pct)
    print(f"largest false adoption: {worst.adopted_pct:.2f} ± {worst.se_pct:.2f} % ({worst.scenario}, n {worst.n})")


if __name__ == "__main__":
    main()

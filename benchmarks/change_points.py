"""False alarms and power of `gate history`'s change points, by simulation (docs/statistics.md, "Change points").

    python benchmarks/change_points.py [--series 5000] [--seed 20261130]

Each scenario draws Gaussian series (σ = 1), finds change points exactly as `gate history` does
(gatekit.history.change_point_indices: ruptures PELT candidates, each kept at permutation p ≤ α = 0.05),
and counts how often the event of the row happens; "PELT alone" counts the same event for the candidates
before the permutation tests (what `gate history` reported before them). The seed is fixed, so the table
is reproducible; ± is one Monte-Carlo standard error, sqrt(p(1 − p)/series).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Callable, Sequence

import numpy as np

from gatekit.history import ALPHA, PERMUTATIONS, candidate_indices, change_point_indices

SEED = 20261130
RECENT = 5


def _any(indices: Sequence[int], n: int) -> bool:
    return bool(indices)


def _recent(indices: Sequence[int], n: int) -> bool:
    """What `--fail-on change --recent 5` fails on: a change point among the last 5 findings."""
    return any(i >= n - RECENT for i in indices)


def _near_12(indices: Sequence[int], n: int) -> bool:
    return any(abs(i - 12) <= 1 for i in indices)


def _flat(n: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(n)


def _spike(n: int, where: int | None) -> Callable[[np.random.Generator], np.ndarray]:
    def draw(rng: np.random.Generator) -> np.ndarray:
        x = rng.standard_normal(n)
        x[int(rng.integers(n)) if where is None else where] += 10.0
        return x
    return draw


def _step(n: int, at: int, size: float) -> Callable[[np.random.Generator], np.ndarray]:
    def draw(rng: np.random.Generator) -> np.ndarray:
        x = rng.standard_normal(n)
        x[at:] += size
        return x
    return draw


SCENARIOS: tuple[tuple[str, str, Callable[[np.random.Generator], np.ndarray], Callable, str], ...] = (
    ("flat, 12 findings", "any change point", _flat(12), _any, "≤ 5 %"),
    ("flat, 20 findings", "any change point", _flat(20), _any, "≤ 5 %"),
    ("flat, 30 findings", "any change point", _flat(30), _any, "≤ 5 %"),
    ("flat, 12 findings", "one in the last 5 (`--recent 5`)", _flat(12), _recent, "≤ 5 %"),
    ("flat, 20 findings", "one in the last 5 (`--recent 5`)", _flat(20), _recent, "≤ 5 %"),
    ("flat, 30 findings", "one in the last 5 (`--recent 5`)", _flat(30), _recent, "≤ 5 %"),
    ("one 10σ spike at index 10 of 20", "any change point", _spike(20, 10), _any, "none (≤ 5 %)"),
    ("one 10σ spike at index 19 of 20 (the newest)", "any change point", _spike(20, 19), _any, "none (≤ 5 %)"),
    ("one 10σ spike anywhere in 20", "any change point", _spike(20, None), _any, "none (≤ 5 %)"),
    ("3σ step at index 12 of 20", "found at index 12 ± 1", _step(20, 12, 3.0), _near_12, "≥ 90 %"),
    ("2σ step at index 12 of 20", "found at index 12 ± 1", _step(20, 12, 2.0), _near_12, "(shown)"),
)


def rate(hits: int, series: int) -> str:
    p = hits / series
    return f"{100 * p:.2f} ± {100 * math.sqrt(p * (1 - p) / series):.2f}"


def table(series: int, seed: int) -> str:
    header = ["series", "event", "target", "gate history %", "PELT alone %"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for number, (name, event, draw, happened, target) in enumerate(SCENARIOS):
        rng = np.random.default_rng([seed, number])
        kept = pelt = 0
        for _ in range(series):
            values = [float(v) for v in draw(rng)]
            found = [index for index, _ in change_point_indices(values)[0]]
            kept += happened(found, len(values))
            pelt += happened(candidate_indices(values)[0], len(values))
        lines.append(f"| {name} | {event} | {target} | {rate(kept, series)} | {rate(pelt, series)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=5000, help="simulated series per row")
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    began = time.monotonic()
    print(table(args.series, args.seed))
    print(f"\n{args.series} series per row, seed {args.seed}, α = {ALPHA}, {PERMUTATIONS} permutations per test; "
          f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()

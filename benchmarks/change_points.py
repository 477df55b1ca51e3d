"""False alarms and power of `gate history`'s change points, by simulation (docs/statistics.md, "Change points").

    python benchmarks/change_points.py [--series 5000] [--seed 20261130]
        [--trade-off | --quantiles | --sizes | --ceiling]

Each scenario draws series of noise with marginal SD σ = 1 (Gaussian, or AR(1) noise x_t = ρ·x_{t−1} + e_t,
a machine drifting over days), finds change points exactly as `gate history` does
(gatekit.history.change_point_indices: outliers out, the AR(1)-robust shift test, ruptures PELT candidates
each kept at permutation p ≤ α = 0.05), and counts how often the event of the row happens; "PELT alone"
counts the same event for the candidates before any test (what `gate history` reported before the tests).
The seed is fixed, so the table is reproducible; ± is one Monte-Carlo standard error, sqrt(p(1 − p)/series).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Callable, Sequence

import numpy as np

from gatekit.history import SEED as SHIFT_SEED
from gatekit.history import (ALPHA, CHANGE_MIN_SEGMENT, NULL_SERIES, PERMUTATIONS, RHO_MAX, ChangeSearch, ar1_series,
                             candidate_indices, change_point_indices, null_rhos, null_series_for, null_statistics,
                             shift_statistics, shift_test)

SEED = 20261130
RECENT = 5
SPIKE = 10.0

Draw = Callable[[np.random.Generator], tuple[np.ndarray, frozenset[int]]]  # the series and its spikes
Event = Callable[[Sequence[int], ChangeSearch | None, int, frozenset[int]], bool]


def _any(changes: Sequence[int], search: ChangeSearch | None, n: int, spikes: frozenset[int]) -> bool:
    return bool(changes)


def _recent(changes: Sequence[int], search: ChangeSearch | None, n: int, spikes: frozenset[int]) -> bool:
    """What `--fail-on change --recent 5` fails on: a change point among the last 5 findings."""
    return any(i >= n - RECENT for i in changes)


def _near(at: int) -> Event:
    def found(changes: Sequence[int], search: ChangeSearch | None, n: int, spikes: frozenset[int]) -> bool:
        return any(abs(i - at) <= 1 for i in changes)
    return found


def _mislabelled(changes: Sequence[int], search: ChangeSearch | None, n: int, spikes: frozenset[int]) -> bool:
    """An outlier label on a finding that is not a spike (PELT alone has no labels)."""
    return search is not None and bool(set(search.outliers) - spikes)


def _unlabelled(changes: Sequence[int], search: ChangeSearch | None, n: int, spikes: frozenset[int]) -> bool:
    """A spike the table does not mark as an outlier."""
    return search is not None and not spikes <= set(search.outliers)


def _noise(n: int, rho: float, rng: np.random.Generator) -> np.ndarray:
    if rho == 0:
        return rng.standard_normal(n)
    return ar1_series(rho, 1, n, rng)[0] * math.sqrt(1 - rho * rho)  # marginal SD 1


def _flat(n: int, rho: float = 0.0) -> Draw:
    return lambda rng: (_noise(n, rho, rng), frozenset())


def _spikes(n: int, where: int | None, width: int = 1) -> Draw:
    """`width` adjacent 10σ spikes from `where` (None: anywhere they fit with a finding after them)."""
    def draw(rng: np.random.Generator) -> tuple[np.ndarray, frozenset[int]]:
        x = rng.standard_normal(n)
        start = (int(rng.integers(n - width + 1 if width == 1 else n - width)) if where is None else where)
        x[start:start + width] += SPIKE
        return x, frozenset(range(start, start + width))
    return draw


def _trend(n: int, slope: float) -> Draw:
    """A slow drift: `slope` noise SDs per finding."""
    return lambda rng: (rng.standard_normal(n) + slope * np.arange(n), frozenset())


def _is_trend(changes: Sequence[int], search: ChangeSearch | None, n: int, spikes: frozenset[int]) -> bool:
    """Reported as a trend (PELT alone has no trend)."""
    return search is not None and search.trend


def _step(n: int, at: int, size: float, rho: float = 0.0) -> Draw:
    def draw(rng: np.random.Generator) -> tuple[np.ndarray, frozenset[int]]:
        x = _noise(n, rho, rng)
        x[at:] += size
        return x, frozenset()
    return draw


SCENARIOS: tuple[tuple[str, str, Draw, Event, str], ...] = (
    ("flat, 12 findings", "any change point", _flat(12), _any, "≤ 5 %"),
    ("flat, 20 findings", "any change point", _flat(20), _any, "≤ 5 %"),
    ("flat, 30 findings", "any change point", _flat(30), _any, "≤ 5 %"),
    ("flat, 20 findings", "one in the last 5 (`--recent 5`)", _flat(20), _recent, "≤ 5 %"),
    ("flat, 20 findings, AR(1) ρ 0.3", "any change point", _flat(20, 0.3), _any, "≤ 5 %"),
    ("flat, 20 findings, AR(1) ρ 0.6", "any change point", _flat(20, 0.6), _any, "≤ 5 %"),
    ("flat, 12 findings, AR(1) ρ 0.6", "any change point", _flat(12, 0.6), _any, "≤ 5 %"),
    ("flat, 30 findings, AR(1) ρ 0.6", "any change point", _flat(30, 0.6), _any, "≤ 5 %"),
    ("flat, 60 findings, AR(1) ρ 0.6", "any change point", _flat(60, 0.6), _any, "≤ 5 %"),
    ("flat, 20 findings, AR(1) ρ 0.8", "any change point", _flat(20, 0.8), _any, "(shown: beyond ρ 0.6)"),
    ("flat, 20 findings, AR(1) ρ 0.6", "an outlier label", _flat(20, 0.6), _mislabelled, "(shown)"),
    ("one 10σ spike at index 10 of 20", "any change point", _spikes(20, 10), _any, "none (≤ 5 %)"),
    ("one 10σ spike at index 19 of 20 (the newest)", "any change point", _spikes(20, 19), _any, "none (≤ 5 %)"),
    ("one 10σ spike anywhere in 20", "any change point", _spikes(20, None), _any, "none (≤ 5 %)"),
    ("one 10σ spike anywhere in 20", "a label on another finding", _spikes(20, None), _mislabelled, "(shown)"),
    ("two adjacent 10σ spikes at 9, 10 of 20", "any change point", _spikes(20, 9, 2), _any, "none (≤ 5 %)"),
    ("two adjacent 10σ spikes anywhere in 20, a finding after them", "any change point", _spikes(20, None, 2),
     _any, "none (≤ 5 %)"),
    ("two adjacent 10σ spikes anywhere in 20, a finding after them", "a spike left unlabelled",
     _spikes(20, None, 2), _unlabelled, "(shown)"),
    ("two adjacent 10σ spikes anywhere in 20, a finding after them", "a label on another finding",
     _spikes(20, None, 2), _mislabelled, "(shown)"),
    ("3σ step at index 8 of 20", "found at index 8 ± 1", _step(20, 8, 3.0), _near(8), "≥ 90 %"),
    ("3σ step at index 12 of 20", "found at index 12 ± 1", _step(20, 12, 3.0), _near(12), "≥ 90 %"),
    ("3σ step at index 16 of 20 (4 findings after it)", "found at index 16 ± 1", _step(20, 16, 3.0), _near(16),
     "≥ 90 %"),
    ("3σ step at index 12 of 20", "a label on a finding", _step(20, 12, 3.0), _mislabelled, "(shown)"),
    ("3σ step at index 12 of 30 (18 findings after it)", "found at index 12 ± 1", _step(30, 12, 3.0), _near(12),
     "(shown)"),
    ("2σ step at index 12 of 20", "found at index 12 ± 1", _step(20, 12, 2.0), _near(12), "(shown)"),
    ("4σ step at index 16 of 20", "found at index 16 ± 1", _step(20, 16, 4.0), _near(16), "(shown)"),
    ("3σ step at index 12 of 20, AR(1) ρ 0.3", "found at index 12 ± 1", _step(20, 12, 3.0, 0.3), _near(12),
     "(shown)"),
    ("trend 0.2σ per finding, 30 findings", "reported as a trend", _trend(30, 0.2), _is_trend, "(shown)"),
    ("trend 0.2σ per finding, 30 findings", "any change point", _trend(30, 0.2), _any, "none"),
    ("flat, 20 findings, AR(1) ρ 0.6", "reported as a trend", _flat(20, 0.6), _is_trend, "≤ 5 %"),
    ("flat, 30 findings, AR(1) ρ 0.6", "reported as a trend", _flat(30, 0.6), _is_trend, "≤ 5 %"),
    ("3σ step at index 12 of 20", "reported as a trend", _step(20, 12, 3.0), _is_trend, "(shown)"),
)


def rate(hits: int, series: int) -> str:
    p = hits / series
    return f"{100 * p:.2f} ± {100 * math.sqrt(p * (1 - p) / series):.2f}"


def table(series: int, seed: int, rows: Sequence[int] | None = None) -> str:
    header = ["series", "event", "target", "gate history %", "PELT alone %"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for number, (name, event, draw, happened, target) in enumerate(SCENARIOS):
        if rows is not None and number not in rows:
            continue
        rng = np.random.default_rng([seed, number])
        kept = pelt = 0
        for _ in range(series):
            x, spikes = draw(rng)
            values = [float(v) for v in x]
            search = change_point_indices(values)
            kept += happened([index for index, _ in search.changes], search, len(values), spikes)
            pelt += happened(candidate_indices(values)[0], None, len(values), spikes)
        shown = rate(pelt, series) if happened not in (_mislabelled, _unlabelled, _is_trend) else "—"
        lines.append(f"| {name} | {event} | {target} | {rate(kept, series)} | {shown} |")
    return "\n".join(lines)


TRADE_OFF_RHOS = (0.0, 0.3, 0.45, 0.6)  # the shift test's largest null ρ: the noise its false alarms are held for
TRADE_OFF_ROWS: tuple[tuple[str, Draw, Event], ...] = (
    ("flat, AR(1) ρ 0.3: any change point", _flat(20, 0.3), _any),
    ("flat, AR(1) ρ 0.6: any change point", _flat(20, 0.6), _any),
    ("3σ step at index 12: found at 12 ± 1", _step(20, 12, 3.0), _near(12)),
    ("3σ step at index 16: found at 16 ± 1", _step(20, 16, 3.0), _near(16)),
)


def trade_off_table(series: int, seed: int) -> str:
    """What the choice of the shift test's null ρ buys and costs (20 findings): false alarms under AR(1) noise
    against the power for a 3σ step; gate history uses RHO_MAX."""
    header = ["20 findings", *[f"null ρ ≤ {rho:g}: %" for rho in TRADE_OFF_RHOS]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for number, (name, draw, happened) in enumerate(TRADE_OFF_ROWS):
        cells = []
        for rho in TRADE_OFF_RHOS:
            rng = np.random.default_rng([seed, 100 + number])  # the same series under every choice
            hits = 0
            for _ in range(series):
                x, spikes = draw(rng)
                values = [float(v) for v in x]
                search = change_point_indices(values, rho_max=rho)
                hits += happened([index for index, _ in search.changes], search, len(values), spikes)
            cells.append(rate(hits, series))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def quantile_table(series: int, seed: int, lengths: Sequence[int] = (8, 12, 20, 30, 60, 200)) -> str:
    """The shift statistic's 95 % quantile on flat AR(1) series of each ρ and length: the least favourable
    ρ (the largest quantile, in bold) is 0.6 for short series and smaller for long ones, which is why the
    test's p is the largest over the null ρ it covers."""
    rhos = (0.0, 0.15, 0.3, 0.45, 0.6, 0.75)
    lines = ["| findings | " + " | ".join(f"ρ {rho:g}" for rho in rhos) + " |", "|" + " --- |" * (len(rhos) + 1)]
    for n in lengths:
        quantiles = [float(np.quantile(null_statistics(n, series, seed, rho), 0.95)) for rho in rhos]
        top = max(q for q, rho in zip(quantiles, rhos) if rho <= RHO_MAX)
        lines.append(f"| {n} | " + " | ".join(f"**{q:.2f}**" if q == top else f"{q:.2f}" for q in quantiles) + " |")
    return "\n".join(lines)


SIZE_ROWS = ((12, 0.6), (20, 0.3), (20, 0.45), (20, 0.6), (30, 0.6), (60, 0.3), (60, 0.6))


def size_table(series: int, seed: int) -> str:
    """The shift test's own false-alarm rate on flat AR(1) series, many at once (the test alone, vectorised:
    the same p as shift_test, which the rows of `table` run one series at a time)."""
    lines = ["| findings | AR(1) ρ | shift test p ≤ α: % |", "| --- | --- | --- |"]
    for number, (n, rho) in enumerate(SIZE_ROWS):
        rng = np.random.default_rng([seed, 300 + number])
        observed = shift_statistics(ar1_series(rho, series, n, rng))[0]
        p = np.zeros(series)
        for null_rho in null_rhos():
            null = null_statistics(n, null_series_for(n), SHIFT_SEED, null_rho)
            hits = null.size - np.searchsorted(null, observed - 1e-9 * np.maximum(1.0, np.abs(observed)), side="left")
            p = np.maximum(p, (1 + hits) / (1 + null.size))
        lines.append(f"| {n} | {rho:g} | {rate(int(np.sum(p <= ALPHA)), series)} |")
    return "\n".join(lines)


CEILING_PLACES = tuple(range(CHANGE_MIN_SEGMENT, 20 - CHANGE_MIN_SEGMENT + 1))


def ceiling_table(series: int, seed: int, n: int = 20, size: float = 3.0) -> str:
    """The most any test can find: a test whose false alarms are ≤ α on flat AR(1) noise of ρ = RHO_MAX has,
    averaged over the places of a ±3σ step in white noise, at most the power of the Neyman–Pearson test of
    that average against that null (the likelihood ratio of the maximal invariants, shift_statistics with
    the flat ρ fixed at RHO_MAX). Beside it, the shift test `gate history` uses (the flat ρ profiled, p the
    largest over null ρ 0 … RHO_MAX), on the same series: only the test itself, before PELT and the
    permutation tests, and not asking that the place be right."""
    rng = np.random.default_rng([seed, 200])
    flat = ar1_series(RHO_MAX, max(series, NULL_SERIES), n, rng)  # its critical value as exact as the test's
    bound = np.quantile(shift_statistics(flat, profile_rhos=(RHO_MAX,))[0], 1 - ALPHA)
    lines = ["| 3σ step at index | Neyman–Pearson bound at ρ 0.6: % | the shift test: % |", "| --- | --- | --- |"]
    bounds, tests = [], []
    for at in CEILING_PLACES:
        rows = rng.standard_normal((series, n))
        rows[:, at:] += size * rng.choice([-1.0, 1.0], size=(series, 1))
        best = int(np.sum(shift_statistics(rows, profile_rhos=(RHO_MAX,))[0] > bound))
        ours = sum(shift_test([float(v) for v in row])[0] <= ALPHA for row in rows)
        bounds.append(best / series)
        tests.append(ours / series)
        lines.append(f"| {at} | {rate(best, series)} | {rate(ours, series)} |")
    lines.append(f"| mean over {CEILING_PLACES[0]} … {CEILING_PLACES[-1]} | {100 * np.mean(bounds):.2f} | "
                 f"{100 * np.mean(tests):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", type=int, default=5000, help="simulated series per row")
    parser.add_argument("--rows", help="only these rows of the main table (0-based, comma-separated)")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--trade-off", action="store_true", help="the null-ρ trade-off table instead")
    parser.add_argument("--quantiles", action="store_true", help="the null quantiles by ρ and length instead")
    parser.add_argument("--sizes", action="store_true", help="the shift test's false-alarm rates alone instead")
    parser.add_argument("--ceiling", action="store_true",
                        help="the most powerful test's power at ρ 0.6 (a bound for every test) beside the shift "
                        "test's")
    args = parser.parse_args()
    began = time.monotonic()
    print(quantile_table(args.series, args.seed) if args.quantiles
          else ceiling_table(args.series, args.seed) if args.ceiling
          else size_table(args.series, args.seed) if args.sizes
          else trade_off_table(args.series, args.seed) if args.trade_off
          else table(args.series, args.seed, None if args.rows is None else [int(r) for r in args.rows.split(",")]))
    print(f"\n{args.series} series per row, seed {args.seed}, α = {ALPHA}, shift test against {NULL_SERIES} AR(1) "
          f"series at each null ρ 0 … {RHO_MAX:g}, {PERMUTATIONS} permutations per candidate test; "
          f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()

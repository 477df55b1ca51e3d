"""Comparison rules that only `gate simulate` runs, beside the real policies in its tables: a fixed-n Welch test
and the exact percentile bootstrap. No gate preregisters them (their descriptors say `gate=False`), so they
implement `SimulatedPolicy` only: the vectorised rule, and the scenarios it can take.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

from gatekit.config import ThresholdSpec
from gatekit.diagnostics import p_better_arrays, welch_arrays
from gatekit.errors import ConfigError
from gatekit.policies.base import SimulationDefaults
from gatekit.policies.sequential import gain_bounds
from gatekit.verdict import ADOPTED, REGRESSION, REJECTED

if TYPE_CHECKING:
    from gatekit.simulate import Scenario

WELCH_ALPHA = 0.05  # the fixed-n "welch" rule: one-sided, plus the floor
BOOTSTRAP_LEVEL = 0.95
BOOTSTRAP_MAX_N = 5  # the exact bootstrap enumerates C(2n−1, n)² resample pairs per gate


def welch_codes(off_log: np.ndarray, on_log: np.ndarray, t: ThresholdSpec) -> np.ndarray:
    """A fixed-n Welch test on logs at one-sided 0.05, plus the floor on the ratio of geometric means."""
    diff, se, df = welch_arrays(off_log, on_log)
    better = p_better_arrays(diff, se, df, "lower") < WELCH_ALPHA
    worse = p_better_arrays(diff, se, df, "higher") < WELCH_ALPHA
    g_adopt, g_regress = gain_bounds(t.floor_pct, "lower")
    return np.select([better & (-diff >= g_adopt), worse & (-diff <= g_regress)],
                     [ADOPTED, REGRESSION], default=REJECTED)


def _multisets(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every bootstrap resample of n values as multiplicities [K, n] and its probability n!/∏m_i!/n^n."""
    rows, weights = [], []
    for combo in itertools.combinations_with_replacement(range(n), n):
        counts = np.bincount(combo, minlength=n)
        rows.append(counts)
        weights.append(math.factorial(n) / math.prod(math.factorial(int(c)) for c in counts) / n ** n)
    return np.array(rows, float), np.array(weights)


def bootstrap_codes(off_log: np.ndarray, on_log: np.ndarray, t: ThresholdSpec) -> np.ndarray:
    """The percentile bootstrap of Δ = mean_on/mean_off − 1 (each arm resampled), exactly (B → ∞): adopted
    when its 95 % interval lies below 0, regression above 0. Needs n ≤ 5 per arm."""
    n = off_log.shape[-1]
    counts, weights = _multisets(n)
    off_means = np.exp(off_log) @ counts.T / n  # [draws, K]
    on_means = np.exp(on_log) @ counts.T / n
    deltas = (on_means[:, :, None] / off_means[:, None, :] - 1).reshape(len(off_log), -1)
    pair_w = np.outer(weights, weights).ravel()
    order = np.argsort(deltas, axis=1)
    sorted_d = np.take_along_axis(deltas, order, axis=1)
    cumulative = np.cumsum(pair_w[order], axis=1)
    tail = (1 - BOOTSTRAP_LEVEL) / 2

    def quantile(q: float) -> np.ndarray:  # inverse CDF: the smallest value whose CDF reaches q
        index = np.argmax(cumulative >= q - 1e-12, axis=1)
        return sorted_d[np.arange(len(sorted_d)), index]

    low, high = quantile(tail), quantile(1 - tail)
    return np.select([high < 0, low > 0], [ADOPTED, REGRESSION], default=REJECTED)


class WelchRule(SimulationDefaults):
    """`welch_codes` on the scenario's n runs per arm."""

    name = "welch"

    def max_rounds(self, n: int) -> int:
        return n

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec,
                 max_threshold_pct: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        return welch_codes(off_log, on_log, thresholds), np.full(off_log.shape[0], off_log.shape[-1])


class BootstrapRule(SimulationDefaults):
    """`bootstrap_codes` on the scenario's n runs per arm (n ≤ BOOTSTRAP_MAX_N: it enumerates every resample)."""

    name = "bootstrap"

    def max_rounds(self, n: int) -> int:
        return n

    def check_scenario(self, scenario: Scenario) -> None:
        if scenario.n > BOOTSTRAP_MAX_N:
            raise ConfigError(f"--n: the exact bootstrap needs n ≤ {BOOTSTRAP_MAX_N}, got {scenario.n}")

    def values_per_gate(self, rounds: int) -> int:
        return 4 * math.comb(2 * rounds - 1, rounds) ** 2  # every resample pair's Δ, sorted

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec,
                 max_threshold_pct: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        return bootstrap_codes(off_log, on_log, thresholds), np.full(off_log.shape[0], off_log.shape[-1])


WELCH, BOOTSTRAP = WelchRule(), BootstrapRule()


def welch(version: int | None = None) -> WelchRule:
    return WELCH


def bootstrap(version: int | None = None) -> BootstrapRule:
    return BOOTSTRAP

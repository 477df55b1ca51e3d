"""`gate simulate`: Monte-Carlo of a decision policy under a noise scenario, vectorised over gates.

Run times are lognormal: log x = log(1 + effect)·[on] + log(1 + drift)·position + log(1 + cold)·[first run]
+ σ_arm·ε, σ_arm = sqrt(log(1 + CV²)), ε standard normal — the effect is on the median (geometric mean),
which is what a do-nothing change leaves equal. Lower is better. Guards and contamination are not modelled:
every simulated run is clean and every guard holds, so the rates are those of the primary rule alone.

The real policies (classic, sequential) are simulated by their own objects' vectorised forms
(`Policy.simulate`: the same verdict.classic_codes and sequential.look_codes a gate runs); welch and
bootstrap are comparison rules that exist only here. Tests compare both real policies, draw by draw, with
the scalar code a gate runs.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence

import numpy as np

from gatekit.config import ORDERS, POLICIES, SIM_POLICIES, ThresholdSpec
from gatekit.diagnostics import p_better_arrays, welch_arrays
from gatekit.errors import ConfigError
from gatekit.policy import policy_for
from gatekit.sequential import gain_bounds
from gatekit.verdict import ADOPTED, CODE_NAMES, REGRESSION, REJECTED
from gatekit.schedule import round_orders, thue_morse

OUTCOMES = ("adopted", "regression", "rejected", "equivalent", "inconclusive")
WELCH_ALPHA = 0.05  # the fixed-n "welch" policy: one-sided, plus the floor
BOOTSTRAP_LEVEL = 0.95
BOOTSTRAP_MAX_N = 5  # the exact bootstrap enumerates C(2n−1, n)² resample pairs per gate
CHUNK_VALUES = 20_000_000  # floats per chunk of gates: bounds memory at a few hundred MB


@dataclass(frozen=True, slots=True)
class Scenario:
    """What the machine and the change do. Percentages in percent; effect < 0 means on is faster."""

    cv_off_pct: float = 0.5
    cv_on_pct: float | None = None  # None: as noisy as off
    effect_pct: float = 0.0
    drift_pct_per_run: float = 0.0
    cold_first_pct: float = 0.0  # the series' first run (a warm-up if there is one) is this much slower
    order: str | None = None  # None: the policy's own (abab classic, thue-morse sequential)
    n: int = 3  # runs per arm for fixed-n policies; the sequential policy runs 4, then 8
    warmup: int = 0
    name: str = ""

    @property
    def cv_on(self) -> float:
        return self.cv_off_pct if self.cv_on_pct is None else self.cv_on_pct

    def describe(self) -> str:
        if self.name:
            return self.name
        parts = [f"Δ {self.effect_pct:+g} %", f"CV {self.cv_off_pct:g} %"
                 + (f" / on {self.cv_on:g} %" if self.cv_on != self.cv_off_pct else "")]
        if self.drift_pct_per_run:
            parts.append(f"drift {self.drift_pct_per_run:+g} %/run")
        if self.cold_first_pct:
            parts.append(f"cold first run {self.cold_first_pct:+g} %")
        if self.warmup:
            parts.append(f"warm-up {self.warmup}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Rate:
    """A Monte-Carlo proportion in percent with its standard error sqrt(p(1 − p)/N)."""

    pct: float
    se_pct: float

    @classmethod
    def of(cls, hits: np.ndarray) -> Rate:
        p = float(np.mean(hits))
        return cls(100 * p, 100 * math.sqrt(p * (1 - p) / hits.size))


@dataclass(frozen=True, slots=True)
class SimulationResult:
    policy: str
    order: str
    scenario: Scenario
    thresholds: ThresholdSpec
    draws: int
    seed: int
    rates: dict[str, Rate]
    runs_per_arm: float
    runs_per_arm_se: float

    @property
    def adopted(self) -> Rate:
        return self.rates["adopted"]

    @property
    def meaning(self) -> str:
        """What the adoption rate measures in this scenario."""
        if self.scenario.effect_pct < 0:
            return "power"
        return "false adoption"

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy, "order": self.order, "scenario": {**asdict(self.scenario),
                                                                     "cv_on_pct": self.scenario.cv_on},
            "thresholds": asdict(self.thresholds), "draws": self.draws, "seed": self.seed,
            "adopted_means": self.meaning,
            "rates_pct": {k: {"value": r.pct, "se": r.se_pct} for k, r in self.rates.items()},
            "runs_per_arm": {"mean": self.runs_per_arm, "se": self.runs_per_arm_se},
        }


# -- the runs ----------------------------------------------------------------------------------------

def _first_off(order: str, rounds: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """[draws, rounds] booleans: does off run first in the round?"""
    if order == "random":
        return rng.random((draws, rounds)) < 0.5
    if order == "thue-morse":
        mirror = rng.random(draws) < 0.5
        symbols = np.array([thue_morse(k) == 0 for k in range(rounds)])
        return symbols[None, :] != mirror[:, None]
    return np.broadcast_to(np.array(round_orders(rounds, order)), (draws, rounds))


def simulate_runs(scenario: Scenario, order: str, rounds: int, draws: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Log run times in execution order: (off, on, off positions, on positions), each [draws, rounds].

    Warm-up runs take positions 0 … warmup−1 (and the cold hit) and are dropped, like the gate drops them.
    """
    first_off = _first_off(order, rounds, draws, rng)
    w = scenario.warmup
    pos_first = w + 2 * np.arange(rounds)[None, :]
    pos_off = np.where(first_off, pos_first, pos_first + 1)
    pos_on = np.where(first_off, pos_first + 1, pos_first)
    sigma_off = math.sqrt(math.log1p((scenario.cv_off_pct / 100) ** 2))
    sigma_on = math.sqrt(math.log1p((scenario.cv_on / 100) ** 2))
    drift = math.log1p(scenario.drift_pct_per_run / 100)
    cold = math.log1p(scenario.cold_first_pct / 100)
    off = sigma_off * rng.standard_normal((draws, rounds)) + drift * pos_off + cold * (pos_off == 0)
    on = (math.log1p(scenario.effect_pct / 100) + sigma_on * rng.standard_normal((draws, rounds))
          + drift * pos_on + cold * (pos_on == 0))
    return off, on, pos_off, pos_on


# -- the policies ------------------------------------------------------------------------------------

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


# -- the driver ----------------------------------------------------------------------------------------

def default_order(policy: str) -> str:
    return policy_for(policy).default_order if policy in POLICIES else "abab"


def validate(policy: str, scenario: Scenario, draws: int) -> None:
    """Bad input is a ConfigError naming the option, like every other gate input."""
    if policy not in SIM_POLICIES:
        raise ConfigError(f"--policy: must be one of {', '.join(SIM_POLICIES)}, got {policy!r}")
    if scenario.order is not None and scenario.order not in ORDERS:
        raise ConfigError(f"--order: must be one of {', '.join(ORDERS)}, got {scenario.order!r}")
    if draws < 2:
        raise ConfigError(f"--draws: must be at least 2, got {draws}")
    if scenario.n < 2:
        raise ConfigError(f"--n: must be at least 2 runs per arm, got {scenario.n}")
    if policy == "bootstrap" and scenario.n > BOOTSTRAP_MAX_N:
        raise ConfigError(f"--n: the exact bootstrap needs n ≤ {BOOTSTRAP_MAX_N}, got {scenario.n}")
    if not 0 <= scenario.warmup <= 2:
        raise ConfigError(f"--warmup: must be 0, 1 or 2, got {scenario.warmup}")
    for name, value in (("--cv", scenario.cv_off_pct), ("--cv-on", scenario.cv_on)):
        if not value >= 0:
            raise ConfigError(f"{name}: must be a non-negative percentage, got {value}")
    for name, value in (("--effect", scenario.effect_pct), ("--drift", scenario.drift_pct_per_run),
                        ("--cold-first", scenario.cold_first_pct)):
        if not value > -100:
            raise ConfigError(f"{name}: must be above −100 %, got {value}")


def simulate(policy: str, scenario: Scenario, *, draws: int = 100_000, seed: int = 0,
             thresholds: ThresholdSpec = ThresholdSpec()) -> SimulationResult:
    """Simulate `draws` gates of one scenario under one policy; reproducible from `seed`."""
    validate(policy, scenario, draws)
    order = scenario.order or default_order(policy)
    rounds = policy_for(policy).max_rounds(scenario.n) if policy in POLICIES else scenario.n
    rng = np.random.default_rng(seed)
    per_gate = {"bootstrap": 4 * math.comb(2 * rounds - 1, rounds) ** 2}.get(policy, 4 * rounds)
    chunk = max(1, min(draws, CHUNK_VALUES // per_gate))
    codes_parts, runs_parts = [], []
    for start in range(0, draws, chunk):
        size = min(chunk, draws - start)
        off, on, _, _ = simulate_runs(scenario, order, rounds, size, rng)
        if policy in POLICIES:
            codes, runs = policy_for(policy).simulate(off, on, thresholds)
        else:
            codes = {"welch": welch_codes, "bootstrap": bootstrap_codes}[policy](off, on, thresholds)
            runs = np.full(size, rounds)
        codes_parts.append(codes)
        runs_parts.append(runs + scenario.warmup / 2)
    codes, runs = np.concatenate(codes_parts), np.concatenate(runs_parts).astype(float)
    code_of = {name: code for code, name in CODE_NAMES.items()}
    rates = {name: Rate.of(codes == code_of[name]) for name in OUTCOMES}
    return SimulationResult(policy, order, scenario, thresholds, draws, seed, rates, float(runs.mean()),
                            float(runs.std(ddof=1) / math.sqrt(draws)))


# -- the scenarios -----------------------------------------------------------------------------

SUITE = (
    Scenario(cv_off_pct=0.5, name="A/A, CV 0.5 %"),
    Scenario(cv_off_pct=2.0, name="A/A, CV 2 %"),
    Scenario(cv_off_pct=0.5, cv_on_pct=2.0, name="A/A, σ_on = 4σ_off (0.5 → 2 %)"),
    Scenario(cv_off_pct=2.0, cv_on_pct=8.0, name="A/A, σ_on = 4σ_off (2 → 8 %)"),
    Scenario(cv_off_pct=0.5, drift_pct_per_run=-0.25, name="A/A, CV 0.5 %, drift −0.25 %/run"),
    Scenario(cv_off_pct=2.0, drift_pct_per_run=-0.25, name="A/A, CV 2 %, drift −0.25 %/run"),
    Scenario(cv_off_pct=0.5, cold_first_pct=3.0, name="A/A, CV 0.5 %, +3 % cold first run"),
    Scenario(cv_off_pct=2.0, cold_first_pct=3.0, name="A/A, CV 2 %, +3 % cold first run"),
    Scenario(cv_off_pct=0.5, cv_on_pct=2.0, drift_pct_per_run=-0.25, cold_first_pct=3.0,
             name="A/A, σ_on 4×, drift −0.25 %/run, +3 % cold"),
    Scenario(cv_off_pct=0.5, effect_pct=-2.0, name="−2 %, CV 0.5 %"),
    Scenario(cv_off_pct=0.5, effect_pct=-2.0, cold_first_pct=3.0, name="−2 %, CV 0.5 %, +3 % cold first run"),
    Scenario(cv_off_pct=0.5, effect_pct=-2.0, cold_first_pct=3.0, warmup=1,
             name="−2 %, CV 0.5 %, +3 % cold first run, warm-up 1"),
    Scenario(cv_off_pct=2.0, effect_pct=-5.0, name="−5 %, CV 2 %"),
    Scenario(cv_off_pct=0.5, effect_pct=-2.0, drift_pct_per_run=-0.25, cold_first_pct=3.0,
             name="−2 %, CV 0.5 %, drift −0.25 %/run, +3 % cold"),
)


def run_suite(policies: Sequence[str], *, draws: int, seed: int, order: str | None = None,
              thresholds: ThresholdSpec = ThresholdSpec()) -> list[SimulationResult]:
    """Every scenario of SUITE under every policy (the same seed for each, so columns are comparable)."""
    return [simulate(policy, replace(scenario, order=order), draws=draws, seed=seed, thresholds=thresholds)
            for scenario in SUITE for policy in policies]


def table(results: Sequence[SimulationResult]) -> str:
    """A Markdown table: adoption (false adoption or power) ± its Monte-Carlo SE, other outcomes, runs."""
    header = ["scenario", "policy", "order", "adopted %", "means", "regression %", "equivalent %",
              "inconclusive %", "runs/arm"]
    rows = []
    for r in results:
        rows.append([r.scenario.describe(), r.policy, r.order, f"{r.adopted.pct:.2f} ± {r.adopted.se_pct:.2f}",
                     r.meaning, f"{r.rates['regression'].pct:.2f}", f"{r.rates['equivalent'].pct:.2f}",
                     f"{r.rates['inconclusive'].pct:.2f}", f"{r.runs_per_arm:.2f}"])
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)

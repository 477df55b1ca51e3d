"""The duet policy: both arms of a pair run at the same time on twin slots (two GPUs of one host, or two CPU
core sets), the slots changing places from pair to pair; the decision reads the pairs' log-ratios with the
slot effect estimated and removed. Three designs (`DESIGNS`; a predecision names its `duet_version`, absent = 1):

Model (per pair k = 1 … n, n even):  d_k = ln(on_k) − ln(off_k) = Δ + s·σ_k + ε_k, where
  σ_k = +1 when on ran on slot 1, −1 when on ran on slot 0, 0 if both runs shared a slot (no slot contrast),
  s   = the slot-1-minus-slot-0 effect on a run's log value (the full difference: a run on slot 1 takes
        e^s times as long as on slot 0; reported as 100·(e^s − 1) %),
  ε_k = the noise the two runs do not share. Noise the host imposes on both runs at once (measured: the
        two runs of a pair correlate 0.984) cancels from d_k, and so does any drift: both run together.

Version 1 (issue 12): odd pairs put off on slot 0, even pairs on. Δ and s are the ordinary least squares fit
of d on [1, σ] (balanced: Δ̂ = mean d, ŝ = (mean d_odd − mean d_even)/2). Under normal ε the studentized Δ̂ is
exactly Student t with n − 2 degrees of freedom (the textbook regression t, e.g. Draper & Smith, Applied
Regression Analysis, §1.4), so its critical value needs no simulation. Its weak points (issue 18): the last
pair always gives on slot 0, so slot 1 slowing from the last pair on reads as a gain (false adoption 7.9 %),
and a linear slot drift does not cancel (Σ k·σ_k = −n/2); one slowed run moves Δ̂ by its whole size / n.

Version 2 (issue 18): the slots follow the Thue–Morse sequence over the pairs (balanced every 2 pairs, a
linear slot drift cancelled every 4), which slot off takes in pair 1 drawn from the predecision's sha256, so
a late change of either slot lands on either arm with probability ½; Δ and s are Huber's M-estimate
(`huber_arrays`, k = 1.345, MAD scale, sandwich SE), whose studentized Δ̂ has no closed-form law at small n,
so its critical values are calibrated per number of pairs by simulation (HUBER_CRITICAL). Calibrated under
normal noise, they do not hold when runs move between two speed states: up to 5.2–7.0 % false adoption or
regression at 4–14 pairs (docs/statistics.md, "Two speed states").

Version 3 (issue 30): version 2's slot order, mirror and Huber fit, with critical values calibrated under a
composite null (TWO_STATE_CRITICAL): for each number of pairs, the largest quantile of |Δ̂/SE| over normal noise
and runs that move between two speed states (TWO_STATE_LAWS), so the level holds under both. At least 10 pairs
(TWO_STATE_MIN_PAIRS): at 8 the studentized Huber estimate has no bounded quantile under two speed states.

Every version decides by the sequential policy's rule (`sequential.look_codes`: adopted / regression beyond
the critical value AND the floor, equivalent, rejected, else inconclusive) with the design's critical value and
standard error; benchmarks/duet_calibration.py measures the margin to ALPHA under unequal slot noise, heavy
tails, outliers and slots that change speed. The statistics are pure functions (tables and values in,
decisions out; `DuetDesign.codes` is vectorised so `gate simulate --policy duet` runs this exact rule).
`DuetPolicy`, at the end, is the policy object over a design: its stated rules, simulation scenarios, plan
words and the words its estimate adds to a finding's narrative and summary.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as sps

from gatekit import rules
from gatekit.config import GuardSpec, RulesSpec, ThresholdSpec, duet_pairs_ok, duet_pairs_rule
from gatekit.diagnostics import log_values, pct
from gatekit.errors import ConfigError
from gatekit.finding import DuetInfo, Finding, PairedGuard, generated_section
from gatekit.formatting import MISSING, fmt, fmt_signed, level_text
from gatekit.policies import sequential
from gatekit.policies.base import (Decided, Evidence, OneLook, PolicyWords, Retry, SimulationDefaults, classic_beside,
                                   guard_values)
from gatekit.policies.sequential import guard_reason, look_codes, paired_guard, unreplaced_flags, with_guards
from gatekit.policy_descriptors import describe
from gatekit.records import RunRecord
from gatekit.runtable import RunTable
from gatekit.schedule import order_seed, thue_morse
from gatekit.slots import SlotError, parse_slot
from gatekit.verdict import CODE_NAMES, Decision, Reason, ReasonCode, Verdict, too_noisy_reason

if TYPE_CHECKING:
    from gatekit.simulate import Scenario

VERSION = 1
ALPHA = 0.05  # one-sided: the bound on false adoption (and on a guard's false pass)
# The level the rule tests at: half a point under ALPHA (as the sequential policy's calibration), a margin for
# what the exact t does not cover — slots that differ in noise (the t's df then overstate), heavy tails.
TEST_ALPHA = 0.045
INTERVAL_LEVEL = 1 - 2 * TEST_ALPHA  # Δ̂ ± c·SE, c = t_{1−TEST_ALPHA, n−2}: the interval the rule reads
GUARD_LEVEL = 1 - TEST_ALPHA  # one look: the guard's one-sided bound
MIN_PAIRS = 4  # two of each slot order: the fewest that leave n − 2 ≥ 2 degrees of freedom for the noise
METHOD = "pair log-ratios, OLS on [1, slot sign], Student t with n-2 df"


def parity_signs(rounds: Sequence[int] | np.ndarray) -> np.ndarray:
    """σ_k from the swap rule alone: +1 for odd pairs (on on slot 1), −1 for even pairs (on on slot 0)."""
    return np.where(np.asarray(rounds, int) % 2 == 1, 1.0, -1.0)


@dataclass(frozen=True, slots=True)
class DuetEstimate:
    """The OLS fit of d on [1, σ]: log-scale estimates, their standard errors, and the t critical value."""

    n_pairs: int
    delta: float
    delta_se: float
    slot: float
    slot_se: float
    df: int
    critical: float

    def interval(self, estimate: float, se: float) -> tuple[float, float]:
        return estimate - self.critical * se, estimate + self.critical * se


def critical_value(df: int | np.ndarray, alpha: float = TEST_ALPHA) -> float | np.ndarray:
    """t_{1−α, df}: the one-sided critical value of the studentized Δ̂ (nan when df < 1)."""
    df_array = np.asarray(df, float)
    with np.errstate(invalid="ignore"):
        return np.where(df_array >= 1, sps.t.ppf(1 - alpha, np.maximum(df_array, 1)), np.nan)


def fit_arrays(d: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Δ̂, SE Δ̂, ŝ, SE ŝ) of d on [1, σ] over the last axis, for many gates at once.

    Normal equations of X = [1, σ] (Σσ² = m, the pairs with a slot contrast): det = n·m − (Σσ)²;
    Δ̂ = (m·Σd − Σσ·Σσd)/det, ŝ = (n·Σσd − Σσ·Σd)/det; residual variance RSS/(n − 2);
    Var Δ̂ = σ̂²·m/det, Var ŝ = σ̂²·n/det. Not separable (det = 0: every pair in one slot order) or n < 3:
    nan, and the rule then reads inconclusive.
    """
    d = np.asarray(d, float)
    sigma = np.broadcast_to(np.asarray(sigma, float), d.shape)
    n = d.shape[-1]
    sum_s, sum_ss = sigma.sum(axis=-1), (sigma ** 2).sum(axis=-1)
    sum_d, sum_sd = d.sum(axis=-1), (sigma * d).sum(axis=-1)
    det = n * sum_ss - sum_s ** 2
    ok = (det > 0) & (n >= 3)
    safe_det = np.where(ok, det, 1.0)
    delta = (sum_ss * sum_d - sum_s * sum_sd) / safe_det
    slot = (n * sum_sd - sum_s * sum_d) / safe_det
    residual = d - delta[..., None] - slot[..., None] * sigma
    variance = (residual ** 2).sum(axis=-1) / max(n - 2, 1)
    delta_se = np.sqrt(variance * sum_ss / safe_det)
    slot_se = np.sqrt(variance * n / safe_det)
    nan = np.float64(math.nan)
    return (np.where(ok, delta, nan), np.where(ok, delta_se, nan), np.where(ok, slot, nan),
            np.where(ok, slot_se, nan))


# -- version 2: the Huber M-estimate --------------------------------------------------------------------

HUBER_K = 1.345  # Huber's tuning constant: 95 % efficiency at the normal (Huber 1981, §4.6)
MAD_NORMAL = float(sps.norm.ppf(0.75))  # 0.6745: median |ε| of a standard normal, so MAD / it estimates σ
HUBER_MAX_ITERATIONS = 500
HUBER_TOLERANCE = 1e-12  # IRLS stops when no coefficient moves by more than this many scales


def thue_morse_signs(rounds: Sequence[int] | np.ndarray) -> np.ndarray:
    """σ_k of version 2 relative to pair 1: +1 where the Thue–Morse symbol of pair k − 1 is that of pair 0
    (on on the slot off took in pair 1), else −1: + − − + − + + − … Over every 4 pairs the signs sum to 0
    and so does Σ k·σ_k, so a slot whose speed drifts linearly cancels from Δ̂ (Prouhet)."""
    return np.array([1.0 if thue_morse(int(k) - 1) == 0 else -1.0 for k in np.asarray(rounds, int).ravel()]
                    ).reshape(np.shape(rounds))


def _median_abs(residual: np.ndarray) -> np.ndarray:
    """median |r| over the last axis (np.partition: the middle one, or the mean of the middle two)."""
    a, n = np.abs(residual), residual.shape[-1]
    middle = np.partition(a, (max(n // 2 - 1, 0), n // 2), axis=-1)
    return middle[..., n // 2] if n % 2 else 0.5 * (middle[..., n // 2 - 1] + middle[..., n // 2])


def _weighted_fit(d: np.ndarray, sigma: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares of d on [1, σ] over the last axis (nan where not separable)."""
    sw, sws, wss = w.sum(-1), (w * sigma).sum(-1), (w * sigma ** 2).sum(-1)
    swd, swsd = (w * d).sum(-1), (w * sigma * d).sum(-1)
    det = sw * wss - sws ** 2
    det = np.where(det > 1e-12 * np.maximum(sw * wss, 1e-300), det, np.nan)
    return (wss * swd - sws * swsd) / det, (sw * swsd - sws * swd) / det


def huber_arrays(d: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Δ̂, SE Δ̂, ŝ, SE ŝ) of the Huber M-estimate of d on [1, σ] over the last axis, for many gates at once.

    Huber's ψ(u) = clip(u, −k, k), k = HUBER_K, on u = r/s, the scale s = MAD/0.6745 of the residuals
    (median |r|, about 0: the fit has an intercept), re-estimated at every step: iteratively reweighted least
    squares from the OLS fit (weights min(1, k/|u|)) until no coefficient moves by HUBER_TOLERANCE·s — the
    fixed point of statsmodels' RLM(norm=HuberT(1.345), scale_est="mad"). The SE is Huber's sandwich ("H1",
    Huber 1981 §7.6, statsmodels' default): Var β̂ = K²·[Σψ²/(n − 2)]·s²/m²·(XᵀX)⁻¹, m = mean ψ'(u) (the share
    |u| ≤ k), K = 1 + (2/n)·Var ψ'/m². A run that is far off (an outlier, a slot that changed speed for one
    pair) moves Δ̂ by at most k·s/(n·m) instead of its whole size. Degenerate cases: MAD = 0 (half the pairs
    fit exactly: a coarse timer) takes the OLS residual SD as the scale; a perfect fit gives the OLS fit with
    SE 0; not separable (one slot order only) or n < 3: nan, which the rule reads as inconclusive.
    """
    d = np.asarray(d, float)
    sigma = np.broadcast_to(np.asarray(sigma, float), d.shape)
    n = d.shape[-1]
    flat_d, flat_s = d.reshape(-1, n), sigma.reshape(-1, n)
    delta, slot = _weighted_fit(flat_d, flat_s, np.ones_like(flat_d))
    ols_sd = np.sqrt(((flat_d - delta[:, None] - slot[:, None] * flat_s) ** 2).sum(-1) / max(n - 2, 1))

    def scale_of(dd: np.ndarray, ss: np.ndarray, a: np.ndarray, b: np.ndarray, fallback: np.ndarray) -> np.ndarray:
        mad = _median_abs(dd - a[:, None] - b[:, None] * ss) / MAD_NORMAL
        return np.where(mad > 0, mad, fallback)

    active = np.flatnonzero(np.isfinite(delta) & (ols_sd > 0))
    for _ in range(HUBER_MAX_ITERATIONS):
        if active.size == 0:
            break
        dd, ss = flat_d[active], flat_s[active]
        a, b = delta[active], slot[active]
        scale = scale_of(dd, ss, a, b, ols_sd[active])
        u = np.abs(dd - a[:, None] - b[:, None] * ss) / scale[:, None]
        w = np.minimum(1.0, HUBER_K / np.maximum(u, 1e-300))
        a2, b2 = _weighted_fit(dd, ss, w)
        delta[active], slot[active] = a2, b2
        moved = np.maximum(np.abs(a2 - a), np.abs(b2 - b)) > HUBER_TOLERANCE * scale
        active = active[moved]
    residual = flat_d - delta[:, None] - slot[:, None] * flat_s
    scale = scale_of(flat_d, flat_s, delta, slot, ols_sd)
    with np.errstate(invalid="ignore", divide="ignore"):
        u = residual / scale[:, None]
        psi = np.clip(u, -HUBER_K, HUBER_K)
        inside = (np.abs(u) <= HUBER_K).astype(float)
        m = inside.mean(-1)
        k_h1 = 1 + 2 / n * inside.var(-1) / m ** 2
        variance = k_h1 ** 2 * (psi ** 2).sum(-1) / max(n - 2, 1) * scale ** 2 / m ** 2
        variance = np.where(ols_sd > 0, variance, 0.0)  # a perfect fit: nothing left to vary
    sum_ss, sum_s = (flat_s ** 2).sum(-1), flat_s.sum(-1)
    det = n * sum_ss - sum_s ** 2
    ok = np.isfinite(delta) & (n >= 3)
    safe = np.where(ok & (det > 0), det, np.nan)
    nan = np.float64(math.nan)
    shape = d.shape[:-1]
    estimate, se, slot_effect, slot_se = (np.where(ok, x, nan).reshape(shape) for x in (
        delta, np.sqrt(variance * sum_ss / safe), slot, np.sqrt(variance * n / safe)))
    return estimate, se, slot_effect, slot_se


def fit(d: Sequence[float], sigma: Sequence[float]) -> DuetEstimate:
    """Version 1's fit of one gate's pairs (DuetDesign.estimate)."""
    return DESIGNS[1].estimate(d, sigma)


def pair_codes(d: np.ndarray, sigma: np.ndarray, *, floor_pct: float, direction: str) -> np.ndarray:
    """Version 1's primary outcome codes of many gates at once (DuetDesign.codes: `sequential.look_codes` on
    Δ̂ with scale SE Δ̂ and critical value t_{1−α, n−2})."""
    return DESIGNS[1].codes(d, sigma, floor_pct=floor_pct, direction=direction)


# Version 2's critical values, by simulation under the preregistered null (normal pair noise, no effect; the
# slot effect and shared noise are removed exactly): c_test = the 1 − TEST_ALPHA quantile of Δ̂/SE, c_95 = the
# 0.975 quantile (the two-sided 95 % CI). benchmarks/duet_critical.py prints this table:
#   .venv/bin/python benchmarks/duet_critical.py --draws 200000 --largest 32 --check 48 64 96   (179 s)
HUBER_CRITICAL: dict[int, tuple[float, float]] = {  # pairs: (c_test, c_95)
    4: (3.0811, 4.2411),
    6: (2.6368, 3.4664),
    8: (2.2755, 2.8583),
    10: (2.0817, 2.5390),
    12: (1.9903, 2.3950),
    14: (1.9218, 2.3028),
    16: (1.8959, 2.2469),
    18: (1.8555, 2.1965),
    20: (1.8397, 2.1696),
    22: (1.8210, 2.1535),
    24: (1.8185, 2.1379),
    26: (1.8011, 2.1162),
    28: (1.7891, 2.0967),
    30: (1.7848, 2.0877),
    32: (1.7832, 2.0938),
}


def _df_share(table: Mapping[int, tuple[float, float]], alpha: float, which: int) -> float:
    """ν/(n − 2) at the table's largest n: the effective degrees of freedom whose t quantile is its c."""
    largest = max(table)
    nu = optimize.brentq(lambda v: sps.t.ppf(1 - alpha, v) - table[largest][which], 1.0, 1e7)
    return float(nu) / (largest - 2)


# Beyond the table: the Student t quantile with the effective degrees of freedom ν = share·(n − 2), the share
# that makes t_ν the calibrated value at the table's largest n (the studentized Huber estimate is asymptotically
# normal, as t_ν is). The share grows with n (0.66 at 32 pairs, 0.76 at 64: benchmarks/duet_critical.py
# --check), so holding it is conservative: c a little above what simulation gives.
HUBER_DF_SHARE: tuple[float, float] = (_df_share(HUBER_CRITICAL, 0.045, 0),
                                       _df_share(HUBER_CRITICAL, 0.025, 1))  # (for c_test, for c_95)


def _calibrated(table: Mapping[int, tuple[float, float]], shares: tuple[float, float] | None, fewest: int, n: int,
                alpha: float) -> float:
    """c for n pairs at one-sided TEST_ALPHA (the rule) or 0.025 (the 95 % CI) from a calibrated table; beyond
    it the t extrapolation with these effective-df shares, or (None) the table's last value; nan below the fewest
    pairs or for an odd n."""
    if alpha not in (TEST_ALPHA, 0.025):
        raise ValueError(f"the duet is calibrated at one-sided {TEST_ALPHA:g} and 0.025, not {alpha:g}")
    which = 0 if alpha == TEST_ALPHA else 1
    if n in table:
        return table[n][which]
    if n < fewest or n % 2:
        return math.nan
    if shares is None:
        return table[max(table)][which]
    return float(sps.t.ppf(1 - alpha, shares[which] * (n - 2)))


def huber_critical(n: int, alpha: float = TEST_ALPHA) -> float:
    """Version 2's critical value for n pairs at one-sided level TEST_ALPHA (the rule) or 0.025 (the 95 % CI)."""
    return _calibrated(HUBER_CRITICAL, HUBER_DF_SHARE, MIN_PAIRS, n, alpha)


# -- version 3: v2's fit, critical values calibrated over normal and two-speed-state noise -------------------

TWO_STATE_MIN_PAIRS = 10  # at 8 the MAD scale collapses onto the pairs whose runs shared a state: c unbounded
TWO_STATE_P = (0.15, 0.35, 0.5, 0.65, 0.85)  # the share of runs in the slower state
TWO_STATE_R = (3.0, 6.0, 12.0, 24.0, 48.0, 96.0, 192.0)  # the states' gap in run-noise SDs (see below: 10⁴)
# the composite null of version 3: normal noise (None), and every two-state law (p, r) of the grid
TWO_STATE_LAWS: tuple[tuple[float, float] | None, ...] = (
    None, *((p, r) for p in TWO_STATE_P for r in TWO_STATE_R))


def null_pair_noise(rng: np.random.Generator, gates: int, pairs: int, p: float, r: float) -> np.ndarray:
    """[gates, pairs] log-ratios d = run_on − run_off under no effect when each run draws N(0, 1) + r·B, B
    Bernoulli(p): the run lands in the slower of two speed states r run-noise SDs apart with probability p."""
    def runs() -> np.ndarray:
        return rng.standard_normal((gates, pairs)) + r * (rng.random((gates, pairs)) < p)
    return runs() - runs()


# Version 3's critical values: per number of pairs, the largest quantile of |Δ̂/SE| over TWO_STATE_LAWS (c_test at
# 1 − 2·TEST_ALPHA, c_95 at 0.95), each with the law that gave it (p share in the slow state, r the states' gap
# in run-noise SDs). benchmarks/duet_critical.py prints this table:
#   python benchmarks/duet_critical.py --family two-states --draws 200000 --jobs 16 --largest 32 --check 48 64
#   (200 000 null gates per n and law, 36 laws, 383 s on an H200 host's 16 cores, numpy 2.5.2)
# The grid stops at r = 192 (a +20 % state at a run-to-run CV of 0.1 %): at 12 pairs a law with the states 10⁴
# run-noise SDs apart needs c 3.16 (100 000 gates), because some gates end with the fit passing through the
# pairs of one state pattern (|Δ̂/SE| in the tens), and that c would cost two of the duet's power targets at its
# default 12 pairs (−10 % at CV 5 %: 93.0 %; −5 % at CV 2 % with 5 % outliers: 88.6 %). At every other size an
# earlier table over r up to 10⁴ gave no larger c_test than this one (its c_95 at 18 pairs: 2.63).
TWO_STATE_CRITICAL: dict[int, tuple[float, float]] = {  # pairs: (c_test, c_95)  least favourable: c_test; c_95
    10: (2.3246, 3.9318),  # p 0.5 r 48; p 0.5 r 96
    12: (2.2183, 3.0176),  # p 0.5 r 192; p 0.5 r 192
    14: (2.1347, 2.7217),  # p 0.5 r 192; p 0.5 r 48
    16: (1.9425, 2.3951),  # p 0.5 r 12; p 0.5 r 48
    18: (1.9099, 2.3831),  # p 0.5 r 12; p 0.5 r 192
    20: (1.9067, 2.2927),  # p 0.5 r 48; p 0.5 r 48
    22: (1.8569, 2.3391),  # p 0.5 r 6; p 0.5 r 192
    24: (1.8452, 2.1991),  # p 0.5 r 6; p 0.5 r 12
    26: (1.8294, 2.1809),  # p 0.5 r 6; p 0.5 r 12
    28: (1.8283, 2.1572),  # p 0.5 r 6; p 0.5 r 6
    30: (1.8128, 2.1420),  # p 0.65 r 6; p 0.5 r 12
    32: (1.8147, 2.1349),  # p 0.5 r 6; p 0.5 r 6
}
TWO_STATE_LEAST_FAVOURABLE: dict[int, tuple[float, float] | None] = {  # the law of each c_test (None: normal)
    10: (0.5, 48),
    12: (0.5, 192),
    14: (0.5, 192),
    16: (0.5, 12),
    18: (0.5, 12),
    20: (0.5, 48),
    22: (0.5, 6),
    24: (0.5, 6),
    26: (0.5, 6),
    28: (0.5, 6),
    30: (0.65, 6),
    32: (0.5, 6),
}


def two_state_critical(n: int, alpha: float = TEST_ALPHA) -> float:
    """Version 3's critical value for n pairs at one-sided level TEST_ALPHA (the rule) or 0.025 (the 95 % CI).
    Beyond the table, the table's last value: c falls with n, and the t extrapolation version 2 uses fell below
    the composite null's quantiles at 48 and 64 pairs (1.771 against 1.780, 1.751 against 1.764: `--check 48 64`
    above), the last value does not (1.815)."""
    return _calibrated(TWO_STATE_CRITICAL, None, TWO_STATE_MIN_PAIRS, n, alpha)


@dataclass(frozen=True, slots=True)
class DuetDesign:
    """One preregistered design of the duet policy: its slot order, its fit and its critical values; a series
    is decided by the design its predecision names (`duet_version`)."""

    version: int
    method: str
    signs: Callable[[Sequence[int] | np.ndarray], np.ndarray]  # σ_k of pair k relative to pair 1
    fit_arrays: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    critical: Callable[[int, float], float]  # (pairs, one-sided α) → c
    mirrored: bool  # whether the gate draws which slot off takes in pair 1 (from the predecision's sha256)
    arrangement: str  # the slot order in a few words ("slots swapped every pair")
    swap_words: str  # the same as a finding's lead says it ("swapped every pair")
    order_words: str  # how the slots are assigned, as the stated rules and the finding say it
    fit_words: str  # the estimate, as a reason says it
    critical_words: str  # the critical value's origin, as a reason says it ({df}: n − 2, {n}: pairs)
    min_pairs: int = MIN_PAIRS  # the fewest pairs (an even number) a gate file may state

    def estimate(self, d: Sequence[float], sigma: Sequence[float]) -> DuetEstimate:
        """The fit of one gate's pairs."""
        delta, delta_se, slot, slot_se = (float(x) for x in self.fit_arrays(np.asarray(d, float),
                                                                            np.asarray(sigma, float)))
        n = len(d)
        return DuetEstimate(n, delta, delta_se, slot, slot_se, n - 2, float(self.critical(n, TEST_ALPHA)))

    def codes(self, d: np.ndarray, sigma: np.ndarray, *, floor_pct: float, direction: str) -> np.ndarray:
        """The primary outcome codes of many gates at once (d: [gates, pairs]): `sequential.look_codes` on Δ̂
        with scale SE Δ̂ and this design's critical value."""
        delta, delta_se, _, _ = self.fit_arrays(d, sigma)
        critical = float(self.critical(np.asarray(d).shape[-1], TEST_ALPHA))
        if not math.isfinite(critical):
            delta = np.full_like(delta, math.nan)
            critical = 1.0  # every gate is nan, so look_codes says inconclusive whatever c is
        return look_codes(delta, delta_se, floor_pct=floor_pct, direction=direction, final=True, critical=critical)

    def on_slot1(self, pairs: int, draws: int, rng: np.random.Generator) -> np.ndarray:
        """[draws, pairs] booleans: did on run on physical slot 1 (the second slot of the gate file)? The
        mirror is drawn per gate, as the gate draws it from its predecision's sha256."""
        relative = self.signs(np.arange(1, pairs + 1)) > 0
        if not self.mirrored:
            return np.broadcast_to(relative, (draws, pairs))
        mirror = rng.random(draws) < 0.5
        return relative[None, :] != mirror[:, None]

    def slot_index(self, arm_is_off: bool, round_: int, predecision_sha256: str) -> int:
        """Which slot of the gate file (0 or 1) a run of pair `round_` takes."""
        on_slot1 = bool(self.signs([round_])[0] > 0) != (self.mirrored and mirror_of(predecision_sha256))
        return int(on_slot1 != arm_is_off)


def mirror_of(predecision_sha256: str) -> bool:
    """Version 2's coin: whether off takes the gate file's slot 1 in pair 1, drawn from the predecision's
    sha256 as the seeded run orders draw (schedule.order_seed), so it is fixed only after the rules are."""
    return random.Random(order_seed(predecision_sha256)).random() < 0.5


def _v1_critical(n: int, alpha: float) -> float:
    return float(critical_value(n - 2, alpha))


_THUE_MORSE_WORDS = ("the slots follow the Thue-Morse sequence over the pairs (on takes the slot off took in pair 1 "
                     "in pairs 2, 3, 5, 8, 9, 12, ...), which slot off takes in pair 1 drawn from this file's sha256")
DESIGNS: dict[int, DuetDesign] = {
    1: DuetDesign(1, METHOD, parity_signs, fit_arrays, _v1_critical, mirrored=False,
                  arrangement="slots swapped every pair", swap_words="swapped every pair",
                  order_words="odd pairs run off on slot 0 and on on slot 1, even pairs the reverse",
                  fit_words="OLS of the pair log-ratios", critical_words="Student t, {df} df"),
    2: DuetDesign(2, "pair log-ratios, Huber M-estimate (k 1.345, MAD scale) on [1, slot sign], sandwich SE, "
                     "critical values calibrated per number of pairs",
                  thue_morse_signs, huber_arrays, huber_critical, mirrored=True,
                  arrangement="slots in Thue-Morse order", swap_words="in Thue–Morse order",
                  order_words=_THUE_MORSE_WORDS,
                  fit_words="Huber M-estimate of the pair log-ratios",
                  critical_words="calibrated by simulation for {n} pairs"),
    3: DuetDesign(3, "pair log-ratios, Huber M-estimate (k 1.345, MAD scale) on [1, slot sign], sandwich SE, "
                     "critical values calibrated per number of pairs over normal and two-speed-state noise",
                  thue_morse_signs, huber_arrays, two_state_critical, mirrored=True,
                  arrangement="slots in Thue-Morse order", swap_words="in Thue–Morse order",
                  order_words=_THUE_MORSE_WORDS,
                  fit_words="Huber M-estimate of the pair log-ratios",
                  critical_words="calibrated for {n} pairs over normal and two-speed-state noise",
                  min_pairs=TWO_STATE_MIN_PAIRS),
}
CURRENT = DESIGNS[3]


# -- the pairs of a series ------------------------------------------------------------------------------

def slot_order(classified: RunTable, off_arm: str, design: DuetDesign | None = None) -> tuple[str, str] | None:
    """(slot 0, slot 1) as the runs recorded them; None when no run recorded a slot. Version 1: slot 0 is where
    off ran in the first odd pair (the swap rule puts it there), else where on ran in the first even pair.
    Version 2, whose pair 1 may put off on either slot (the drawn mirror): the lower-numbered slot
    (`slot_number`: cuda:0 before cuda:1, cpu:0-3 before cpu:4-7), so a finding names them as a gate file does."""
    design = design or DESIGNS[1]
    rows = classified.filter(lambda row: row.slot is not None)
    if not rows:
        return None
    names = list(dict.fromkeys(str(row.slot) for row in rows.in_order()))
    if design.mirrored:
        ordered = sorted(names, key=slot_number)
        return (ordered[0], ordered[-1])  # one name twice when every run shared one slot
    first = min(rows, key=lambda row: (row.pair, row.order))
    parity_one = first.pair % 2 == 1
    is_off = first.arm == off_arm
    # odd pairs put off on slot 0, even pairs put on there
    first_slot = str(first.slot)
    other = next((s for s in names if s != first_slot), first_slot)  # itself when every run shared one slot
    return (first_slot, other) if parity_one == is_off else (other, first_slot)


def slot_number(text: str) -> tuple[int, ...]:
    """A slot's place in order: its GPU index, or its cpu cores; a text that is not a slot sorts after."""
    try:
        slot = parse_slot(text)
    except SlotError:
        return (1 << 30,)
    return (slot.gpu,) if slot.gpu is not None else slot.cores


@dataclass(frozen=True, slots=True)
class DuetPair:
    """One pair as the decision reads it: its round, both values, and the slot sign σ."""

    round: int
    off: float
    on: float
    sigma: float
    off_label: str
    on_label: str


def pairs_of(classified: RunTable, off_arm: str, on_arm: str, design: DuetDesign | None = None
             ) -> tuple[list[DuetPair], tuple[str, str] | None]:
    """The used pairs with σ_k: from the `slot` column where the runs recorded one (on on slot 1: +1, on on
    slot 0: −1, both on one slot: 0), else from the design's sign of the pair's original round (version 1:
    its parity; a replacement re-runs its round in the same slots)."""
    design = design or DESIGNS[1]
    order = slot_order(classified, off_arm, design)
    retry_of = classified.retry_of()
    pairs: list[DuetPair] = []
    for round_, rows in classified.used.by_pair().items():
        by_arm = {r.arm: r for r in rows}
        if off_arm not in by_arm or on_arm not in by_arm:
            continue
        off_row, on_row = by_arm[off_arm], by_arm[on_arm]
        off_slot, on_slot = off_row.slot, on_row.slot
        if order is not None and off_slot is not None and on_slot is not None:
            sigma = 0.0 if off_slot == on_slot else (1.0 if on_slot == order[1] else -1.0)
        else:
            sigma = float(design.signs([rules.lineage_root(round_, retry_of)])[0])
        pairs.append(DuetPair(round_, off_row.value, on_row.value, sigma, off_row.label, on_row.label))
    return pairs, order


# -- the decision ------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DuetOutcome:
    decision: str  # adopted | rejected | regression | equivalent | inconclusive | guard_failed
    reasons: tuple[str, ...]
    info: DuetInfo | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _info(estimate: DuetEstimate | None, *, floor_pct: float, primary: str, decision: str,
          guards: Mapping[str, PairedGuard], slots: tuple[str, str] | None, balance: tuple[int, int],
          design: DuetDesign) -> DuetInfo:
    def bounds(value: float, se: float) -> tuple[float, float, float]:
        lo, hi = estimate.interval(value, se) if estimate else (math.nan, math.nan)
        return pct(value), pct(lo), pct(hi)

    delta = bounds(estimate.delta, estimate.delta_se) if estimate else (math.nan,) * 3
    slot = bounds(estimate.slot, estimate.slot_se) if estimate else (math.nan,) * 3
    ci95 = (math.nan, math.nan)
    if estimate and estimate.df >= 1:
        half = float(design.critical(estimate.n_pairs, 0.025)) * estimate.delta_se
        ci95 = (pct(estimate.delta - half), pct(estimate.delta + half))
    return DuetInfo(
        version=design.version, method=design.method, alpha=ALPHA, test_alpha=TEST_ALPHA, interval_level=INTERVAL_LEVEL,
        floor_pct=floor_pct,
        n_pairs=estimate.n_pairs if estimate else sum(balance), pairs_on_slot1=balance[0],
        pairs_on_slot0=balance[1], df=estimate.df if estimate else None,
        critical=estimate.critical if estimate and math.isfinite(estimate.critical) else None,
        delta_pct=delta[0], ci_low_pct=delta[1], ci_high_pct=delta[2],
        slot_effect_pct=slot[0], slot_ci_low_pct=slot[1], slot_ci_high_pct=slot[2],
        slots=slots or (), ci95_low_pct=ci95[0], ci95_high_pct=ci95[1], guard_level=GUARD_LEVEL,
        guards=dict(guards), primary=primary, decision=decision)


def decide(classified: RunTable, guard_values: Mapping[str, Mapping[str, float]], *, off_arm: str,
           on_arm: str, guard_specs: Sequence[GuardSpec], floor_pct: float, direction: str,
           primary: str, design: DuetDesign | None = None) -> DuetOutcome:
    """The duet decision on the used pairs by a design (version 1 unless given). `guard_values` maps guard
    metric → {run label: value}."""
    design = design or DESIGNS[1]
    flagged = unreplaced_flags(classified)
    if flagged:
        return DuetOutcome("inconclusive", (flagged,))
    pairs, slots = pairs_of(classified, off_arm, on_arm, design)
    balance = (sum(p.sigma > 0 for p in pairs), sum(p.sigma < 0 for p in pairs))
    guards: dict[str, PairedGuard] = {}
    for spec in guard_specs:
        values = guard_values.get(spec.metric, {})
        guard_pairs = [(values[p.off_label], values[p.on_label]) for p in pairs
                       if p.off_label in values and p.on_label in values]
        guards[spec.metric] = paired_guard(spec, guard_pairs, GUARD_LEVEL)
    off_logs, on_logs = log_values([p.off for p in pairs]), log_values([p.on for p in pairs])
    warnings: list[str] = []
    if balance[0] != balance[1]:
        warnings.append(f"the pairs are unbalanced across the slots ({balance[0]} with on on slot 1, {balance[1]} "
                        "on slot 0): the slot effect is still removed, at some cost in precision")
    reasons: list[str] = []
    fewest = design.min_pairs
    if off_logs is None or on_logs is None or len(pairs) < fewest or min(balance) == 0:
        why = ("a value is not positive" if off_logs is None or on_logs is None
               else f"{len(pairs)} used pair(s), fewer than {fewest}" if len(pairs) < fewest
               else "every used pair ran in one slot order, so the slot effect cannot be told from Δ")
        info = _info(None, floor_pct=floor_pct, primary="inconclusive", decision="inconclusive", guards=guards,
                     slots=slots, balance=balance, design=design)
        return DuetOutcome("inconclusive", (Reason(ReasonCode.DUET_TOO_FEW_PAIRS, f"the duet estimate needs both slot "
                                                   f"orders and at least {fewest} pairs: {why}"),), info,
                           tuple(warnings))
    d = on_logs - off_logs
    estimate = design.estimate(d, [p.sigma for p in pairs])
    code = int(design.codes(d[None, :], np.array([[p.sigma for p in pairs]]), floor_pct=floor_pct,
                            direction=direction)[0])
    primary_outcome = CODE_NAMES[code]
    decision = with_guards(code, guards, final=True)
    info = _info(estimate, floor_pct=floor_pct, primary=primary_outcome, decision=decision, guards=guards,
                 slots=slots, balance=balance, design=design)
    reasons += _reasons(info, estimate, primary, design)
    return DuetOutcome(decision, tuple(reasons), info, tuple(warnings))


def _reasons(info: DuetInfo, estimate: DuetEstimate, primary: str, design: DuetDesign) -> list[Reason]:
    c, floor = estimate.critical, info.floor_pct
    t = estimate.delta / estimate.delta_se if estimate.delta_se > 0 else math.copysign(math.inf, estimate.delta)
    why = {"adopted": "significantly better by at least the floor",
           "regression": "significantly worse by at least the floor",
           "equivalent": f"the interval lies inside ±{floor:g} %",
           "rejected": f"the interval rules out an improvement of {floor:g} %",
           "inconclusive": "neither a floor-sized difference nor equivalence is shown"}
    origin = design.critical_words.format(df=estimate.df, n=estimate.n_pairs)
    lines = [Reason(ReasonCode.DUET_ESTIMATE,
                    f"duet ({info.n_pairs} pairs, {design.arrangement}): {primary} Δ {info.delta_pct:+.4f} % "
                    f"({design.fit_words} with the slot effect removed), {100 * INTERVAL_LEVEL:g} % interval "
                    f"[{info.ci_low_pct:+.4f} %, {info.ci_high_pct:+.4f} %], t {t:+.3f} vs ±{c:.4g} ({origin}, "
                    f"one-sided α {TEST_ALPHA:g}), floor ±{floor:g} % → {info.primary} "
                    f"({why[info.primary]}); two-sided 95 % CI [{info.ci95_low_pct:+.4f} %, "
                    f"{info.ci95_high_pct:+.4f} %]")]
    slot_names = f" ({info.slots[1]} minus {info.slots[0]})" if len(info.slots) == 2 else ""
    lines.append(Reason(ReasonCode.DUET_SLOT_EFFECT, f"slot effect{slot_names}: {info.slot_effect_pct:+.4f} %, "
                        f"{100 * INTERVAL_LEVEL:g} % interval [{info.slot_ci_low_pct:+.4f} %, "
                        f"{info.slot_ci_high_pct:+.4f} %] — estimated from the swap and removed from Δ"))
    if info.primary == "inconclusive" and info.ci_high_pct is not None and info.ci_low_pct is not None:
        half_width = (info.ci_high_pct - info.ci_low_pct) / 2
        lines.insert(0, too_noisy_reason(half_width, basis="half the width of its interval"))
    lines += [guard_reason(guard, f"{100 * GUARD_LEVEL:g} % bound") for guard in info.guards.values()]
    if info.primary == "adopted" and info.decision == "inconclusive":
        lines.append(Reason(ReasonCode.GUARD_BOUND_TOO_WIDE, "a guard's bound is too wide to pass: inconclusive, "
                                                             "never a pass"))
    return lines


# -- the policy object --------------------------------------------------------------------------------

class DuetPolicy(OneLook, SimulationDefaults):
    """Both arms of a pair at once on twin slots in the design's slot order: the pairs' log-ratios with the
    slot effect estimated and removed (version 1: OLS and a Student t interval with n − 2 df; version 2: the
    Huber M-estimate and critical values calibrated under normal noise; version 3: the same fit, critical values
    calibrated over normal and two-speed-state noise), the sequential policy's floor-aware outcomes, paired
    guards, telemetry-only contamination (the statistics above)."""

    def __init__(self, design: DuetDesign, name: str = "duet") -> None:
        self.design, self.name = design, name

    def slot_index(self, arm_is_off: bool, round_: int, predecision_sha256: str) -> int:
        """Which slot of the gate file (0 or 1) a run of pair `round_` takes (the run loop asks)."""
        return self.design.slot_index(arm_is_off, round_, predecision_sha256)

    def on_slot1(self, pairs: int, draws: int, rng: np.random.Generator) -> np.ndarray:
        """`gate simulate`: where on ran, per simulated gate and pair (DuetDesign.on_slot1)."""
        return self.design.on_slot1(pairs, draws, rng)

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        floor, alpha, level = threshold.floor_pct, TEST_ALPHA, INTERVAL_LEVEL
        if self.design.version == 1:
            order = ("Policy duet: pair k runs the off and the on run at the same time, one on each slot; odd pairs "
                     "run off on slot 0 and on on slot 1, even pairs the reverse. The classic Delta and threshold "
                     "are reported beside it and decide nothing.")
            fit_rule = ("Per pair d = ln(on) - ln(off) = Delta + s*sign + noise, sign = +1 when on ran on slot 1, -1 "
                        "when on ran on slot 0 (from the runs' recorded slots; the pair's parity where none was "
                        "recorded); s is the slot-1-minus-slot-0 effect. Noise both runs share cancels from d. Delta "
                        "and s are the least squares fit of d on [1, sign]; SE from the residuals with n - 2 degrees "
                        f"of freedom; c = the one-sided {1 - alpha:g} Student t quantile with n - 2 df; interval "
                        f"Delta +/- c SE ({100 * level:g} %).")
        else:
            order = (f"Policy duet (version {self.design.version}): pair k runs the off and the on run at the same "
                     f"time, one on each slot; {self.design.order_words}. Slot 0 is the lower-numbered slot (cuda:0 "
                     "before cuda:1; the cpu slot with the lower cores). A replacement pair keeps the slots of the pair it replaces. The classic Delta and threshold are "
                     "reported beside it and decide nothing.")
            if self.design.version == 2:
                calibration = ("c = the critical value calibrated by simulation for n pairs under normal noise at "
                               f"one-sided {alpha:g} (gatekit/policies/duet.py, HUBER_CRITICAL)")
            else:
                calibration = ("c = the critical value calibrated by simulation for n pairs as the largest "
                               f"{1 - 2 * alpha:g} quantile of |Delta/SE| over normal noise and runs that move "
                               "between two speed states (each run N(0, 1) + r*Bernoulli(p), p in "
                               f"{', '.join(f'{p:g}' for p in TWO_STATE_P)}, r in "
                               f"{', '.join(f'{r:g}' for r in TWO_STATE_R)} run-noise SDs; gatekit/policies/duet.py, "
                               f"TWO_STATE_CRITICAL; beyond {max(TWO_STATE_CRITICAL)} pairs, its value there); at least "
                               f"{self.design.min_pairs} pairs")
            fit_rule = ("Per pair d = ln(on) - ln(off) = Delta + s*sign + noise, sign = +1 when on ran on slot 1, -1 "
                        "when on ran on slot 0 (from the runs' recorded slots; the Thue-Morse sign of the pair where "
                        "none was recorded); s is the slot-1-minus-slot-0 effect. Noise both runs share cancels from "
                        "d. Delta and s are the Huber M-estimate of d on [1, sign] (k = 1.345, scale = MAD of the "
                        "residuals / 0.6745, iteratively reweighted least squares from the least squares fit); SE = "
                        f"Huber's sandwich (H1); {calibration}; interval Delta +/- c SE ({100 * level:g} %).")
        decision_rule = (
            f"Adopted iff Delta/SE is beyond c on the better side AND Delta is at least {floor:g} % better AND "
            f"every guard passes. Regression iff Delta/SE is beyond c on the worse side AND at least {floor:g} % "
            f"worse. Equivalent iff the interval lies inside +/-{floor:g} %. Rejected iff it excludes an "
            f"improvement of {floor:g} %. Anything else is inconclusive. The slot effect is reported in % with "
            "its interval.")
        return [
            order,
            fit_rule,
            decision_rule,
            f"Guards: paired non-inferiority on the pairs' (off, on) values: pass iff the one-sided "
            f"{100 * GUARD_LEVEL:g} % t bound of mean(on - off) clears -max_drop (+max_drop for "
            "lower-is-better guards); fail iff the opposite bound is beyond it; otherwise inconclusive, and an "
            "adoption becomes inconclusive — never a pass.",
            f"Contamination only from telemetry that does not look at the result (rules.evidence = "
            f"{rules_spec.evidence}, the backend's evidence for the slot, the machine on battery); a flagged or "
            f"failed run takes its pair out, and the pair is re-run, both runs together; needing more than "
            f"{rules_spec.max_retries} re-run(s) for a pair makes the outcome inconclusive.",
        ]

    def classify(self, runs: RunTable, rules_spec: RulesSpec, replaced: Mapping[int, rules.Replacement],
                 cores: int | None) -> RunTable:
        return sequential.classify(runs, rules_spec, replaced, cores)

    def retries(self, classified: RunTable, rules_spec: RulesSpec, off_arm: str, on_arm: str) -> list[Retry]:
        # both runs of the pair again, together: neither goes first
        needed = sequential.rounds_needing_replacement(classified)
        return [Retry(round_, flagged) for round_, flagged in needed.items()]

    def unresolved(self, classified: RunTable) -> RunTable:
        return classified.filter(lambda row: not row.replaced and row.failed)

    def warnings(self, evidence: Evidence) -> list[str]:
        return sequential.SEQUENTIAL.warnings(evidence)

    def decide(self, classic: Verdict, classified: RunTable, records: Sequence[RunRecord], *, off_arm: str,
               on_arm: str, primary: str, direction: str, guards: Sequence[Any], floor_pct: float,
               warnings: Sequence[str]) -> Decided:
        """The duet estimate decides; the classic verdict is reported beside it as one reason."""
        values = guard_values(classified, records, guards)
        outcome = decide(classified, values, off_arm=off_arm, on_arm=on_arm, guard_specs=guards,
                         floor_pct=floor_pct, direction=direction, primary=primary, design=self.design)
        all_warnings = (*warnings, *outcome.warnings)
        if classic.decision is Decision.INVALID:
            return Decided(Verdict(Decision.INVALID, classic.reasons, all_warnings), duet=outcome.info)
        reasons = [*outcome.reasons, classic_beside(classic)]
        return Decided(Verdict(Decision(outcome.decision), tuple(reasons), all_warnings), duet=outcome.info)

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec,
                 max_threshold_pct: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """The design's codes (the function behind `gate run`); column k is pair k + 1, its slot sign the
        design's, relative to pair 1 (Δ̂ does not change when every sign flips, so the mirror a gate draws does
        not matter here; `on_slot1` puts the runs where it put them)."""
        signs = self.design.signs(np.arange(1, off_log.shape[-1] + 1))
        codes = self.design.codes(on_log - off_log, signs, floor_pct=thresholds.floor_pct, direction="lower")
        return codes, np.full(off_log.shape[0], off_log.shape[-1])

    def check_scenario(self, scenario: Scenario) -> None:
        if not duet_pairs_ok(scenario.n, self.design.min_pairs):
            raise ConfigError(f"--n: {duet_pairs_rule(self.design.min_pairs)} under --policy {self.name} (duet "
                              f"version {self.design.version}), got {scenario.n}")
        if scenario.order is not None:
            raise ConfigError("--order: does not apply to --policy duet (both runs of a pair run at once)")

    def unreachable(self, effect_pct: float, cv_pct: float, thresholds: ThresholdSpec, most: int) -> str:
        floor_pct = thresholds.floor_pct
        if -effect_pct <= floor_pct:
            return (f"the duet policy adopts only when its whole interval is beyond the floor {floor_pct:g} %: a "
                    f"true {effect_pct:+g} % is not beyond it; state a larger effect or lower the floor")
        return f"more than {most} pairs are needed: lower the noise first"

    def words(self, finding: Finding) -> PolicyWords:
        """The lead and a table give the estimate with the slot effect removed and the slot effect itself; the
        summary names the slots and the pairs."""
        duet = finding.duet
        if duet is None:  # flagged or failed runs without a replacement: no estimate, still a duet's words
            return self._words_without_estimate(finding)
        gate, s = finding.gate, finding.stats
        design = DESIGNS.get(duet.version, self.design)
        swapped = design.swap_words
        slots = f" on slots {duet.slots[0]} and {duet.slots[1]}" if len(duet.slots) == 2 else ""
        lead = (f"Duet gate of `{finding.on_arm}` against `{finding.off_arm}`: {duet.n_pairs} pairs, both runs of a "
                f"pair at once{slots}, {swapped}, deciding on {gate.primary} ({gate.direction} is better). "
                f"Decision: **{finding.verdict.decision.value}** — Δ {fmt_signed(duet.delta_pct, unit=' %')} as a "
                f"ratio of geometric means with the slot effect removed, {100 * duet.interval_level:g} % CI "
                f"[{fmt_signed(duet.ci_low_pct, unit=' %')}, {fmt_signed(duet.ci_high_pct, unit=' %')}], "
                f"floor ±{duet.floor_pct:g} %; slot effect (slot 1 against slot 0) "
                f"{fmt_signed(duet.slot_effect_pct, unit=' %')} [{fmt_signed(duet.slot_ci_low_pct, unit=' %')}, "
                f"{fmt_signed(duet.slot_ci_high_pct, unit=' %')}]. The classic Δ {fmt_signed(s.delta_pct, unit=' %')} against "
                f"{fmt(s.threshold_pct)} % is reported beside it.")
        level = f"{100 * duet.interval_level:g} %"
        slot_names = f"{duet.slots[1]} against {duet.slots[0]}" if len(duet.slots) == 2 else "slot 1 against slot 0"
        items = [
            {"key": "Δ, slot effect removed", "value": f"{fmt_signed(duet.delta_pct, unit=' %')}, {level} CI "
             f"[{fmt_signed(duet.ci_low_pct, unit=' %')}, {fmt_signed(duet.ci_high_pct, unit=' %')}]"},
            {"key": f"slot effect ({slot_names})",
             "value": f"{fmt_signed(duet.slot_effect_pct, unit=' %')}, {level} CI "
             f"[{fmt_signed(duet.slot_ci_low_pct, unit=' %')}, {fmt_signed(duet.slot_ci_high_pct, unit=' %')}]"},
            {"key": "pairs with on on slot 1 / slot 0", "value": f"{duet.pairs_on_slot1} / {duet.pairs_on_slot0}"},
            {"key": "Student t critical value (df)",
             "value": f"{fmt(duet.critical)} ({duet.df if duet.df is not None else MISSING})"} if design.version == 1
            else {"key": "critical value (calibrated for these pairs)", "value": fmt(duet.critical)},
            *({"key": f"guard {name} (paired)", "value": f"mean(on − off) {fmt(g.mean_diff)}, bound {fmt(g.bound)} "
               f"vs limit {g.limit:+g} → {g.status}"} for name, g in duet.guards.items()),
        ]
        line = (f"duet: Δ {fmt(duet.delta_pct)} % ({level_text(duet.interval_level)} CI {fmt(duet.ci_low_pct)} … "
                f"{fmt(duet.ci_high_pct)} %, slot effect removed)   slot effect {fmt(duet.slot_effect_pct)} % "
                f"({fmt(duet.slot_ci_low_pct)} … {fmt(duet.slot_ci_high_pct)} %) → {duet.decision}")
        return PolicyWords(lead=lead, sections=(generated_section("heading", text="Duet estimate"),
                                                generated_section("kv", items=tuple(items))),
                           arrangement="slots " + " & ".join(duet.slots), size=f"n={duet.n_pairs} pairs, duet",
                           lines=(line,), classic_label=CLASSIC_LABEL)

    def _words_without_estimate(self, finding: Finding) -> PolicyWords:
        """A duet that has no estimate (every pair flagged or failed) still reads as one: its slots, its pairs,
        and that nothing was estimated — never an interleaved gate's lead."""
        gate = finding.gate
        slots = tuple(dict.fromkeys(run.slot for run in sorted(finding.runs, key=lambda r: r.order) if run.slot))
        if self.design.mirrored:  # named as slot_order names them
            slots = tuple(sorted(slots, key=slot_number))
        on_slots = f" on slots {slots[0]} and {slots[1]}" if len(slots) == 2 else ""
        reason = finding.verdict.reasons[0] if finding.verdict.reasons else "no pair was left to estimate from"
        swapped = self.design.swap_words
        lead = (f"Duet gate of `{finding.on_arm}` against `{finding.off_arm}`: {gate.n} pairs planned, both runs of a "
                f"pair at once{on_slots}, {swapped}, deciding on {gate.primary} ({gate.direction} is "
                f"better). Decision: **{finding.verdict.decision.value}** — no duet estimate: {reason}.")
        return PolicyWords(lead=lead, arrangement="slots " + " & ".join(slots) if slots else "duet",
                           size=f"n={gate.n} pairs, duet", classic_label=CLASSIC_LABEL)


CLASSIC_LABEL = "classic, beside it (decides nothing): "  # the summary's line of the classic Δ and threshold
POLICIES = {version: DuetPolicy(design) for version, design in DESIGNS.items()}
DUET = POLICIES[CURRENT.version]
assert describe(DUET.name).version == CURRENT.version, "a new duet series preregisters the current design"
assert describe(DUET.name).min_n == CURRENT.min_pairs, "a gate file's fewest pairs are the current design's"
assert all(duet_pairs_ok(n, CURRENT.min_pairs) for n in describe(DUET.name).plan_sizes), \
    "gate plan tries only sizes a duet can run"


def policy(version: int | None = None) -> DuetPolicy:
    """The duet policy in the design a predecision names (None: the current one)."""
    if version is None:
        return DUET
    if version not in POLICIES:
        raise ConfigError(f"duet_version {version}: this gatekit knows duet versions "
                          f"{', '.join(map(str, POLICIES))}")
    return POLICIES[version]


def version_1(version: int | None = None) -> DuetPolicy:
    """Version 1 (slots swapped every pair, OLS, Student t), for `gate simulate --policy duet-v1` beside the
    current design."""
    return VERSION_1_SIMULATED


def version_2(version: int | None = None) -> DuetPolicy:
    """Version 2 (Thue–Morse slots, Huber fit, calibrated critical values), for `gate simulate --policy duet-v2`
    beside the current design."""
    return VERSION_2_SIMULATED


VERSION_1_SIMULATED = DuetPolicy(DESIGNS[1], name="duet-v1")
VERSION_2_SIMULATED = DuetPolicy(DESIGNS[2], name="duet-v2")

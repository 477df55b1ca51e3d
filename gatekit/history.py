"""A metric across findings over time, and its change points.

Candidates come from `ruptures` (Truong, Oudre & Vayatis, "Selective review of offline change point
detection methods", Signal Processing 2020): PELT (Killick, Fearnhead & Eckley, JASA 2012) with the l2
cost, i.e. shifts in the mean. The penalty is the BIC for a mean shift in Gaussian noise (Schwarz 1978):
each change adds a mean and a location, so pen = 2·σ̂²·ln n in the l2 cost's units, with σ̂ the noise
estimated robustly from first differences, MAD(Δx)·1.4826/√2 (the differences of a piecewise-constant
series are noise except at the few changes, and differencing doubles the variance). When more than half
the differences are exactly zero the MAD is zero; σ̂ then falls back to the differences' sample SD/√2, and
a series with no variation at all has no change points. Segments hold at least CHANGE_MIN_SEGMENT = 4
findings.

First the whole series must show a shift, by a test that autocorrelated noise does not fool (a machine
drifting over days makes neighbouring findings alike, and a permutation test, which takes them as
exchangeable, then sees shifts in 17–43 % of flat series). The statistic is a likelihood ratio of the series'
maximal invariant under location and scale (Wijsman 1967: the mean and σ integrate out, so no estimate of
either enters): a step of ±STEP_SIGMA noise SDs in white noise, averaged over its places (at least
CHANGE_MIN_SEGMENT findings on each side), against a flat mean plus AR(1) noise u_t = ρ·u_{t−1} + e_t, the
best ρ ∈ PROFILE_RHOS (0 … RHO_MAX). Against one ρ the same ratio is the Neyman–Pearson test, the most
powerful there is for a step at a random place; benchmarks/change_points.py --ceiling measures that bound,
which no test reaches. Its p-value is taken against NULL_SERIES seeded flat AR(1) series (fewer for
histories of over 200 findings, null_series_for) at each ρ of 0, 0.15, … RHO_MAX = 0.6, (1 + hits) /
(1 + null series), and is the largest of them (which ρ is least
favourable depends on the series' length), so a flat series with any ρ ≤ 0.6 shows a change point at most α
of the time, however many candidates PELT proposed.

Then each candidate is tested by permutation within the window its two neighbouring segments span, as
E-Divisive (Matteson & James, JASA 2014) and Apache Otava do. That test is on ranks, so a lone spike is only
the largest value: the statistic is the largest l2 cost reduction of one split of the window's ranks,
max_k k(m−k)/m·(r̄₂ − r̄₁)² (a max-type Wilcoxon rank-sum statistic, as in Pettitt, Applied Statistics
1979), so the search for the split is part of the null. Its p-value is how often a random reordering of
the window reaches it, (1 + hits) / (1 + permutations) (Phipson & Smyth 2010), exact (every ordering) when
a window has few enough. The weakest candidate is dropped while its p exceeds α / (candidates left)
(Bonferroni), its neighbours merge and the rest are tested again (Otava's pruning of weak change points).
Where no candidate survives in a series that passed the shift test, its own best split is the change point,
with the shift test's p. The permutations and the null series use fixed seeds: the same series gives the same
answer.
A slow drift is not a step: a linear trend is tested on its own (trend_test: the likelihood ratio of a line
against a flat mean, both in AR(1) noise of the best ρ ≤ RHO_MAX, p taken against the same seeded flat AR(1)
null series as the shift test), and where the trend test passes and the line leaves a smaller residual sum of squares than the best single
step (whose place is searched, which favours the step), the series is reported as a trend with its slope, not
as change points.
A lone spike (a finding further than 3.5·√2·σ̂ from each neighbour on the same side) and two adjacent
spikes (two findings inside the series both that far from the findings before and after them, on the same
side) are left out of the search altogether (an excursion that returns is not a change), and the table
marks exactly those findings. A series needs 2·CHANGE_MIN_SEGMENT = 8 findings before a change can be
found at all: a step is reported once 4 findings follow it.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import matplotlib
import numpy as np
import ruptures
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy.special import gammaln, logsumexp
from scipy.stats import rankdata

from gatekit import stats
from gatekit.errors import ConfigError
from gatekit.finding import Finding, Stats
from gatekit.findingset import LoadedFinding, by_date
from gatekit.formatting import fmt, is_number
from gatekit.sanitize import show_controls

MIN_SEGMENT = 2  # the rank statistic's shortest side of a split
MAD_TO_SIGMA = 1.4826  # 1/Φ⁻¹(3/4): MAD of Gaussian noise × this = σ
ALPHA = 0.05  # `gate history --alpha`: the shift test and each candidate's permutation test at this level
PERMUTATIONS = 999  # random orderings per test; 999 resolves p to 0.001
SEED = 0  # the permutations' seed: the same series always gives the same change points
OUTLIER_Z = 3.5  # Iglewicz & Hoaglin (1993): a modified z-score above 3.5 marks an outlier
CHANGE_MIN_SEGMENT = 4  # findings on each side of a change (segments of PELT and the shift test): reported after 4
RHO_MAX = 0.6  # the most autocorrelated noise (AR(1) ρ) a flat series' false-alarm rate is guaranteed for
PROFILE_RHOS = tuple(round(0.05 * i, 2) for i in range(13))  # ρ the flat likelihood is maximised over: 0 … 0.6
NULL_RHO_STEP = 0.15  # the shift test's p is the largest over null series of ρ 0, 0.15, … RHO_MAX
STEP_SIGMA = 3.0  # the step (in noise SDs) the shift test is most powerful for: the step it must find
MOMENT_POINTS = 4097  # values of z in the table of ln J_ν(z) the step likelihoods interpolate
MOMENT_NODES = 481  # trapezoid nodes per value
# seeded flat AR(1) series per null ρ behind the shift test's p-value (null_series_for): the critical value
# itself carries a Monte-Carlo error of about ±0.3 points of false-alarm rate with 4 999, ±0.15 with 19 999
NULL_SERIES = 19_999
NULL_SERIES_FLOOR = 4999  # the fewest, for long histories
NULL_WORK = 4_000_000  # findings simulated per null ρ at most (above the floor): 19 999 series up to 200 findings
NULL_CHUNK = 1000  # null series simulated at once: bounds memory for long histories
METHOD = ("AR(1)-robust likelihood-ratio tests of one step and of a linear trend; the trend reported where it "
          "passes and a line fits better than the best step; else the test of one step (a 3σ step in white noise at any place against flat AR(1) "
          "noise of ρ ≤ 0.6, location- and scale-invariant, p the largest over null ρ 0 … 0.6), "
          "then ruptures PELT candidates (l2 cost, BIC penalty 2·σ̂²·ln n), each kept at permutation p ≤ α")


@dataclass(frozen=True, slots=True)
class Point:
    date: str
    finding_id: str
    gate_id: str
    value: float


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """A change in the mean starting at `index` (the first finding of the new segment)."""

    index: int
    date: str
    finding_id: str
    before_mean: float
    after_mean: float
    p: float = math.nan  # permutation p-value within the neighbouring segments

    @property
    def change_pct(self) -> float:
        return stats.delta_pct(self.before_mean, self.after_mean)


@dataclass(frozen=True, slots=True)
class Trend:
    """A linear drift of the metric: its least-squares slope per finding (in the metric's units), the fitted
    level at the first and the last finding, and the trend test's p."""

    slope: float
    first: float
    last: float
    p: float

    @property
    def slope_pct(self) -> float:
        """The slope as a percent of the fitted first level, per finding."""
        return 100.0 * self.slope / self.first if self.first else math.nan

    @property
    def change_pct(self) -> float:
        """The fitted change from the first finding to the last, in percent."""
        return stats.delta_pct(self.first, self.last)


@dataclass(frozen=True, slots=True)
class History:
    metric: str
    described: str  # what the metric is, in words
    points: tuple[Point, ...]
    change_points: tuple[ChangePoint, ...]
    sigma: float
    penalty: float
    skipped: tuple[str, ...]  # finding ids without the metric
    gates: tuple[str, ...]
    alpha: float = ALPHA
    candidates: int = 0  # PELT's candidates before the permutation tests
    outliers: tuple[int, ...] = ()  # indices of lone spikes and adjacent pairs of them, left out of the search
    shift_p: float = math.nan  # the shift test's p-value on the whole series (NaN: too few findings to test)
    trend_p: float = math.nan  # the trend test's p-value (NaN: too few findings to test)
    trend: Trend | None = None  # the series drifts: reported instead of change points

    @property
    def tested(self) -> bool:
        """Enough findings (outliers left out) for the tests: CHANGE_MIN_SEGMENT on each side of a change."""
        return len(self.points) - len(self.outliers) >= 2 * CHANGE_MIN_SEGMENT

    def segment_means(self) -> list[float]:
        bounds = [0, *[c.index for c in self.change_points], len(self.points)]
        means: list[float] = []
        for start, end in zip(bounds, bounds[1:]):
            segment = [p.value for p in self.points[start:end]]
            means += [stats.mean(segment)] * len(segment)
        return means

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric, "described": self.described, "gates": list(self.gates),
            "method": METHOD, "sigma": self.sigma, "penalty": self.penalty if self.penalty > 0 else None,
            "alpha": self.alpha, "shift_p": None if math.isnan(self.shift_p) else self.shift_p,
            "trend_p": None if math.isnan(self.trend_p) else self.trend_p,
            "trend": None if self.trend is None else {
                "slope": self.trend.slope, "slope_pct": self.trend.slope_pct, "first": self.trend.first,
                "last": self.trend.last, "change_pct": self.trend.change_pct, "p": self.trend.p},
            "tested": self.tested, "findings_needed": 2 * CHANGE_MIN_SEGMENT,
            "null_series": null_series_for(len(self.points) - len(self.outliers)), "rho_max": RHO_MAX,
            "step_sigma": STEP_SIGMA,
            "permutations": PERMUTATIONS, "seed": SEED, "candidates": self.candidates,
            "outliers": [self.points[i].finding_id for i in self.outliers],
            "points": [{"date": p.date, "finding": p.finding_id, "gate": p.gate_id, "value": p.value}
                       for p in self.points],
            "change_points": [{"index": c.index, "date": c.date, "finding": c.finding_id,
                               "before_mean": c.before_mean, "after_mean": c.after_mean,
                               "change_pct": c.change_pct, "p": c.p} for c in self.change_points],
            "skipped": list(self.skipped),
        }


_STATS_FIELDS = frozenset(f.name for f in dataclasses.fields(Stats)) - {"extra_keys"}


def _is_stats_key(figures: Stats, metric: str) -> bool:
    """A statistic of the finding: a typed Stats field, or a key a newer or hand-edited finding added."""
    return metric in _STATS_FIELDS or metric in figures.extra_keys


def metric_value(finding: Finding, metric: str, arm_key: str) -> float | None:
    """A finding's value of `metric`: a dotted path into the finding document (`stats.delta_pct`,
    `guards.psnr_db.delta`), else a statistic (`delta_pct`, `mean_on`), else the mean of a run metric
    over the used runs of the `arm_key` arm (off or on)."""
    if "." in metric:
        # a path names a key of the document, so it is walked over the document, by design
        node: Any = finding.to_dict()
        for part in metric.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return float(node) if is_number(node) else None
    if _is_stats_key(finding.stats, metric):
        value = (getattr(finding.stats, metric) if metric in _STATS_FIELDS
                 else finding.stats.extra_keys[metric])
        return float(value) if is_number(value) else None
    values = finding.used_values(finding.off_arm if arm_key == "off" else finding.on_arm, metric)
    return stats.mean(values) if values else None


def describe(metric: str, arm_key: str, sample: Finding | None) -> str:
    if "." in metric:
        return f"{metric} of each finding"
    if sample is not None and _is_stats_key(sample.stats, metric):
        return f"stats.{metric} of each finding"
    return f"mean {metric} of the {arm_key} arm's used runs"


def noise_sigma(values: Sequence[float]) -> float:
    """σ̂ from first differences (see the module docstring); 0 when the series does not vary."""
    if len(values) < 2:
        return 0.0
    diffs = np.diff(np.asarray(values, dtype=float))
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    if mad > 0:
        return MAD_TO_SIGMA * mad / math.sqrt(2)
    sd = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else abs(float(diffs[0]))
    return sd / math.sqrt(2)


def candidate_indices(values: Sequence[float], sigma: float | None = None) -> tuple[list[int], float, float]:
    """PELT's candidate change points (start indices of new segments), σ̂ and the penalty used."""
    n = len(values)
    sigma = noise_sigma(values) if sigma is None else sigma
    if n < 2 * CHANGE_MIN_SEGMENT or sigma == 0:
        return [], sigma, 0.0
    penalty = 2.0 * sigma ** 2 * math.log(n)
    signal = np.asarray(values, dtype=float).reshape(-1, 1)
    ends = ruptures.Pelt(model="l2", min_size=CHANGE_MIN_SEGMENT, jump=1).fit(signal).predict(pen=penalty)
    return [int(e) for e in ends if e < n], sigma, penalty


# -- the shift test: one step in the mean against AR(1) noise ------------------------------------------

def prais_winsten(values: Sequence[float] | np.ndarray, rho: float) -> np.ndarray:
    """The series (or each row of an array of series) whitened for AR(1) noise of correlation ρ:
    y₁ = √(1 − ρ²)·x₁, y_t = x_t − ρ·x_{t−1} (Prais & Winsten 1954), so AR(1) noise becomes white noise of
    the innovations' variance."""
    x = np.asarray(values, dtype=float)
    return np.concatenate([math.sqrt(1 - rho * rho) * x[..., :1], x[..., 1:] - rho * x[..., :-1]], axis=-1)


def standardised(rows: np.ndarray) -> np.ndarray:
    """Each row less its mean, over its SD (ddof 0): Σx = 0, Σx² = n; a constant row stays all zeros. The
    invariant densities below do not change (they are functions of this), the arithmetic keeps its digits."""
    x = np.asarray(rows, dtype=float)
    x = x - x.mean(axis=1, keepdims=True)
    spread = np.sqrt((x * x).mean(axis=1, keepdims=True))
    return x / np.where(spread > 0, spread, 1.0)


@functools.lru_cache(maxsize=64)
def log_moment_table(nu: int, z_max: float) -> tuple[np.ndarray, np.ndarray]:
    """ln J_ν(z) = ln ∫₀^∞ u^ν·exp(−u²/2 + z·u) du on MOMENT_POINTS values of z in [−z_max, z_max].

    J_ν(z) = Γ(ν + 1)·e^{z²/4}·D_{−ν−1}(−z) (a parabolic cylinder function), which over- and underflows for
    the ν of long histories; the integral is taken in logs instead, by the trapezoid rule on MOMENT_NODES
    nodes across ±12 Laplace widths of its peak u* = (z + √(z² + 4ν))/2 (width 1/√(1 + ν/u*²)), where the
    log integrand is concave."""
    z = np.linspace(-z_max, z_max, MOMENT_POINTS)
    peak = (z + np.sqrt(z * z + 4 * nu)) / 2
    width = 1 / np.sqrt(1 + nu / peak ** 2)
    t = np.linspace(-12.0, 12.0, MOMENT_NODES)
    u = peak[:, None] + width[:, None] * t[None, :]
    inside = u > 0
    u = np.where(inside, u, 1.0)
    log_integrand = np.where(inside, nu * np.log(u) - u * u / 2 + z[:, None] * u, -np.inf)
    return z, logsumexp(log_integrand, axis=1) + np.log(width * (t[1] - t[0]))


def flat_loglik(x: np.ndarray, rho: float) -> np.ndarray:
    """Per standardised row of x: the log density of its maximal invariant under location and scale (the
    series up to a + b·x, Wijsman 1967) when it is a flat mean plus AR(1) noise of correlation ρ:
    −((n−1)/2)·ln 2π − ½ ln det R − ½ ln 1ᵀR⁻¹1 + ln Γ((n−1)/2) + ((n−3)/2)·ln 2 − ((n−1)/2)·ln Q,
    R the AR(1) correlation matrix and Q = xᵀR⁻¹x − (1ᵀR⁻¹x)²/1ᵀR⁻¹1, its generalised residual sum, from the
    Prais–Winsten transform (R⁻¹ = WᵀW/(1 − ρ²)). For ρ = 0 this is the density of the standardised series of white noise."""
    n = x.shape[1]
    y = prais_winsten(x, rho)
    one = prais_winsten(np.ones(n), rho)
    g_one = float(one @ one)
    q = np.maximum(np.sum(y * y, axis=1) - (y @ one) ** 2 / g_one, 1e-300) / (1 - rho * rho)
    return (-(n - 1) / 2 * math.log(2 * math.pi * (1 - rho * rho)) - 0.5 * math.log(g_one / (1 - rho * rho))
            + gammaln((n - 1) / 2) + (n - 3) / 2 * math.log(2) - (n - 1) / 2 * np.log(q))


def step_logliks(x: np.ndarray, step_sigma: float = STEP_SIGMA,
                 min_segment: int = CHANGE_MIN_SEGMENT) -> tuple[np.ndarray, np.ndarray]:
    """Per standardised row of x and per place k (min_segment … n − min_segment): the log density of its
    maximal invariant when it is white noise plus a step of ±step_sigma noise SDs from index k on, the two
    signs averaged, and the places k. With σ and the mean integrated out by the invariance (the step is
    m = δ·s_k, s_k = 1 from k on): −((n−1)/2)·ln 2π − ½ ln n − ((n−1)/2)·ln A − C/2 + ln J_{n−2}(B/√A),
    A = Σx² = n, B = δ·Σ_{t≥k} x_t, C = δ²·k(n−k)/n (log_moment_table)."""
    count, n = x.shape
    ks = np.arange(min_segment, n - min_segment + 1)
    tails = np.cumsum(x[:, ::-1], axis=1)[:, ::-1][:, ks]  # Σ_{t≥k} x_t
    z_max = step_sigma * math.sqrt(n) / 2  # |B|/√A ≤ δ·√(k(n−k)/n) ≤ δ·√n/2 (Cauchy–Schwarz)
    grid, log_moment = log_moment_table(n - 2, round(z_max, 9) + 1e-9)
    base = -(n - 1) / 2 * math.log(2 * math.pi * n) - 0.5 * math.log(n) - step_sigma ** 2 * ks * (n - ks) / n / 2
    signs = [base + np.interp(sign * step_sigma * tails / math.sqrt(n), grid, log_moment) for sign in (1, -1)]
    return np.logaddexp(*signs) - math.log(2), ks


def shift_statistics(rows: np.ndarray, *, profile_rhos: Sequence[float] = PROFILE_RHOS,
                     step_sigma: float = STEP_SIGMA,
                     min_segment: int = CHANGE_MIN_SEGMENT) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `rows` ([series, n]): the log likelihood ratio of a step against none, ln of the mean over
    the places k of the step density (step_logliks) over the largest flat AR(1) density of ρ ∈ profile_rhos
    (flat_loglik), and the k of the step that fits best. With profile_rhos = (ρ₀,) this is the
    Neyman–Pearson statistic against AR(1) noise of ρ₀, the most powerful test of its level there for a
    step at a random place (benchmarks/change_points.py --ceiling). A constant row has ratio −∞."""
    x = standardised(rows)
    count, n = x.shape
    ks = np.arange(min_segment, n - min_segment + 1)
    if not ks.size:
        return np.full(count, -np.inf), np.zeros(count, dtype=int)
    per_place, ks = step_logliks(x, step_sigma, min_segment)
    flat = np.max([flat_loglik(x, rho) for rho in profile_rhos], axis=0)
    ratio = logsumexp(per_place, axis=1) - math.log(ks.size) - flat
    constant = ~np.any(x != 0, axis=1)
    return np.where(constant, -np.inf, ratio), ks[np.argmax(per_place, axis=1)]


def ar1_series(rho: float, count: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """[count, n] stationary AR(1) series of correlation ρ and unit innovations."""
    shocks = rng.standard_normal((count, n))
    series = np.empty((count, n))
    series[:, 0] = shocks[:, 0] / math.sqrt(1 - rho * rho)
    for t in range(1, n):
        series[:, t] = rho * series[:, t - 1] + shocks[:, t]
    return series


@functools.lru_cache(maxsize=64)
def null_statistics(n: int, null_series: int = NULL_SERIES, seed: int = SEED, rho: float = RHO_MAX,
                    rho_max: float = RHO_MAX) -> np.ndarray:
    """The shift statistic (flat ρ profiled up to rho_max) of `null_series` seeded flat AR(1) series of
    correlation ρ and length n, sorted."""
    rng = np.random.default_rng([seed, n, round(1000 * rho)])
    profile = profile_rhos(rho_max)
    chunks = [shift_statistics(ar1_series(rho, min(NULL_CHUNK, null_series - start), n, rng),
                               profile_rhos=profile)[0]
              for start in range(0, null_series, NULL_CHUNK)]
    return np.sort(np.concatenate(chunks))


def profile_rhos(rho_max: float = RHO_MAX) -> tuple[float, ...]:
    """The ρ the flat likelihood is maximised over: PROFILE_RHOS up to rho_max."""
    return tuple(rho for rho in PROFILE_RHOS if rho <= rho_max + 1e-12)


def null_rhos(rho_max: float = RHO_MAX) -> tuple[float, ...]:
    """The ρ the shift test's p-value is taken at: NULL_RHO_STEP apart from 0 to rho_max."""
    steps = round(rho_max / NULL_RHO_STEP)
    return tuple(round(rho_max * i / steps, 4) for i in range(steps + 1)) if steps else (0.0,)


def null_series_for(n: int) -> int:
    """Null series per null ρ for a series of n findings: NULL_SERIES, fewer (not below NULL_SERIES_FLOOR)
    where n·NULL_SERIES would pass NULL_WORK, so a long history is tested in seconds, not minutes."""
    return max(NULL_SERIES_FLOOR, min(NULL_SERIES, NULL_WORK // max(n, 1)))


def shift_test(values: Sequence[float], *, null_series: int | None = None, seed: int = SEED,
               rho_max: float = RHO_MAX) -> tuple[float, int | None]:
    """p-value of one step in the mean of `values` against flat AR(1) noise with ρ ≤ `rho_max`: at each ρ
    of null_rhos, (1 + null series at least as strong) / (1 + null series), and the largest of them (which ρ
    is least favourable depends on n); and where the step fits best. (1, None) for a series too short for
    CHANGE_MIN_SEGMENT findings on each side. `null_series`: None for null_series_for(n)."""
    n = len(values)
    if n < 2 * CHANGE_MIN_SEGMENT:
        return 1.0, None
    null_series = null_series_for(n) if null_series is None else null_series
    observed, at = shift_statistics(np.asarray(values, dtype=float)[None, :], profile_rhos=profile_rhos(rho_max))
    p = 0.0
    for rho in null_rhos(rho_max):
        null = null_statistics(n, null_series, seed, rho, rho_max)
        hits = null.size - int(np.searchsorted(null, observed[0] - 1e-9 * max(1.0, abs(observed[0])), side="left"))
        p = max(p, (1 + hits) / (1 + null.size))
    return p, int(at[0])


# -- the trend test: a linear drift against AR(1) noise -----------------------------------------------------

def ar1_profile_loglik(x: np.ndarray, regressors: np.ndarray, rho: float) -> np.ndarray:
    """Per row of x: the Gaussian log likelihood of x = regressors·β + AR(1) noise of correlation ρ, β and the
    innovations' variance maximised, up to a constant the same for every ρ and every design:
    ½·ln(1 − ρ²) − (n/2)·ln Q, Q the residual sum of the Prais–Winsten transformed series regressed on the
    transformed regressors (the transform's Jacobian is √(1 − ρ²); Beach & MacKinnon 1978)."""
    n = x.shape[1]
    y = prais_winsten(x, rho)
    design = prais_winsten(regressors, rho).T  # [n, p]
    solution, *_ = np.linalg.lstsq(design, y.T, rcond=None)
    residual = y.T - design @ solution
    q = np.maximum(np.sum(residual * residual, axis=0), 1e-300)
    return 0.5 * math.log(1 - rho * rho) - n / 2 * np.log(q)


def trend_statistics(rows: np.ndarray, *, profile_rhos: Sequence[float] = PROFILE_RHOS) -> np.ndarray:
    """Per row: the log likelihood ratio of a line against a flat mean, each in AR(1) noise of its best
    ρ ∈ profile_rhos (ar1_profile_loglik). Location and scale leave it unchanged; a constant row has −∞."""
    x = standardised(rows)
    n = x.shape[1]
    flat = np.ones((1, n))
    line = np.vstack([flat, np.arange(n, dtype=float) - (n - 1) / 2])
    sloped = np.max([ar1_profile_loglik(x, line, rho) for rho in profile_rhos], axis=0)
    level = np.max([ar1_profile_loglik(x, flat, rho) for rho in profile_rhos], axis=0)
    constant = ~np.any(x != 0, axis=1)
    return np.where(constant, -np.inf, sloped - level)


@functools.lru_cache(maxsize=64)
def trend_null_statistics(n: int, null_series: int = NULL_SERIES, seed: int = SEED, rho: float = RHO_MAX,
                          rho_max: float = RHO_MAX) -> np.ndarray:
    """The trend statistic of `null_series` seeded flat AR(1) series of correlation ρ and length n, sorted
    (the shift test's null series: the same seeds)."""
    rng = np.random.default_rng([seed, n, round(1000 * rho)])
    profile = profile_rhos(rho_max)
    chunks = [trend_statistics(ar1_series(rho, min(NULL_CHUNK, null_series - start), n, rng), profile_rhos=profile)
              for start in range(0, null_series, NULL_CHUNK)]
    return np.sort(np.concatenate(chunks))


def trend_test(values: Sequence[float], *, null_series: int | None = None, seed: int = SEED,
               rho_max: float = RHO_MAX) -> float:
    """p-value of a linear trend in `values` against flat AR(1) noise with ρ ≤ `rho_max`, as shift_test takes
    its own: the largest over null_rhos of (1 + null series at least as strong) / (1 + null series). 1 for a
    series shorter than 2·CHANGE_MIN_SEGMENT (what the shift test needs too)."""
    n = len(values)
    if n < 2 * CHANGE_MIN_SEGMENT:
        return 1.0
    null_series = null_series_for(n) if null_series is None else null_series
    observed = float(trend_statistics(np.asarray(values, dtype=float)[None, :], profile_rhos=profile_rhos(rho_max))[0])
    p = 0.0
    for rho in null_rhos(rho_max):
        null = trend_null_statistics(n, null_series, seed, rho, rho_max)
        hits = null.size - int(np.searchsorted(null, observed - 1e-9 * max(1.0, abs(observed)), side="left"))
        p = max(p, (1 + hits) / (1 + null.size))
    return p


def line_fit(values: Sequence[float]) -> tuple[float, float, float]:
    """Least squares of values on 0 … n − 1: (slope, intercept, residual sum of squares)."""
    y = np.asarray(values, dtype=float)
    t = np.arange(y.size, dtype=float)
    slope, intercept = np.polyfit(t, y, 1)
    return float(slope), float(intercept), float(np.sum((y - slope * t - intercept) ** 2))


def step_sse(values: Sequence[float], min_segment: int = CHANGE_MIN_SEGMENT) -> float:
    """The residual sum of squares of the best single step (two means, min_segment findings on each side)."""
    y = np.asarray(values, dtype=float)
    n = y.size
    k = np.arange(min_segment, n - min_segment + 1)
    head = np.cumsum(y)[k - 1]
    reduction = k * (n - k) / n * ((y.sum() - head) / (n - k) - head / k) ** 2
    return float(np.sum((y - y.mean()) ** 2) - reduction.max())


def trend_fits_better(values: Sequence[float]) -> bool:
    """A line (intercept, slope) leaves a smaller residual sum of squares than the best single step (two means,
    its place searched): the step gets its place for free, so a step in noise is seldom taken for a line."""
    line_sse, step = line_fit(values)[2], step_sse(values)
    return line_sse < step


# -- the candidates ---------------------------------------------------------------------------------------

def ranks(window: Sequence[float]) -> np.ndarray:
    """Ranks 1 … m of the values, ties sharing their mean rank: a spike becomes just the largest value."""
    return rankdata(np.asarray(window, dtype=float))


def split_statistic(rows: np.ndarray) -> np.ndarray:
    """Per row: the largest l2 cost reduction of one split, max over k of k(m−k)/m·(mean after − mean before)²,
    k = MIN_SEGMENT … m − MIN_SEGMENT (rows: [orderings, m])."""
    m = rows.shape[1]
    k = np.arange(MIN_SEGMENT, m - MIN_SEGMENT + 1)
    head = np.cumsum(rows, axis=1)[:, k - 1]
    total = rows.sum(axis=1, keepdims=True)
    shift = (total - head) / (m - k) - head / k
    return (k * (m - k) / m * shift ** 2).max(axis=1)


def permutation_p(window: Sequence[float], *, permutations: int = PERMUTATIONS,
                  rng: np.random.Generator | None = None) -> float:
    """p-value of the largest one-split shift of the ranks of `window` against reorderings of it.

    With m! ≤ permutations every ordering is enumerated and p = (orderings at least as strong) / m!, exact;
    otherwise p = (1 + hits) / (1 + permutations) over random orderings (Phipson & Smyth 2010). A window too
    short for two segments has p = 1.
    """
    x = ranks(window)
    m = x.size
    if m < 2 * MIN_SEGMENT:
        return 1.0
    observed = float(split_statistic(x[None, :])[0])
    tolerance = 1e-9 * max(observed, 1e-300)  # equal statistics reached in another order are ties, not misses
    if math.factorial(m) <= permutations:
        orderings = np.array(list(itertools.permutations(x)))
        return float(np.mean(split_statistic(orderings) >= observed - tolerance))
    rng = rng if rng is not None else np.random.default_rng(SEED)
    shuffled = rng.permuted(np.broadcast_to(x, (permutations, m)).copy(), axis=1)
    hits = int(np.sum(split_statistic(shuffled) >= observed - tolerance))
    return (1 + hits) / (1 + permutations)


def significant_changes(values: Sequence[float], candidates: Sequence[int], *, alpha: float = ALPHA,
                        permutations: int = PERMUTATIONS, seed: int = SEED) -> list[tuple[int, float]]:
    """The candidates that survive backward elimination, each with its p-value: test every candidate within
    its neighbouring segments, drop the weakest while its p > alpha / (candidates left), merge its
    neighbours, test again."""
    kept = sorted(candidates)
    known: dict[tuple[int, int], float] = {}

    def p_of(start: int, end: int) -> float:
        if (start, end) not in known:  # a window's own seed: its p does not depend on the order of the tests
            rng = np.random.default_rng([seed, start, end])
            known[start, end] = permutation_p(values[start:end], permutations=permutations, rng=rng)
        return known[start, end]

    while kept:
        bounds = [0, *kept, len(values)]
        ps = [p_of(bounds[i], bounds[i + 2]) for i in range(len(kept))]
        weakest = max(range(len(kept)), key=lambda i: ps[i])
        if ps[weakest] <= alpha / len(kept):  # Bonferroni over the candidates still standing
            return list(zip(kept, ps))
        del kept[weakest]
    return []


def lone_outliers(values: Sequence[float], sigma: float) -> list[int]:
    """Findings that differ from each neighbour by more than OUTLIER_Z·√2·σ̂, on the same side of both: a
    spike of one finding (a segment of one is not a change). The difference of two findings has SD √2·σ, so
    this is Iglewicz & Hoaglin's 3.5 limit on the differences; a step differs from one neighbour only. Two
    adjacent findings inside the series that both differ so from the finding before them and the one after
    them, on the same side, are a spike of two (an excursion that returns is not a change either)."""
    if sigma <= 0 or len(values) < 3:
        return []
    limit = OUTLIER_Z * math.sqrt(2) * sigma
    last = len(values) - 1

    def apart(value: float, others: Sequence[float]) -> int:
        """+1 / −1 when `value` is beyond the limit above / below every one of `others`, else 0."""
        gaps = [value - other for other in others]
        return 1 if all(g > limit for g in gaps) else -1 if all(g < -limit for g in gaps) else 0

    pairs: set[int] = set()
    for i in range(1, last - 1):  # a pair i, i + 1 with a finding before and after it
        around = (values[i - 1], values[i + 2])
        side = apart(values[i], around)
        if side and apart(values[i + 1], around) == side:
            pairs.update((i, i + 1))
    lone = set(pairs)
    for i, value in enumerate(values):
        if i in pairs or not apart(value, [values[j] for j in (i - 1, i + 1) if 0 <= j <= last]):
            continue
        # the first or last finding has one neighbour: it is the spike only when that neighbour agrees with
        # the finding beyond it and neither is a spike itself (otherwise the neighbour is the spike)
        inner = {0: (1, 2), last: (last - 1, last - 2)}.get(i)
        if inner is None or (abs(values[inner[0]] - values[inner[1]]) <= limit and not pairs & set(inner)):
            lone.add(i)
    return sorted(lone)


@dataclass(frozen=True, slots=True)
class ChangeSearch:
    """What change_point_indices found: the change points as (start index of the new segment, p), σ̂, the
    PELT penalty (0: PELT did not run), the number of PELT candidates, the outliers left out of the search
    (indices into the values) and the shift test's p-value (NaN: too few findings to test)."""

    changes: tuple[tuple[int, float], ...]
    sigma: float
    penalty: float
    candidates: int
    outliers: tuple[int, ...]
    shift_p: float = math.nan
    trend_p: float = math.nan  # the trend test's p (NaN: too few findings to test)
    trend: bool = False  # a linear trend explains the series (then no change points)


def change_point_indices(values: Sequence[float], *, alpha: float = ALPHA, permutations: int = PERMUTATIONS,
                         seed: int = SEED, rho_max: float = RHO_MAX) -> ChangeSearch:
    """The change points of a series (see the module docstring): outliers out, the shift test on the rest,
    then PELT's candidates pruned by their permutation tests; where none survives, the shift test's own best
    split is the change, with the shift test's p. `rho_max`: the largest AR(1) ρ of the shift test's null
    (benchmarks/change_points.py weighs other choices)."""
    sigma = noise_sigma(values)
    outliers = lone_outliers(values, sigma)
    kept = [i for i in range(len(values)) if i not in set(outliers)]
    rest = [values[i] for i in kept]
    candidates, _, penalty = candidate_indices(rest, sigma)
    if len(rest) < 2 * CHANGE_MIN_SEGMENT or len(set(rest)) == 1:
        return ChangeSearch((), sigma, penalty, len(candidates), tuple(outliers))
    shift_p, best_split = shift_test(rest, seed=seed, rho_max=rho_max)
    trend_p = trend_test(rest, seed=seed, rho_max=rho_max)
    if trend_p <= alpha and trend_fits_better(rest):
        return ChangeSearch((), sigma, penalty, len(candidates), tuple(outliers), shift_p, trend_p, True)
    changes: list[tuple[int, float]] = []
    if shift_p <= alpha and best_split is not None:
        changes = (significant_changes(rest, candidates, alpha=alpha, permutations=permutations, seed=seed)
                   or [(best_split, shift_p)])
    return ChangeSearch(tuple((kept[i], p) for i, p in changes), sigma, penalty, len(candidates), tuple(outliers),
                        shift_p, trend_p)


def build_history(findings: Sequence[LoadedFinding], metric: str, *, arm_key: str = "on",
                  gate_id: str | None = None, alpha: float = ALPHA) -> History:
    """The metric over the findings (oldest first) with its change points."""
    chosen = [f for f in by_date(findings) if gate_id is None or f.finding.gate.id == gate_id]
    if not chosen:
        raise ConfigError(f"--gate-id {gate_id}: no finding of this gate "
                          f"(gates found: {', '.join(sorted({f.finding.gate.id for f in findings}))})")
    points, skipped = [], []
    for item in chosen:
        finding = item.finding
        value = metric_value(finding, metric, arm_key)
        if value is None:
            skipped.append(finding.id)
        else:
            points.append(Point(finding.meta.date, finding.id, finding.gate.id, value))
    if not points:
        source = chosen[0].path or chosen[0].finding.id
        raise ConfigError(f"{source}: key '{metric}' is in no finding (try a stats key such as delta_pct or "
                          "mean_on, a run metric such as train_elapsed_s, or a dotted path)")
    if not 0 < alpha < 1:
        raise ConfigError(f"--alpha: must be between 0 and 1, got {alpha}")
    search = change_point_indices([p.value for p in points], alpha=alpha)
    changes = []
    bounds = [0, *(index for index, _ in search.changes), len(points)]
    for i, (start, p) in enumerate(search.changes):
        before = [p.value for p in points[bounds[i]:start]]
        after = [p.value for p in points[start:bounds[i + 2]]]
        changes.append(ChangePoint(start, points[start].date, points[start].finding_id, stats.mean(before),
                                   stats.mean(after), p))
    gates = tuple(sorted({p.gate_id for p in points}))
    trend = None
    if search.trend:  # fitted over the findings the tests saw (outliers left out), in their own places
        kept = [i for i in range(len(points)) if i not in set(search.outliers)]
        t = np.array(kept, dtype=float)
        slope, intercept = np.polyfit(t, [points[i].value for i in kept], 1)
        trend = Trend(float(slope), float(intercept), float(intercept + slope * (len(points) - 1)), search.trend_p)
    return History(metric, describe(metric, arm_key, chosen[0].finding), tuple(points), tuple(changes), search.sigma,
                   search.penalty, tuple(skipped), gates, alpha, search.candidates, search.outliers, search.shift_p,
                   search.trend_p, trend)


def recent_changes(history: History, recent: int | None) -> list[ChangePoint]:
    """Change points among the last `recent` findings (all of them when recent is None)."""
    if recent is None:
        return list(history.change_points)
    first = len(history.points) - recent
    return [c for c in history.change_points if c.index >= first]


def history_table(history: History) -> str:
    """The metric per finding, its segment mean and where segments start; then the change points."""
    means = history.segment_means()
    starts = {c.index for c in history.change_points}
    ids = [show_controls(p.finding_id) for p in history.points]  # a newline in an id would forge a line
    id_width = max(len("finding"), *(len(i) for i in ids))
    lines = [f"{show_controls(history.metric)}: {show_controls(history.described)}, {len(history.points)} findings"
             + (f" of gate {show_controls(history.gates[0])}" if len(history.gates) == 1
                else f" of gates {show_controls(', '.join(history.gates))}"),
             "", f"{'date':<10}  {'finding':<{id_width}}  {'value':>12}  {'segment mean':>12}",
             f"{'-' * 10}  {'-' * id_width}  {'-' * 12}  {'-' * 12}"]
    outliers = set(history.outliers)
    for index, (point, mean, finding_id) in enumerate(zip(history.points, means, ids)):
        mark = ("  <- change" if index in starts
                else "" if index not in outliers
                else "  (one of two adjacent outliers, not a change)" if outliers & {index - 1, index + 1}
                else "  (lone outlier, not a change)")
        lines.append(f"{show_controls(point.date):<10}  {finding_id:<{id_width}}  {fmt(point.value):>12}  {fmt(mean):>12}{mark}")
    lines.append("")
    if math.isnan(history.shift_p):
        tested = len(history.points) - len(history.outliers)
        lines.append(f"change points: none looked for: {tested} finding(s) to test"
                     + (f" (without {len(history.outliers)} outlier(s))" if history.outliers else "")
                     + f", a change needs {CHANGE_MIN_SEGMENT} findings on each side"
                     if tested < 2 * CHANGE_MIN_SEGMENT else "change points: none (the values do not vary)")
    else:
        method = (f"shift test p {history.shift_p:.4f} against noise correlated up to AR(1) ρ {RHO_MAX:g}, "
                  f"α {history.alpha:g}")
        if history.penalty > 0:
            method += (f"; PELT, l2 cost, BIC penalty {history.penalty:.4g}, σ̂ {history.sigma:.4g}: "
                       f"{history.candidates} candidate(s), kept at permutation p ≤ α")
        trend = history.trend
        if trend is not None:
            lines.append(f"trend: {fmt(trend.slope)} per finding ({trend.slope_pct:+.3f} % per finding; fitted "
                         f"{fmt(trend.first)} -> {fmt(trend.last)}, {trend.change_pct:+.2f} % over "
                         f"{len(history.points)} findings), trend test p {trend.p:.4f} against noise correlated "
                         f"up to AR(1) ρ {RHO_MAX:g}; a line fits better than the best step, so no change point")
        elif not history.change_points:
            lines.append(f"change points: none ({method}; trend test p {history.trend_p:.4f})")
        else:
            lines.append(f"change points ({method}):")
        for c in history.change_points:
            lines.append(f"  from {show_controls(c.finding_id)} ({show_controls(c.date)}): mean {fmt(c.before_mean)} -> {fmt(c.after_mean)} "
                         f"({c.change_pct:+.2f} %, p {c.p:.3f})")
    if len(history.gates) > 1:
        lines.append(f"note: findings of {len(history.gates)} gates are mixed; use --gate-id to follow one")
    if history.skipped:
        lines.append(f"skipped (no {show_controls(history.metric)}): {show_controls(', '.join(history.skipped))}")
    return "\n".join(lines)


def history_json(history: History) -> str:
    return json.dumps(history.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def x_labels(points: Sequence[Point]) -> list[str]:
    """The plot's x labels: each finding's date, numbered within its day (`2026-12-01 #2`) where several
    findings share one, so no two labels read the same."""
    per_day: dict[str, int] = {}
    for point in points:
        per_day[point.date] = per_day.get(point.date, 0) + 1
    seen: dict[str, int] = {}
    labels = []
    for point in points:
        seen[point.date] = seen.get(point.date, 0) + 1
        labels.append(point.date if per_day[point.date] == 1 else f"{point.date} #{seen[point.date]}")
    return labels


def history_plot(history: History) -> bytes:
    """The metric per finding in date order, segment means, and a line at every change point (PNG)."""
    with matplotlib.rc_context({"font.size": 10, "xtick.labelsize": 8.5, "ytick.labelsize": 9}):
        figure = Figure(figsize=(7.2, 3.6), dpi=150, layout="constrained")
        FigureCanvasAgg(figure)
        ax = figure.add_subplot()
        ax.grid(True, color="#e5e7eb", linewidth=0.8)
        ax.set_axisbelow(True)
        xs = list(range(len(history.points)))
        ax.plot(xs, [p.value for p in history.points], marker="o", color="#0072B2", linewidth=1.2,
                label=history.metric.replace("$", r"\$"))
        ax.step(xs, history.segment_means(), where="mid", color="#E69F00", linewidth=1.5, label="segment mean")
        for c in history.change_points:
            ax.axvline(c.index - 0.5, color="#D55E00", linestyle="--", linewidth=1)
        if history.trend is not None:
            ax.plot([0, len(xs) - 1], [history.trend.first, history.trend.last], color="#D55E00", linestyle="--",
                    linewidth=1.2, label=f"trend {history.trend.slope_pct:+.2f} % per finding")
        step = max(1, len(xs) // 12)
        labels = x_labels(history.points)
        ax.set_xticks(xs[::step], [labels[i] for i in xs[::step]], rotation=30, ha="right")
        ax.set_ylabel(history.metric.replace("$", r"\$"))
        ax.legend(loc="best", fontsize=8.5)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()

"""A metric across findings over time, and its change points.

Candidates come from `ruptures` (Truong, Oudre & Vayatis, "Selective review of offline change point
detection methods", Signal Processing 2020): PELT (Killick, Fearnhead & Eckley, JASA 2012) with the l2
cost, i.e. shifts in the mean. The penalty is the BIC for a mean shift in Gaussian noise (Schwarz 1978):
each change adds a mean and a location, so pen = 2·σ̂²·ln n in the l2 cost's units, with σ̂ the noise
estimated robustly from first differences, MAD(Δx)·1.4826/√2 (the differences of a piecewise-constant
series are noise except at the few changes, and differencing doubles the variance). When more than half
the differences are exactly zero the MAD is zero; σ̂ then falls back to the differences' sample SD/√2, and
a series with no variation at all has no change points. Segments hold at least two findings.

A candidate is kept only when it is significant. As E-Divisive (Matteson & James, JASA 2014) and Apache
Otava do, each candidate is tested by permutation within the window its two neighbouring segments span. The
test is on ranks, so a lone spike is only the largest value and never a shift in the mean by itself: the
statistic is the largest l2 cost reduction of one split of the window's ranks, max_k k(m−k)/m·(r̄₂ − r̄₁)²
(a max-type Wilcoxon rank-sum statistic, as in Pettitt, Applied Statistics 1979), so the search for the
split is part of the null. Its p-value is how often a random reordering of the window reaches it,
(1 + hits) / (1 + permutations) (Phipson & Smyth 2010), exact (every ordering) when a window has few
enough. First the whole series must show a shift at α: a flat series then shows a change point at most α
of the time, however many candidates PELT proposed. Then the weakest candidate is dropped while its p
exceeds α / (candidates left) (Bonferroni), its neighbours merge and the rest are tested again (Otava's
pruning of weak change points). The permutations use a fixed seed: the same series gives the same answer.
A lone spike, a finding further than 3.5·√2·σ̂ from each neighbour on the same side, is left out of the
search altogether (a segment of one finding is not a change), and the table marks it.
With α = 0.05 a series needs 8 findings before a change can be significant at all: 7 values in perfect
order still have p = 0.1, 8 have 2·4!·4!/8! = 0.029.
"""

from __future__ import annotations

import dataclasses
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
from scipy.stats import rankdata

from gatekit import stats
from gatekit.errors import ConfigError
from gatekit.finding import Finding, Stats
from gatekit.findingset import LoadedFinding, by_date
from gatekit.report.common import fmt, is_number
from gatekit.sanitize import show_controls

MIN_SEGMENT = 2
MAD_TO_SIGMA = 1.4826  # 1/Φ⁻¹(3/4): MAD of Gaussian noise × this = σ
ALPHA = 0.05  # `gate history --alpha`: a candidate is a change point when its permutation p ≤ ALPHA
PERMUTATIONS = 999  # random orderings per test; 999 resolves p to 0.001
SEED = 0  # the permutations' seed: the same series always gives the same change points
OUTLIER_Z = 3.5  # Iglewicz & Hoaglin (1993): a modified z-score above 3.5 marks an outlier
METHOD = "ruptures PELT (l2 cost, BIC penalty 2·σ̂²·ln n), each candidate kept at permutation p ≤ α"


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
    outliers: tuple[int, ...] = ()  # indices of lone spikes, left out of the search

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
            "method": METHOD, "sigma": self.sigma, "penalty": self.penalty, "alpha": self.alpha,
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
    if n < 2 * MIN_SEGMENT or sigma == 0:
        return [], sigma, 0.0
    penalty = 2.0 * sigma ** 2 * math.log(n)
    signal = np.asarray(values, dtype=float).reshape(-1, 1)
    ends = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(signal).predict(pen=penalty)
    return [int(e) for e in ends if e < n], sigma, penalty


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
    its neighbouring segments, drop the weakest while its p > alpha, merge its neighbours, test again."""
    kept = sorted(candidates)
    known: dict[tuple[int, int], float] = {}

    def p_of(start: int, end: int) -> float:
        if (start, end) not in known:  # a window's own seed: its p does not depend on the order of the tests
            rng = np.random.default_rng([seed, start, end])
            known[start, end] = permutation_p(values[start:end], permutations=permutations, rng=rng)
        return known[start, end]

    # the gate: without a significant shift in the whole series there is none to place, so a flat series
    # shows a change point at most alpha of the time, however many candidates PELT proposed
    if not kept or p_of(0, len(values)) > alpha:
        return []
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
    this is Iglewicz & Hoaglin's 3.5 limit on the differences; a step differs from one neighbour only."""
    if sigma <= 0 or len(values) < 3:
        return []
    limit = OUTLIER_Z * math.sqrt(2) * sigma
    last = len(values) - 1
    lone = []
    for i, value in enumerate(values):
        gaps = [value - values[j] for j in (i - 1, i + 1) if 0 <= j <= last]
        if not (all(g > limit for g in gaps) or all(g < -limit for g in gaps)):
            continue
        # the first or last finding has one neighbour: it is the spike only when that neighbour agrees with
        # the finding beyond it (otherwise the neighbour is the spike)
        inner = {0: (1, 2), last: (last - 1, last - 2)}.get(i)
        if inner is None or abs(values[inner[0]] - values[inner[1]]) <= limit:
            lone.append(i)
    return lone


def change_point_indices(values: Sequence[float], *, alpha: float = ALPHA, permutations: int = PERMUTATIONS,
                         seed: int = SEED) -> tuple[list[tuple[int, float]], float, float, int, list[int]]:
    """Significant change points as (start index of the new segment, p), σ̂, the PELT penalty, the number
    of PELT candidates tested, and the lone outliers left out of the search (indices into `values`)."""
    sigma = noise_sigma(values)
    outliers = lone_outliers(values, sigma)
    kept = [i for i in range(len(values)) if i not in set(outliers)]
    rest = [values[i] for i in kept]
    candidates, _, penalty = candidate_indices(rest, sigma)
    changes = significant_changes(rest, candidates, alpha=alpha, permutations=permutations, seed=seed)
    return [(kept[i], p) for i, p in changes], sigma, penalty, len(candidates), outliers


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
    found, sigma, penalty, candidates, outliers = change_point_indices([p.value for p in points], alpha=alpha)
    changes = []
    bounds = [0, *(index for index, _ in found), len(points)]
    for i, (start, p) in enumerate(found):
        before = [p.value for p in points[bounds[i]:start]]
        after = [p.value for p in points[start:bounds[i + 2]]]
        changes.append(ChangePoint(start, points[start].date, points[start].finding_id, stats.mean(before),
                                   stats.mean(after), p))
    gates = tuple(sorted({p.gate_id for p in points}))
    return History(metric, describe(metric, arm_key, chosen[0].finding), tuple(points), tuple(changes), sigma,
                   penalty, tuple(skipped), gates, alpha, candidates, tuple(outliers))


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
    for index, (point, mean, finding_id) in enumerate(zip(history.points, means, ids)):
        mark = ("  <- change" if index in starts
                else "  (lone outlier, not a change)" if index in history.outliers else "")
        lines.append(f"{show_controls(point.date):<10}  {finding_id:<{id_width}}  {fmt(point.value):>12}  {fmt(mean):>12}{mark}")
    lines.append("")
    if len(history.points) < 2 * MIN_SEGMENT:
        lines.append(f"change points: need at least {2 * MIN_SEGMENT} findings to look for one")
    else:
        method = (f"PELT, l2 cost, BIC penalty {history.penalty:.4g}, σ̂ {history.sigma:.4g}; "
                  f"{history.candidates} candidate(s), kept at permutation p ≤ {history.alpha:g}")
        if not history.change_points:
            lines.append(f"change points: none ({method})")
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
        step = max(1, len(xs) // 12)
        labels = x_labels(history.points)
        ax.set_xticks(xs[::step], [labels[i] for i in xs[::step]], rotation=30, ha="right")
        ax.set_ylabel(history.metric.replace("$", r"\$"))
        ax.legend(loc="best", fontsize=8.5)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()

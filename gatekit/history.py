"""A metric across findings over time, and its change points.

Change points come from `ruptures` (Truong, Oudre & Vayatis, "Selective review of offline change point
detection methods", Signal Processing 2020): PELT (Killick, Fearnhead & Eckley, JASA 2012) with the l2
cost, i.e. shifts in the mean. The penalty is the BIC for a mean shift in Gaussian noise (Schwarz 1978):
each change adds a mean and a location, so pen = 2·σ̂²·ln n in the l2 cost's units, with σ̂ the noise
estimated robustly from first differences, MAD(Δx)·1.4826/√2 (the differences of a piecewise-constant
series are noise except at the few changes, and differencing doubles the variance). When more than half
the differences are exactly zero the MAD is zero; σ̂ then falls back to the differences' sample SD/√2, and
a series with no variation at all has no change points. Segments hold at least two findings.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import matplotlib
import numpy as np
import ruptures
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gatekit import stats
from gatekit.errors import ConfigError
from gatekit.finding import Finding, Stats
from gatekit.findingset import LoadedFinding, by_date
from gatekit.report.common import fmt, is_number

MIN_SEGMENT = 2
MAD_TO_SIGMA = 1.4826  # 1/Φ⁻¹(3/4): MAD of Gaussian noise × this = σ


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
            "method": "ruptures PELT, l2 cost, BIC penalty 2·σ̂²·ln n", "sigma": self.sigma, "penalty": self.penalty,
            "points": [{"date": p.date, "finding": p.finding_id, "gate": p.gate_id, "value": p.value}
                       for p in self.points],
            "change_points": [{"index": c.index, "date": c.date, "finding": c.finding_id,
                               "before_mean": c.before_mean, "after_mean": c.after_mean,
                               "change_pct": c.change_pct} for c in self.change_points],
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


def change_point_indices(values: Sequence[float]) -> tuple[list[int], float, float]:
    """Start indices of new segments, σ̂ and the penalty used (PELT, l2 cost, BIC penalty)."""
    n = len(values)
    sigma = noise_sigma(values)
    if n < 2 * MIN_SEGMENT or sigma == 0:
        return [], sigma, 0.0
    penalty = 2.0 * sigma ** 2 * math.log(n)
    signal = np.asarray(values, dtype=float).reshape(-1, 1)
    ends = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(signal).predict(pen=penalty)
    return [int(e) for e in ends if e < n], sigma, penalty


def build_history(findings: Sequence[LoadedFinding], metric: str, *, arm_key: str = "on",
                  gate_id: str | None = None) -> History:
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
    indices, sigma, penalty = change_point_indices([p.value for p in points])
    changes = []
    bounds = [0, *indices, len(points)]
    for i, start in enumerate(indices):
        before = [p.value for p in points[bounds[i]:start]]
        after = [p.value for p in points[start:bounds[i + 2]]]
        changes.append(ChangePoint(start, points[start].date, points[start].finding_id, stats.mean(before),
                                   stats.mean(after)))
    gates = tuple(sorted({p.gate_id for p in points}))
    return History(metric, describe(metric, arm_key, chosen[0].finding), tuple(points), tuple(changes), sigma,
                   penalty, tuple(skipped), gates)


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
    id_width = max(len("finding"), *(len(p.finding_id) for p in history.points))
    lines = [f"{history.metric}: {history.described}, {len(history.points)} findings"
             + (f" of gate {history.gates[0]}" if len(history.gates) == 1 else f" of gates {', '.join(history.gates)}"),
             "", f"{'date':<10}  {'finding':<{id_width}}  {'value':>12}  {'segment mean':>12}",
             f"{'-' * 10}  {'-' * id_width}  {'-' * 12}  {'-' * 12}"]
    for index, (point, mean) in enumerate(zip(history.points, means)):
        mark = "  <- change" if index in starts else ""
        lines.append(f"{point.date:<10}  {point.finding_id:<{id_width}}  {fmt(point.value):>12}  {fmt(mean):>12}{mark}")
    lines.append("")
    if len(history.points) < 2 * MIN_SEGMENT:
        lines.append(f"change points: need at least {2 * MIN_SEGMENT} findings to look for one")
    elif not history.change_points:
        lines.append(f"change points: none (PELT, l2 cost, BIC penalty {history.penalty:.4g}, σ̂ {history.sigma:.4g})")
    else:
        lines.append(f"change points (PELT, l2 cost, BIC penalty {history.penalty:.4g}, σ̂ {history.sigma:.4g}):")
        for c in history.change_points:
            lines.append(f"  from {c.finding_id} ({c.date}): mean {fmt(c.before_mean)} -> {fmt(c.after_mean)} "
                         f"({c.change_pct:+.2f} %)")
    if len(history.gates) > 1:
        lines.append(f"note: findings of {len(history.gates)} gates are mixed; use --gate-id to follow one")
    if history.skipped:
        lines.append(f"skipped (no {history.metric}): {', '.join(history.skipped)}")
    return "\n".join(lines)


def history_json(history: History) -> str:
    return json.dumps(history.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


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
        ax.set_xticks(xs[::step], [history.points[i].date for i in xs[::step]], rotation=30, ha="right")
        ax.set_ylabel(history.metric.replace("$", r"\$"))
        ax.legend(loc="best", fontsize=8.5)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()

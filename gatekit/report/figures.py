"""The report's figures, drawn with matplotlib: pure functions from a finding (and its run traces) to PNG bytes.

No pyplot: each figure is its own `matplotlib.figure.Figure` on an Agg canvas, so rendering keeps no global
state and needs no display. Trainer-supplied text is drawn literally (`$` would otherwise start mathtext).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from gatekit.finding import Finding
from gatekit.report.common import delta_ci, is_number, primary_label
from gatekit.report.rundata import RunFiles

if TYPE_CHECKING:  # a bisect finding's page is the only one that draws it
    from gatekit.bisect.finding import BisectFinding

# Okabe–Ito colours: distinguishable with the common colour-vision deficiencies.
ARM_COLORS = {"off": "#0072B2", "on": "#E69F00"}
DECISION_COLORS = {"success": "#009E73", "danger": "#D55E00", "warning": "#CC79A7", "info": "#56B4E9"}
DPI = 150  # 1.5 image pixels per CSS pixel: sharp on high-density screens
CSS_PX_PER_IN = 100  # the page shows a figure at 100 CSS px per inch (720 px wide)
WIDTH_IN = 7.2
STYLE = {"font.size": 10, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
         "legend.fontsize": 8.5, "svg.hashsalt": "gatekit"}


@dataclass(frozen=True, slots=True)
class FigureImage:
    """One figure: its file name beside the page, its caption and alt text, and the PNG."""

    name: str
    caption: str
    alt: str
    png: bytes
    width: int
    height: int


def literal(text: object, keep: int = 60) -> str:
    """Text matplotlib draws as written (`$` escaped, so never mathtext), cut to `keep` characters so a
    long label cannot squeeze the axes away."""
    text = str(text)
    if len(text) > keep:
        text = text[:keep - 1] + "…"
    return text.replace("$", r"\$")


def _new(height_in: float) -> Figure:
    figure = Figure(figsize=(WIDTH_IN, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _png(figure: Figure) -> tuple[bytes, int, int]:
    buffer = io.BytesIO()
    # No Software/Date metadata: the same figure gives the same bytes.
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    width, height = (int(round(v)) for v in figure.get_size_inches() * CSS_PX_PER_IN)
    return buffer.getvalue(), width, height


def _style(ax: Any) -> None:
    ax.grid(True, color="#e5e7eb", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _arm_color(finding: Finding, arm: str) -> str:
    return ARM_COLORS["off"] if arm == finding.off_arm else ARM_COLORS["on"]


def runs_figure(finding: Finding) -> FigureImage | None:
    """Per-run primary values in execution order, arm means, and the off mean ± threshold band."""
    stats, primary = finding.stats, finding.gate.primary
    runs = [(run, value) for run in finding.runs if (value := run.value_of(primary)) is not None]
    if not runs:
        return None
    figure = _new(3.6)
    ax = figure.add_subplot()
    _style(ax)
    mean_off, threshold = stats.mean_off, stats.threshold_pct
    if is_number(mean_off) and is_number(threshold):
        band = abs(mean_off) * threshold / 100.0
        ax.axhspan(mean_off - band, mean_off + band, color=ARM_COLORS["off"], alpha=0.10, linewidth=0,
                   label=f"{literal(finding.off_arm)} mean ± threshold ({threshold:.2f} %)")
    for arm_key, arm, mean in (("off", finding.off_arm, stats.mean_off), ("on", finding.on_arm, stats.mean_on)):
        if is_number(mean):
            ax.axhline(mean, color=ARM_COLORS[arm_key], linestyle="--", linewidth=1.2,
                       label=f"{literal(arm)} mean {mean:.4g}")
        used = [(run.order, value) for run, value in runs if run.arm == arm and run.used]
        unused = [(run.order, value) for run, value in runs if run.arm == arm and not run.used]
        if used:
            ax.scatter(*zip(*used), s=46, color=ARM_COLORS[arm_key], zorder=3, label=f"{literal(arm)} runs")
        if unused:
            ax.scatter(*zip(*unused), s=46, facecolors="white", edgecolors=ARM_COLORS[arm_key], marker="X",
                       zorder=3, label=f"{literal(arm)} not used")
    ax.set_xticks([run.order for run, _ in runs], [literal(run.label) for run, _ in runs],
                  rotation=30 if len(runs) > 8 else 0)
    ax.set_xlabel("execution order")
    ax.set_ylabel(literal(primary_label(finding)))
    ax.legend(loc="best", framealpha=0.9)
    png, width, height = _png(figure)
    return FigureImage("runs.png", f"{primary} of every run in execution order, with the arm means and the off "
                       "mean ± threshold band (hollow X: not used)",
                       f"Scatter of {primary} per run in execution order for both arms", png, width, height)


def delta_figure(finding: Finding) -> FigureImage | None:
    """Δ of every exclusion-sensitivity variant against its ±threshold band; the CI of Δ when given."""
    rows = [r for r in finding.sensitivity if is_number(r.delta_pct) and is_number(r.threshold_pct)]
    if not rows:
        return None
    delta = finding.stats.delta_pct
    ci = delta_ci(finding.stats) if is_number(delta) else None
    figure = _new(1.3 + 0.42 * len(rows))
    ax = figure.add_subplot()
    _style(ax)
    positions = list(range(len(rows)))[::-1]
    for y, row in zip(positions, rows):
        threshold, row_delta = float(row.threshold_pct), float(row.delta_pct)  # type: ignore[arg-type]
        ax.fill_betweenx([y - 0.32, y + 0.32], -threshold, threshold, color="#9ca3af", alpha=0.25, linewidth=0)
        color = DECISION_COLORS[row.decision.severity]
        ax.scatter([row_delta], [y], s=60 if y == positions[0] else 36, color=color, zorder=3)
        ax.annotate(f"{row_delta:+.2f} %", (row_delta, y), xytext=(0, 7),
                    textcoords="offset points", ha="center", fontsize=8.5)
    if ci is not None:
        low, high, label = ci
        ax.errorbar([delta], [positions[0]], xerr=[[max(delta - low, 0.0)], [max(high - delta, 0.0)]],
                    fmt="none", ecolor="#111827", capsize=4, zorder=2,
                    label=f"{label} of Δ [{low:+.2f}, {high:+.2f}] %")
        ax.legend(loc="best")
    ax.axvline(0, color="#374151", linewidth=0.8)
    ax.set_yticks(positions, [literal(r.variant) for r in rows])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel(f"Δ {literal(finding.gate.primary)} (%), grey: ± threshold")
    png, width, height = _png(figure)
    return FigureImage("delta.png", "Δ with all used runs and in each exclusion-sensitivity variant, against its "
                       "± threshold band" + (" (with the CI of Δ)" if ci else ""),
                       "Delta per sensitivity variant against the threshold band", png, width, height)


END_LABEL_SHARE = 0.03  # lines ending within this share of both axes' spans share one label


def end_labels(series: Sequence[tuple[str, str, Sequence[Any]]]) -> dict[tuple[float, float], list[str]]:
    """Where each run's label goes (its line's end) with the labels that end there: lines ending within
    END_LABEL_SHARE of the axes of one another get one joined label, so the labels do not print over each other
    (sub-second runs read the same load1 and all end at one point)."""
    ends = [(label, float(points[0][-1]), float(points[1][-1])) for label, _, points in series if len(points[0])]
    if not ends:
        return {}
    xs, ys = [x for _, x, _ in ends], [y for _, _, y in ends]
    span_x, span_y = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    placed: dict[tuple[float, float], list[str]] = {}
    for label, x, y in ends:
        near = next((at for at in placed if abs(at[0] - x) <= END_LABEL_SHARE * span_x
                     and abs(at[1] - y) <= END_LABEL_SHARE * span_y), None)
        placed.setdefault(near or (x, y), []).append(label)
    return placed


def _trace_axes(finding: Finding, series: Sequence[tuple[str, str, Sequence[Any]]]) -> tuple[Any, Any]:
    """A figure with one line per run (label at its end), solid for off and dashed for on, and an arm legend."""
    figure = _new(3.4)
    ax = figure.add_subplot()
    _style(ax)

    def linestyle(arm: str) -> str:
        return "-" if arm == finding.off_arm else "--"

    for label, arm, points in series:
        color = _arm_color(finding, arm)
        xs, ys = points
        # a window of one sample is a point, not a line: without a marker its label would stand alone
        ax.plot(*points, color=color, linestyle=linestyle(arm), linewidth=1.3, alpha=0.9,
                marker="o" if len(xs) == 1 else None, markersize=3)
    for (x, y), labels in end_labels(series).items():
        colors = {_arm_color(finding, arm) for label, arm, _points in series if label in labels}
        ax.annotate(literal(", ".join(labels)), (x, y), xytext=(3, 0), textcoords="offset points", fontsize=8,
                    color=colors.pop() if len(colors) == 1 else "#374151", va="center")
    for arm in sorted({arm for _, arm, _ in series}):
        ax.plot([], [], color=_arm_color(finding, arm), linestyle=linestyle(arm), label=literal(arm))
    ax.legend(loc="best")
    return figure, ax


def _window_series(finding: Finding, run_files: RunFiles, trace_field: str) -> list[tuple[str, str, tuple[list, list]]]:
    """(label, arm, (seconds, values)) of one sampled quantity over each run window that recorded it."""
    series = []
    for run in finding.runs:
        trace = run_files.traces.get(run.label)
        points = getattr(trace, trace_field) if trace is not None else None
        if points:
            xs, ys = zip(*points)
            series.append((run.label, run.arm, (list(xs), list(ys))))
    return series


def load_figure(finding: Finding, run_files: RunFiles) -> FigureImage | None:
    """load1 over each run window, one line per run, with the preregistered load limit when it is near."""
    series = _window_series(finding, run_files, "load1")
    if not series:
        return None
    figure, ax = _trace_axes(finding, series)
    peak = max(max(ys) for _, _, (_, ys) in series)
    limit = finding.rules.spec.load_limit
    if is_number(limit) and peak >= 0.5 * limit:
        ax.axhline(limit, color="#D55E00", linewidth=1, linestyle=":", label=f"load_limit {limit:g}")
        ax.legend(loc="best")
    ax.set_xlabel("seconds since the run window opened")
    ax.set_ylabel("load1")
    ax.set_ylim(bottom=0)
    png, width, height = _png(figure)
    caption = "load1 sampled during every run window"
    if is_number(limit) and peak < 0.5 * limit:
        caption += f" (the preregistered load_limit {limit:g} is far above every sample)"
    return FigureImage("load.png", caption, "Line chart of load1 over each run window", png, width, height)


def pressure_figure(finding: Finding, run_files: RunFiles) -> FigureImage | None:
    """CPU pressure stall over each run window (Linux PSI, per sample interval), one line per run, with the
    preregistered psi_limit_pct when rules.evidence uses it; the caption gives the windows' highest I/O and
    memory stall and CPU steal."""
    series = _window_series(finding, run_files, "psi_cpu")
    if not series:
        return None
    figure, ax = _trace_axes(finding, series)
    spec = finding.rules.spec
    if spec.evidence in ("psi", "any"):
        ax.axhline(spec.psi_limit_pct, color="#D55E00", linewidth=1, linestyle=":",
                   label=f"psi_limit_pct {spec.psi_limit_pct:g} (for the whole window)")
        ax.legend(loc="best")
    ax.set_xlabel("seconds since the run window opened")
    ax.set_ylabel("CPU pressure stall (%)")
    ax.set_ylim(0, 100)
    png, width, height = _png(figure)
    peaks = []
    for name, column in (("I/O stall", "psi_io_pct"), ("memory stall", "psi_memory_pct"), ("CPU steal", "steal_pct")):
        values = [v for run in finding.runs if (v := getattr(run.window, column)) is not None]
        if values:
            peaks.append(f"{name} {max(values):.1f} %")
    caption = ("CPU pressure stall during every run window: the share of each sample interval in which some task "
               "waited for a CPU (Linux /proc/pressure/cpu)")
    if peaks:
        caption += "; highest over a whole window: " + ", ".join(peaks)
    return FigureImage("pressure.png", caption, "Line chart of CPU pressure stall over each run window", png,
                       width, height)


def ms_per_iter_figure(finding: Finding, run_files: RunFiles) -> FigureImage | None:
    """The trainer's own per-iteration times (`trace.ms_per_iter`), one line per run."""
    series = []
    for run in finding.runs:
        trace = run_files.traces.get(run.label)
        if trace is not None and trace.ms_per_iter:
            ys = list(trace.ms_per_iter)
            series.append((run.label, run.arm, (list(range(1, len(ys) + 1)), ys)))
    if not series:
        return None
    figure, ax = _trace_axes(finding, series)
    ax.set_xlabel("iteration")
    ax.set_ylabel("ms per iteration")
    png, width, height = _png(figure)
    return FigureImage("ms_per_iter.png", "ms per iteration as each trainer reported it (trace.ms_per_iter)",
                       "Line chart of milliseconds per iteration for each run", png, width, height)


def duet_figure(finding: Finding) -> FigureImage | None:
    """A duet's pairs: each run's window as a bar from the pair's common start, the off and on bars of a
    pair drawn over each other (they ran at the same time), each labelled with its slot."""
    pairs: dict[int, list[Any]] = {}
    for run in finding.runs:
        if run.slot is not None:
            pairs.setdefault(run.pair, []).append(run)
    if not pairs:
        return None
    figure = _new(0.9 + 0.42 * len(pairs))
    ax = figure.add_subplot()
    _style(ax)
    for row, (pair, runs) in enumerate(sorted(pairs.items())):
        for run in runs:
            arm_key = "off" if run.arm == finding.off_arm else "on"
            offset = -0.17 if arm_key == "off" else 0.17
            ax.barh(row + offset, run.process_wallclock_s, height=0.32, color=ARM_COLORS[arm_key], alpha=0.75,
                    hatch="" if run.used else "xx", edgecolor="white" if run.used else "black")
            ax.annotate(f"{literal(run.label)} on {literal(run.slot)}", (run.process_wallclock_s, row + offset),
                        xytext=(3, 0), textcoords="offset points", fontsize=7, va="center")
    ax.set_yticks(range(len(pairs)), [f"pair r{pair}" for pair in sorted(pairs)])
    ax.invert_yaxis()
    handles = [Patch(color=ARM_COLORS[key], alpha=0.75, label=literal(arm))
               for key, arm in (("off", finding.off_arm), ("on", finding.on_arm))]
    ax.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    ax.set_xlabel("seconds since the pair started (both runs released together)")
    ax.margins(x=0.25)
    png, width, height = _png(figure)
    return FigureImage("duet.png", "each duet pair's two run windows, overlapping: both started together, "
                       "each on its slot (hatched: not used)",
                       "Horizontal bars of the off and on run windows of each duet pair", png, width, height)


def report_figures(finding: Finding, run_files: RunFiles) -> dict[str, FigureImage]:
    """Every figure the finding (and the run folders found) can support, keyed by kind."""
    with matplotlib.rc_context(STYLE):
        made = {"runs": runs_figure(finding), "delta": delta_figure(finding),
                "load": load_figure(finding, run_files), "pressure": pressure_figure(finding, run_files),
                "ms_per_iter": ms_per_iter_figure(finding, run_files), "duet": duet_figure(finding)}
    return {kind: image for kind, image in made.items() if image is not None}


def bisect_figure(finding: BisectFinding) -> FigureImage | None:
    """The metric along the commit range: each measured probe's pairs (probe vs its reference, in percent) and
    their median, the skipped commits, the named commit; below, the posterior over the culprit as bars."""
    measured = [p for p in finding.probes if p.values]
    if not measured:
        return None
    n = finding.bad_index
    with matplotlib.rc_context(STYLE):
        figure = _new(4.4)
        top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(2, 1))
        for ax in (top, bottom):
            _style(ax)
        pct = [(p.index, [100 * (v / r - 1) for v, r in zip(p.values, p.reference_values)],
                100 * math.expm1(p.median_log_diff or 0.0)) for p in measured]
        top.scatter([i for i, values, _ in pct for _ in values], [v for _, values, _ in pct for v in values], s=14,
                    color=ARM_COLORS["off"], alpha=0.35, linewidths=0, label="pairs")
        top.scatter([i for i, _, _ in pct], [m for _, _, m in pct], s=52, color=ARM_COLORS["off"], zorder=3,
                    label="median of the probe's pairs")
        top.axhline(0, color="#6b7280", linewidth=0.8)
        if finding.skipped:
            top.scatter([s.index for s in finding.skipped], [0.0] * len(finding.skipped), marker="x", s=46,
                        color="#6b7280", zorder=3, label="skipped (cannot be built)")
        if finding.culprit_index is not None:
            for ax in (top, bottom):
                ax.axvline(finding.culprit_index - 0.5, color=DECISION_COLORS["danger"], linestyle="--", linewidth=1.2)
            top.plot([], [], color=DECISION_COLORS["danger"], linestyle="--",
                     label=f"named commit {finding.culprit_index}")
        top.set_ylabel(f"{literal(finding.metric, 30)}\nvs reference (%)")
        top.legend(loc="best", framealpha=0.9)
        if finding.probabilities:
            ks = [p.index for p in finding.probabilities]
            colors = [DECISION_COLORS["danger"] if k == finding.culprit_index else ARM_COLORS["on"] for k in ks]
            bottom.bar(ks, [p.probability for p in finding.probabilities], width=0.8, color=colors)
            bottom.axhline(finding.confidence, color="#6b7280", linestyle=":", linewidth=1.0)
        bottom.set_ylim(0, 1.05)
        bottom.set_ylabel("P(culprit)")
        bottom.set_xlabel(f"commit (0 = GOOD … {n} = BAD)")
        bottom.set_xlim(-0.6, n + 0.6)
        step = max(1, math.ceil((n + 1) / 24))
        bottom.set_xticks(range(0, n + 1, step))
        png, width, height = _png(figure)
    return FigureImage("bisect.png", f"{finding.metric} of every probe against its reference, in percent (dots: "
                       "pairs, discs: their median), and the posterior over the culprit (bars; dotted: the "
                       f"confidence {finding.confidence:g})",
                       f"{finding.metric} along the commit range, and the posterior over the culprit commit", png,
                       width, height)

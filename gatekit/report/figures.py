"""The report's figures: pure functions from a finding (and its run traces) to standalone SVG.

Drawn by gatekit's own small plotting kit (`svgplot`), not matplotlib: a findings site of thousands of
findings draws two to six figures for each, and these are a millisecond each where matplotlib took about
0.2 s of CPU. Trainer-supplied text is escaped and drawn literally.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from gatekit.finding import Finding
from gatekit.formatting import is_number
from gatekit.quality import DERIVED_PRIMARIES
from gatekit.report.common import delta_ci, primary_label
from gatekit.report.rundata import RunFiles
from gatekit.report.svgplot import Axes

# Okabe–Ito colours: distinguishable with the common colour-vision deficiencies.
ARM_COLORS = {"off": "#0072B2", "on": "#E69F00"}
DECISION_COLORS = {"success": "#009E73", "danger": "#D55E00", "warning": "#CC79A7", "info": "#56B4E9"}
LIMIT_COLOR = "#D55E00"
CSS_PX_PER_IN = 100  # the page shows a figure at 100 CSS px per inch (720 px wide)
WIDTH_IN = 7.2


@dataclass(frozen=True, slots=True)
class FigureImage:
    """One figure: its file name beside the page, its caption and alt text, and the SVG."""

    name: str
    caption: str
    alt: str
    data: bytes
    width: int
    height: int


def literal(text: object, keep: int = 60) -> str:
    """Text cut to `keep` characters, so a long label cannot squeeze the axes away (escaped when drawn)."""
    text = str(text)
    if len(text) > keep:
        text = text[:keep - 1] + "…"
    return text


def _new(height_in: float) -> Axes:
    return Axes(width=WIDTH_IN * CSS_PX_PER_IN, height=round(height_in * CSS_PX_PER_IN))


def _image(name: str, caption: str, alt: str, axes: Axes) -> FigureImage:
    return FigureImage(name, caption, alt, axes.svg(), int(axes.width), int(axes.height))


def _arm_color(finding: Finding, arm: str) -> str:
    return ARM_COLORS["off"] if arm == finding.off_arm else ARM_COLORS["on"]


def runs_figure(finding: Finding) -> FigureImage | None:
    """Per-run primary values in execution order, arm means, and the off mean ± threshold band."""
    stats, primary = finding.stats, finding.gate.primary
    runs = [(run, value) for run in finding.runs if (value := run.value_of(primary)) is not None]
    if not runs:
        return None
    ax = _new(3.6)
    mean_off, threshold = stats.mean_off, stats.threshold_pct
    if is_number(mean_off) and is_number(threshold):
        band = abs(mean_off) * threshold / 100.0
        ax.hspan(mean_off - band, mean_off + band, ARM_COLORS["off"], 0.10)
        ax.add_legend(f"{literal(finding.off_arm)} mean ± threshold ({threshold:.2f} %)", "band",
                      ARM_COLORS["off"], alpha=0.10)
    for arm_key, arm, mean in (("off", finding.off_arm, stats.mean_off), ("on", finding.on_arm, stats.mean_on)):
        if is_number(mean):
            ax.hline(mean, ARM_COLORS[arm_key], dash="--", width=1.2)
            ax.add_legend(f"{literal(arm)} mean {mean:.4g}", "line", ARM_COLORS[arm_key], dash="--")
        used = [(run.order, value) for run, value in runs if run.arm == arm and run.used]
        unused = [(run.order, value) for run, value in runs if run.arm == arm and not run.used]
        if used:
            ax.points(used, ARM_COLORS[arm_key], radius=4.5)
            ax.add_legend(f"{literal(arm)} runs", "point", ARM_COLORS[arm_key])
        if unused:
            ax.points(unused, ARM_COLORS[arm_key], radius=4.5, hollow_cross=True)
            ax.add_legend(f"{literal(arm)} not used", "cross", ARM_COLORS[arm_key])
    ax.xticks = [(run.order, literal(run.label)) for run, _ in runs]
    ax.xtick_rotation = 30 if len(runs) > 8 else 0
    ax.xlabel = "execution order"
    ax.ylabel = literal(primary_label(finding))
    return _image("runs.svg", f"{primary} of every run in execution order, with the arm means and the off "
                  "mean ± threshold band (hollow X: not used)",
                  f"Scatter of {primary} per run in execution order for both arms", ax)


def delta_figure(finding: Finding) -> FigureImage | None:
    """Δ of every exclusion-sensitivity variant against its ±threshold band; the CI of Δ when given."""
    rows = [(r, float(r.threshold_pct), float(r.delta_pct)) for r in finding.sensitivity
            if is_number(r.delta_pct) and is_number(r.threshold_pct)]
    if not rows:
        return None
    delta = finding.stats.delta_pct
    ci = delta_ci(finding.stats) if is_number(delta) else None
    ax = _new(1.3 + 0.42 * len(rows))
    positions = list(range(len(rows)))[::-1]
    for y, (row, threshold, row_delta) in zip(positions, rows):
        ax.rect(-threshold, threshold, y - 0.32, y + 0.32, "#9ca3af", alpha=0.25)
        ax.points([(row_delta, y)], DECISION_COLORS[row.decision.severity], radius=5.0 if y == positions[0] else 3.8)
        ax.text(row_delta, y, f"{row_delta:+.2f} %", dy=10, anchor="middle")
    if ci is not None and delta is not None:  # (a CI is drawn only beside a Δ)
        low, high, label = ci
        ax.xerror(positions[0], min(low, delta), max(high, delta), "#111827")
        ax.add_legend(f"{label} of Δ [{low:+.2f}, {high:+.2f}] %", "errorbar", "#111827")
    ax.vline(0, "#374151", width=0.8)
    ax.yticks = [(y, literal(r.variant)) for y, (r, _, _) in zip(positions, rows)]
    ax.ylim = [-0.6, len(rows) - 0.4]
    ax.xlabel = f"Δ {literal(finding.gate.primary)} (%), grey: ± threshold"
    return _image("delta.svg", "Δ with all used runs and in each exclusion-sensitivity variant, against its "
                  "± threshold band" + (" (with the CI of Δ)" if ci else ""),
                  "Delta per sensitivity variant against the threshold band", ax)


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


def _trace_axes(finding: Finding, series: Sequence[tuple[str, str, Sequence[Any]]]) -> Axes:
    """A figure with one line per run (label at its end), solid for off and dashed for on, and an arm legend."""
    ax = _new(3.4)

    def linestyle(arm: str) -> str:
        return "-" if arm == finding.off_arm else "--"

    for label, arm, (xs, ys) in series:
        # a window of one sample is a point, not a line: without a marker its label would stand alone
        ax.line(xs, ys, _arm_color(finding, arm), dash=linestyle(arm), alpha=0.9, marker=len(xs) == 1)
    for (x, y), labels in end_labels(series).items():
        colors = {_arm_color(finding, arm) for label, arm, _points in series if label in labels}
        ax.text(x, y, literal(", ".join(labels)), dx=4, size=10.5, dodge=True,
                color=colors.pop() if len(colors) == 1 else "#374151")
    for arm in sorted({arm for _, arm, _ in series}):
        ax.add_legend(literal(arm), "line", _arm_color(finding, arm), dash=linestyle(arm))
    return ax


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
    ax = _trace_axes(finding, series)
    peak = max(max(ys) for _, _, (_, ys) in series)
    limit = finding.rules.spec.load_limit
    if is_number(limit) and peak >= 0.5 * limit:
        ax.hline(limit, LIMIT_COLOR, dash=":", width=1.0)
        ax.add_legend(f"load_limit {limit:g}", "line", LIMIT_COLOR, dash=":")
    ax.xlabel = "seconds since the run window opened"
    ax.ylabel = "load1"
    ax.ylim = [0.0, None]
    caption = "load1 sampled during every run window"
    if is_number(limit) and peak < 0.5 * limit:
        caption += f" (the preregistered load_limit {limit:g} is far above every sample)"
    return _image("load.svg", caption, "Line chart of load1 over each run window", ax)


def pressure_figure(finding: Finding, run_files: RunFiles) -> FigureImage | None:
    """CPU pressure stall over each run window (Linux PSI, per sample interval), one line per run, with the
    preregistered psi_limit_pct when rules.evidence uses it; the caption gives the windows' highest I/O and
    memory stall and CPU steal."""
    series = _window_series(finding, run_files, "psi_cpu")
    if not series:
        return None
    ax = _trace_axes(finding, series)
    spec = finding.rules.spec
    if spec.evidence in ("psi", "any"):
        ax.hline(spec.psi_limit_pct, LIMIT_COLOR, dash=":", width=1.0)
        ax.add_legend(f"psi_limit_pct {spec.psi_limit_pct:g} (for the whole window)", "line", LIMIT_COLOR, dash=":")
    ax.xlabel = "seconds since the run window opened"
    ax.ylabel = "CPU pressure stall (%)"
    ax.ylim = [0.0, 100.0]
    peaks = []
    for name, column in (("I/O stall", "psi_io_pct"), ("memory stall", "psi_memory_pct"), ("CPU steal", "steal_pct")):
        values = [v for run in finding.runs if (v := getattr(run.window, column)) is not None]
        if values:
            peaks.append(f"{name} {max(values):.1f} %")
    caption = ("CPU pressure stall during every run window: the share of each sample interval in which some task "
               "waited for a CPU (Linux /proc/pressure/cpu)")
    if peaks:
        caption += "; highest over a whole window: " + ", ".join(peaks)
    return _image("pressure.svg", caption, "Line chart of CPU pressure stall over each run window", ax)


def reference_sm_clock(finding: Finding) -> tuple[str, float] | None:
    """The SM clock a run's clock is a share of, as the backend recorded it at series start: the locked clock
    where clocks were locked, else the maximum (cuda: NVML's); None when it recorded neither."""
    backend = finding.provenance.backend or {}
    for name, key in (("locked", "locked_sm_clock_mhz"), ("max", "max_sm_clock_mhz")):
        value = backend.get(key)
        if is_number(value) and value > 0:
            return name, float(value)
    return None


def clock_figure(finding: Finding, run_files: RunFiles) -> FigureImage | None:
    """The GPU's SM clock over each run window, one line per run, as a share of the locked or maximum SM clock
    when the backend recorded one (else in MHz); None when no window has a clock sample (no GPU, older series)."""
    series = _window_series(finding, run_files, "sm_clock_mhz")
    if not series:
        return None
    reference = reference_sm_clock(finding)
    if reference is not None:
        series = [(label, arm, (xs, [100.0 * y / reference[1] for y in ys])) for label, arm, (xs, ys) in series]
    ax = _trace_axes(finding, series)
    ax.xlabel = "seconds since the run window opened"
    if reference is not None:
        name, mhz = reference
        ax.ylabel = f"SM clock (% of {name})"
        ax.ylim = [0.0, max(105.0, 1.05 * max(max(ys) for _, _, (_, ys) in series))]
        ax.hline(100.0, "#6b7280", dash=":", width=1.0)
        ax.add_legend(f"{name} SM clock {mhz:g} MHz", "line", "#6b7280", dash=":")
    else:
        ax.ylabel = "SM clock (MHz)"
        ax.ylim = [0.0, None]
    idle = [v for run in finding.runs if run.window.telemetry
            and is_number(v := run.window.telemetry.get("gpu_idle_frac"))]
    caption = "GPU SM clock sampled during every run window" + (
        f", as a share of the {reference[0]} SM clock {reference[1]:g} MHz" if reference is not None else " (MHz)")
    if idle:
        caption += ("; while the GPU is idle (the trainer's start-up) it reads its idle clock, which is why a "
                    "window's mean SM clock is taken over its busy samples only")
    return _image("clock.svg", caption, "Line chart of the GPU SM clock over each run window", ax)


# A trace line shows at most this many points per run: 6 runs × 8000 iterations drawn point by point overplot
# into a solid block (and a megabyte of SVG); the median of each bin keeps the trend and drops the jitter.
TRACE_POINTS = 250


def binned_medians(values: Sequence[float], bins: int = TRACE_POINTS) -> tuple[list[float], list[float], int]:
    """(x, y, k): the median of every k consecutive values (k the smallest that gives at most `bins` points),
    x the 1-based position of each bin's centre; the values themselves (k = 1) when they are few enough."""
    k = max(1, math.ceil(len(values) / bins))
    xs, ys = [], []
    for start in range(0, len(values), k):
        chunk = sorted(values[start:start + k])
        middle = len(chunk) // 2
        ys.append(chunk[middle] if len(chunk) % 2 else (chunk[middle - 1] + chunk[middle]) / 2)
        xs.append(start + (len(chunk) + 1) / 2)
    return xs, ys, k


def ms_per_iter_figure(finding: Finding, run_files: RunFiles) -> FigureImage | None:
    """The trainer's own per-iteration times (`trace.ms_per_iter`), one line per run: the median of every k
    iterations where a run has more than TRACE_POINTS of them."""
    series, binned = [], 1
    for run in finding.runs:
        trace = run_files.traces.get(run.label)
        if trace is not None and trace.ms_per_iter:
            xs, ys, k = binned_medians(list(trace.ms_per_iter))
            binned = max(binned, k)
            series.append((run.label, run.arm, (xs, ys)))
    if not series:
        return None
    ax = _trace_axes(finding, series)
    ax.xlabel = "iteration"
    ax.ylabel = "ms per iteration" + (f" (median of {binned})" if binned > 1 else "")
    caption = "ms per iteration as each trainer reported it (trace.ms_per_iter)"
    if binned > 1:
        caption += (f", each line the median of up to {binned} consecutive iterations ({TRACE_POINTS} points a run "
                    "at most)")
    return _image("ms_per_iter.svg", caption, "Line chart of milliseconds per iteration for each run", ax)


def quality_figure(finding: Finding, run_files: RunFiles) -> FigureImage | None:
    """A time-to-target gate's quality curves: each run's target metric against the primary's time axis, the target
    as a line, and a cross at the end of each run that never reached it (right-censored there)."""
    target = finding.gate.time_to_target
    axis = DERIVED_PRIMARIES.get(finding.gate.primary)
    if target is None or axis is None:
        return None
    series, censored = [], []
    for run in finding.runs:
        trace = run_files.traces.get(run.label)
        quality = trace.quality if trace is not None else None
        if quality is None or axis not in quality.axes or target.metric not in quality.series:
            continue
        xs, ys = list(quality.axes[axis]), list(quality.series[target.metric])
        series.append((run.label, run.arm, (xs, ys)))
        if run.target is not None and not run.target.reached:
            censored.append((xs[-1], ys[-1]))
    if not series:
        return None
    ax = _trace_axes(finding, series)
    ax.xlabel = "training seconds" if axis == "elapsed_s" else "step"
    ax.ylabel = literal(target.metric)
    ax.hline(target.target, "#6b7280", dash=":", width=1.0)
    sign = "≤" if target.direction == "lower" else "≥"
    ax.add_legend(f"target {literal(target.metric)} {sign} {target.target:g}", "line", "#6b7280", dash=":")
    if censored:
        ax.points(censored, "#374151", hollow_cross=True)
        ax.add_legend("never reached: censored at its last time", "cross", "#374151")
    return _image("quality.svg", f"each run's {literal(target.metric)} against {ax.xlabel} (trace.{axis}), the "
                  "target dotted; a cross marks a run that never reached it, censored at its last time",
                  f"Line chart of {literal(target.metric)} over training for each run", ax)


def duet_figure(finding: Finding) -> FigureImage | None:
    """A duet's pairs: each run's window as a bar from the pair's common start, the off and on bars of a
    pair drawn over each other (they ran at the same time), each labelled with its slot."""
    pairs: dict[int, list[Any]] = {}
    for run in finding.runs:
        if run.slot is not None:
            pairs.setdefault(run.pair, []).append(run)
    if not pairs:
        return None
    ax = _new(0.9 + 0.42 * len(pairs))
    for row, (pair, runs) in enumerate(sorted(pairs.items())):
        for run in runs:
            arm_key = "off" if run.arm == finding.off_arm else "on"
            offset = -0.17 if arm_key == "off" else 0.17
            ax.rect(0.0, run.process_wallclock_s, row + offset - 0.16, row + offset + 0.16, ARM_COLORS[arm_key],
                    alpha=0.75, hatch=not run.used)
            ax.text(run.process_wallclock_s, row + offset, f"{literal(run.label)} on {literal(run.slot)}", dx=3,
                    size=9.5)
    ax.yticks = [(row, f"pair r{pair}") for row, pair in enumerate(sorted(pairs))]
    ax.invert_y = True
    ax.y_margin = 0.0
    ax.ylim = [-0.6, len(pairs) - 0.4]
    for key, arm in (("off", finding.off_arm), ("on", finding.on_arm)):
        ax.add_legend(literal(arm), "patch", ARM_COLORS[key], alpha=0.75)
    ax.legend_at = "above"
    ax.xlabel = "seconds since the pair started (both runs released together)"
    ax.xlim = [0.0, None]
    ax.x_margin = 0.25
    return _image("duet.svg", "each duet pair's two run windows, overlapping: both started together, "
                  "each on its slot (hatched: not used)",
                  "Horizontal bars of the off and on run windows of each duet pair", ax)


def report_figures(finding: Finding, run_files: RunFiles) -> dict[str, FigureImage]:
    """Every figure the finding (and the run folders found) can support, keyed by kind."""
    made = {"runs": runs_figure(finding), "delta": delta_figure(finding),
            "load": load_figure(finding, run_files), "pressure": pressure_figure(finding, run_files),
            "clock": clock_figure(finding, run_files), "ms_per_iter": ms_per_iter_figure(finding, run_files),
            "duet": duet_figure(finding), "quality": quality_figure(finding, run_files)}
    return {kind: image for kind, image in made.items() if image is not None}

"""The report's figures (gatekit/report/figures.py, drawn by gatekit/report/svgplot.py): each shows what the
finding holds — a point per run, a hollow X per run not used, a row per sensitivity variant, a line per run
window — as well-formed, deterministic SVG, read back here by parsing it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable
from xml.etree import ElementTree

import pytest

from gatekit.finding import load_finding
from gatekit.report.figures import (TRACE_POINTS, binned_medians, clock_figure, delta_figure, duet_figure, load_figure,
                                    ms_per_iter_figure, report_figures, runs_figure)
from gatekit.report.rundata import RunFiles, RunTrace, load_run_files, parse_clock_trace
from gatekit.report.svgplot import Axes, nice_ticks, tick_text
from tests.conftest import gate_invoke
from tests.findings_kit import finding_of, golden_data

SVG = "{http://www.w3.org/2000/svg}"


def _parse(data: bytes) -> ElementTree.Element:
    return ElementTree.fromstring(data)


def _plotted(root: ElementTree.Element) -> ElementTree.Element:
    """The group of data marks (clipped to the axes), apart from the grid, axes and legend."""
    (group,) = [g for g in root.iter(f"{SVG}g") if g.get("clip-path") == "url(#plot)"]
    return group


def _texts(root: ElementTree.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def test_the_runs_figure_has_a_point_per_used_run_and_a_cross_per_unused_one() -> None:
    finding = finding_of(golden_data())
    used = [run for run in finding.runs if run.used and run.value_of(finding.gate.primary) is not None]
    unused = [run for run in finding.runs if not run.used and run.value_of(finding.gate.primary) is not None]
    assert used and unused
    image = runs_figure(finding)
    assert image is not None and image.name == "runs.svg" and (image.width, image.height) == (720, 360)
    root = _parse(image.data)
    marks = _plotted(root)
    assert len(list(marks.iter(f"{SVG}circle"))) == len(used)
    assert len([p for p in marks.iter(f"{SVG}path") if p.get("fill") == "#fff"]) == len(unused)
    texts = _texts(root)
    assert all(run.label in texts for run in finding.runs if run.value_of(finding.gate.primary) is not None)
    assert f"off mean {finding.stats.mean_off:.4g}" in texts and "execution order" in texts
    assert runs_figure(finding).data == image.data  # the same finding gives the same bytes


def test_the_delta_figure_has_a_row_per_sensitivity_variant() -> None:
    finding = finding_of(golden_data())
    image = delta_figure(finding)
    assert image is not None
    root = _parse(image.data)
    assert len(list(_plotted(root).iter(f"{SVG}circle"))) == len(finding.sensitivity)
    texts = _texts(root)
    for row in finding.sensitivity:
        assert row.variant in texts and f"{row.delta_pct:+.2f} %" in texts


def test_the_load_figure_draws_a_line_per_window_and_a_point_for_a_single_sample() -> None:
    data = golden_data()
    finding = finding_of(data)
    labels = [run.label for run in finding.runs]
    traces = {label: RunTrace(label, f"runs/x/{label}", load1=((0.0, 1.0), (1.0, 1.0 + k / 10)))
              for k, label in enumerate(labels[1:])}
    traces[labels[0]] = RunTrace(labels[0], f"runs/x/{labels[0]}", load1=((0.0, 2.0),))
    image = load_figure(finding, RunFiles(traces=traces))
    assert image is not None
    marks = _plotted(_parse(image.data))
    assert len([p for p in marks.iter(f"{SVG}path") if p.get("class") == "series"]) == len(labels) - 1
    assert len(list(marks.iter(f"{SVG}circle"))) == 1


def test_binned_medians_by_hand() -> None:
    assert binned_medians([3.0, 1.0, 2.0], bins=5) == ([1.0, 2.0, 3.0], [3.0, 1.0, 2.0], 1)  # few: as they are
    # 7 values into at most 3 bins: k = 3; bins [5, 1, 3] [2, 9, 4] [7]; centres 2, 5, 7
    assert binned_medians([5.0, 1.0, 3.0, 2.0, 9.0, 4.0, 7.0], bins=3) == ([2.0, 5.0, 7.0], [3.0, 4.0, 7.0], 3)
    assert binned_medians([1.0, 4.0, 2.0, 8.0], bins=1) == ([2.5], [3.0], 4)  # an even bin: the middle two's mean


def test_a_long_ms_per_iter_trace_is_drawn_as_binned_medians_not_every_point() -> None:
    """6 runs × 8000 iterations (the overplot a report once drew point by point): each line has at most
    TRACE_POINTS points, and the axis and caption say what a point is."""
    finding = finding_of(golden_data())
    labels = [run.label for run in finding.runs][:6]
    traces = {label: RunTrace(label, f"runs/x/{label}", ms_per_iter=tuple(10.0 + (i % 7) for i in range(8000)))
              for label in labels}
    image = ms_per_iter_figure(finding, RunFiles(traces=traces))
    assert image is not None and "median of up to 32 consecutive iterations" in image.caption
    lines = [p for p in _plotted(_parse(image.data)).iter(f"{SVG}path") if p.get("class") == "series"]
    assert len(lines) == 6
    for line in lines:  # "M x,y L x,y L …": one command per point
        assert line.get("d").count("L") + 1 == 8000 // 32 <= TRACE_POINTS
    assert "ms per iteration (median of 32)" in _texts(_parse(image.data))


def test_a_duet_figure_has_two_bars_per_pair_and_hatches_unused_runs() -> None:
    finding = finding_of(golden_data())
    runs = tuple(dataclasses.replace(run, slot=f"cpu:{run.order % 2}") for run in finding.runs)
    finding = dataclasses.replace(finding, runs=runs)
    image = duet_figure(finding)
    assert image is not None
    marks = _plotted(_parse(image.data))
    bars = [r for r in marks.iter(f"{SVG}rect") if r.get("fill") != "url(#hatch)"]
    assert len(bars) == len(runs)
    assert len([r for r in marks.iter(f"{SVG}rect") if r.get("fill") == "url(#hatch)"]) == sum(not r.used for r in runs)


def test_trainer_text_in_a_figure_is_escaped_and_control_characters_shown() -> None:
    ax = Axes(width=720, height=300)
    ax.line([0, 1], [0, 1], "#000")
    ax.text(1, 1, '</text><script>alert(1)</script>\x1b[31m"&')
    ax.xlabel = "a < b"
    root = _parse(ax.svg())
    assert not list(root.iter(f"{SVG}script"))
    assert '</text><script>alert(1)</script>\\x1b[31m"&' in _texts(root) and "a < b" in _texts(root)


def test_ticks_are_round_and_labelled_with_the_decimals_they_need() -> None:
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(9.36, 10.2) == [9.4, 9.6, 9.8, 10.0, 10.2]
    assert nice_ticks(0.0, 100.0) == [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
    assert tick_text([0.0, 0.25, 0.5]) == ["0.00", "0.25", "0.50"]
    assert tick_text([9.4, 9.6]) == ["9.4", "9.6"] and tick_text([0.0, 2.0]) == ["0", "2"]


# -- the GPU clock line, on the recorded H200 series (findings/h200-2026-12-01/clocks) -----------------------

H200 = Path(__file__).resolve().parents[1] / "findings" / "h200-2026-12-01" / "clocks" / "findings" / "graph-aa-2026-12-01.json"


def _value_of(root: ElementTree.Element) -> Callable[[float], float]:
    """The y axis' data value at a pixel row, read from two of its tick labels (their text and where they are)."""
    ticks = [(float(t.get("y")), float(t.text)) for t in root.iter(f"{SVG}text")
             if t.get("text-anchor") == "end" and not t.get("transform") and (t.text or "").replace(".", "").isdigit()]
    (y0, v0), (y1, v1) = ticks[0], ticks[-1]
    return lambda y: v0 + (y - y0 + LABEL_OFFSET) * (v1 - v0) / (y1 - y0)


LABEL_OFFSET = 12.5 * 0.35  # a tick label's baseline is this far below its tick (svgplot.TICK_PX · 0.35)


def _series_rows(root: ElementTree.Element) -> list[list[float]]:
    """Each run's line as its pixel rows (the y of every vertex of a path M x,y L x,y ...)."""
    rows = []
    for path in _plotted(root).iter(f"{SVG}path"):
        if path.get("class") == "series":
            rows.append([float(point.split(",")[1]) for point in path.get("d", "")[1:].split("L")])
    return rows


def test_the_report_of_the_recorded_h200_series_draws_the_sm_clock_beside_load_and_pressure(tmp_path: Path) -> None:
    finding = load_finding(H200)
    files = load_run_files(finding, H200, (), H200.parents[4])
    with_clock = [label for label, trace in files.traces.items() if trace.sm_clock_mhz]
    assert len(with_clock) == len(finding.runs) == 12
    samples = [mhz for trace in files.traces.values() for _, mhz in trace.sm_clock_mhz]
    top = finding.provenance.backend["max_sm_clock_mhz"]
    image = clock_figure(finding, files)
    assert image is not None and image.name == "clock.svg"
    root = _parse(image.data)
    rows = _series_rows(root)
    assert len(rows) == len(with_clock)  # a line per run window
    value = _value_of(root)
    shown = [value(y) for row in rows for y in row]
    # the line is the clock's share of the max: the idle start-up (345 MHz) and the busy 1980 MHz, as recorded
    assert min(shown) == pytest.approx(100 * min(samples) / top, abs=0.5)
    assert max(shown) == pytest.approx(100 * max(samples) / top, abs=0.5)
    assert "SM clock (% of max)" in _texts(root) and f"max SM clock {top:g} MHz" in _texts(root)
    # on the page, in the run windows' figures after load and pressure
    done = gate_invoke("report", str(H200), "--html", str(tmp_path / "html"), cwd=H200.parents[4])
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "html" / finding.id / "index.html").read_text()
    assert page.index('src="load.svg"') < page.index('src="pressure.svg"') < page.index('src="clock.svg"')
    assert _parse((tmp_path / "html" / finding.id / "clock.svg").read_bytes()).tag == f"{SVG}svg"


def test_no_clock_figure_without_clock_samples_and_megahertz_without_a_max_clock() -> None:
    finding = load_finding(H200)
    files = load_run_files(finding, H200, (), H200.parents[4])
    no_gpu = RunFiles(traces={label: dataclasses.replace(trace, sm_clock_mhz=()) for label, trace in files.traces.items()})
    assert clock_figure(finding, no_gpu) is None and "clock" not in report_figures(finding, no_gpu)
    backend = {k: v for k, v in finding.provenance.backend.items() if "sm_clock" not in k}
    unknown_max = dataclasses.replace(finding, provenance=dataclasses.replace(finding.provenance, backend=backend))
    image = clock_figure(unknown_max, files)
    assert image is not None
    root = _parse(image.data)
    assert "SM clock (MHz)" in _texts(root)
    assert max(_value_of(root)(y) for row in _series_rows(root) for y in row) == pytest.approx(1980, abs=10)


def test_with_locked_clocks_the_clock_is_a_share_of_the_locked_clock() -> None:
    """Edited for the case (the lent H200 cannot lock its clocks): the recorded series with a locked 1500 MHz."""
    finding = load_finding(H200)
    files = load_run_files(finding, H200, (), H200.parents[4])
    backend = {**finding.provenance.backend, "locked_sm_clock_mhz": 1500.0}
    locked = dataclasses.replace(finding, provenance=dataclasses.replace(finding.provenance, backend=backend))
    root = _parse(clock_figure(locked, files).data)
    assert "SM clock (% of locked)" in _texts(root) and "locked SM clock 1500 MHz" in _texts(root)
    assert max(_value_of(root)(y) for row in _series_rows(root) for y in row) == pytest.approx(132, abs=1)


def test_clock_samples_are_read_from_the_samples_file_and_unreadable_cells_left_out() -> None:
    text = "t_s,load1,gpu_sm_clock_mhz\n0.0,0.1,345\n0.5,0.1,\n1.0,0.1,1980\n1.5,0.1,nan\n"
    assert parse_clock_trace(text) == ((0.0, 345.0), (1.0, 1980.0))
    assert parse_clock_trace("t_s,load1\n0.0,0.1\n") == ()

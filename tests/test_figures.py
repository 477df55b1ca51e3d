"""The report's figures (gatekit/report/figures.py, drawn by gatekit/report/svgplot.py): each shows what the
finding holds — a point per run, a hollow X per run not used, a row per sensitivity variant, a line per run
window — as well-formed, deterministic SVG, read back here by parsing it."""

from __future__ import annotations

import dataclasses
from xml.etree import ElementTree

from gatekit.report.figures import delta_figure, duet_figure, load_figure, runs_figure
from gatekit.report.rundata import RunFiles, RunTrace
from gatekit.report.svgplot import Axes, nice_ticks, tick_text
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

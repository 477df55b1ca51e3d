"""The H200 measurements of 2026-12-02 as committed: every series in the findings folders' `series.tar.xz`
verifies against its finding (extracted, then the real `gate verify`), and the figures docs/ quotes are the
findings' own (computed from their run rows and stats here, then looked up in the doc's text)."""

from __future__ import annotations

import json
import re
import statistics
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import gate_invoke

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = ROOT / "findings"
DOCS = ROOT / "docs"
FOLDERS = ("h200-2026-12-02-warm", "h200-2026-12-02-tenants", "h200-2026-12-02-ttq-2")


def _finding(folder: str, stem: str) -> dict[str, Any]:
    return json.loads((FINDINGS / folder / "findings" / f"{stem}.json").read_text(encoding="utf-8"))


def _doc(name: str, heading: str | None = None) -> str:
    """A doc's text (only its `## heading` section where named), each run of whitespace one space, so that a
    figure reads the same wherever a line breaks."""
    text = (DOCS / name).read_text(encoding="utf-8")
    if heading is not None:
        start = text.index(f"## {heading}")
        end = text.find("\n## ", start + 1)
        text = text[start:end if end >= 0 else len(text)]
    return " ".join(text.split())


def _startup_median(finding: dict[str, Any], arm: str | None = None, *, warm: bool | None = None) -> float:
    """Median `startup_s` of a finding's run rows (of one arm; only those forked warm or only cold)."""
    return statistics.median(run["startup_s"] for run in finding["runs"]
                             if (arm is None or run["arm"] == arm)
                             and (warm is None or bool(run.get("warm_parent")) == warm))


def _pct(value: float, digits: int = 1) -> str:
    """A signed percentage as the docs write it (a minus sign, not a hyphen)."""
    return f"{value:+.{digits}f}".replace("-", "−")


def _time_ratio(finding: dict[str, Any]) -> str:
    """The time-to-target decision's ratio and 90 % interval, as the docs quote them from its verdict."""
    reason = finding["verdict"]["reasons"][0]
    match = re.search(r"time ratio on/off (\d+\.\d+) .* 90 % interval \[([-+][\d.]+) %, ([-+][\d.]+) %\]", reason)
    assert match, reason
    return f"{match.group(1)}, 90 % interval {_pct(float(match.group(2)))} … {_pct(float(match.group(3)))} %"


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_committed_series_verifies_against_its_finding(folder: str, tmp_path: Path) -> None:
    with tarfile.open(FINDINGS / folder / "series.tar.xz") as archive:
        assert all(member.isdir() or member.isfile() for member in archive.getmembers())  # no links, no devices
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            archive.extractall(tmp_path, filter="data")
        else:
            archive.extractall(tmp_path)
    series = sorted((tmp_path / "runs").iterdir())
    assert series and not (tmp_path / "runs" / ".cache").exists()
    by_series = {json.loads(path.read_text(encoding="utf-8"))["meta"]["series_id"]: path
                 for path in (FINDINGS / folder / "findings").glob("*.json")}
    for path in series:
        finding = by_series[path.name]  # every series has its finding beside the archive
        result = gate_invoke("verify", str(path), str(finding), cwd=tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.startswith("verified:"), result.stdout


def test_warm_start_figures_in_benchmarks_md_are_the_findings() -> None:
    text = _doc("benchmarks.md", "Warm start")
    for stem in ("resident-graph-2026-12-02", "resident-graph-2026-12-02-2"):
        finding = _finding("h200-2026-12-02-warm", stem)
        assert all(run.get("warm_parent") for run in finding["runs"])  # every run of the graph gate forked warm
        median = _startup_median(finding, warm=True)
        assert median <= 1.0, stem  # the target
        assert f"**{median:.3f}**" in text, stem
    for stem in ("warm-cold-aa-2026-12-02", "warm-cold-aa-2026-12-02-2"):
        finding = _finding("h200-2026-12-02-warm", stem)
        cold, warm = _startup_median(finding, "cold"), _startup_median(finding, "warm")
        assert not any(run.get("warm_parent") for run in finding["runs"] if run["arm"] == "cold")
        assert warm <= 1.0 < cold
        assert f"{cold:.3f} (" in text and f"**{warm:.3f}**" in text, stem
        assert finding["verdict"]["decision"] == "rejected"
        assert f"{_pct(finding['stats']['delta_pct'], 2)} %" in text, stem


def test_co_tenant_figures_in_backends_md_are_the_findings() -> None:
    text = _doc("backends.md")
    idle = _finding("h200-2026-12-02-tenants", "tenant-idle-2026-12-02")
    busy = _finding("h200-2026-12-02-tenants", "tenant-busy-2026-12-02")
    assert not any(run["load_evidence"] or run["window"].get("evidence") for run in idle["runs"])
    flagged = [run for run in busy["runs"] if run["load_evidence"]]
    assert {run["label"] for run in flagged} == {run["label"] for run in busy["runs"] if run["used"]}
    assert all("computed on the GPU" in run["window"]["evidence"][0] for run in flagged)
    assert f"**0 of {len(idle['runs'])}** runs" in text
    assert f"**{len(flagged)} of {len(busy['runs'])}** were" in text

    def mean_train(finding: dict[str, Any]) -> str:
        return f"{statistics.fmean(run['metrics']['train_elapsed_s'] for run in finding['runs']):.2f} s"
    assert f"was {mean_train(busy)} instead of {mean_train(idle)}" in text


def test_time_to_target_figures_in_its_doc_are_the_findings() -> None:
    text = _doc("time-to-target.md")
    decisions = {path.stem: json.loads(path.read_text(encoding="utf-8"))["verdict"]["decision"]
                 for path in (FINDINGS / "h200-2026-12-02-ttq-2" / "findings").glob("*.json")}
    assert decisions == {
        "ttq-learning-rate-torch-2026-12-02": "regression", "ttq-learning-rate-torch-wall-2026-12-02": "rejected",
        "ttq-learning-rate-2026-12-02": "regression", "ttq-learning-rate-pinned-2026-12-02": "regression",
        "ttq-learning-rate-wall-2026-12-02": "inconclusive", "ttq-learning-rate-wall-2026-12-02-2": "inconclusive",
        "ttq-learning-rate-wall-pinned-2026-12-02": "inconclusive"}
    torch = _finding("h200-2026-12-02-ttq-2", "ttq-learning-rate-torch-2026-12-02")
    assert f"time ratio on/off {_time_ratio(torch)}; classic Δ {_pct(torch['stats']['delta_pct'])} %" in text
    wall = _finding("h200-2026-12-02-ttq-2", "ttq-learning-rate-torch-wall-2026-12-02")["stats"]
    assert (f"Δ {_pct(wall['delta_pct'], 2)} % within ±{wall['threshold_pct']:.0f} %, "
            f"σ {wall['sigma_off_pct']:.2f} % / {wall['sigma_on_pct']:.2f} %") in text
    assert f"time ratio {_time_ratio(_finding('h200-2026-12-02-ttq-2', 'ttq-learning-rate-2026-12-02'))};" in text
    pinned_ratio = _time_ratio(_finding("h200-2026-12-02-ttq-2", "ttq-learning-rate-pinned-2026-12-02"))
    assert f"pinned to one core {pinned_ratio.replace(', 90 % interval', ',')})" in text
    numpy_wall = _finding("h200-2026-12-02-ttq-2", "ttq-learning-rate-wall-2026-12-02")["stats"]
    assert f"σ_off {numpy_wall['sigma_off_pct']:.1f} % (threshold {numpy_wall['threshold_pct']:.1f} %" in text
    pinned = _finding("h200-2026-12-02-ttq-2", "ttq-learning-rate-wall-pinned-2026-12-02")["stats"]
    assert f"{pinned['sigma_off_pct']:.1f} % pinned to one core" in text

"""Resume reads a series once: one journal replay, each file hashed once, and the run loop shared with
calibration (issue: resume used to replay the journal four times and hash the predecision twice)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gatekit import prereg, provenance
from gatekit.errors import SeriesError
from gatekit import series_replay as replay
from gatekit.series import runner
from gatekit.config import load_gate
from gatekit.series_replay import open_series
from gatekit.series.runner import SeriesRunner
from gatekit.storage import SeriesLayout
from gatekit.verify import analyze_series
from gatekit.storage import Journal


def _interrupted_series(gate_dir) -> tuple[Path, Path]:
    """A finished series (of `gate_dir`'s gate folder) cut back to how it looked when killed after its first
    two runs."""
    g = gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0})
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    series_dir = result.series_dir
    SeriesLayout(series_dir).done.unlink()
    for path in result.finding_paths:
        path.unlink()
    lines = SeriesLayout(series_dir).journal.read_text().splitlines(keepends=True)
    kept, run_ends = [], 0
    for line in lines:
        event = json.loads(line)["event"]
        if event == "run_end":
            run_ends += 1
        if run_ends > 2 or event == "series_end":
            break
        kept.append(line)
    SeriesLayout(series_dir).journal.write_text("".join(kept))
    return g.gate, series_dir


def test_resume_replays_the_journal_once_and_hashes_each_file_once(fake_gate_dir, monkeypatch) -> None:
    gate_path, series_dir = _interrupted_series(fake_gate_dir)
    replays: list[Path] = []
    hashed: list[str] = []
    original_lines, original_sha = Journal.lines, provenance.sha256_file

    def counting_lines(self):  # type: ignore[no-untyped-def]  # Journal.events reads through lines too
        replays.append(self.path)
        return original_lines(self)

    def counting_sha(path: Path) -> str:
        hashed.append(Path(path).name)
        return original_sha(path)

    monkeypatch.setattr(Journal, "lines", counting_lines)
    for module in (replay, runner, prereg):
        monkeypatch.setattr(module, "sha256_file", counting_sha)
    predecision_reads: list[Path] = []
    original_read = prereg.read_predecision

    def counting_read(series_dir: Path, expected: str):  # type: ignore[no-untyped-def]
        predecision_reads.append(series_dir)
        return original_read(series_dir, expected)

    monkeypatch.setattr(replay, "read_predecision", counting_read)

    opened = open_series(series_dir)
    result = SeriesRunner(opened.config, opened.off, opened.on).resume(opened)

    assert result.finding.decision.value == "adopted"
    assert len(result.finding.runs) == 6
    # once to resume, once more at the end: the journal as it lies on disk is verified before the finding is
    # reported (a line the code under test wrote into it is exit 3, never a verdict)
    assert replays == [SeriesLayout(series_dir).journal] * 2
    assert len(predecision_reads) == 1
    # the gate file and each arm config once; the trainer is hashed by the run loop around every run
    assert hashed.count("gate.toml") == 1
    assert hashed.count("off.toml") == hashed.count("on.toml") == 1
    # what was resumed is what `gate analyze` computes from the journal on disk
    assert analyze_series(series_dir).to_dict() == result.finding.to_dict()


def test_resume_refuses_a_changed_arm_config_before_anything_runs(fake_gate_dir) -> None:
    gate_path, series_dir = _interrupted_series(fake_gate_dir)
    arm = gate_path.parent / "on.toml"
    arm.write_text(arm.read_text() + "\n# edited\n")
    with pytest.raises(SeriesError, match="arm config of 'on' changed"):
        open_series(series_dir)
    events = [json.loads(line)["event"] for line in SeriesLayout(series_dir).journal.read_text().splitlines()]
    assert events.count("run_end") == 2

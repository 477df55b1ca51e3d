"""Concurrency and resume refusals: one series per runs folder, nothing resumed that changed or finished."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Callable

import pytest

from gatekit.errors import SeriesError
from gatekit.series_replay import read_state
from tests.conftest import gate_invoke
from tests.faults.faultkit import (FaultGate, alive, assert_journal_consistent, fault_gate, finish, interrupted_series,
                                   kill_quietly, start_gate)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_error(stderr: str) -> str:
    (line,) = [line for line in stderr.splitlines() if line.startswith("gate: error: ")]
    return line


def _interrupted_series(root: Path, **sections: dict) -> tuple[FaultGate, Path]:
    """A series cut off by Ctrl-C during off-r2 (exit 130), ready to resume."""
    g = fault_gate(root, off={"hold": ["off-r2"]}, **sections)
    return g, interrupted_series(g, "off-r2", signal.SIGINT)


def test_a_second_series_in_the_same_runs_folder_is_refused(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", off={"hold": ["off-r1"]})
    first = start_gate("run", "off", "on", cwd=g.root)
    g.wait_holding("off-r1")
    trainer = g.pid("off-r1")
    try:
        second = gate_invoke("run", "off", "on", cwd=g.root)
        assert second.returncode == 2
        assert f"another series is running here (pid {first.pid})" in _one_error(second.stderr)
        # another gate file, pointed at the same runs folder, is refused the same way
        other = fault_gate(tmp_path / "other")
        third = gate_invoke("run", "off", "on", "--runs", str(g.root / "runs"), cwd=other.root)
        assert third.returncode == 2 and "another series is running here" in third.stderr
        # resuming the running series is refused too, and must not touch its live trainer
        resumed = gate_invoke("run", "--resume", str(g.series()), cwd=g.root)
        assert resumed.returncode == 2 and "another series is running here" in resumed.stderr
        assert alive(trainer)
        assert g.order() == ["off-r1"] and other.order() == []  # the refused ones started nothing
        assert len([p for p in (g.root / "runs").iterdir() if p.is_dir()]) == 1
    finally:
        g.release()
    code, _, err = finish(first)
    assert code == 0, err
    kill_quietly(trainer)


def test_resume_refuses_every_change_naming_the_file_and_both_hashes(tmp_path: Path) -> None:
    g, series = _interrupted_series(tmp_path / "g")
    start = json.loads((series / "journal.jsonl").read_text().splitlines()[0])
    off = g.root / "off.toml"
    predecision = series / "predecision.toml"

    def refused(path: Path, edit: str | None, registered: str, code: int = 2) -> str:
        original = path.read_bytes()
        if edit is None:
            path.unlink()
        else:
            path.write_bytes(original + edit.encode())
        now = "missing" if edit is None else _sha(path)
        done = gate_invoke("run", "--resume", str(series), cwd=g.root)
        path.write_bytes(original)
        line = _one_error(done.stderr)
        assert done.returncode == code, done.stderr
        assert str(path) in line and registered in line and now in line, line
        return line

    gate_sha = start["gate_sha256"]
    refused(g.gate, "\n# a comment is a change too\n", gate_sha)
    refused(g.gate, "\n[gate\n", gate_sha)  # an edit that also breaks the file is still named as a change
    off_sha = _sha(off)
    assert "arm config of 'off' changed" in refused(off, "\nsleep_s = 0.5\n", off_sha)
    refused(off, None, off_sha)
    # the predecision is evidence: the journal's chain is anchored on it, so its edit does not verify (exit 3)
    refused(predecision, "\n# edited after the fact\n", start["predecision_sha256"], code=3)
    assert g.order() == ["off-r1", "on-r1", "off-r2"]  # no refused resume ran anything

    done = gate_invoke("run", "--resume", str(series), cwd=g.root)  # restored: the same resume now finishes
    assert done.returncode == 0, done.stderr
    assert g.finding()["verdict"]["decision"] == "adopted"
    again = gate_invoke("run", "--resume", str(series), cwd=g.root)
    assert again.returncode == 2
    assert f"{series}: this series is finished (DONE exists)" in _one_error(again.stderr)


def test_an_artifact_changed_while_interrupted_makes_the_resumed_series_invalid(tmp_path: Path) -> None:
    g, series = _interrupted_series(tmp_path / "g")
    trainer = g.root / "fault_trainer.py"
    before = _sha(trainer)
    trainer.write_text(trainer.read_text() + "\n# rebuilt while the series was stopped\n")
    done = gate_invoke("run", "--resume", str(series), cwd=g.root)
    assert done.returncode == 3, done.stderr
    assert g.order() == ["off-r1", "on-r1", "off-r2"]  # stopped before running anything on the new binary
    reasons = " ".join(g.finding()["verdict"]["reasons"])
    assert f"{trainer} changed: sha256 {before} -> {_sha(trainer)}" in reasons
    assert g.finding()["verdict"]["decision"] == "invalid"
    assert_journal_consistent(series)


def test_resume_checks_the_machine_again(tmp_path: Path) -> None:
    marker = f"gatekit_busy_marker_{uuid.uuid4().hex}"  # its own: a second suite on the machine has another
    g, series = _interrupted_series(tmp_path / "g", driver={"busy_pattern": marker})
    blocker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", marker])
    try:
        done = gate_invoke("run", "--resume", str(series), cwd=g.root)
    finally:
        blocker.kill()
        blocker.wait()
    assert done.returncode == 4  # the machine's state, not the series': the same resume runs once it is ready
    line = _one_error(done.stderr)
    assert "preflight failed, nothing more ran" in line and f"pid {blocker.pid}" in line
    assert g.order() == ["off-r1", "on-r1", "off-r2"]
    done = gate_invoke("run", "--resume", str(series), cwd=g.root)
    assert done.returncode == 0, done.stderr


def _edit_event(kind: str, edit) -> Callable[[list[dict]], list]:  # type: ignore[no-untyped-def,type-arg]
    def apply(events: list[dict]) -> list:  # type: ignore[type-arg]
        index = next(i for i, e in enumerate(events) if e["event"] == kind)
        events[index] = edit(events[index])
        return events
    return apply


JOURNAL_DAMAGE = {
    "run_end without its record": _edit_event("run_end", lambda e: {"event": "run_end"}),
    "metric turned into text": _edit_event("run_end", lambda e: {**e, "record": {
        **e["record"], "outcome": {**e["record"]["outcome"], "metrics": {"train_elapsed_s": "fast"}}}}),
    "schedule not a list": _edit_event("series_start", lambda e: {**e, "schedule": "abab"}),
    "order as text": _edit_event("run_end", lambda e: {**e, "record": {**e["record"], "order": "first"}}),
    "an event that is a list": lambda events: [*events[:2], [1, 2], *events[2:]],
    "series_end without provenance": _edit_event("series_end", lambda e: {"event": "series_end"}),
}


@pytest.mark.parametrize("damage", JOURNAL_DAMAGE, ids=list(JOURNAL_DAMAGE))
def test_an_edited_journal_is_one_clear_error(finished_series: Path, tmp_path: Path, damage: str) -> None:
    series = tmp_path / finished_series.name
    shutil.copytree(finished_series, series)
    journal = series / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    journal.write_text("".join(json.dumps(e) + "\n" for e in JOURNAL_DAMAGE[damage](events)))
    # `gate analyze` verifies first: the edit breaks the hash chain (exit 3, naming the journal's line)
    done = gate_invoke("analyze", str(series), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert f"{journal}: line " in _one_error(done.stderr)
    # replaying it (as --resume does) names the event that is not what gatekit wrote
    with pytest.raises(SeriesError, match=r"event \d+ .* the journal was edited or damaged"):
        read_state(series)


@pytest.fixture(scope="module")
def finished_series(tmp_path_factory: pytest.TempPathFactory) -> Path:
    g = fault_gate(tmp_path_factory.mktemp("finished") / "g", gate={"n": 2})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    return g.series()

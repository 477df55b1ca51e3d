"""`gate calibrate` runs through the series' run loop: backend telemetry in every window, artifacts hashed
around every run, the journal's run events, and the same interrupt handling (it used to have a loop of its
own without telemetry, safe outcome handling or cleanup). The fixture trainer's runs are played in process
by FakeDriver."""

from __future__ import annotations

import json

import pytest

from gatekit.calibrate import run_calibration
from gatekit.config import load_gate
from gatekit.errors import CalibrationError, ProvenanceError

STEADY = {f"off-r{k}": v for k, v in enumerate([10.0, 10.1, 9.9, 10.05, 9.95], 1)}


def test_calibration_windows_carry_backend_telemetry_and_the_journal_has_run_events(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": STEADY}, backend={"name": "cpu"})
    config = load_gate(g.gate)
    calibration = run_calibration(config, config.arm("off"), 5)
    series = calibration.path.parent
    for k in range(1, 6):
        record = json.loads((series / f"off-r{k}" / "record.json").read_text())
        assert record["window"]["samples"] >= 2
        assert "cpu_freq_mean_mhz" in record["window"]["telemetry"]  # the cpu backend watched the window
    events = [json.loads(line) for line in (series / "journal.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "calibration_start" and kinds[-1] == "calibration_end"
    assert kinds.count("run_start") == kinds.count("run_end") == 5
    assert all(len(e["hash_s"]) == 2 for e in events if e["event"] == "run_end")  # hashed before and after
    assert list(calibration.values) == list(STEADY.values())


def test_an_artifact_changed_during_a_calibration_is_a_provenance_error(fake_gate_dir) -> None:
    g = fake_gate_dir()  # the gate folder first, to know where its hashed trainer is
    g = fake_gate_dir(off={"touch": {"label": "off-r2", "path": str(g.root / "fake_trainer.py")}})
    config = load_gate(g.gate)
    with pytest.raises(ProvenanceError, match="the calibration is not usable"):
        run_calibration(config, config.arm("off"), 4)
    assert not (g.root / "runs" / "calibration.toml").exists()


def test_a_failed_run_ends_the_calibration(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"crash": ["off-r3"]})
    config = load_gate(g.gate)
    with pytest.raises(CalibrationError, match="off-r3 failed: exit code 1"):
        run_calibration(config, config.arm("off"), 5)
    (journal,) = (g.root / "runs").glob("calibrate-*/journal.jsonl")
    events = [json.loads(line)["event"] for line in journal.read_text().splitlines()]
    assert events.count("run_end") == 3  # nothing ran after the failure

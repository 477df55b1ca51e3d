"""All durations come from monotonic clocks: a wall clock stepped by NTP or by hand changes nothing."""

from __future__ import annotations

import ast
import csv
import itertools
import json
import time
from pathlib import Path

import pytest

from gatekit.config import load_gate
from gatekit.series.runner import SeriesRunner
from tests.faults.faultkit import fault_gate

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "gatekit").rglob("*.py"), *(ROOT / "drivers").rglob("*.py")])
# Wall-clock reads that only label things for people (ISO timestamps, dates), never measure a duration.
WALL_CLOCK_LABELS = {("gatekit/series/runloop.py", "now"), ("gatekit/csvinput.py", "evidence_from_csv"),
                     ("gatekit/importers/common.py", "of"),  # the finding's date
                     # NVML's per-process utilisation is asked "since" a CPU wall-clock time in µs (its own
                     # timestamps are on that clock): a label for NVML, never a duration
                     ("drivers/backends/cuda.py", "sample"), ("drivers/backends/record_nvml.py", "sample"),
                     ("drivers/backends/record_nvml.py", "main")}


def _wall_clock_reads(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of every time.time()/time_ns() use and every .now()/.today() call."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]:
        name = getattr(func, "name", "<module>")
        for node in ast.walk(func):
            if isinstance(node, ast.Attribute) and node.attr in ("time", "time_ns") and \
                    isinstance(node.value, ast.Name) and node.value.id == "time":
                found.append((name, node.lineno))
            if isinstance(node, ast.ImportFrom) and node.module == "time" and \
                    any(alias.name in ("time", "time_ns") for alias in node.names):
                found.append((name, node.lineno))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("now", "today", "utcnow"):
                found.append((name, node.lineno))
    return sorted(set(found))


def test_no_duration_is_measured_on_the_wall_clock() -> None:
    assert SOURCES, "no sources found"
    offenders = []
    for path in SOURCES:
        relative = path.relative_to(ROOT).as_posix()
        reads = _wall_clock_reads(path)
        # the innermost enclosing function is listed too; a read is fine if any enclosing one is allowed
        by_line: dict[int, set[str]] = {}
        for name, line in reads:
            by_line.setdefault(line, set()).add(name)
        for line, names in by_line.items():
            if not any((relative, name) in WALL_CLOCK_LABELS for name in names):
                offenders.append(f"{relative}:{line}")
    assert offenders == [], "wall-clock reads outside the allowed labelling functions: " + ", ".join(offenders)


def test_a_stepping_wall_clock_does_not_change_any_duration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = time.time
    jumps = itertools.cycle([-3600.0, 7200.0, -86400.0])
    monkeypatch.setattr(time, "time", lambda: real() + next(jumps))  # NTP steps, back and forth
    g = fault_gate(tmp_path / "g", gate={"n": 2}, both={"sleep_s": 0.3}, rules={"sample_interval_s": 0.1})
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arms["off"], config.arms["on"]).start()
    for run in result.finding.to_dict()["runs"]:
        assert 0.3 <= run["process_wallclock_s"] < 60, run
        assert run["window"]["samples"] >= 2
    for samples in result.series_dir.glob("*/samples.csv"):
        times = [float(row["t_s"]) for row in csv.DictReader(samples.open())]
        assert times == sorted(times) and 0 <= times[0] and times[-1] < 60


def test_hashing_is_timed_and_stays_outside_the_timed_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gatekit import provenance
    from gatekit.series import runloop, runner

    real = provenance.hash_artifacts_timed
    slow_s = 1.0  # as if the artifacts were a few GB

    def slow_hash(paths):  # type: ignore[no-untyped-def]
        hashes, seconds = real(paths)
        time.sleep(slow_s)
        return hashes, seconds + slow_s

    for module in (runloop, runner):  # around every run, and at the series' start and end
        monkeypatch.setattr(module, "hash_artifacts_timed", slow_hash)
    g = fault_gate(tmp_path / "g", gate={"n": 2})  # the fewest runs a gate takes
    (g.root / "weights.bin").write_bytes(b"\0" * (3 << 20))
    gate = g.gate.read_text().replace('hash = ["fault_trainer.py"]', 'hash = ["fault_trainer.py", "weights.bin"]')
    g.gate.write_text(gate)
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arms["off"], config.arms["on"]).start()
    for run in result.finding.to_dict()["runs"]:
        assert run["process_wallclock_s"] < slow_s, run  # a slow hash on each side of the run, none inside
    journal = [json.loads(line) for line in (result.series_dir / "journal.jsonl").read_text().splitlines()]
    per_run = [e["hash_s"] for e in journal if e["event"] == "run_end"]
    assert len(per_run) == 4 and all(len(pair) == 2 and min(pair) >= slow_s for pair in per_run)
    hashing = result.finding.to_dict()["provenance"]["hashing"]
    assert hashing["artifact_bytes"] == (3 << 20) + (g.root / "fault_trainer.py").stat().st_size
    assert hashing["between_runs_count"] == 8 and hashing["between_runs_max_s"] >= slow_s
    assert hashing["total_s"] >= 10 * slow_s  # series start, 8 between runs, series end

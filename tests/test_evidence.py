"""Noise evidence beyond load1: pressure-stall information and CPU steal per run window, and the preregistered
`rules.evidence` that chooses which of them counts as load evidence.

The last test runs a real series in-process (SeriesRunner, the real sampler reading the real /proc/pressure)
while a real CPU hog — one busy-loop process per core — runs during exactly one run's window.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gatekit.config import RulesSpec, ThresholdSpec, load_gate
from gatekit.driver import RunRequest
from gatekit.errors import ConfigError
from gatekit.prereg import DecisionSpec, stated_rules
from gatekit.records import LoadSample, RunOutcome, WindowSummary
from gatekit.report.figures import pressure_figure
from gatekit.report.rundata import load_run_files, parse_pressure_trace
from gatekit.rules import classify, evidence_warnings, per_core_load1, run_table, window_evidence
from gatekit.runtable import RunTable
from gatekit.sampler import SAMPLE_FIELDS, WindowSampler, parse_pressure, read_pressure, samples_csv
from gatekit.series.runner import SeriesRunner
from tests.conftest import write_toml
from tests.fakes import FakeDriver, fake_gate

# /proc/pressure/cpu as the kernel writes it (Documentation/accounting/psi.rst)
PSI_CPU = ("some avg10=1.25 avg60=0.30 avg300=0.63 total=749208067\n"
           "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_pressure_files_are_parsed_and_absent_ones_left_out(tmp_path: Path) -> None:
    assert parse_pressure(PSI_CPU) == (1.25, 749208067)
    assert parse_pressure("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n") is None
    assert read_pressure(tmp_path / "nowhere") == {}  # not Linux, or no PSI in the kernel
    (tmp_path / "cpu").write_text(PSI_CPU)
    (tmp_path / "memory").write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=12\n")
    assert read_pressure(tmp_path) == {"psi_cpu_avg10": 1.25, "psi_cpu_total_us": 749208067,
                                       "psi_memory_avg10": 0.0, "psi_memory_total_us": 12}


def _sample(t_s: float, *, cpu_us: int | None = None, io_us: int | None = None, avg10: float | None = None,
            steal_s: float | None = None, total_s: float | None = None, phase: str = "tick") -> LoadSample:
    return LoadSample(t_s, 1.0, 1.0, 1.0, phase=phase, psi_cpu_total_us=cpu_us, psi_io_total_us=io_us,
                      psi_cpu_avg10=avg10, cpu_steal_s=steal_s, cpu_total_s=total_s)


def test_window_summary_takes_stall_and_steal_from_counter_deltas() -> None:
    samples = [_sample(0.0, cpu_us=1_000_000, io_us=50, avg10=0.5, steal_s=10.0, total_s=1000.0, phase="open"),
               _sample(1.0, cpu_us=1_100_000, io_us=50, avg10=7.0, steal_s=10.3, total_s=1002.0),
               _sample(2.0, cpu_us=1_500_000, io_us=20_050, avg10=3.0, steal_s=10.5, total_s=1004.0, phase="close")]
    window = WindowSummary.of(samples)
    # by hand: 500 000 µs of CPU stall in a 2 s window = 25 %; I/O 20 000 µs = 1 %; steal 0.5 s of 4 s CPU = 12.5 %
    assert window.psi_cpu_pct == pytest.approx(25.0)
    assert window.psi_io_pct == pytest.approx(1.0)
    assert window.psi_memory_pct is None and window.psi_memory_avg10_max is None
    assert window.psi_cpu_avg10_max == 7.0
    assert window.steal_pct == pytest.approx(12.5)
    assert WindowSummary.from_dict(window.to_dict()) == window
    # a window recorded without them (another OS, or an older series) reads and writes as before
    plain = WindowSummary.of([_sample(0.0), _sample(1.0)])
    assert plain.to_dict() == {"samples": 2, "load1_mean": 1.0, "load1_max": 1.0, "on_ac": None}
    assert WindowSummary.from_dict({"samples": 2, "load1_mean": 1.0, "load1_max": 1.0}).psi_cpu_pct is None


def test_samples_csv_adds_pressure_columns_only_when_recorded() -> None:
    header = samples_csv((_sample(0.0), _sample(0.5))).splitlines()[0]
    assert header.split(",") == list(SAMPLE_FIELDS)  # the file as before on a machine without PSI
    text = samples_csv((_sample(0.0, cpu_us=0), _sample(0.5, cpu_us=100_000), _sample(1.0, cpu_us=100_000)))
    assert "psi_cpu_total_us" in text.splitlines()[0].split(",")
    # by hand: 100 000 µs of 0.5 s = 20 %, then nothing
    assert parse_pressure_trace(text) == ((0.5, pytest.approx(20.0)), (1.0, 0.0))
    assert parse_pressure_trace("t_s,load1\n0,1\n") == ()


def test_the_real_sampler_records_pressure_where_the_os_has_it() -> None:
    with WindowSampler(0.02) as sampler:
        time.sleep(0.06)
    window = WindowSummary.of(sampler.samples)
    has_psi = bool(read_pressure())
    assert (window.psi_cpu_pct is not None) == has_psi
    if has_psi:
        assert 0.0 <= window.psi_cpu_pct <= 100.0  # type: ignore[operator]


def _table(rows: list[dict[str, Any]]) -> RunTable:
    base = {"arm": "off", "pair": 1, "value": 1.0, "failed": False, "error": "", "samples": 3, "load1_mean": 1.0,
            "backend_evidence": "", "on_ac": None, "retry_of": None}
    return run_table([{**base, "order": i + 1, "label": f"r{i + 1}", **row} for i, row in enumerate(rows)])


def test_rules_evidence_chooses_the_telemetry_and_falls_back_to_load1_with_a_warning() -> None:
    table = _table([{"load1_max": 9.0, "psi_cpu_pct": 1.0, "steal_pct": 0.0},   # load1 only
                    {"load1_max": 1.0, "psi_cpu_pct": 35.0, "steal_pct": 0.0},  # pressure only
                    {"load1_max": 1.0, "psi_io_pct": 21.0, "steal_pct": 12.0},  # I/O stall and steal
                    {"load1_max": 9.0},                                         # recorded no PSI, no steal
                    {"load1_max": 1.0, "psi_cpu_pct": 19.9, "steal_pct": 9.9}])
    load1 = table.flags(lambda row: row.load1_max > 6.0)
    words = tuple(f"load1 max {row.load1_max:.2f}" for row in table)

    def flags(evidence: str) -> list[bool]:
        return window_evidence(table, RulesSpec(evidence=evidence), load1, words).flagged.tolist()

    assert flags("load1") == [True, False, False, True, False]
    assert flags("psi") == [False, True, True, True, False]  # r4 recorded none: load1 decides it
    assert flags("steal") == [False, False, True, True, False]
    assert flags("any") == [True, True, True, True, False]
    psi = window_evidence(table, RulesSpec(evidence="psi"), load1, words)
    assert list(psi.detail) == ["", "cpu pressure stall 35.0 % of the window > 20 %",
                                   "io pressure stall 21.0 % of the window > 20 %", "load1 max 9.00", ""]
    assert psi.fell_back.tolist() == [False, False, False, True, False]
    assert RulesSpec(psi_limit_pct=40.0, evidence="psi").psi_limit_pct == 40.0
    assert window_evidence(table, RulesSpec(evidence="psi", psi_limit_pct=40.0), load1, words).flagged.tolist() == \
        [False, False, False, True, False]
    [warning] = evidence_warnings(table, RulesSpec(evidence="psi"))
    assert warning.startswith('rules.evidence = "psi" but 1 of 5 run window(s) recorded no pressure-stall')
    assert warning.endswith("load evidence: r4")
    assert evidence_warnings(table, RulesSpec()) == [] and evidence_warnings(table, RulesSpec(evidence="any")) == []


def test_classic_rule_i_uses_rules_evidence_and_its_words() -> None:
    # r1's value is far from its arm (3σ by leave-one-out) and its window shows pressure but no load1
    values = [10.0, 10.01, 9.99, 10.02, 9.98, 12.0]
    table = _table([{"value": v, "load1_max": 1.0, "psi_cpu_pct": 50.0 if i == 5 else 0.5, "pair": i + 1}
                    for i, v in enumerate(values)])
    as_before = classify(table, RulesSpec(sigma_ref="leave_one_out"), {})
    assert not any(row.load_evidence or row.contaminated for row in as_before)
    with_psi = classify(table, RulesSpec(sigma_ref="leave_one_out", evidence="psi"), {})
    assert [row.load_evidence for row in with_psi] == [False] * 5 + [True]
    assert [row.contaminated for row in with_psi] == [False] * 5 + [True]
    assert with_psi.rows[5].reason.startswith("contaminated: cpu pressure stall 50.0 % of the window > 20 % and ")


def _gate_file(tmp_path: Path, **rules: Any) -> Path:
    gate = fake_gate("evidence", "Evidence", [], rules=rules)
    write_toml(tmp_path / "gate.toml", gate)
    return tmp_path / "gate.toml"


def test_config_defaults_per_policy_and_refuses_unknown_evidence(tmp_path: Path) -> None:
    assert load_gate(_gate_file(tmp_path)).rules.evidence == "load1"
    gate = fake_gate("evidence", "Evidence", [])
    del gate["gate"]["n"], gate["gate"]["order"]
    gate["gate"]["policy"] = "sequential"
    write_toml(tmp_path / "seq.toml", gate)
    assert load_gate(tmp_path / "seq.toml").rules.evidence == "psi"
    # `--policy` moves an unstated evidence kind with the policy; a stated one stays as preregistered
    assert load_gate(_gate_file(tmp_path)).with_overrides(policy="sequential").rules.evidence == "psi"
    stated = load_gate(_gate_file(tmp_path, evidence="steal")).with_overrides(policy="sequential")
    assert stated.rules.evidence == "steal"
    path = _gate_file(tmp_path, evidence="pressure")
    with pytest.raises(ConfigError) as caught:
        load_gate(path)
    assert str(caught.value) == (f"{path}: rules.evidence: must be one of load1, psi, steal, any, got 'pressure'")
    with pytest.raises(ConfigError, match=r"rules\.psi_limit_pct: must be below 100"):
        load_gate(_gate_file(tmp_path, evidence="psi", psi_limit_pct=100.0))
    # a rule set preregistered before rules.evidence existed reads as load1 and writes as before
    assert RulesSpec.from_dict({"load_stat": "max"}).evidence == "load1"
    assert "evidence" not in RulesSpec().to_dict() and "psi_limit_pct" not in RulesSpec().to_dict()
    assert RulesSpec(evidence="steal").to_dict()["steal_limit_pct"] == 10.0


def test_the_predecision_states_the_evidence_rule() -> None:
    spec = DecisionSpec(gate_id="g", title="", off_arm="off", on_arm="on", n=3, order="abab", seed=None,
                        primary="t", direction="lower", expect_diff=(), threshold=ThresholdSpec(), guards=(),
                        rules=RulesSpec(evidence="psi", psi_limit_pct=25.0))
    [line] = [line for line in stated_rules(spec) if line.startswith("Load evidence = psi")]
    assert "more than 25 % of the run window's wall time" in line and "falls back to the load1 rule" in line
    classic = stated_rules(dataclasses.replace(spec, rules=RulesSpec()))
    assert not any(line.startswith("Load evidence =") for line in classic)


HOG_LIMIT_PCT = 60.0  # the test's preregistered psi_limit_pct: above a calm window, below a hogged one (~99 %)
CALM_ENOUGH_PCT = 30.0  # a machine already stalled this much cannot show the difference: the test skips


class HogDriver(FakeDriver):
    """The fake driver's measurements, with a real CPU hog: during the `hogged` run two busy-loop processes
    per core compete with the trainer, itself busy-looping; every other run just waits RUN_S, so its window
    sees only what else the machine runs."""

    RUN_S = 0.2
    HOG_S = 0.6

    def __init__(self, hogged: str) -> None:
        super().__init__()
        self.hogged = hogged

    def run(self, request: RunRequest) -> RunOutcome:
        if request.label != self.hogged:
            time.sleep(self.RUN_S)
            return super().run(request)
        hogs = [subprocess.Popen([sys.executable, "-S", "-c", "while True: pass"])
                for _ in range(2 * (os.cpu_count() or 1))]
        try:
            deadline = time.monotonic() + self.HOG_S
            while time.monotonic() < deadline:
                pass
        finally:
            for hog in hogs:
                hog.kill()
            for hog in hogs:
                hog.wait()
        return super().run(request)


def _calm_stall_pct(seconds: float = 0.5) -> float:
    """The machine's CPU pressure stall while this process sleeps (other work on a shared machine)."""
    with WindowSampler(seconds) as sampler:
        time.sleep(seconds)
    return WindowSummary.of(sampler.samples).psi_cpu_pct or 0.0


@pytest.mark.skipif(not read_pressure(), reason="this OS has no pressure-stall information (/proc/pressure)")
def test_a_real_cpu_hog_during_one_run_is_psi_evidence_for_that_run_only(tmp_path: Path) -> None:
    calm = _calm_stall_pct()
    if calm > CALM_ENOUGH_PCT:
        pytest.skip(f"the machine is already under CPU pressure ({calm:.0f} % stall while idle)")
    gate = fake_gate("hog", "CPU hog during on-r2", [],
                     rules={"evidence": "psi", "psi_limit_pct": HOG_LIMIT_PCT, "sample_interval_s": 0.05})
    gate["guards"] = []
    write_toml(tmp_path / "gate.toml", gate)
    times = {"off": [10.0, 10.02, 9.98], "on": [9.0, 9.01, 8.99]}
    for arm in ("off", "on"):
        write_toml(tmp_path / f"{arm}.toml", {"runs": {f"{arm}-r{i + 1}": {"train_elapsed_s": t}
                                                       for i, t in enumerate(times[arm])}})
    config = load_gate(tmp_path / "gate.toml")
    result = SeriesRunner(config, config.arms["off"], config.arms["on"], driver=HogDriver("on-r2")).start()
    runs = {run.label: run for run in result.finding.runs}
    stall = {label: run.window.psi_cpu_pct for label, run in runs.items()}
    assert all(value is not None and not math.isnan(value) for value in stall.values()), stall
    assert stall["on-r2"] > HOG_LIMIT_PCT, stall
    assert {label: run.load_evidence for label, run in runs.items()} == {
        label: value > HOG_LIMIT_PCT for label, value in stall.items()}  # type: ignore[operator]
    others = {label: round(value, 1) for label, value in stall.items()  # type: ignore[arg-type]
              if label != "on-r2" and value > HOG_LIMIT_PCT}  # type: ignore[operator]
    if others:  # the hog's processes are reaped before its run returns, so this is the machine's other work
        pytest.skip(f"other work on this machine stalled the CPU during calm runs too: {others}")
    assert {label for label, run in runs.items() if run.load_evidence} == {"on-r2"}, stall
    # the hog is evidence, not contamination: on-r2's value is not deviant, so the pair stays in use
    assert runs["on-r2"].used and result.finding.verdict.decision.value == "adopted"
    assert "psi_cpu_total_us" in (result.series_dir / "on-r2" / "samples.csv").read_text().splitlines()[0]
    # the report's pressure timeline reads the run folders' samples.csv
    files = load_run_files(result.finding, None, [result.series_dir.parent.parent], tmp_path)
    assert max(y for _, y in files.traces["on-r2"].psi_cpu) > HOG_LIMIT_PCT
    image = pressure_figure(result.finding, files)
    assert image is not None and image.name == "pressure.svg"


def test_per_core_load1_is_the_sequential_rule_under_rules_evidence_load1() -> None:
    from gatekit.policies.sequential import telemetry_flags
    table = _table([{"load1_max": 2.0}, {"load1_max": 3.2}, {"load1_max": 3.0}])
    loaded, words = per_core_load1(table, RulesSpec(), cores=2)
    # by hand: 1.0, 1.6 and 1.5 per core against the limit 1.5: only the second is above it
    assert loaded.tolist() == [False, True, False]
    assert list(words) == ["", "load1 max per core 1.60 > 1.5", ""]
    assert not per_core_load1(table, RulesSpec(), cores=None)[0].any()
    window = window_evidence(table, RulesSpec(), loaded, words)
    flagged, detail = telemetry_flags(table, RulesSpec(), 2)
    assert window.flagged.tolist() == flagged.tolist()
    assert [f"flagged: {d}" if d else "" for d in window.detail] == list(detail)

"""Backends inside a gate: config, preflight, preregistration, in-window evidence, contamination, CLI.

The GPU runs replay real NVML readings recorded on an NVIDIA H200 (tests/fixtures/nvml, via
tests/nvml_replay.py) because there is no GPU here; the compute processes they report are real processes of
this machine: the fake trainer of each run, and during off-r2 a process outside the gate's process tree.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any, Iterator

import psutil
import pytest

from gatekit import rules
from gatekit.config import RulesSpec, load_gate
from gatekit.driver import ChosenBackend
from gatekit.errors import PreflightError, SeriesError
from gatekit.report.terminal import summary
from gatekit.runtable import RunTable
from gatekit.series.runner import SeriesRunner
from gatekit.storage import SeriesLayout
from gatekit.verify import analyze_series
from gatekit_drivers.backends.cuda import CudaBackend
from tests.conftest import gate_invoke
from tests.nvml_replay import ReplayNvml, descendants_of_this_process, recorded_process_memory, run_label

OFF_TIMES = {"off-r1": 10.0, "off-r2": 12.0, "off-r3": 10.02, "off-r4": 10.01}
ON_TIMES = {"on-r1": 9.0, "on-r2": 9.1, "on-r3": 8.9, "on-r4": 9.0}


# -- rule (i) with backend evidence, pure ------------------------------------------------------------

def _plain_rows(evidence: dict[str, str], **load1_max: float) -> list[dict[str, Any]]:
    """Six runs as plain rows keyed by column; `off_r2=9.0` sets off-r2's load1 max."""
    values = {"off-r1": 10.0, "off-r2": 12.0, "off-r3": 10.02, "on-r1": 9.0, "on-r2": 9.1, "on-r3": 8.9}
    rows = []
    for order, label in enumerate(["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"], 1):
        rows.append({"order": order, "arm": label[:-3], "label": label, "pair": int(label[-1]),
                     "value": values[label], "failed": False, "error": "", "samples": 5, "load1_mean": 1.0,
                     "load1_max": load1_max.get(label.replace("-", "_"), 1.0),
                     "backend_evidence": evidence.get(label, "")})
    return rows


def _table(evidence: dict[str, str]) -> RunTable:
    return rules.run_table(_plain_rows(evidence))


def test_backend_evidence_counts_as_rule_i_and_still_needs_deviation() -> None:
    spec = RulesSpec(sigma_ref="leave_one_out", load_limit=6.0)
    found = "other GPU process pid 4242 (python3) using 0.82 GiB (in 3 of 5 samples)"
    quiet = rules.classify(_table({}), spec, {})
    assert not any(row.load_evidence or row.contaminated for row in quiet)
    # the same evidence on a deviant run contaminates it; on a run within its arm it does not
    flagged = {row.label: row for row in rules.classify(_table({"off-r2": found, "on-r1": found}), spec, {})}
    assert flagged["off-r2"].load_evidence and flagged["off-r2"].contaminated
    assert flagged["on-r1"].load_evidence and not flagged["on-r1"].contaminated
    assert flagged["off-r2"].reason.startswith(f"contaminated: {found} and ")
    assert flagged["on-r2"].reason == "pair partner failed or contaminated"


def test_a_table_without_backend_evidence_classifies_as_before() -> None:
    spec = RulesSpec(sigma_ref="leave_one_out", load_limit=6.0)
    table = rules.run_table([{key: value for key, value in row.items() if key != "backend_evidence"}
                             for row in _plain_rows({}, off_r2=9.0)])
    classified = {row.label: row for row in rules.classify(table, spec, {})}
    assert classified["off-r2"].reason.startswith("contaminated: load1 max 9.00 and ")


# -- the gate file ---------------------------------------------------------------------------------

def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize("backend, message", [
    ({"name": "rocm"}, "backend.name: no backend named 'rocm' is installed (installed: cpu, cuda, metal"),
    ({"name": "cpu", "cuda": {"devise": 1}}, "backend.cuda.devise: unknown key for the cuda backend"),
    ({"name": "auto", "device": 0}, "backend.device: unknown key (backend options go in a [backend.<name>] table"),
    ({"name": 3}, "backend.name: must be a string, got 3"),
])
@pytest.mark.parametrize("command", ["check", "run"])
def test_bad_backend_config_exits_2_naming_file_and_key(gate_dir, backend: dict, message: str,
                                                        command: str) -> None:
    g = gate_dir(backend=backend)
    done = gate_invoke(command, "off", "on", cwd=g.root)
    assert done.returncode == 2
    line = _one_error_line(done.stderr)
    assert line.startswith("gate: error: ") and f"{g.gate}: {message}" in line
    assert g.order() == [] and g.series_dirs() == []


def test_named_cuda_backend_without_a_gpu_fails_preflight(gate_dir) -> None:
    if CudaBackend.detect().ok:
        pytest.skip("this machine has a GPU NVML can read")
    g = gate_dir(backend={"name": "cuda"})
    done = gate_invoke("check", "off", "on", cwd=g.root)
    assert done.returncode == 2
    assert "ok    backend: cuda (named in the gate file)" in done.stdout
    assert "FAIL  GPU 0 (NVML): not available: " in done.stdout
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 2 and "GPU 0 (NVML): not available" in _one_error_line(done.stderr)
    assert g.order() == []


def test_gate_check_names_the_backend_and_runs_its_checks(gate_dir) -> None:
    g = gate_dir(backend={"name": "cpu", "cpu": {"temperature_evidence": True}})
    done = gate_invoke("check", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok    backend: cpu (named in the gate file)" in done.stdout
    assert "ok    cpu frequency governor: " in done.stdout


def test_gate_drivers_lists_drivers_and_backends(tmp_path: Path) -> None:
    done = gate_invoke("drivers", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "# drivers (gatekit.drivers)" and "command\tgatekit_drivers.command:CommandDriver" in lines
    backends = lines[lines.index("# backends (gatekit.backends)") + 1:]
    by_name = {line.split("\t")[0]: line.split("\t") for line in backends}
    assert by_name["cpu"][1] == "gatekit_drivers.backends.cpu:CpuBackend" and by_name["cpu"][2].startswith("available: ")
    assert by_name["cuda"][1] == "gatekit_drivers.backends.cuda:CudaBackend"
    assert by_name["metal"][1] == "gatekit_drivers.backends.metal:MetalBackend"
    if sys.platform != "darwin":
        assert by_name["metal"][2] == f"not available: not macOS ({sys.platform})"


# -- a whole gate with the cuda backend ------------------------------------------------------------

@pytest.fixture
def foreign_pid() -> Iterator[int]:
    """A real process outside the gate's process tree (its starter exits, so it is re-parented away)."""
    helper = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
         "'import time; time.sleep(120)'], start_new_session=True, stdin=subprocess.DEVNULL, "
         "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)"],
        capture_output=True, text=True, check=True)
    pid = int(helper.stdout)
    yield pid
    psutil.Process(pid).kill()


class GpuScript:
    """Compute processes on the replayed GPU: each run's trainer (a descendant of this gate process), and
    `foreign_pid` while the run `foreign_during` is in flight."""

    def __init__(self, foreign_pid: int, foreign_during: str) -> None:
        self.foreign_pid, self.foreign_during = foreign_pid, foreign_during
        self.memory = recorded_process_memory()

    def __call__(self) -> list[dict[str, Any]]:
        trainers = descendants_of_this_process()
        processes = [{"pid": p.pid, "used_gpu_memory": self.memory} for p in trainers]
        if any(run_label(p) == self.foreign_during for p in trainers):
            processes.append({"pid": self.foreign_pid, "used_gpu_memory": self.memory})
        return processes


def _replayed_cuda(processes: Any) -> ChosenBackend:
    backend = CudaBackend(reader=ReplayNvml("h200_busy.json", processes=processes))
    return ChosenBackend(backend=backend, requested="cuda", detail="replaying an H200 recording")


def test_another_gpu_process_in_a_window_is_load_evidence_and_a_deviant_run_is_retried(
        gate_dir, foreign_pid: int) -> None:
    # leave-one-out σ so rule (ii) can fire at n=3; off-r2 is slow AND shares the GPU → contaminated.
    # The load stays calm (limit 1000): the evidence comes from the backend alone.
    g = gate_dir(off={"elapsed": OFF_TIMES, "sleep_s": 0.3}, on={"elapsed": ON_TIMES, "sleep_s": 0.3},
                 rules={"sigma_ref": "leave_one_out"}, backend={"name": "cuda"})
    config = load_gate(g.gate)
    runner = SeriesRunner(config, config.arms["off"], config.arms["on"],
                          backend=_replayed_cuda(GpuScript(foreign_pid, "off-r2")))
    result = runner.start()
    assert g.order() == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3", "off-r4", "on-r4"]
    runs = {r["label"]: r for r in result.finding.to_dict()["runs"]}
    off_r2 = runs["off-r2"]
    assert off_r2["load_evidence"] and off_r2["contaminated"] and not off_r2["used"]
    name = psutil.Process(foreign_pid).name()
    (evidence,) = off_r2["window"]["evidence"]
    assert evidence.startswith(f"other GPU process pid {foreign_pid} ({name}) using 0.82 GiB (in ")
    assert off_r2["reason"].startswith(f"contaminated: other GPU process pid {foreign_pid}")
    assert off_r2["window"]["load1_max"] < 1000  # not the load
    # the trainer itself is on the GPU in every window and is never "other"
    for label, run in runs.items():
        if label != "off-r2":
            assert "evidence" not in run["window"] and not run["load_evidence"], label
        assert run["window"]["telemetry"]["gpu_util_mean"] == 100.0
        assert run["window"]["telemetry"]["sm_clock_min_mhz"] == 1980.0
    assert off_r2["window"]["telemetry"]["other_gpu_processes"] == 1
    assert not runs["on-r2"]["used"] and runs["off-r4"]["used"] and runs["off-r4"]["retry_of"] == 2
    assert result.finding.decision == "adopted"
    # samples.csv holds the GPU telemetry; the trainer counts as the gate's own process
    with (result.series_dir / "off-r2" / "samples.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert {"gpu_util_pct", "gpu_sm_clock_mhz", "gpu_temperature_c", "gpu_power_w", "gpu_throttle",
            "gpu_own_processes", "gpu_other_processes"} <= set(rows[0])
    assert any(row["gpu_other_processes"].startswith(f"pid {foreign_pid} ") for row in rows)
    assert any(row["gpu_own_processes"] == "1" for row in rows)
    # provenance and preregistration
    backend = result.finding.to_dict()["provenance"]["backend"]
    assert backend["name"] == "cuda" and backend["gpu"] == "NVIDIA H200" and backend["driver_version"] == "580.159.04"
    assert backend["cuda_driver_version"] == "13.0"
    predecision = tomllib.loads((result.series_dir / "predecision.toml").read_text())
    assert predecision["backend"]["name"] == "cuda" and predecision["backend"]["requested"] == "cuda"
    assert any("ancestors do not include the gate process" in line for line in predecision["stated_rules"])
    sections = result.finding.to_dict()["sections"]
    heading = next(i for i, sec in enumerate(sections) if sec.get("text") == "Backend evidence (rule i)")
    assert sections[heading + 1]["items"] == [f"off-r2: {evidence}"]
    assert f"evidence off-r2: {evidence}" in summary(result.finding).splitlines()
    # the journal alone reproduces the finding
    assert analyze_series(result.series_dir).to_dict() == result.finding.to_dict()


def test_gpu_process_in_a_window_without_deviation_is_no_retry(gate_dir, foreign_pid: int) -> None:
    times = {"off-r1": 10.0, "off-r2": 10.1, "off-r3": 9.9}  # leave-one-out z ≤ 2.12 for every run
    g = gate_dir(off={"elapsed": times, "sleep_s": 0.3}, on={"elapsed": ON_TIMES},
                 rules={"sigma_ref": "leave_one_out"})
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arms["off"], config.arms["on"],
                          backend=_replayed_cuda(GpuScript(foreign_pid, "off-r2"))).start()
    assert len(g.order()) == 6
    runs = {r["label"]: r for r in result.finding.to_dict()["runs"]}
    assert runs["off-r2"]["load_evidence"] and not runs["off-r2"]["contaminated"] and runs["off-r2"]["used"]
    assert runs["off-r2"]["z"] < 3 and runs["off-r2"]["window"]["evidence"]
    assert result.finding.decision == "adopted"


class TenantScript(GpuScript):
    """A co-tenant holding 0.76 GiB on the replayed GPU through the whole series (issue 30, item 10), whose
    kernels run only while `foreign_during` is in flight: its per-process activity says so."""

    def __call__(self) -> list[dict[str, Any]]:
        trainers = descendants_of_this_process()
        return [*({"pid": p.pid, "used_gpu_memory": self.memory} for p in trainers),
                {"pid": self.foreign_pid, "used_gpu_memory": int(0.76 * 2**30)}]

    def activity(self) -> list[dict[str, Any]]:
        trainers = descendants_of_this_process()
        busy = any(run_label(p) == self.foreign_during for p in trainers)
        return [*({"pid": p.pid, "time_stamp_us": 1, "sm_util": 97, "mem_util": 30} for p in trainers),
                {"pid": self.foreign_pid, "time_stamp_us": 1, "sm_util": 60 if busy else 0, "mem_util": 0}]


def test_a_co_tenant_flags_only_the_run_it_computed_in(gate_dir, foreign_pid: int) -> None:
    g = gate_dir(off={"elapsed": OFF_TIMES, "sleep_s": 0.3}, on={"elapsed": ON_TIMES, "sleep_s": 0.3},
                 rules={"sigma_ref": "leave_one_out"}, backend={"name": "cuda"})
    config = load_gate(g.gate)
    tenant = TenantScript(foreign_pid, "off-r2")
    backend = CudaBackend(reader=ReplayNvml("h200_busy.json", processes=tenant, utilization=tenant.activity))
    result = SeriesRunner(config, config.arms["off"], config.arms["on"],
                          backend=ChosenBackend(backend=backend, requested="cuda", detail="replayed")).start()
    runs = {r["label"]: r for r in result.finding.to_dict()["runs"]}
    flagged = [label for label, run in runs.items() if run["load_evidence"]]
    assert flagged == ["off-r2"]  # the tenant held its memory in every window, and computed in this one
    (evidence,) = runs["off-r2"]["window"]["evidence"]
    assert evidence.startswith(f"other GPU process pid {foreign_pid} ") and "sm 60 % mem 0 % computed on the GPU" in evidence
    assert all(run["window"]["telemetry"]["other_gpu_processes"] == 1 for run in runs.values())  # still recorded
    assert result.finding.decision == "adopted"


def test_preflight_refuses_a_series_while_another_process_uses_the_gpu(gate_dir, foreign_pid: int) -> None:
    g = gate_dir()
    config = load_gate(g.gate)
    memory = recorded_process_memory()
    backend = _replayed_cuda(lambda: [{"pid": foreign_pid, "used_gpu_memory": memory}])
    with pytest.raises(PreflightError, match=f"no other process on GPU 0: 1 compute process\\(es\\) already use "
                                             f"it: pid {foreign_pid} "):
        SeriesRunner(config, config.arms["off"], config.arms["on"], backend=backend).start()
    assert g.order() == [] and g.series_dirs() == []


def test_resume_refuses_another_backend_than_registered(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": OFF_TIMES}, on={"elapsed": ON_TIMES})
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arms["off"], config.arms["on"], backend=_replayed_cuda(list)).start()
    SeriesLayout(result.series_dir).done.unlink()  # as if cut off before it finished
    cpu = SeriesRunner(config, config.arms["off"], config.arms["on"])  # this machine's own choice
    if cpu.backend.name == "cuda":
        pytest.skip("this machine itself auto-detects cuda")
    with pytest.raises(SeriesError, match="was registered with the cuda backend, but this machine gives"):
        cpu.resume(result.series_dir)


def test_cli_gate_run_records_the_auto_backend(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": {"off-r1": 10.0, "off-r2": 10.1}}, on={"elapsed": {"on-r1": 9.0, "on-r2": 9.1}})
    done = gate_invoke("run", "off", "on", "--n", "2", cwd=g.root)
    assert done.returncode == 0, done.stderr
    finding = g.finding()
    expected = SeriesRunner(load_gate(g.gate), *load_gate(g.gate).arms.values()).backend.name
    assert finding["provenance"]["backend"]["name"] == expected
    predecision = tomllib.loads((g.series_dirs()[0] / "predecision.toml").read_text())
    assert predecision["backend"]["requested"] == "auto" and predecision["backend"]["name"] == expected


def test_gate_check_takes_the_policy_and_load_limit_gate_run_would(gate_dir) -> None:
    """gate check checks what gate run would run: --policy and --load-limit are the same overrides, validated
    the same way (a bad one is exit 2 naming the option). Evidence load1, so the machine's own CPU pressure
    cannot decide the outcome."""
    g = gate_dir(rules={"evidence": "load1"})
    done = gate_invoke("check", "off", "on", "--policy", "sequential", "--load-limit", "1000", cwd=g.root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok    load calm: " in done.stdout and "rules.load_limit 1000" in done.stdout
    done = gate_invoke("check", "off", "on", "--load-limit", "-1", cwd=g.root)
    assert done.returncode == 2 and "--load-limit: must be a positive number, got -1.0" in done.stderr

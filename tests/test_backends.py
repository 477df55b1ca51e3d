"""The backend plugins: cpu for real, cuda from recorded real NVML output, metal from recorded real macOS output.

cuda: there is no GPU here. Its telemetry comes from recordings made on an NVIDIA H200 with record_nvml.py
(tests/fixtures/nvml), replayed by tests/nvml_replay.py; the compute-process lists are replaced by pids of
real processes of this machine. metal: there is no Mac here. Its commands' outputs come from real Macs,
quoted from public pages listed in tests/fixtures/metal/SOURCES.md, fed through the injectable runner.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

import psutil
import pytest

from gatekit.distribution import install_hint
from gatekit.driver import (AUTO_ORDER, Backend, installed_backends, load_backend, make_backend)
from gatekit.errors import ConfigError
from gatekit.records import LoadSample, RunOutcome, RunRecord, WindowSummary
from gatekit.sampler import WindowSampler, samples_csv
from gatekit_drivers.backends.cpu import CpuBackend, cpu_model
from gatekit_drivers.backends.cuda import CudaBackend, active_processes, cuda_version, reason_names, telemetry
from gatekit_drivers.backends.metal import (NOT_SEEN, PMSET_BATT, PMSET_THERM, POWERMETRICS_GPU, SYSCTL_CHIP,
                                            CommandOutput, MetalBackend, parse_pmset_batt, parse_pmset_therm,
                                            parse_powermetrics_gpu)
from tests.nvml_replay import ReplayNvml, recorded_process_memory

METAL = Path(__file__).parent / "fixtures" / "metal"


def A_USER() -> int:  # noqa: N802  (gate run by a user, not root: powermetrics refuses it, so no GPU columns)
    return 501
SOURCE = Path("gate.toml")


# -- registry ----------------------------------------------------------------------------------------

def test_builtin_backends_register_through_entry_points() -> None:
    installed = installed_backends()
    assert installed["cpu"] == "gatekit_drivers.backends.cpu:CpuBackend"
    assert installed["cuda"] == "gatekit_drivers.backends.cuda:CudaBackend"
    assert installed["metal"] == "gatekit_drivers.backends.metal:MetalBackend"
    for name in ("cpu", "cuda", "metal"):
        cls = load_backend(name, source=SOURCE)
        assert cls.name == name
        assert isinstance(cls.from_options({}, source=SOURCE), Backend)


def test_unknown_backend_lists_the_installed_ones() -> None:
    with pytest.raises(ConfigError, match=r"gate.toml: backend.name: no backend named 'rocm' is installed "
                                          r"\(installed: cpu, cuda, metal"):
        make_backend("rocm", {}, source=SOURCE)


def test_auto_picks_the_first_backend_that_detects_its_machine() -> None:
    expected = next(name for name in AUTO_ORDER if load_backend(name, source=SOURCE).detect().ok)
    chosen = make_backend("auto", {}, source=SOURCE)
    assert chosen.name == expected and chosen.requested == "auto"
    assert chosen.detail.startswith("auto-detected: ")
    named = make_backend("cpu", {"cpu": {"temperature_evidence": False}}, source=SOURCE)
    assert named.name == "cpu" and named.backend.temperature_evidence is False  # type: ignore[attr-defined]


@pytest.mark.parametrize("options, message", [
    ({"cuda": {"devise": 1}}, "backend.cuda.devise: unknown key for the cuda backend (known: device, "
                              "throttle_evidence)"),
    ({"cuda": {"device": True}}, "backend.cuda.device: must be an integer, got True"),
    ({"cuda": {"device": -1}}, "backend.cuda.device: must be a GPU index (0 or more), got -1"),
    ({"metal": {"require_ac": "yes"}}, "backend.metal.require_ac: must be true or false, got 'yes'"),
    ({"cpu": {"sensors": []}}, "backend.cpu.sensors: unknown key for the cpu backend"),
    ({"cdua": {}}, "backend.cdua: no backend named 'cdua' is installed"),
])
def test_plugin_options_are_validated_by_the_plugin(options: dict, message: str) -> None:
    # every [backend.<name>] table is checked, also those of backends `auto` does not pick
    with pytest.raises(ConfigError) as caught:
        make_backend("auto", options, source=SOURCE)
    assert f"gate.toml: {message}" in str(caught.value)


# -- cpu, for real ----------------------------------------------------------------------------------

def test_cpu_backend_reads_this_machine() -> None:
    backend = CpuBackend()
    sample = backend.sample()
    assert set(sample) == {"cpu_freq_mhz", "cpu_core_pct_max", "cpu_temp_c", "cpu_temp_high"}
    freq = psutil.cpu_freq()
    if freq is not None and freq.current:
        assert sample["cpu_freq_mhz"] == pytest.approx(freq.current, rel=0.5)
    else:
        assert sample["cpu_freq_mhz"] is None
    assert isinstance(sample["cpu_core_pct_max"], float) and 0.0 <= sample["cpu_core_pct_max"] <= 100.0
    provenance = backend.provenance()
    assert provenance["cpu_logical"] == psutil.cpu_count() and provenance["cpu_model"] == cpu_model()
    if Path("/proc/cpuinfo").exists():
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        assert provenance["cpu_model"] == names[0]
    (governor,) = backend.preflight()
    assert governor.ok and governor.name == "cpu frequency governor"
    readable = list(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"))
    if readable:
        assert readable[0].read_text().strip() in governor.detail
    else:
        assert "not readable" in governor.detail


def test_cpu_window_summary_and_temperature_evidence() -> None:
    backend = CpuBackend()
    real = [backend.sample() for _ in range(3)]
    summary = backend.summarize(real)
    freqs = [s["cpu_freq_mhz"] for s in real if s["cpu_freq_mhz"] is not None]
    assert summary["cpu_freq_min_mhz"] == (min(freqs) if freqs else None)
    assert bool(backend.window_evidence(real)) == any(s["cpu_temp_high"] for s in real)
    hot = [*real, {**real[0], "cpu_temp_high": "k10temp Tctl 96 °C ≥ high 95 °C"}]
    assert backend.window_evidence(hot) == [
        "CPU temperature at its high mark in 1 of 4 samples (k10temp Tctl 96 °C ≥ high 95 °C)"]
    assert CpuBackend(temperature_evidence=False).window_evidence(hot) == []


# -- cuda, from recorded real NVML output ------------------------------------------------------------

@pytest.fixture
def foreign_pid() -> Iterator[int]:
    """A real process outside the gate's process tree: started by a helper that exits at once, so it is
    re-parented away from this (gate) process."""
    helper = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
         "'import time; time.sleep(120)'], start_new_session=True, stdin=subprocess.DEVNULL, "
         "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid)"],
        capture_output=True, text=True, check=True)
    pid = int(helper.stdout)
    assert os.getpid() not in {p.pid for p in psutil.Process(pid).parents()}
    yield pid
    psutil.Process(pid).kill()


@pytest.fixture
def own_child() -> Iterator[subprocess.Popen[bytes]]:
    """A real child of this process, standing in for the trainer."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield child
    child.kill()
    child.wait()


def _missing_pid() -> int:
    limit = int(Path("/proc/sys/kernel/pid_max").read_text()) if Path("/proc/sys/kernel/pid_max").exists() else 99999
    return limit + 1  # no process can have it


def test_cuda_provenance_and_preflight_from_the_h200_recording() -> None:
    backend = CudaBackend(reader=ReplayNvml("h200_idle.json"))
    provenance = backend.provenance()
    assert provenance["gpu"] == "NVIDIA H200" and provenance["driver_version"] == "580.159.04"
    assert provenance["cuda_driver_version"] == "13.0" and provenance["nvml_version"] == "13.580.159.04"
    assert provenance["memory_total_gib"] == pytest.approx(150754820096 / 2**30, abs=0.01)
    assert provenance["power_limit_w"] == 700.0 and provenance["max_sm_clock_mhz"] == 1980.0
    gpu, free = backend.preflight()
    assert gpu.ok and gpu.detail == "NVIDIA H200, driver 580.159.04, CUDA 13.0"
    assert free.ok and free.detail == "no compute process on it"
    assert cuda_version(12080) == "12.8"


def test_cuda_preflight_refuses_while_another_process_uses_the_gpu(foreign_pid: int) -> None:
    memory = recorded_process_memory()
    reader = ReplayNvml("h200_busy.json", processes=lambda: [{"pid": foreign_pid, "used_gpu_memory": memory}])
    _, free = CudaBackend(reader=reader).preflight()
    assert not free.ok
    assert f"pid {foreign_pid} (python" in free.detail and "using 0.82 GiB" in free.detail
    assert "wait for them or stop them" in free.detail


TENANT_MEMORY = int(0.76 * 2**30)  # what the idle tenant on a lent H200 held (issue 30, item 10)


def _tenant_window(foreign_pid: int, own_pid: int, busy: bool) -> tuple[CudaBackend, list[dict[str, Any]]]:
    """The recorded busy H200 window with a co-tenant holding 0.76 GiB beside the trainer; the tenant's kernels
    run in every sample when `busy` (the trainer's always do), never when idle."""
    def activity() -> list[dict[str, Any]]:
        trainer = {"pid": own_pid, "time_stamp_us": 1, "sm_util": 97, "mem_util": 31}
        tenant = {"pid": foreign_pid, "time_stamp_us": 2, "sm_util": 45 if busy else 0, "mem_util": 12 if busy else 0}
        return [trainer, tenant]

    processes = [{"pid": own_pid, "used_gpu_memory": recorded_process_memory()},
                 {"pid": foreign_pid, "used_gpu_memory": TENANT_MEMORY}]
    reader = ReplayNvml("h200_busy.json", processes=lambda: processes, utilization=activity)
    backend = CudaBackend(reader=reader)
    return backend, [backend.sample() for _ in reader.recorded]


def test_an_idle_co_tenant_holding_memory_is_no_evidence(own_child: subprocess.Popen[bytes],
                                                         foreign_pid: int) -> None:
    backend, samples = _tenant_window(foreign_pid, own_child.pid, busy=False)
    name = psutil.Process(foreign_pid).name()
    assert samples[0]["gpu_other_processes"] == f"pid {foreign_pid} ({name}) using 0.76 GiB"
    assert samples[0]["gpu_other_active"] == ""  # read, and nobody else computed
    assert backend.window_evidence(samples) == []
    _, free = backend.preflight()
    assert free.ok and free.detail == f"1 other process(es) hold memory on it, idle: pid {foreign_pid} ({name}) using 0.76 GiB"


def test_a_busy_co_tenant_is_evidence(own_child: subprocess.Popen[bytes], foreign_pid: int) -> None:
    backend, samples = _tenant_window(foreign_pid, own_child.pid, busy=True)
    name = psutil.Process(foreign_pid).name()
    assert samples[0]["gpu_other_active"] == f"pid {foreign_pid} ({name}) sm 45 % mem 12 %"  # the trainer is own
    assert backend.window_evidence(samples) == [
        f"other GPU process pid {foreign_pid} ({name}) sm 45 % mem 12 % computed on the GPU (in 6 of 6 samples)"]
    _, free = backend.preflight()
    assert not free.ok and free.detail.startswith(f"1 other process(es) compute on it: pid {foreign_pid} ")


def test_a_tenant_busy_in_some_samples_is_evidence_for_those(own_child: subprocess.Popen[bytes],
                                                              foreign_pid: int) -> None:
    _, busy = _tenant_window(foreign_pid, own_child.pid, busy=True)
    backend, idle = _tenant_window(foreign_pid, own_child.pid, busy=False)
    window = idle[:4] + busy[4:]
    (line,) = backend.window_evidence(window)
    assert line.endswith("computed on the GPU (in 2 of 6 samples)")


@pytest.mark.parametrize("tenant", ["idle", "busy"])
def test_the_recorded_h200_co_tenants_are_told_apart_by_what_they_computed(tenant: str, foreign_pid: int) -> None:
    """Real per-process utilisation of an H200 with a co-tenant holding 0.76 GiB (tests/fixtures/nvml): the idle
    one read sm 1 % once, after its allocation, and is no evidence; the busy one (96-98 %) flags the window and
    fails the preflight. The recorded tenant's pid is replaced by a real process outside the gate's tree."""
    recorded_pid = 2637 if tenant == "idle" else 2767
    reader = ReplayNvml(f"h200_tenant_{tenant}.json", pids={recorded_pid: foreign_pid})
    backend = CudaBackend(reader=reader)
    name = psutil.Process(foreign_pid).name()
    _, free = backend.preflight()  # the first sample: sm 1 % (idle) or 4 % (busy, before its matmuls began)
    assert free.ok and free.detail.startswith(f"1 other process(es) hold memory on it, idle: pid {foreign_pid} ({name})")
    samples = [backend.sample() for _ in range(len(reader.recorded) - 1)]
    evidence = backend.window_evidence(samples)
    if tenant == "idle":
        assert evidence == []
    else:
        (line,) = evidence
        assert line.startswith(f"other GPU process pid {foreign_pid} ({name}) sm 98 % ") and "computed on the GPU" in line
        reader.reads = len(reader.recorded) // 2  # a preflight while its matmuls run
        _, busy = backend.preflight()
        assert not busy.ok and busy.detail.startswith(f"1 other process(es) compute on it: pid {foreign_pid} ")


def test_where_nvml_cannot_say_who_computed_holding_memory_still_counts(own_child: subprocess.Popen[bytes],
                                                                        foreign_pid: int) -> None:
    backend, samples = _tenant_window(foreign_pid, own_child.pid, busy=False)
    blind = [{**s, "gpu_other_active": None} for s in samples]  # e.g. {"nvml_error": "Not Supported"}
    name = psutil.Process(foreign_pid).name()
    assert backend.window_evidence(blind) == [
        f"other GPU process pid {foreign_pid} ({name}) using 0.76 GiB (in 6 of 6 samples)"]
    assert active_processes({"nvml_error": "Not Supported"}, os.getpid()) is None


def test_cuda_telemetry_replays_the_recorded_values(own_child: subprocess.Popen[bytes], foreign_pid: int) -> None:
    memory = recorded_process_memory()
    missing = _missing_pid()
    processes = [{"pid": own_child.pid, "used_gpu_memory": memory},
                 {"pid": foreign_pid, "used_gpu_memory": memory},
                 {"pid": missing, "used_gpu_memory": None}]
    reader = ReplayNvml("h200_busy.json", processes=lambda: processes)
    backend = CudaBackend(reader=reader)
    samples = [backend.sample() for _ in reader.recorded]
    first = samples[0]
    assert first["gpu_util_pct"] == 100.0 and first["gpu_sm_clock_mhz"] == 1980.0
    assert first["gpu_temperature_c"] == 51.0 and first["gpu_power_w"] == pytest.approx(292.772)
    assert first["gpu_mem_used_mib"] == pytest.approx(1532887040 / 2**20, abs=0.1)
    assert first["gpu_clock_event_reasons"] == 0 and first["gpu_throttle"] == ""
    assert first["gpu_own_processes"] == 1  # the child is the trainer's stand-in: not "other"
    foreign_name = psutil.Process(foreign_pid).name()
    assert first["gpu_other_processes"] == (f"pid {foreign_pid} ({foreign_name}) using 0.82 GiB; "
                                            f"pid {missing} (not visible here) using memory n/a")
    summary = backend.summarize(samples)
    assert summary == {"gpu_util_mean": 100.0, "gpu_mem_used_max_mib": first["gpu_mem_used_mib"],
                       "sm_clock_min_mhz": 1980.0, "temperature_max_c": 56.0, "power_max_w": 675.013,
                       "throttled": False, "clock_event_reasons": "", "other_gpu_processes": 2,
                       # the clock state: no sample read gpu_idle, so all six count (equal weights: no t_s)
                       "active_samples": 6, "gpu_idle_frac": 0.0, "sm_clock_mean_mhz": 1980.0,
                       "mem_clock_mean_mhz": None,  # this recording predates the memory clock reading
                       "power_mean_w": round(sum(s["power_mw"] for s in reader.recorded) / 6 / 1000, 2),
                       "sm_clock_below_ref_frac": 0.0, "sm_clock_locked_mhz": None}
    evidence = backend.window_evidence(samples)
    assert evidence[0] == f"other GPU process pid {foreign_pid} ({foreign_name}) using 0.82 GiB (in 6 of 6 samples)"
    assert evidence[1] == f"other GPU process pid {missing} (not visible here) using memory n/a (in 6 of 6 samples)"
    assert len(evidence) == 2


def test_cuda_idle_recording_is_no_evidence() -> None:
    reader = ReplayNvml("h200_idle.json")
    backend = CudaBackend(reader=reader)
    samples = [backend.sample() for _ in reader.recorded]
    assert [s["gpu_throttle"] for s in samples] == ["gpu_idle"] * 3  # recorded reason 0x1
    assert backend.window_evidence(samples) == []
    assert backend.summarize(samples)["throttled"] is False
    assert backend.summarize(samples)["sm_clock_min_mhz"] == 345.0


def test_cuda_hardware_slowdown_is_evidence_unless_switched_off() -> None:
    # No recording of a throttled H200 exists: these are the recorded busy readings with the clock-event
    # reason set to hw_thermal_slowdown | sw_power_cap (0x40 | 0x4, nvml.h); everything else as recorded.
    reader = ReplayNvml("h200_busy.json", processes=list)
    readings = [{**reader.sample(), "throttle_reasons": 0x44 if k in (2, 3) else 0x4} for k in range(6)]
    samples = [telemetry(r, os.getpid()) for r in readings]
    assert samples[2]["gpu_throttle"] == "sw_power_cap+hw_thermal_slowdown"
    assert CudaBackend(reader=reader).window_evidence(samples) == [
        "GPU 0 clocks slowed by hw_thermal_slowdown (in 2 of 6 samples)"]
    assert CudaBackend(reader=reader, throttle_evidence=False).window_evidence(samples) == []
    assert CudaBackend(reader=reader).summarize(samples)["throttled"] is True
    assert reason_names(0x1 | 0x200) == ["gpu_idle", "0x200"]  # a reason newer than this table stays visible


def test_nvml_errors_in_a_recording_become_empty_cells() -> None:
    # record_nvml.py writes {"nvml_error": "..."} for a reading NVML refuses (e.g. power on some boards)
    reading = {**ReplayNvml("h200_idle.json").sample(), "power_mw": {"nvml_error": "Not Supported"},
               "compute_processes": {"nvml_error": "Not Supported"}}
    row = telemetry(reading, os.getpid())
    assert row["gpu_power_w"] is None and row["gpu_other_processes"] == "" and row["gpu_util_pct"] == 0.0


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is not None, reason="nvidia-ml-py is installed here")
def test_cuda_without_nvidia_ml_py_says_so_cleanly() -> None:
    found = CudaBackend.detect()
    assert not found.ok and found.detail == f"not available: nvidia-ml-py not installed ({install_hint('cuda')})"
    (check,) = CudaBackend().preflight()  # the live reader
    assert not check.ok and "nvidia-ml-py not installed" in check.detail


def test_core_and_the_cuda_plugin_never_import_pynvml_eagerly(tmp_path: Path) -> None:
    # a pynvml that refuses to be imported: importing gatekit and the cuda plugin must not touch it
    (tmp_path / "pynvml.py").write_text("raise SystemExit('pynvml was imported')\n")
    code = ("import gatekit.cli, gatekit.series.runner, gatekit.sampler, gatekit.preflight\n"
            "import gatekit_drivers.backends.cuda as cuda\n"
            "from pathlib import Path\n"
            "backend = cuda.CudaBackend.from_options({'device': 0}, source=Path('g.toml'))\n"
            "print('clean', backend.name)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0 and done.stdout.strip() == "clean cuda", done.stderr
    done = subprocess.run([sys.executable, "-c", "import gatekit_drivers.backends.cuda as c; print(c.CudaBackend.detect())"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert "pynvml was imported" in done.stderr  # detect() is where it is imported, lazily


# -- metal, from recorded real macOS output ----------------------------------------------------------

def _fixture(name: str) -> str:
    return (METAL / name).read_text()


def test_pmset_batt_recordings() -> None:
    charging = parse_pmset_batt(_fixture("pmset_batt_ac_charging.txt"))
    assert (charging.source, charging.on_ac, charging.battery_pct, charging.battery_state) == (
        "AC Power", True, 91, "charging")
    attached = parse_pmset_batt(_fixture("pmset_batt_ac_not_charging.txt"))
    assert (attached.on_ac, attached.battery_pct, attached.battery_state) == (True, 88, "AC attached")
    battery = parse_pmset_batt(_fixture("pmset_batt_on_battery.txt"))
    assert (battery.source, battery.on_ac, battery.battery_pct, battery.battery_state) == (
        "Battery Power", False, 95, "discharging")
    desktop = parse_pmset_batt(_fixture("pmset_batt_desktop.txt"))
    assert (desktop.on_ac, desktop.battery_pct) == (True, None)
    assert parse_pmset_batt("").on_ac is None


def test_pmset_therm_recordings() -> None:
    nominal = parse_pmset_therm(_fixture("pmset_therm_m1_pro_nominal.txt"))
    assert nominal.state == "nominal"
    assert (nominal.thermal_warning_level, nominal.performance_warning_level, nominal.cpu_speed_limit_pct) == (
        0, 0, None)
    throttled = parse_pmset_therm(_fixture("pmset_therm_intel_throttled.txt"))
    assert throttled.state == "throttled" and throttled.detail == "CPU_Speed_Limit 35 %"
    assert (throttled.cpu_speed_limit_pct, throttled.cpu_scheduler_limit_pct) == (35, 100)
    # pmset prints the limits block with tabs; the recording shows spaces: both read the same
    tabbed = _fixture("pmset_therm_intel_throttled.txt").replace("    CPU", "\tCPU").replace("     =", " \t=")
    assert parse_pmset_therm(tabbed) == throttled
    assert parse_pmset_therm("").state == "unknown"


def _recorded(name: str) -> str:
    """A powermetrics recording without its `# recorded elsewhere` header (powermetrics prints no `#` lines)."""
    return "".join(line for line in _fixture(name).splitlines(keepends=True) if not line.startswith("# "))


def test_powermetrics_gpu_recordings() -> None:
    m2 = parse_powermetrics_gpu(_recorded("powermetrics_gpu_m2_air.txt"))
    assert (m2.active_mhz, m2.active_pct, m2.idle_pct, m2.power_mw, m2.problems) == (444.0, 7.08, 92.92, 4.0, ())
    pro = parse_powermetrics_gpu(_recorded("powermetrics_gpu_mac14_10.txt"))
    assert (pro.active_mhz, pro.active_pct, pro.idle_pct, pro.power_mw) == (444.0, 0.97, 99.03, 4.0)
    intel = parse_powermetrics_gpu(_recorded("powermetrics_gpu_intel_macbookpro16_2.txt"))
    # an Intel Mac's GPU 0: the average active frequency in MHz, "GPU Busy" and the C-state (idle) residency
    assert (intel.active_mhz, intel.active_pct, intel.idle_pct, intel.power_mw) == (500.0, 0.72, 99.28, None)
    assert all(r.active_pct + r.idle_pct == pytest.approx(100.0) for r in (m2, pro, intel))
    assert not parse_powermetrics_gpu("").recorded and not parse_powermetrics_gpu("powermetrics: must be invoked as the superuser\n").recorded


def test_powermetrics_values_outside_their_bounds_are_left_out_and_named() -> None:
    text = _recorded("powermetrics_gpu_m2_air.txt")
    edited = text.replace("GPU HW active frequency: 444 MHz", "GPU HW active frequency: 44400 MHz").replace(
        "GPU idle residency:  92.92%", "GPU idle residency:  192.92%")  # edited for the case, from the M2 recording
    gpu = parse_powermetrics_gpu(edited)
    assert (gpu.active_mhz, gpu.idle_pct, gpu.active_pct) == (None, None, 7.08)
    assert [p.split(" ", 1)[0] for p in gpu.problems] == ["active_mhz", "idle_pct"]
    # two samples (-n 2): the last one is read; the summary block's GPU Power before the GPU section is not
    two = f"*** Sampled system activity (a) ***\n{text.replace('444 MHz', '612 MHz')}\n*** Sampled system activity (b) ***\n" \
          f"CPU Power: 85 mW\nGPU Power: 999 mW\n\n{text}"
    assert (parse_powermetrics_gpu(two).active_mhz, parse_powermetrics_gpu(two).power_mw) == (444.0, 4.0)


def test_metal_reads_the_gpu_only_as_root_and_says_what_it_cannot_see() -> None:
    recordings = {POWERMETRICS_GPU: _recorded("powermetrics_gpu_m2_air.txt")}

    def run(argv: Sequence[str]) -> CommandOutput:
        found = RecordedMac("pmset_batt_ac_charging.txt", "pmset_therm_m1_pro_nominal.txt")(argv)
        return CommandOutput(0, recordings[tuple(argv)]) if tuple(argv) in recordings else found

    root = MetalBackend(run=run, euid=lambda: 0)
    row = root.sample()
    assert (row["mac_gpu_active_mhz"], row["mac_gpu_active_pct"], row["mac_gpu_power_mw"]) == (444.0, 7.08, 4.0)
    summary = root.summarize([row, {**row, "mac_gpu_active_mhz": 612.0}])
    assert (summary["gpu_active_mhz_mean"], summary["gpu_active_mhz_min"], summary["gpu_power_mean_mw"]) == (528.0, 444.0, 4.0)
    assert root.provenance()["gpu_telemetry"].startswith("powermetrics")
    user = MetalBackend(run=run, euid=lambda: 501)
    assert "mac_gpu_active_mhz" not in user.sample() and "gpu_active_mhz_mean" not in user.summarize([row])
    seen = user.provenance()
    assert seen["gpu_telemetry"].startswith("not recorded: powermetrics answers root only (gate runs as uid 501)")
    assert seen["not_seen"] == list(NOT_SEEN) and "the GPU's temperature" in user.evidence_rules()[-1]
    off = MetalBackend(gpu_power=False, run=run, euid=lambda: 0)
    assert "mac_gpu_active_mhz" not in off.sample() and "gpu_power = false" in off.provenance()["gpu_telemetry"]
    failed = MetalBackend(run=lambda argv: CommandOutput(1, "", "powermetrics: must be invoked as the superuser")
                          if tuple(argv) == POWERMETRICS_GPU else run(argv), euid=lambda: 0)
    assert failed.sample()["mac_gpu_active_mhz"] is None  # a failed read is a gap, never 0 MHz


class RecordedMac:
    """A command runner answering with recorded outputs of real Macs (tests/fixtures/metal)."""

    def __init__(self, batt: str, therm: str, chip: str = "sysctl_brand_apple_m1_pro.txt") -> None:
        self.outputs = {PMSET_BATT: _fixture(batt), PMSET_THERM: _fixture(therm), SYSCTL_CHIP: _fixture(chip)}
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: tuple[str, ...] | list[str]) -> CommandOutput:
        self.calls.append(tuple(argv))
        text = self.outputs.get(tuple(argv))
        return CommandOutput(0, text) if text is not None else CommandOutput(127, "", f"{argv[0]}: not found")


def test_metal_preflight_on_a_cool_mac_on_ac_power() -> None:
    run = RecordedMac("pmset_batt_ac_charging.txt", "pmset_therm_m1_pro_nominal.txt")
    power, thermal = MetalBackend(euid=A_USER, run=run).preflight()
    assert power.ok and power.detail == "drawing from AC Power, battery 91 % charging"
    assert thermal.ok and thermal.detail.startswith("nominal")
    assert run.calls == [PMSET_BATT, PMSET_THERM]
    assert MetalBackend(euid=A_USER, run=run).provenance()["chip"] == "Apple M1 Pro"
    intel = RecordedMac("pmset_batt_desktop.txt", "pmset_therm_m1_pro_nominal.txt", "sysctl_brand_intel_i7_3820qm.txt")
    assert MetalBackend(euid=A_USER, run=intel).provenance()["chip"] == "Intel(R) Core(TM) i7-3820QM CPU @ 2.70GHz"


def test_metal_preflight_refuses_battery_power_and_a_throttled_cpu() -> None:
    power, thermal = MetalBackend(euid=A_USER, run=RecordedMac("pmset_batt_on_battery.txt", "pmset_therm_intel_throttled.txt")
                                  ).preflight()
    assert not power.ok and "drawing from Battery Power, battery 95 % discharging; plug in" in power.detail
    assert not thermal.ok and thermal.detail == "throttled: CPU_Speed_Limit 35 %; let the Mac cool down"
    power, _ = MetalBackend(euid=A_USER, require_ac=False, run=RecordedMac("pmset_batt_on_battery.txt",
                                                              "pmset_therm_m1_pro_nominal.txt")).preflight()
    assert power.ok
    missing = MetalBackend(euid=A_USER, run=lambda argv: CommandOutput(127, "", "pmset: command not found")).preflight()
    assert [c.ok for c in missing] == [False, False]


def test_metal_window_telemetry_and_evidence() -> None:
    cool = MetalBackend(euid=A_USER, run=RecordedMac("pmset_batt_ac_charging.txt", "pmset_therm_m1_pro_nominal.txt"))
    hot = MetalBackend(euid=A_USER, run=RecordedMac("pmset_batt_on_battery.txt", "pmset_therm_intel_throttled.txt"))
    window = [cool.sample(), hot.sample(), cool.sample()]
    assert window[0] == {"mac_power_source": "AC Power", "mac_battery_pct": 91, "mac_thermal_state": "nominal",
                         "mac_cpu_speed_limit_pct": None}
    assert window[1]["mac_cpu_speed_limit_pct"] == 35
    assert cool.window_evidence(window) == ["drawing from Battery Power (in 1 of 3 samples)",
                                            "thermal state throttled (in 1 of 3 samples)"]
    assert cool.window_evidence([window[0], window[2]]) == []
    assert MetalBackend(euid=A_USER, require_ac=False).window_evidence(window) == ["thermal state throttled (in 1 of 3 samples)"]
    assert cool.summarize(window) == {"on_ac_all": False, "thermal_worst": "throttled",
                                      "cpu_speed_limit_min_pct": 35.0, "battery_min_pct": 91.0}


@pytest.mark.skipif(sys.platform == "darwin", reason="this is a Mac")
def test_metal_is_not_detected_off_macos() -> None:
    found = MetalBackend.detect()
    assert not found.ok and found.detail.startswith("not available: not macOS")


# -- sampler and records ---------------------------------------------------------------------------

def test_sampler_merges_backend_telemetry_into_every_row() -> None:
    reader = ReplayNvml("h200_idle.json", processes=list)
    backend = CudaBackend(reader=reader)
    with WindowSampler(0.01, read=lambda: {"load1": 1.0}, telemetry=backend.sample) as sampler:
        pass
    samples = sampler.samples
    assert [s.phase for s in samples][0] == "open" and samples[-1].phase == "close"
    assert all(s.extra["gpu_sm_clock_mhz"] == 345.0 for s in samples)
    header, first = samples_csv(samples).splitlines()[:2]
    assert header.startswith("t_s,phase,load1,load5,load15,cpu_pct,mem_pct,on_ac,gpu_util_pct,")
    assert "gpu_other_processes" in header and first.split(",")[header.split(",").index("gpu_throttle")] == "gpu_idle"


def test_window_without_backend_reads_as_before_and_round_trips() -> None:
    plain = WindowSummary.of([LoadSample(0.0, 1.0, 1.0, 1.0)])
    assert plain.to_dict() == {"samples": 1, "load1_mean": 1.0, "load1_max": 1.0, "on_ac": None}
    rich = WindowSummary.of([LoadSample(0.0, 1.0, 1.0, 1.0)], evidence=("other GPU process pid 7",),
                            telemetry={"gpu_util_mean": 99.0})
    record = RunRecord(order=1, arm="off", label="off-r1", pair=1, outcome=RunOutcome(0, 1.0), window=rich)
    again = RunRecord.from_dict(record.to_dict())
    assert again.window.evidence == ("other GPU process pid 7",) and again.window.telemetry == {"gpu_util_mean": 99.0}
    assert again == record

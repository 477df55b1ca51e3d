"""The metal backend: macOS preflight and telemetry from the system's own commands.

- power source: `pmset -g batt` ("Now drawing from 'AC Power'" / "'Battery Power'", battery % and state);
- thermal state: `pmset -g therm` (thermal and performance warning levels, CPU speed/scheduler limits);
- chip: `sysctl -n machdep.cpu.brand_string` (e.g. "Apple M1 Pro");
- the GPU, when gate runs as root: `powermetrics --samplers gpu_power -i 100 -n 1` (the GPU's active
  frequency, active and idle residency, power; Apple silicon's "GPU HW active frequency" lines and an Intel
  Mac's "GPU 0 average active frequency" lines). powermetrics refuses anyone but root, so without it the
  backend records no GPU figures and says so in provenance.

What macOS does not offer here, and the backend therefore cannot see (said in provenance and in the
predecision's evidence rules): other processes' use of the GPU, whether the GPU's clocks are fixed, and its
temperature. The thermal state comes from pmset (the same levels NSProcessInfo.thermalState reports need a
compiled helper or PyObjC, which the core does not carry).

The formats read here are pmset's own (its source prints "Note: No thermal warning level has been
recorded", "Thermal Warning Level = %d" and "Note: No CPU power status has been recorded", and the
CPU_Speed_Limit block); tests feed recorded real outputs, quoted in tests/fixtures/metal/SOURCES.md.
Commands run through an injectable runner, so the parsing is tested where no Mac exists.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from gatekit.driver import Telemetry, TelemetrySample
from gatekit.records import CheckResult
from gatekit_drivers.backends._options import take_options

COMMAND_TIMEOUT_S = 10.0
PMSET_BATT = ("pmset", "-g", "batt")
PMSET_THERM = ("pmset", "-g", "therm")
SYSCTL_CHIP = ("sysctl", "-n", "machdep.cpu.brand_string")
POWERMETRICS_GPU = ("powermetrics", "--samplers", "gpu_power", "-i", "100", "-n", "1")
NOT_SEEN = ("other processes' use of the GPU", "whether the GPU's clocks are fixed", "the GPU's temperature")


@dataclass(frozen=True, slots=True)
class CommandOutput:
    """What one command printed; returncode 127 when it does not exist here."""

    returncode: int
    stdout: str
    stderr: str = ""


CommandRunner = Callable[[Sequence[str]], CommandOutput]


def run_command(argv: Sequence[str]) -> CommandOutput:
    """Run a short system command (never through a shell) and capture its output."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except FileNotFoundError:
        return CommandOutput(127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandOutput(124, "", f"{' '.join(argv)}: no answer within {COMMAND_TIMEOUT_S:g} s")
    return CommandOutput(done.returncode, done.stdout, done.stderr)


# -- parsers (pure) --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PowerSource:
    """`pmset -g batt`: where power comes from, and the internal battery if there is one."""

    source: str | None  # "AC Power", "Battery Power", ... ; None when the output has no such line
    battery_pct: int | None = None
    battery_state: str | None = None  # charging, discharging, charged, AC attached, ...

    @property
    def on_ac(self) -> bool | None:
        return None if self.source is None else self.source == "AC Power"


_DRAWING = re.compile(r"Now drawing from '([^']+)'")
_BATTERY = re.compile(r"-InternalBattery-\d+.*?(\d{1,3})%;\s*([^;]+);")


def parse_pmset_batt(text: str) -> PowerSource:
    drawing = _DRAWING.search(text)
    battery = _BATTERY.search(text)
    return PowerSource(
        source=drawing.group(1) if drawing else None,
        battery_pct=int(battery.group(1)) if battery else None,
        battery_state=battery.group(2).strip() if battery else None,
    )


@dataclass(frozen=True, slots=True)
class ThermalState:
    """`pmset -g therm`: nominal, warning (a warning level above 0), throttled (a CPU limit below 100 %)
    or unknown (an error line, or nothing pmset is known to print)."""

    state: str
    thermal_warning_level: int | None = None
    performance_warning_level: int | None = None
    cpu_speed_limit_pct: int | None = None
    cpu_scheduler_limit_pct: int | None = None
    detail: str = ""


_LEVEL = re.compile(r"(Thermal|Performance) Warning Level\s*=\s*(-?\d+)\s*$", re.I)
_LIMIT = re.compile(r"^(CPU_Speed_Limit|CPU_Scheduler_Limit|CPU_Available_CPUs)\s*=\s*(\d+)\s*$")
_NOT_RECORDED = {
    "Note: No thermal warning level has been recorded": "thermal",
    "Note: No performance warning level has been recorded": "performance",
    "Note: No CPU power status has been recorded": "cpu",
}


def parse_pmset_therm(text: str) -> ThermalState:
    levels: dict[str, int] = {}
    limits: dict[str, int] = {}
    recognised, problems = 0, []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line in _NOT_RECORDED:
            recognised += 1
            if _NOT_RECORDED[line] != "cpu":
                levels[_NOT_RECORDED[line]] = 0
        elif match := _LEVEL.search(line):
            recognised += 1
            levels[match.group(1).lower()] = int(match.group(2))
        elif match := _LIMIT.match(line):
            recognised += 1
            limits[match.group(1)] = int(match.group(2))
        elif line.endswith("CPU Power notify"):  # the dated header of the limits block
            recognised += 1
        elif line.startswith("Error"):
            problems.append(line)
    speed, scheduler = limits.get("CPU_Speed_Limit"), limits.get("CPU_Scheduler_Limit")
    thermal, performance = levels.get("thermal"), levels.get("performance")
    fields = {"thermal_warning_level": thermal, "performance_warning_level": performance,
              "cpu_speed_limit_pct": speed, "cpu_scheduler_limit_pct": scheduler}
    if problems or not recognised:
        return ThermalState("unknown", **fields, detail="; ".join(problems) or "unrecognised pmset output")
    warnings = [f"{name} warning level {level}" for name, level in levels.items() if level != 0]
    if warnings:
        return ThermalState("warning", **fields, detail=", ".join(warnings))
    throttled = [f"{name} {value} %" for name, value in (("CPU_Speed_Limit", speed),
                                                          ("CPU_Scheduler_Limit", scheduler))
                 if value is not None and value < 100]
    if throttled:
        return ThermalState("throttled", **fields, detail=", ".join(throttled))
    return ThermalState("nominal", **fields, detail="no warning level, no CPU limit below 100 %")


@dataclass(frozen=True, slots=True)
class GpuPower:
    """`powermetrics --samplers gpu_power`, the last sample it printed: the GPU's active frequency (MHz),
    active and idle residency (% of the sample interval) and power (mW); a value out of its bounds is left out
    and named in `problems`."""

    active_mhz: float | None = None
    active_pct: float | None = None
    idle_pct: float | None = None
    power_mw: float | None = None
    problems: tuple[str, ...] = ()

    @property
    def recorded(self) -> bool:
        return self.active_mhz is not None or self.active_pct is not None or self.power_mw is not None


# (pattern, field, bounds): Apple silicon first, then an Intel Mac's integrated GPU (GPU 0)
_GPU_LINES = (
    (re.compile(r"^GPU HW active frequency:\s*([\d.]+)\s*MHz"), "active_mhz", (0.0, 5000.0)),
    (re.compile(r"^GPU HW active residency:\s*([\d.]+)\s*%"), "active_pct", (0.0, 100.0)),
    (re.compile(r"^GPU idle residency:\s*([\d.]+)\s*%"), "idle_pct", (0.0, 100.0)),
    (re.compile(r"^GPU Power:\s*([\d.]+)\s*mW"), "power_mw", (0.0, 1e6)),
    (re.compile(r"^GPU 0 average active frequency as fraction of nominal \([\d.]+\s*Mhz\):\s*[\d.]+%\s*"
                r"\(([\d.]+)\s*Mhz\)", re.I), "active_mhz", (0.0, 5000.0)),
    (re.compile(r"^GPU 0 GPU Busy\s*:\s*([\d.]+)\s*%"), "active_pct", (0.0, 100.0)),
    (re.compile(r"^GPU 0 C-state residency:\s*([\d.]+)\s*%"), "idle_pct", (0.0, 100.0)),
)
_SAMPLE_HEADER = "*** Sampled system activity"
_GPU_SECTION = "**** GPU usage ****"


def parse_powermetrics_gpu(text: str) -> GpuPower:
    """The GPU figures of powermetrics' last sample (its GPU usage section where it printed one)."""
    sample = text.rsplit(_SAMPLE_HEADER, 1)[-1]
    if _GPU_SECTION in sample:
        sample = sample.split(_GPU_SECTION, 1)[1]
        sample = re.split(r"^\*{3,}", sample, maxsplit=1, flags=re.M)[0]  # up to the next section
    values: dict[str, float] = {}
    problems: list[str] = []
    for raw in sample.splitlines():
        line = raw.strip()
        for pattern, name, (low, high) in _GPU_LINES:
            match = pattern.match(line)
            if match is None or name in values:
                continue
            try:
                value = float(match.group(1))
            except ValueError:
                problems.append(f"unreadable: {line[:80]}")
                break
            if low <= value <= high:
                values[name] = value
            else:
                problems.append(f"{name} {value:g} outside {low:g}..{high:g}: {line[:80]}")
            break
    return GpuPower(**values, problems=tuple(problems))


def _numbers(samples: Sequence[TelemetrySample], key: str) -> list[float]:
    return [float(v) for s in samples if isinstance(v := s.get(key), (int, float)) and not isinstance(v, bool)]


class MetalBackend:
    """AC power and thermal state before and during every run; the chip in provenance."""

    name = "metal"
    OPTIONS: Mapping[str, tuple[type, Any]] = {"require_ac": (bool, True), "gpu_power": (bool, True)}

    def __init__(self, *, require_ac: bool = True, gpu_power: bool = True, run: CommandRunner = run_command,
                 euid: Callable[[], int] | None = None) -> None:
        self.require_ac = require_ac
        self.run = run
        self.gpu_power = gpu_power
        self.uid = euid() if euid is not None else getattr(os, "geteuid", lambda: -1)()
        self.reads_gpu = gpu_power and self.uid == 0  # powermetrics answers root only

    @classmethod
    def detect(cls) -> CheckResult:
        if sys.platform != "darwin":
            return CheckResult(cls.name, False, f"not available: not macOS ({sys.platform})")
        if shutil.which("pmset") is None:
            return CheckResult(cls.name, False, "not available: pmset not found")
        return CheckResult(cls.name, True, f"macOS {platform.mac_ver()[0]}")

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: Path) -> MetalBackend:
        return cls(**take_options(options, cls.OPTIONS, source=source, backend=cls.name))

    def _output(self, argv: Sequence[str]) -> str | None:
        done = self.run(argv)
        return done.stdout if done.returncode == 0 else None

    def power(self) -> PowerSource | None:
        text = self._output(PMSET_BATT)
        return None if text is None else parse_pmset_batt(text)

    def thermal(self) -> ThermalState | None:
        text = self._output(PMSET_THERM)
        return None if text is None else parse_pmset_therm(text)

    def gpu(self) -> GpuPower | None:
        text = self._output(POWERMETRICS_GPU)
        return None if text is None else parse_powermetrics_gpu(text)

    def gpu_telemetry(self) -> str:
        """Where the GPU figures come from, or why there are none."""
        if self.reads_gpu:
            return "powermetrics --samplers gpu_power (gate runs as root)"
        if not self.gpu_power:
            return "not recorded: backend.metal.gpu_power = false"
        return (f"not recorded: powermetrics answers root only (gate runs as uid {self.uid}); run the gate with "
                "sudo for the GPU's frequency and power")

    def preflight(self) -> list[CheckResult]:
        power, thermal = self.power(), self.thermal()
        if power is None or power.source is None:
            power_check = CheckResult("AC power (pmset -g batt)", False, "pmset -g batt gave no power source")
        else:
            battery = f", battery {power.battery_pct} % {power.battery_state}" if power.battery_pct is not None else ""
            ok = bool(power.on_ac) or not self.require_ac
            power_check = CheckResult("AC power (pmset -g batt)", ok, f"drawing from {power.source}{battery}"
                                      + ("" if ok else "; plug in before a series (backend.metal.require_ac)"),
                                      machine=not ok)
        if thermal is None:
            thermal_check = CheckResult("thermal state nominal (pmset -g therm)", False, "pmset -g therm failed")
        else:
            thermal_check = CheckResult("thermal state nominal (pmset -g therm)", thermal.state == "nominal",
                                        f"{thermal.state}: {thermal.detail}"
                                        + ("" if thermal.state == "nominal" else "; let the Mac cool down"),
                                        machine=thermal.state != "nominal")
        return [power_check, thermal_check]

    def provenance(self) -> dict[str, Any]:
        chip = self._output(SYSCTL_CHIP)
        return {"chip": chip.strip() if chip else None, "macos": platform.mac_ver()[0] or None,
                "gpu_telemetry": self.gpu_telemetry(), "not_seen": list(NOT_SEEN)}

    def sample(self) -> dict[str, Telemetry]:
        power, thermal = self.power(), self.thermal()
        row: dict[str, Telemetry] = {
            "mac_power_source": power.source if power else None,
            "mac_battery_pct": power.battery_pct if power else None,
            "mac_thermal_state": thermal.state if thermal else None,
            "mac_cpu_speed_limit_pct": thermal.cpu_speed_limit_pct if thermal else None,
        }
        if self.reads_gpu:  # the columns exist for a whole series or not at all
            gpu = self.gpu()
            row.update({"mac_gpu_active_mhz": gpu.active_mhz if gpu else None,
                        "mac_gpu_active_pct": gpu.active_pct if gpu else None,
                        "mac_gpu_power_mw": gpu.power_mw if gpu else None})
        return row

    def summarize(self, samples: Sequence[TelemetrySample]) -> dict[str, Telemetry | bool]:
        sources = [s.get("mac_power_source") for s in samples if s.get("mac_power_source")]
        states = [str(s.get("mac_thermal_state")) for s in samples if s.get("mac_thermal_state")]
        order = ("nominal", "unknown", "throttled", "warning")
        limits, battery = _numbers(samples, "mac_cpu_speed_limit_pct"), _numbers(samples, "mac_battery_pct")
        summary: dict[str, Telemetry | bool] = {
            "on_ac_all": all(src == "AC Power" for src in sources) if sources else None,
            "thermal_worst": max(states, key=lambda s: order.index(s) if s in order else 1) if states else None,
            "cpu_speed_limit_min_pct": min(limits) if limits else None,
            "battery_min_pct": min(battery) if battery else None,
        }
        if self.reads_gpu:
            mhz, busy = _numbers(samples, "mac_gpu_active_mhz"), _numbers(samples, "mac_gpu_active_pct")
            watts = _numbers(samples, "mac_gpu_power_mw")
            summary.update({"gpu_active_mhz_mean": sum(mhz) / len(mhz) if mhz else None,
                            "gpu_active_mhz_min": min(mhz) if mhz else None,
                            "gpu_active_pct_mean": sum(busy) / len(busy) if busy else None,
                            "gpu_power_mean_mw": sum(watts) / len(watts) if watts else None})
        return summary

    def window_evidence(self, samples: Sequence[TelemetrySample]) -> list[str]:
        evidence = []
        if self.require_ac:
            on_battery = [s for s in samples if s.get("mac_power_source") not in (None, "AC Power")]
            if on_battery:
                evidence.append(f"drawing from {on_battery[0].get('mac_power_source')} "
                                f"(in {len(on_battery)} of {len(samples)} samples)")
        hot = [str(s.get("mac_thermal_state")) for s in samples
               if s.get("mac_thermal_state") in ("warning", "throttled")]
        if hot:
            evidence.append(f"thermal state {hot[0]} (in {len(hot)} of {len(samples)} samples)")
        return evidence

    def evidence_rules(self) -> list[str]:
        rules = ["metal backend: a thermal state of warning (a thermal or performance warning level above 0) or "
                 "throttled (CPU_Speed_Limit or CPU_Scheduler_Limit below 100) in any sample is evidence (i)."]
        if self.require_ac:
            rules.append("metal backend: a sample drawing from anything but 'AC Power' is evidence (i).")
        rules.append("metal backend: the GPU's frequency and power (powermetrics, when gate runs as root) are "
                     f"recorded, never evidence; it cannot see {', '.join(NOT_SEEN)}.")
        return rules

"""The cpu backend: CPU frequency, per-core load and temperatures via psutil, where the machine reports them.

It works on any machine (the fallback of `auto`). The core sampler already records load1/5/15, CPU % and
memory; this backend adds what shows a CPU that is not the one the last run had: a clock that dropped,
one saturated core, a sensor at its high mark.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any, Mapping, Sequence

import psutil

from gatekit.driver import Telemetry, TelemetrySample
from gatekit.records import CheckResult
from gatekit_drivers.backends._options import take_options

CPUFREQ = Path("/sys/devices/system/cpu")
CPUINFO = Path("/proc/cpuinfo")


def cpu_model() -> str | None:
    """The CPU's marketing name ("model name" in /proc/cpuinfo on Linux, else what platform knows)."""
    try:
        for line in CPUINFO.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def governors(root: Path = CPUFREQ) -> dict[str, int]:
    """{governor: number of CPUs using it} from sysfs; empty where the kernel does not expose it."""
    found: dict[str, int] = {}
    for path in sorted(root.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        try:
            name = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        found[name] = found.get(name, 0) + 1
    return found


def current_mhz() -> tuple[float | None, float | None]:
    """(current, max) CPU frequency in MHz; None where psutil cannot read it (or reports 0)."""
    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError):  # e.g. Apple Silicon, some containers
        return None, None
    if freq is None:
        return None, None
    return (freq.current or None), (freq.max or None)


def temperatures() -> tuple[float | None, str]:
    """(hottest sensor in °C, which sensors are at or above their own `high` mark, '' if none)."""
    read = getattr(psutil, "sensors_temperatures", None)  # Linux and FreeBSD only
    if read is None:
        return None, ""
    try:
        sensors = read()
    except OSError:
        return None, ""
    hottest: float | None = None
    hot = []
    for chip, entries in sensors.items():
        for entry in entries:
            if entry.current is None:
                continue
            hottest = entry.current if hottest is None else max(hottest, entry.current)
            if entry.high and entry.current >= entry.high:
                label = f"{chip} {entry.label}".strip()
                hot.append(f"{label} {entry.current:.0f} °C ≥ high {entry.high:.0f} °C")
    return hottest, "; ".join(hot)


def _numbers(samples: Sequence[TelemetrySample], key: str) -> list[float]:
    return [float(v) for s in samples if isinstance(v := s.get(key), (int, float)) and not isinstance(v, bool)]


class CpuBackend:
    """Telemetry every machine has some of; evidence when a temperature sensor reaches its high mark."""

    name = "cpu"
    OPTIONS: Mapping[str, tuple[type, Any]] = {"temperature_evidence": (bool, True)}

    def __init__(self, *, temperature_evidence: bool = True) -> None:
        self.temperature_evidence = temperature_evidence

    @classmethod
    def detect(cls) -> CheckResult:
        return CheckResult("cpu", True, f"{cpu_model() or 'unknown CPU'}, {os.cpu_count()} logical CPUs")

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: Path) -> CpuBackend:
        return cls(**take_options(options, cls.OPTIONS, source=source, backend=cls.name))

    def preflight(self) -> list[CheckResult]:
        found = governors()
        if not found:
            detail = "not readable on this machine (no cpufreq in sysfs)"
        else:
            detail = ", ".join(f"{name} on {count} CPU(s)" for name, count in sorted(found.items()))
            if set(found) - {"performance"}:
                detail += "; clocks follow load — 'performance' gives steadier timings"
        # A governor is reported, never refused: many machines cannot change it.
        return [CheckResult("cpu frequency governor", True, detail)]

    def provenance(self) -> dict[str, Any]:
        _, max_mhz = current_mhz()
        return {"cpu_model": cpu_model(), "cpu_logical": psutil.cpu_count(logical=True),
                "cpu_physical": psutil.cpu_count(logical=False), "cpu_max_mhz": max_mhz,
                "governors": governors()}

    def sample(self) -> dict[str, Telemetry]:
        mhz, _ = current_mhz()
        hottest, hot = temperatures()
        per_core = psutil.cpu_percent(interval=None, percpu=True)
        return {"cpu_freq_mhz": mhz, "cpu_core_pct_max": max(per_core) if per_core else None,
                "cpu_temp_c": hottest, "cpu_temp_high": hot}

    def summarize(self, samples: Sequence[TelemetrySample]) -> dict[str, Telemetry | bool]:
        freq, temp = _numbers(samples, "cpu_freq_mhz"), _numbers(samples, "cpu_temp_c")
        return {"cpu_freq_mean_mhz": sum(freq) / len(freq) if freq else None,
                "cpu_freq_min_mhz": min(freq) if freq else None,
                "cpu_temp_max_c": max(temp) if temp else None}

    def window_evidence(self, samples: Sequence[TelemetrySample]) -> list[str]:
        if not self.temperature_evidence:
            return []
        hot = [str(s["cpu_temp_high"]) for s in samples if s.get("cpu_temp_high")]
        if not hot:
            return []
        return [f"CPU temperature at its high mark in {len(hot)} of {len(samples)} samples ({hot[-1]})"]

    def evidence_rules(self) -> list[str]:
        if not self.temperature_evidence:
            return ["cpu backend: telemetry only, no evidence of its own (temperature_evidence = false)."]
        return ["cpu backend: a temperature sensor at or above its own 'high' mark in any sample of the "
                "window is evidence (i)."]

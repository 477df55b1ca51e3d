"""The in-window sampler: a thread that records load (and more) for the whole run window.

A run with no in-window samples cannot be audited, so the window is sampled when it opens, every
`interval_s`, and when it closes. Each sample also carries the backend's telemetry (GPU, Mac, CPU) when a
backend is given. The reader, the telemetry and the clock are injectable for deterministic tests.
"""

from __future__ import annotations

import csv
import io
import os
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

import psutil

from gatekit.records import PSI_RESOURCES, LoadSample

LoadReader = Callable[[], Mapping[str, float | bool | None]]
TelemetryReader = Callable[[], Mapping[str, float | int | str | None]]
SAMPLE_FIELDS = ("t_s", "phase", "load1", "load5", "load15", "cpu_pct", "mem_pct", "on_ac")
# Written only when some sample of the window has them, so a machine without them writes the file as before.
PRESSURE_FIELDS = (*(f"psi_{r}_avg10" for r in PSI_RESOURCES), *(f"psi_{r}_total_us" for r in PSI_RESOURCES),
                   "cpu_steal_s", "cpu_total_s")
PRESSURE_DIR = Path("/proc/pressure")


def parse_pressure(text: str) -> tuple[float, int] | None:
    """(`some` avg10 in %, `some` total in µs) of a /proc/pressure file, None when it has no `some` line.

    Format (Documentation/accounting/psi.rst): `some avg10=0.12 avg60=0.30 avg300=0.63 total=749208067`.
    """
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind != "some":
            continue
        fields = dict(part.split("=", 1) for part in rest.split() if "=" in part)
        try:
            return float(fields["avg10"]), int(fields["total"])
        except (KeyError, ValueError):
            return None
    return None


def read_pressure(folder: Path = PRESSURE_DIR) -> dict[str, float | int]:
    """psi_<resource>_avg10 and psi_<resource>_total_us for each resource the kernel reports (empty when the
    OS has no pressure-stall information: not Linux, a kernel before 4.20, or psi=0 at boot)."""
    found: dict[str, float | int] = {}
    for resource in PSI_RESOURCES:
        try:
            parsed = parse_pressure((folder / resource).read_text())
        except OSError:  # absent, or present but unsupported (EOPNOTSUPP when psi is disabled)
            continue
        if parsed is not None:
            found[f"psi_{resource}_avg10"], found[f"psi_{resource}_total_us"] = parsed
    return found


def read_cpu_times() -> dict[str, float]:
    """cpu_steal_s and cpu_total_s of psutil.cpu_times() (all CPUs); empty where the OS reports no steal."""
    times = psutil.cpu_times()
    steal = getattr(times, "steal", None)
    if steal is None:
        return {}
    return {"cpu_steal_s": float(steal), "cpu_total_s": round(float(sum(times)), 3)}


def read_system_load() -> dict[str, float | bool | None]:
    """load1/5/15, CPU %, memory % and power source from psutil (on_ac None without a battery), with the
    pressure-stall information and CPU time counters where the OS has them."""
    load1, load5, load15 = os.getloadavg()
    battery = psutil.sensors_battery() if hasattr(psutil, "sensors_battery") else None
    return {
        "load1": load1,
        "load5": load5,
        "load15": load15,
        "cpu_pct": psutil.cpu_percent(interval=None),
        "mem_pct": psutil.virtual_memory().percent,
        "on_ac": None if battery is None else bool(battery.power_plugged),
        **read_pressure(),
        **read_cpu_times(),
    }


def _number_or_none(value: object) -> float | int | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def load_average(reading: Mapping[str, float | bool | None], key: str = "load1") -> float:
    """A reading's load average `key` (load5 and load15 default to load1: a reader may give only that)."""
    value = reading.get(key, reading["load1"])
    if value is None:
        raise TypeError(f"a load reading without {key}")
    return float(value)


class WindowSampler:
    """Context manager: samples at open, every interval, and at close."""

    def __init__(self, interval_s: float, read: LoadReader = read_system_load,
                 clock: Callable[[], float] = time.monotonic, telemetry: TelemetryReader | None = None) -> None:
        self.interval_s = interval_s
        self.read = read
        self.clock = clock
        self.telemetry = telemetry
        self._samples: list[LoadSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gatekit-sampler", daemon=True)
        self._opened_at = 0.0

    def _take(self, phase: str) -> None:
        reading = self.read()
        self._samples.append(LoadSample(
            t_s=self.clock() - self._opened_at,
            load1=load_average(reading),
            load5=load_average(reading, "load5"),
            load15=load_average(reading, "load15"),
            cpu_pct=reading.get("cpu_pct"),
            mem_pct=reading.get("mem_pct"),
            on_ac=on_ac if isinstance(on_ac := reading.get("on_ac"), bool) else None,
            phase=phase,
            extra=dict(self.telemetry()) if self.telemetry is not None else {},
            **{key: _number_or_none(reading.get(key)) for key in PRESSURE_FIELDS},  # type: ignore[arg-type]  # computed names
        ))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take("tick")

    def __enter__(self) -> WindowSampler:
        self._opened_at = self.clock()
        self._take("open")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take("close")

    @property
    def samples(self) -> tuple[LoadSample, ...]:
        return tuple(self._samples)


# A gap this long between consecutive samples of a window means the gate itself did not run: stopped
# (SIGSTOP, a terminal's Ctrl-Z, while its trainer goes on in its own session) or starved. Ten intervals
# leave room for a loaded machine; 2 s for short intervals, which a busy scheduler can miss by far more
# than their length. A stop of the whole process stops the sampler's thread too, so the gap is read from
# the samples' monotonic times, not from anything the sampler had to notice.
STOPPED_GAP_INTERVALS = 10
STOPPED_GAP_MIN_S = 2.0


def stopped_gap_limit_s(interval_s: float) -> float:
    """The longest gap between consecutive samples a run window may have (see STOPPED_GAP_INTERVALS)."""
    return max(STOPPED_GAP_INTERVALS * interval_s, STOPPED_GAP_MIN_S)


def longest_gap_s(samples: tuple[LoadSample, ...]) -> float:
    """The longest time between consecutive samples of a window (open, ticks, close); 0 for fewer than two."""
    return max((later.t_s - earlier.t_s for earlier, later in zip(samples, samples[1:])), default=0.0)


def stopped_gate(samples: tuple[LoadSample, ...], interval_s: float) -> str:
    """Why the window shows the gate stopped or starved during its run ('' when it does not): its wallclock
    and window then measure the stop, not the trainer, so the run is a failed one."""
    gap, limit = longest_gap_s(samples), stopped_gap_limit_s(interval_s)
    if gap <= limit:
        return ""
    return (f"the gate was stopped or starved during the run: {gap:.1f} s between two load samples (limit "
            f"{limit:g} s), so its wallclock and load window measure the stop, not the trainer")


def samples_csv(samples: tuple[LoadSample, ...]) -> str:
    """samples.csv content: one row per sample, empty cells for what the machine does not report.

    The pressure-stall and CPU time columns follow the core ones where some sample has them, then the
    backend's telemetry columns in the order they first appear.
    """
    pressure_fields = [key for key in PRESSURE_FIELDS if any(getattr(s, key) is not None for s in samples)]
    extra_fields = list(dict.fromkeys(key for sample in samples for key in sample.extra))
    columns = [*SAMPLE_FIELDS, *pressure_fields, *extra_fields]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    core = {*SAMPLE_FIELDS, *pressure_fields}
    for sample in samples:
        row = {**sample.extra, **{k: v for k, v in sample.to_dict().items() if k in core}}
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in columns})
    return buffer.getvalue()

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
from typing import Callable, Mapping

import psutil

from gatekit.records import LoadSample

LoadReader = Callable[[], Mapping[str, float | bool | None]]
TelemetryReader = Callable[[], Mapping[str, float | int | str | None]]
SAMPLE_FIELDS = ("t_s", "phase", "load1", "load5", "load15", "cpu_pct", "mem_pct", "on_ac")


def read_system_load() -> dict[str, float | bool | None]:
    """load1/5/15, CPU %, memory % and power source from psutil (on_ac None without a battery)."""
    load1, load5, load15 = os.getloadavg()
    battery = psutil.sensors_battery() if hasattr(psutil, "sensors_battery") else None
    return {
        "load1": load1,
        "load5": load5,
        "load15": load15,
        "cpu_pct": psutil.cpu_percent(interval=None),
        "mem_pct": psutil.virtual_memory().percent,
        "on_ac": None if battery is None else bool(battery.power_plugged),
    }


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
            load1=float(reading["load1"]),  # type: ignore[arg-type]
            load5=float(reading.get("load5", reading["load1"])),  # type: ignore[arg-type]
            load15=float(reading.get("load15", reading["load1"])),  # type: ignore[arg-type]
            cpu_pct=reading.get("cpu_pct"),  # type: ignore[arg-type]
            mem_pct=reading.get("mem_pct"),  # type: ignore[arg-type]
            on_ac=reading.get("on_ac"),  # type: ignore[arg-type]
            phase=phase,
            extra=dict(self.telemetry()) if self.telemetry is not None else {},
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


def samples_csv(samples: tuple[LoadSample, ...]) -> str:
    """samples.csv content: one row per sample, empty cells for what the machine does not report.

    The backend's telemetry columns follow the core ones, in the order they first appear.
    """
    extra_fields = list(dict.fromkeys(key for sample in samples for key in sample.extra))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*SAMPLE_FIELDS, *extra_fields], lineterminator="\n")
    writer.writeheader()
    for sample in samples:
        row = {**sample.extra, **{k: v for k, v in sample.to_dict().items() if k in SAMPLE_FIELDS}}
        writer.writerow({k: "" if row.get(k) is None else row[k] for k in (*SAMPLE_FIELDS, *extra_fields)})
    return buffer.getvalue()

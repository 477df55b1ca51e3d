"""Running a duet pair: two runs released together from one barrier, each on its own slot, each watched
by its own sampler (the slot's GPU through the backend, the slot's cores by their busy share)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import psutil

from gatekit.driver import Backend, Driver, RunRequest, Telemetry
from gatekit.records import RunOutcome
from gatekit.sampler import TelemetryReader, WindowSampler
from gatekit.sanitize import safe_outcome
from gatekit.schedule import Slot
from gatekit.slots import DeviceSlot

SLOT_BUSY = "slot_cpu_busy_pct"  # per sample: the slot's cores' busy share since the previous sample


@dataclass(frozen=True, slots=True)
class OpenRun:
    """A run about to start: its schedule slot, execution order, request, sampler and what watches it."""

    slot: Slot
    order: int
    request: RunRequest
    sampler: WindowSampler
    backend: Backend
    device: DeviceSlot | None
    started_at: str


class PairOutcomes:
    """The outcomes of runs going on in threads; `wait()` returns when every run has ended."""

    def __init__(self, threads: Sequence[threading.Thread], results: list[RunOutcome | None]) -> None:
        self.threads, self._results = threads, results

    def wait(self) -> None:
        for thread in self.threads:
            while thread.is_alive():  # short joins, so an interrupt reaches the main thread at once
                thread.join(0.05)

    @property
    def results(self) -> list[RunOutcome]:
        return [r if r is not None else RunOutcome(exit_code=None, process_wallclock_s=0.0,
                                                   error="the run's thread ended without an outcome")
                for r in self._results]


def run_together(driver: Driver, runs: Sequence[OpenRun]) -> tuple[PairOutcomes, list[float]]:
    """Start every run in its own thread; each opens its sampler, then all are released from one barrier
    into `driver.run`. Returns the outcomes (to wait for) and the monotonic release times."""
    barrier = threading.Barrier(len(runs))
    results: list[RunOutcome | None] = [None] * len(runs)
    released: list[float] = []

    def run_one(index: int, run: OpenRun) -> None:
        try:
            with run.sampler:
                barrier.wait()
                released.append(time.monotonic())
                results[index] = safe_outcome(driver.run(run.request))
        except Exception as exc:  # never lose the other run because this one broke
            barrier.abort()
            results[index] = RunOutcome(exit_code=None, process_wallclock_s=0.0, error=f"could not run: {exc}")

    threads = [threading.Thread(target=run_one, args=(i, run), name=f"gatekit-{run.slot.label}", daemon=True)
               for i, run in enumerate(runs)]
    for thread in threads:
        thread.start()
    return PairOutcomes(threads, results), released


def slot_backend(backend: Backend, device: DeviceSlot | None) -> Backend:
    """The backend watching a slot: a GPU backend that can (`for_device`) reads the slot's own GPU."""
    if device is None or device.gpu is None or not hasattr(backend, "for_device"):
        return backend
    return backend.for_device(device.gpu)


class SlotCpuMeter:
    """The busy share of a cpu slot's cores between two calls, from psutil's per-core CPU times."""

    def __init__(self, cores: Sequence[int]) -> None:
        self.cores = tuple(cores)
        self.previous = self._times()

    def _times(self) -> list[Any]:
        per_core = psutil.cpu_times(percpu=True)
        return [per_core[c] for c in self.cores if c < len(per_core)]

    def __call__(self) -> float | None:
        now = self._times()
        busy = total = 0.0
        for before, after in zip(self.previous, now):
            spent = sum(after) - sum(before)
            idle = (after.idle + getattr(after, "iowait", 0.0)) - (before.idle + getattr(before, "iowait", 0.0))
            busy, total = busy + spent - idle, total + spent
        self.previous = now
        return 100.0 * busy / total if total > 0 else None


def slot_telemetry(backend: Backend, device: DeviceSlot | None) -> TelemetryReader:
    """The sampler's telemetry for a run: the backend's, and for a cpu slot its cores' busy share."""
    if device is None or not device.cores:
        return backend.sample
    meter = SlotCpuMeter(device.cores)

    def read() -> dict[str, Telemetry]:
        return {**backend.sample(), SLOT_BUSY: meter()}
    return read


def slot_summary(telemetry: Sequence[Mapping[str, Telemetry]]) -> dict[str, Telemetry]:
    """The window's mean busy share of its cpu slot's cores, when it ran on one."""
    values = [float(v) for s in telemetry if isinstance(v := s.get(SLOT_BUSY), (int, float))]
    return {"slot_cpu_busy_mean_pct": sum(values) / len(values)} if values else {}

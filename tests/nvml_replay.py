"""A fake NVML reader that replays real recordings (tests/fixtures/nvml, made by record_nvml.py on an H200).

There is no GPU where the suite runs. Every telemetry value comes from the recording; only the
compute-process list can be replaced, because the recorded pids belong to the H200 machine: the tests put
pids of real processes of this machine there (the trainer, a process outside the gate's tree, a pid that
does not exist) to exercise the ancestry check for real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import psutil

NVML_FIXTURES = Path(__file__).parent / "fixtures" / "nvml"
Processes = Callable[[], list[dict[str, Any]]]


class ReplayNvml:
    """Cycles through a recording's samples; `processes`, when given, supplies the compute processes, and
    `utilization` their per-process activity (record_nvml's `process_utilization`; the H200 recordings predate
    it, so without it a reading says nothing of who computed)."""

    def __init__(self, name: str, processes: Processes | None = None, utilization: Processes | None = None,
                 pids: dict[int, int] | None = None) -> None:
        self.recording = json.loads((NVML_FIXTURES / name).read_text())
        self.processes = processes
        self.utilization = utilization
        self.pids = pids or {}  # a recorded pid -> a real process here, in both process lists as recorded
        self.reads = 0

    @property
    def recorded(self) -> list[dict[str, Any]]:
        return self.recording["samples"]

    def static(self) -> dict[str, Any]:
        return {"device_count": self.recording["device_count"], **self.recording["static"]}

    def sample(self) -> dict[str, Any]:
        reading = dict(self.recorded[self.reads % len(self.recorded)])
        self.reads += 1
        for key in ("compute_processes", "process_utilization"):
            if self.pids and isinstance(reading.get(key), list):
                reading[key] = [{**entry, "pid": self.pids.get(entry["pid"], entry["pid"])} for entry in reading[key]]
        if self.processes is not None:
            reading["compute_processes"] = self.processes()
        if self.utilization is not None:
            reading["process_utilization"] = self.utilization()
        return reading


def recorded_process_memory(name: str = "h200_busy.json") -> int:
    """The GPU memory the recorded busy process held (bytes), reused for the processes we substitute."""
    recording = json.loads((NVML_FIXTURES / name).read_text())
    return int(recording["samples"][0]["compute_processes"][0]["used_gpu_memory"])


def descendants_of_this_process() -> list[psutil.Process]:
    """The processes this (gate) process started, e.g. the trainer of the current run."""
    return psutil.Process().children(recursive=True)


def run_label(process: psutil.Process) -> str | None:
    """GATEKIT_RUN of a trainer process (which run it is), None when unreadable or gone."""
    try:
        return process.environ().get("GATEKIT_RUN")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None

"""Stopping a trainer and everything it started, without a second Ctrl-C cutting the cleanup short.

A trainer runs as the leader of its own process group, so one `killpg` reaches every process it spawned —
except those that left the group (`setsid`, daemonizing). Those still carry the trainer contract's
`GATEKIT_RUN_DIR` in their environment, so they are found by it: every process whose environment names a
run directory of this series is a leftover of that run.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Iterable

import psutil

from gatekit.contract import ENV_RUN_DIR
from gatekit.signals import signals_deferred

_PROC = Path("/proc")


def _environ_bytes(pid: int) -> bytes | None:
    try:
        with open(_PROC / str(pid) / "environ", "rb") as handle:
            return handle.read()
    except OSError:
        return None


def processes_in_run_dirs(prefix: Path, *, exclude: Iterable[int] = ()) -> list[int]:
    """PIDs of live processes whose GATEKIT_RUN_DIR is `prefix` or lies under it (this process excluded)."""
    skip = {os.getpid(), *exclude}
    exact = f"{ENV_RUN_DIR}={prefix}".encode()
    found = []
    if _PROC.is_dir():  # Linux: read the environments directly, about 0.3 ms for a hundred processes
        for entry in os.listdir(_PROC):
            if not entry.isdigit() or int(entry) in skip:
                continue
            environ = _environ_bytes(int(entry))
            if environ and any(var == exact or var.startswith(exact + b"/") for var in environ.split(b"\0")):
                found.append(int(entry))
    else:  # macOS and others: psutil reads what the OS allows for our own processes
        for process in psutil.process_iter(["pid"]):
            if process.info["pid"] in skip:
                continue
            try:
                value = process.environ().get(ENV_RUN_DIR, "")
            except psutil.Error:
                continue
            if value == str(prefix) or value.startswith(f"{prefix}/"):
                found.append(process.info["pid"])
    return [pid for pid in found if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def stop_pids(pids: Iterable[int], grace_s: float) -> list[int]:
    """SIGTERM each process, SIGKILL whatever outlives `grace_s`; returns the PIDs that were signalled."""
    signalled = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(pid) for pid in signalled):
        time.sleep(0.02)
    for pid in signalled:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
    deadline = time.monotonic() + 2.0  # SIGKILL cannot be refused; this only waits for the kernel
    while time.monotonic() < deadline and any(_alive(pid) for pid in signalled):
        time.sleep(0.01)
    return signalled


def stop_run_processes(prefix: Path, grace_s: float) -> list[int]:
    """Stop every leftover process of the run directory (or series directory) `prefix`."""
    with signals_deferred():
        return stop_pids(processes_in_run_dirs(prefix), grace_s)

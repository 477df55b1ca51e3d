"""Helpers of the fault suite: a gate folder around fault_trainer.py, `gate` as a real process, polling.

Everything waits by polling files with generous deadlines (never by fixed sleeps), so the suite holds on a
loaded two-core machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import psutil

from tests.conftest import GATE_TEMPLATE, gate_job_argv, write_toml

HERE = Path(__file__).parent
DEADLINE_S = 90.0
# Rounds 1-3 and 4-6 each average exactly 10.0 (off) and 9.0 (on); retries run as rounds 4 and up.
OFF_TIMES = {"off-r1": 10.0, "off-r2": 10.1, "off-r3": 9.9, "off-r4": 10.0, "off-r5": 10.05, "off-r6": 9.95,
             "off-r7": 10.0, "off-r8": 10.0}
ON_TIMES = {"on-r1": 9.0, "on-r2": 9.1, "on-r3": 8.9, "on-r4": 9.0, "on-r5": 9.05, "on-r6": 8.95,
            "on-r7": 9.0, "on-r8": 9.0}


@dataclass
class FaultGate:
    root: Path

    @property
    def gate(self) -> Path:
        return self.root / "gate.toml"

    @property
    def state(self) -> Path:
        return self.root / "state"

    def order(self) -> list[str]:
        log = self.root / "order.log"
        if not log.exists():
            return []
        return [line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")]

    def series(self) -> Path:
        runs = self.root / "runs"
        (series,) = [p for p in runs.iterdir() if p.is_dir()]
        return series

    def finding(self) -> dict[str, Any]:
        (path,) = (self.root / "findings").glob("*.json")
        return json.loads(path.read_text())

    def pid(self, name: str) -> int:
        return int((self.state / f"{name}.pid").read_text())

    def wait_pid(self, name: str) -> int:
        wait_for(lambda: (self.state / f"{name}.pid").exists(), f"{name}.pid")
        return self.pid(name)

    def wait_holding(self, run: str) -> None:
        wait_for(lambda: (self.state / f"{run}.holding").exists(), f"{run} to start holding")

    def release(self) -> None:
        (self.state / "release").touch()


def fault_gate(root: Path, *, off: dict[str, Any] | None = None, on: dict[str, Any] | None = None,
               both: dict[str, Any] | None = None, **sections: dict[str, Any]) -> FaultGate:
    """gate.toml, off.toml and on.toml around a copy of fault_trainer.py; `both` goes into both arms."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "state").mkdir(exist_ok=True)
    shutil.copy(HERE / "fault_trainer.py", root / "fault_trainer.py")
    gate = {k: (dict(v) if isinstance(v, dict) else list(v)) for k, v in GATE_TEMPLATE.items()}
    gate["driver"] = {**gate["driver"], "argv": ["{python}", "fault_trainer.py", "--config", "{arm_config}"],
                      "hash": ["fault_trainer.py"]}
    for name, values in sections.items():
        gate[name] = {**gate[name], **values} if isinstance(gate[name], dict) else values
    write_toml(root / "gate.toml", gate)
    common = {"log": str(root / "order.log"), "state": str(root / "state"), **(both or {})}
    write_toml(root / "off.toml", {"flags": {"optimizer": "host"}, "elapsed": OFF_TIMES, **common, **(off or {})})
    write_toml(root / "on.toml", {"flags": {"optimizer": "resident"}, "elapsed": ON_TIMES, **common, **(on or {})})
    return FaultGate(root)


def interrupted_series(g: FaultGate, holding: str, sig: signal.Signals = signal.SIGTERM) -> Path:
    """`gate run off on` stopped by `sig` while `holding` holds (exit 130), its held trainer gone: the series
    folder, ready to resume."""
    proc = start_gate("run", "off", "on", cwd=g.root)
    try:
        g.wait_holding(holding)
        proc.send_signal(sig)
        code, _, err = finish(proc)
        assert code == 130, err
    finally:
        kill_quietly(g.pid(holding))
    return g.series()


def gate_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def start_gate(*args: str, cwd: Path, env: dict[str, str] | None = None,
               ignored: tuple[signal.Signals, ...] = ()) -> subprocess.Popen[str]:
    """`gate` as a real background process (its own session, like a job started from a shell; the signals
    in `ignored` ignored, the others at their defaults: see `gate_job_argv`)."""
    return subprocess.Popen(gate_job_argv(*args, ignored=ignored), cwd=cwd, env=env or gate_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(proc: subprocess.Popen[str], timeout: float = DEADLINE_S) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def wait_for(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_dead(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def kill_quietly(*pids: int) -> None:
    """Test cleanup: make sure nothing a failed test left behind keeps running."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def events(series: Path) -> list[dict[str, Any]]:
    """Every journal line parsed; a torn or damaged line fails the test."""
    lines = (series / "journal.jsonl").read_text().split("\n")
    assert lines[-1] == "", "the journal must end with a complete line"
    return [json.loads(line) for line in lines[:-1]]


def assert_journal_consistent(series: Path) -> list[dict[str, Any]]:
    """The journal replays: starts with series_start, every run_end follows its run_start, every finished
    run's record.json equals its journaled record, the hash chain is intact (`gate verify`), and the run in
    flight (if any) has no run_end."""
    from gatekit.verify import verify_series

    verify_series(series)
    journal = events(series)
    assert journal[0]["event"] == "series_start"
    started: list[str] = []
    ended: dict[str, dict[str, Any]] = {}
    for event in journal[1:]:
        if event["event"] == "run_start":
            started.append(event["label"])
        elif event["event"] == "run_end":
            label = event["record"]["label"]
            assert started and started[-1] == label, f"run_end of {label} without its run_start"
            ended[label] = event["record"]
    for label, record in ended.items():
        assert json.loads((series / label / "record.json").read_text()) == record
    return journal


_NAMESPACE: list[bool] = []


def mount_namespace_available() -> bool:
    """Whether `unshare -r -m` may mount a private tmpfs (real ENOSPC and EROFS without root on the host)."""
    if not _NAMESPACE:
        try:
            probe = subprocess.run(["unshare", "-r", "-m", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"],
                                   capture_output=True, timeout=30)
            _NAMESPACE.append(probe.returncode == 0)
        except (FileNotFoundError, subprocess.TimeoutExpired):
            _NAMESPACE.append(False)
    return _NAMESPACE[0]


def in_mount_namespace(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a sh script in a private mount namespace (its tmpfs mounts vanish when it ends); $GATE runs gate."""
    env = gate_env(GATE=f"{sys.executable} -m gatekit.cli")
    return subprocess.run(["unshare", "-r", "-m", "sh", "-uc", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=2 * DEADLINE_S)

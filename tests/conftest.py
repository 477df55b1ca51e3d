"""Shared helpers: a gate folder around the fixture trainer, and `gate` in-process or as a real subprocess.

`gate_invoke` runs the command line in this process through click's CliRunner (the trainers it starts are
still real processes): for tests of what `gate` decides and prints. `gate_cli` starts `python -m
gatekit.cli` as a real process: for tests of the process itself (signals, kills, resume after a kill, exit
codes and streams of the real entry point).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pytest
import tomlkit

FIXTURES = Path(__file__).parent / "fixtures"

GATE_TEMPLATE = {
    "gate": {"id": "fixture", "title": "Fixture gate", "n": 3, "order": "abab", "primary": "train_elapsed_s",
             "direction": "lower", "expect_diff": ["optimizer"], "out": "findings", "runs": "runs",
             "warmup": 0},  # the fixture's runs are warm: tests count and order them without a warm-up run
    "threshold": {"sigma_k": 2.0, "floor_pct": 1.0},
    "guards": [{"metric": "psnr_db", "direction": "higher", "max_drop": 0.05}],
    "rules": {"load_stat": "max", "load_limit": 1000.0, "load_rel_median": 1.5, "sigma_k": 3.0,
              "sigma_ref": "arm", "max_retries": 1, "require_window_samples": True, "sample_interval_s": 0.05},
    "driver": {"name": "command", "argv": ["{python}", "fake_trainer.py", "--config", "{arm_config}"],
               "timeout_s": 30, "hash": ["fake_trainer.py"], "busy_pattern": ""},
    "arms": {"off": {"config": "off.toml"}, "on": {"config": "on.toml"}},
}


@dataclass
class GateDir:
    root: Path

    @property
    def gate(self) -> Path:
        return self.root / "gate.toml"

    @property
    def order_log(self) -> Path:
        return self.root / "order.log"

    def order(self) -> list[str]:
        if not self.order_log.exists():
            return []
        return [line.split()[1] for line in self.order_log.read_text().splitlines() if line.startswith("start")]

    def series_dirs(self) -> list[Path]:
        runs = self.root / "runs"
        return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []

    def findings(self) -> list[Path]:
        out = self.root / "findings"
        return sorted(out.glob("*.json")) if out.exists() else []

    def finding(self) -> dict[str, Any]:
        (path,) = self.findings()
        return json.loads(path.read_text())


def write_toml(path: Path, data: dict[str, Any]) -> None:
    path.write_text(tomlkit.dumps(data))


def make_gate(root: Path, *, off: dict[str, Any] | None = None, on: dict[str, Any] | None = None,
              **sections: dict[str, Any]) -> GateDir:
    """A gate folder: gate.toml, off.toml, on.toml and a copy of the fixture trainer."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "fake_trainer.py", root / "fake_trainer.py")
    gate = {k: (dict(v) if isinstance(v, dict) else list(v)) for k, v in GATE_TEMPLATE.items()}
    for name, values in sections.items():
        gate[name] = {**gate[name], **values} if isinstance(gate.get(name), dict) else values
    write_toml(root / "gate.toml", gate)
    log = str(root / "order.log")
    write_toml(root / "off.toml", {"flags": {"optimizer": "host", "steps": 10}, "log": log, "sleep_s": 0.02, "default_psnr": 30.0,
                                   **(off or {})})
    write_toml(root / "on.toml", {"flags": {"optimizer": "resident", "steps": 10}, "log": log, "sleep_s": 0.02, "default_psnr": 30.0,
                                  **(on or {})})
    return GateDir(root)


@dataclass(frozen=True)
class Invoked:
    """A finished in-process `gate` call, with the attributes tests read on subprocess.CompletedProcess."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def gate_invoke(*args: str, cwd: Path, input: str | None = None) -> Invoked:
    """Run `gate` in this process (click's CliRunner) from `cwd`; the exit code is what the command set.

    In-process calls share os.environ, signal handlers and the working directory with the test: set
    environment variables with monkeypatch. A SystemExit is an exit code; any other exception is a bug in
    gate and is raised again here with its traceback, never turned into exit code 1.
    """
    from click.testing import CliRunner

    from gatekit.cli import main

    previous = os.getcwd()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args), input=input, prog_name="gate")
    finally:
        os.chdir(previous)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert result.exc_info is not None
        raise result.exception.with_traceback(result.exc_info[2])
    # gate installs its own handlers while a series runs; left behind, they would change every later test
    changed = [sig.name for sig, handler in handlers.items() if signal.getsignal(sig) != handler]
    assert not changed, f"gate {' '.join(args)} left signal handlers changed: {', '.join(changed)}"
    return Invoked(args=("gate", *args), returncode=result.exit_code, stdout=result.stdout, stderr=result.stderr)


def gate_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `gate` as a real process (python -m gatekit.cli) and capture its output."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "gatekit.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


# Sets the three signals' dispositions, then becomes `python -m gatekit.cli ARGS` (same pid, same environment).
_AS_A_JOB = """
import os, signal, sys
ignored = set(filter(None, sys.argv[1].split(",")))
for name in ("SIGINT", "SIGTERM", "SIGHUP"):
    signal.signal(getattr(signal, name), signal.SIG_IGN if name in ignored else signal.SIG_DFL)
os.execv(sys.executable, [sys.executable, "-m", "gatekit.cli", *sys.argv[2:]])
"""


def gate_job_argv(*args: str, ignored: Sequence[signal.Signals] = ()) -> list[str]:
    """The argv of `gate ARGS` as a job a terminal starts, for a test that signals it: SIGINT, SIGTERM and
    SIGHUP at their defaults, or those in `ignored` ignored (as `nohup` ignores SIGHUP and a script's
    background job SIGINT), whatever this test session inherited (`nohup make test &` ignores SIGHUP, and an
    ignored signal passes to every child)."""
    return [sys.executable, "-c", _AS_A_JOB, ",".join(sig.name for sig in ignored), *args]


@pytest.fixture
def gate_dir(tmp_path: Path):
    def factory(**kwargs: Any) -> GateDir:
        return make_gate(tmp_path / "gate", **kwargs)
    return factory


@pytest.fixture
def fake_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without trainer processes or load (tests/fakes.py's install_fake_machine): a gate folder of
    `make_gate` with driver={"name": "fake"} runs its trainer in this process, through `gate_invoke` or
    SeriesRunner."""
    from tests.fakes import install_fake_machine

    install_fake_machine(monkeypatch)


@pytest.fixture
def fake_gate_dir(tmp_path: Path, fake_machine: None):
    """`gate_dir` in this process: the same gate folder, its arm files played by FakeDriver (no trainer
    process) on the calm machine of `fake_machine`."""
    def factory(**kwargs: Any) -> GateDir:
        return make_gate(tmp_path / "gate", **{**kwargs, "driver": {"name": "fake", **kwargs.get("driver", {})}})
    return factory

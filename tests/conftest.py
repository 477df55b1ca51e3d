"""Shared helpers: a gate folder around the fixture trainer, and `gate` as a real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomlkit

FIXTURES = Path(__file__).parent / "fixtures"

GATE_TEMPLATE = {
    "gate": {"id": "fixture", "title": "Fixture gate", "n": 3, "order": "abab", "primary": "train_elapsed_s",
             "direction": "lower", "expect_diff": ["optimizer"], "out": "findings", "runs": "runs"},
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


def gate_cli(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `gate` as a real process (python -m gatekit.cli) and capture its output."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "gatekit.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def gate_dir(tmp_path: Path):
    def factory(**kwargs: Any) -> GateDir:
        return make_gate(tmp_path / "gate", **kwargs)
    return factory

"""In-process fakes for decision-flow tests: a driver that starts no process (like hyperfine's MockExecutor).

The arm's config file says what each run "measures", so a test reads like the series it stands for:

    [config]               # the effective config the run echoes (what expect_diff compares)
    ssim_reduce = "host"

    [runs.off-r1]          # label -> metrics; process_wallclock_s, if given, is the run's wallclock
    train_elapsed_s = 125.0938
    psnr_db = 36.125

    [fail]                 # label -> why that run fails (a failed run reports no metric)
    off-r2 = "exit code 1"

    [stderr]               # label -> what the run writes to its stderr.log (default: its failure, if any)
    off-r2 = "Traceback …\nValueError: no such optimizer"

When the gate's `driver.argv` names tests/fixtures/fake_trainer.py (the gate folders of tests/conftest.py's
`make_gate`), the arm file is that trainer's instead, and each run is the trainer's own `perform` called in
this process: the same order log, result file and failures, read back by the command driver's `read_result`.
A test then runs the same gate folder with or without processes by the driver's name alone (conftest's
`fake_gate_dir`).

`FakeDriver.log` lists the labels in the order they ran, so the schedule can be asserted the way hyperfine's
execution_order_tests do. Real trainer processes (tests/fixtures/fake_trainer.py) stay the test of the
trainer contract; this fake is for what gatekit decides from the outcomes.

The machine's load is faked too, so no decision depends on what else the machine runs: `LoadScript` is the
load reader SeriesRunner takes (`load_reader_for`, the run windows and the preflight), and
`install_fake_machine` makes `gate` in this process (the CLI has no reader to inject) find the fake driver
and read a calm machine.
"""

from __future__ import annotations

import os
import time
import tomllib
from importlib.metadata import EntryPoint, EntryPoints
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

import pytest
import tomlkit

import gatekit.driver
import gatekit.sampler

from gatekit.driver import ArmInput, RunRequest
from gatekit.errors import ConfigError
from gatekit.records import CheckResult, RunOutcome
from gatekit.sampler import LoadReader
from gatekit_drivers.command import read_result
from tests.fixtures import fake_trainer

FAKE_TRAINER = "fake_trainer.py"


def fake_gate(gate_id: str, title: str, expect_diff: Sequence[str], **sections: Mapping[str, Any]) -> dict[str, Any]:
    """A gate file (as a dict) run by the fake driver: n = 3, abab, train_elapsed_s lower is better, a psnr_db
    guard. load_limit is high so the preflight's real load check cannot flake on a busy machine; rule (i)
    fires on load_rel_median instead. `sections` update single tables (e.g. rules={"sigma_ref": ...})."""
    gate: dict[str, Any] = {
        "gate": {"id": gate_id, "title": title, "n": 3, "order": "abab", "primary": "train_elapsed_s",
                 "direction": "lower", "expect_diff": list(expect_diff), "out": "findings", "runs": "runs",
                 "warmup": 0},  # the fake driver's runs are warm: tests count and order them without a warm-up
        "threshold": {"sigma_k": 2.0, "floor_pct": 1.0},
        "guards": [{"metric": "psnr_db", "direction": "higher", "max_drop": 0.05}],
        "rules": {"load_stat": "mean", "load_limit": 1000.0, "load_rel_median": 1.5, "sigma_k": 3.0,
                  "sigma_ref": "arm", "max_retries": 1, "sample_interval_s": 0.05},
        "driver": {"name": "fake"},
        "arms": {"off": {"config": "off.toml"}, "on": {"config": "on.toml"}},
    }
    for name, values in sections.items():
        gate[name] = {**gate[name], **values}
    return gate


class FakeDriver:
    """A gatekit.driver.Driver whose runs return what the arm config file says, in microseconds."""

    name = "fake"

    def __init__(self, trainer_root: Path | None = None) -> None:
        self.log: list[str] = []  # labels in execution order
        self.trainer_root = trainer_root  # set: the arm files are fake_trainer.py's, relative to this folder

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: Path, base_dir: Path) -> FakeDriver:
        unknown = sorted(set(options) - {"argv"})  # argv is accepted so gate files stay realistic
        if unknown:
            raise ConfigError(f"{source}: driver.{unknown[0]}: unknown key for the fake driver")
        plays_trainer = any(Path(str(word)).name == FAKE_TRAINER for word in options.get("argv", []))
        return cls(base_dir if plays_trainer else None)

    def preflight(self, arms: Sequence[ArmInput]) -> list[CheckResult]:
        checks = []
        for arm in arms:
            ok = arm.config is not None and arm.config.is_file()
            checks.append(CheckResult(f"fake measurements {arm.name}", ok,
                                      str(arm.config) if ok else f"arms.{arm.name}.config: needs a file"))
        return checks

    def run(self, request: RunRequest) -> RunOutcome:
        self.log.append(request.label)
        assert request.arm.config is not None
        plan = tomllib.loads(request.arm.config.read_text())
        if self.trainer_root is not None:
            return self._perform(plan, request)
        effective = dict(plan.get("config", {}))
        error = plan.get("fail", {}).get(request.label, "")
        measured = dict(plan.get("runs", {}).get(request.label, {}))
        if not error and not measured:
            error = f"fake driver: {request.arm.config.name} has no [runs.{request.label}]"
        wallclock = float(measured.pop("process_wallclock_s", 0.0))
        request.stdout_path.write_text(f"fake run {request.label}\n")
        request.stderr_path.write_text(plan.get("stderr", {}).get(request.label, f"{error}\n" if error else ""))
        if error:
            return RunOutcome(exit_code=1, process_wallclock_s=wallclock, error=error)
        # the trainer contract's result file, as a real trainer would leave it
        request.result_path.write_text(tomlkit.dumps({"metrics": measured, "config": effective}))
        return RunOutcome(exit_code=0, process_wallclock_s=wallclock, metrics=measured, config=effective)

    def _perform(self, plan: dict[str, Any], request: RunRequest) -> RunOutcome:
        """fake_trainer.py's run in this process, its outcome as the command driver would read it."""
        assert self.trainer_root is not None
        began = time.perf_counter()
        exit_code, stdout, stderr = fake_trainer.perform(plan, request.label, request.arm.name,
                                                         str(request.result_path), root=str(self.trainer_root),
                                                         slot=request.env.get("GATEKIT_SLOT"))
        wallclock = time.perf_counter() - began
        request.stdout_path.write_text(stdout)
        request.stderr_path.write_text(stderr)
        metrics, config, trace, problem = read_result(request.result_path)
        error = f"exit code {exit_code}" if exit_code != 0 else problem
        return RunOutcome(exit_code=exit_code, process_wallclock_s=wallclock, metrics=metrics, config=config,
                          trace=trace, error=error)


def calm_load(load1: float = 1.0) -> LoadReader:
    """A load reader for a machine at `load1`, with no pressure-stall or steal counters."""
    return lambda: {"load1": load1, "load5": load1, "load15": load1}


class LoadScript:
    """An injected load reader (SeriesRunner's load_reader_for): `loaded` runs see load1 = `high`, the others
    and the preflight (label "preflight", unless listed) `calm`."""

    def __init__(self, loaded: Collection[str] = (), *, high: float = 9.0, calm: float = 1.0) -> None:
        self.loaded, self.high, self.calm = set(loaded), high, calm

    def __call__(self, label: str) -> LoadReader:
        return calm_load(self.high if label in self.loaded else self.calm)


def install_fake_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without trainer processes or load, for `gate` in this process: FakeDriver is installed as the
    driver "fake" (an entry point, the way every driver registers), and the machine reads calm — load1 1.0
    for the preflight and every run window (os.getloadavg), no pressure-stall or steal counters."""
    installed = gatekit.driver.entry_points
    fake = EntryPoint("fake", f"{__name__}:FakeDriver", gatekit.driver.DRIVER_GROUP)

    def with_fake(**selection: str) -> EntryPoints:
        found = installed(**selection)
        return EntryPoints([*found, fake]) if selection.get("group") == gatekit.driver.DRIVER_GROUP else found

    monkeypatch.setattr(gatekit.driver, "entry_points", with_fake)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.0, 1.0, 1.0))
    monkeypatch.setattr(gatekit.sampler, "read_pressure", lambda *folder: {})
    monkeypatch.setattr(gatekit.sampler, "read_cpu_times", lambda: {})

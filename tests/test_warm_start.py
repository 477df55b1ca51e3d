"""A warm start (`[driver] preload`, issue 31 item 1) with real processes: a warm parent that imported the
preloaded modules once forks every run, and each run is still its own process — its own session and group, its
timeout, the escape sweep, the result-file contract — exactly as a cold run; the parent never outlives the gate,
and a parent that dies is a failed run, not a hang.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tomllib
from pathlib import Path

import pytest

from gatekit.config import load_gate
from gatekit.driver import ArmInput, RunRequest
from gatekit.errors import ConfigError
from gatekit.processes import processes_in_run_dirs
from gatekit.series.runner import SeriesRunner
from gatekit.storage import SeriesLayout
from gatekit_drivers.command import CommandDriver
from tests.conftest import GateDir, write_toml
from tests.faults.faultkit import alive, finish, start_gate, wait_for
from tests.test_escapes import _burners, _with_escape, token  # noqa: F401  (token: the burner's fixture)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="a warm start forks; this system cannot")

PRELOAD = "decimal"  # a stdlib module no fixture imports itself: its presence in a run says it was inherited
DRIVERS = Path(__file__).resolve().parent.parent / "drivers"

# Notes who it is (pid, parent, group, session, whether PRELOAD came from its parent), then runs the fixture
# trainer as usual; in the run named by `kill_parent` it kills its warm parent and waits to be stopped.
WHO_TRAINER = '''
import json, os, runpy, signal, sys, time, tomllib
config = tomllib.load(open(sys.argv[sys.argv.index("--config") + 1], "rb"))
run = os.environ["GATEKIT_RUN"]
with open(config["who"], "a") as handle:
    handle.write(json.dumps({"run": run, "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0),
                             "sid": os.getsid(0), "preloaded": "%s" in sys.modules,
                             "cmdline": open("/proc/self/cmdline").read() if os.path.exists("/proc") else ""}) + "\\n")
if run == config.get("kill_parent"):
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(600)
sys.argv[0] = "fake_trainer.py"
runpy.run_path("fake_trainer.py", run_name="__main__")
''' % PRELOAD


def _warm_gate(gate_dir, *, timeout_s: float = 30, **arm: object) -> tuple[GateDir, Path]:
    g = gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0})
    gate = tomllib.loads(g.gate.read_text())
    gate["driver"].update(argv=["{python}", "who_trainer.py", "--config", "{arm_config}"], preload=[PRELOAD],
                          timeout_s=timeout_s)
    write_toml(g.gate, gate)
    (g.root / "who_trainer.py").write_text(WHO_TRAINER)
    who = g.root / "who.log"
    for name in ("off", "on"):
        path = g.root / f"{name}.toml"
        write_toml(path, {**tomllib.loads(path.read_text()), "who": str(who), **arm})
    return g, who


def _who(log: Path) -> dict[str, dict[str, int | bool]]:
    return {entry["run"]: entry for entry in map(json.loads, log.read_text().splitlines())}


def test_every_run_is_forked_from_one_warm_parent_into_its_own_session(gate_dir) -> None:
    g, who_log = _warm_gate(gate_dir)
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()

    who = _who(who_log)
    assert set(who) == {"off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"}
    (parent,) = {entry["ppid"] for entry in who.values()}
    assert parent != os.getpid() and len({entry["pid"] for entry in who.values()}) == 6
    for entry in who.values():  # a session and group of its own, led by the run; the module came from the parent
        assert entry["pgid"] == entry["sid"] == entry["pid"] and entry["preloaded"] is True
    # its command line names the trainer, as a cold run's does: a busy_pattern finds it
    assert all("who_trainer.py" in entry["cmdline"] for entry in who.values() if entry["cmdline"])
    assert [row.warm_parent for row in result.finding.runs] == [parent] * 6
    assert result.finding.verdict.decision.value == "adopted"
    assert any("warm start: every run forked from 1 warm parent" in item
               for section in result.finding.sections for item in (section.items or ()) if isinstance(item, str))
    # preregistered: the predecision names the preload before the first run
    predecision = tomllib.loads(SeriesLayout(result.series_dir).predecision.read_text())
    assert predecision["driver"]["preload"] == [PRELOAD]
    assert not alive(parent)  # closed with its series


def test_cold_arms_start_cold_beside_warm_ones(gate_dir) -> None:
    """A warm-vs-cold A/A: driver.cold_arms names the arms started as before, preregistered with the rest."""
    g, who_log = _warm_gate(gate_dir)
    gate = tomllib.loads(g.gate.read_text())
    gate["driver"]["cold_arms"] = ["off"]
    write_toml(g.gate, gate)
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()

    who = _who(who_log)
    rows = {row.label: row for row in result.finding.runs}
    for label, entry in who.items():
        cold = label.startswith("off-")
        assert (rows[label].warm_parent is None) == cold and entry["preloaded"] is not cold
        assert entry["ppid"] == (os.getpid() if cold else rows[label].warm_parent)
    predecision = tomllib.loads(SeriesLayout(result.series_dir).predecision.read_text())
    assert predecision["driver"]["cold_arms"] == ["off"]


def test_a_warm_run_that_hangs_times_out_with_its_whole_group(gate_dir) -> None:
    g, who_log = _warm_gate(gate_dir, timeout_s=3, hang=["on-r1"])
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()

    rows = {row.label: row for row in result.finding.runs}
    assert rows["on-r1"].timed_out and rows["on-r1"].exit_code is None
    assert 3.0 <= rows["on-r1"].process_wallclock_s
    hung = _who(who_log)["on-r1"]
    assert not alive(hung["pid"])  # the run, stopped and reaped by its warm parent
    assert processes_in_run_dirs(result.series_dir) == []  # and the grandchild it started
    # the parent served on: the runs after the timeout came from the same one
    assert len({row.warm_parent for row in result.finding.runs}) == 1


def test_a_warm_run_whose_parent_dies_fails_and_the_next_run_gets_a_new_parent(gate_dir) -> None:
    g, who_log = _warm_gate(gate_dir, timeout_s=60, kill_parent="off-r2")
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()

    rows = {row.label: row for row in result.finding.runs}
    failed = rows["off-r2"]
    assert not failed.used and "warm parent" in failed.reason and "exited" in failed.reason
    assert failed.process_wallclock_s < 30  # noticed when the parent's pipe ended, not at the timeout
    who = _who(who_log)
    assert not alive(who["off-r2"]["pid"])  # the orphaned run was stopped with its group
    assert who["on-r2"]["ppid"] != who["off-r2"]["ppid"]  # a fresh parent served the next run
    assert rows["on-r2"].warm_parent == who["on-r2"]["ppid"]


def test_an_escapee_of_a_warm_run_is_stopped_recorded_and_counted(gate_dir, token) -> None:  # noqa: F811
    g, who_log = _warm_gate(gate_dir)
    g, pid_file, _ = _with_escape(g, token)
    gate = tomllib.loads(g.gate.read_text())
    assert gate["driver"]["preload"] == [PRELOAD]
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()

    pid = int(pid_file.read_text())
    assert not _burners(token)
    rows = {row.label: row for row in result.finding.runs}
    (line,) = rows["on-r1"].window.evidence
    assert line.startswith("1 process escaped the run and was stopped: ") and f"pid {pid} " in line
    assert all(row.warm_parent is not None for row in rows.values())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the gate's processes")
def test_the_warm_parent_and_its_run_die_with_a_killed_gate(gate_dir) -> None:
    g, who_log = _warm_gate(gate_dir, timeout_s=600, hang=["off-r1"])
    proc = start_gate("run", "off", "on", cwd=g.root)
    try:
        wait_for(lambda: who_log.exists() and "off-r1" in _who(who_log), "the first run")
        run = _who(who_log)["off-r1"]
        proc.send_signal(signal.SIGKILL)
        finish(proc)
        wait_for(lambda: not alive(run["ppid"]) and not alive(run["pid"]), "the warm parent and its run to exit")
    finally:
        if proc.poll() is None:
            proc.kill()


def _numpy_run(tmp_path: Path, name: str, preload: list[str]) -> dict[str, object]:
    config = tmp_path / "mlp.toml"
    config.write_text('problem = "mnist-mlp"\noptimizer = "resident"\nsteps = 30\nwarmup_steps = 2\nbatch = 16\n'
                      'hidden = 16\nseed = 7\n')
    driver = CommandDriver.from_options(
        {"argv": ["{python}", str(DRIVERS / "numpy_trainer.py"), "--config", "{arm_config}"], "preload": preload,
         "env": {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}},
        source=tmp_path / "gate.toml", base_dir=tmp_path)
    run_dir = tmp_path / name
    run_dir.mkdir()
    try:
        outcome = driver.run(RunRequest(ArmInput("off", config), "off-r1", run_dir, run_dir / "result.json", 120,
                                        run_dir / "stdout.log", run_dir / "stderr.log"))
    finally:
        driver.close()
    assert outcome.exit_code == 0, (outcome.error, (run_dir / "stderr.log").read_text())
    assert ("gatekit_warm_parent" in outcome.trace) == bool(preload)
    return json.loads((run_dir / "result.json").read_text())


def test_the_numpy_trainer_gives_the_same_numbers_warm_and_cold(tmp_path: Path) -> None:
    cold = _numpy_run(tmp_path, "cold", [])
    warm = _numpy_run(tmp_path, "warm", ["numpy"])
    assert warm["metrics"]["final_loss"] == cold["metrics"]["final_loss"]
    assert warm["config"] == cold["config"]


def _options(**changes: object) -> dict[str, object]:
    return {"argv": ["{python}", "trainer.py"], "preload": ["numpy"], **changes}


@pytest.mark.parametrize(("changes", "problem"), [
    ({"preload": "numpy"}, "must be a list of module names"),
    ({"preload": ["numpy;rm"]}, "must be a list of module names"),
    ({"argv": ["{python}", "-c", "pass"]}, "needs driver.argv = [PYTHON, SCRIPT, ...]"),
    ({"argv": ["{python}"]}, "needs driver.argv = [PYTHON, SCRIPT, ...]"),
    ({"argv": ["{python}", "-m", "mytrainer"], "preload": ["mytrainer"]}, "it must load fresh in every run"),
    ({"preload": [], "cold_arms": ["off"]}, "names arms that start cold despite driver.preload, which is not set"),
    ({"cold_arms": "off"}, "must be a list of arm names"),
])
def test_a_preload_the_warm_parent_cannot_serve_is_a_config_error(tmp_path: Path, changes: dict[str, object],
                                                                   problem: str) -> None:
    with pytest.raises(ConfigError, match=r"driver\.(preload|cold_arms): ") as raised:
        CommandDriver.from_options(_options(**changes), source=tmp_path / "gate.toml", base_dir=tmp_path)
    assert problem in str(raised.value) and str(tmp_path / "gate.toml") in str(raised.value)


def test_preload_where_nothing_forks_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "fork")
    with pytest.raises(ConfigError, match=r"driver.preload: a warm start forks .* no fork \(os.fork\); remove"):
        CommandDriver.from_options(_options(), source=tmp_path / "gate.toml", base_dir=tmp_path)

"""No process escapes its run (issue 11, point 4): the exact reproduction — a trainer that starts a CPU
burner with `Popen(..., start_new_session=True, env={})` and returns at once — with real processes.

The burner leaves the trainer's process group and carries no GATEKIT_RUN_DIR, so only the child subreaper
finds it: re-parented to the gate when the trainer exits, it is recorded, stopped and reaped at the end of
its run, counted as evidence for that run, and journaled as `escaped`.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import tomllib
import uuid
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from gatekit import processes
from gatekit.config import load_gate
from gatekit.series.runner import SeriesRunner
from gatekit.storage import SeriesLayout
from tests.conftest import GateDir, gate_cli, write_toml
from tests.test_duet import duet_gate, needs_two_cores
from tests.faults.faultkit import events, finish, start_gate, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the child subreaper is Linux-only")

# Starts the burner, writes its pid, then runs the fixture trainer as usual. Every run first notes whether
# an earlier run's burner is still alive, so the test sees what the next run saw.
ESCAPING_TRAINER = '''
import os, runpy, subprocess, sys, tomllib

ESCAPEES = {
    # burns a CPU until its time is up
    "burner": "import sys, time\\nend = time.monotonic() + float(sys.argv[1])\\nwhile time.monotonic() < end: pass",
    # forks a successor and exits, over and over: at any instant its live process is a new one
    "relay": ("import os, sys, time\\nend = time.monotonic() + float(sys.argv[1])\\n"
              "while time.monotonic() < end:\\n    if os.fork():\\n        os._exit(0)"),
    # answers every SIGTERM by forking a copy of itself in a new session, and exits
    "hydra": ("import os, signal, sys, time\\nend = time.monotonic() + float(sys.argv[1])\\n"
              "def split(signum, frame):\\n    if os.fork():\\n        os._exit(0)\\n    os.setsid()\\n"
              "signal.signal(signal.SIGTERM, split)\\n"
              "while time.monotonic() < end:\\n    time.sleep(0.01)"),
}
config = tomllib.load(open(sys.argv[sys.argv.index("--config") + 1], "rb"))
escape = config["escape"]
run = os.environ["GATEKIT_RUN"]
if os.path.exists(escape["pid_file"]):
    pid = open(escape["pid_file"]).read().strip()
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    with open(escape["seen_file"], "a") as handle:
        handle.write(f"{run} {state}\\n")
if escape["label"] == run:
    burn = ESCAPEES[escape.get("kind", "burner")]
    child = subprocess.Popen([sys.executable, "-c", burn, str(escape["burn_s"]), escape["token"]],
                             start_new_session=escape.get("setsid", True),
                             env=None if escape.get("keep_env") else {}, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(escape["pid_file"] + ".tmp", "w") as handle:
        handle.write(str(child.pid))
    os.rename(escape["pid_file"] + ".tmp", escape["pid_file"])
    if escape.get("hold"):  # stay in the run until the gate is interrupted
        import time
        time.sleep(600)
sys.argv[0] = "fake_trainer.py"
runpy.run_path("fake_trainer.py", run_name="__main__")
'''


def _burners(token: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if token in (process.info["cmdline"] or []):
            found.append(process)
    return found


@pytest.fixture
def token() -> Iterator[str]:
    """A word only this test's burner carries; whatever carries it is killed afterwards, pass or fail."""
    word = f"gatekit-escape-{uuid.uuid4().hex}"
    try:
        yield word
    finally:
        for _ in range(100):  # a relay's live process changes all the time: kill until none is left
            left = _burners(word)
            if not left:
                break
            for process in left:
                try:
                    process.kill()
                except psutil.Error:
                    pass


def _none_alive(token: str) -> bool:
    """No process carrying `token` is alive, checked a few times (a relay is a new process at every look)."""
    for _ in range(5):
        if _burners(token):
            return False
        time.sleep(0.05)
    return True


def _escaping_gate(gate_dir, token: str, **options: object) -> tuple[GateDir, Path, Path]:
    return _with_escape(gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0}), token, **options)


def _with_escape(g: GateDir, token: str, **options: object) -> tuple[GateDir, Path, Path]:
    """The gate's trainer becomes the escaping one; `options` go to its [escape] table."""
    gate = tomllib.loads(g.gate.read_text())
    gate["driver"]["argv"] = ["{python}", "escaping_trainer.py", "--config", "{arm_config}"]
    write_toml(g.gate, gate)
    (g.root / "escaping_trainer.py").write_text(ESCAPING_TRAINER)
    pid_file, seen_file = g.root / "burner.pid", g.root / "seen.log"
    escape = {"label": "on-r1", "burn_s": 60, "token": token, "pid_file": str(pid_file),
              "seen_file": str(seen_file), **options}
    for arm in ("off", "on"):
        path = g.root / f"{arm}.toml"
        data = tomllib.loads(path.read_text())
        write_toml(path, {**data, "escape": escape})
    return g, pid_file, seen_file


def test_a_setsid_burner_with_a_cleared_environment_is_stopped_recorded_and_counted(gate_dir, token) -> None:
    g, pid_file, seen_file = _escaping_gate(gate_dir, token)
    config = load_gate(g.gate)
    was_subreaper = processes.is_subreaper()

    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()

    pid = int(pid_file.read_text())
    # the run after on-r1 no longer saw it: stopped and reaped (not even a zombie) when on-r1 ended
    seen = dict(line.split() for line in seen_file.read_text().splitlines())
    assert seen and set(seen.values()) == {"gone"}, seen
    assert not _burners(token)
    # the run it came from carries the evidence, in its record, the journal and the finding
    record = json.loads((result.series_dir / "on-r1" / "record.json").read_text())
    (line,) = record["window"]["evidence"]
    assert line.startswith("1 process escaped the run and was stopped: ") and f"pid {pid} " in line
    assert token in line
    events = [json.loads(x) for x in SeriesLayout(result.series_dir).journal.read_text().splitlines()]
    escaped = [e for e in events if e["event"] == "escaped"]
    assert [(e["label"], [p["pid"] for p in e["processes"]]) for e in escaped] == [("on-r1", [pid])]
    assert token in escaped[0]["processes"][0]["command"]
    rows = {row.label: row for row in result.finding.runs}
    assert rows["on-r1"].window.evidence == (line,) and rows["on-r1"].load_evidence
    assert all(not row.window.evidence for label, row in rows.items() if label != "on-r1")
    # the escapee is counted once, not also as one the driver stopped by its environment
    assert "gatekit_stopped_escaped_pids" not in record["outcome"].get("trace", {})
    # the gate is a subreaper only while its run loop runs
    assert processes.is_subreaper() == was_subreaper


def test_a_burner_started_by_the_last_run_does_not_outlive_the_gate(gate_dir, token) -> None:
    g, pid_file, _ = _escaping_gate(gate_dir, token)
    for arm in ("off", "on"):  # the very last run of the series starts it
        path = g.root / f"{arm}.toml"
        path.write_text(path.read_text().replace('label = "on-r1"', 'label = "on-r3"'))
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    assert pid_file.exists()
    assert not _burners(token)
    assert [r.label for r in result.finding.runs if r.window.evidence] == ["on-r3"]


def test_the_gate_process_leaves_no_burner_behind(gate_dir, token) -> None:
    """The reproduction through the real entry point: `gate run` as its own process."""
    g, pid_file, _ = _escaping_gate(gate_dir, token)
    done = gate_cli("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert pid_file.exists() and not _burners(token)
    assert f"pid {int(pid_file.read_text())} " in g.finding()["runs"][1]["window"]["evidence"][0]
    assert "escaped the run and was stopped" in done.stdout + done.stderr


def test_a_burner_of_an_interrupted_run_is_stopped_and_journaled(gate_dir, token) -> None:
    """Ctrl-C during the run that started it: the group kill misses it, the subreaper does not."""
    g, pid_file, _ = _escaping_gate(gate_dir, token, hold=True)
    proc = start_gate("run", "off", "on", cwd=g.root)
    try:
        wait_for(pid_file.exists, "the burner's pid file")
        proc.send_signal(signal.SIGINT)
        code, _, err = finish(proc)
        assert code == 130, err
        assert not _burners(token)
        (series,) = g.series_dirs()
        escaped = [e for e in events(series) if e["event"] == "escaped"]
        assert [(e["label"], [p["pid"] for p in e["processes"]]) for e in escaped] == \
            [("on-r1", [int(pid_file.read_text())])]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("kind", ["relay", "hydra"])
def test_an_escapee_that_re_forks_or_forks_on_sigterm_is_frozen_journaled_and_does_not_outlive_the_gate(
        gate_dir, token, kind: str) -> None:
    """Issue 19, point 4: a setsid + env={} process that forks a successor and exits over and over (relay),
    or that answers every SIGTERM by forking a setsid'd copy (hydra). Before, the relay was never journaled
    and the hydra survived the sweeps; both outlived the gate with ppid 1. Now each process found is
    stopped (SIGSTOP) before anything is killed, the search repeats until nothing new appears, and all of it
    gets SIGKILL: journaled for the run that started it, and nothing of it is left after `gate` exits."""
    g, _, _ = _escaping_gate(gate_dir, token, kind=kind, burn_s=60)
    done = gate_cli("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert _none_alive(token)
    (series,) = g.series_dirs()
    escaped = [e for e in events(series) if e["event"] == "escaped"]
    assert [e["label"] for e in escaped] == ["on-r1"]
    # its code as its command line (one that was exiting as it was found has only its name left)
    assert any("os.fork()" in p["command"] for p in escaped[0]["processes"])
    assert [r["label"] for r in g.finding()["runs"] if r["window"].get("evidence")] == ["on-r1"]


def test_a_process_that_outlives_its_runs_sweep_is_an_escapee_of_the_next_run_too(gate_dir, token,
                                                                                 monkeypatch) -> None:
    """Before, the gate's children were listed before each run and never counted as that run's escapees,
    so a descendant that survived its own run's sweep was "known" for every later run. Here the kernel is
    made to drop on-r1's signals (as for a process stuck in the kernel): the next run's sweep finds the
    burner again, charges it to that run and stops it."""
    g, pid_file, seen_file = _escaping_gate(gate_dir, token)
    real_signal = processes._signal
    dropped: list[int] = []

    def stuck_during_on_r1(pid: int, sig: int) -> bool:
        if pid_file.exists() and pid == int(pid_file.read_text()) and not seen_file.exists():
            dropped.append(sig)
            return True  # as if delivered: the process does not stop
        return real_signal(pid, sig)

    monkeypatch.setattr(processes, "_signal", stuck_during_on_r1)
    monkeypatch.setattr(processes, "FREEZE_S", 0.2)
    monkeypatch.setattr(processes, "KILL_WAIT_S", 0.2)
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    pid = int(pid_file.read_text())
    assert dropped  # on-r1's sweep did try to stop it
    seen = dict(line.split() for line in seen_file.read_text().splitlines())
    assert seen["off-r2"] in ("R", "S")  # it outlived on-r1's sweep
    assert seen["on-r2"] == "gone"  # off-r2's sweep stopped it
    assert not _burners(token)
    escaped = [(e["label"], [p["pid"] for p in e["processes"]]) for e in events(result.series_dir)
               if e["event"] == "escaped"]
    assert escaped == [("on-r1", [pid]), ("off-r2", [pid])]


def test_a_child_left_in_the_trainers_group_is_stopped_with_it_at_once(gate_dir, token, monkeypatch) -> None:
    """Re-parented to the gate and killed with the group, it would stay a zombie that keeps the group
    'alive' for the driver's whole grace period; it is reaped at once, and it is no escapee (the group
    kill reached it). Judged by what the driver did, not by the clock (the series took under 5 s only on an
    idle machine): a zombie kept alive would outlast the grace and the group would get SIGKILL."""
    from gatekit_drivers import command

    sent: list[int] = []
    real_signal_group = command._signal_group

    def recorded(pgid: int, sig: int) -> bool:
        sent.append(sig)
        return real_signal_group(pgid, sig)

    monkeypatch.setattr(command, "_signal_group", recorded)
    monkeypatch.setattr(command, "KILL_GRACE_S", 60.0)  # SIGTERM's grace: room for a loaded machine
    g, pid_file, seen_file = _escaping_gate(gate_dir, token, setsid=False)
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    assert signal.SIGTERM in sent and signal.SIGKILL not in sent  # the group emptied within SIGTERM's grace
    assert set(dict(line.split() for line in seen_file.read_text().splitlines()).values()) == {"gone"}
    assert not _burners(token)
    assert not any(row.window.evidence for row in result.finding.runs)
    events = [json.loads(x)["event"] for x in SeriesLayout(result.series_dir).journal.read_text().splitlines()]
    assert "escaped" not in events


@needs_two_cores
def test_a_duet_pairs_escapee_with_a_cleared_environment_is_evidence_for_both_runs(tmp_path: Path, token) -> None:
    """Both runs of a pair end together, so both runs' orphans are the gate's children when the pair ends,
    and one with a cleared environment could be either run's: it is evidence for both, so the contamination
    rule of whichever run it slowed can see it (before, the first run checked took every one)."""
    g, pid_file, _ = _with_escape(duet_gate(tmp_path), token)
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    pid = int(pid_file.read_text())
    assert not _burners(token)
    rows = {row.label: row for row in result.finding.runs}
    assert sorted(label for label, row in rows.items() if row.window.evidence) == ["off-r1", "on-r1"]
    for label in ("off-r1", "on-r1"):
        (line,) = rows[label].window.evidence
        assert line.startswith(f"1 process escaped the pair off-r1 + on-r1 and was stopped: pid {pid} "), line
    escaped = [e for e in events(result.series_dir) if e["event"] == "escaped"]
    assert [(e["label"], [p["pid"] for p in e["processes"]]) for e in escaped] == [("off-r1 + on-r1", [pid])]


@needs_two_cores
def test_a_duet_pairs_escapee_that_names_its_run_is_stopped_with_that_run(tmp_path: Path, token) -> None:
    """One that keeps GATEKIT_RUN_DIR is found by it when its own trainer ends, and recorded in that run's
    outcome alone, though the other run of its pair ran at the same time."""
    g, pid_file, _ = _with_escape(duet_gate(tmp_path), token, keep_env=True)
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    assert not _burners(token)
    stopped = {label: json.loads((result.series_dir / label / "record.json").read_text())["outcome"]
               .get("trace", {}).get("gatekit_stopped_escaped_pids") for label in ("off-r1", "on-r1")}
    assert stopped == {"off-r1": None, "on-r1": [int(pid_file.read_text())]}


def test_no_subreaper_off_linux(monkeypatch) -> None:
    """macOS and others have no subreaper: gatekit says so and falls back to the group kill and env scan."""
    monkeypatch.setattr(processes.sys, "platform", "darwin")
    processes._libc.cache_clear()
    try:
        assert processes.become_subreaper() is False
        assert processes.is_subreaper() is False
        with processes.child_subreaper() as reaper:
            assert reaper.enabled is False
    finally:
        monkeypatch.undo()
        processes._libc.cache_clear()

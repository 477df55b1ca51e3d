"""Signals with real processes: interrupting `gate`, killing it, killing or hanging its trainer."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gatekit.records import LoadSample
from tests.conftest import gate_cli, gate_invoke
from tests.faults.faultkit import (alive, assert_journal_consistent, events, fault_gate, finish, kill_quietly,
                                   start_gate, wait_dead, wait_for)

STOPPED_S = 4.0  # the gate stopped this long mid-run: beyond the 2 s gap limit at any sample interval <= 0.2 s
SIX = ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_during_a_run_stops_the_group_journals_and_resumes(tmp_path: Path, sig: signal.Signals) -> None:
    g = fault_gate(tmp_path / "g", off={"hold": ["off-r2"], "child": ["off-r2"]})
    proc = start_gate("run", "off", "on", cwd=g.root)
    g.wait_holding("off-r2")
    trainer, child = g.pid("off-r2"), g.wait_pid("off-r2.child")
    try:
        proc.send_signal(sig)
        code, _, err = finish(proc)
        assert code == 130, err
        assert f"gate run --resume {g.series()}" in err
        # the trainer's whole process group is gone, grandchild included
        assert wait_dead(trainer) and wait_dead(child)
        journal = assert_journal_consistent(g.series())
        assert {k: v for k, v in journal[-1].items() if k != "prev"} == {"event": "interrupted", "label": "off-r2"}
        assert [e["record"]["label"] for e in journal if e["event"] == "run_end"] == ["off-r1", "on-r1"]
        assert (g.series() / "off-r2" / "samples.csv").exists()  # the cut-off window is kept
    finally:
        kill_quietly(trainer, child)

    done = gate_cli("run", "--resume", str(g.series()), cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert g.order() == ["off-r1", "on-r1", "off-r2", "off-r2", "on-r2", "off-r3", "on-r3"]
    assert (g.series() / "DONE").exists() and (g.series() / "off-r2.cut-1").is_dir()
    finding = g.finding()
    assert [r["label"] for r in finding["runs"]] == SIX and all(r["used"] for r in finding["runs"])
    assert finding["verdict"]["decision"] == "adopted"
    assert_journal_consistent(g.series())


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_the_gate_inherited_ignored_stays_ignored(tmp_path: Path, sig: signal.Signals) -> None:
    """`nohup gate run … &`: nohup ignores SIGHUP (a closed terminal or ssh session sends it), and a shell
    without job control ignores SIGINT in a background job. The gate keeps them ignored: the signal sent
    while on-r2 runs changes nothing, and the gate decides as if none had come. (Sent at its default, the
    same signal interrupts: test_signal_during_a_run_stops_the_group_journals_and_resumes.)"""
    g = fault_gate(tmp_path / "g", on={"hold": ["on-r2"]})
    proc = start_gate("run", "off", "on", cwd=g.root, ignored=(sig,))
    try:
        g.wait_holding("on-r2")
        proc.send_signal(sig)
        g.release()
        code, _, err = finish(proc)
    finally:
        kill_quietly(g.pid("on-r2"))
    assert code == 0, err
    journal = assert_journal_consistent(g.series())
    assert "interrupted" not in [e["event"] for e in journal]
    assert g.order() == SIX and [r["label"] for r in g.finding()["runs"]] == SIX
    assert g.finding()["verdict"]["decision"] == "adopted"


@pytest.fixture
def sighup_ignored():  # type: ignore[no-untyped-def]
    """This process under `nohup`: SIGHUP ignored for the test, as it was before it afterwards."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    yield
    signal.signal(signal.SIGHUP, before)


def test_gates_handlers_leave_an_ignored_signal_ignored(sighup_ignored: None) -> None:
    """What gate run, gate bisect and gate campaign install while they run (`interrupt_on_sigterm`), and
    what a journal write or a cleanup installs for its duration (`signals_deferred`), leave SIGHUP ignored
    when it was; SIGTERM still gets gatekit's handler, and everything is as before once the blocks end."""
    from gatekit.signals import interrupt_on_sigterm, signals_deferred

    term_before = signal.getsignal(signal.SIGTERM)
    with interrupt_on_sigterm():
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) not in (term_before, signal.SIG_IGN, signal.SIG_DFL)
        with signals_deferred():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: neither deferred nor delivered afterwards
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) == term_before


def test_gatekit_installs_signal_handlers_only_through_gatekit_signals() -> None:
    """The rule above holds for every command because no other module of gatekit sets a handler itself."""
    package = Path(__file__).resolve().parents[2] / "gatekit"
    setting = [str(path.relative_to(package)) for path in package.rglob("*.py")
               if "signal.signal(" in path.read_text() and path.name != "signals.py"]
    assert setting == []


def test_repeated_signals_cannot_cut_the_cleanup_short(tmp_path: Path) -> None:
    # The trainer and its grandchild ignore SIGTERM, so stopping them takes the 5 s grace period and a
    # SIGKILL; more signals arrive meanwhile. None may leave a process running or damage the journal.
    g = fault_gate(tmp_path / "g", both={"ignore_term": True}, off={"hold": ["off-r1"], "child": ["off-r1"]})
    proc = start_gate("run", "off", "on", cwd=g.root)
    g.wait_holding("off-r1")
    trainer, child = g.pid("off-r1"), g.wait_pid("off-r1.child")
    try:
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: (g.state / "off-r1.term").exists(), "gate to SIGTERM the trainer's group")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):  # inside the 5 s grace period
            proc.send_signal(sig)
        code, _, err = finish(proc)
        assert code == 130, err
        assert "Traceback" not in err
        assert wait_dead(trainer) and wait_dead(child)
        journal = assert_journal_consistent(g.series())
        assert journal[-1]["event"] == "interrupted"
    finally:
        kill_quietly(trainer, child)


def test_sigkill_of_gate_alone_orphans_the_trainer_and_resume_stops_it(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", off={"hold": ["off-r2"], "escape": ["off-r2"]})
    proc = start_gate("run", "off", "on", cwd=g.root)
    g.wait_holding("off-r2")
    trainer, escaped = g.pid("off-r2"), g.wait_pid("off-r2.escaped")
    try:
        os.kill(proc.pid, signal.SIGKILL)  # gate only: its trainer lives on in its own session
        proc.communicate(timeout=30)
        assert alive(trainer) and alive(escaped)
        journal = assert_journal_consistent(g.series())
        assert journal[-1]["event"] == "run_start" and journal[-1]["label"] == "off-r2"

        # a kill in the middle of a journal write leaves a torn last line; resume must cope with it
        with (g.series() / "journal.jsonl").open("a") as handle:
            handle.write('{"event": "run_end", "record": {"label": "off-r')

        done = gate_cli("run", "--resume", str(g.series()), cwd=g.root)
        assert done.returncode == 0, done.stderr
        assert "stopped 2 leftover trainer process(es)" in done.stderr
        assert not alive(trainer) and not alive(escaped)
    finally:
        kill_quietly(trainer, escaped)
    journal = assert_journal_consistent(g.series())  # the torn line is gone, every line parses
    (stopped,) = [e for e in journal if e["event"] == "leftovers_stopped"]
    assert sorted(stopped["pids"]) == sorted([trainer, escaped])
    assert [r["label"] for r in g.finding()["runs"]] == SIX
    assert g.finding()["verdict"]["decision"] == "adopted"


def test_sigkill_of_the_trainer_is_a_failed_run_that_is_retried(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", off={"hold": ["off-r2"]})
    proc = start_gate("run", "off", "on", cwd=g.root)
    g.wait_holding("off-r2")
    trainer = g.pid("off-r2")
    os.kill(trainer, signal.SIGKILL)
    code, _, err = finish(proc)
    assert code == 0, err
    runs = {r["label"]: r for r in g.finding()["runs"]}
    assert runs["off-r2"]["exit_code"] == -9 and not runs["off-r2"]["used"]
    assert "exit code -9 (SIGKILL)" in runs["off-r2"]["reason"]
    assert runs["off-r4"]["retry_of"] == 2 and runs["off-r4"]["used"] and runs["on-r4"]["used"]
    assert "train_elapsed_s" not in runs["off-r2"]["metrics"]  # a failure never becomes a number
    assert g.finding()["stats"]["n_off"] == 3


def test_a_hanging_trainer_is_killed_with_its_group_and_escaped_grandchildren(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", gate={"n": 2}, driver={"timeout_s": 2.0},
                   on={"hold": ["on-r1"], "child": ["on-r1"], "escape": ["on-r1"]})
    proc = start_gate("run", "off", "on", cwd=g.root)
    try:
        code, _, err = finish(proc)
        trainer, child, escaped = g.pid("on-r1"), g.pid("on-r1.child"), g.pid("on-r1.escaped")
        assert code == 0, err
        assert wait_dead(trainer, 1) and wait_dead(child, 1) and wait_dead(escaped, 1)
    finally:
        for name in ("on-r1", "on-r1.child", "on-r1.escaped"):
            if (g.state / f"{name}.pid").exists():
                kill_quietly(g.pid(name))
    runs = {r["label"]: r for r in g.finding()["runs"]}
    assert runs["on-r1"]["timed_out"] and not runs["on-r1"]["used"]
    assert "timed out after 2 s; process group killed" in runs["on-r1"]["reason"]
    assert runs["on-r1"]["process_wallclock_s"] >= 2.0
    (record,) = [e["record"] for e in events(g.series()) if e["event"] == "run_end"
                 and e["record"]["label"] == "on-r1"]
    assert record["outcome"]["trace"]["gatekit_stopped_escaped_pids"] == [escaped]


def test_a_daemon_left_behind_by_a_finished_run_is_stopped(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", gate={"n": 2}, off={"escape": ["off-r1"]})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    escaped = g.pid("off-r1.escaped")
    try:
        assert done.returncode == 0, done.stderr
        assert not alive(escaped)  # stopped right after off-r1, before on-r1 could be loaded by it
        runs = {r["label"]: r for r in g.finding()["runs"]}
        assert runs["off-r1"]["used"]  # leaving a daemon is not a failure, but it is recorded
        journal = events(g.series())
        (record,) = [e["record"] for e in journal if e["event"] == "run_end" and e["record"]["label"] == "off-r1"]
        assert record["outcome"]["trace"]["gatekit_stopped_escaped_pids"] == [escaped]
    finally:
        kill_quietly(escaped)


def test_ctrl_c_before_any_run_exits_130(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gatekit import cli, preflight

    g = fault_gate(tmp_path / "g")

    def interrupted_preflight(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    monkeypatch.setattr(preflight, "run_checks", interrupted_preflight)  # gate run's preflight, before the series
    result = CliRunner().invoke(cli.main, ["run", "off", "on", "--gate", str(g.gate)])
    assert result.exit_code == 130, result.output
    assert "interrupted before any run started" in result.output
    assert g.order() == [] and not (g.root / "runs").exists()


def test_journal_lines_are_json_even_for_hostile_trainer_output(tmp_path: Path) -> None:
    # NaN, infinities and TOML dates in a trainer's echoed config would make json.dumps(allow_nan=False) fail
    g = fault_gate(tmp_path / "g", gate={"n": 2, "expect_diff": []}, both={
        "result_text": {label: '[metrics]\ntrain_elapsed_s = 10.0\n[config]\nlr = nan\nwhen = 2026-11-30\n'
                        'big = inf\nnested = [[1, 2], {a = -inf}]\n'
                        for label in ("off-r1", "on-r1", "off-r2", "on-r2")}})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    journal = events(g.series())
    configs = [e["record"]["outcome"]["config"] for e in journal if e["event"] == "run_end"]
    assert configs[0] == {"lr": "nan", "when": "2026-11-30", "big": "inf", "nested": [[1, 2], {"a": "-inf"}]}
    assert json.loads(json.dumps(g.finding())) == g.finding()


def test_a_gate_stopped_during_a_run_fails_the_run_and_it_is_retried(tmp_path: Path) -> None:
    """`kill -STOP` of the gate (a terminal's Ctrl-Z) while its trainer goes on in its own session: the gate's
    wallclock and window of that run measure the stop, not the trainer, so the run fails and its pair is
    re-run, like a crash."""
    g = fault_gate(tmp_path / "g", on={"hold": ["on-r2"]})
    proc = start_gate("run", "off", "on", cwd=g.root)
    try:
        g.wait_holding("on-r2")
        os.kill(proc.pid, signal.SIGSTOP)
        g.release()  # the trainer finishes while the gate is stopped
        wait_for(lambda: "end on-r2" in (g.root / "order.log").read_text(), "on-r2 to end")
        time.sleep(STOPPED_S)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    code, _, err = finish(proc)
    assert code == 0, err
    runs = {r["label"]: r for r in g.finding()["runs"]}
    assert runs["on-r2"]["process_wallclock_s"] > STOPPED_S  # what the gate measured: the stop
    assert not runs["on-r2"]["used"], runs["on-r2"]
    assert "the gate was stopped or starved" in runs["on-r2"]["reason"]
    assert runs["on-r4"]["retry_of"] == 2 and runs["on-r4"]["used"] and runs["off-r4"]["used"]
    assert g.finding()["verdict"]["decision"] == "adopted"
    predecision = (g.series() / "predecision.toml").read_text()
    assert "stopped or starved" in predecision
    assert_journal_consistent(g.series())


def test_the_longest_sampler_gap_is_read_from_the_samples_monotonic_times() -> None:
    """A gate stopped as a whole (its sampler thread too) leaves a gap between consecutive samples: the rule
    reads it from the samples' monotonic times, whichever thread was stopped."""
    from gatekit.sampler import longest_gap_s, stopped_gap_limit_s

    times = [0.0, 0.05, 0.10, 3.10, 3.12]
    samples = tuple(LoadSample(t_s=t, load1=1.0, load5=1.0, load15=1.0) for t in times)
    assert longest_gap_s(samples) == pytest.approx(3.0)
    assert longest_gap_s(samples[:3]) == pytest.approx(0.05) and longest_gap_s(samples[:1]) == 0.0
    assert stopped_gap_limit_s(0.05) == 2.0 and stopped_gap_limit_s(1.0) == 10.0

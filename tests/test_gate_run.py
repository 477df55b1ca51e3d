"""`gate run` end to end. The trainer contract, signals, kills and the real entry point run real trainer
processes (tests/fixtures/fake_trainer.py); what gatekit decides from the runs plays the same trainer's arm
files in process (`fake_gate_dir`: FakeDriver on a calm fake machine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest

from gatekit.config import load_gate
from gatekit.series.runner import SeriesRunner
from gatekit.verify import analyze_series
from tests.conftest import gate_cli, gate_invoke, gate_job_argv
from tests.fakes import LoadScript

OFF_TIMES = {"off-r1": 10.0, "off-r2": 10.1, "off-r3": 9.9}
ON_FAST = {"on-r1": 9.0, "on-r2": 9.1, "on-r3": 8.9}


def test_adopted_interleaves_and_writes_the_finding(gate_dir) -> None:
    g = gate_dir(off={"elapsed": OFF_TIMES, "default_psnr": 30.0}, on={"elapsed": ON_FAST, "default_psnr": 30.01})
    done = gate_invoke("run", "off", "on", "--n", "3", cwd=g.root)
    assert done.returncode == 0, done.stderr
    # the interleaving the trainer actually saw
    assert g.order() == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]
    finding = g.finding()
    assert finding["schema"] == "gatekit.finding/2"
    assert finding["verdict"]["decision"] == "adopted"
    # Δ by hand: off mean 10.0, on mean 9.0 → −10 %; σ_off = 0.1/10 = 1 % → threshold max(2 %, 1 %) = 2 %
    assert finding["stats"]["delta_pct"] == pytest.approx(-10.0)
    assert finding["stats"]["sigma_off_pct"] == pytest.approx(1.0)
    assert finding["stats"]["threshold_pct"] == pytest.approx(2.0)
    assert finding["stats"]["pairs_consistent"] == "3/3"
    assert finding["guards"]["psnr_db"]["pass"] is True
    assert [r["label"] for r in finding["runs"]] == g.order()
    for run in finding["runs"]:
        assert run["window"]["samples"] >= 2 and run["process_wallclock_s"] > 0 and run["used"]
    # terminal summary and progress
    assert "VERDICT: ADOPTED" in done.stdout and "Δ -10.0000 %" in done.stdout
    assert "[6/6] on-r3 starting" in done.stderr and "left" in done.stderr
    # series directory contract
    (series,) = g.series_dirs()
    assert (series / "DONE").exists() and (series / "predecision.toml").exists()
    for label in g.order():
        assert {"stdout.log", "stderr.log", "result", "samples.csv"} <= {p.name for p in (series / label).iterdir()}
    events = [json.loads(line)["event"] for line in (series / "journal.jsonl").read_text().splitlines()]
    assert events[0] == "series_start" and events[-1] == "series_end" and events.count("run_end") == 6
    # TOML and JSON hold the same content
    toml_data = tomllib.loads(g.findings()[0].with_suffix(".toml").read_text())
    assert toml_data == finding


def test_predecision_is_written_and_hashed_before_the_first_run(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": OFF_TIMES}, on={"elapsed": ON_FAST})
    assert gate_invoke("run", "off", "on", cwd=g.root).returncode == 0
    (series,) = g.series_dirs()
    lines = [json.loads(line) for line in (series / "journal.jsonl").read_text().splitlines()]
    start = lines[0]
    import hashlib
    assert hashlib.sha256((series / "predecision.toml").read_bytes()).hexdigest() == start["predecision_sha256"]
    assert lines[1]["event"] == "run_start"  # nothing ran before the rules were registered
    predecision = tomllib.loads((series / "predecision.toml").read_text())
    assert predecision["decision"]["rules"]["load_stat"] == "max"
    assert predecision["schedule"] == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]
    assert set(predecision["arm_configs"]) == {"off", "on"} and len(predecision["artifacts"]) == 1
    assert any("window's max of load1" in line for line in predecision["stated_rules"])
    finding = g.finding()
    assert finding["predecision"]["sha256"] == start["predecision_sha256"]


def test_a_a_is_not_adopted(fake_gate_dir) -> None:
    same = {"off-r1": 10.0, "off-r2": 10.05, "off-r3": 9.97, "on-r1": 10.02, "on-r2": 9.99, "on-r3": 10.03}
    g = fake_gate_dir(off={"elapsed": same, "flags": {"optimizer": "host"}, "default_psnr": 30.0},
                      on={"elapsed": same, "flags": {"optimizer": "host"}, "default_psnr": 30.0},
                      gate={"expect_diff": []})
    done = gate_invoke("run", "off", "on", "--fail-on", "not-adopted", cwd=g.root)
    assert g.finding()["verdict"]["decision"] == "rejected"
    assert done.returncode == 1  # --fail-on not-adopted


def test_guard_failed(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": OFF_TIMES, "default_psnr": 30.0}, on={"elapsed": ON_FAST, "default_psnr": 29.9})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0
    finding = g.finding()
    assert finding["verdict"]["decision"] == "guard_failed"
    assert finding["guards"]["psnr_db"]["delta"] == pytest.approx(-0.1)
    assert any("guard psnr_db failed" in r for r in finding["verdict"]["reasons"])


def test_regression_with_fail_on_exits_1(fake_gate_dir) -> None:
    slow = {"on-r1": 11.0, "on-r2": 11.1, "on-r3": 10.9}
    g = fake_gate_dir(off={"elapsed": OFF_TIMES}, on={"elapsed": slow}, guards=[])
    assert gate_invoke("run", "off", "on", cwd=g.root).returncode == 0  # decided, no --fail-on
    assert g.finding()["verdict"]["decision"] == "regression"
    g2 = fake_gate_dir(off={"elapsed": OFF_TIMES}, on={"elapsed": slow}, guards=[])
    for path in g2.findings():
        path.unlink()
    done = gate_invoke("run", "off", "on", "--fail-on", "regression", "--json", cwd=g2.root)
    assert done.returncode == 1
    assert json.loads(done.stdout)["verdict"]["decision"] == "regression"


def test_artifact_changed_mid_series_is_invalid_exit_3(fake_gate_dir) -> None:
    target = "fake_trainer.py"  # the trainer edits its own hashed source during on-r1
    g = fake_gate_dir(off={"elapsed": OFF_TIMES}, on={"elapsed": ON_FAST, "touch": {"label": "on-r1", "path": target}})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 3
    finding = g.finding()
    assert finding["verdict"]["decision"] == "invalid"
    reason = " ".join(finding["verdict"]["reasons"])
    assert "fake_trainer.py changed: sha256 " in reason and " -> " in reason
    assert g.order() == ["off-r1", "on-r1"]  # the series stopped at once


def test_effective_config_must_differ_exactly_in_expect_diff(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": OFF_TIMES, "flags": {"optimizer": "host", "steps": 10}},
                      on={"elapsed": ON_FAST, "flags": {"optimizer": "resident", "steps": 20}})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 3
    reasons = " ".join(g.finding()["verdict"]["reasons"])
    assert "undeclared effective-config key(s): steps" in reasons


def test_silent_fallback_is_refused(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": OFF_TIMES, "flags": {"optimizer": "host"}},
                      on={"elapsed": ON_FAST, "flags": {"optimizer": "host"}})
    assert gate_invoke("run", "off", "on", cwd=g.root).returncode == 3
    assert "do not differ in the effective config: optimizer" in " ".join(g.finding()["verdict"]["reasons"])


def test_crash_is_retried_once_at_the_end(gate_dir) -> None:
    # a real trainer process: its non-zero exit is a failed run, recorded with its logs (the trainer contract)
    g = gate_dir(off={"elapsed": {**OFF_TIMES, "off-r4": 10.0}, "crash": ["off-r2"]},
                 on={"elapsed": {**ON_FAST, "on-r4": 9.0}})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert g.order() == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3", "off-r4", "on-r4"]
    runs = {r["label"]: r for r in g.finding()["runs"]}
    assert runs["off-r2"]["exit_code"] == 1 and not runs["off-r2"]["used"]
    assert not runs["on-r2"]["used"] and runs["on-r4"]["retry_of"] == 2 and runs["on-r4"]["used"]
    assert "failed" in runs["off-r2"]["reason"]
    assert g.finding()["verdict"]["decision"] == "adopted"
    assert "simulated crash" in (g.series_dirs()[0] / "off-r2" / "stderr.log").read_text()


def test_crash_twice_is_invalid(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": OFF_TIMES, "crash": ["off-r2", "off-r4"]}, on={"elapsed": ON_FAST})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 3
    # one retry, no chain: the series stops at off-r4, whose failure can no longer be retried
    assert g.order()[-2:] == ["on-r3", "off-r4"]
    reasons = " ".join(g.finding()["verdict"]["reasons"])
    assert "off-r4 failed: exit code 1" in reasons and "no retry left" in reasons


def test_timeout_kills_the_process_group(gate_dir) -> None:
    g = gate_dir(off={"elapsed": OFF_TIMES}, on={"elapsed": ON_FAST, "hang": ["on-r1"]},
                 driver={"timeout_s": 1.0})
    done = gate_invoke("run", "off", "on", "--n", "2", cwd=g.root)
    runs = {r["label"]: r for r in g.finding()["runs"]}
    assert runs["on-r1"]["timed_out"] and not runs["on-r1"]["used"]
    assert "timed out" in runs["on-r1"]["reason"]
    # the sleeping grandchild the trainer spawned is gone too (only this gate's: it runs in the gate folder;
    # other suites on a shared machine may have their own sleepers)
    leftover = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        if "import time; time.sleep(600)" in (process.info["cmdline"] or []) and process.info["cwd"] == str(g.root):
            leftover.append(process.pid)
    assert leftover == []
    assert done.returncode in (0, 3)


def test_regex_metrics_from_stdout_and_stderr(gate_dir) -> None:
    metrics = {"train_elapsed_s": r"train elapsed: ([0-9.]+)s", "psnr_db": r"psnr: ([0-9.]+) dB"}
    g = gate_dir(off={"elapsed": OFF_TIMES, "stdout_only": True, "default_psnr": 30.0},
                 on={"elapsed": ON_FAST, "stdout_only": True, "default_psnr": 30.0},
                 driver={"metrics": metrics}, gate={"expect_diff": []})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    finding = g.finding()
    assert finding["runs"][0]["metrics"]["train_elapsed_s"] == 10.0
    assert finding["runs"][0]["metrics"]["psnr_db"] == 30.0  # found in stderr
    assert finding["verdict"]["decision"] == "adopted"
    assert any("echoed no effective config" in w for w in finding["verdict"]["warnings"])


def test_orders_abba_and_random_are_what_the_trainer_saw(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": {**OFF_TIMES, "off-r4": 10.0}}, on={"elapsed": {**ON_FAST, "on-r4": 9.0}})
    assert gate_invoke("run", "off", "on", "--n", "4", "--order", "abba", cwd=g.root).returncode == 0
    assert g.order() == ["off-r1", "on-r1", "on-r2", "off-r2", "off-r3", "on-r3", "on-r4", "off-r4"]
    from gatekit.schedule import plan
    g.order_log.unlink()
    assert gate_invoke("run", "off", "on", "--order", "random", "--seed", "7", cwd=g.root).returncode == 0
    assert g.order() == [s.label for s in plan("off", "on", 3, "random", 7)]


def test_analyze_reproduces_the_finding_exactly(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": OFF_TIMES, "default_psnr": 30.0}, on={"elapsed": ON_FAST, "default_psnr": 30.0})
    assert gate_invoke("run", "off", "on", cwd=g.root).returncode == 0
    (series,) = g.series_dirs()
    done = gate_invoke("analyze", str(series), "--json", cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert done.stdout == g.findings()[0].read_text()
    # a predecision edited after the fact is refused: the journal's chain is anchored on its sha256
    predecision = series / "predecision.toml"
    predecision.write_text(predecision.read_text().replace('load_stat = "max"', 'load_stat = "mean"'))
    done = gate_invoke("analyze", str(series), cwd=g.root)
    assert done.returncode == 3 and "(series_start): prev does not match" in done.stderr
    assert "predecision.toml" in done.stderr


def test_contamination_needs_load_and_deviation_and_retries_the_pair(fake_gate_dir) -> None:
    # leave-one-out σ so rule (ii) can fire at n=3; off-r2 is slow AND loaded → contaminated
    times = {"off-r1": 10.0, "off-r2": 12.0, "off-r3": 10.02, "off-r4": 10.01}
    g = fake_gate_dir(off={"elapsed": times}, on={"elapsed": {**ON_FAST, "on-r4": 9.0}},
                      rules={"sigma_ref": "leave_one_out", "load_limit": 6.0})
    config = load_gate(g.gate)
    runner = SeriesRunner(config, config.arms["off"], config.arms["on"], load_reader_for=LoadScript({"off-r2"}))
    result = runner.start()
    assert g.order()[-2:] == ["off-r4", "on-r4"]
    runs = {r["label"]: r for r in result.finding.to_dict()["runs"]}
    assert runs["off-r2"]["contaminated"] and runs["off-r2"]["load_evidence"] and not runs["off-r2"]["used"]
    assert runs["off-r2"]["window"]["load1_max"] == 9.0
    assert "contaminated" in runs["off-r2"]["reason"]
    assert not runs["on-r2"]["used"] and runs["off-r4"]["used"] and runs["off-r4"]["retry_of"] == 2
    assert result.finding.decision == "adopted"
    # the same journal analysed offline gives the same finding
    assert analyze_series(result.series_dir).to_dict() == result.finding.to_dict()


def test_load_alone_or_deviation_alone_never_retries(fake_gate_dir) -> None:
    times = {"off-r1": 10.0, "off-r2": 12.0, "off-r3": 10.02}
    g = fake_gate_dir(off={"elapsed": times}, on={"elapsed": ON_FAST},
                      rules={"sigma_ref": "leave_one_out", "load_limit": 6.0})
    config = load_gate(g.gate)
    # off-r1 is loaded but not deviant; off-r2 is deviant but not loaded
    result = SeriesRunner(config, config.arms["off"], config.arms["on"],
                          load_reader_for=LoadScript({"off-r1"})).start()
    assert len(g.order()) == 6
    runs = {r["label"]: r for r in result.finding.to_dict()["runs"]}
    assert runs["off-r1"]["load_evidence"] and not runs["off-r1"]["contaminated"]
    assert runs["off-r2"]["z"] > 3 and not runs["off-r2"]["contaminated"]
    assert all(r["used"] for r in runs.values())


def test_resume_after_sigkill_does_not_repeat_finished_runs(gate_dir) -> None:
    g = gate_dir(off={"elapsed": OFF_TIMES, "sleep_s": 0.6}, on={"elapsed": ON_FAST, "sleep_s": 0.6})
    proc = subprocess.Popen([sys.executable, "-m", "gatekit.cli", "run", "off", "on"], cwd=g.root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and g.order().count("off-r2") == 0:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # gate and its trainer, mid-way through off-r2
    proc.wait()
    (series,) = g.series_dirs()
    assert not (series / "DONE").exists()
    before = g.order()
    done = gate_cli("run", "--resume", str(series), cwd=g.root)
    assert done.returncode == 0, done.stderr
    after = g.order()[len(before):]
    assert after[0] == "off-r2"  # the run cut off mid-way is run again ...
    assert "off-r1" not in after and "on-r1" not in after  # ... finished ones are not
    assert (series / "DONE").exists() and (series / "off-r2.cut-1").is_dir()
    assert g.finding()["verdict"]["decision"] == "adopted"
    assert [r["label"] for r in g.finding()["runs"]] == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]
    refused = gate_cli("run", "--resume", str(series), cwd=g.root)
    assert refused.returncode == 2 and "finished" in refused.stderr


def test_sigint_stops_the_trainer_and_exits_130(gate_dir) -> None:
    g = gate_dir(off={"elapsed": OFF_TIMES, "sleep_s": 30}, on={"elapsed": ON_FAST})
    proc = subprocess.Popen(gate_job_argv("run", "off", "on"), cwd=g.root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not g.order():
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "--resume" in stderr
    leftover = subprocess.run(["pgrep", "-f", str(g.root / "off.toml")], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
    (series,) = g.series_dirs()
    events = [json.loads(line)["event"] for line in (series / "journal.jsonl").read_text().splitlines()]
    assert events[-1] == "interrupted"


def test_gate_drivers_lists_the_command_driver(tmp_path: Path) -> None:
    done = gate_invoke("drivers", cwd=tmp_path)
    assert done.returncode == 0
    assert "command\tgatekit_drivers.command:CommandDriver" in done.stdout


def test_busy_pattern_blocks_the_series(gate_dir) -> None:
    g = gate_dir(driver={"busy_pattern": "fake_trainer_busy_marker"})
    blocker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "fake_trainer_busy_marker"])
    try:
        done = gate_invoke("run", "off", "on", cwd=g.root)
    finally:
        blocker.kill()
        blocker.wait()
    assert done.returncode == 4 and "busy_pattern" in done.stderr  # the machine's state: exit 4, as a full disk
    assert g.order() == []


def test_git_head_move_is_a_warning_with_the_files_it_touched(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"elapsed": OFF_TIMES, "commit": {"label": "off-r2", "file": "docs/notes.md"}},
                      on={"elapsed": ON_FAST})
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=g.root, check=True)
    (g.root / ".gitignore").write_text("runs/\nfindings/\norder.log\n")
    subprocess.run([*git, "add", "."], cwd=g.root, check=True)
    subprocess.run([*git, "commit", "-qm", "start"], cwd=g.root, check=True)
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    finding = g.finding()
    git_info = finding["provenance"]["git"]
    assert git_info["start"]["rev"] != git_info["end"]["rev"] and git_info["moved"] is True
    assert "docs/notes.md" in git_info["diff_stat"]
    assert any("git HEAD moved during the series" in w for w in finding["verdict"]["warnings"])
    assert finding["verdict"]["decision"] == "adopted"  # a warning, not an error
    assert finding["meta"]["commit"] == git_info["start"]["rev"]
    assert finding["meta"]["config_paths"] == ["off.toml", "on.toml"]  # relative to the repository


def test_run_json_is_the_finding_document(gate_dir) -> None:
    g = gate_dir(off={"elapsed": OFF_TIMES}, on={"elapsed": ON_FAST})
    done = gate_cli("run", "off", "on", "--json", cwd=g.root)
    assert done.returncode == 0
    assert done.stdout == g.findings()[0].read_text()
    assert "VERDICT: ADOPTED" in done.stderr  # the summary moves to stderr

"""`gate campaign`: the campaign file, the local engine (real gate processes, pinned), the journal and
--resume, the summary of all gates, exit codes; and the Ray engine with a worker killed mid-gate.

The gates run tests/fixtures/campaign/trainer.py, which logs the CPU cores and GPUs each run saw. The Ray
tests share one local Ray session (2 CPUs) and skip when Ray is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from gatekit.campaign import (CAMPAIGN_COPY, CAMPAIGN_JOURNAL, CampaignOptions, CampaignStart, JournaledGate,
                              load_campaign, run_campaign)
from gatekit.engines import (GateOutcome, GateStatus, GateTask, Pinning, core_sets, outcome_of, pack_gate_files,
                             unpack_gate_files, visible_gpus)
from gatekit.errors import ConfigError
from gatekit.slots import usable_cpus
from gatekit.storage import Journal
from tests.conftest import GATE_TEMPLATE, gate_cli, gate_invoke, write_toml

TRAINER = Path(__file__).parent / "fixtures" / "campaign" / "trainer.py"
OFF_TIMES = {"off-r1": 10.0, "off-r2": 10.02, "off-r3": 9.98}
FAST = 9.0  # 10 % faster than off: adopted
SAME = {"off-r1": 10.0, "off-r2": 10.02, "off-r3": 9.98, "on-r1": 10.01, "on-r2": 9.99, "on-r3": 10.0}


def make_gate(folder: Path, gate_id: str, *, on: dict[str, Any], off: dict[str, Any] | None = None) -> Path:
    """A gate folder with the campaign trainer; each run appends a line to <folder>/runs.log."""
    folder.mkdir(parents=True)
    shutil.copy(TRAINER, folder / "trainer.py")
    gate = {k: (dict(v) if isinstance(v, dict) else list(v)) for k, v in GATE_TEMPLATE.items()}
    gate["gate"] = {**gate["gate"], "id": gate_id}
    gate["driver"] = {**gate["driver"], "argv": ["{python}", "trainer.py", "--config", "{arm_config}"],
                      "hash": ["trainer.py"]}
    write_toml(folder / "gate.toml", gate)
    log = str(folder / "runs.log")
    write_toml(folder / "off.toml", {"flags": {"optimizer": "host"}, "elapsed": OFF_TIMES, "log": log, **(off or {})})
    write_toml(folder / "on.toml", {"flags": {"optimizer": "resident"}, "log": log, **on})
    return folder / "gate.toml"


def make_campaign(root: Path, gates: list[tuple[str, dict[str, Any]]], *, campaign_id: str = "nightly") -> Path:
    lines = [f'[campaign]\nid = "{campaign_id}"\nout = "findings"\nruns = "runs"\n']
    for gate_id, on in gates:
        make_gate(root / gate_id, gate_id, on=on)
        lines.append(f'[[gates]]\ngate = "{gate_id}/gate.toml"\noff = "off"\non = "on"\nresources = {{ gpus = 0 }}\n')
    path = root / "campaign.toml"
    path.write_text("\n".join(lines))
    return path


def journal(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / CAMPAIGN_JOURNAL).read_text().splitlines()]


def run_lines(gate_folder: Path) -> list[str]:
    log = gate_folder / "runs.log"
    return log.read_text().splitlines() if log.exists() else []


def campaign_folder(stdout: str) -> Path:
    return Path(next(line for line in stdout.splitlines() if line.startswith("campaign: ")).split(": ", 1)[1])


# -- the campaign file ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text, key, problem", [
    ('[campaign]\nid = "n"\n', "gates", "is required"),
    ('[campaign]\nid = "n"\nrun = "x"\n[[gates]]\ngate = "g/gate.toml"\noff = "off"\non = "on"\n',
     "campaign.run", "did you mean 'runs'?"),
    ('[campaign]\nid = "n"\n[[gates]]\ngate = "g/gate.toml"\noff = "off"\non = "on"\nresources = { gpus = -1 }\n',
     "gates[0].resources.gpus", "must be 0 or more, got -1"),
    ('[campaign]\nid = "n"\n[[gates]]\ngate = "g/gate.toml"\noff = "off"\non = "fast"\n',
     "gates[0].on", "defines no arm 'fast' (it defines: off, on)"),
    ('[campaign]\nid = "n"\n[[gates]]\ngate = "missing.toml"\noff = "off"\non = "on"\n', "gates[0].gate",
     "file not found"),
    ('[campaign]\nid = "n"\n[[gates]]\ngate = "g/gate.toml"\noff = "off"\non = "on"\nresources = { gpu = 1 }\n',
     "gates[0].resources.gpu", "did you mean 'gpus'?"),
    ('[campaign]\nid = "n n"\n[[gates]]\ngate = "g/gate.toml"\noff = "off"\non = "on"\n', "campaign.id",
     "must be 1-64 letters"),
])
def test_a_bad_campaign_file_is_exit_2_naming_file_key_and_problem(tmp_path: Path, text: str, key: str,
                                                                   problem: str) -> None:
    make_gate(tmp_path / "g", "g", on={"elapsed": FAST})
    (tmp_path / "campaign.toml").write_text(text)
    done = gate_invoke("campaign", "campaign.toml", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"gate: error: {tmp_path / 'campaign.toml'}: {key}: ") and problem in line, line
    assert not (tmp_path / "runs").exists()  # nothing ran, no campaign folder


def test_the_campaign_file_reads_to_typed_gates(tmp_path: Path) -> None:
    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST}), ("beta", {"elapsed": SAME})])
    path.write_text(path.read_text().replace("resources = { gpus = 0 }", "resources = { gpus = 2, cpus = 3 }", 1))
    campaign = load_campaign(path)
    assert (campaign.id, campaign.out, campaign.runs) == ("nightly", tmp_path / "findings", tmp_path / "runs")
    first, second = campaign.gates
    assert (first.gate_path, first.off, first.on, first.gpus, first.cpus) == (tmp_path / "alpha" / "gate.toml",
                                                                             "off", "on", 2, 3)
    assert (first.key, second.key) == ("01-alpha-off-on", "02-beta-off-on")
    assert (second.gpus, second.cpus) == (0, 1)


def test_more_gpus_than_the_host_gives_is_exit_2_before_anything_runs(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST})])
    path.write_text(path.read_text().replace("gpus = 0", "gpus = 1"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    done = gate_invoke("campaign", "campaign.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert f"{path}: gates[0].resources.gpus: needs 1 GPU(s), this host gives 0" in done.stderr
    assert not (tmp_path / "runs").exists()


# -- plans and packing (pure) ----------------------------------------------------------------------------

def test_cores_are_split_into_disjoint_equal_sets() -> None:
    assert core_sets([0, 1, 2, 3, 4, 5, 6, 7], 2) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert core_sets([3, 1, 2, 0, 4], 2) == [(0, 1, 2), (3, 4)]  # the first set takes the odd core
    assert core_sets([0, 1], 1) == [(0, 1)]
    with pytest.raises(ConfigError, match="--max-parallel: 3 gates at once need at least 3 CPU cores"):
        core_sets([0, 1], 3)


def test_visible_gpus_follow_cuda_visible_devices() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ("2", "3")
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == ()


def test_a_gates_files_come_back_under_the_campaign_of_another_machine(tmp_path: Path) -> None:
    worker, home = tmp_path / "worker", tmp_path / "home"
    task = GateTask("01-g-off-on", Path("/x/gate.toml"), "off", "on", worker / "c" / "01-g-off-on", worker / "out",
                    worker / "c" / "logs" / "01-g-off-on.log", worker / "c")
    (task.runs_dir / "g-1" / "off-r1").mkdir(parents=True)
    (task.runs_dir / "g-1" / "journal.jsonl").write_text('{"event": "series_start"}\n')
    (task.runs_dir / "g-1" / "off-r1" / "record.json").write_text("{}")
    (task.runs_dir / "g-1" / ".record.json.abcdefgh.tmp").write_text("half")
    task.log_path.parent.mkdir(parents=True)
    task.log_path.write_text("gate log\n")
    task.out_dir.mkdir()
    (task.out_dir / "g-2026.json").write_text("{}")
    (task.out_dir / "g-2026.toml").write_text("")
    outcome = GateOutcome(task.key, GateStatus.FINISHED, 0, task.runs_dir / "g-1", task.out_dir / "g-2026.json")
    packed = pack_gate_files(task, outcome)
    here = GateTask(task.key, task.gate_path, "off", "on", home / "c" / task.key, home / "out",
                    home / "c" / "logs" / f"{task.key}.log", home / "c")
    written = unpack_gate_files(packed, here)
    assert sorted(p.relative_to(home).as_posix() for p in written) == [
        "c/01-g-off-on/g-1/journal.jsonl", "c/01-g-off-on/g-1/off-r1/record.json", "c/logs/01-g-off-on.log",
        "out/g-2026.json", "out/g-2026.toml"]
    assert (home / "c" / "logs" / "01-g-off-on.log").read_text() == "gate log\n"
    assert unpack_gate_files(packed, here) == []  # the same bytes already there (a worker on this host)


# -- the local engine ---------------------------------------------------------------------------------------

def test_two_gates_in_parallel_pinned_apart_summarised_and_resumed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST}), ("beta", {"elapsed": SAME})])
    path.write_text(path.read_text().replace("gpus = 0", "gpus = 1"))  # the trainer only reports what it sees
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")  # this host's GPUs, as the campaign sees them
    cores = list(usable_cpus())
    if len(cores) < 2:
        pytest.skip("needs 2 CPU cores to pin two gates apart")
    done = gate_invoke("campaign", str(path), "--max-parallel", "2", "--fail-on", "not-adopted",
                       "--summary-md", "summary.md", "--junit", "junit.xml", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # beta is not adopted
    folder = campaign_folder(done.stdout)
    # each gate's runs saw one core set; the two sets are disjoint halves of ours
    seen = {}
    for gate in ("alpha", "beta"):
        lines = run_lines(tmp_path / gate)
        assert len(lines) == 6, lines
        (cores_text,) = {line.split()[1] for line in lines}
        seen[gate] = {int(c) for c in cores_text.removeprefix("cores=").split(",")}
        (gpu_text,) = {line.split()[2] for line in lines}
        seen[f"{gate} gpu"] = gpu_text
    assert seen["alpha"].isdisjoint(seen["beta"]) and seen["alpha"] | seen["beta"] == set(cores)
    assert {seen["alpha gpu"], seen["beta gpu"]} == {"gpus='5'", "gpus='7'"}  # one GPU each, not the same
    events = journal(folder)
    starts = [e for e in events if e["event"] == "gate_start"]
    assert {tuple(e["pinning"]["cores"]) for e in starts} == {tuple(sorted(seen[g])) for g in ("alpha", "beta")}
    assert sorted(e["pinning"]["gpus"] for e in starts) == [["5"], ["7"]]
    ends = {e["outcome"]["key"]: e["outcome"] for e in events if e["event"] == "gate_end"}
    assert {k: (o["status"], o["decision"]) for k, o in ends.items()} == {
        "01-alpha-off-on": ("finished", "adopted"), "02-beta-off-on": ("finished", "rejected")}
    for outcome in ends.values():  # journaled relative to the campaign folder, so it can move
        finding, series = (Path(os.path.normpath(folder / outcome[k])) for k in ("finding", "series_dir"))
        assert not Path(outcome["finding"]).is_absolute() and not Path(outcome["series_dir"]).is_absolute()
        assert finding.is_file() and finding.parent == tmp_path / "findings"
        assert (series / "DONE").is_file() and series.parent == folder / outcome["key"]
    # one summary and one JUnit cover both gates; the site indexes both findings
    for summary in (tmp_path / "summary.md", folder / "summary.md"):
        text = summary.read_text()
        assert "| alpha | adopted |" in text and "| beta | rejected |" in text
    junit = (tmp_path / "junit.xml").read_text()
    assert 'tests="2"' in junit and "gatekit.alpha" in junit and "gatekit.beta" in junit
    site = (folder / "site" / "index.html").read_text()
    assert "alpha" in site and "beta" in site
    assert "gate 1/2 01-alpha-off-on started (cores" in done.stderr
    assert "gate 2/2 02-beta-off-on rejected (" in done.stderr

    # --resume runs nothing finished again and decides the same
    again = gate_invoke("campaign", str(path), "--resume", str(folder), "--fail-on", "not-adopted", cwd=tmp_path)
    assert again.returncode == 1, again.stderr
    assert "resuming" in again.stderr and "2 of 2 gate(s) finished" in again.stderr
    assert len(run_lines(tmp_path / "alpha")) == 6 and len(run_lines(tmp_path / "beta")) == 6
    assert [e["event"] for e in journal(folder)][-3:] == ["campaign_resume", "engine", "campaign_stop"]
    # without --fail-on the same campaign passes
    assert gate_invoke("campaign", str(path), "--resume", str(folder), cwd=tmp_path).returncode == 0


def test_a_gate_whose_series_finished_before_its_end_was_journaled_is_not_run_again(tmp_path: Path) -> None:
    """A campaign killed after beta's series finished but before beta's gate_end was journaled (here: the journal
    cut back to beta's gate_start, as the kill leaves it): the resume ran beta again, two series and two findings
    for one gate. It now journals beta's end from its finished series, which it checks as verify does."""
    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST}), ("beta", {"elapsed": SAME})])
    done = gate_invoke("campaign", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    folder = campaign_folder(done.stdout)
    events = journal(folder)
    cut = next(n for n, e in enumerate(events) if e["event"] == "gate_start" and e["key"] == "02-beta-off-on")
    lines = (folder / CAMPAIGN_JOURNAL).read_text().splitlines(keepends=True)
    (folder / CAMPAIGN_JOURNAL).write_text("".join(lines[:cut + 1]))
    (series,) = [p for p in (folder / "02-beta-off-on").iterdir() if p.is_dir()]
    findings = sorted((tmp_path / "findings").glob("*.json"))
    again = gate_invoke("campaign", str(path), "--resume", str(folder), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (f"gate 02-beta-off-on: its series {series} finished before the campaign could journal it; journaled "
            "from it, not run again") in again.stderr
    assert len(run_lines(tmp_path / "beta")) == 6  # not run again
    assert [p for p in (folder / "02-beta-off-on").iterdir() if p.is_dir()] == [series]
    assert sorted((tmp_path / "findings").glob("*.json")) == findings
    (end,) = [e["outcome"] for e in journal(folder) if e["event"] == "gate_end" and e["outcome"]["key"] ==
              "02-beta-off-on"]
    assert (end["status"], end["decision"], end["series_dir"]) == ("finished", "rejected",
                                                                  str(series.relative_to(folder)))
    assert "02-beta-off-on: rejected" in again.stdout
    assert gate_invoke("verify", str(folder), cwd=tmp_path).returncode == 0


def test_a_gate_the_machine_refuses_at_preflight_is_left_unfinished_and_runs_on_resume(tmp_path: Path) -> None:
    """Another trainer is running (a process alpha's busy_pattern matches): alpha's gate refuses at preflight,
    which is the machine's state, not the gate's. Its gate_end journals it interrupted with exit 4 and the
    refusal, the campaign exits 4 (it was `failed`, exit 3, as if the gate were broken), and the resume, once
    the other trainer is gone, runs it to its finding."""
    import tomllib

    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST})])
    gate_file = tmp_path / "alpha" / "gate.toml"
    marker = f"another_trainer_{os.getpid()}_{tmp_path.name}"
    gate = tomllib.loads(gate_file.read_text())
    gate["driver"]["busy_pattern"] = marker
    write_toml(gate_file, gate)
    blocker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker])
    try:
        refused = gate_invoke("campaign", str(path), cwd=tmp_path)
    finally:
        blocker.kill()
        blocker.wait()
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert run_lines(tmp_path / "alpha") == []  # nothing ran
    folder = campaign_folder(refused.stdout)
    (end,) = [e["outcome"] for e in journal(folder) if e["event"] == "gate_end"]
    assert (end["status"], end["exit_code"]) == ("interrupted", 4)
    assert "preflight failed, nothing ran: no trainer already running" in end["detail"]
    assert f"--resume {folder}" in refused.stderr
    again = gate_invoke("campaign", str(path), "--resume", str(folder), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "01-alpha-off-on: adopted" in again.stdout and len(run_lines(tmp_path / "alpha")) == 6
    assert gate_invoke("verify", str(folder), cwd=tmp_path).returncode == 0


def test_an_invalid_gate_makes_the_campaign_exit_3(tmp_path: Path) -> None:
    path = make_campaign(tmp_path, [("gamma", {"elapsed": FAST, "touch": {"label": "on-r1", "path": "trainer.py"}})])
    done = gate_cli("campaign", str(path), cwd=tmp_path)  # the real entry point's exit code
    assert done.returncode == 3, done.stderr
    assert "01-gamma-off-on: invalid" in done.stdout
    assert {line.split()[2] for line in run_lines(tmp_path / "gamma")} == {"gpus=''"}  # a CPU gate sees no GPU
    (end,) = [e for e in journal(campaign_folder(done.stdout)) if e["event"] == "gate_end"]
    assert (end["outcome"]["status"], end["outcome"]["decision"]) == ("finished", "invalid")


def test_a_stopped_campaign_stops_its_gates_which_journal_the_interruption(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    hold.write_text("the first run waits while this file exists")
    path = make_campaign(tmp_path, [("delta", {"elapsed": FAST})])
    write_toml(tmp_path / "delta" / "off.toml", {"flags": {"optimizer": "host"}, "elapsed": OFF_TIMES,
                                                 "log": str(tmp_path / "delta" / "runs.log"), "hold": str(hold)})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    campaign = subprocess.Popen([sys.executable, "-m", "gatekit.cli", "campaign", str(path)], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while not run_lines(tmp_path / "delta") and time.monotonic() < deadline:
        time.sleep(0.05)
    campaign.send_signal(signal.SIGTERM)
    stdout, stderr = campaign.communicate(timeout=120)
    assert campaign.returncode == 130, stderr
    folder = campaign_folder(stdout)
    (end,) = [e["outcome"] for e in journal(folder) if e["event"] == "gate_end"]
    assert end["status"] == "interrupted" and "interrupted during off-r1" in end["detail"]
    series_events = [json.loads(line)["event"] for line in
                     (folder / end["series_dir"] / "journal.jsonl").read_text().splitlines()]
    assert "interrupted" in series_events
    assert f"continue with: gate campaign {path} --resume {folder}" in stderr
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert not left  # neither the gate nor its waiting trainer runs on


def test_a_campaign_changed_since_it_started_is_not_resumed(tmp_path: Path) -> None:
    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST})])
    campaign = load_campaign(path)
    folder = tmp_path / "runs" / "nightly-x"
    folder.mkdir(parents=True)
    (folder / CAMPAIGN_COPY).write_bytes(path.read_bytes())  # the file as started: the journal's genesis
    start = CampaignStart(campaign.id, campaign.path, campaign.sha256, "2026-12-01T00:00:00+00:00", "host",
                          campaign.out, tuple(JournaledGate.of(g) for g in campaign.gates))
    Journal(folder / CAMPAIGN_JOURNAL, genesis=folder / CAMPAIGN_COPY).record(start)
    path.write_text(path.read_text() + "\n# edited since\n")
    with pytest.raises(ConfigError, match=r"campaign.toml: changed since the campaign in .* started"):
        run_campaign(load_campaign(path), CampaignOptions(resume=folder))


# -- the Ray engine -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_session():  # type: ignore[no-untyped-def]
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=80 * 1024 * 1024)
    yield ray
    ray.shutdown()


def _worker_of(trainer_log: Path, timeout: float = 60) -> psutil.Process:
    """The Ray worker running a gate: the trainer's parent is the gate process, whose parent is the worker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = trainer_log.read_text() if trainer_log.exists() else ""
        lines = text[:text.rfind("\n") + 1].splitlines()  # complete lines only: a pid is never read half-written
        if lines:
            trainer = psutil.Process(int(lines[-1].rsplit("pid=", 1)[1]))
            return trainer.parent().parent()
        time.sleep(0.05)
    raise AssertionError(f"no run started ({trainer_log})")


def test_ray_runs_two_cpu_gates_and_a_lost_worker_is_resumed(tmp_path: Path, ray_session) -> None:
    hold = tmp_path / "hold"
    hold.write_text("the second gate's first run waits while this file exists")
    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST}), ("beta", {"elapsed": SAME})])
    write_toml(tmp_path / "beta" / "off.toml", {"flags": {"optimizer": "host"}, "elapsed": OFF_TIMES,
                                                "log": str(tmp_path / "beta" / "runs.log"), "hold": str(hold)})
    campaign = load_campaign(path)
    lines: list[str] = []

    def kill_betas_worker() -> None:
        worker = _worker_of(tmp_path / "beta" / "runs.log")
        assert "ray::" in " ".join(worker.cmdline()) or "default_worker" in " ".join(worker.cmdline())
        worker.send_signal(signal.SIGKILL)

    killer = threading.Thread(target=kill_betas_worker)
    killer.start()
    result = run_campaign(campaign, CampaignOptions(engine="ray"), report=lines.append)
    killer.join()
    hold.unlink()
    outcomes = {g.key: o for g, o in result.outcomes}
    assert outcomes["01-alpha-off-on"].status is GateStatus.FINISHED
    assert outcomes["01-alpha-off-on"].decision == "adopted"
    assert outcomes["02-beta-off-on"].status is GateStatus.INTERRUPTED
    assert "worker lost" in outcomes["02-beta-off-on"].detail
    assert result.exit_code() == 130
    assert "campaign nightly: gate 2/2 02-beta-off-on submitted to Ray (num_cpus=1, num_gpus=0)" in lines
    assert any(line.startswith("campaign nightly: gate 2/2 02-beta-off-on interrupted: worker lost") for line in lines)
    assert "ray node" in outcomes["01-alpha-off-on"].pinning.node
    # a Ray gate is journaled when submitted; when its worker started it comes back with its outcome
    events = journal(result.folder)
    (alpha_start,) = [e for e in events if e["event"] == "gate_start" and e["key"] == "01-alpha-off-on"]
    (alpha_end,) = [e for e in events if e["event"] == "gate_end" and e["outcome"]["key"] == "01-alpha-off-on"]
    assert "started" not in alpha_start and alpha_start["requested"] == {"cpus": 1, "gpus": 0}
    submitted, began, ended = (datetime.fromisoformat(t) for t in
                               (alpha_start["submitted"], alpha_end["outcome"]["began"], alpha_end["ended"]))
    assert submitted <= began <= ended
    series = outcomes["02-beta-off-on"].series_dir
    assert series is not None and not (series / "DONE").exists()

    # the gate process saw its worker die (SIGTERM from the launcher's parent-death signal) and journals the
    # interruption; it holds the series until it has stopped
    def beta_gate_running() -> bool:
        return any("gatekit.cli" in text and str(series.parent) in text
                   for text in (" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])))

    deadline = time.monotonic() + 60
    while beta_gate_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    events = [json.loads(line)["event"] for line in (series / "journal.jsonl").read_text().splitlines()]
    assert "interrupted" in events, events  # (an `escaped` event may follow it: what the trainer left)
    resumed = run_campaign(campaign, CampaignOptions(engine="ray", resume=result.folder), report=lines.append)
    outcomes = {g.key: o for g, o in resumed.outcomes}
    assert outcomes["02-beta-off-on"].status is GateStatus.FINISHED, outcomes["02-beta-off-on"]
    assert outcomes["02-beta-off-on"].series_dir == series  # the same series, continued
    assert resumed.exit_code() == 0 and len(resumed.findings) == 2
    assert len(run_lines(tmp_path / "alpha")) == 6  # alpha was not run again
    assert "| beta | rejected |" in (result.folder / "summary.md").read_text()


def test_an_attempt_is_read_from_its_exit_code_series_and_log(tmp_path: Path) -> None:
    task = GateTask("01-g-off-on", tmp_path / "gate.toml", "off", "on", tmp_path / "c" / "01-g-off-on",
                    tmp_path / "out", tmp_path / "c" / "logs" / "01-g-off-on.log", tmp_path / "c")
    series = task.runs_dir / "g-1"
    series.mkdir(parents=True)
    (series / "journal.jsonl").write_text("{}\n")
    task.log_path.parent.mkdir(parents=True)
    task.log_path.write_text("== gate 01: new series\ngate: error: old attempt\n"
                             "== gate 01: resume\npreflight\ngate: error: preflight failed, nothing more ran: load\n")
    pinning = Pinning((0, 1), ("3",), "host")
    failed = outcome_of(task, 2, pinning, resumed=series, before=frozenset())
    assert (failed.status, failed.series_dir, failed.finding_path) == (GateStatus.FAILED, series, None)
    assert failed.detail == "gate: error: preflight failed, nothing more ran: load"  # this attempt's error
    for code in (130, 4, -9):
        assert outcome_of(task, code, pinning, resumed=None, before=frozenset()).status is GateStatus.INTERRUPTED
    assert outcome_of(task, 2, pinning, resumed=None, before=frozenset([series])).series_dir is None  # not new
    (series / "DONE").write_text(f"rejected\n{tmp_path / 'out' / 'g-2026.toml'}\n")
    done = outcome_of(task, 0, pinning, resumed=None, before=frozenset())
    assert (done.status, done.decision, done.finding_path) == (GateStatus.FINISHED, "rejected",
                                                               tmp_path / "out" / "g-2026.json")
    assert GateOutcome.from_dict(done.to_dict()) == done and Pinning.from_dict(pinning.to_dict()) == pinning
    assert pinning.describe() == "cores 0-1, GPU(s) 3 on host"


def test_a_ctrl_c_as_the_last_gate_ends_still_reaches_the_caller(tmp_path: Path) -> None:
    """A Ctrl-C that lands when every running gate has already ended (here: while the last outcome is being
    reported) is not swallowed by the local engine: the caller stops too. A bisect whose probe had just
    finished went on to its next round and to a culprit after the Ctrl-C."""
    from gatekit.engines import run_local

    task = GateTask("01-g-off-on", tmp_path / "gate.toml", "off", "on", tmp_path / "c" / "01-g-off-on",
                    tmp_path / "out", tmp_path / "c" / "logs" / "01-g-off-on.log", tmp_path / "c")
    reported: list[GateOutcome] = []  # the gate file is missing: the gate ends at once, exit 2

    def finished(outcome: GateOutcome) -> None:
        reported.append(outcome)
        raise KeyboardInterrupt  # how Python delivers a SIGINT at this moment

    with pytest.raises(KeyboardInterrupt):
        run_local([task], max_parallel=1, cores=usable_cpus()[:1], gpus=[],
                  started=lambda task, pinning: None, finished=finished)
    assert [o.key for o in reported] == [task.key] and reported[0].status is GateStatus.FAILED


@pytest.mark.parametrize("kind", ["oversized", "garbage", "one line", "fifo", "link to /dev/zero"])
def test_a_done_file_that_no_gate_wrote_fails_the_attempt_naming_it(tmp_path: Path, kind: str) -> None:
    """DONE is read within bounds like a run file: a huge, binary, truncated DONE, a FIFO (a read would block)
    or a link to /dev/zero (a read would never end) fails the attempt with one line naming the file."""
    task = GateTask("01-g-off-on", tmp_path / "gate.toml", "off", "on", tmp_path / "c" / "01-g-off-on",
                    tmp_path / "out", tmp_path / "c" / "logs" / "01-g-off-on.log", tmp_path / "c")
    series = task.runs_dir / "g-1"
    series.mkdir(parents=True)
    (series / "journal.jsonl").write_text("{}\n")
    done = series / "DONE"
    if kind == "oversized":
        with done.open("wb") as handle:  # sparse: 2 GiB that would be read whole
            handle.truncate(2 << 30)
    elif kind == "garbage":
        done.write_bytes(b"\xff\xfe\x00\x80garbage\n\x81\n")
    elif kind == "one line":
        done.write_text("adopted\n")
    elif kind == "fifo":
        os.mkfifo(done)
    else:
        done.symlink_to("/dev/zero")
    outcome = outcome_of(task, 0, Pinning((0,), (), "host"), resumed=series, before=frozenset())
    assert (outcome.status, outcome.finding_path, outcome.decision) == (GateStatus.FAILED, None, "")
    assert outcome.detail.startswith(f"{done}: ") and "\n" not in outcome.detail, outcome.detail


def test_a_ray_task_that_raises_fails_its_gate_without_a_lost_worker(tmp_path: Path, ray_session) -> None:
    from gatekit.engines import run_ray

    task = GateTask("01-g-off-on", tmp_path / "nowhere" / "gate.toml", "off", "on", tmp_path / "c" / "01-g-off-on",
                    tmp_path / "out", tmp_path / "c" / "logs" / "01-g-off-on.log", tmp_path / "c")
    ended: list[GateOutcome] = []
    (outcome,) = run_ray([task], address=None, started=lambda task, pinning: None, finished=ended.append)
    assert ended == [outcome] and outcome.status is GateStatus.FAILED
    assert outcome.detail.startswith("the Ray task failed: FileNotFoundError") and "nowhere" in outcome.detail


# -- the campaign's false discovery rate -----------------------------------------------------------------------

NOISY_ADOPTION = {"on-r1": 9.0, "on-r2": 10.5, "on-r3": 9.3}  # Δ −4 % beyond the 1 % threshold; Welch p ≈ 0.2


def test_a_campaign_at_fdr_5_pct_reports_an_adoption_bh_does_not_keep(tmp_path: Path) -> None:
    """Issue 30: with `fdr = 0.05` an adoption by the gate's rule whose p does not survive Benjamini–Hochberg over
    the campaign is inconclusive in the printed lines, the summary, JUnit and the exit code; the clear one stands,
    and the finding file and the journal keep the gate's own decision."""
    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST}), ("gamma", {"elapsed": NOISY_ADOPTION})])
    path.write_text(path.read_text().replace('runs = "runs"\n', 'runs = "runs"\nfdr = 0.05\n', 1))
    assert load_campaign(path).fdr == 0.05
    done = gate_invoke("campaign", str(path), "--fail-on", "not-adopted", "--summary-md", "summary.md", "--junit",
                       "junit.xml", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # gamma is not adopted at the campaign's level
    lines = done.stdout.splitlines()
    assert lines[0].startswith("01-alpha-off-on: adopted ")
    assert lines[1].startswith("02-gamma-off-on: inconclusive (adopted by its rule, not significant at campaign "
                               "FDR 5 %: campaign p ")
    summary = (tmp_path / "summary.md").read_text()
    assert "| alpha | adopted |" in summary and "| gamma | inconclusive |" in summary
    junit = (tmp_path / "junit.xml").read_text()
    assert junit.count("<failure") == 1 and 'type="inconclusive"' in junit  # --fail-on not-adopted
    assert "not significant at campaign FDR 5 %" in junit
    ends = {e["outcome"]["key"]: e["outcome"]["decision"] for e in journal(campaign_folder(done.stdout))
            if e["event"] == "gate_end"}
    assert ends == {"01-alpha-off-on": "adopted", "02-gamma-off-on": "adopted"}
    (gamma,) = (tmp_path / "findings").glob("gamma-*.json")
    assert json.loads(gamma.read_text())["verdict"]["decision"] == "adopted"
    as_json = gate_invoke("campaign", str(path), "--resume", str(campaign_folder(done.stdout)), "--json", cwd=tmp_path)
    document = json.loads(as_json.stdout)
    assert document["fdr"] == 0.05
    assert [(g["outcome"]["decision"], g["campaign_decision"]) for g in document["gates"]] == [
        ("adopted", "adopted"), ("adopted", "inconclusive")]
    # the same campaign without fdr: each gate's own decision, as before
    path.write_text(path.read_text().replace("fdr = 0.05\n", ""))
    assert gate_invoke("campaign", str(path), "--fail-on", "not-adopted", cwd=tmp_path).returncode == 0


def test_a_campaign_fdr_outside_0_1_is_exit_2(tmp_path: Path) -> None:
    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST})])
    path.write_text(path.read_text().replace('runs = "runs"\n', 'runs = "runs"\nfdr = 5\n', 1))
    done = gate_invoke("campaign", "campaign.toml", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line == f"gate: error: {path}: campaign.fdr: must be a level between 0 and 1 (e.g. 0.05), got 5"

"""`gate bisect` end to end, with real processes (the process is the subject here): a git repository made by
the test, 24 commits of a tiny trainer that reports a seeded synthetic metric (so nothing depends on this
machine's timing), one commit that makes it 10 % slower, one whose build exits 125 and one whose build fails.

The bisect runs through the local engine with two probes at once, through a local Ray (skipped without ray),
and is killed mid-way and resumed: the journal shows the probes finished before the kill were not run again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from gatekit.bisect.records import BISECT_JOURNAL, ProbeStatus, replay
from gatekit.bisect.run import BisectOptions, measured_pairs, probe_gate_toml, run_bisect
from gatekit.bisect.search import Outcome
from gatekit.bisect.verify import verify_bisect
from gatekit.commits import Commit
from gatekit.config import load_gate
from tests.conftest import gate_job_argv, write_toml

COMMITS = 24  # after GOOD: commits 1 … 24, BAD the last
CULPRIT = 15  # the commit that adds the slowdown
SKIP_BUILD = 8  # its build exits 125 (it cannot be tested)
FAIL_BUILD = 5  # its build fails

# The trainer: the train time of a run is a seeded draw around its commit's level (CV 0.3 %), so the bisect's
# decisions are those of the data, never of this machine's load. It follows the trainer contract
# (DESIGN "Trainer contract"): result JSON at GATEKIT_RESULT with metrics and its effective config.
TRAINER = textwrap.dedent('''\
    import hashlib, json, os, random, sys, time, tomllib

    SLOWDOWN = {slowdown}
    config = tomllib.load(open(sys.argv[sys.argv.index("--config") + 1], "rb"))
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "build", "built.txt")) as handle:
        built = handle.read().strip()  # the build step's output: a run of an unbuilt tree fails
    run = os.environ["GATEKIT_RUN"]
    seed = hashlib.sha256(f"{{os.environ['GATEKIT_RUN_DIR']}}".encode()).hexdigest()
    noise = random.Random(seed).gauss(0.0, 0.003)
    elapsed = config["base_s"] * SLOWDOWN * (1.0 + noise)
    time.sleep(0.05)  # long enough for the sampler's window
    hold = os.environ.get("TINY_HOLD")  # a test's folder: once it holds `hold`, a run waits there for `release`
    if hold and os.path.exists(os.path.join(hold, "hold")):
        open(os.path.join(hold, "holding"), "w").close()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not os.path.exists(os.path.join(hold, "release")):
            time.sleep(0.05)
    with open(os.path.join(os.environ["GATEKIT_RUN_DIR"], "commit.txt"), "w") as handle:
        handle.write(os.environ["TINY_COMMIT"] + " " + os.getcwd())  # {{commit}} from driver.env, and where it ran
    json.dump({{"metrics": {{"train_elapsed_s": elapsed, "psnr_db": 30.0}},
               "config": {{"steps": config["steps"], "built": built}}}}, open(os.environ["GATEKIT_RESULT"], "w"))
''')

BUILD = textwrap.dedent('''\
    import os, sys
    status = open("BUILD_STATUS").read().strip()
    if status == "skip":
        sys.exit(125)
    if status == "fail":
        print("error: the build is broken at this commit")
        sys.exit(1)
    os.makedirs("build", exist_ok=True)
    open(os.path.join("build", "built.txt"), "w").write("ok\\n")
''')


@dataclass(frozen=True)
class Repo:
    root: Path
    shas: list[str]  # index 0 GOOD … COMMITS (BAD)

    @property
    def build(self) -> str:
        return f"{sys.executable} build.py"


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    done = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env)
    return done.stdout.strip()


def busy_pattern(root: Path) -> str:
    """This test session's trainers only: the probes' configs lie under the session's temporary folder (the
    repository's grandparent), so a second suite on the same machine cannot make a probe refuse to start."""
    return rf"tiny_trainer\.py --config {re.escape(str(root.parent.parent))}"


def make_repo(root: Path) -> Repo:
    """GOOD (commit 0) and COMMITS commits after it; commit CULPRIT makes the trainer 10 % slower."""
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    gate = {
        "gate": {"id": "tiny", "n": 3, "primary": "train_elapsed_s", "direction": "lower",
                 "expect_diff": ["steps"]},
        "threshold": {"sigma_k": 2.0, "floor_pct": 1.0},
        "guards": [{"metric": "psnr_db", "direction": "higher", "max_drop": 0.05}],
        "rules": {"load_limit": 1000.0, "sample_interval_s": 0.02},
        # the busy pattern is this test's own: other trainers on a shared machine are not its business
        "driver": {"name": "command", "argv": ["{python}", "tiny_trainer.py", "--config", "{arm_config}"],
                   "timeout_s": 60, "hash": ["tiny_trainer.py"], "busy_pattern": busy_pattern(root),
                   "env": {"TINY_COMMIT": "{commit}"}},
        "arms": {"base": {"config": "configs/base.toml"}, "more": {"config": "configs/more.toml"}},
    }
    (root / "configs").mkdir()
    write_toml(root / "gate.toml", gate)
    write_toml(root / "configs" / "base.toml", {"base_s": 10.0, "steps": 100})
    write_toml(root / "configs" / "more.toml", {"base_s": 12.0, "steps": 120})
    (root / "build.py").write_text(BUILD)
    (root / ".gitignore").write_text("build/\n")
    shas = []
    for index in range(COMMITS + 1):
        slowdown = 1.10 if index >= CULPRIT else 1.0
        (root / "tiny_trainer.py").write_text(TRAINER.format(slowdown=slowdown) + f"# commit {index}\n")
        status = "skip" if index == SKIP_BUILD else "fail" if index == FAIL_BUILD else "ok"
        (root / "BUILD_STATUS").write_text(status + "\n")
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", f"commit {index}" + (": cache the tensors differently" if index == CULPRIT
                                                          else ""))
        shas.append(_git(root, "rev-parse", "HEAD"))
    return Repo(root, shas)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return make_repo(tmp_path_factory.mktemp("bisect") / "repo")


def _assert_found(folder: Path, repo: Repo) -> None:
    verify_bisect(folder)  # the journal's chain, every probe's series and finding, the bisect finding
    state = replay(folder)
    assert state.stop is not None and state.stop.outcome is Outcome.CULPRIT
    assert state.stop.culprit == CULPRIT
    # neighbour rule 2: the culprit's step showed in its own pairs, the culprit run beside the commit before it
    assert any(e.commit == CULPRIT and e.reference == CULPRIT - 1 and e.status is ProbeStatus.MEASURED
               for e in state.finished)
    statuses = {e.commit: e.status for e in state.finished}
    assert statuses.get(SKIP_BUILD, ProbeStatus.SKIPPED) is ProbeStatus.SKIPPED
    assert statuses.get(FAIL_BUILD, ProbeStatus.BUILD_FAILED) is ProbeStatus.BUILD_FAILED
    measured = [e for e in state.finished if e.status is ProbeStatus.MEASURED]
    for end in measured:  # every measured probe's pairs are the values its own gate's finding holds
        finding = json.loads((folder / end.finding).read_text())
        assert len(end.pairs) == sum(1 for r in finding["runs"] if r["used"] and r["arm"] == "probe")
    # the worktrees are gone with the bisect; its runs stay
    assert not (folder / "worktrees").exists() or not any((folder / "worktrees").iterdir())
    assert "worktrees" not in _git(repo.root, "worktree", "list")


def test_probe_gate_file_runs_the_arm_at_two_commits(tmp_path: Path) -> None:
    """The probe's gate file: the bisected arm twice, each in its commit's worktree, where the gate file's
    relative paths resolve; no declared difference; the classic policy at the probe's pairs."""
    gate = tmp_path / "repo" / "bench" / "gate.toml"
    gate.parent.mkdir(parents=True)
    write_toml(gate, {"gate": {"id": "g", "policy": "sequential", "expect_diff": ["x"]},
                      "driver": {"argv": ["./trainer", "{commit}", "{worktree}"], "hash": ["trainer"], "cwd": "bin"},
                      "arms": {"a": {"config": "configs/a.toml", "args": ["--fast"]}, "b": {}}})
    good, probe = tmp_path / "wt" / "good", tmp_path / "wt" / "probe"
    text = probe_gate_toml(gate.read_text(), "a", ((Commit("1" * 40, "good", "2026-12-01T10:00:00+00:00"), good),
                                                   (Commit("2" * 40, "probed", "2026-12-02T10:00:00+00:00"), probe)),
                           "bench", 2)
    written = tmp_path / "probe" / "gate.toml"
    written.parent.mkdir()
    written.write_text(text)
    config = load_gate(written)
    assert list(config.arms) == ["reference", "probe"] and config.gate.policy == "classic" and config.gate.n == 2
    assert config.gate.expect_diff == ()
    assert config.arms["probe"].config == probe / "bench" / "configs" / "a.toml"
    assert config.arms["reference"].config == good / "bench" / "configs" / "a.toml"
    assert config.arms["probe"].args == ("--fast",) and config.arms["probe"].checkout.commit == "2" * 40
    assert config.driver.hash == (good / "bench" / "trainer", probe / "bench" / "trainer")
    assert config.gate.runs == written.parent / "runs"
    assert config.commits is not None and (config.commits.base.sha, config.commits.head.subject) == ("1" * 40, "probed")

    from gatekit.preflight import arm_input
    from gatekit_drivers.command import CommandDriver

    driver = CommandDriver.from_options(config.driver.options, source=config.path, base_dir=config.base_dir)
    arm = arm_input(config.arms["probe"])
    assert driver.cwd_for(arm) == probe / "bench" / "bin"
    assert driver.command_for(arm)[1:] == ["2" * 40, str(probe), "--fast"]


def test_measured_pairs_pair_used_runs_by_their_pair() -> None:
    from types import SimpleNamespace as Row

    def row(arm: str, pair: int, value: float, used: bool = True, label: str = "") -> Row:
        return Row(arm=arm, pair=pair, used=used, warmup=False, value_of=lambda metric: value,
                   label=label or f"{arm}-r{pair}")

    runs = [row("reference", 1, 10.0), row("probe", 1, 11.0), row("reference", 2, 10.1),
            row("probe", 2, 50.0, used=False), row("probe", 2, 11.1, label="probe-r2-retry"),
            row("reference", 3, 10.0)]
    pairs = measured_pairs(runs, "train_elapsed_s")
    assert [(p.probe_value, p.reference_value, p.probe_run, p.reference_run) for p in pairs] == [
        (11.0, 10.0, "probe-r1", "reference-r1"), (11.1, 10.1, "probe-r2-retry", "reference-r2")]


def test_bisect_names_the_culprit_with_two_probes_at_once(repo: Repo, tmp_path: Path) -> None:
    """Through the CLI as a real process: local engine, two probes at once, pinned each to its own core."""
    out = tmp_path / "bisect"
    done = subprocess.run([sys.executable, "-m", "gatekit.cli", "bisect", repo.shas[0], repo.shas[-1],
                           "--build", repo.build, "--max-parallel", "2", "--out", str(out), "--json",
                           "--fail-on", "culprit"],
                          cwd=repo.root, capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stderr  # --fail-on culprit: a culprit was named
    assert "started (cores" in done.stderr and "probe vs GOOD" in done.stderr
    _assert_found(out, repo)
    state = replay(out)
    rounds = {}
    for end in state.finished:
        rounds.setdefault(end.round, []).append(end.commit)
    assert any(len(commits) == 2 for r, commits in rounds.items() if r > 1), rounds  # two probes in a round
    endpoints = state.endpoints()
    assert endpoints is not None and endpoints.decision == "regression"
    # each probe's trainers ran in their commits' worktrees, with {commit} filled in their environment
    probe = next(e for e in state.finished if e.status is ProbeStatus.MEASURED and e.round > 1)
    runs = sorted((out / probe.finding).parents[1].glob("runs/*/*-r1/commit.txt"))
    seen = dict(path.read_text().split(" ", 1) for path in runs)
    assert set(seen) == {repo.shas[0], repo.shas[probe.commit]}
    assert Path(seen[repo.shas[probe.commit]]).name == f"{probe.commit:03d}-{repo.shas[probe.commit][:12]}"
    # one pair a probe (the default, preregistered): its gate ran one run per arm and decided nothing, saying
    # why; the finding verified above (_assert_found) and renders
    assert state.start.pairs_per_probe == 1 and len(probe.pairs) == 1
    finding = json.loads((out / probe.finding).read_text())
    assert finding["verdict"]["decision"] == "inconclusive" and finding["verdict"]["reason_codes"] == ["bisect_probe"]
    assert finding["stats"]["n_off"] == finding["stats"]["n_on"] == 1
    assert "read by the bisect's posterior" in finding["verdict"]["reasons"][0]
    page = tmp_path / "probe.md"
    shown = subprocess.run([sys.executable, "-m", "gatekit.cli", "report", str(out / probe.finding), "--md",
                            str(page)], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "inconclusive" in page.read_text() and not re.search(r"\bnan\b", page.read_text(), re.IGNORECASE)


@pytest.fixture
def ray_session():  # type: ignore[no-untyped-def]
    """A small local Ray, as the campaign's Ray tests start it (the engine uses the session it finds)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=80 * 1024 * 1024)
    yield ray
    ray.shutdown()


def test_bisect_through_a_local_ray(repo: Repo, tmp_path: Path, ray_session) -> None:
    out = tmp_path / "bisect"
    result = run_bisect(repo.shas[0], repo.shas[-1], BisectOptions(build=repo.build, engine="ray", max_parallel=2,
                                                                   out=out), cwd=repo.root)
    assert result.outcome is Outcome.CULPRIT and result.culprit == CULPRIT
    _assert_found(out, repo)


def test_endpoints_that_do_not_differ_stop_the_bisect(repo: Repo, tmp_path: Path) -> None:
    """Two commits before the slowdown: the gate sees no change, n more pairs once, still none: no_change, exit 0,
    no probe between them."""
    out = tmp_path / "bisect"
    done = subprocess.run([sys.executable, "-m", "gatekit.cli", "bisect", repo.shas[1], repo.shas[4], "--out",
                           str(out), "--build", repo.build, "--fail-on", "culprit"], cwd=repo.root,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "outcome: no_change" in done.stdout
    state = replay(out)
    assert state.stop is not None and state.stop.outcome is Outcome.NO_CHANGE
    assert [(e.commit, e.round) for e in state.finished] == [(3, 0), (3, 1)]  # BAD (index 3) twice, nothing else
    verify_bisect(out)


def test_a_build_that_fails_everywhere_is_invalid_and_nothing_runs(repo: Repo, tmp_path: Path) -> None:
    out = tmp_path / "bisect"
    done = subprocess.run([sys.executable, "-m", "gatekit.cli", "bisect", repo.shas[0], repo.shas[-1], "--out",
                           str(out), "--build", f"{sys.executable} -c 'raise SystemExit(2)'"], cwd=repo.root,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 3, done.stderr
    assert "outcome: invalid" in done.stdout
    state = replay(out)
    assert state.runs() == 0 and state.stop is not None and state.stop.outcome is Outcome.INVALID
    assert not list(out.glob("probes/*/runs/*"))


@pytest.mark.parametrize("args, message", [
    (["--budget", "5"], "--budget: 5 runs cannot hold the endpoints"),
    (["--budget", "9", "--pairs-per-probe", "2"], "and one probe (4); give at least 10"),
    (["--arm", "nope"], "defines no arm 'nope'"),
    (["--engine", "local", "--address", "auto"], "--address joins a Ray cluster"),
])
def test_usage_errors_exit_2_before_anything_is_written(repo: Repo, tmp_path: Path, args: list[str],
                                                        message: str) -> None:
    from tests.conftest import gate_invoke

    out = tmp_path / "bisect"
    done = gate_invoke("bisect", repo.shas[0], repo.shas[-1], "--out", str(out), *args, cwd=repo.root)
    assert done.returncode == 2 and message in done.stderr
    assert not out.exists()


def _wait_for_probe_ends(process: subprocess.Popen, journal: Path, count: int) -> None:
    def ended() -> bool:
        lines = journal.read_text().splitlines() if journal.is_file() else []
        return sum('"probe_end"' in line for line in lines) >= count

    _wait_for(process, ended, f"{count} probe_end events")


def _wait_for(process: subprocess.Popen, condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"the bisect ended (or 600 s passed) before {what}: {process.poll()}")


def test_ctrl_c_stops_the_bisect_with_exit_130(repo: Repo, tmp_path: Path) -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it: the running probe's gate journals its
    interruption, the bisect exits 130 naming --resume, its journal ends with a bisect_interrupted (no stop) and
    verifies, and --resume after it finishes the bisect.

    The signal is sent while a probe's trainer is known to be running and held (its `holding` marker), after two
    probes ended: sent at any other moment (a probe's gate that has just finished, the bisect's last step on a
    slow machine) the bisect may rightly finish first, and the test would test the machine's speed."""
    out, hold = tmp_path / "bisect", tmp_path / "hold"
    hold.mkdir()
    process = subprocess.Popen(gate_job_argv("bisect", repo.shas[0], repo.shas[-1], "--build", repo.build, "--out",
                                             str(out)), cwd=repo.root, text=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True,
                               env={**os.environ, "TINY_HOLD": str(hold)})
    try:
        _wait_for_probe_ends(process, out / BISECT_JOURNAL, 2)
        (hold / "hold").touch()  # the next run to start holds (one already running ends as it would)
        _wait_for(process, (hold / "holding").exists, "a probe's trainer to hold")
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=300)
    finally:
        (hold / "release").touch()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert f"gate bisect --resume {out}" in stderr
    state = replay(out)
    assert state.stop is None and len(state.finished) >= 2
    last = json.loads((out / BISECT_JOURNAL).read_text().splitlines()[-1])
    assert last["event"] == "bisect_interrupted", last
    (interrupted,) = state.interruptions
    assert f"gate bisect --resume {out}" in interrupted.reason
    assert interrupted.unfinished == len(state.unfinished)
    verify_bisect(out, finding_required=False)
    other = subprocess.run([sys.executable, "-m", "gatekit.cli", "bisect", "--resume", str(out), "--pairs-per-probe",
                            "2"], cwd=repo.root, capture_output=True, text=True, timeout=300)
    assert other.returncode == 2 and "runs its plan's 1 pair(s) per probe" in other.stderr, other.stderr

    done = subprocess.run([sys.executable, "-m", "gatekit.cli", "bisect", "--resume", str(out)], cwd=repo.root,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    after = replay(out)
    assert after.interruptions == state.interruptions and after.resumes and after.stop is not None
    _assert_found(out, repo)


def test_a_killed_bisect_resumes_without_running_its_finished_probes_again(repo: Repo, tmp_path: Path) -> None:
    out = tmp_path / "bisect"
    process = subprocess.Popen([sys.executable, "-m", "gatekit.cli", "bisect", repo.shas[0], repo.shas[-1],
                                "--build", repo.build, "--out", str(out)], cwd=repo.root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for_probe_ends(process, out / BISECT_JOURNAL, 3)
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    before = replay(out)
    assert before.stop is None and len(before.finished) >= 3
    finished = {e.key for e in before.finished}

    done = subprocess.run([sys.executable, "-m", "gatekit.cli", "bisect", "--resume", str(out)], cwd=repo.root,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    after = replay(out)
    assert after.resumes and after.stop is not None and after.stop.culprit == CULPRIT
    # the probes finished before the kill were neither started nor ended again
    journal = [json.loads(line) for line in (out / BISECT_JOURNAL).read_text().splitlines()]
    resumed_at = next(i for i, e in enumerate(journal) if e["event"] == "bisect_resume")
    again = [(e["commit"], e["reference"], e["round"]) for e in journal[resumed_at:]
             if e["event"] in ("probe_start", "probe_end")]
    assert not finished & set(again), finished & set(again)
    assert [e.key for e in after.finished][:len(before.finished)] == [e.key for e in before.finished]
    _assert_found(out, repo)

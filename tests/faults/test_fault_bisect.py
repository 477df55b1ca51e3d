"""A bisect on a machine that fails it: a full disk during one probe is the machine's fault, never the commit's.

A real git repository (six commits after GOOD, the fourth 10 % slower: the trainer of tests/test_bisect_run.py),
a real `gate bisect` with its probes' gate processes, and a real ENOSPC: a filled tmpfs mounted in a private
mount namespace on one probe's runs folder (tests/faults/bisect_full_disk.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gatekit.bisect.records import ProbeStatus, replay
from gatekit.bisect.search import Outcome
from gatekit.bisect.verify import verify_bisect
from tests.conftest import write_toml
from tests.faults.faultkit import DEADLINE_S, in_mount_namespace, mount_namespace_available
from tests.test_bisect_run import BUILD, TRAINER, _git, busy_pattern

HERE = Path(__file__).parent
COMMITS = 6  # after GOOD
CULPRIT = 4
FULL = 3  # the commit whose probe meets a full disk: the one beside the culprit, as in the bisect that was wrong
needs_namespace = pytest.mark.skipif(not mount_namespace_available(),
                                     reason="needs `unshare -r -m` to mount a tmpfs (user namespaces disabled)")


def small_repo(root: Path) -> list[str]:
    """GOOD and COMMITS commits after it; commit CULPRIT makes the trainer 10 % slower. Returns the shas."""
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "configs").mkdir()
    write_toml(root / "gate.toml", {
        "gate": {"id": "tiny", "n": 3, "primary": "train_elapsed_s", "direction": "lower", "expect_diff": ["steps"]},
        "threshold": {"sigma_k": 2.0, "floor_pct": 1.0},
        "rules": {"load_limit": 1000.0, "sample_interval_s": 0.02},
        "driver": {"name": "command", "argv": ["{python}", "tiny_trainer.py", "--config", "{arm_config}"],
                   "timeout_s": 60, "hash": ["tiny_trainer.py"], "busy_pattern": busy_pattern(root),
                   "env": {"TINY_COMMIT": "{commit}"}},
        "arms": {"base": {"config": "configs/base.toml"}, "more": {"config": "configs/more.toml"}}})
    write_toml(root / "configs" / "base.toml", {"base_s": 10.0, "steps": 100})
    write_toml(root / "configs" / "more.toml", {"base_s": 12.0, "steps": 120})
    (root / "build.py").write_text(BUILD)
    (root / ".gitignore").write_text("build/\n")
    (root / "BUILD_STATUS").write_text("ok\n")
    shas = []
    for index in range(COMMITS + 1):
        (root / "tiny_trainer.py").write_text(TRAINER.format(slowdown=1.10 if index >= CULPRIT else 1.0)
                                              + f"# commit {index}\n")
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", f"commit {index}")
        shas.append(_git(root, "rev-parse", "HEAD"))
    return shas


@needs_namespace
def test_a_full_disk_during_a_probe_leaves_it_unfinished_exit_4_and_resume_names_the_culprit(tmp_path: Path) -> None:
    """The probe of commit 3 cannot write its files (ENOSPC): the bisect stops with exit 4 and one line naming the
    file and `gate bisect --resume`, journaling nothing about commit 3 (its probe is left unfinished, never
    `invalid`); after the space is freed the resume probes it again and names commit 4, as an undisturbed bisect
    does. (The wrong answer was a credible set {3, 4}: commit 3 journaled invalid for good.)"""
    repo = tmp_path / "repo"
    shas = small_repo(repo)
    out, report = tmp_path / "bisect", tmp_path / "report.json"
    done = subprocess.run(
        ["unshare", "-r", "-m", sys.executable, str(HERE / "bisect_full_disk.py"), shas[FULL][:12], str(report),
         "bisect", shas[0], shas[-1], "--build", f"{sys.executable} build.py", "--out", str(out)],
        cwd=repo, capture_output=True, text=True, timeout=10 * DEADLINE_S,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, done.stderr
    codes = json.loads(report.read_text())
    assert codes["full"], f"commit {FULL} was never probed: {done.stderr}"  # the fault happened
    assert codes["first"] == 4, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("gate: error: ")]
    assert "No space left on device" in line and f"gate bisect --resume {out}" in line and shas[FULL][:12] in line
    assert codes["second"] == 0, done.stderr
    state = replay(out)
    assert state.stop is not None and state.stop.outcome is Outcome.CULPRIT and state.stop.culprit == CULPRIT
    ends = [e for e in state.finished if e.commit == FULL]
    assert ends and all(e.status is ProbeStatus.MEASURED for e in ends)  # never journaled invalid
    assert state.resumes  # the probe that met the full disk ran again after the resume
    verify_bisect(out)


@needs_namespace
@pytest.mark.parametrize("size", ["4k", "16k"])
def test_a_bisect_folder_on_a_full_disk_exits_4_and_goes_on_once_space_is_freed(tmp_path: Path, size: str) -> None:
    """The bisect folder's own disk is full (a tmpfs of `size`: full before the journal's first line, or at a
    commit's worktree): one line naming the file, exit 4, never a traceback or a usage error; once there is room,
    the command it names (the bisect again when nothing ran, else --resume) names the culprit."""
    repo = tmp_path / "repo"
    shas = small_repo(repo)
    (tmp_path / "disk").mkdir()
    out = tmp_path / "disk" / "bisect"
    build = f"{sys.executable} build.py"
    script = f"""
mount -t tmpfs -o size={size} tmpfs {tmp_path / "disk"}
$GATE bisect {shas[0]} {shas[-1]} --build '{build}' --out {out} >out1.txt 2>err1.txt; echo $? >rc1.txt
mount -o remount,size=64m {tmp_path / "disk"}
if grep -q -- '--resume' err1.txt; then
    $GATE bisect --resume {out} >out2.txt 2>err2.txt; echo $? >rc2.txt
else
    rm -rf {out}; git worktree prune
    $GATE bisect {shas[0]} {shas[-1]} --build '{build}' --out {out} >out2.txt 2>err2.txt; echo $? >rc2.txt
fi
cp -a {out} {tmp_path / "kept"}
"""
    done = in_mount_namespace(script, cwd=repo)
    assert done.returncode == 0, done.stderr
    read = lambda name: (repo / name).read_text()  # noqa: E731
    assert read("rc1.txt").strip() == "4", read("err1.txt")
    assert "Traceback" not in read("err1.txt")
    (line,) = [line for line in read("err1.txt").splitlines() if line.startswith("gate: error: ")]
    assert "No space left on device" in line and str(out) in line
    assert read("rc2.txt").strip() == "0", read("err2.txt")
    state = replay(tmp_path / "kept")
    assert state.stop is not None and state.stop.outcome is Outcome.CULPRIT and state.stop.culprit == CULPRIT


def test_a_probe_the_machine_refuses_at_preflight_is_left_unfinished_exit_4_and_resume_names_the_culprit(
        tmp_path: Path) -> None:
    """Another trainer is running (a process the gate's busy_pattern matches, of no bisect): the endpoints'
    probe gate refuses at preflight, which is the machine's state, not the commit's. The bisect exits 4 naming
    `gate bisect --resume`, journals the interruption with the refusal's reason and no probe_end (the commit
    was journaled `invalid` for good, and the bisect answered invalid, exit 3); once the other trainer is
    gone, the resume probes it and names commit 4."""
    repo = tmp_path / "repo"
    shas = small_repo(repo)
    out = tmp_path / "bisect"
    bisect = [sys.executable, "-m", "gatekit.cli", "bisect"]
    blocker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "tiny_trainer.py",
                                "--config", str(tmp_path / "another-trainer.toml")])
    try:
        refused = subprocess.run([*bisect, shas[0], shas[-1], "--build", f"{sys.executable} build.py", "--out",
                                  str(out)], cwd=repo, capture_output=True, text=True, timeout=DEADLINE_S)
    finally:
        blocker.kill()
        blocker.wait()
    assert refused.returncode == 4, refused.stderr
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("gate: error: ")]
    assert "a reason of the machine" in line and "no trainer already running" in line and f"pid {blocker.pid}" \
        in line and f"gate bisect --resume {out}" in line, line
    state = replay(out)
    assert not state.finished and len(state.unfinished) == 1  # nothing journaled about the commit
    events = [json.loads(text) for text in (out / "bisect.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "bisect_interrupted" and "no trainer already running" in events[-1]["reason"]
    verify_bisect(out, finding_required=False)
    resumed = subprocess.run([*bisect, "--resume", str(out)], cwd=repo, capture_output=True, text=True,
                             timeout=10 * DEADLINE_S)
    assert resumed.returncode == 0, resumed.stderr
    state = replay(out)
    assert state.stop is not None and state.stop.outcome is Outcome.CULPRIT and state.stop.culprit == CULPRIT
    assert all(e.status is ProbeStatus.MEASURED for e in state.finished)
    verify_bisect(out)

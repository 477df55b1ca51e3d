"""gatekit.commits on a real git repository made here: the range, worktrees, and builds that pass,
skip (exit 125) or fail."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gatekit.commits import BuildStatus, add_worktree, build, commit_range, remove_worktree, resolve
from gatekit.errors import ConfigError, GatekitError


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_AUTHOR_DATE": "2026-12-01T10:00:00+00:00",
           "GIT_COMMITTER_DATE": "2026-12-01T10:00:00+00:00", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """Five commits; the build of commit 3 exits 125, that of commit 4 fails."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for index in range(5):
        code = {3: 125, 4: 1}.get(index, 0)
        (repo / "build.sh").write_text(f"echo building {index}\nexit {code}\n")
        (repo / "level.txt").write_text(f"{index}\n")
        _git(repo, "add", ".")
        _git(repo, "commit", "-q", "-m", f"commit {index}")
    return repo


def test_the_range_is_good_then_first_parent_commits_to_bad(repo: Path) -> None:
    commits = commit_range(repo, "main~4", "main")
    assert [c.subject for c in commits] == [f"commit {i}" for i in range(5)]
    assert commits[0].sha == resolve(repo, "main~4") and commits[-1].sha == resolve(repo, "main")
    assert commits[2].author_date == "2026-12-01T10:00:00+00:00"
    with pytest.raises(ConfigError, match="is not an ancestor"):
        commit_range(repo, "main", "main~2")
    with pytest.raises(ConfigError, match="names no commit"):
        commit_range(repo, "nope", "main")
    with pytest.raises(ConfigError, match="same commit"):
        commit_range(repo, "main", "main")


def test_worktrees_and_builds(repo: Path, tmp_path: Path) -> None:
    commits = commit_range(repo, "main~4", "main")
    statuses = []
    for index, commit in enumerate(commits):
        tree = add_worktree(repo, commit.sha, tmp_path / "probes" / f"{index:03d}" / "worktree")
        assert (tree / "level.txt").read_text() == f"{index}\n"
        assert add_worktree(repo, commit.sha, tree) == tree  # kept on resume
        result = build("sh build.sh", tree, tree.parent / "build.log")
        assert (tree.parent / "build.log").read_text() == f"building {index}\n"
        statuses.append((result.status, result.exit_code))
    assert statuses == [(BuildStatus.BUILT, 0)] * 3 + [(BuildStatus.SKIPPED, 125), (BuildStatus.FAILED, 1)]
    assert build(None, tree, tree.parent / "none.log").status is BuildStatus.BUILT
    with pytest.raises(GatekitError, match="another commit"):
        add_worktree(repo, commits[0].sha, tree)
    remove_worktree(repo, tree)
    assert not tree.exists()


# A build that leaves two processes behind and exits: a background child in its process group, and a daemon
# (fork, setsid, fork) outside it; it exits only once both have written their pids, so the test knows them.
LEAVES_PROCESSES = '''\
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])
open("child.pid", "w").write(str(child.pid))
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork() == 0:
        open("daemon.tmp", "w").write(str(os.getpid()))
        os.rename("daemon.tmp", "daemon.pid")
        time.sleep(600)
    os._exit(0)
os.waitpid(first, 0)
while not os.path.exists("daemon.pid"):
    time.sleep(0.01)
'''


def _pids(folder: Path, *names: str) -> list[int]:
    return [int((folder / name).read_text()) for name in names]


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_build_leaves_no_process_behind(tmp_path: Path) -> None:
    """A real build that leaves a background child and a setsid daemon running: both are stopped when the build
    ends, and its log names them."""
    import sys

    (tmp_path / "build.py").write_text(LEAVES_PROCESSES)
    result = build([sys.executable, "build.py"], tmp_path, tmp_path / "build.log")
    assert result.status is BuildStatus.BUILT and not result.timed_out
    child, daemon = _pids(tmp_path, "child.pid", "daemon.pid")
    assert _gone(child) and _gone(daemon)
    log = (tmp_path / "build.log").read_text()
    assert "2 processes escaped the build and were stopped" in log and f"pid {daemon}" in log


def test_a_build_that_does_not_finish_in_its_timeout_failed(tmp_path: Path) -> None:
    """--build-timeout: a build still running then is stopped with everything it started, and failed."""
    script = "sleep 600 & echo $! > child.pid; exec sleep 600"
    result = build(["sh", "-c", script], tmp_path, tmp_path / "build.log", timeout_s=1.0)
    assert (result.status, result.exit_code, result.timed_out) == (BuildStatus.FAILED, None, True)
    assert "did not finish within --build-timeout 1 s" in (tmp_path / "build.log").read_text()
    if (tmp_path / "child.pid").exists():  # started before the timeout (on a very slow machine it may not be)
        assert _gone(_pids(tmp_path, "child.pid")[0])

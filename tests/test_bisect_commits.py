"""gatekit.bisect.commits on a real git repository made here: the range, worktrees, and builds that pass,
skip (exit 125) or fail."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gatekit.bisect.commits import BuildStatus, add_worktree, build, commit_range, remove_worktree, resolve
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

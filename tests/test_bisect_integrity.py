"""A bisect's own files against the folder it is given and the code it runs (real git, real builds):

- `--out` into a folder that is not empty is refused before anything is written (it held a user's gate.toml
  and worktree once, overwritten and force-removed);
- at the end only the worktrees the bisect made go, never one through a symbolic link;
- a build that appends to `bisect.jsonl` (its worktree lies inside the bisect folder): a partial line is dropped
  before the next event and the bisect verifies; a whole line is exit 3 naming it, with no finding.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gatekit.bisect.records import BISECT_JOURNAL, BISECT_PLAN, replay
from gatekit.bisect.run import remove_own_worktrees
from gatekit.bisect.verify import verify_bisect
from gatekit.commits import add_worktree, describe, worktree_paths
from tests.conftest import gate_invoke
from tests.test_bisect_run import CULPRIT, Repo, _git, make_repo

GOOD, BAD = CULPRIT - 2, CULPRIT + 1  # three commits after GOOD, the culprit among them: a short bisect


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Repo:
    return make_repo(tmp_path_factory.mktemp("bisect-integrity") / "repo")


def _user_worktree(repo: Repo, path: Path) -> Path:
    """A worktree of the user's, with work not committed yet."""
    _git(repo.root, "worktree", "add", "-q", "--detach", str(path), repo.shas[0])
    (path / "notes.txt").write_text("uncommitted work\n")
    return path / "notes.txt"


def test_out_into_a_folder_that_is_not_empty_is_refused(repo: Repo, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "gate.toml").write_text("# the user's own gate file\n")
    notes = _user_worktree(repo, out / "worktrees" / "feature")
    done = gate_invoke("bisect", repo.shas[GOOD], repo.shas[BAD], "--out", str(out), "--build", repo.build,
                       cwd=repo.root)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert str(out) in line and "not empty" in line and "give a new --out" in line
    assert (out / "gate.toml").read_text() == "# the user's own gate file\n"
    assert notes.read_text() == "uncommitted work\n" and not (out / BISECT_JOURNAL).exists()
    assert sorted(p.name for p in out.iterdir()) == ["gate.toml", "worktrees"]


def test_only_the_worktrees_the_bisect_made_are_removed(repo: Repo, tmp_path: Path) -> None:
    folder = tmp_path / "bisect"
    commits = [describe(repo.root, sha) for sha in repo.shas[:3]]
    ours = add_worktree(repo.root, commits[0].sha, folder / "worktrees" / f"000-{commits[0].sha[:12]}")
    theirs = _user_worktree(repo, folder / "worktrees" / "feature")
    elsewhere = _user_worktree(repo, tmp_path / "elsewhere")
    link = folder / "worktrees" / f"001-{commits[1].sha[:12]}"  # where the bisect would put commit 1's
    link.symlink_to(elsewhere.parent, target_is_directory=True)
    said: list[str] = []
    remove_own_worktrees(repo.root, folder, commits, said.append)
    assert not ours.exists() and ours.resolve() not in worktree_paths(repo.root)
    assert theirs.read_text() == elsewhere.read_text() == "uncommitted work\n"
    assert {theirs.parent.resolve(), elsewhere.parent.resolve()} <= worktree_paths(repo.root)
    assert said == [f"bisect: {link} is a symbolic link, not a worktree this bisect made; left alone"]


def _bisect(repo: Repo, out: Path, build: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gatekit.cli", "bisect", repo.shas[GOOD], repo.shas[BAD],
                           "--build", build, "--out", str(out)], cwd=repo.root, capture_output=True, text=True,
                          timeout=600)


def _appending(text: str, folder: Path, name: str = BISECT_JOURNAL) -> str:
    """The build, after it appends `text` to the bisect's file `name`, its journal by default (it runs in
    `<out>/worktrees/<commit>`)."""
    script = folder / "append_then_build.py"
    script.write_text(f"import subprocess, sys\nopen('../../{name}', 'a').write({text!r})\n"
                      "sys.exit(subprocess.call([sys.executable, 'build.py']))\n")
    return f"{sys.executable} {script}"


def test_a_partial_line_a_build_appends_to_the_journal_is_dropped(repo: Repo, tmp_path: Path) -> None:
    out = tmp_path / "bisect"
    out.mkdir()  # an empty folder is fine
    done = _bisect(repo, out, _appending('{"event": "probe_end", "commit": ', tmp_path))
    assert done.returncode == 0, done.stderr
    state = replay(out)
    assert state.stop is not None and state.stop.culprit == CULPRIT - GOOD
    verify_bisect(out)  # the chain, every probe, the finding


def test_a_whole_line_a_build_appends_to_the_journal_is_exit_3_naming_it(repo: Repo, tmp_path: Path) -> None:
    out = tmp_path / "bisect"
    done = _bisect(repo, out, _appending('{"event": "note"}\n', tmp_path))
    assert done.returncode == 3, done.stderr
    first = (out / BISECT_JOURNAL).read_text().splitlines().index('{"event": "note"}') + 1
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("gate: error: ")]
    assert f"{BISECT_JOURNAL}: line {first}" in error, error
    assert "outcome:" not in done.stdout and not list(out.glob("bisect-finding.*"))


@pytest.mark.parametrize("name", [BISECT_PLAN, "gate.toml"])
def test_a_build_that_edits_the_bisects_plan_or_gate_file_gets_no_outcome(repo: Repo, tmp_path: Path,
                                                                          name: str) -> None:
    """The plan (the preregistration the journal is chained on) and the copy of the gate file whose sha256 it
    holds are what `gate verify` checks the bisect against: a build that edits either is exit 3 naming the
    file, before any outcome is said or a finding written (the culprit line was printed first)."""
    out = tmp_path / "bisect"
    done = _bisect(repo, out, _appending("\n# edited by the build\n", tmp_path, name))
    assert done.returncode == 3, done.stderr
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("gate: error: ")]
    assert str(out / name) in error, error
    said = done.stdout + done.stderr
    assert "outcome:" not in said and "bisect: culprit" not in said and "of the posterior" not in said, said
    assert not list(out.glob("bisect-finding.*"))
    verified = gate_invoke("verify", str(out), cwd=repo.root)
    assert verified.returncode == 3 and name in verified.stderr, verified.stderr

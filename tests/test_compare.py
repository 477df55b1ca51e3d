"""`gate compare BASE [HEAD]` (the PR gate) and a bisect of a commit that changes a config default, end to end with
real processes and real git repositories (the process and the repository are the subject): a tiny trainer whose
train time is a seeded value around its commit's level (so no decision depends on this machine's timing), its
effective config echoed as the trainer contract says.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gatekit.bisect.records import replay
from gatekit.bisect.run import BisectOptions, run_bisect
from gatekit.bisect.search import Outcome
from gatekit.compare import CompareOptions, run_compare
from gatekit.verify import verify_series
from tests.conftest import write_toml

# The train time is base_s × slowdown × a fixed factor of the run's round (`noise`, from its config): the runs of
# a side differ as the config says, never as this machine's load makes them.
TRAINER = textwrap.dedent('''\
    import json, os, sys, time, tomllib

    config = tomllib.load(open(sys.argv[sys.argv.index("--config") + 1], "rb"))
    label = os.environ["GATEKIT_RUN"]
    round_ = int(label.split("-r")[1].split("-")[0])
    noise = config.get("noise", [1.0, 1.002, 0.998])
    elapsed = config["base_s"] * config.get("slowdown", 1.0) * noise[(round_ - 1) % len(noise)]
    time.sleep(0.05)  # long enough for the sampler's window
    json.dump({"metrics": {"train_elapsed_s": elapsed},
               "config": {k: v for k, v in config.items() if k != "noise"}}, open(os.environ["GATEKIT_RESULT"], "w"))
''')


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def commit(root: Path, subject: str, **config: object) -> str:
    """The arm's config with these values (the others as they were), committed; the new sha."""
    path = root / "configs" / "arm.toml"
    current = {} if not path.is_file() else __import__("tomllib").loads(path.read_text())
    write_toml(path, {**current, **config})
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", subject)
    return _git(root, "rev-parse", "HEAD")


def make_repo(root: Path) -> Path:
    """A repository whose gate file has one arm (`arm`), at a first commit of base_s 10."""
    (root / "configs").mkdir(parents=True)
    gate = {
        "gate": {"id": "pr", "n": 3, "primary": "train_elapsed_s", "direction": "lower"},
        "rules": {"load_limit": 1000.0, "sample_interval_s": 0.02},
        "driver": {"name": "command", "argv": ["{python}", "trainer.py", "--config", "{arm_config}"],
                   "timeout_s": 60, "hash": ["trainer.py"],
                   # this test's own trainers only: others on a shared machine are not its business
                   "busy_pattern": rf"trainer\.py --config {re.escape(str(root))}"},
        "arms": {"arm": {"config": "configs/arm.toml"}},
    }
    _git(root, "init", "-q", "-b", "main")
    write_toml(root / "gate.toml", gate)
    (root / "trainer.py").write_text(TRAINER)
    (root / ".gitignore").write_text("runs/\nfindings/\n")
    commit(root, "the trainer", base_s=10.0, log_every=10)
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def gate(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m gatekit` in the repository, as CI runs it."""
    return subprocess.run([sys.executable, "-m", "gatekit", *args], cwd=repo, capture_output=True, text=True,
                          timeout=300)


def test_python_m_gatekit_is_the_gate_command() -> None:
    done = subprocess.run([sys.executable, "-m", "gatekit", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: gate ") and "compare" in done.stdout


def test_a_head_20_percent_slower_is_a_regression_naming_both_commits(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    head = commit(repo, "a slower data loader", slowdown=1.2)
    junit = repo.parent / "junit.xml"
    done = gate(repo, "compare", "HEAD~1", "--fail-on", "regression", "--json", "--junit", str(junit))
    assert done.returncode == 1, done.stderr
    finding = json.loads(done.stdout)
    assert finding["verdict"]["decision"] == "regression"
    commits = finding["meta"]["commits"]
    assert (commits["base"]["sha"], commits["head"]["sha"]) == (base, head)
    assert commits["head"]["subject"] == "a slower data loader" and commits["merge_base"] is False
    assert commits["config_diff"] == [{"key": "slowdown", "head": 1.2}]  # absent at base
    assert finding["gate"]["arms"] == {"off": "base", "on": "head"}
    assert 19.0 < finding["stats"]["delta_pct"] < 21.0
    assert "<failure" in junit.read_text()
    # the series verifies as any gate's, and the worktrees are gone with the comparison
    series = next(p for p in (repo / "runs").glob("compare-pr-*/runs/*") if p.is_dir())  # (not the runs lock)
    verify_series(series, next((repo / "findings").glob("*.json")))
    assert "worktrees" not in _git(repo, "worktree", "list")


def test_a_commit_that_changes_only_a_config_default_is_recorded_not_invalid(repo: Path) -> None:
    base = _git(repo, "rev-parse", "HEAD")
    commit(repo, "log less often", log_every=20)
    result = run_compare(base, None, CompareOptions(), cwd=repo)
    finding = result.series.finding
    assert finding.decision.value not in ("regression", "invalid"), finding.verdict.reasons
    assert finding.meta.commits is not None
    assert [(c.key, c.base, c.head) for c in finding.meta.commits.config_diff] == [("log_every", 10, 20)]
    summary = gate(repo, "report", str(result.series.finding_paths[0]), "--summary-md", str(repo.parent / "s.md"))
    assert summary.returncode == 0, summary.stderr
    assert "log\\_every 10 → 20" in (repo.parent / "s.md").read_text()  # Markdown-escaped


def test_a_branch_is_compared_with_its_merge_base_not_the_base_branchs_later_slowdown(repo: Path) -> None:
    fork = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-qb", "feature")
    (repo / "README").write_text("docs only\n")
    feature = commit(repo, "docs")
    _git(repo, "checkout", "-q", "main")
    commit(repo, "main gets slower", slowdown=1.2)  # after the branch left: not the branch's doing
    _git(repo, "checkout", "-q", "feature")
    done = gate(repo, "compare", "main", "feature", "--fail-on", "regression", "--json")
    assert done.returncode == 0, done.stderr
    finding = json.loads(done.stdout)
    assert finding["verdict"]["decision"] != "regression"
    commits = finding["meta"]["commits"]
    assert (commits["base"]["sha"], commits["head"]["sha"], commits["merge_base"], commits["requested_base"]) == (
        fork, feature, True, "main")
    assert f"replaced by its merge-base with HEAD, {fork[:12]}" in done.stderr


def test_noisy_runs_fail_unproven_but_not_regression(repo: Path) -> None:
    """A +5 % head on runs too noisy to tell: regression passes it (inconclusive), unproven fails it and says
    which, in JUnit too."""
    commit(repo, "noisy machine", noise=[1.0, 1.12, 0.9])
    commit(repo, "a bit slower", slowdown=1.05)
    junit = repo.parent / "junit.xml"
    lenient = gate(repo, "compare", "HEAD~1", "--fail-on", "regression", "--junit", str(junit))
    assert lenient.returncode == 0, lenient.stderr
    assert "<skipped" in junit.read_text()
    strict = gate(repo, "compare", "HEAD~1", "--fail-on", "unproven", "--junit", str(junit))
    assert strict.returncode == 1, strict.stderr
    assert "inconclusive: could not rule out a slowdown of more than 10 %: the runs were too noisy" in strict.stderr
    text = junit.read_text()
    assert "<failure" in text and "could not rule out a slowdown of more than 10 %" in text


def test_a_failed_build_is_nothing_to_compare(repo: Path) -> None:
    commit(repo, "second", step=1)
    done = gate(repo, "compare", "HEAD~1", "--build", f"{sys.executable} -c 'import sys; sys.exit(125)'")
    assert done.returncode == 3, done.stderr
    assert "exited 125: it cannot be tested; nothing to compare" in done.stderr
    assert "worktrees" not in _git(repo, "worktree", "list")


def test_a_bisect_of_a_one_arm_gate_names_a_culprit_that_changes_a_config_default(repo: Path) -> None:
    good = _git(repo, "rev-parse", "HEAD")
    shas = [commit(repo, f"commit {k}" + (": raise the slowdown default" if k == 3 else ""),
                   **({"slowdown": 1.2} if k == 3 else {"step": k})) for k in range(1, 6)]
    result = run_bisect(good, shas[-1], BisectOptions(gate_path=Path("gate.toml"), out=repo.parent / "bisect",
                                                      pairs_per_probe=2), cwd=repo)
    assert result.outcome is Outcome.CULPRIT, result.describe()
    assert result.commits[result.culprit].sha == shas[2]
    assert [c.key for c in result.culprit_config_diff] == ["slowdown"]
    assert "its effective config changed: slowdown (absent) → 1.2" in "\n".join(result.describe())
    finding = json.loads((result.folder / "bisect-finding.json").read_text())
    assert finding["culprit_config_diff"] == [{"key": "slowdown", "head": 1.2}]
    assert replay(result.folder).stop is not None

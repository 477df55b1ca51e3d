"""action.yml, the PR gate as a GitHub Action: its steps run with bash in a stand-in for the runner, as the runner
runs a composite action's `run:` steps (`bash --noprofile --norc -e -o pipefail FILE`, `${{ … }}` substituted
first, GITHUB_OUTPUT a fresh file per step whose `name=value` lines become `steps.<id>.outputs.<name>`), in a real
git repository whose pull request is a commit with the fixture trainer (tests/test_compare.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.test_compare import _git, commit, make_repo

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# What the action may read (the issue: inputs, github, runner.temp and earlier steps' outputs)
ALLOWED = re.compile(r"inputs\.[\w-]+|github\.[\w.]+|runner\.temp|steps\.[\w-]+\.outputs\.\w+")


def load_action() -> dict[str, Any]:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


def read_outputs(path: Path) -> dict[str, str]:
    """A GITHUB_OUTPUT file as the runner reads it: `name=value` lines and `name<<DELIMITER` blocks."""
    outputs: dict[str, str] = {}
    lines = iter(path.read_text(encoding="utf-8").splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            block = []
            for value in lines:
                if value == delimiter:
                    break
                block.append(value)
            outputs[name] = "\n".join(block)
        elif "=" in line:
            name, value = line.split("=", 1)
            outputs[name] = value
    return outputs


@dataclass
class Ran:
    """What the stand-in runner saw: the exit code of the step that failed (or 0), every step's outputs, the
    action's outputs and the job summary."""

    rc: int
    failed_step: str | None
    steps: dict[str, dict[str, str]]
    outputs: dict[str, str]
    summary: str
    stderr: str


def run_action(workspace: Path, temp: Path, inputs: dict[str, str], event: dict[str, Any]) -> Ran:
    """Run action.yml's steps as a runner would for `uses: <this repository>@<ref>` in `workspace`."""
    action = load_action()
    given = {name: inputs.get(name, str(spec.get("default", ""))) for name, spec in action["inputs"].items()}
    assert set(inputs) <= set(given), f"inputs the action does not declare: {set(inputs) - set(given)}"
    steps: dict[str, dict[str, str]] = {}

    def value(expression: str) -> str:
        assert ALLOWED.fullmatch(expression), f"action.yml reads {expression!r}"
        head, _, rest = expression.partition(".")
        if head == "inputs":
            return given[rest]
        if head == "runner":
            return str(temp)
        if head == "steps":
            step_id, _, name = rest.partition(".outputs.")
            return steps.get(step_id, {}).get(name, "")
        found: Any = {"event": event}
        for key in rest.split("."):
            found = found.get(key, "") if isinstance(found, dict) else ""
        return str(found)

    def substitute(text: str) -> str:
        return EXPRESSION.sub(lambda m: value(m.group(1)), text)

    summary_file = temp / "step_summary.md"
    summary_file.touch()
    stderr = []
    for index, step in enumerate(action["runs"]["steps"]):
        if "uses" in step:  # an optional step of another action (upload-artifact): not this test's business
            continue
        assert step["shell"] == "bash" and "if" not in step, step
        script = temp / f"step-{index}.sh"
        script.write_text(substitute(step["run"]), encoding="utf-8")
        output_file = temp / f"output-{index}"
        output_file.touch()
        env = {**os.environ, "GITHUB_ACTION_PATH": str(ROOT), "GITHUB_OUTPUT": str(output_file),
               "GITHUB_STEP_SUMMARY": str(summary_file), "RUNNER_TEMP": str(temp), "GITHUB_WORKSPACE": str(workspace),
               **{name: substitute(str(text)) for name, text in step.get("env", {}).items()}}
        cwd = workspace / substitute(step.get("working-directory", "."))
        done = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", str(script)], cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=300)
        stderr.append(done.stdout + done.stderr)
        steps[step.get("id", f"step-{index}")] = read_outputs(output_file)
        if done.returncode != 0:  # the runner stops the action at a failed step
            failed = step.get("id", str(index))
            break
    else:
        failed = None
    outputs = {name: substitute(spec["value"]) for name, spec in action["outputs"].items()}
    return Ran(done.returncode if failed else 0, failed, steps, outputs, summary_file.read_text(encoding="utf-8"),
               "\n".join(stderr))


def test_the_action_is_composite_bash_and_reads_only_what_a_pr_workflow_gives() -> None:
    action = load_action()
    assert action["runs"]["using"] == "composite"
    assert {"gate", "base", "arm", "build", "fail-on", "python"} <= set(action["inputs"])
    assert action["inputs"]["fail-on"]["default"] == "regression"
    assert {"decision", "delta_pct", "finding"} <= set(action["outputs"])
    for step in action["runs"]["steps"]:
        assert "uses" in step or step["shell"] == "bash", step.get("name")
    expressions = EXPRESSION.findall(ACTION.read_text(encoding="utf-8"))
    assert expressions and all(ALLOWED.fullmatch(e) for e in expressions), expressions
    for step in action["runs"]["steps"]:  # expressions go through env, never into the script's text
        assert "run" not in step or not EXPRESSION.search(step["run"]), step.get("name")


@pytest.fixture
def pull_request(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository whose pull request (the checked-out HEAD) makes the trainer 20 % slower: (repo, base, head)."""
    repo = make_repo(tmp_path / "repo")
    base = _git(repo, "rev-parse", "HEAD")
    head = commit(repo, "a slower data loader", slowdown=1.2)
    return repo, base, head


def test_a_pull_request_20_percent_slower_fails_the_step_and_names_the_regression(
        pull_request: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, base, head = pull_request
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    # the test's own Python imports gatekit: the install step uses it as it is
    ran = run_action(repo, temp, {"python": sys.executable},
                     {"pull_request": {"base": {"sha": base}, "head": {"sha": head}}})
    assert (ran.rc, ran.failed_step) == (1, "compare"), ran.stderr
    assert ran.steps["setup"]["python"] == sys.executable or Path(ran.steps["setup"]["python"]).samefile(
        sys.executable)
    assert ran.outputs["decision"] == "regression", ran.stderr
    assert 19.0 < float(ran.outputs["delta_pct"]) < 21.0
    assert ran.outputs["finding"].endswith(".json") and Path(ran.outputs["finding"]).is_file()
    assert "regression" in ran.summary.lower() and base[:7] in ran.summary and head[:7] in ran.summary
    assert "<failure" in Path(ran.outputs["junit"]).read_text(encoding="utf-8")


def test_without_a_base_the_step_fails_saying_so(pull_request: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, _, _ = pull_request
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    ran = run_action(repo, temp, {"python": sys.executable}, {})  # a push event: no pull request
    assert (ran.rc, ran.failed_step) == (2, "compare")
    assert "no base: give the input base" in ran.stderr
    assert ran.outputs["decision"] == ""


def test_a_gate_that_cannot_start_fails_the_step_and_says_why_in_the_summary(
        pull_request: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, base, head = pull_request
    temp = tmp_path / "runner-temp"
    temp.mkdir()
    ran = run_action(repo, temp, {"python": sys.executable, "arm": "no-such-arm"},
                     {"pull_request": {"base": {"sha": base}, "head": {"sha": head}}})
    assert (ran.rc, ran.failed_step) == (2, "compare"), ran.stderr
    assert ran.outputs["decision"] == "" and ran.outputs["finding"] == ""
    assert "gate compare exited 2 before it decided" in ran.summary and "no-such-arm" in ran.summary

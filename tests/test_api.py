"""The Python API (gatekit.analyze, run, compare, verify; docs/api.md): the typed records the commands print, the
GatekitError family for bad input, and `import gatekit` that loads none of the heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import gatekit
from gatekit.errors import ConfigError, GatekitError, VerificationError
from gatekit.finding import Decision, Finding
from gatekit.series.runner import SeriesResult
from gatekit.verify import VerifyReport
from tests.conftest import FIXTURES, make_gate
from tests.test_compare import _git, commit, make_repo


def test_import_gatekit_stays_cheap_and_the_api_names_stay_functions() -> None:
    code = ("import sys, gatekit; heavy = [m for m in ('pandas', 'scipy', 'click', 'matplotlib', 'gatekit.api') "
            "if m in sys.modules]; "
            "from gatekit.verify import verify_series; from gatekit.compare import run_compare; import gatekit.compare; "
            "print(heavy, [getattr(gatekit, n).__module__ for n in gatekit.API])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split("\n")[0] == "[] ['gatekit.api', 'gatekit.api', 'gatekit.api', 'gatekit.api']"


def test_analyze_a_csv_returns_the_seed_finding() -> None:
    finding = gatekit.analyze(FIXTURES / "seed_s6.csv", gate=FIXTURES / "seed_gate.toml")
    assert isinstance(finding, Finding)
    assert finding.decision is Decision.ADOPTED
    assert finding.stats.delta_pct == pytest.approx(-1.4347, abs=5e-5)
    with pytest.raises(ConfigError, match="no such series directory or CSV file"):
        gatekit.analyze(FIXTURES / "absent.csv", gate=FIXTURES / "seed_gate.toml")


def test_run_then_verify_then_analyze_the_series(tmp_path: Path) -> None:
    gate_dir = make_gate(tmp_path / "g")
    lines: list[str] = []
    result = gatekit.run("off", "on", gate=gate_dir.gate, n=2, progress=lines.append)
    assert isinstance(result, SeriesResult) and isinstance(result.finding, Finding)
    assert [r.label for r in result.finding.runs] == ["off-r1", "on-r1", "off-r2", "on-r2"]
    assert lines  # the progress lines gate prints on stderr
    json_path = next(p for p in result.finding_paths if p.suffix == ".json")
    report = gatekit.verify(result.series_dir, json_path)
    assert isinstance(report, VerifyReport) and (report.records, report.finding) == (4, json_path)
    again = gatekit.analyze(result.series_dir)
    assert again.to_json() == result.finding.to_json()
    assert json.loads(json_path.read_text())["verdict"]["decision"] == again.decision.value
    record = result.series_dir / "off-r1" / "record.json"
    record.write_text(record.read_text().replace("off-r1", "off-r9", 1))
    with pytest.raises(VerificationError):
        gatekit.verify(result.series_dir)


def test_run_refuses_one_arm_named_as_the_command_does(tmp_path: Path) -> None:
    gate_dir = make_gate(tmp_path / "g")
    with pytest.raises(GatekitError, match="name both arms or neither"):
        gatekit.run("off", gate=gate_dir.gate)


def test_compare_a_head_20_percent_slower(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    base = _git(repo, "rev-parse", "HEAD")
    head = commit(repo, "a slower data loader", slowdown=1.2)
    result = gatekit.compare(base, cwd=repo)
    assert result.finding.decision is Decision.REGRESSION
    commits = result.finding.meta.commits
    assert commits is not None and (commits.base.sha, commits.head.sha) == (base, head)
    with pytest.raises(ConfigError, match="drop BASE, HEAD"):
        gatekit.compare(base, resume=tmp_path / "somewhere", cwd=repo)

"""The commands that start no trainer run where there is no `fcntl` and no `os.fork` (Windows); a gate says
plainly that it needs Linux or macOS (docs/install.md, "Platforms").

Windows itself is not tested here. A stand-in for it: real `gate` processes whose Python has no `fcntl` module
and no `os.fork` (a `sitecustomize` on PYTHONPATH removes both before gatekit is imported), run on this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, make_gate

REPO = Path(__file__).resolve().parents[1]
FINDINGS = REPO / "findings" / "h200-2026-12-01-duet12" / "round2"
SERIES = FINDINGS / "runs" / "demo-duet-20261201-211204"  # a committed series and its finding
FINDING = FINDINGS / "findings" / "demo-duet-2026-12-01.json"

STAND_IN = '''\
"""A stand-in for Windows' Python in what gatekit must do without: no fcntl module, no os.fork."""
import os
import sys


class NoFcntl:
    def find_spec(self, name, path=None, target=None):
        if name == "fcntl":
            raise ModuleNotFoundError("No module named 'fcntl'", name=name)
        return None


sys.meta_path.insert(0, NoFcntl())
sys.modules.pop("fcntl", None)
del os.fork
'''


@pytest.fixture
def without_fcntl_and_fork(tmp_path: Path) -> dict[str, str]:
    """The environment of a `gate` process with the stand-in on its PYTHONPATH."""
    site = tmp_path / "stand-in"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STAND_IN)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def _gate(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gatekit.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_stand_in_removes_fcntl_and_fork(without_fcntl_and_fork: dict[str, str]) -> None:
    probe = "import os\ntry:\n    import fcntl\nexcept ModuleNotFoundError:\n    print(hasattr(os, 'fork'))"
    done = subprocess.run([sys.executable, "-c", probe], env=without_fcntl_and_fork, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr


@pytest.mark.parametrize("args", [
    ["--help"],
    ["analyze", str(FIXTURES / "seed_s6.csv"), "--gate", str(FIXTURES / "seed_gate.toml")],
    ["verify", str(SERIES), str(FINDING)],
    ["simulate", "--draws", "50"],
    ["history", str(FINDINGS / "findings"), "--metric", "delta_pct"],
], ids=lambda args: args[0])
def test_a_command_that_starts_no_trainer_runs_without_fcntl_and_fork(without_fcntl_and_fork: dict[str, str],
                                                                      args: list[str]) -> None:
    done = _gate(without_fcntl_and_fork, *args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_report_site_and_import_write_without_fcntl_and_fork(without_fcntl_and_fork: dict[str, str],
                                                             tmp_path: Path) -> None:
    """The writers too; the site draws its pages in two worker processes, started afresh without fork."""
    env, out = without_fcntl_and_fork, tmp_path / "out"
    report = _gate(env, "report", str(FINDING), "--html", str(out / "html"), "--md", str(out / "report.md"))
    assert report.returncode == 0, report.stderr
    assert (out / "html" / "demo-duet-2026-12-01" / "index.html").is_file() and (out / "report.md").is_file()
    findings = tmp_path / "findings"
    shutil.copytree(FINDINGS / "findings", findings)
    site = _gate(env, "site", str(findings), "-o", str(out / "site"), "--jobs", "2")
    assert site.returncode == 0, site.stderr
    pages = sorted(p.parent.name for p in (out / "site").glob("*/index.html"))
    assert len(pages) == len(list(findings.glob("*.json"))), pages
    imported = _gate(env, "import", "hyperfine", str(FIXTURES / "hyperfine_three.json"), "--off", "1", "--on", "2",
                     "--out", str(out / "imported"), "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["gate"]["arms"]


def test_a_gate_without_file_locks_says_where_gates_run_and_runs_nothing(without_fcntl_and_fork: dict[str, str],
                                                                        tmp_path: Path) -> None:
    g = make_gate(tmp_path / "g")
    done = _gate(without_fcntl_and_fork, "run", "off", "on", cwd=g.root)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "has no fcntl" in line and "Linux and macOS" in line and "docs/install.md" in line
    runs = g.root / "runs"  # said before the runs folder is made (gate run), or in it, empty of series
    assert g.order() == [] and not (runs.exists() and any(p.is_dir() for p in runs.iterdir()))

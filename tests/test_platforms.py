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

# what os lacks on Windows (beyond fork) that gatekit's commands used
WINDOWS_LACKS = ("sched_getaffinity", "sched_setaffinity", "O_NOFOLLOW", "O_NONBLOCK", "O_CLOEXEC", "O_DIRECTORY",
                 "fchmod")

STAND_IN = '''\
"""A stand-in for Windows' Python in what gatekit must do without: no fcntl module, no os.fork, no CPU
affinity calls (macOS lacks them too), no open flags O_NOFOLLOW, O_NONBLOCK, O_CLOEXEC, O_DIRECTORY and no
os.fchmod."""
import os
import shutil
import sys


class NoFcntl:
    def find_spec(self, name, path=None, target=None):
        if name == "fcntl":
            raise ModuleNotFoundError("No module named 'fcntl'", name=name)
        return None


sys.meta_path.insert(0, NoFcntl())
sys.modules.pop("fcntl", None)
del os.fork
for name in WINDOWS_LACKS:
    delattr(os, name)
shutil._use_fd_functions = False  # as on Windows, where shutil.rmtree cannot work through descriptors
'''.replace("WINDOWS_LACKS", repr(WINDOWS_LACKS))


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
    probe = ("import os\ntry:\n    import fcntl\nexcept ModuleNotFoundError:\n"
             f"    print([hasattr(os, name) for name in ('fork', *{WINDOWS_LACKS!r})])")
    done = subprocess.run([sys.executable, "-c", probe], env=without_fcntl_and_fork, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, f"{[False] * (1 + len(WINDOWS_LACKS))}\n"), done.stderr


def test_bisect_and_campaign_import_and_count_the_cpus_without_affinity_calls(
        without_fcntl_and_fork: dict[str, str]) -> None:
    """Where os has no sched_getaffinity (macOS, Windows) the CPUs this process may use are all the machine's,
    from the one helper bisect, campaign and the site's workers ask; bisect and campaign import there."""
    probe = ("import os, gatekit.bisect.run, gatekit.campaign, gatekit.report.site\n"
             "from gatekit.slots import CAN_PIN_CPUS, usable_cpus\n"
             "print(usable_cpus() == tuple(range(os.cpu_count())), CAN_PIN_CPUS,\n"
             "      gatekit.report.site.default_jobs() == min(8, os.cpu_count()))")
    done = subprocess.run([sys.executable, "-c", probe], env=without_fcntl_and_fork, capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert (done.returncode, done.stdout) == (0, "True False True\n"), done.stderr


def test_usable_cpus_is_the_affinity_mask_where_there_is_one() -> None:
    from gatekit.slots import usable_cpus

    assert usable_cpus() == tuple(sorted(os.sched_getaffinity(0)))


def test_gatekits_own_files_are_written_read_and_refused_through_links_without_the_flags(
        without_fcntl_and_fork: dict[str, str], tmp_path: Path) -> None:
    """Without O_NOFOLLOW, O_NONBLOCK, O_CLOEXEC and os.fchmod: a file is still written atomically with the
    usual mode, a journal appended and read, a run file read, and a link in place of a file gatekit owns or of
    a run file still refused."""
    probe = f"""
import os, sys
from pathlib import Path
from gatekit.errors import RunFileError
from gatekit.runfiles import read_run_file
from gatekit.storage import Journal, atomic_write_text, read_own_file
root = Path({str(tmp_path)!r})
atomic_write_text(root / "a.txt", "hello")
journal = Journal(root / "journal.jsonl")
journal.append("start")
print(oct(os.stat(root / "a.txt").st_mode & 0o777), read_run_file(root / "a.txt", 100), len(read_own_file(root / "journal.jsonl")) > 0)
os.symlink(root / "a.txt", root / "link.jsonl")
try:
    read_own_file(root / "link.jsonl")
except OSError as exc:
    print("refused:", exc.strerror)
(root / "run").mkdir()
os.symlink(root / "a.txt", root / "run" / "result.json")
try:
    read_run_file(root / "run" / "result.json", 100)
except RunFileError as exc:
    print("refused run file")
"""
    done = subprocess.run([sys.executable, "-c", probe], env=without_fcntl_and_fork, capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    umask = os.umask(0)
    os.umask(umask)
    assert done.returncode == 0, done.stderr
    written, refused, refused_run = done.stdout.splitlines()
    assert written == f"{oct(0o666 & ~umask)} b'hello' True"
    assert refused.startswith("refused: is a symbolic link") and refused_run == "refused run file"


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

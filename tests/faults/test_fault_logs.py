"""A trainer's output cannot hang the gate: metrics read from its logs by regex (issue 19, point 10).

Each case runs the command driver in a process of its own with a deadline, so a regression shows as a
failed test, never as a hung suite: a trainer that replaces its stdout.log with a FIFO (opening it for the
metric regexes blocked forever), and a lazy regex over one long line (it backtracked for minutes, past the
run's timeout, and Python's `re` cannot be interrupted).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

DRIVE = """
import json, os, sys, time
from pathlib import Path
if sys.argv[5] == "no-fork":  # a stand-in for Windows, which has no fork
    del os.fork
from gatekit.driver import ArmInput, RunRequest
from gatekit_drivers.command import CommandDriver

folder, trainer, pattern, timeout_s = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
driver = CommandDriver.from_options({"argv": [sys.executable, "-c", trainer], "metrics": {"train_elapsed_s": pattern}},
                                    source=folder / "gate.toml", base_dir=folder)
run_dir = folder / "off-r1"
run_dir.mkdir()
request = RunRequest(arm=ArmInput("off", None), label="off-r1", run_dir=run_dir, result_path=run_dir / "result",
                     timeout_s=timeout_s, stdout_path=run_dir / "stdout.log", stderr_path=run_dir / "stderr.log")
began = time.monotonic()
outcome = driver.run(request)
print(json.dumps({"error": outcome.error, "metrics": dict(outcome.metrics), "took_s": time.monotonic() - began}))
"""


def _drive(folder: Path, trainer: str, pattern: str, timeout_s: float, fork: str = "fork") -> dict[str, object]:
    """One run of `trainer` (Python code) through the command driver, in a process killed after 120 s; with
    `fork="no-fork"` that process has no os.fork."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", DRIVE, str(folder), trainer, pattern, str(timeout_s), fork],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_trainer_that_replaces_its_stdout_log_with_a_fifo_fails_its_run_and_cannot_block_the_gate(
        tmp_path: Path) -> None:
    trainer = ("import os\nlog = os.path.join(os.environ['GATEKIT_RUN_DIR'], 'stdout.log')\n"
               "print('train elapsed: 12.5s', flush=True)\nos.unlink(log)\nos.mkfifo(log)\n")
    outcome = _drive(tmp_path, trainer, r"train elapsed: ([0-9.]+)s", timeout_s=30)
    assert outcome["metrics"] == {}
    assert outcome["error"] == f"log {tmp_path / 'off-r1' / 'stdout.log'}: is not a regular file (a FIFO)"


@pytest.mark.parametrize("fork", ["fork", "no-fork"])
def test_a_metric_regex_that_backtracks_on_a_long_line_is_stopped_at_the_runs_timeout(tmp_path: Path,
                                                                                       fork: str) -> None:
    """`elapsed.*?([0-9.]+)s` over a 256 KB line of digits with no `s` after them: quadratic backtracking
    (over 300 s before). The regexes run in a child process killed when the run's time is up: forked, or
    where there is no fork (Windows) a new interpreter."""
    trainer = "print('elapsed ' + '1' * 256_000)\n"
    began = time.monotonic()
    outcome = _drive(tmp_path, trainer, r"elapsed.*?([0-9.]+)s", timeout_s=3, fork=fork)
    assert outcome["metrics"] == {}
    assert outcome["error"].startswith("metric regexes (train_elapsed_s) did not finish within the run's timeout "
                                       "(3 s)"), outcome["error"]
    assert time.monotonic() - began < 100  # the deadline holds however slow the machine is (the process: 120 s)


@pytest.mark.parametrize("fork", ["fork", "no-fork"])
def test_metric_regexes_still_read_the_logs_tail(tmp_path: Path, fork: str) -> None:
    """The search moved to a child process; what it finds is what it found: stdout first, then stderr, the
    first group, only finite numbers (a pattern's flags travel with it to a new interpreter)."""
    trainer = ("import sys\nprint('x' * 100)\nprint('TRAIN elapsed: 12.5s')\n"
               "print('train elapsed: 99s', file=sys.stderr)\n")
    outcome = _drive(tmp_path, trainer, r"(?i)train elapsed: ([0-9.]+)s", timeout_s=30, fork=fork)
    assert outcome == {**outcome, "error": "", "metrics": {"train_elapsed_s": 12.5}}

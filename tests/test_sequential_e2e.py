"""The sequential policy end to end on real processes: a trainer whose run time drifts by +1 % per run, one
run slowed about 10x by real CPU-burning processes that this test starts on the trainer's CPU, and a true
−5 % on the on arm. The policy adopts it; the same trainer with no effect is not adopted.

The slowed run of the gain is on-r6, in stage 2: a 10x slow on run among look 1's four pairs leaves the
Hodges–Lehmann estimate near the largest of the other three differences, so where this box's wall times
scatter by ±5 % (more than the effect) look 1 stops early as inconclusive (v4's documented cost; never a
pass). The null's slowed run stays in stage 1 (on-r2).

The trainer burns a fixed amount of its own CPU time (pinned to one CPU) and reports the wall time it took:
steady on a quiet CPU, and about (hogs + 1) times slower while the hogs share that CPU with it. It also
reports its CPU time / wall time, so a test run where other processes took the CPU from it is skipped, not
judged (make test runs these tests alone, after the others).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import GateDir, gate_invoke, make_gate

TRAINER = '''"""Burns base_cpu_s x 1.01^k x factor of CPU time (k: runs before this one), reports the wall time."""
import json, os, sys, time, tomllib

config = tomllib.load(open(sys.argv[sys.argv.index("--config") + 1], "rb"))
run = os.environ["GATEKIT_RUN"]
os.sched_setaffinity(0, {config["cpu"]})
with open(config["counter"], "a+") as handle:
    handle.seek(0)
    k = len(handle.read().splitlines())
    handle.write(run + "\\n")
with open(config["log"], "a") as handle:
    handle.write(f"start {run} {os.environ['GATEKIT_ARM']}\\n")
if run == config.get("slow_run"):
    deadline = time.monotonic() + 20
    while not os.path.exists(config["go"]) and time.monotonic() < deadline:
        time.sleep(0.005)
target = config["base_cpu_s"] * 1.01 ** k * config["factor"]
began_cpu, began = time.process_time(), time.perf_counter()
while time.process_time() - began_cpu < target:
    pass
elapsed = time.perf_counter() - began
cpu_share = (time.process_time() - began_cpu) / elapsed  # under 1 where other processes shared the CPU
with open(os.environ["GATEKIT_RESULT"], "w") as handle:
    json.dump({"metrics": {"train_elapsed_s": elapsed, "psnr_db": 30.0, "cpu_share": cpu_share},
               "config": config["flags"]}, handle)
with open(config["log"], "a") as handle:
    handle.write(f"end {run}\\n")
if run == config.get("slow_run"):  # exit only once the hogs are gone, so they slow no other run
    deadline = time.monotonic() + 20
    while not os.path.exists(config["released"]) and time.monotonic() < deadline:
        time.sleep(0.005)
'''

HOG = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"
HOGS = 9  # with the trainer, ten processes share CPU 0: the slowed run takes about 10x as long
# Started before the series, so its hogs are not children of the gate (which stops a run's escaped
# processes): "start" starts the hogs, "stop" ends them, end of input ends it. Each hog has its own session,
# like the trainer the gate starts: with autogroup scheduling CPU time is shared between sessions.
LAUNCHER = f"""import subprocess, sys
hogs = []
for line in sys.stdin:
    for hog in hogs:
        hog.kill()
        hog.wait()
    hogs = [subprocess.Popen([sys.executable, "-c", {HOG!r}], start_new_session=True)
            for _ in range({HOGS})] if line == "start\\n" else []
    print("ok", flush=True)
for hog in hogs:
    hog.kill()
    hog.wait()
"""
SLOW_RUN = "on-r2"
SLOW_RUN_GAIN = "on-r6"  # stage 2 (see the module docstring)

pytestmark = [pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                                 reason="needs CPU affinity (Linux) and at least 2 CPUs"),
              # Another test worker's processes on CPU 0 slow look 1's runs like the hogs do (4 busy loops
              # beside it: inconclusive 10 times in 10), so make test runs these alone.
              pytest.mark.alone]


def drift_gate(root: Path, on_factor: float, slow_run: str = SLOW_RUN) -> GateDir:
    arm = {"cpu": 0, "counter": str(root / "counter.txt"), "go": str(root / "go"), "released": str(root / "released"),
           "slow_run": slow_run, "base_cpu_s": 0.03}
    g = make_gate(root, off={**arm, "factor": 1.0}, on={**arm, "factor": on_factor},
                  driver={"argv": ["{python}", "drift_trainer.py", "--config", "{arm_config}"],
                          "hash": ["drift_trainer.py"]},
                  guards=[], rules={"evidence": "load1", "load_per_core_limit": 1000.0})
    (root / "drift_trainer.py").write_text(TRAINER)
    return g


def slow_down_one_run(g: GateDir, launcher: subprocess.Popen, stop: threading.Event, slow_run: str) -> None:
    """When slow_run starts, start the CPU hogs on its CPU, let it go, and end them when it ends."""
    def logged(line: str) -> bool:
        return g.order_log.exists() and line in g.order_log.read_text().splitlines()

    def tell(command: str) -> None:
        launcher.stdin.write(command + "\n")
        launcher.stdin.flush()
        assert launcher.stdout.readline().strip() == "ok"

    while not logged(f"start {slow_run} on"):
        if stop.wait(0.005):
            return
    tell("start")
    try:
        time.sleep(0.5)  # every hog spinning before the run's clock starts
        (g.root / "go").write_text("")
        while not logged(f"end {slow_run}") and not stop.wait(0.005):
            pass
    finally:
        tell("stop")
        (g.root / "released").write_text("")


def run_sequential(g: GateDir, slow_run: str = SLOW_RUN) -> dict:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
    stop = threading.Event()
    watcher = threading.Thread(target=slow_down_one_run, args=(g, launcher, stop, slow_run))
    watcher.start()
    try:
        done = gate_invoke("run", "off", "on", "--policy", "sequential", cwd=g.root)
    finally:
        stop.set()
        watcher.join()
        launcher.stdin.close()
        launcher.wait()
    assert done.returncode in (0, 1), done.stderr
    finding = json.loads(g.findings()[0].read_text())
    skip_unless_quiet(finding, slow_run)
    return finding


QUIET_CPU_SHARE = 0.8  # measured here: with shares >= 0.83 both tests pass; at 0.36-0.66 the gain is inconclusive


def skip_unless_quiet(finding: dict, slow_run: str) -> None:
    """These tests judge real wall times: they hold where only the test's own hogs share the trainer's CPU.
    Where another process took more than a fifth of it during any other run, the machine, not the policy,
    decided the outcome: skip, naming the runs."""
    shared = {run["label"]: round(run["metrics"]["cpu_share"], 2) for run in finding["runs"]
              if run["label"] != slow_run and run.get("metrics", {}).get("cpu_share", 1.0) < QUIET_CPU_SHARE}
    if shared:
        pytest.skip(f"other processes shared the trainer's CPU (its CPU time / wall time per run: {shared})")


def elapsed_by_label(finding: dict) -> dict[str, float]:
    return {run["label"]: run["metrics"]["train_elapsed_s"] for run in finding["runs"]
            if "train_elapsed_s" in run.get("metrics", {})}


def assert_one_run_slowed_and_used(finding: dict, slow_run: str = SLOW_RUN) -> None:
    times = elapsed_by_label(finding)
    slow = times.pop(slow_run)
    assert slow > 5 * statistics.median(times.values()), (slow, times)  # the hogs did slow it
    (run,) = [r for r in finding["runs"] if r["label"] == slow_run]
    assert run["used"], run["reason"]  # nothing set it aside: the statistics had to cope with it


def test_drift_and_a_10x_slow_run_adopt_a_true_5_percent_gain(tmp_path: Path) -> None:
    finding = run_sequential(drift_gate(tmp_path / "gain", on_factor=0.95, slow_run=SLOW_RUN_GAIN), SLOW_RUN_GAIN)
    assert finding["verdict"]["decision"] == "adopted", finding["verdict"]["reasons"]
    assert finding["sequential"]["version"] == 8  # the version a new gate file preregisters
    if len(finding["sequential"]["looks"]) == 1:  # a quiet machine: look 1 adopts before the slowed run exists
        assert SLOW_RUN_GAIN not in elapsed_by_label(finding)
        return
    assert_one_run_slowed_and_used(finding, SLOW_RUN_GAIN)


def test_the_same_trainer_with_no_effect_is_not_adopted(tmp_path: Path) -> None:
    finding = run_sequential(drift_gate(tmp_path / "none", on_factor=1.0))
    assert_one_run_slowed_and_used(finding)
    assert finding["verdict"]["decision"] != "adopted", finding["verdict"]["reasons"]

"""How fast `gate` answers: `gate --help` (target < 0.3 s) and the first line of `gate run` (target ≤ 1 s).

    python benchmarks/cli_latency.py [--repeat 10]

`gate --help` runs `--repeat` times as a real process (`python -m gatekit.cli --help`); each time its wall time and
CPU time (user + sys, from wait4) are taken, and the medians printed: once as this environment runs it, once
with Python's bytecode cached (a temporary PYTHONPYCACHEPREFIX, filled by one run first), as an installed wheel
runs it (pip compiles it); with PYTHONDONTWRITEBYTECODE=1 and an editable install every `gate` compiles
gatekit's modules from source. `gate run` starts on a gate folder of the
bundled sleep trainer (benchmarks/sleep_trainer.sh, 0.1 s runs) in a temporary folder; the time from its start to
the first line it prints (stdout or stderr) is taken, with the CPU time it had used by then, then it is
interrupted (SIGINT). The load average before
and after is printed beside the figures: on a shared machine the wall times follow the load, the CPU times less.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
GATE = [sys.executable, "-m", "gatekit.cli"]
GATE_FILE = """\
[gate]
id = "latency"
n = 3
primary = "process_wallclock_s"
warmup = 0
[rules]
load_limit = 1000.0
[driver]
argv = ["sh", "sleep_trainer.sh", "0.1"]
hash = ["sleep_trainer.sh"]
[arms.off]
[arms.on]
"""


def timed(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `argv`, its output discarded."""
    began = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0
    return time.perf_counter() - began, usage.ru_utime + usage.ru_stime


def first_line_s(folder: Path) -> tuple[float, float, str]:
    """Seconds from starting `gate run` to the first line it prints, the CPU seconds it had used by then, and
    that line."""
    began = time.perf_counter()
    child = subprocess.Popen([*GATE, "run", "off", "on"], cwd=folder, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert child.stdout is not None
    try:
        ready, _, _ = select.select([child.stdout], [], [], 120)
        elapsed = time.perf_counter() - began
        used = psutil.Process(child.pid).cpu_times()
        line = child.stdout.readline().decode("utf-8", errors="replace").strip() if ready else "(nothing in 120 s)"
    finally:
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=60)
    return elapsed, used.user + used.system, line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    helps = [timed([*GATE, "--help"]) for _ in range(args.repeat)]
    with tempfile.TemporaryDirectory() as cache:
        cached_env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                      "PYTHONPYCACHEPREFIX": cache}
        timed([*GATE, "--help"], env=cached_env)  # fills the cache
        helps_cached = [timed([*GATE, "--help"], env=cached_env) for _ in range(args.repeat)]
    firsts = []
    with tempfile.TemporaryDirectory() as folder:
        for k in range(max(3, args.repeat // 3)):
            gate_dir = Path(folder) / f"g{k}"
            gate_dir.mkdir()
            (gate_dir / "gate.toml").write_text(GATE_FILE)
            shutil.copy(HERE / "sleep_trainer.sh", gate_dir / "sleep_trainer.sh")
            firsts.append(first_line_s(gate_dir))
    load_after = os.getloadavg()[0]
    for label, runs in (("", helps), (", bytecode cached", helps_cached)):
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        print(f"gate --help{label}: median {wall:.3f} s wall, {cpu:.3f} s CPU over {len(runs)} runs "
              f"(min {min(w for w, _ in runs):.3f} s wall, {min(c for _, c in runs):.3f} s CPU); target < 0.3 s")
    print(f"gate run, first line: median {statistics.median(s for s, _, _ in firsts):.3f} s wall, "
          f"{statistics.median(c for _, c, _ in firsts):.3f} s CPU (max {max(s for s, _, _ in firsts):.3f} s wall) "
          f"over {len(firsts)} runs; target ≤ 1 s")
    print(f"  first line: {firsts[0][2]}")
    print(f"load1 {load_before:.2f} before, {load_after:.2f} after; {os.cpu_count()} CPUs; Python "
          f"{sys.version.split()[0]}; PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

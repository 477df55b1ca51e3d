"""Gates of many guards: the time to load the gate file and to write its predecision, at 2 000, 5 000 and 10 000
guards (in this process, no trainer runs), and the old way's (tomlkit appending each element) at 2 000.

    python benchmarks/guard_scale.py

2 000 guards took 12.4 s end to end, 5 000 63.7 s and 10 000 1 643 s on e23f857 (issue 27), because tomlkit
re-indexes an array at every element it appends: the predecision and the finding state one rule per guard.
Prints a Markdown table with the machine's load; tests check the complexity by counting (tests/test_large_n.py),
never by timing.
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tomlkit  # noqa: E402

from gatekit.config import load_gate  # noqa: E402
from gatekit.prereg import DecisionSpec, predecision_document, stated_rules  # noqa: E402
from tests.conftest import make_gate  # noqa: E402


def measure(root: Path, guards: int) -> tuple[float, float]:
    g = make_gate(root / f"g{guards}", guards=[{"metric": f"quality_{i}", "direction": "higher", "max_drop": 0.05}
                                               for i in range(guards)])
    began = time.perf_counter()
    config = load_gate(g.gate)
    loaded = time.perf_counter() - began
    began = time.perf_counter()
    predecision_document(DecisionSpec.from_gate(config, "off", "on"), series_id="s", created="2026-12-02",
                         gate_path=g.gate, gate_sha256="0" * 64, schedule=None, arm_configs={"off": None, "on": None},
                         artifacts={}, driver={})
    return loaded, time.perf_counter() - began


def old_rules_array(root: Path, guards: int) -> float:
    """The predecision's rules as tomlkit wrote them before: each line appended to the array."""
    g = make_gate(root / f"old{guards}", guards=[{"metric": f"quality_{i}", "direction": "higher", "max_drop": 0.05}
                                                 for i in range(guards)])
    rules = stated_rules(DecisionSpec.from_gate(load_gate(g.gate), "off", "on"))
    began = time.perf_counter()
    tomlkit.dumps({"stated_rules": rules})
    return time.perf_counter() - began


def main() -> None:
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs; Python "
          f"{platform.python_version()}; load1/5/15 at start: {load}. Command: `python benchmarks/guard_scale.py`.\n")
    print("| guards | load the gate file | write its predecision |")
    print("|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        for guards in (2_000, 5_000, 10_000):
            loaded, written = measure(Path(folder), guards)
            print(f"| {guards:,} | {loaded:.2f} s | {written:.2f} s |".replace(",", " "))
        print(f"\nThe rules array as tomlkit appended it, 2 000 guards: {old_rules_array(Path(folder), 2_000):.2f} s.")


if __name__ == "__main__":
    main()

"""Start-up per run and flagged runs of gate findings, as docs/benchmarks.md reports them.

    python benchmarks/startup_summary.py OUT/findings/*.json [--target 1.0]

Start-up is each run row's `startup_s` (process wallclock − train_elapsed_s), the median over a finding's
runs, and per arm; `warm` counts the rows forked from a warm parent (`warm_parent`, `[driver] preload`). With
`--target S` the last line says whether every finding's median start-up of its warm runs is at most S seconds.
Flagged runs (evidence (i) in their window, e.g. a GPU co-tenant) are listed with their evidence.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def _range(values: list[float]) -> str:
    if not values:
        return "—"
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def summarize(finding: dict[str, Any]) -> tuple[list[str], list[float]]:
    """Lines for one finding, and the start-up of its warm runs."""
    runs = finding.get("runs", [])
    meta, verdict = finding.get("meta", {}), finding.get("verdict", {})
    stats = finding.get("stats", {})
    lines = [f"{meta.get('id')}: {verdict.get('decision')}, Δ {stats.get('delta_pct')} %, {len(runs)} runs"]
    arms = list(dict.fromkeys(run["arm"] for run in runs))
    warm_startup: list[float] = []
    for arm in arms:
        rows = [run for run in runs if run["arm"] == arm]
        startup = [run["startup_s"] for run in rows if isinstance(run.get("startup_s"), (int, float))]
        warm = [run for run in rows if run.get("warm_parent")]
        warm_startup += [run["startup_s"] for run in warm if isinstance(run.get("startup_s"), (int, float))]
        train = [run["metrics"]["train_elapsed_s"] for run in rows if "train_elapsed_s" in run.get("metrics", {})]
        lines.append(f"  {arm}: {len(rows)} runs, {len(warm)} warm; start-up s median (min–max) {_range(startup)}; "
                     f"train_elapsed_s mean {statistics.fmean(train):.4f}" if train else
                     f"  {arm}: {len(rows)} runs, {len(warm)} warm; start-up s {_range(startup)}")
    every = [run["startup_s"] for run in runs if isinstance(run.get("startup_s"), (int, float))]
    lines.append(f"  all runs: start-up s median (min–max) {_range(every)}")
    flagged = [run for run in runs if run.get("load_evidence")]
    lines.append(f"  flagged (evidence (i)): {len(flagged)} of {len(runs)}")
    for run in flagged:
        lines += [f"    {run['label']}: {line}" for line in run.get("window", {}).get("evidence", [])]
    return lines, warm_startup


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("findings", nargs="+", type=Path)
    parser.add_argument("--target", type=float, default=None, help="median warm start-up target, seconds")
    args = parser.parse_args(argv)
    medians = []
    for path in args.findings:
        lines, warm = summarize(json.loads(path.read_text(encoding="utf-8")))
        print(f"{path.name}\n" + "\n".join(lines))
        if warm:
            medians.append(statistics.median(warm))
    if args.target is not None:
        met = bool(medians) and all(m <= args.target for m in medians)
        shown = ", ".join(f"{m:.3f}" for m in medians) or "none"
        print(f"median start-up of warm runs per finding: {shown} s; target ≤ {args.target:g} s: "
              f"{'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

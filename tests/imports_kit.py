"""What the importer tests share: the classic rule worked out by hand from a fixture's raw values, and one
`gate import TOOL …` call whose finding is read back."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from tests.conftest import gate_invoke

DATE = "2026-11-30"
MAX_THRESHOLD_PCT = 10.0  # rules.max_threshold_pct of an import: too noisy to tell above it


def classic_by_hand(off: list[float], on: list[float]) -> tuple[float, float, str]:
    """Δ %, threshold % and decision of the classic rule (DESIGN.md, step 6; README: too noisy to tell),
    lower is better."""
    mean_off, mean_on = statistics.fmean(off), statistics.fmean(on)
    delta_pct = 100 * (mean_on - mean_off) / mean_off
    threshold_pct = max(2 * 100 * statistics.stdev(off) / mean_off, 1.0)
    decision = "adopted" if delta_pct <= -threshold_pct else "regression" if delta_pct >= threshold_pct \
        else "inconclusive" if threshold_pct > MAX_THRESHOLD_PCT else "rejected"
    return delta_pct, threshold_pct, decision


def import_finding(tool: str, *args: str, cwd: Path) -> tuple[Any, dict[str, Any]]:
    """`gate import TOOL ARGS --json` in `cwd` (findings under cwd/findings): the call and its finding."""
    cwd.mkdir(parents=True, exist_ok=True)
    done = gate_invoke("import", tool, *args, "--date", DATE, "--out", str(cwd / "findings"), "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done, json.loads(done.stdout)


def import_error(tool: str, *args: str, cwd: Path) -> str:
    """`gate import TOOL ARGS` that must refuse its input: exit 2, no finding written, one line on stderr."""
    cwd.mkdir(parents=True, exist_ok=True)
    done = gate_invoke("import", tool, *args, "--out", str(cwd / "findings"), cwd=cwd)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert not (cwd / "findings").exists()
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]

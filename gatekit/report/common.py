"""Small shared readers and formatters for reports and exports: numbers, units, a run's values, the CI."""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

ALWAYS_MEASURED = "process_wallclock_s"

# How each decision reads: a callout variant, and the one word a reader scans for.
DECISION_VARIANT = {"adopted": "success", "rejected": "info", "regression": "danger", "guard_failed": "danger",
                    "invalid": "warning"}
FAILING_DECISIONS = ("regression", "guard_failed", "invalid")


def variant_of(decision: str) -> str:
    """Callout variant of a decision; decisions added later (e.g. `inconclusive`) read as neutral."""
    return DECISION_VARIANT.get(decision, "info")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt(value: Any, digits: int = 4) -> str:
    """A number with fixed decimals; '—' for missing or non-finite values; other values as text."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def fmt_signed(value: Any, digits: int = 4) -> str:
    if not is_number(value):
        return "—"
    return f"{value:+.{digits}f}"


def unit_of(metric: str) -> str:
    """The unit a metric's name implies (`train_elapsed_s` → s); '' when the name does not say."""
    suffixes = (("_ms", "ms"), ("_us", "µs"), ("_ns", "ns"), ("_s", "s"), ("_db", "dB"), ("_pct", "%"),
                ("_frac", ""), ("_bytes", "B"), ("_mb", "MB"), ("_gb", "GB"))
    lowered = metric.lower()
    for suffix, unit in suffixes:
        if lowered.endswith(suffix):
            return unit
    return ""


def run_value(run: Mapping[str, Any], metric: str) -> float | None:
    """A run's value of a metric; process_wallclock_s is measured by gatekit, not reported by the trainer."""
    value = run.get(ALWAYS_MEASURED) if metric == ALWAYS_MEASURED else run.get("metrics", {}).get(metric)
    return float(value) if is_number(value) else None


def used_values(runs: Sequence[Mapping[str, Any]], arm: str, metric: str) -> list[float]:
    values = [run_value(r, metric) for r in runs if r.get("used") and r.get("arm") == arm]
    return [v for v in values if v is not None]


def delta_ci(stats: Mapping[str, Any]) -> tuple[float, float, str] | None:
    """The CI of Δ (percent) when the analysis gave one, with its label ("95 % CI" or "CI").

    Accepted shapes: `delta_ci_pct = [lo, hi]` or `{low, high}` / `{lo, hi}`, or
    `delta_ci_low_pct` and `delta_ci_high_pct`; `delta_ci_level` (0.95 or 95) names the level.
    """
    raw = stats.get("delta_ci_pct")
    low = high = None
    if isinstance(raw, (list, tuple)) and len(raw) == 2:
        low, high = raw
    elif isinstance(raw, Mapping):
        low, high = raw.get("low", raw.get("lo")), raw.get("high", raw.get("hi"))
    else:
        low, high = stats.get("delta_ci_low_pct"), stats.get("delta_ci_high_pct")
    if not (is_number(low) and is_number(high)):
        return None
    level = stats.get("delta_ci_level", raw.get("level") if isinstance(raw, Mapping) else None)
    label = "CI"
    if is_number(level):
        label = f"{level * 100 if level <= 1 else level:g} % CI"
    return float(low), float(high), label


def one_line_why(verdict: Mapping[str, Any]) -> str:
    """The decision's first reason: the line a reader needs before anything else."""
    reasons = verdict.get("reasons") or []
    return str(reasons[0]) if reasons else "no reason recorded"


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file or folder name made from an id: no separators, no leading dot, never empty."""
    name = _SAFE.sub("-", text).strip("-.")
    return name[:120] or "finding"


def guard_metrics(data: Mapping[str, Any]) -> list[str]:
    return [str(name) for name in data.get("guards", {})]


def primary_label(data: Mapping[str, Any]) -> str:
    primary = str(data["gate"]["primary"])
    unit = unit_of(primary)
    return f"{primary} ({unit})" if unit else primary

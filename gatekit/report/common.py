"""Small shared readers and formatters for reports and exports: numbers, units, the CI of Δ, a verdict's why.

They read the typed finding (gatekit.finding); a decision's words, severity and whether CI fails on it come
from `gatekit.verdict.Decision`, a run's metric from `RunRow.value_of`.
"""

from __future__ import annotations

import math
import re
from typing import Any, TypeGuard

from gatekit.finding import Finding, Section, Stats
from gatekit.verdict import Decision, Verdict


def is_number(value: Any) -> TypeGuard[float]:
    """A finite int or float (not a bool): what a figure or a table can show as a number."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number_text(value: float, digits: int = 4, sign: str = "") -> str:
    """`digits` decimals, or `digits` significant digits where the decimals would show fewer than two of
    them: 0.000012345 reads 1.234e-05, never 0.0000 (a loss of 1e-05 is a metric too). sign "+" signs it."""
    if value != 0 and abs(round(value, digits)) < 10.0 ** (1 - digits):  # rounded: 0.0099999 is 0.010
        return f"{value:{sign}.{digits}g}"
    return f"{value:{sign}.{digits}f}"


MISSING = "—"  # what reports and exports write for a value that is absent or not a finite number


def fmt(value: Any, digits: int = 4, unit: str = "") -> str:
    """A number with `digits` decimals (significant digits when small, see number_text) and `unit` after it;
    MISSING for missing or non-finite values; other values as text (a bool as yes/no), without the unit."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return number_text(value, digits) + unit
    return str(value) + unit if isinstance(value, int) else str(value)


def fmt_signed(value: Any, digits: int = 4, unit: str = "") -> str:
    """A number with its sign, as `fmt` writes it, and `unit` after it; MISSING for missing or non-finite
    values."""
    if not is_number(value):
        return MISSING
    return number_text(float(value), digits, "+") + unit


def level_text(level: float | None) -> str:
    """A confidence level as the summary writes it: 0.95 → "95 %"."""
    return f"{100 * level:g} %" if level is not None else MISSING


def generated_section(type_: str, **content: Any) -> Section:
    """A narrative section gatekit wrote (marked `generated`, so a report tells it from the ones people add)."""
    return Section(type_, generated=True, **content)


_TIME_UNITS = (("_ms", "ms"), ("_us", "µs"), ("_ns", "ns"), ("_s", "s"))
# a rate: `tokens_per_s` is tokens per second, not a time (a name ending in _s is read as seconds otherwise)
_RATE = re.compile(r"(?:^|.*_)([a-z0-9]+)_per_(ms|us|ns|s)", re.IGNORECASE)


def unit_of(metric: str) -> str:
    """The unit a metric's name implies (`train_elapsed_s` → s, `tokens_per_s` → tokens/s); '' when the name
    does not say."""
    rate = _RATE.fullmatch(metric)
    if rate:
        per = dict(_TIME_UNITS)[f"_{rate.group(2).lower()}"]
        return f"{rate.group(1)}/{per}"
    suffixes = (*_TIME_UNITS, ("_db", "dB"), ("_pct", "%"), ("_frac", ""), ("_bytes", "B"), ("_mb", "MB"),
                ("_gb", "GB"))
    lowered = metric.lower()
    for suffix, unit in suffixes:
        if lowered.endswith(suffix):
            return unit
    return ""


def delta_ci(stats: Stats) -> tuple[float, float, str] | None:
    """The CI of Δ in percent (Welch on log values: the CI of the geometric-mean Δ, docs/statistics.md) with
    its label ("95 % CI"); None when the analysis gave none."""
    low, high, level = stats.ci_low_pct, stats.ci_high_pct, stats.ci_level
    if not (is_number(low) and is_number(high)):
        return None
    label = f"{level * 100 if level <= 1 else level:g} % CI" if is_number(level) else "CI"
    return float(low), float(high), label


def runs_per_arm(finding: Finding) -> str:
    """`n=3` as the gate planned it, or `n=46 off + 14 on` where the arms recorded different numbers of runs
    (an imported tool's file: hyperfine's runs per command follow from its time budget)."""
    first = [run.arm for run in finding.runs if run.retry_of is None and not run.warmup]
    off, on = first.count(finding.off_arm), first.count(finding.on_arm)
    return f"n={finding.gate.n}" if off == on else f"n={off} off + {on} on"


def decision_words(decision: Decision) -> str:
    """A decision as a reader scans for it: `guard_failed` → `GUARD FAILED`."""
    return decision.value.replace("_", " ").upper()


VERDICT_TAG_PREFIX = "gate-"  # analysis tags every finding `gate-<decision>`


def tag_text(tag: str) -> str:
    """A tag as a reader sees it: the verdict tag `gate-guard_failed` as `verdict: guard failed`; any other tag
    as written (the finding keeps the raw tag, which tools filter on)."""
    decision = tag.removeprefix(VERDICT_TAG_PREFIX)
    if tag.startswith(VERDICT_TAG_PREFIX) and decision in {d.value for d in Decision}:
        return f"verdict: {decision.replace('_', ' ')}"
    return tag


def commits_lines(finding: Finding) -> list[str]:
    """What a finding of `gate compare` adds to a summary: the two commits (base: the merge-base, when it
    replaced BASE) and the effective-config keys that differ between them; nothing for another finding."""
    commits = finding.meta.commits
    if commits is None:
        return []
    base, head = commits.base, commits.head
    merged = f" (the merge-base of {commits.requested_base} and head)" if commits.merge_base else ""
    lines = [f"base {base.sha[:12]} {base.subject}{merged}", f"head {head.sha[:12]} {head.subject}"]
    if commits.config_diff:
        lines.append("effective config changed between them: " + "; ".join(c.describe() for c in commits.config_diff))
    else:
        lines.append("effective config: the same at both commits")
    return lines


def one_line_why(verdict: Verdict) -> str:
    """The decision's first reason: the line a reader needs before anything else."""
    return str(verdict.reasons[0]) if verdict.reasons else "no reason recorded"


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A file or folder name made from an id: no separators, no leading dot, never empty."""
    name = _SAFE.sub("-", text).strip("-.")
    return name[:120] or "finding"


def guard_metrics(finding: Finding) -> list[str]:
    """The metrics of the finding's guard results, in the finding's order."""
    return list(finding.guards)


def primary_label(finding: Finding) -> str:
    primary = finding.gate.primary
    unit = unit_of(primary)
    return f"{primary} ({unit})" if unit else primary


# A page links to, and shows images from, http(s) URLs and relative references only (sanitize.safe_url);
# what a section names otherwise is shown as text, with these words.
LINK_LEFT_OUT = "link left out: only http(s) and relative links are shown"
IMAGE_LEFT_OUT = "image left out: only http(s) and relative images are shown"

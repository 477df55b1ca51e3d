"""Small shared readers for reports and exports: units, the CI of Δ, a verdict's why, tags, safe names.

They read the typed finding (gatekit.finding); numbers are written by `gatekit.formatting`; a decision's words,
severity and whether CI fails on it come from `gatekit.verdict.Decision`, a run's metric from `RunRow.value_of`.
"""

from __future__ import annotations

import re

from gatekit.finding import Finding, Stats
from gatekit.formatting import is_number
from gatekit.verdict import Decision, Verdict


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

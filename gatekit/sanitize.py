"""Trainer-supplied data made safe to journal and to write as JSON and TOML.

Whatever a driver reports (a trainer's echoed config, its trace, metric names) is copied into the journal
and the finding. Both must stay valid and identical in JSON and TOML, so values that either format cannot
hold the same way are turned into plain strings here, once, before anything is written:
NaN/±inf → "nan"/"inf"/"-inf", dates → ISO strings, integers beyond 64 bits → strings, lone surrogates →
U+FFFD in values and their escape (`\\udc80`) in keys, so keys stay distinct, None → dropped (TOML has no
null), nesting deeper than MAX_DEPTH → a marker string.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import unicodedata
from typing import Any, Mapping

from gatekit.quality import trace_problem
from gatekit.records import RunOutcome

MAX_DEPTH = 32
# A metric beyond ±1e100 is no measurement; refusing it keeps every square in σ (≤ 1e200) and every sum
# finite, so no statistic can overflow on a trainer's say-so.
MAX_METRIC_MAGNITUDE = 1e100
_INT64 = 1 << 63
_DROP = object()


# Bidirectional overrides and isolates can make a screen show text in another order than it is stored.
_BIDI = frozenset({"\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))})


def show_controls(text: str, keep: str = "") -> str:
    """`text` with control characters (ESC, CR, …) and bidi overrides shown as escapes, except `keep`.

    Trainer-supplied strings reach terminals and report pages; an escape sequence or a bidi override in them
    must not recolor, clear or reorder what a reader sees.
    """
    if text.isprintable() and not (_BIDI & set(text)):
        return text
    return "".join(
        ch if ch in keep or (ch.isprintable() and ch not in _BIDI and unicodedata.category(ch) != "Cc")
        else ch.encode("unicode_escape").decode("ascii") for ch in text)


# A URL scheme (RFC 3986): a letter, then letters, digits, "+", "-" or "."; then a colon.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_LINKABLE_SCHEMES = ("http:", "https:")


def safe_url(value: object) -> str | None:
    """A URL a report page may link to or show as an image: an http(s) URL or a relative reference, as a
    browser reads it; None for anything else (`javascript:`, `data:`, `vbscript:`, `file:` ...).

    Browsers drop tabs and newlines anywhere in a URL and control characters and spaces at its ends, so
    `" java\tscript:"` is a javascript URL: the scheme is judged (and the URL returned) after the same steps.
    """
    if not isinstance(value, str):
        return None
    url = "".join(ch for ch in value if ch not in "\t\n\r").strip("".join(map(chr, range(0x21))))
    scheme = _SCHEME.match(url)
    if scheme is not None and scheme.group().lower() not in _LINKABLE_SCHEMES:
        return None
    return url


def safe_text(text: str) -> str:
    """`text` encodable as UTF-8 (a lone surrogate from a JSON escape becomes U+FFFD)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def safe_key(text: str) -> str:
    """A key (a metric name, a config or trace key) encodable as UTF-8 and still told apart: a lone
    surrogate becomes its escape (`\\ud800`), not U+FFFD, so two keys differing only there stay two."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _safe(value: Any, depth: int) -> Any:
    if value is None:
        return _DROP
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (Mapping, list, tuple)) and depth >= MAX_DEPTH:
        return f"<nested deeper than {MAX_DEPTH} levels>"
    if isinstance(value, Mapping):
        items = ((safe_key(str(k)), _safe(v, depth + 1)) for k, v in value.items())
        return {k: v for k, v in items if v is not _DROP}
    if isinstance(value, (list, tuple)):
        return [v for v in (_safe(item, depth + 1) for item in value) if v is not _DROP]
    return safe_text(str(value))


def json_safe(value: Any) -> Any:
    """Plain data that JSON and TOML both hold exactly (see the module docstring)."""
    result = _safe(value, 0)
    return None if result is _DROP else result


def usable_metric(value: float) -> bool:
    """A finite number within ±MAX_METRIC_MAGNITUDE."""
    return math.isfinite(value) and abs(value) < MAX_METRIC_MAGNITUDE


def safe_outcome(outcome: RunOutcome) -> RunOutcome:
    """A driver's outcome with only finite metrics and JSON/TOML-safe config, trace and error text; a quality
    trace that breaks the trainer contract (gatekit.quality) fails the run.

    Applied to every driver's report, so a plugin (or a trainer) cannot put NaN into a run table or a
    value into the journal that would make it unreadable.
    """
    metrics: dict[str, float] = {}
    dropped: list[str] = []
    clashes: list[str] = []
    for key, value in outcome.metrics.items():
        name = safe_key(str(key))
        if name in metrics or name in dropped:  # only a key spelled with an escape's text can clash
            clashes.append(name)
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        try:
            number = float(number) if number is not None else None
        except OverflowError:
            number = None
        if number is None or not usable_metric(number):
            dropped.append(name)
        else:
            metrics[name] = number
    trace = json_safe(dict(outcome.trace)) or {}
    if dropped:
        earlier = trace.get("gatekit_dropped_metrics")
        earlier = [str(name) for name in earlier] if isinstance(earlier, list) else []
        trace["gatekit_dropped_metrics"] = sorted({*earlier, *dropped})
    error = safe_text(outcome.error)
    if not error and (problem := trace_problem(trace)):  # a quality trace is checked as every trainer input is
        error = f"result {problem}"
    if clashes and not error:
        error = f"metric keys clash once lone surrogates are escaped: {', '.join(sorted(set(clashes)))}"
    wallclock = outcome.process_wallclock_s
    if not isinstance(wallclock, (int, float)) or not math.isfinite(wallclock) or wallclock < 0:
        error = error or f"the driver reported an impossible process wallclock ({wallclock!r})"
        wallclock = 0.0
    return dataclasses.replace(outcome, metrics=metrics, config=json_safe(dict(outcome.config)) or {},
                               trace=trace, error=error, process_wallclock_s=float(wallclock))

"""Structural checks of a finding read from disk, so a damaged or hand-edited file fails on load.

A finding is checked for the keys other tools rely on (DESIGN "Finding") with the types they rely on,
and for values that JSON and TOML cannot both hold (TOML dates, NaN, infinities). Extra keys are allowed:
issues extend the schema by adding keys. Every error names the file and the dotted key.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from gatekit.errors import FindingError

_NUMBER = "number"
_OPTIONAL = False
_REQUIRED = True


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return f"a {type(value).__name__}"


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, problem: str) -> FindingError:
        return FindingError(f"{self.source}: {key}: {problem}")

    def plain(self, document: Any, root: str) -> None:
        """Only what JSON and TOML both hold the same way (walked without recursion: depth is untrusted)."""
        stack = [(root, document)]
        while stack:
            key, value = stack.pop()
            if isinstance(value, Mapping):
                stack += [(f"{key}.{k}" if key else str(k), v) for k, v in value.items()]
            elif isinstance(value, list):
                stack += [(f"{key}[{i}]", v) for i, v in enumerate(value)]
            elif isinstance(value, float) and not math.isfinite(value):
                raise self.fail(key, f"{value} is not a finite number (JSON cannot hold it)")
            elif not isinstance(value, (str, int, float, bool)):
                raise self.fail(key, f"is {_kind(value)}; a finding holds strings, numbers, booleans, lists "
                                     "and tables only (write dates as strings)")

    def field(self, table: Mapping[str, Any], name: str, kind: Any, key: str, required: bool = _REQUIRED) -> Any:
        path = f"{key}.{name}" if key else name
        if name not in table:
            if required:
                raise self.fail(path, "is missing")
            return None
        value = table[name]
        if kind == _NUMBER:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            what = "a number"
        elif isinstance(kind, tuple) and all(isinstance(k, str) for k in kind):
            ok = value in kind
            what = f"one of {', '.join(kind)}"
        else:
            ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is int)
            what = {str: "a string", int: "an integer", bool: "a boolean", dict: "a table",
                    list: "a list"}[kind]
        if not ok:
            raise self.fail(path, f"must be {what}, got {_kind(value)} {_short(value)}")
        return value

    def tables(self, table: Mapping[str, Any], name: str, key: str) -> list[tuple[str, Mapping[str, Any]]]:
        values = self.field(table, name, list, key) or []
        rows = []
        for index, value in enumerate(values):
            path = f"{key}.{name}[{index}]" if key else f"{name}[{index}]"
            if not isinstance(value, Mapping):
                raise self.fail(path, f"must be a table, got {_kind(value)}")
            rows.append((path, value))
        return rows


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validate_finding(data: Mapping[str, Any], source: str, decisions: Sequence[str]) -> None:
    """Raise FindingError naming the file and key for anything a reader of the finding would trip on."""
    c = _Checker(source)
    c.plain(data, "")
    meta = c.field(data, "meta", dict, "")
    for name in ("id", "title", "date", "status"):
        c.field(meta, name, str, "meta")
    for name in ("tags", "config_paths", "related_runs", "related_findings"):
        _strings(c, meta, name, "meta")

    gate = c.field(data, "gate", dict, "")
    for name in ("id", "order", "primary"):
        c.field(gate, name, str, "gate")
    c.field(gate, "n", int, "gate")
    c.field(gate, "direction", ("lower", "higher"), "gate")
    arms = c.field(gate, "arms", dict, "gate")
    c.field(arms, "off", str, "gate.arms")
    c.field(arms, "on", str, "gate.arms")
    threshold = c.field(gate, "threshold", dict, "gate")
    c.field(threshold, "rule", str, "gate.threshold")
    for path, guard in c.tables(gate, "guards", "gate"):
        c.field(guard, "metric", str, path)
        c.field(guard, "direction", ("lower", "higher"), path)
        c.field(guard, "max_drop", _NUMBER, path)

    predecision = c.field(data, "predecision", dict, "")
    c.field(predecision, "path", str, "predecision", _OPTIONAL)
    c.field(predecision, "sha256", str, "predecision", _OPTIONAL)
    c.field(data, "provenance", dict, "")
    c.field(data, "rules", dict, "")

    for path, run in c.tables(data, "runs", ""):
        c.field(run, "order", int, path)
        c.field(run, "pair", int, path)
        c.field(run, "arm", str, path)
        c.field(run, "label", str, path)
        c.field(run, "used", bool, path)
        c.field(run, "reason", str, path, _OPTIONAL)
        c.field(run, "exit_code", int, path, _OPTIONAL)
        c.field(run, "process_wallclock_s", _NUMBER, path)
        metrics = c.field(run, "metrics", dict, path)
        for name in metrics:
            c.field(metrics, name, _NUMBER, f"{path}.metrics")
        window = c.field(run, "window", dict, path)
        c.field(window, "samples", int, f"{path}.window")
        c.field(window, "load1_mean", _NUMBER, f"{path}.window", _OPTIONAL)
        c.field(window, "load1_max", _NUMBER, f"{path}.window", _OPTIONAL)
        c.field(run, "config", dict, path, _OPTIONAL)

    stats = c.field(data, "stats", dict, "")
    c.field(stats, "pairs_consistent", str, "stats")
    for name in ("mean_off", "mean_on", "sigma_off_pct", "sigma_on_pct", "delta_pct", "threshold_pct"):
        c.field(stats, name, _NUMBER, "stats", _OPTIONAL)
    for name in ("n_off", "n_on"):
        c.field(stats, name, int, "stats", _OPTIONAL)

    guards = c.field(data, "guards", dict, "")
    for name in guards:
        guard = c.field(guards, name, dict, "guards")
        c.field(guard, "limit", _NUMBER, f"guards.{name}")
        c.field(guard, "pass", bool, f"guards.{name}")
        c.field(guard, "delta", _NUMBER, f"guards.{name}", _OPTIONAL)

    for path, row in c.tables(data, "sensitivity", ""):
        c.field(row, "variant", str, path)
        c.field(row, "decision", str, path)
        c.field(row, "delta_pct", _NUMBER, path, _OPTIONAL)
        c.field(row, "threshold_pct", _NUMBER, path, _OPTIONAL)

    verdict = c.field(data, "verdict", dict, "")
    c.field(verdict, "decision", tuple(decisions), "verdict")
    _strings(c, verdict, "reasons", "verdict")
    _strings(c, verdict, "warnings", "verdict")

    for path, section in c.tables(data, "sections", ""):
        c.field(section, "type", str, path)


def _strings(c: _Checker, table: Mapping[str, Any], name: str, key: str) -> None:
    values = c.field(table, name, list, key, _OPTIONAL) or []
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise c.fail(f"{key}.{name}[{index}]", f"must be a string, got {_kind(value)} {_short(value)}")

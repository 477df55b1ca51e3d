"""Findings as consumers read them: loaded from files or a folder, checked for the keys readers rely on.

A finding that lacks a key the reports, exports or history need is refused here, with the file and the
key named, so no renderer ever fails half-way with a KeyError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from gatekit.errors import FindingError
from gatekit.finding import Finding, load_finding

# (dotted key, expected type(s)) every consumer may rely on; optional keys are read with .get().
_REQUIRED: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("meta", dict), ("meta.id", str), ("meta.title", str), ("meta.date", str),
    ("gate", dict), ("gate.id", str), ("gate.primary", str), ("gate.direction", str), ("gate.arms", dict),
    ("gate.arms.off", str), ("gate.arms.on", str),
    ("runs", list), ("stats", dict), ("guards", dict), ("sensitivity", list),
    ("verdict", dict), ("verdict.decision", str), ("sections", list),
)
_RUN_REQUIRED: tuple[tuple[str, type | tuple[type, ...]], ...] = (
    ("order", int), ("arm", str), ("label", str), ("metrics", dict), ("window", dict), ("used", bool),
)
_NUMBER = (int, float)


@dataclass(frozen=True, slots=True)
class LoadedFinding:
    """A checked finding and the file it came from (None when it was made in this process)."""

    finding: Finding
    path: Path | None

    @property
    def data(self) -> Mapping[str, Any]:
        return self.finding.data


def _lookup(data: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _type_name(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    names = {dict: "a table", list: "a list", str: "a string", int: "an integer", float: "a number",
             bool: "true or false"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _require(found: bool, value: Any, key: str, expected: type | tuple[type, ...], source: str) -> None:
    if not found:
        raise FindingError(f"{source}: key '{key}' is missing")
    # bool is an int in Python; an integer field holding true/false is still wrong
    wrong_bool = isinstance(value, bool) and bool not in (expected if isinstance(expected, tuple) else (expected,))
    if not isinstance(value, expected) or wrong_bool:
        raise FindingError(f"{source}: key '{key}' must be {_type_name(expected)}, not {value!r:.60}")


def check_finding(finding: Finding, source: str) -> Finding:
    """Refuse a finding that lacks a key reports rely on; the message names the file and the key."""
    data = finding.data
    for key, expected in _REQUIRED:
        found, value = _lookup(data, key)
        _require(found, value, key, expected, source)
    for index, run in enumerate(data["runs"]):
        if not isinstance(run, Mapping):
            raise FindingError(f"{source}: key 'runs[{index}]' must be a table")
        for key, expected in _RUN_REQUIRED:
            _require(key in run, run.get(key), f"runs[{index}].{key}", expected, source)
        for name, value in run["metrics"].items():
            if not isinstance(value, _NUMBER) or isinstance(value, bool):
                raise FindingError(f"{source}: key 'runs[{index}].metrics.{name}' must be a number")
    for name, value in data["stats"].items():
        if isinstance(value, float) and not math.isfinite(value):
            raise FindingError(f"{source}: key 'stats.{name}' is not a finite number")
    for index, row in enumerate(data["sensitivity"]):
        if not isinstance(row, Mapping) or not isinstance(row.get("variant"), str):
            raise FindingError(f"{source}: key 'sensitivity[{index}].variant' is missing")
    for name, guard in data["guards"].items():
        if not isinstance(guard, Mapping) or "pass" not in guard:
            raise FindingError(f"{source}: key 'guards.{name}.pass' is missing")
    for index, section in enumerate(data["sections"]):
        if not isinstance(section, Mapping) or not isinstance(section.get("type"), str):
            raise FindingError(f"{source}: key 'sections[{index}].type' is missing")
    return finding


def load_checked(path: Path) -> LoadedFinding:
    """Load one finding file (.json or .toml) and check it."""
    finding = load_finding(path)
    return LoadedFinding(check_finding(finding, str(path)), path)


def finding_files(folder: Path) -> list[Path]:
    """The finding files of a folder: each `<id>.json`, or `<id>.toml` where no JSON twin exists."""
    if not folder.is_dir():
        raise FindingError(f"{folder}: not a folder of findings")
    json_files = sorted(folder.glob("*.json"))
    stems = {p.stem for p in json_files}
    toml_files = sorted(p for p in folder.glob("*.toml") if p.stem not in stems)
    return sorted(json_files + toml_files, key=lambda p: p.name)


def load_folder(folder: Path) -> list[LoadedFinding]:
    """Every finding in a folder, checked; an empty folder is an error (nothing to show)."""
    files = finding_files(folder)
    if not files:
        raise FindingError(f"{folder}: no findings here (*.json or *.toml)")
    return [load_checked(path) for path in files]


def load_many(paths: Iterable[Path]) -> list[LoadedFinding]:
    return [load_checked(path) for path in paths]


def by_date(findings: Sequence[LoadedFinding]) -> list[LoadedFinding]:
    """Oldest first: meta.date, then the first run's start time, then the id (a stable order)."""
    def key(item: LoadedFinding) -> tuple[str, str, str]:
        runs = item.data["runs"]
        started = min((str(r.get("started_at", "")) for r in runs), default="")
        return str(item.data["meta"]["date"]), started, str(item.data["meta"]["id"])
    return sorted(findings, key=key)

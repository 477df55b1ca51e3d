"""Findings as consumers read them: loaded from files or a folder, checked for the keys readers rely on.

A finding that lacks a key the reports, exports or history need is refused when it loads
(gatekit.finding_schema), with the file and the key named, so no renderer ever fails half-way with a KeyError.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from gatekit.errors import FindingError
from gatekit.finding import Finding, load_finding


@dataclass(frozen=True, slots=True)
class LoadedFinding:
    """A checked finding and the file it came from (None when it was made in this process)."""

    finding: Finding
    path: Path | None

    @property
    def data(self) -> Mapping[str, Any]:
        return self.finding.data


def check_finding(finding: Finding, source: str) -> Finding:
    """Refuse a finding that lacks a key readers rely on (the finding schema's own check, see
    gatekit.finding_schema); the message names the file and the key."""
    return Finding.from_dict(finding.data, source=source)


def load_checked(path: Path) -> LoadedFinding:
    """Load one finding file (.json or .toml); loading checks it."""
    return LoadedFinding(load_finding(path), path)


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

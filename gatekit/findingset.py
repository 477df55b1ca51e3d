"""Findings as consumers read them: loaded from files or a folder, typed on the way in.

Loading is checking: `Finding.from_document` checks every field by type and refuses a file that does not
fit, naming the file and the key, so no renderer ever fails half-way on a malformed finding; and a finding's
TOML and JSON twins must say the same (`twin_difference`), else the file is refused naming both and the first
differing key. Every reader of findings (report, campaign, history, site) loads them here, so an edited twin
is never shown, summarised or plotted as if it were the finding: one forged pair refuses the whole command.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from gatekit.errors import FindingError
from gatekit.finding import (Finding, load_finding, read_finding_bytes, read_finding_document, twin_difference,
                             twin_path)
from gatekit.records import SCHEMA_KEY
from gatekit.storage import SeriesLayout


@dataclass(frozen=True, slots=True)
class LoadedFinding:
    """A typed finding and the file it came from (None when it was made in this process)."""

    finding: Finding
    path: Path | None


def load_checked(path: Path, document: dict[str, Any] | None = None) -> LoadedFinding:
    """Load one finding file (.json or .toml); loading checks it, and its twin beside it must say the same,
    else a FindingError naming both (see the module docstring): a reader of the JSON would otherwise show
    what an edited TOML twin does not say, and the reverse. `document`: the file's document where the caller
    has read it already (`sort_files`), so it is not read twice."""
    finding = load_finding(path) if document is None else Finding.from_document(document, source=str(path))
    difference = twin_difference(path, finding)
    if difference is not None:
        raise FindingError(f"{difference}; one of them was edited (gate verify SERIES_DIR {path} says which)")
    return LoadedFinding(finding, path)


def finding_files(folder: Path, *, nested: bool = False) -> list[Path]:
    """The finding files of a folder: each `<id>.json`, or `<id>.toml` where no JSON twin exists. `nested`
    looks into its subfolders too (a host's or a campaign's folder of findings), but never into a series
    directory (one with a journal) or a hidden folder: those hold runs and records, not findings."""
    if not folder.is_dir():
        raise FindingError(f"{folder}: not a folder of findings")
    json_files = sorted(folder.glob("*.json"))
    stems = {p.stem for p in json_files}
    toml_files = sorted(p for p in folder.glob("*.toml") if p.stem not in stems)
    found = sorted(json_files + toml_files, key=lambda p: p.name)
    if nested:
        for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if not SeriesLayout(sub).journal.exists():
                found += finding_files(sub, nested=True)
    return found


@dataclass(frozen=True, slots=True)
class SortedFiles:
    """A folder's files as readers of findings take them: the findings, and those left out by kind."""

    findings: list[Path]
    left_out: dict[str, list[Path]]
    documents: dict[Path, dict[str, Any]]  # with keep_documents: the findings' documents, as read once

    def note(self) -> str | None:
        """One line saying what was left out (None when nothing was): not an error, a folder may hold both."""
        if not self.left_out:
            return None
        def named(paths: list[Path]) -> str:
            names = sorted({p.name for p in paths})
            return ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
        parts = [f"{len(paths)} {kind} ({named(paths)})" for kind, paths in sorted(self.left_out.items())]
        return f"note: left out, not gate findings: {'; '.join(parts)}"


def document_kind(document: Mapping[str, Any]) -> str | None:
    """What kind of document this is when it is plainly not a gate finding (another gatekit schema, e.g.
    "gatekit.bisect/1", or no schema key at all: a gate config, a GPU probe's JSON); None when it is to be
    loaded as a finding: one that names the finding schema or a schema not gatekit's, so that a broken or
    forged finding is an error naming the file, never skipped."""
    schema = document.get(SCHEMA_KEY)
    if schema is None:
        return "without a schema key"
    if isinstance(schema, str) and schema.startswith("gatekit.") and not schema.startswith("gatekit.finding/"):
        return schema
    return None


def sort_files(files: Iterable[Path], *, keep_documents: bool = False) -> SortedFiles:
    """`files` split into findings and documents of other kinds (`document_kind`), each file read once; one
    that cannot be read is a finding (loading it names the file and the problem). `keep_documents`: keep the
    findings' documents, for a caller that loads them all next (a site of thousands loads few, in workers)."""
    findings: list[Path] = []
    left_out: dict[str, list[Path]] = {}
    documents: dict[Path, dict[str, Any]] = {}
    for path in files:
        try:
            document = read_finding_document(path)
        except FindingError:
            findings.append(path)
            continue
        kind = document_kind(document)
        if kind is None:
            findings.append(path)
            if keep_documents:
                documents[path] = document
        else:
            left_out.setdefault(kind, []).append(path)
    return SortedFiles(findings, left_out, documents)


def load_folder(folder: Path, note: Callable[[str], None] = lambda line: None) -> list[LoadedFinding]:
    """Every finding in a folder and its subfolders, each checked against its twin; documents that are not gate findings are left
    out (`sort_files`), told to `note` in one line; a folder without findings is an error (nothing to show)."""
    files = sort_files(finding_files(folder, nested=True), keep_documents=True)  # as `gate site` reads a folder
    line = files.note()
    if line is not None:
        note(line)
    if not files.findings:
        raise FindingError(f"{folder}: no findings here (*.json or *.toml)")
    return [load_checked(path, files.documents.get(path)) for path in files.findings]


def load_many(paths: Iterable[Path]) -> list[LoadedFinding]:
    """The findings named on a command line (a report's, a campaign's), each checked against its twin."""
    return [load_checked(path) for path in paths]


def pair_sha256(path: Path) -> str:
    """sha256 of a finding file's bytes and of its twin's (where it has one): what a reader that skips a
    finding it checked before keys on, so an edit of either file has the pair loaded and checked again."""
    twin = twin_path(path)
    digest = hashlib.sha256()
    for part in (path, twin) if twin.is_file() else (path,):
        digest.update(hashlib.sha256(read_finding_bytes(part)).digest())
    return digest.hexdigest()


def by_date(findings: Sequence[LoadedFinding]) -> list[LoadedFinding]:
    """Oldest first: meta.date, then the first run's start time, then the id (a stable order)."""
    def key(item: LoadedFinding) -> tuple[str, str, str]:
        finding = item.finding
        started = min((run.started_at for run in finding.runs), default="")
        return finding.meta.date, started, finding.id
    return sorted(findings, key=key)

"""The run folders behind a finding: each window's load, pressure and GPU clock samples and each run's
ms_per_iter trace.

A finding names its run folders in `meta.related_runs`, relative to the repository (or gate folder) it
was made in. They are looked up under each `--runs-root` when given, else under the current folder and
then each folder above the finding file; first the whole path, then the path without its leading folders
one at a time, down to `<series>/<label>` (so a CI artifact that kept `runs/<series>/...` but not the
folders above it still matches). An absolute path (a series run outside the repository, e.g. on a GPU host)
is used where it exists, else looked up the same way, as if relative. A finding copied away from its runs
still renders: what cannot be found is left out and said so (`RunFiles.notes`), never guessed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.errors import RunFileError
from gatekit.finding import Finding
from gatekit.formatting import is_number
from gatekit.quality import QualityTrace, TraceError, quality_trace
from gatekit.runfiles import MAX_RESULT_BYTES, parse_document, read_run_file
from gatekit.storage import RunFolder

MAX_SAMPLES_BYTES = 64 << 20  # a sample a second for a day is 9 MB


@dataclass(frozen=True, slots=True)
class RunTrace:
    """What one run's folder holds for the figures."""

    label: str
    folder: str
    load1: tuple[tuple[float, float], ...] = ()  # (seconds since the window opened, load1)
    ms_per_iter: tuple[float, ...] = ()
    psi_cpu: tuple[tuple[float, float], ...] = ()  # (end of a sample interval, % of it some task waited for CPU)
    sm_clock_mhz: tuple[tuple[float, float], ...] = ()  # (t_s, the GPU's SM clock) where the backend sampled it
    quality: QualityTrace | None = None  # the result's quality trace (time axes and quality series), if it has one


@dataclass(frozen=True, slots=True)
class RunFiles:
    """Run traces by label, and notes for the reader about anything that could not be read."""

    traces: Mapping[str, RunTrace] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def has_load(self) -> bool:
        return any(t.load1 for t in self.traces.values())

    @property
    def has_ms_per_iter(self) -> bool:
        return any(t.ms_per_iter for t in self.traces.values())


NO_RUNS = RunFiles(notes=("rendered from the finding alone: no run folders were looked up",))


def candidate_roots(finding_path: Path | None, runs_roots: Sequence[Path], cwd: Path) -> list[Path]:
    """Where relative run folders are looked up (see the module docstring)."""
    if runs_roots:
        return list(runs_roots)
    roots = [cwd]
    if finding_path is not None:
        roots += [finding_path.resolve().parent, *finding_path.resolve().parent.parents]
    unique: list[Path] = []
    seen: set[Path] = set()
    for root in roots:
        resolved = root.resolve()
        if resolved not in seen:
            seen.add(resolved)
            unique.append(root)
    return unique


class FolderIndex:
    """Which folders exist, from one listing of each folder looked into: a site build looks up every
    finding's run folders under the same few roots, most of them absent (a finding copied without its runs),
    and a stat per candidate path was most of a rebuild's time. One index per build (folders change between
    builds); a relative root, or a path with `..` in it, is asked of the file system."""

    def __init__(self) -> None:
        self._folders: dict[str, frozenset[str]] = {}
        self._roots: dict[str, bool] = {}
        self._candidates: dict[tuple[Any, ...], list[Path]] = {}

    def candidate_roots(self, finding_path: Path | None, runs_roots: Sequence[Path], cwd: Path) -> list[Path]:
        """candidate_roots, worked out once for all the findings of one folder."""
        if runs_roots or finding_path is None:
            return candidate_roots(finding_path, runs_roots, cwd)
        key = (finding_path.resolve().parent, cwd)
        if key not in self._candidates:
            self._candidates[key] = candidate_roots(finding_path, runs_roots, cwd)
        return self._candidates[key]

    def has(self, root: Path, parts: Sequence[str]) -> bool:
        """Whether root/parts... is a folder (symlinks followed, as Path.is_dir)."""
        if not root.is_absolute() or ".." in root.parts or ".." in parts:
            return root.joinpath(*parts).is_dir()
        current = str(root)
        if current not in self._roots:
            self._roots[current] = os.path.isdir(current)
        if not self._roots[current]:
            return False
        for name in parts:
            if name not in self._children(current):
                return False
            current = os.path.join(current, name)
        return True

    def _children(self, folder: str) -> frozenset[str]:
        known = self._folders.get(folder)
        if known is None:
            try:
                with os.scandir(folder) as entries:
                    known = frozenset(entry.name for entry in entries if entry.is_dir())
            except OSError:
                known = frozenset()
            self._folders[folder] = known
        return known


def find_run_folder(relative: str, roots: Sequence[Path], folders: FolderIndex | None = None) -> Path | None:
    """Where a related run folder is under the candidate roots (see the module docstring), or None;
    `folders` answers which folders exist, when given."""
    path = Path(relative)
    if path.is_absolute() and path.is_dir():
        return path
    parts = path.parts[1:] if path.is_absolute() else path.parts  # an absolute path elsewhere: its folders
    for start in range(max(1, len(parts) - 1)):  # the whole path first; never less than <series>/<label>
        suffix = parts[start:]
        for root in roots:
            if folders.has(root, suffix) if folders is not None else root.joinpath(*suffix).is_dir():
                return root.joinpath(*suffix)
    return None


def parse_samples(text: str, source: str) -> tuple[tuple[tuple[float, float], ...], str]:
    """(t_s, load1) pairs of a samples.csv, and a note when the file cannot be used."""
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or not {"t_s", "load1"} <= set(reader.fieldnames):
        return (), f"{source}: columns t_s and load1 are missing; its load timeline is left out"
    points = []
    for number, row in enumerate(reader, 2):
        try:
            points.append((float(row["t_s"]), float(row["load1"])))
        except (TypeError, ValueError):
            return (), f"{source}: line {number}: t_s/load1 is not a number; its load timeline is left out"
    return tuple(points), ""


def parse_pressure_trace(text: str) -> tuple[tuple[float, float], ...]:
    """(t_s, CPU pressure stall % of the interval since the previous sample) of a samples.csv that has the
    psi_cpu_total_us column (µs of `some` stall since boot); empty for a file without it (older series, or a
    machine without /proc/pressure) or with a row that is not a number."""
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or not {"t_s", "psi_cpu_total_us"} <= set(reader.fieldnames):
        return ()
    try:
        rows = [(float(row["t_s"]), float(row["psi_cpu_total_us"])) for row in reader]
    except (TypeError, ValueError):
        return ()
    points = []
    for (t0, total0), (t1, total1) in zip(rows, rows[1:]):
        if t1 > t0:
            points.append((t1, min(100.0, max(0.0, (total1 - total0) / (1e4 * (t1 - t0))))))  # µs / (s · 1e6) · 100
    return tuple(points)


def parse_clock_trace(text: str) -> tuple[tuple[float, float], ...]:
    """(t_s, SM clock MHz) of a samples.csv whose backend sampled the GPU's clock (cuda: the gpu_sm_clock_mhz
    column); empty for a file without the column or with no number in it. A sample the backend could not read
    (an empty cell) is left out, never read as 0 MHz."""
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or not {"t_s", "gpu_sm_clock_mhz"} <= set(reader.fieldnames):
        return ()
    points = []
    for row in reader:
        try:
            t_s, mhz = float(row["t_s"]), float(row["gpu_sm_clock_mhz"])
        except (TypeError, ValueError):
            continue
        if math.isfinite(t_s) and math.isfinite(mhz) and mhz >= 0:
            points.append((t_s, mhz))
    return tuple(points)


def parse_result_trace(raw: bytes, source: str) -> tuple[tuple[float, ...], str]:
    """`trace.ms_per_iter` of a result file (JSON or TOML), and a note when present but unusable."""
    try:
        data: Any = parse_document(raw, Path(source))
    except RunFileError as exc:
        return (), f"{exc}; its ms_per_iter trace is left out"
    trace = data.get("trace")
    if not isinstance(trace, Mapping) or "ms_per_iter" not in trace:
        return (), ""
    values = trace["ms_per_iter"]
    if not isinstance(values, list) or not all(is_number(v) for v in values):
        return (), f"{source}: key 'trace.ms_per_iter' is not a list of numbers; its trace is left out"
    return tuple(float(v) for v in values), ""


def parse_quality_trace(raw: bytes, source: str) -> tuple[QualityTrace | None, str]:
    """The quality trace of a result file (gatekit.quality), and a note when it breaks the trainer contract."""
    try:
        data: Any = parse_document(raw, Path(source))
    except RunFileError:
        return None, ""  # parse_result_trace has said so
    trace = data.get("trace") if isinstance(data, Mapping) else None
    if not isinstance(trace, Mapping):
        return None, ""
    try:
        return quality_trace(trace), ""
    except TraceError as exc:
        return None, f"{source}: {exc}; its quality curve is left out"


def _read(path: Path, limit: int, shown: str) -> tuple[bytes | None, str]:
    """A run file's bytes (None when absent), or a note naming it (`shown`) when it cannot be read safely."""
    try:
        return read_run_file(path, limit), ""
    except RunFileError as exc:
        return None, f"{shown}: {str(exc).removeprefix(f'{path}: ')}"
    except OSError as exc:
        return None, f"{shown}: cannot be read: {exc.strerror or exc}"


def run_folders(finding: Finding) -> dict[str, str]:
    """label -> related run folder (meta.related_runs) of each of the finding's runs that names one."""
    labels = {run.label for run in finding.runs}
    return {Path(r).name: r for r in finding.meta.related_runs if Path(r).name in labels}


def run_files_digest(folders: Mapping[str, str], finding_path: Path | None, runs_roots: Sequence[Path],
                     cwd: Path, index: FolderIndex | None = None) -> str:
    """sha256 of everything load_run_files would read for these run folders: where each was found and the
    bytes of its samples.csv and result file (so a site page is drawn again exactly when they change)."""
    roots = (index.candidate_roots(finding_path, runs_roots, cwd) if index is not None
             else candidate_roots(finding_path, runs_roots, cwd)) if folders else []
    digest = hashlib.sha256(json.dumps([str(r) for r in runs_roots]).encode())
    for label, relative in sorted(folders.items()):
        folder = find_run_folder(relative, roots, index)
        digest.update(json.dumps([label, relative, str(folder) if folder else None]).encode())
        files = RunFolder(folder) if folder is not None else None
        for path, limit in ((files.samples, MAX_SAMPLES_BYTES), (files.result, MAX_RESULT_BYTES)) if files else ():
            raw, note = _read(path, limit, path.name)
            digest.update(hashlib.sha256(raw).digest() if raw is not None else note.encode() or b"-")
    return digest.hexdigest()


def load_run_files(finding: Finding, finding_path: Path | None, runs_roots: Sequence[Path],
                   cwd: Path) -> RunFiles:
    """Read each related run folder's samples.csv and result trace (all I/O of the report lives here)."""
    folders = run_folders(finding)
    if not folders:
        if finding.imported_from:
            return RunFiles(notes=(f"imported from {finding.imported_from}, which records no "
                                   "load timelines or traces per run",))
        return RunFiles(notes=("the finding names no run folders (meta.related_runs); load timelines and "
                               "ms_per_iter traces are left out",))
    roots = candidate_roots(finding_path, runs_roots, cwd)
    where = (f"under {', '.join(str(r) for r in runs_roots)}" if runs_roots
             else "under the current folder or the folders above the finding")
    traces: dict[str, RunTrace] = {}
    notes: list[str] = []
    missing: list[str] = []
    for label, relative in folders.items():
        folder = find_run_folder(relative, roots)
        if folder is None:
            missing.append(relative)
            continue
        load1: tuple[tuple[float, float], ...] = ()
        psi_cpu: tuple[tuple[float, float], ...] = ()
        sm_clock: tuple[tuple[float, float], ...] = ()
        files = RunFolder(folder)
        samples, note = _read(files.samples, MAX_SAMPLES_BYTES, f"{relative}/{files.samples.name}")
        if samples is None:
            note = note or f"{relative}/{files.samples.name} is missing or unreadable"
            notes.append(f"{note}; its load timeline is left out")
        else:
            text = samples.decode("utf-8", errors="replace")
            load1, note = parse_samples(text, f"{relative}/{files.samples.name}")
            psi_cpu = parse_pressure_trace(text)
            sm_clock = parse_clock_trace(text)
            if note:
                notes.append(note)
        ms: tuple[float, ...] = ()
        quality: QualityTrace | None = None
        result, note = _read(files.result, MAX_RESULT_BYTES, f"{relative}/{files.result.name}")
        if result is not None:
            ms, note = parse_result_trace(result, f"{relative}/{files.result.name}")
            quality, quality_note = parse_quality_trace(result, f"{relative}/{files.result.name}")
            if quality_note:
                notes.append(quality_note)
        if note:
            notes.append(note if result is not None else f"{note}; its ms_per_iter trace is left out")
        traces[label] = RunTrace(label=label, folder=relative, load1=load1, ms_per_iter=ms, psi_cpu=psi_cpu,
                                 sm_clock_mhz=sm_clock, quality=quality)
    if missing:
        shown = ", ".join(missing[:2]) + (f" and {len(missing) - 2} more" if len(missing) > 2 else "")
        notes.insert(0, f"run folder(s) not found {where}: {shown}; their load timelines and ms_per_iter traces "
                        "are left out (render with --runs-root DIR, DIR being the folder these paths are relative to)")
    return RunFiles(traces=traces, notes=tuple(notes))

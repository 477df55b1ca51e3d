"""A series read back from its journal, read-only: replay (journal -> `JournalState`), opening a series
for resume (its gate file, predecision and arm configs verified unchanged), the evidence analysis needs,
and the offline recomputation of its finding. What verify, analyze, report and resume share; nothing here
runs a trainer or writes a file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit import rules
from gatekit.analysis import SeriesEvidence, analyze
from gatekit.config import ArmSpec, GateConfig, load_gate
from gatekit.errors import SeriesError
from gatekit.finding import Finding
from gatekit.prereg import DecisionSpec, read_predecision
from gatekit.provenance import REDACTED_PREFIX, changed_artifacts, changed_backend, git_diff_stat, git_root, sha256_file
from gatekit.records import RunRecord
from gatekit.series_events import Extend, Invalid, Retry, RunEnd, SeriesEnd, SeriesStart
from gatekit.storage import LEGACY_JOURNAL_WARNING, Journal, SeriesLayout, line_sha256
from gatekit.verdict import Reason, ReasonCode


@dataclass(slots=True)
class RunLog:
    """The runs journaled so far (the latest run_end of each label) and the artifact hashing between them:
    what the run loop keeps in step with the journal, event for event."""

    records: dict[str, RunRecord] = field(default_factory=dict)
    hash_s: list[float] = field(default_factory=list)  # artifact hashing between runs, seconds each


@dataclass(slots=True)
class JournalState(RunLog):
    """What a series' journal says so far: replayed from it on resume and for offline analysis, and kept in
    step with it while the series runs."""

    start: SeriesStart = field(kw_only=True)
    retries: list[Retry] = field(default_factory=list)
    extensions: list[Extend] = field(default_factory=list)  # a policy's later stages
    problems: list[str] = field(default_factory=list)
    end: SeriesEnd | None = None
    chain_head: str | None = None  # sha256 of the journal's last line (None for a legacy journal)
    legacy: bool = False  # written before hash chains: nothing to verify, not tamper-evident

    @property
    def cores(self) -> int | None:
        return self.start.cores


def read_state(series_dir: Path) -> JournalState:
    """Replay the journal (upgraded to the current format after its lines are read, never rewritten); the
    latest run_end of a label wins (a label only re-runs after a cut-off).

    A line that parses but does not hold what gatekit wrote (an edited or damaged journal) is an error
    naming the journal and the line, never a traceback later on.
    """
    path = SeriesLayout(series_dir).journal
    journal = Journal(path)
    state: JournalState | None = None
    last = b""
    for number, last, event in journal.entries():
        kind = event.get("event") if isinstance(event, Mapping) else None
        try:
            if not isinstance(kind, str):  # (events of kinds a newer gatekit added are skipped below)
                raise TypeError("not an event object")
            if kind == SeriesStart.KIND:
                state = JournalState(start=SeriesStart.from_dict(event))
            elif state is None:
                raise SeriesError(f"{path}: does not begin with series_start")
            elif kind == RunEnd.KIND:
                run_end = RunEnd.from_dict(event)
                state.records[run_end.record.label] = run_end.record
                state.hash_s.extend(run_end.hash_s)
            elif kind == Retry.KIND:
                state.retries.append(Retry.from_dict(event))
            elif kind == Extend.KIND:
                state.extensions.append(Extend.from_dict(event))
            elif kind == Invalid.KIND:
                state.problems.append(Reason(ReasonCode.SERIES_INVALIDATED, Invalid.from_dict(event).reason))
            elif kind == SeriesEnd.KIND:
                state.end = SeriesEnd.from_dict(event)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # RecordError is a ValueError
            raise SeriesError(f"{path}: event {number} ({kind!r}) is not what gatekit wrote ({exc!r}); the "
                              "journal was edited or damaged") from None
    if state is None:
        raise SeriesError(f"{path}: empty journal; the series never started")
    state.legacy = journal.legacy
    state.chain_head = None if state.legacy else line_sha256(last)
    return state


def replacements(retries: Sequence[Retry]) -> dict[int, rules.Replacement]:
    """Journaled retry events as {replaced round: Replacement}."""
    return {r.replaces: r.replacement for r in retries}


def _check_gate_file(path: Path, start: SeriesStart) -> None:
    current = sha256_file(path)
    if current != start.gate_sha256:
        raise SeriesError(f"{path}: changed since the series started (sha256 {start.gate_sha256} -> "
                          f"{current}); restore it or start a new series")



def _check_arm_configs(predecision: Mapping[str, Any]) -> None:
    for arm, info in predecision["arm_configs"].items():
        path = info.get("path")
        if path:
            current = sha256_file(Path(path)) if Path(path).is_file() else "missing"
            if current != info["sha256"]:
                raise SeriesError(f"{path}: arm config of '{arm}' changed since the series started (sha256 "
                                  f"{info['sha256']} -> {current}); restore it or start a new series")


def verify_unchanged(series_dir: Path, state: JournalState, config: GateConfig) -> dict[str, Any]:
    """Refuse to continue or analyse a series whose predecision, gate file or arm configs changed; returns
    the verified predecision."""
    start = state.start
    predecision = read_predecision(series_dir, start.predecision_sha256)
    gate_path = start.gate_path
    if gate_path != config.path:
        raise SeriesError(f"{series_dir}: was started with gate file {gate_path}, not {config.path}")
    _check_gate_file(config.path, start)
    _check_arm_configs(predecision)
    return predecision


@dataclass(frozen=True, slots=True)
class OpenSeries:
    """A series as read from disk once: its journal replayed, its predecision verified, its gate and arms."""

    series_dir: Path
    state: JournalState
    predecision: Mapping[str, Any]
    config: GateConfig
    off: ArmSpec
    on: ArmSpec


def open_series(series_dir: Path, gate_path: Path | None = None) -> OpenSeries:
    """Read a series for `--resume`: the journal replayed once; the gate file (the one it was started with,
    or the one given, which must be the same file) hashed before it is parsed, so an edited gate file is
    refused as changed even when the edit also broke it; the predecision and arm configs verified."""
    state = read_state(series_dir)
    start = state.start
    registered = start.gate_path
    path = (gate_path or registered).resolve()
    if path == registered and path.is_file():
        _check_gate_file(path, start)
    config = load_gate(path)
    if registered != config.path:
        raise SeriesError(f"{series_dir}: was started with gate file {registered}, not {config.path}")
    predecision = read_predecision(series_dir, start.predecision_sha256)
    _check_arm_configs(predecision)
    arms = []
    for name in (start.off_arm, start.on_arm):
        if name in config.arms:
            arms.append(config.arms[name])
        else:  # an ad-hoc arm given as a path to its .toml (sha256 verified above): read again from it
            info = start.arms[name]
            arm = config.arm(info.config) if info.config else ArmSpec(name=name)
            if any(str(v).startswith(REDACTED_PREFIX) for v in info.env.values()):  # never run on a hash
                raise SeriesError(f"{series_dir}: arm '{name}' had environment values that were only journaled "
                                  "redacted; resume it with a gate file that defines the arm")
            arms.append(dataclasses.replace(arm, name=name, args=info.args, env=arm.env or dict(info.env)))
    return OpenSeries(series_dir, state, predecision, config, arms[0], arms[1])


def evidence_from_state(opened: OpenSeries | tuple[Path, JournalState, Mapping[str, Any]]) -> SeriesEvidence:
    """Everything analysis needs, from the journal and the verified predecision alone."""
    if isinstance(opened, OpenSeries):
        series_dir, state, predecision = opened.series_dir, opened.state, opened.predecision
    else:
        series_dir, state, predecision = opened
    start, began = state.start, state.start.provenance_start
    spec = DecisionSpec.from_dict(predecision["decision"])
    base = git_root(start.gate_path.parent) or start.gate_path.parent
    provenance: dict[str, Any] = {
        "artifacts": {"start": _relative_keys(began.artifacts, base)},
        "git": {"start": dict(began.git)},
        "host": dict(began.host),
        "software": dict(began.software),
    }
    if began.backend is not None:
        provenance["backend"] = dict(began.backend)
    if began.hashing is not None:  # how long sha256 of the artifacts took, all of it outside the timed windows
        between = list(state.hash_s)
        end_s = state.end.provenance_end.hash_s if state.end is not None else None
        provenance["hashing"] = {
            "artifact_bytes": began.hashing.artifact_bytes, "series_start_s": began.hashing.hash_s,
            "between_runs_count": len(between), "between_runs_max_s": max(between, default=0.0),
            "total_s": began.hashing.hash_s + sum(between) + (end_s or 0.0)}
    warnings: list[str] = [LEGACY_JOURNAL_WARNING] if state.legacy else []
    problems = list(state.problems)
    if state.end is not None:
        end = state.end.provenance_end
        provenance["artifacts"]["end"] = _relative_keys(end.artifacts, base)
        provenance["git"]["end"] = dict(end.git)
        problems += [Reason(ReasonCode.ARTIFACT_CHANGED, m)
                     for m in changed_artifacts(began.artifacts, end.artifacts) if m not in problems]
        if end.backend is not None:
            provenance["backend_end"] = dict(end.backend)
            problems += [Reason(ReasonCode.BACKEND_CHANGED, m)
                         for m in changed_backend(began.backend or {}, end.backend) if m not in problems]
        rev_start, rev_end = began.git.get("rev"), end.git.get("rev")
        if rev_start and rev_end and rev_start != rev_end:
            diff = git_diff_stat(start.gate_path.parent, rev_start, rev_end)
            provenance["git"]["moved"] = True
            provenance["git"]["diff_stat"] = diff
            warnings.append(f"git HEAD moved during the series ({rev_start[:12]} -> {rev_end[:12]}); "
                            f"files touched: {diff.strip().splitlines()[-1] if diff.strip() else 'unknown'}")
    replaced = replacements(state.retries)
    records = tuple(sorted(state.records.values(), key=lambda r: r.order))
    config_paths = [_display(Path(a.config), base) for a in start.arms.values() if a.config]
    return SeriesEvidence(
        series_id=start.series_id, finding_id=start.finding_id, spec=spec, records=records,
        replaced=replaced, date=start.date,
        predecision_path=_display(SeriesLayout(series_dir).predecision, base),
        predecision_sha256=start.predecision_sha256, provenance=provenance,
        invalid_reasons=tuple(problems), warnings=tuple(warnings), config_paths=tuple(config_paths),
        related_runs=tuple(_display(SeriesLayout(series_dir).run(r.label).path, base) for r in records),
        chain_head=state.chain_head,
    )


def _display(path: Path, base: Path) -> str:
    """Paths in findings are relative to the repository (or gate folder), so they read the same anywhere."""
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def _relative_keys(hashes: Mapping[str, str], base: Path) -> dict[str, str]:
    return {_display(Path(p), base): h for p, h in hashes.items()}



def analyze_unverified(series_dir: Path, config: GateConfig | None = None) -> Finding:
    """`analyze_series` without the verification (the verifier's own recomputation)."""
    state = read_state(series_dir)
    if config is not None:
        predecision = verify_unchanged(series_dir, state, config)
    else:
        predecision = read_predecision(series_dir, state.start.predecision_sha256)
    return analyze(evidence_from_state((series_dir, state, predecision)))

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
from gatekit.prereg import PREDECISION_FILE, DecisionSpec, read_predecision
from gatekit.provenance import REDACTED_PREFIX, changed_artifacts, git_diff_stat, git_root, sha256_file
from gatekit.records import RunRecord
from gatekit.storage import JOURNAL_FILE, LEGACY_JOURNAL_WARNING, Journal, line_sha256


@dataclass(slots=True)
class JournalState:
    """What the journal says so far: replayed from it on resume and for offline analysis, and kept in step
    with it, event for event, while a series runs."""

    start: Mapping[str, Any]
    records: dict[str, RunRecord] = field(default_factory=dict)
    retries: list[Mapping[str, Any]] = field(default_factory=list)
    extensions: list[Mapping[str, Any]] = field(default_factory=list)  # a policy's later stages
    problems: list[str] = field(default_factory=list)
    end: Mapping[str, Any] | None = None
    hash_s: list[float] = field(default_factory=list)  # artifact hashing between runs, seconds each
    chain_head: str | None = None  # sha256 of the journal's last line (None for a legacy journal)
    legacy: bool = False  # written before hash chains: nothing to verify, not tamper-evident

    @property
    def cores(self) -> int | None:
        return self.start.get("provenance_start", {}).get("host", {}).get("cpu_count")


def read_state(series_dir: Path) -> JournalState:
    """Replay the journal; the latest run_end of a label wins (a label only re-runs after a cut-off).

    A line that parses but does not hold what gatekit wrote (an edited or damaged journal) is an error
    naming the journal and the line, never a traceback later on.
    """
    path = series_dir / JOURNAL_FILE
    state: JournalState | None = None
    first: Any = None
    last = b""
    for number, (_, last, event) in enumerate(Journal(path).lines(), 1):
        first = event if first is None else first
        kind = event.get("event") if isinstance(event, Mapping) else None
        try:
            if not isinstance(kind, str):  # (events of kinds a newer gatekit added are skipped below)
                raise TypeError("not an event object")
            if kind == "series_start":
                _check_start(event)
                state = JournalState(start=event)
            elif state is None:
                raise SeriesError(f"{path}: does not begin with series_start")
            elif kind == "run_end":
                record = RunRecord.from_dict(event["record"])
                state.records[record.label] = record
                state.hash_s.extend(float(s) for s in event.get("hash_s", []))
            elif kind == "retry":
                _require(event, {"round": int, "replaces": int, "reason": str, "flagged": Mapping})
                state.retries.append(event)
            elif kind == "extend":
                _require(event, {"slots": list})
                state.extensions.append(event)
            elif kind == "invalid":
                state.problems.append(str(event["reason"]))
            elif kind == "series_end":
                _require(event, {"provenance_end": Mapping})
                _require(event["provenance_end"], {"artifacts": Mapping, "git": Mapping,
                                                   **({"hash_s": (int, float)} if "hash_s" in event["provenance_end"] else {})})
                state.end = event
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # RecordError is a ValueError
            raise SeriesError(f"{path}: event {number} ({kind!r}) is not what gatekit wrote ({exc!r}); the "
                              "journal was edited or damaged") from None
    if state is None:
        raise SeriesError(f"{path}: empty journal; the series never started")
    state.legacy = "prev" not in first
    state.chain_head = None if state.legacy else line_sha256(last)
    return state


def _require(table: Any, fields: Mapping[str, type | tuple[type, ...]]) -> None:
    if not isinstance(table, Mapping):
        raise TypeError(f"expected a table, got {type(table).__name__}")
    for name, kind in fields.items():
        if not isinstance(table[name], kind) or (kind is int and isinstance(table[name], bool)):
            raise TypeError(f"{name} is {type(table[name]).__name__}")


def _check_start(event: Mapping[str, Any]) -> None:
    _require(event, {"series_id": str, "finding_id": str, "date": str, "gate_path": str, "gate_sha256": str,
                     "predecision_sha256": str, "off_arm": str, "on_arm": str, "out_dir": str, "schedule": list,
                     "arms": Mapping, "provenance_start": Mapping})
    for slot in event["schedule"]:
        _require(slot, {"arm": str, "round": int})
    for arm in event["arms"].values():
        _require(arm, {"config": str, "args": list, "env": Mapping})
    _require(event["provenance_start"], {"artifacts": Mapping, "git": Mapping, "host": Mapping, "software": Mapping})
    if "hashing" in event["provenance_start"]:  # journals of earlier versions have no hashing record
        _require(event["provenance_start"]["hashing"], {"artifact_bytes": int, "hash_s": (int, float)})


def replacements(retries: Sequence[Mapping[str, Any]]) -> dict[int, rules.Replacement]:
    """Journaled retry events as {replaced round: Replacement}."""
    return {r["replaces"]: rules.Replacement.from_dict(r) for r in retries}


def _check_gate_file(path: Path, start: Mapping[str, Any]) -> None:
    current = sha256_file(path)
    if current != start["gate_sha256"]:
        raise SeriesError(f"{path}: changed since the series started (sha256 {start['gate_sha256']} -> "
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
    predecision = read_predecision(series_dir, start["predecision_sha256"])
    gate_path = Path(start["gate_path"])
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
    registered = Path(start["gate_path"])
    path = (gate_path or registered).resolve()
    if path == registered and path.is_file():
        _check_gate_file(path, start)
    config = load_gate(path)
    if registered != config.path:
        raise SeriesError(f"{series_dir}: was started with gate file {registered}, not {config.path}")
    predecision = read_predecision(series_dir, start["predecision_sha256"])
    _check_arm_configs(predecision)
    arms = []
    for name in (start["off_arm"], start["on_arm"]):
        if name in config.arms:
            arms.append(config.arms[name])
        else:  # an ad-hoc arm given as a path to its .toml (sha256 verified above): read again from it
            info = start["arms"][name]
            arm = config.arm(info["config"]) if info["config"] else ArmSpec(name=name)
            if any(str(v).startswith(REDACTED_PREFIX) for v in info["env"].values()):  # never run on a hash
                raise SeriesError(f"{series_dir}: arm '{name}' had environment values that were only journaled "
                                  "redacted; resume it with a gate file that defines the arm")
            arms.append(dataclasses.replace(arm, name=name, args=tuple(info["args"]),
                                            env=arm.env or dict(info["env"])))
    return OpenSeries(series_dir, state, predecision, config, arms[0], arms[1])


def evidence_from_state(opened: OpenSeries | tuple[Path, JournalState, Mapping[str, Any]]) -> SeriesEvidence:
    """Everything analysis needs, from the journal and the verified predecision alone."""
    if isinstance(opened, OpenSeries):
        series_dir, state, predecision = opened.series_dir, opened.state, opened.predecision
    else:
        series_dir, state, predecision = opened
    start = state.start
    spec = DecisionSpec.from_dict(predecision["decision"])
    base = git_root(Path(start["gate_path"]).parent) or Path(start["gate_path"]).parent
    provenance: dict[str, Any] = {
        "artifacts": {"start": _relative_keys(start["provenance_start"]["artifacts"], base)},
        "git": {"start": start["provenance_start"]["git"]},
        "host": start["provenance_start"]["host"],
        "software": start["provenance_start"]["software"],
    }
    if "backend" in start["provenance_start"]:
        provenance["backend"] = start["provenance_start"]["backend"]
    hashing = start["provenance_start"].get("hashing")
    if hashing is not None:  # how long sha256 of the artifacts took, all of it outside the timed windows
        between = list(state.hash_s)
        end_s = state.end["provenance_end"].get("hash_s") if state.end is not None else None
        provenance["hashing"] = {
            "artifact_bytes": hashing["artifact_bytes"], "series_start_s": hashing["hash_s"],
            "between_runs_count": len(between), "between_runs_max_s": max(between, default=0.0),
            "total_s": hashing["hash_s"] + sum(between) + (end_s or 0.0)}
    warnings: list[str] = [LEGACY_JOURNAL_WARNING] if state.legacy else []
    problems = list(state.problems)
    if state.end is not None:
        end = state.end["provenance_end"]
        provenance["artifacts"]["end"] = _relative_keys(end["artifacts"], base)
        provenance["git"]["end"] = end["git"]
        problems += [m for m in changed_artifacts(start["provenance_start"]["artifacts"], end["artifacts"])
                     if m not in problems]
        rev_start, rev_end = start["provenance_start"]["git"].get("rev"), end["git"].get("rev")
        if rev_start and rev_end and rev_start != rev_end:
            diff = git_diff_stat(Path(start["gate_path"]).parent, rev_start, rev_end)
            provenance["git"]["moved"] = True
            provenance["git"]["diff_stat"] = diff
            warnings.append(f"git HEAD moved during the series ({rev_start[:12]} -> {rev_end[:12]}); "
                            f"files touched: {diff.strip().splitlines()[-1] if diff.strip() else 'unknown'}")
    replaced = replacements(state.retries)
    records = tuple(sorted(state.records.values(), key=lambda r: r.order))
    config_paths = [_display(Path(a["config"]), base) for a in start["arms"].values() if a["config"]]
    return SeriesEvidence(
        series_id=start["series_id"], finding_id=start["finding_id"], spec=spec, records=records,
        replaced=replaced, date=start["date"],
        predecision_path=_display(series_dir / PREDECISION_FILE, base),
        predecision_sha256=start["predecision_sha256"], provenance=provenance,
        invalid_reasons=tuple(problems), warnings=tuple(warnings), config_paths=tuple(config_paths),
        related_runs=tuple(_display(series_dir / r.label, base) for r in records),
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
        predecision = read_predecision(series_dir, state.start["predecision_sha256"])
    return analyze(evidence_from_state((series_dir, state, predecision)))

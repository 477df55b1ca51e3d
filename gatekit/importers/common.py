"""What every importer shares: reading a tool's file, the finding's identity (id, title, date), and two
arms of imported runs turned into series evidence."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.analysis import SeriesEvidence
from gatekit.config import (ALWAYS_MEASURED, DEFAULT_MAX_THRESHOLD_PCT, NAME_PATTERN, NAME_RULE, GuardSpec, RulesSpec,
                            ThresholdSpec)
from gatekit.errors import ConfigError, GatekitError
from gatekit.finding import Finding, load_finding
from gatekit.policy_descriptors import IMPORT_POLICY, INTERLEAVED, describe, gate_policies
from gatekit.prereg import DecisionSpec
from gatekit.records import DuplicateKeyError, RunOutcome, RunRecord, WindowSummary, loads_json
from gatekit.runfiles import json_problem
from gatekit.sanitize import MAX_METRIC_MAGNITUDE, usable_metric
from gatekit.storage import read_input

NOT_INTERLEAVED = ("each arm's runs ran back to back, not interleaved, so drift during the benchmark is "
                   "confounded with the arm")
NO_LOAD = "no load was sampled during the runs, so contamination cannot be judged"
_SLUG = re.compile(r"[^a-z0-9]+")
MAX_SECONDS = 1e9  # about 32 years: a time this long is a broken file, and far larger ones overflow a sum
_TIME_METRICS = frozenset({ALWAYS_MEASURED, "time_s"})


@dataclass(frozen=True, slots=True)
class ImportedRun:
    """One run as another tool recorded it."""

    value: float | None  # the primary metric, in the tool's unit; None: the tool recorded no value
    metrics: Mapping[str, float] = field(default_factory=dict)  # further metrics, usable as guards
    error: str = ""  # why the run failed, empty when it did not
    exit_code: int | None = 0
    load1: float | None = None  # load average the tool recorded for the run, if any


@dataclass(frozen=True, slots=True)
class ImportedArm:
    """One side of the comparison: its name, what distinguishes it, and its runs in the tool's order."""

    name: str
    config: Mapping[str, Any]
    runs: tuple[ImportedRun, ...]


@dataclass(frozen=True, slots=True)
class Identity:
    """The finding's id, title and date: the id and date name its files, so both are validated."""

    gate_id: str
    title: str
    date: str

    @classmethod
    def of(cls, path: Path, *, gate_id: str | None, title: str | None, date: str | None,
           tool: str, subject: str | None = None) -> Identity:
        """The default title names what was measured and the tool; the arms follow it in every summary."""
        if gate_id is not None and not NAME_PATTERN.fullmatch(gate_id):
            raise ConfigError(f"--id {gate_id!r}: must be {NAME_RULE} (it names the finding's files)")
        if date is not None and not is_iso_date(date):
            raise ConfigError(f"--date {date!r}: must be a date written YYYY-MM-DD (it names the finding's files)")
        gate_id = gate_id or slug(path.stem)
        return cls(gate_id=gate_id, title=title or f"{subject or gate_id} ({tool})",
                   date=date or dt.date.today().isoformat())


def slug(text: str, fallback: str = "import") -> str:
    return _SLUG.sub("-", text.lower()).strip("-")[:64].strip("-") or fallback


def is_iso_date(text: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return False
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_bytes(path: Path) -> bytes:
    """A source file's bytes; a missing or unreadable file is a ConfigError naming it."""
    return read_input(path, "a file")


def read_json(path: Path, what: str) -> tuple[Any, bytes]:
    """A JSON source file, parsed; `what` names the tool output expected, for the error."""
    raw = read_bytes(path)
    return parse_json(raw, path, what), raw


def parse_json(raw: bytes, path: Path, what: str) -> Any:
    """`raw` parsed as JSON once it is within the run files' bounds (nesting, number of values), so a parser
    can neither recurse to a RecursionError nor build gigabytes of objects; errors name the file."""
    problem = json_problem(raw)
    if problem:
        raise ConfigError(f"{path}: not {what}: {problem}")
    try:
        return loads_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, DuplicateKeyError) as exc:
        raise ConfigError(f"{path}: not {what}: {exc}") from None


_GOBENCH_LINE = re.compile(rb"^Benchmark\S*\s+\d+\s+[0-9.e+-]+ ns/op", re.MULTILINE)
_SNIFF_LIMIT = 64 << 20  # a tool's output larger than this is not sniffed


def import_command_for(path: Path) -> str | None:
    """What another tool's output is and the `gate import` command that reads it (for `gate analyze`), or
    None when the file is none of theirs."""
    try:
        if path.stat().st_size > _SNIFF_LIMIT:
            return None
        raw = path.read_bytes()
    except OSError:
        return None
    if raw[:2] == b"\x1f\x8b":  # of the tools gate imports, only pyperf writes gzipped JSON
        return "pyperf JSON (gzipped); import it with: gate import pyperf OFF.json.gz ON.json.gz"
    if _GOBENCH_LINE.search(raw):
        return "`go test -bench` output; import it with: gate import gobench OLD.txt NEW.txt"
    if raw.lstrip()[:1] not in (b"{", b"["):
        return None
    if json_problem(raw):
        return None
    try:
        data = loads_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, DuplicateKeyError):
        return None
    criterion = "Criterion output; import its folder with: gate import criterion FOLDER --off ID --on ID"
    if isinstance(data, list) and len(data) == 2 and all(isinstance(v, list) for v in data):
        return criterion  # criterion 0.2 to 0.3.2's sample.json: [[iters...], [times...]]
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("benchmarks"), list) and "machine_info" in data:
        return "pytest-benchmark JSON; import it with: gate import pytest-benchmark FILE --off NAME --on NAME"
    if isinstance(data.get("benchmarks"), list) and "version" in data:
        return "pyperf JSON; import it with: gate import pyperf OFF.json ON.json"
    if isinstance(data.get("results"), list) and all(isinstance(r, dict) and "command" in r for r in data["results"]):
        return "hyperfine JSON; import it with: gate import hyperfine FILE"
    if {"iters", "times"} <= data.keys() or {"group_id", "function_id"} <= data.keys() or (
            isinstance(data.get("mean"), dict) and "point_estimate" in data["mean"]):
        return criterion
    return None


def parse_guard(text: str, directions: Mapping[str, str], source: Path) -> GuardSpec:
    """`--guard METRIC[:MAX_WORSE]` → a guard: on may be worse than off by at most MAX_WORSE (default 0) in the
    metric's own unit; `directions` maps each metric the source records per run to "lower"/"higher" is better."""
    metric, sep, limit = text.rpartition(":") if ":" in text else (text, ":", "0")
    try:
        max_worse = float(limit)
    except ValueError:
        max_worse = math.nan
    if not math.isfinite(max_worse) or max_worse < 0:
        raise ConfigError(f"--guard {text!r}: MAX_WORSE must be a number ≥ 0 in the metric's unit "
                          "(write METRIC[:MAX_WORSE], e.g. memory_usage_byte:1048576)")
    if metric not in directions:
        known = ", ".join(directions) or "none: it records only the primary metric"
        raise ConfigError(f"{source}: --guard {metric!r} is not a per-run metric of this file (metrics: {known})")
    return GuardSpec(metric=metric, direction=directions[metric], max_drop=max_worse)


def imported_evidence(*, tool: str, sources: Sequence[tuple[Path, bytes]], off: ImportedArm, on: ImportedArm,
                      identity: Identity, primary: str = ALWAYS_MEASURED, direction: str = "lower",
                      guards: Sequence[GuardSpec] = (), threshold: ThresholdSpec = ThresholdSpec(),
                      warnings: Sequence[str] = (NOT_INTERLEAVED, NO_LOAD), interleaved: bool = False,
                      provenance: Mapping[str, Any] | None = None) -> SeriesEvidence:
    """Evidence of two imported arms. Runs are numbered in the tool's order: off's then on's (blocked), or
    alternating when `interleaved`. Only interleaved runs are paired (off-rK with on-rK); blocked runs were
    not, so each is a pair of its own and a failed run never takes a run of the other arm out with it. A
    run's `load1` becomes its window (one sample); with none recorded the window rule is off, as there are no
    windows to audit."""
    if off.name == on.name:
        raise ConfigError(f"{sources[0][0]}: --off and --on name the same {tool} arm {off.name!r}")
    for arm, source in ((off, sources[0][0]), (on, sources[-1][0] if len(sources) == 2 else sources[0][0])):
        _check_values(arm, source, tool, primary)
    has_load = any(run.load1 is not None for arm in (off, on) for run in arm.runs)
    spec = DecisionSpec(
        gate_id=identity.gate_id, title=identity.title, off_arm=off.name, on_arm=on.name,
        n=min(len(off.runs), len(on.runs)), order="abab" if interleaved else "blocked", seed=0,
        primary=primary, direction=direction, expect_diff=tuple(sorted(set(off.config) | set(on.config))),
        threshold=threshold, guards=tuple(guards), policy=IMPORT_POLICY, sequential_version=describe(IMPORT_POLICY).version,
        rules=RulesSpec(require_window_samples=has_load, max_threshold_pct=DEFAULT_MAX_THRESHOLD_PCT))
    slots = [(arm, k, run) for arm in (off, on) for k, run in enumerate(arm.runs, 1)]
    if interleaved:
        slots.sort(key=lambda slot: (slot[1], slot[0] is on))
    records = []
    for order, (arm, k, run) in enumerate(slots, 1):
        metrics = dict(run.metrics)
        wallclock = 0.0
        if primary == ALWAYS_MEASURED:
            wallclock = run.value if run.value is not None else 0.0
        elif run.value is not None:
            metrics[primary] = run.value
        error = run.error or ("" if run.value is not None else f"{tool} recorded no value for this run")
        outcome = RunOutcome(exit_code=run.exit_code, process_wallclock_s=wallclock, metrics=metrics,
                             config=dict(arm.config), error=error)
        window = WindowSummary(samples=int(run.load1 is not None), load1_mean=run.load1, load1_max=run.load1)
        records.append(RunRecord(order=order, arm=arm.name, label=f"{arm.name}-r{k}",
                                 pair=k if interleaved else order, outcome=outcome, window=window))
    imported_from = {"format": tool,
                     "files": [{"path": str(p), "sha256": hashlib.sha256(raw).hexdigest()} for p, raw in sources]}
    return SeriesEvidence(
        series_id=f"{tool}:{sources[0][0].name}", finding_id=f"{identity.gate_id}-{identity.date}", spec=spec,
        records=tuple(records), date=identity.date,
        provenance={"imported_from": imported_from, **(provenance or {})},
        warnings=tuple(f"imported from {tool}: {w}" for w in warnings), related_runs=tuple(str(p) for p, _ in sources))


def import_policies() -> tuple[str, ...]:
    """The policies an import can be decided by: those that decide one look at the runs there are (no stages of
    their own, no duet pairs, no censored times)."""
    return tuple(name for name in gate_policies() if (d := describe(name)).mode == INTERLEAVED
                 and not d.fixes_schedule and not d.censoring)


def decided_by(evidence: SeriesEvidence, *, policy: str | None = None,
               floor_pct: float | None = None) -> SeriesEvidence:
    """Imported evidence preregistered for another policy (`--policy`, default IMPORT_POLICY) or floor
    (`--floor-pct`, default the gate's 1 %), both stated in the finding's gate section."""
    spec = evidence.spec
    if policy is not None:
        if policy not in import_policies():
            raise ConfigError(f"--policy: an import is decided by one of {', '.join(import_policies())}, got "
                              f"{policy!r}")
        spec = dataclasses.replace(spec, policy=policy, sequential_version=describe(policy).version)
    if floor_pct is not None:
        if not (math.isfinite(floor_pct) and 0 <= floor_pct < 100):
            raise ConfigError(f"--floor-pct: must be a percentage from 0 to below 100, got {floor_pct!r}")
        spec = dataclasses.replace(spec, threshold=dataclasses.replace(spec.threshold, floor_pct=floor_pct))
    return dataclasses.replace(evidence, spec=spec)


def _check_values(arm: ImportedArm, source: Path, tool: str, primary: str) -> None:
    """Every value of an arm is usable: a time finite, ≥ 0 and below MAX_SECONDS, any other metric finite and
    within ±MAX_METRIC_MAGNITUDE, so no sum or mean of them can overflow; else an error naming the file, the
    arm (the tool's benchmark, command or file) and the field."""
    for k, run in enumerate(arm.runs, 1):
        fields = [*([(primary, run.value)] if run.value is not None else []), *run.metrics.items()]
        for name, value in fields:
            if name in _TIME_METRICS:
                if not (math.isfinite(value) and 0 <= value < MAX_SECONDS):
                    raise ConfigError(f"{source}: {tool} arm {arm.name!r}, run {k}: {name} is {value!r}; a "
                                      f"time must be finite, ≥ 0 and below {MAX_SECONDS:g} s")
            elif not usable_metric(value):
                raise ConfigError(f"{source}: {tool} arm {arm.name!r}, run {k}: {name} is {value!r}; a "
                                  f"metric must be a finite number within ±{MAX_METRIC_MAGNITUDE:g}")


def _evidence_of(finding: Finding) -> tuple[Any, ...]:
    """What an import read: its files, arms, primary and every run's numbers (two benchmarks of one file
    differ only there)."""
    runs = tuple((r.label, dict(r.metrics), r.process_wallclock_s, r.exit_code) for r in finding.runs)
    return finding.provenance.extra_keys.get("imported_from"), finding.gate.arms, finding.gate.primary, runs


def refuse_to_replace(finding: Finding, out: Path) -> None:
    """An import writes its finding again only over the same evidence (the same files, arms and primary: a
    new --guard or threshold); a finding of other evidence at that id — another benchmark of the same file,
    the file recorded again — is never replaced, as a gate's finding never is."""
    path = out / f"{finding.id}.json"
    if not path.is_file():
        return
    try:
        existing = load_finding(path)
    except GatekitError as exc:
        raise ConfigError(f"{path}: is in the way of this import's finding and cannot be read ({exc}); give "
                          "--id or --out") from None
    if _evidence_of(existing) != _evidence_of(finding):
        raise ConfigError(f"{path}: holds a finding of other evidence ({existing.meta.title!r}); it is not "
                          "replaced: give this import its own --id, or another --out")

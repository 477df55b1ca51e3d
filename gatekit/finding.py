"""The Finding: a tree of typed, frozen records, one `to_dict`/`from_dict` pair, TOML and JSON from the same dict.

Its format (`gatekit.finding/2`; /1 files load as /2) and their history are in `gatekit.records`.
"""

from __future__ import annotations

import io
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


from gatekit.commits import Commit
from gatekit.config import GuardSpec, RulesSpec
from gatekit.errors import FindingError, RunFileError
from gatekit.policy_descriptors import DEFAULT_POLICY
from gatekit.quality import TargetSpec, TargetTime
from gatekit.records import (FINDING_SCHEMA, SCHEMA_KEY, Record, RecordError, WindowSummary, canonical_json,
                             dumps_toml, first_difference, kind_of, loads_json, metric_value, schema_problem,
                             upgrade)
from gatekit.runfiles import read_run_file
from gatekit.storage import write_output
from gatekit.verdict import Decision, GuardResult, Verdict

SECTIONS = ("meta", "gate", "predecision", "provenance", "rules", "runs", "stats", "guards", "sensitivity",
            "verdict", "sections")


@dataclass(frozen=True, slots=True)
class ConfigChange(Record):
    """One effective-config key that differs between the two commits of a comparison (absent: not echoed there)."""

    key: str
    base: Any = field(default=None, metadata={"omit": None})
    head: Any = field(default=None, metadata={"omit": None})

    def describe(self) -> str:
        def shown(value: Any) -> str:
            return "(absent)" if value is None else json.dumps(value, ensure_ascii=False, default=str)[:60]

        return f"{self.key} {shown(self.base)} → {shown(self.head)}"


@dataclass(frozen=True, slots=True)
class CommitsInfo(Record):
    """The two commits a `gate compare` (or a bisect probe) measured — off at base, on at head — and what of the
    effective config differs between them."""

    base: Commit
    head: Commit
    requested_base: str = field(default="", metadata={"omit": ""})  # BASE as given, when its merge-base replaced it
    merge_base: bool = False  # base is `git merge-base BASE HEAD`
    config_diff: tuple[ConfigChange, ...] = ()


@dataclass(frozen=True, slots=True)
class Meta(Record):
    id: str
    title: str
    date: str
    status: str
    category: str = "gate"
    polarity: str | None = None
    tags: tuple[str, ...] = ()
    commit: str | None = None
    branch: str | None = None
    series_id: str | None = None
    subtitle: str | None = None
    config_paths: tuple[str, ...] = ()
    related_runs: tuple[str, ...] = ()
    related_findings: tuple[str, ...] = ()
    commits: CommitsInfo | None = field(default=None, metadata={"omit": None})  # gate compare: base and head
    extra_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Arms(Record):
    off: str
    on: str


@dataclass(frozen=True, slots=True)
class ThresholdRule(Record):
    """threshold_pct = max(sigma_k · σ_off, floor_pct), and the rule in words."""

    sigma_k: float | None = None
    floor_pct: float | None = None
    rule: str = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class GateInfo(Record):
    id: str
    arms: Arms
    n: int
    order: str
    seed: int | None = None
    primary: str = field(kw_only=True)
    direction: str = field(kw_only=True)
    expect_diff: tuple[str, ...] = ()
    policy: str = DEFAULT_POLICY
    warmup: int = 0
    seed_source: str | None = None
    threshold: ThresholdRule = field(kw_only=True)
    guards: tuple[GuardSpec, ...] = ()
    # a derived primary's quality target (time_to_target_s, steps_to_target), as preregistered
    time_to_target: TargetSpec | None = field(default=None, metadata={"omit": None})
    extra_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Predecision(Record):
    path: str = ""
    sha256: str = ""
    chain_head: str | None = None  # sha256 of the journal's last line; absent for series before hash chains
    extra_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ArtifactHashes(Record):
    start: Mapping[str, str] = field(default_factory=dict)
    end: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class GitInfo(Record):
    start: Mapping[str, Any] = field(default_factory=dict)
    end: Mapping[str, Any] | None = None
    moved: bool | None = None
    diff_stat: str | None = None


@dataclass(frozen=True, slots=True)
class Provenance(Record):
    artifacts: ArtifactHashes = field(default_factory=ArtifactHashes)
    git: GitInfo = field(default_factory=GitInfo)
    host: Mapping[str, Any] = field(default_factory=dict)
    software: Mapping[str, Any] = field(default_factory=dict)
    backend: Mapping[str, Any] | None = None
    # the backend's provenance at series end (the GPU's identity again); absent in findings made before
    backend_end: Mapping[str, Any] | None = field(default=None, metadata={"omit": None})
    hashing: Mapping[str, Any] | None = None
    extra_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RulesInfo(Record):
    """The preregistered contamination rules, and whether rule (ii) can fire at this n."""

    spec: RulesSpec = field(default_factory=RulesSpec, metadata={"flatten": True})
    max_attainable_z: float | None = None
    rule_ii_reachable: bool | None = None
    extra_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunRow(Record):
    """One executed run as the finding shows it, discarded runs included."""

    order: int
    arm: str
    label: str
    pair: int
    exit_code: int | None = None
    timed_out: bool = False
    metrics: Mapping[str, float] = field(default_factory=dict)
    process_wallclock_s: float = field(kw_only=True)
    window: WindowSummary = field(kw_only=True)
    load_evidence: bool = False
    z: float = 0.0
    contaminated: bool = False
    retry_of: int | None = None
    used: bool = field(kw_only=True)
    reason: str = ""
    started_at: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    warmup: bool = field(default=False, metadata={"omit": False})
    slot: str | None = field(default=None, metadata={"omit": None})  # the duet slot it ran on
    # start-up overhead: process wallclock − primary, when the primary is a time (records.startup_overhead_s)
    startup_s: float | None = field(default=None, metadata={"omit": None})
    # `[driver] preload`: the pid of the warm parent the run was forked from (None: started cold)
    warm_parent: int | None = field(default=None, metadata={"omit": None})
    # a derived primary (time_to_target_s, steps_to_target): the time it reached its target, or was censored at
    target: TargetTime | None = field(default=None, metadata={"omit": None})
    extra_keys: Mapping[str, Any] = field(default_factory=dict)

    def value_of(self, metric: str) -> float | None:
        """The run's value of a metric (records.metric_value: the one lookup), or None."""
        return metric_value(self.metrics, self.process_wallclock_s, metric)


@dataclass(frozen=True, slots=True)
class CycleCheck(Record):
    """Δ in cycles beside Δ in time: each used run's time × its mean SM clock (MHz·s = 10⁶ cycles), decided by
    the same policy as time (nvbench confirms a time difference in cycle space and calls a disagreement
    ambiguous). `supports`: whether the cycle decision is the time decision; None where it cannot be said."""

    runs_with_clock: int
    used_runs: int
    mean_clock_off_mhz: float | None = None
    mean_clock_on_mhz: float | None = None
    delta_cycles_pct: float | None = None
    sigma_off_cycles_pct: float | None = None
    sigma_on_cycles_pct: float | None = None
    decision_in_cycles: str | None = None
    supports: bool | None = None
    # per-run clock states explain the spread of time (σ in cycles at most half σ in time): words, or ""
    two_states: str = field(default="", metadata={"omit": ""})


@dataclass(frozen=True, slots=True)
class Stats(Record):
    """The classic figures of the used runs, and the diagnostics beside them (docs/statistics.md)."""

    n_off: int | None = None
    n_on: int | None = None
    mean_off: float | None = None
    mean_on: float | None = None
    sigma_off_pct: float | None = None
    sigma_on_pct: float | None = None
    delta_pct: float | None = None
    threshold_pct: float | None = None
    pairs_consistent: str = field(kw_only=True)  # "k/m": rounds where on is better than off
    gm_delta_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    ci_level: float | None = None
    welch_df: float | None = None
    p_one_sided: float | None = None
    mde_pct: float | None = None
    mde_alpha: float | None = None
    mde_power: float | None = None
    hl_shift_pct: float | None = None
    drift_off_pct_per_run: float | None = None
    drift_on_pct_per_run: float | None = None
    drift_pct_per_run: float | None = None
    order_gap_runs: float | None = None
    order_bias_pct: float | None = None
    pairs_sign_p: float | None = None
    # Δ in cycles for a time primary whose runs recorded their SM clock; absent in findings made before
    cycles: CycleCheck | None = field(default=None, metadata={"omit": None})
    extra_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GuardRow(GuardResult):
    """A guard's result with the Welch CI of its Δ (is the point estimate inside its own noise?)."""

    ci_low: float | None = None
    ci_high: float | None = None
    ci_level: float | None = None
    within_noise: bool | None = None


@dataclass(frozen=True, slots=True)
class SensitivityRow(Record):
    """The classic decision with some runs left out (the seed's §6 exclusion-sensitivity check)."""

    variant: str
    dropped: tuple[str, ...] = ()
    delta_pct: float | None = None
    threshold_pct: float | None = None
    decision: Decision = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class PairedGuard(Record):
    """A quality guard as paired non-inferiority over the rounds' (off, on) pairs (sequential policy)."""

    metric: str
    direction: str
    limit: float
    pairs: int
    mean_diff: float | None = None  # mean of on − off
    bound: float | None = None  # the one-sided bound on the side that must clear the limit
    far_bound: float | None = None  # the opposite one-sided bound
    level: float | None = None
    status: str = field(kw_only=True)  # pass | fail | inconclusive


@dataclass(frozen=True, slots=True)
class Look(Record):
    """One look of the sequential policy."""

    look: int
    n_off: int
    n_on: int
    delta_pct: float | None = None  # ratio of geometric means − 1
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    ci_level: float | None = None
    df: float | None = None
    p_better: float | None = None
    p_worse: float | None = None
    primary: str = field(kw_only=True)  # the primary metric's own outcome at this look
    guards: Mapping[str, PairedGuard] = field(default_factory=dict)
    decision: str = field(kw_only=True)  # continue | adopted | … after the guards


@dataclass(frozen=True, slots=True)
class SequentialInfo(Record):
    """The sequential policy's looks and constants, as the finding records them."""

    alpha: float
    df: str
    floor_pct: float
    runs_per_arm: tuple[int, ...]
    guard_level: float
    looks: tuple[Look, ...]
    decision: str
    next: str  # extend | stop
    extra_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RankInfo(Record):
    """The robust policy's preregistered constants and its estimate, as the finding records them
    (gatekit.policies.robust): the Hodges–Lehmann shift of log values, its Mann–Whitney interval, the p-values."""

    version: int
    method: str
    alpha: float  # one-sided: the interval is the two-sided 1 − 2α one
    floor_pct: float
    n_off: int
    n_on: int
    shift_pct: float | None  # on vs off as a ratio − 1, in percent; None: no positive values to compare
    low_pct: float | None = None  # None: too few runs for an interval at this α
    high_pct: float | None = None
    p_better: float | None = None  # one-sided Mann–Whitney p, H1: on better in the gate's direction
    p_worse: float | None = None


@dataclass(frozen=True, slots=True)
class DuetInfo(Record):
    """The duet policy's estimate, slot effect and constants, as the finding records them (gatekit.policies.duet)."""

    version: int
    method: str
    alpha: float  # the bound on false adoption
    test_alpha: float  # the one-sided level the rule tests at (a margin under alpha)
    interval_level: float
    floor_pct: float
    n_pairs: int
    pairs_on_slot1: int  # pairs with on on slot 1 (σ = +1)
    pairs_on_slot0: int  # pairs with on on slot 0 (σ = −1)
    df: int | None = None
    critical: float | None = None  # t_{1−α, df}
    delta_pct: float | None = None  # the slot effect removed; ratio of geometric means − 1
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    slot_effect_pct: float | None = None  # a run on slot 1 against the same run on slot 0
    slot_ci_low_pct: float | None = None
    slot_ci_high_pct: float | None = None
    slots: tuple[str, ...] = ()  # (slot 0, slot 1) as the runs recorded them
    # the two-sided 95 % CI of Δ (t_{0.975, df}), to compare with other gates' CIs; the rule reads the above
    ci95_low_pct: float | None = field(default=None, metadata={"omit": None})
    ci95_high_pct: float | None = field(default=None, metadata={"omit": None})
    guard_level: float | None = None
    guards: Mapping[str, PairedGuard] = field(default_factory=dict)
    primary: str = field(kw_only=True)  # the primary metric's own outcome
    decision: str = field(kw_only=True)  # after the guards
    extra_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Section(Record):
    """A narrative block in the seed finding's shape: lead, heading, table, kv, callout or list."""

    type: str
    label: str | None = None
    variant: str | None = None
    text: str | None = None
    columns: tuple[Any, ...] | None = None
    align: tuple[Any, ...] | None = None
    rows: tuple[Any, ...] | None = None
    items: tuple[Any, ...] | None = None
    generated: bool = field(default=False, metadata={"omit": False})  # written by gatekit, not by a person
    extra_keys: Mapping[str, Any] = field(default_factory=dict)


def generated_section(type_: str, **content: Any) -> Section:
    """A narrative section gatekit wrote (marked `generated`, so a report tells it from the ones people add)."""
    return Section(type_, generated=True, **content)


@dataclass(frozen=True, slots=True)
class Finding(Record):
    """A finding document (DESIGN "Finding"), typed from the top down."""

    meta: Meta
    gate: GateInfo
    predecision: Predecision
    provenance: Provenance
    rules: RulesInfo
    runs: tuple[RunRow, ...]
    stats: Stats
    guards: Mapping[str, GuardRow]
    sensitivity: tuple[SensitivityRow, ...]
    verdict: Verdict
    sequential: SequentialInfo | None = None
    duet: DuetInfo | None = None  # the duet policy's estimate and slot effect
    ranks: RankInfo | None = None  # the robust policy's shift, interval and p-values
    sections: tuple[Section, ...] = ()
    extra_keys: Mapping[str, Any] = field(default_factory=dict)
    upgraded_from: str | None = field(default=None, compare=False, metadata={"internal": True})

    @property
    def id(self) -> str:
        return self.meta.id

    @property
    def decision(self) -> Decision:
        return self.verdict.decision

    @property
    def off_arm(self) -> str:
        return self.gate.arms.off

    @property
    def on_arm(self) -> str:
        return self.gate.arms.on

    @property
    def imported_from(self) -> str | None:
        """The tool an imported finding was read from (`hyperfine`, `pyperf`, …); None for a gate's own series."""
        imported = self.provenance.extra_keys.get("imported_from")
        if not isinstance(imported, Mapping):
            return None
        return str(imported.get("format") or "another tool")

    def used_values(self, arm: str, metric: str) -> list[float]:
        """The values of `metric` over the used runs of `arm`, in execution order."""
        values = [run.value_of(metric) for run in self.runs if run.used and run.arm == arm]
        return [v for v in values if v is not None]

    def to_dict(self) -> dict[str, Any]:
        return plain({SCHEMA_KEY: FINDING_SCHEMA, **Record.to_dict(self)})

    @classmethod
    def from_document(cls, data: Mapping[str, Any], *, source: str = "finding") -> Finding:
        """A finding from its document (schema /1 or /2, upgraded); anything malformed names `source` and the key."""
        schema = data.get(SCHEMA_KEY)
        problem = schema_problem(schema, FINDING_SCHEMA)
        if problem:
            raise FindingError(f"{source}: {problem}")
        data = upgrade(data, schema)
        missing = [key for key in SECTIONS if key not in data]
        if missing:
            raise FindingError(f"{source}: missing section(s) {', '.join(missing)}")
        _check_plain(data, source)
        try:
            finding = cls.from_dict({k: v for k, v in data.items() if k != SCHEMA_KEY})
        except RecordError as exc:
            raise FindingError(f"{source}: {exc}") from None
        if schema != FINDING_SCHEMA:
            object.__setattr__(finding, "upgraded_from", schema)
        return finding

    def to_json(self) -> str:
        return _json_text(self.to_dict())

    def to_toml(self) -> str:
        return dumps_toml(self.to_dict())


def _json_text(document: Mapping[str, Any]) -> str:
    # json.dumps with an indent collects every chunk in one list before joining (millions of small strings for a
    # finding of 30 000 runs); a buffer written chunk by chunk holds only the text
    text = io.StringIO()
    for chunk in json.JSONEncoder(indent=2, ensure_ascii=False, allow_nan=False).iterencode(document):
        text.write(chunk)
    text.write("\n")
    return text.getvalue()


def plain(value: Any) -> Any:
    """Drop None and non-finite floats (neither TOML nor JSON can hold them the same way)."""
    kind = type(value)  # exact types first, without typing's slower Mapping check: a large finding holds millions
    if kind is float or kind is str or kind is int or kind is bool:
        return value
    if kind is dict:
        return {str(k): plain(v) for k, v in value.items() if _keep(v)}
    if kind is list:
        return [plain(v) for v in value if _keep(v)]
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items() if _keep(v)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value if _keep(v)]
    return value


def _keep(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def _check_plain(document: Any, source: str) -> None:
    """Only what JSON and TOML both hold the same way (walked without recursion: depth is untrusted)."""
    stack = [("", document)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, Mapping):
            stack += [(f"{key}.{k}" if key else str(k), v) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, float) and not math.isfinite(value):
            raise FindingError(f"{source}: {key}: {value} is not a finite number (JSON cannot hold it)")
        elif not isinstance(value, (str, int, float, bool)):
            raise FindingError(f"{source}: {key}: is {kind_of(value)}; a finding holds strings, numbers, booleans, "
                               "lists and tables only (write dates as strings)")


# The largest committed finding is some 33 kB (a gate of 8 runs with traces); 16 MiB leaves a wide margin
MAX_FINDING_BYTES = 16 << 20


def read_finding_bytes(path: Path) -> bytes:
    """A finding file's bytes, within bounds like a run file's (an edited file could be a FIFO, a device or a
    huge file); FindingError naming the file."""
    try:
        raw = read_run_file(path, MAX_FINDING_BYTES)
    except RunFileError as exc:
        raise FindingError(str(exc)) from None
    except OSError as exc:
        raise FindingError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if raw is None:
        raise FindingError(f"{path}: cannot read: No such file or directory")
    return raw


def read_finding_document(path: Path) -> dict[str, Any]:
    """A finding file's document, parsed (.toml or .json) but not yet typed; FindingError naming the file."""
    raw = read_finding_bytes(path)
    try:
        text = raw.decode("utf-8")
        data = loads_json(text) if path.suffix == ".json" else tomllib.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:
        raise FindingError(f"{path}: not a readable finding: {exc}") from None
    if not isinstance(data, dict):
        raise FindingError(f"{path}: not a readable finding: top level is not a table")
    where = non_finite_key(data)
    if where is not None:  # JSON's NaN/Infinity or TOML's nan/inf: gatekit writes neither (allow_nan=False)
        raise FindingError(f"{path}: {where}: is not a finite number; a finding gatekit writes holds only finite "
                           "numbers, so this one was edited")
    return data


def non_finite_key(document: Any, key: str = "") -> str | None:
    """The dotted key of the first float in a plain document that is nan or ±inf; None when every one is finite."""
    stack = [(key, document)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return where or "(top level)"
        if isinstance(value, Mapping):
            stack += [(f"{where}.{k}" if where else str(k), v) for k, v in reversed(list(value.items()))]
        elif isinstance(value, list):
            stack += [(f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value)))]
    return None


def load_finding(path: Path) -> Finding:
    """Read a finding from .toml or .json; an unknown schema says what to do."""
    return Finding.from_document(read_finding_document(path), source=str(path))


def twin_path(path: Path) -> Path:
    """The other file of a finding's pair: `<id>.json` beside `<id>.toml`, and the reverse."""
    return path.with_suffix(".toml" if path.suffix == ".json" else ".json")


def twin_difference(path: Path, finding: Finding) -> str | None:
    """Where the finding's twin says something else than `finding` (read from `path`), as one line naming both
    files and the first differing key; None when it agrees or has no twin. The twins hold the same content,
    so a reader of either sees what the other says: an edited one must not be shown as if it were the finding."""
    twin = twin_path(path)
    if not twin.is_file():
        return None
    mine, document = finding.to_dict(), read_finding_document(twin)
    if _same_data(mine, document):
        return None  # the twin holds this very document, type for type: typing it too would show nothing more
    difference = first_difference(mine, Finding.from_document(document, source=str(twin)).to_dict())
    return None if difference is None else f"{path}: differs from its twin {twin.name}: {difference}"


def _same_data(mine: Mapping[str, Any], document: Mapping[str, Any]) -> bool:
    try:
        return canonical_json(document) == canonical_json(mine)
    except (TypeError, ValueError):  # what JSON cannot hold (a TOML date, a nan): the typed comparison names it
        return False


def write_finding(finding: Finding, out_dir: Path) -> tuple[Path, Path]:
    """Write `<out>/<id>.toml` and `.json` (same content), each atomically."""
    toml_path, json_path = out_dir / f"{finding.id}.toml", out_dir / f"{finding.id}.json"
    document = finding.to_dict()  # once for both twins: a large finding's document costs seconds to build
    write_output(toml_path, dumps_toml(document), "finding")
    write_output(json_path, _json_text(document), "finding")
    return toml_path, json_path

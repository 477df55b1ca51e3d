"""A series journal's events as typed records: what `series.runner` and `runloop` write, `series_replay` reads.

Each is an `Event` of the records codec, written with `Journal.record` (its `KIND` is the line's `event`)
and read back with `from_dict`, so a line that does not hold what gatekit wrote is one RecordError naming
its key. A field with a default is one an earlier gatekit did not write (the journal's format history is
in `gatekit.records`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

from gatekit import rules
from gatekit.processes import Escapee
from gatekit.records import Event, Record, RunRecord
from gatekit.schedule import Slot


@dataclass(frozen=True, slots=True)
class JournaledArm(Record):
    """An arm as the series started it: its config path ("" for none), args, and env (values redacted
    unless the gate file's record_env names them)."""

    config: str
    args: tuple[str, ...]
    env: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Hashing(Record):
    """What hashing the artifacts at the series' start cost: their bytes and the seconds it took."""

    artifact_bytes: int
    hash_s: float


@dataclass(frozen=True, slots=True)
class ProvenanceStart(Record):
    artifacts: Mapping[str, str]  # {path: sha256}
    git: Mapping[str, Any]
    host: Mapping[str, Any]
    software: Mapping[str, Any]
    backend: Mapping[str, Any] | None = field(default=None, metadata={"omit": None})  # None: before backends
    hashing: Hashing | None = field(default=None, metadata={"omit": None})  # None: before it was timed


@dataclass(frozen=True, slots=True)
class SeriesStart(Event):
    """The first event: the series' identity, its preregistration's hash, schedule, arms and provenance."""

    KIND: ClassVar[str] = "series_start"
    series_id: str
    finding_id: str
    date: str  # YYYY-MM-DD, the finding id's
    gate_path: Path
    gate_sha256: str
    predecision_sha256: str
    off_arm: str
    on_arm: str
    out_dir: Path
    schedule: tuple[Slot, ...]
    arms: Mapping[str, JournaledArm]
    provenance_start: ProvenanceStart
    started: str = ""  # ISO-8601 wall time

    @property
    def cores(self) -> int | None:
        """The host's CPU count (None where it was not recorded)."""
        count = self.provenance_start.host.get("cpu_count")
        return count if isinstance(count, int) else None


@dataclass(frozen=True, slots=True)
class RunStart(Event):
    KIND: ClassVar[str] = "run_start"
    label: str
    order: int
    started_at: str
    slot: str | None = field(default=None, metadata={"omit": None})  # a duet's device slot


@dataclass(frozen=True, slots=True)
class RunEnd(Event):
    """A finished run's record (the same as its folder's record.json) and the artifact hashing around it."""

    KIND: ClassVar[str] = "run_end"
    record: RunRecord
    hash_s: tuple[float, ...] = ()  # seconds hashing before and after the run; () before it was timed
    # {file name: sha256 | "missing"} of the run folder's evidence (RunFolder.evidence) as the run ended;
    # {} before run files were hashed
    files: Mapping[str, str] = field(default_factory=dict, metadata={"omit": {}})


@dataclass(frozen=True, slots=True)
class Retry(Event):
    """A pair re-run: the new round, the round it replaces, why, and each flagged run's finding then."""

    KIND: ClassVar[str] = "retry"
    round: int
    replaces: int
    reason: str
    flagged: Mapping[str, Mapping[str, Any]]  # label -> {contaminated, z, detail}
    first: str | None = field(default=None, metadata={"omit": None})  # the arm that runs first, if fixed

    @property
    def replacement(self) -> rules.Replacement:
        return rules.Replacement(self.reason, self.flagged)


@dataclass(frozen=True, slots=True)
class Extend(Event):
    """A policy's next stage: its number (the preregistered schedule is stage 1), its slots, why."""

    KIND: ClassVar[str] = "extend"
    stage: int
    slots: tuple[Slot, ...]
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Invalid(Event):
    KIND: ClassVar[str] = "invalid"
    reason: str


@dataclass(frozen=True, slots=True)
class Interrupted(Event):
    KIND: ClassVar[str] = "interrupted"
    label: str  # the run (or "a + b", a duet pair) cut off; "" between runs


@dataclass(frozen=True, slots=True)
class Escaped(Event):
    """Processes of a run (or "a + b", a duet pair) found and stopped after it."""

    KIND: ClassVar[str] = "escaped"
    label: str
    processes: tuple[Escapee, ...]


@dataclass(frozen=True, slots=True)
class DuetPair(Event):
    KIND: ClassVar[str] = "duet_pair"
    round: int
    labels: tuple[str, ...]
    start_skew_ms: float | None  # how far apart the two runs were released; None if one never started


@dataclass(frozen=True, slots=True)
class LeftoversStopped(Event):
    """Trainer processes of an interrupted run still alive at resume, stopped before it goes on."""

    KIND: ClassVar[str] = "leftovers_stopped"
    pids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ProvenanceEnd(Record):
    artifacts: Mapping[str, str]
    git: Mapping[str, Any]
    hash_s: float | None = field(default=None, metadata={"omit": None})  # None: before it was timed
    # The backend's provenance again at series end (e.g. the GPU's identity); None before it was recorded.
    backend: Mapping[str, Any] | None = field(default=None, metadata={"omit": None})


@dataclass(frozen=True, slots=True)
class SeriesEnd(Event):
    KIND: ClassVar[str] = "series_end"
    provenance_end: ProvenanceEnd
    finished: str = ""

"""Typed, immutable records shared by the library, the drivers and the finding."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping


def _plain(value: Any) -> Any:
    """Convert records, tuples and mappings to JSON/TOML-ready plain data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class Record:
    """Mixin: `to_dict` gives plain data, `from_dict` rebuilds the record (unknown keys ignored)."""

    nested: ClassVar[dict[str, type]] = {}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):  # type: ignore[no-untyped-def]
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in data:
                continue
            value = data[f.name]
            nested = cls.nested.get(f.name)
            if nested is not None and value is not None:
                value = nested.from_dict(value)
            elif isinstance(value, list):
                value = tuple(value)
            kwargs[f.name] = value
        return cls(**kwargs)


@dataclass(frozen=True, slots=True)
class LoadSample(Record):
    """One sampler reading inside a run window."""

    t_s: float  # seconds since the window opened (monotonic clock)
    load1: float
    load5: float
    load15: float
    cpu_pct: float | None = None
    mem_pct: float | None = None
    on_ac: bool | None = None  # None: the machine has no battery
    phase: str = "tick"  # open | tick | close
    extra: Mapping[str, float | int | str | None] = field(default_factory=dict)  # backend telemetry


@dataclass(frozen=True, slots=True)
class WindowSummary(Record):
    """What the sampler saw during one run window.

    `evidence` holds the backend's contamination evidence (e.g. another process on the GPU) and
    `telemetry` a few backend statistics of the window; both are left out of `to_dict` when empty, so a
    window without a backend reads exactly as before.
    """

    samples: int
    load1_mean: float | None
    load1_max: float | None
    on_ac: bool | None = None
    evidence: tuple[str, ...] = ()
    telemetry: Mapping[str, float | int | str | bool | None] = field(default_factory=dict)

    @classmethod
    def of(cls, samples: tuple[LoadSample, ...] | list[LoadSample], *, evidence: tuple[str, ...] = (),
           telemetry: Mapping[str, float | int | str | bool | None] | None = None) -> WindowSummary:
        if not samples:
            return cls(samples=0, load1_mean=None, load1_max=None, evidence=evidence,
                       telemetry=dict(telemetry or {}))
        loads = [s.load1 for s in samples]
        ac = [s.on_ac for s in samples if s.on_ac is not None]
        return cls(
            samples=len(samples),
            load1_mean=sum(loads) / len(loads),
            load1_max=max(loads),
            on_ac=all(ac) if ac else None,
            evidence=evidence,
            telemetry=dict(telemetry or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        data = Record.to_dict(self)
        for key in ("evidence", "telemetry"):
            if not data[key]:
                del data[key]
        return data


@dataclass(frozen=True, slots=True)
class CheckResult(Record):
    """One preflight check: a name, ok or not, and why."""

    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RunOutcome(Record):
    """What a driver reports about one trainer process."""

    exit_code: int | None
    process_wallclock_s: float
    timed_out: bool = False
    metrics: Mapping[str, float] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    trace: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""  # why the run failed, empty when it did not


@dataclass(frozen=True, slots=True)
class RunRecord(Record):
    """One executed run as journaled: schedule slot, driver outcome, window and provenance checks."""

    order: int  # 1-based position in execution order
    arm: str
    label: str  # e.g. off-r2
    pair: int  # round the run belongs to (its own round for retries)
    outcome: RunOutcome
    window: WindowSummary
    retry_of: int | None = None  # the round this run replaces
    started_at: str = ""  # ISO-8601 wall time, for people; durations use monotonic clocks
    artifacts_ok: bool = True

    nested: ClassVar[dict[str, type]] = {"outcome": RunOutcome, "window": WindowSummary}

    @property
    def failed(self) -> bool:
        return bool(self.outcome.error)

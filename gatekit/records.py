"""Typed, immutable records shared by the library, the drivers and the finding, and their one codec.

Every record is a frozen dataclass with one `to_dict` / `from_dict` pair, derived from its fields:
`to_dict` gives JSON/TOML-ready plain data in field order; `from_dict` checks each value against the
field's type and names the dotted key of anything wrong (`runs[2].label: is missing`). Field metadata
tunes the mapping: `key` (the name in the document, e.g. "pass"), `omit` (a value left out of the
document, e.g. an empty evidence list), `flatten` (a nested record whose keys sit in the parent's table),
`internal` (state of the object, never in the document), `encode` (value -> plain data, where a document
states a nested record otherwise than its own `to_dict`: the predecision states every rule's limit).
A record with an `extra_keys` field keeps the keys it does not know, so a newer or hand-extended document
round-trips without loss. A `Path` field is a string in the document (an empty one, for an optional path: none).

Every document gatekit writes names its format (`schema`); `upgrade` brings an older one to the current
version of its format, one function per version (see "Document formats" below).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import enum
import json
import math
import re
import types
import typing
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping, Self, TypeVar, Union

PROCESS_WALLCLOCK = "process_wallclock_s"  # measured by gatekit around every run, so it always exists
# The range of the numbers gatekit computes with. A primary metric below MIN_PRIMARY is no measurement (Δ divides
# by it); a metric beyond ±MAX_METRIC is none either. Within them every ratio of two primaries (≤ 1e60), its
# logarithm's exp (the gm Δ), percentages and their squares stay finite: no input can overflow the statistics.
MIN_PRIMARY = 1e-30
MAX_METRIC = 1e30
EXTRA = "extra_keys"  # the field a record keeps unknown document keys in


class RecordError(ValueError):
    """A document does not fit a record: `path` is the dotted key, `problem` says what is wrong."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}" if path else problem)
        self.path, self.problem = path, problem


_SCALAR_TYPES = frozenset((str, int, float, bool, type(None)))


def _plain(value: Any) -> Any:
    """Convert records, enums, tuples and mappings to JSON/TOML-ready plain data."""
    # exact types first: a finding of 30 000 runs holds millions of scalars, and an isinstance check against
    # typing's Mapping costs a microsecond each (a str-valued enum is a subclass, so it still reaches its case)
    kind = type(value)
    if kind in _SCALAR_TYPES:
        return value
    if kind is list or kind is tuple:
        return [_plain(v) for v in value]
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _join(path: str, key: str, quoted: bool = False) -> str:
    # a key that is not a bare TOML key (spaces, dots, quotes) is shown `quoted`, as TOML writes it
    shown = key if not quoted or _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)
    return f"{path}.{shown}" if path else shown


def unknown_key_hint(unknown: str, known: Iterable[str]) -> str:
    """'did you mean 'X'?' when a known key is close to the unknown one, else a pointer to the docs."""
    close = difflib.get_close_matches(unknown, sorted(known), n=1)
    return f"did you mean '{close[0]}'?" if close else "check its spelling against the docs"


def _got(value: Any, strict: bool) -> str:
    """A wrong value as an error shows it: its kind and value; in a hand-written file, the value as written."""
    return _short(value) if strict else f"{kind_of(value)} {_short(value)}"


def _decode(hint: Any, value: Any, path: str, strict: bool = False) -> Any:
    """`value` as the type `hint` says, or a RecordError naming `path` (`strict`: see `Record.from_input`)."""
    if hint is Any or hint is object:
        return value
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        real = [o for o in options if o is not type(None)]
        if value == "" and Path in real and type(None) in options:
            return None  # an empty path is no path (TOML has no null; older documents wrote "")
        errors = []
        for option in real:
            try:
                return _decode(option, value, path, strict)
            except RecordError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        raise RecordError(path, f"must be {' or '.join(_name(o) for o in real)}, got {_got(value, strict)}")
    if isinstance(hint, type) and issubclass(hint, Record):
        if not isinstance(value, Mapping):
            raise RecordError(path, f"must be a table, got {_got(value, strict)}")
        return hint._decode(value, path, strict)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise RecordError(path, f"must be one of {', '.join(str(m.value) for m in hint)}, got "
                                    f"{_got(value, strict)}") from None
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if not isinstance(value, (list, tuple)):
            raise RecordError(path, f"must be a list, got {_got(value, strict)}")
        return tuple(_decode(item, v, f"{path}[{i}]", strict) for i, v in enumerate(value))
    if origin in (collections.abc.Mapping, dict):
        args = typing.get_args(hint)
        if not isinstance(value, Mapping):
            raise RecordError(path, f"must be a table, got {_got(value, strict)}")
        item = args[1] if args else Any
        return {str(k): _decode(item, v, _join(path, str(k), strict), strict) for k, v in value.items()}
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not strict:
                return value
            try:
                number = float(value)  # what people write as 2 means 2.0
            except OverflowError:
                number = math.inf
            if not math.isfinite(number):
                raise RecordError(path, f"must be a finite number, got {value!r}")
            return number
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint in (str, bool, Path):
        if isinstance(value, str if hint is Path else hint):
            if strict and hint is not bool and "\0" in value:
                raise RecordError(path, "cannot contain a NUL character")
            return Path(value) if hint is Path else value
    else:  # pragma: no cover - a record declared a type this codec does not know
        raise TypeError(f"records cannot decode {hint!r}")
    raise RecordError(path, f"must be {_name(hint)}, got {_got(value, strict)}")


def _name(hint: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "a boolean", Path: "a path string"}.get(
        hint, "a table" if isinstance(hint, type) and issubclass(hint, Record) else "a list"
        if typing.get_origin(hint) is tuple else "a table")


def _is_rest(f: dataclasses.Field) -> bool:
    """The field that keeps the keys no other field takes (`extra_keys`, or one marked `rest`)."""
    return f.name == EXTRA or bool(f.metadata.get("rest"))


class Record:
    """Mixin for frozen dataclasses: one `to_dict` and one `from_dict`, derived from the fields."""

    __slots__ = ()
    _hints: ClassVar[dict[type, dict[str, Any]]] = {}
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # every Record is a dataclass

    @classmethod
    def _field_hints(cls) -> dict[str, Any]:
        hints = Record._hints.get(cls)
        if hints is None:
            hints = Record._hints[cls] = typing.get_type_hints(cls)
        return hints

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if _is_rest(f) or f.metadata.get("internal"):
                continue
            if "omit" in f.metadata and value == f.metadata["omit"]:
                continue
            if f.metadata.get("flatten"):
                data.update(value.to_dict())
                continue
            encode = f.metadata.get("encode")
            data[f.metadata.get("key", f.name)] = encode(value) if encode else _plain(value)
        for f in dataclasses.fields(self):
            if _is_rest(f):
                data.update({k: v for k, v in getattr(self, f.name).items() if k not in data})
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The record from plain data; a value of the wrong type raises RecordError naming its key."""
        return cls._decode(data, "")

    @classmethod
    def from_input(cls, data: Mapping[str, Any]) -> Self:
        """The record from a file people write (a gate or campaign file), which `from_dict` reads strictly:
        a key no field takes is refused (unknown keys first, naming the closest known one), a missing one
        "is required", numbers are finite (an integer where a number is meant reads as one), strings hold
        no NUL, and each field's metadata judges its value: `choices` (a tuple, or a function giving one),
        `check` (value -> problem or None), `input_default` (the default of a key people leave out, where
        it differs from that of documents written before the key existed), `parse` (value -> the field's
        type, a ValueError naming the problem; `document` is then the type the file holds)."""
        return cls._decode(data, "", True)

    @classmethod
    def _keys(cls) -> set[str]:
        keys = set()
        for f in dataclasses.fields(cls):
            if f.metadata.get("flatten"):
                keys |= cls._field_hints()[f.name]._keys()
            elif not _is_rest(f) and not f.metadata.get("internal"):
                keys.add(f.metadata.get("key", f.name))
        return keys

    @classmethod
    def _decode(cls, data: Mapping[str, Any], path: str, strict: bool = False) -> Self:
        hints = cls._field_hints()
        fields = dataclasses.fields(cls)
        rest = next((f for f in fields if _is_rest(f)), None)
        known = cls._keys()
        if strict and rest is None:
            for key in data:
                if key not in known:
                    raise RecordError(_join(path, str(key), True), f"unknown key ({unknown_key_hint(str(key), known)})")
        kwargs: dict[str, Any] = {}
        for f in fields:
            if f is rest or f.metadata.get("internal"):
                continue
            if f.metadata.get("flatten"):
                kwargs[f.name] = hints[f.name]._decode(data, path, strict)
                continue
            key = f.metadata.get("key", f.name)
            where = _join(path, key)
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if key not in data or (data[key] is None and has_default):
                if strict and "input_default" in f.metadata:
                    kwargs[f.name] = f.metadata["input_default"]
                elif strict and has_default and isinstance(hints[f.name], type) and issubclass(hints[f.name], Record):
                    kwargs[f.name] = hints[f.name]._decode({}, where, strict)  # a table left out: its defaults
                elif not has_default:
                    if not _admits_none(hints[f.name]):
                        raise RecordError(where, "is required" if strict else "is missing")
                    kwargs[f.name] = None  # TOML has no null: a None field is left out of the file
                continue
            value = _decode(f.metadata.get("document", hints[f.name]), data[key], where, strict)
            if "parse" in f.metadata:
                try:
                    value = f.metadata["parse"](value)
                except ValueError as exc:
                    raise RecordError(where, str(exc)) from None
            if strict:
                _judge(f, value, where)
            kwargs[f.name] = value
        if rest is not None:
            kwargs[rest.name] = {k: v for k, v in data.items() if k not in known}
        return cls(**kwargs)


def _judge(f: dataclasses.Field, value: Any, where: str) -> None:
    """A hand-written value against its field's `choices` and `check`."""
    choices = f.metadata.get("choices")
    if choices is not None:
        allowed = choices() if callable(choices) else choices
        if value not in allowed:
            raise RecordError(where, f"must be one of {', '.join(map(str, allowed))}, got {value!r}")
    check = f.metadata.get("check")
    problem = check(value) if check is not None else None
    if problem:
        raise RecordError(where, problem)


def _admits_none(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


class Event(Record):
    """A journal event: a record whose `KIND` is its `event` key in the journal (`storage.Journal.record`).
    The journal's own keys (`event`, `prev`, `schema`) are not fields; decoding leaves them aside."""

    __slots__ = ()
    KIND: ClassVar[str] = ""


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
    # Linux pressure-stall information (/proc/pressure/<resource>, the `some` line) and the CPU time counters
    # steal is a share of; None where the OS does not report them, left out of the document then.
    psi_cpu_avg10: float | None = field(default=None, metadata={"omit": None})
    psi_io_avg10: float | None = field(default=None, metadata={"omit": None})
    psi_memory_avg10: float | None = field(default=None, metadata={"omit": None})
    psi_cpu_total_us: int | None = field(default=None, metadata={"omit": None})  # stall time since boot, µs
    psi_io_total_us: int | None = field(default=None, metadata={"omit": None})
    psi_memory_total_us: int | None = field(default=None, metadata={"omit": None})
    cpu_steal_s: float | None = field(default=None, metadata={"omit": None})  # psutil.cpu_times(), all CPUs
    cpu_total_s: float | None = field(default=None, metadata={"omit": None})


PSI_RESOURCES = ("cpu", "io", "memory")


def _window_share_pct(first: float | None, last: float | None, span: float | None) -> float | None:
    """100 × (last − first) / span, or None when a counter or the span is missing (or the span is not positive)."""
    if first is None or last is None or span is None or not span > 0:
        return None
    return min(100.0, max(0.0, 100.0 * (last - first) / span))


@dataclass(frozen=True, slots=True)
class WindowSummary(Record):
    """What the sampler saw during one run window.

    `evidence` holds the backend's contamination evidence (e.g. another process on the GPU) and
    `telemetry` a few backend statistics of the window; both are left out of `to_dict` when empty, so a
    window without a backend reads exactly as before.
    """

    samples: int
    load1_mean: float | None = None
    load1_max: float | None = None
    on_ac: bool | None = None
    evidence: tuple[str, ...] = field(default=(), metadata={"omit": ()})
    telemetry: Mapping[str, float | int | str | bool | None] = field(default_factory=dict, metadata={"omit": {}})
    # Pressure stall over the window: the share of its wall time in which some task waited for the resource
    # (the `total` counter's delta from the first to the last sample), and the highest `some avg10` sampled.
    # None where the OS has no /proc/pressure (and in windows recorded before gatekit read it).
    psi_cpu_pct: float | None = field(default=None, metadata={"omit": None})
    psi_io_pct: float | None = field(default=None, metadata={"omit": None})
    psi_memory_pct: float | None = field(default=None, metadata={"omit": None})
    psi_cpu_avg10_max: float | None = field(default=None, metadata={"omit": None})
    psi_io_avg10_max: float | None = field(default=None, metadata={"omit": None})
    psi_memory_avg10_max: float | None = field(default=None, metadata={"omit": None})
    steal_pct: float | None = field(default=None, metadata={"omit": None})  # CPU time stolen by the hypervisor

    @classmethod
    def of(cls, samples: tuple[LoadSample, ...] | list[LoadSample], *, evidence: tuple[str, ...] = (),
           telemetry: Mapping[str, float | int | str | bool | None] | None = None) -> WindowSummary:
        if not samples:
            return cls(samples=0, load1_mean=None, load1_max=None, evidence=evidence,
                       telemetry=dict(telemetry or {}))
        loads = [s.load1 for s in samples]
        ac = [s.on_ac for s in samples if s.on_ac is not None]
        first, last = samples[0], samples[-1]
        span_us = 1e6 * (last.t_s - first.t_s)
        pressure: dict[str, float | None] = {}
        for resource in PSI_RESOURCES:
            pressure[f"psi_{resource}_pct"] = _window_share_pct(
                getattr(first, f"psi_{resource}_total_us"), getattr(last, f"psi_{resource}_total_us"), span_us)
            avg10 = [v for s in samples if (v := getattr(s, f"psi_{resource}_avg10")) is not None]
            pressure[f"psi_{resource}_avg10_max"] = max(avg10) if avg10 else None
        cpu_span = (last.cpu_total_s - first.cpu_total_s
                    if last.cpu_total_s is not None and first.cpu_total_s is not None else None)
        return cls(
            samples=len(samples),
            load1_mean=sum(loads) / len(loads),
            load1_max=max(loads),
            on_ac=all(ac) if ac else None,
            evidence=evidence,
            telemetry=dict(telemetry or {}),
            steal_pct=_window_share_pct(first.cpu_steal_s, last.cpu_steal_s, cpu_span),
            **pressure,
        )


@dataclass(frozen=True, slots=True)
class CheckResult(Record):
    """One preflight check: a name, ok or not, and why. `flags_runs`: passed, yet runs started now would be
    flagged by a preregistered limit (`gate run` starts; `gate check` says so and exits non-zero).
    `machine`: failed for the machine's state now (a trainer already running, the load, a battery, a GPU in
    use, clocks not locked), not for the gate or the code under test: the same command passes once the
    machine is ready, so a bisect or campaign runs that step again on resume."""

    name: str
    ok: bool
    detail: str = ""
    flags_runs: bool = field(default=False, metadata={"omit": False})
    machine: bool = field(default=False, metadata={"omit": False})


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
    # duet mode: the device slot it ran on ("cuda:1", "cpu:0-3"); None otherwise
    slot: str | None = field(default=None, metadata={"omit": None})

    @property
    def failed(self) -> bool:
        return bool(self.outcome.error)

    def value_of(self, metric: str) -> float | None:
        """The run's value of a metric (see `metric_value`)."""
        return metric_value(self.outcome.metrics, self.outcome.process_wallclock_s, metric)

    def failure(self, primary: str) -> str:
        """THE reason a run cannot count as a measurement of `primary` ('' when it can): the driver's error, a
        primary missing, not positive or too small to be one, or a hashed artifact changed during the run.
        The run loop (progress line, early stop) and the analysis (run table) both ask this."""
        if self.outcome.error:
            return self.outcome.error
        value = self.value_of(primary)
        reported = self.outcome.metrics.get(primary)
        if value is None and reported is not None and math.isfinite(reported):
            return (f"primary metric '{primary}' is {reported:g}, beyond ±{MAX_METRIC:g}: too large to be a "
                    "measurement")
        if value is None:
            return f"primary metric '{primary}' missing or not a finite number"
        if not value > 0:
            # Δ is relative to the off arm's mean: a time, a rate or a loss used as primary must be > 0.
            return f"primary metric '{primary}' is {value:g}, not a positive number"
        if value < MIN_PRIMARY:
            # A subnormal like 5e-324 is no measurement, and dividing by it makes Δ -100 % or infinite.
            return f"primary metric '{primary}' is {value:g}, below {MIN_PRIMARY:g}: too small to be a measurement"
        if not self.artifacts_ok:
            return "hashed artifact changed during the run"
        return ""


def metric_value(metrics: Mapping[str, float], process_wallclock_s: float, metric: str) -> float | None:
    """THE lookup of a run's metric, primary or guard. `process_wallclock_s` is gatekit's own measurement
    around the process (a trainer's echo of that name is never used); any other metric is what the trainer
    reported. The one fallback: none — a missing or non-finite metric is None, and a run whose primary is
    None has failed; it is never replaced by the wallclock. A value beyond ±MAX_METRIC is None too: no statistic
    is computed with it."""
    value = process_wallclock_s if metric == PROCESS_WALLCLOCK else metrics.get(metric)
    return float(value) if value is not None and math.isfinite(value) and abs(value) <= MAX_METRIC else None


def is_time_metric(name: str) -> bool:
    """A metric that is a time in seconds: its name ends in `_s`, the unit convention of metric names."""
    return name.endswith("_s")


def startup_overhead_s(metrics: Mapping[str, float], process_wallclock_s: float, primary: str) -> float | None:
    """What a run's process spent beyond its primary: `process_wallclock_s − primary` (imports, data set-up,
    warm-up, capture, teardown) when the primary is a time in seconds — its name ends in `_s`, the unit
    convention of metric names — and not the wallclock itself; None otherwise, when either is missing, or
    when the primary exceeds the wallclock (then it was not timed inside this process: imported or replayed)."""
    if primary == PROCESS_WALLCLOCK or not is_time_metric(primary):
        return None
    value = metric_value(metrics, process_wallclock_s, primary)
    if value is None or not math.isfinite(process_wallclock_s) or process_wallclock_s < value:
        return None
    return process_wallclock_s - value


# -- Reading JSON ----------------------------------------------------------------------------------

class DuplicateKeyError(ValueError):
    """A JSON object states a key twice: `key` is its dotted path (`verdict.decision`)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"{key}: is stated twice in one object (a reader keeping the first and one keeping the "
                         "last would see two different documents)")
        self.key = key


class _Repeated(dict):
    """An object that stated `repeated` twice, kept (the last value wins) until its place is known."""

    repeated = ""


def loads_json(text: str | bytes) -> Any:
    """`json.loads` of a document gatekit reads (a finding, a journal line, a record, a signature, a manifest),
    refusing a key stated twice in one object: Python keeps the last, other readers the first, so a forged
    first key would show one verdict while the verified one is another. DuplicateKeyError names the key."""
    repeated: list[_Repeated] = []

    def pairs_to_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        document = dict(pairs)
        if len(document) == len(pairs):
            return document
        marked, seen = _Repeated(document), set()
        for key, _ in pairs:
            if key in seen:
                marked.repeated = key
                break
            seen.add(key)
        repeated.append(marked)
        return marked

    data = json.loads(text, object_pairs_hook=pairs_to_object)
    if repeated:
        raise DuplicateKeyError(_repeated_key(data))
    return data


def _repeated_key(data: Any) -> str:
    """The dotted path of the first key stated twice, in document order."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, _Repeated):
            return _join(where, value.repeated, quoted=True)
        if isinstance(value, dict):
            stack += [(_join(where, key, quoted=True), child) for key, child in reversed(list(value.items()))]
        elif isinstance(value, list):
            stack += [(f"{where}[{i}]", child) for i, child in reversed(list(enumerate(value)))]
    raise AssertionError("a repeated key was seen")  # loads_json calls this only when one was


# -- Writing a plain document as TOML ---------------------------------------------------------------

# tomlkit.dumps of a 6 000-run finding took ~74 % of a large import's CPU (it builds a style-preserving tree
# and re-indexes it on every insert); a finding is plain data, so it is written here directly, byte for byte
# as tomlkit writes the same dict: its `item()` layout (scalars before tables, `[[aot]]` elements with dict
# values last, a blank line before a table with anything above it in its scope, no header on a table of
# tables only) and its basic-string escapes. tests/test_toml_writer.py compares the two on generated
# documents; tomlkit stays where comments and layout are edited (the predecision, gate files).
_TOML_ESCAPES = {**{code: f"\\u{code:04x}" for code in (*range(0x20), 0x7F)},
                 **{ord(char): escaped for char, escaped in (("\b", "\\b"), ("\t", "\\t"), ("\n", "\\n"),
                                                             ("\f", "\\f"), ("\r", "\\r"), ('"', '\\"'),
                                                             ("\\", "\\\\"))}}


def _toml_string(text: str) -> str:
    return f'"{text.translate(_TOML_ESCAPES)}"'


def _toml_key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a TOML key must be a string, not {kind_of(key)}")
    return key if _BARE_KEY.fullmatch(key) and key.isascii() else _toml_string(key)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, dict) for v in value)


def _toml_inline(value: Any, separator: str = ", ") -> str:
    """A value on one line; a table in an array separates its keys with ", ", a table in such a table with ","
    (tomlkit builds the second through another path, which writes no space)."""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, dict):
        return "{" + separator.join(f"{_toml_key(k)} = {_toml_inline(v, ',')}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_inline(v) for v in value) + "]"
    raise TypeError(f"{kind_of(value)} is not plain data (strings, numbers, booleans, lists, tables)")


def _toml_table(table: dict[str, Any], path: str, preceded: bool, out: list[str]) -> None:
    """`[path]` and its body; a table holding only tables has no header of its own (tomlkit's super table)."""
    blank = "\n" if preceded else ""
    if table and all(isinstance(v, dict) or _is_table_array(v) for v in table.values()):
        out.append(blank)
    else:
        out.append(f"{blank}[{path}]\n")
    _toml_body(table, path, False, out)


def _toml_body(table: dict[str, Any], path: str, table_array_element: bool, out: list[str]) -> None:
    items = list(table.items())
    if table_array_element:  # tomlkit puts an element's dict values last (stable), so a header cannot capture
        items.sort(key=lambda item: isinstance(item[1], dict))
    nested = []
    for position, (key, value) in enumerate(items):
        if isinstance(value, dict) or _is_table_array(value):
            nested.append((position, key, value))
        else:
            out.append(f"{_toml_key(key)} = {_toml_inline(value)}\n")
    preceded = len(nested) < len(items)
    for position, key, value in nested:
        inner = f"{path}.{_toml_key(key)}" if path else _toml_key(key)
        if isinstance(value, dict):
            _toml_table(value, inner, preceded, out)
        else:  # blank line before the first element: by the dict's order, not the written one; before a later
            # one: when the element before it is not empty (both as tomlkit)
            for index, element in enumerate(value):
                blank = "\n" if (value[index - 1] if index else position) else ""
                out.append(f"{blank}[[{inner}]]\n")
                _toml_body(element, inner, True, out)
        preceded = True


def dumps_toml(document: dict[str, Any]) -> str:
    """A plain document (tables, arrays, strings, numbers, booleans) as TOML, exactly as `tomlkit.dumps` writes
    it, at a fraction of the cost. TypeError for anything else."""
    out: list[str] = []
    _toml_body(document, "", False, out)
    return "".join(out)


# -- Comparing documents ------------------------------------------------------------------------

def canonical_json(document: Any) -> str:
    """A plain document's one canonical form: compact JSON, keys sorted. Equal texts are the same data, type for
    type (1 is not 1.0 nor true). TypeError or ValueError for what JSON cannot hold (a TOML date, a nan)."""
    return json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# A recomputation on another machine (another numpy, scipy or BLAS, another CPU's vector width) reproduces a
# float to its last few bits, not bit for bit: sums and logarithms are taken in another order. Floats recomputed
# from evidence agree to this relative tolerance (and this absolute one near zero, where a difference of two
# close values carries only absolute error); decisions, counts, strings and hashes stay exact. An edit of one
# part in a million is a million times outside it. docs/reliability.md ("Verification across machines").
RECOMPUTED_REL_TOL = 1e-9
RECOMPUTED_ABS_TOL = 1e-12


def floats_agree(left: float, right: float) -> bool:
    """Two recomputations of one float agree: within `RECOMPUTED_REL_TOL` (or `RECOMPUTED_ABS_TOL` near zero)."""
    return math.isclose(left, right, rel_tol=RECOMPUTED_REL_TOL, abs_tol=RECOMPUTED_ABS_TOL)


def first_difference(left: Any, right: Any, key: str = "", *, recomputed: bool = False) -> str | None:
    """The first place two plain documents differ, as `dotted.key left != right`; None when equal as data.
    `recomputed`: the right side was computed again from the same evidence, maybe on another machine, so floats
    need only agree (`floats_agree`); everything else must be equal."""
    stack = [(key, left, right)]
    while stack:
        where, a, b = stack.pop()
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            keys = list(dict.fromkeys([*a, *b]))
            stack += [(f"{where}.{k}" if where else str(k), a.get(k, MISSING), b.get(k, MISSING))
                      for k in reversed(keys)]
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            stack += [(f"{where}[{i}]", x, y) for i, (x, y) in reversed(list(enumerate(zip(a, b))))]
        elif recomputed and type(a) is float and type(b) is float:
            if not floats_agree(a, b):
                return f"{where or '(top level)'} {show_value(a)} != {show_value(b)}"
        elif a != b or (type(a) is bool) != (type(b) is bool):
            if isinstance(a, str) and isinstance(b, str) and _looks_the_same(a, b):
                return (f"{where or '(top level)'} {json.dumps(a)[:120]} != {json.dumps(b)[:120]} (the same text in "
                        "another Unicode normal form: NFC and NFD spell one letter with other code points)")
            return f"{where or '(top level)'} {show_value(a)} != {show_value(b)}"
    return None


def _looks_the_same(left: str, right: str) -> bool:
    """Two different strings a terminal shows alike: equal once both are in Unicode's NFC."""
    return unicodedata.normalize("NFC", left) == unicodedata.normalize("NFC", right)


class _Missing:
    """A key one side of a comparison lacks."""

    def __repr__(self) -> str:
        return "missing"


MISSING = _Missing()


def show_value(value: Any) -> str:
    """A value as a difference shows it: JSON, cut at 120 characters (`missing` for a missing key)."""
    return "missing" if value is MISSING else json.dumps(value, ensure_ascii=False)[:120]


# -- Document formats ------------------------------------------------------------------------------
# Every document gatekit writes names its format and version (`schema`). A reader brings an older version
# to the current one here, one step per version (`UPGRADES`), so an old layout is recognised in this one
# place. Upgrades run on the parsed document: a hashed file or journal line is verified on its own bytes
# first and is never written again.
#
#   gatekit.finding/1      meta, gate, predecision, provenance, rules, runs, stats, guards, sensitivity,
#                          verdict, sections (DESIGN "Finding").
#   gatekit.finding/2      the same keys, typed; each section gatekit generated says so (`generated = true`).
#                          Later additions, each with a default: `predecision.chain_head`, `runs[].startup_s`.
#                          `stats.cycles`, `provenance.backend_end`, `verdict.reason_codes` (one stable
#                          `verdict.ReasonCode` per reason; a finding without them is verified by its prose).
#                          `runs[].target` (a time-to-target primary: its value and whether it was reached;
#                          a censored run has reached = false).
#                          `gate.time_to_target` (the preregistered quality target of such a primary).
#                          `runs[].warm_parent` (the pid of the warm parent a run was forked from).
#   gatekit.predecision/1  the preregistered rules; a sequential spec without `sequential_version` is v3.
#   gatekit.predecision/2  `decision.sequential_version` is stated for every sequential spec; the series'
#                          journal is gatekit.journal/3 or later.
#                          Later additions, absent = off: `rules.min_clock_share`, `rules.confirm_cycles`.
#                          `decision.duet_version` (a duet spec without it is duet v1: parity slots, OLS).
#                          `decision.time_to_target` (metric, target, direction), for a derived primary only.
#   gatekit.predecision/3  `decision.duet_version` is stated for every duet spec, as `sequential_version` is for
#                          every sequential one (a /2 duet spec without it is version 1).
#   gatekit.calibration/1  a `gate calibrate` result (calibration.toml): its runs' values, CV, warm-up, drift.
#   gatekit.signature/1    an Ed25519 signature of a finding's JSON bytes and its journal's chain head (<id>.sig).
#   gatekit.signature/2    the same of the finding's content (`content_sha256`: its canonical form, the same for
#                          both twins). A signature is never upgraded: each is checked as its version says.
#   gatekit.journal/1      one JSON event a line, no hash chain (no `prev`), no `schema`.
#   gatekit.journal/2      hash-chained: each line's `prev` is the sha256 of the line before it (the first
#                          line's: of the file its journal is anchored on, or of no bytes); no `schema`.
#   gatekit.journal/3      the first line names the format (`schema`), so an unchained journal cannot pass
#                          for one of this format; the events are those of /2.
#   gatekit.bisect/1       a bisect finding (bisect-finding.toml/.json): the culprit, its posterior and effect,
#                          every probe (gatekit.bisect.finding).
#   gatekit.bisect-plan/1  a bisect's preregistration (bisect-plan.toml): its bisect_start event's fields; the
#                          genesis of its journal.
#   gatekit.bisect-journal/1  the events of a bisect journal (bisect.jsonl, a gatekit.journal/3 chain), named by
#                          its bisect_start's `bisect_schema`: bisect_start, probe_start, probe_end, bisect_resume,
#                          bisect_stop (gatekit.bisect.records).
# A journal is one document: its first line names the format of every line after it (a journal continued
# by a later gatekit keeps its format).

SCHEMA_KEY = "schema"
FINDING_SCHEMA = "gatekit.finding/2"
PREDECISION_SCHEMA = "gatekit.predecision/3"
JOURNAL_SCHEMA = "gatekit.journal/3"
CALIBRATION_SCHEMA = "gatekit.calibration/1"
SIGNATURE_SCHEMA = "gatekit.signature/2"
SIGNATURE_OF_JSON_BYTES = "gatekit.signature/1"
BISECT_SCHEMA = "gatekit.bisect/1"
BISECT_PLAN_SCHEMA = "gatekit.bisect-plan/1"
BISECT_JOURNAL_SCHEMA = "gatekit.bisect-journal/1"
UNCHAINED_JOURNAL = "gatekit.journal/1"
CHAINED_JOURNAL_WITHOUT_SCHEMA = "gatekit.journal/2"
# a sequential predecision written before `sequential_version` existed preregistered version 3 (4, then 8 rounds)
UNRECORDED_SEQUENTIAL_VERSION = 3
# a duet predecision written before `duet_version` existed preregistered version 1 (parity slots, OLS)
UNRECORDED_DUET_VERSION = 1


# The narrative a /1 gatekit wrote (it had no `generated` mark): its lead, then these headings in this order, each
# with the blocks under it; sections people added came after them.
V1_NARRATIVE_HEADINGS = {"Runs (execution order)": ("table",), "Decision": ("kv", "callout"),
                         "Exclusion sensitivity": ("table",), "Backend evidence (rule i)": ("list",),
                         "Sequential looks": ("table",), "Diagnostics": ("kv",), "Warnings": ("list",)}


def _v1_generated_count(sections: list[Any]) -> int:
    """How many of a /1 finding's first sections its gatekit wrote (the lead and V1_NARRATIVE_HEADINGS' blocks)."""
    if not sections or not isinstance(sections[0], Mapping) or sections[0].get("type") != "lead":
        return 0
    count = 1
    for heading, blocks in V1_NARRATIVE_HEADINGS.items():
        shape = [("heading", heading), *((block, None) for block in blocks)]
        found = [(s.get("type"), s.get("text") if s.get("type") == "heading" else None)
                 for s in sections[count:count + len(shape)] if isinstance(s, Mapping)]
        if found == shape:
            count += len(shape)
    return count


def _finding_1_to_2(document: dict[str, Any]) -> dict[str, Any]:
    # /2 only added keys with defaults, and marks the sections gatekit wrote (`generated`), which a /1 file shows
    # by its narrative's fixed shape
    sections = document.get("sections")
    if not isinstance(sections, list):
        return document
    count = _v1_generated_count(sections)
    return {**document, "sections": [{**s, "generated": True} for s in sections[:count]] + sections[count:]}


def _predecision_1_to_2(document: dict[str, Any]) -> dict[str, Any]:
    decision = document.get("decision")
    if isinstance(decision, Mapping) and decision.get("policy") == "sequential":
        decision = {"sequential_version": UNRECORDED_SEQUENTIAL_VERSION, **decision}
        return {**document, "decision": decision}
    return document


def _predecision_2_to_3(document: dict[str, Any]) -> dict[str, Any]:
    decision = document.get("decision")
    if isinstance(decision, Mapping) and decision.get("policy") == "duet" and "duet_version" not in decision:
        return {**document, "decision": {**decision, "duet_version": UNRECORDED_DUET_VERSION}}
    return document


def _journal_1_to_2(event: dict[str, Any]) -> dict[str, Any]:
    return event  # the events are those of /2; only the chain is missing, and nothing can add it afterwards


def _journal_2_to_3(event: dict[str, Any]) -> dict[str, Any]:
    return event  # /3 only names its format in its first line


# schema -> (the next version, the function that turns a document, or a journal's event, into it)
UPGRADES: dict[str, tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "gatekit.finding/1": (FINDING_SCHEMA, _finding_1_to_2),
    "gatekit.predecision/1": ("gatekit.predecision/2", _predecision_1_to_2),
    "gatekit.predecision/2": (PREDECISION_SCHEMA, _predecision_2_to_3),
    UNCHAINED_JOURNAL: (CHAINED_JOURNAL_WITHOUT_SCHEMA, _journal_1_to_2),
    CHAINED_JOURNAL_WITHOUT_SCHEMA: (JOURNAL_SCHEMA, _journal_2_to_3),
}


# the journal format that comes with a predecision format: a gatekit that writes predecision/2 or later writes
# chained journals that name their format, so a series of that predecision with an older journal was downgraded.
# (predecision/1 came with journal/1 or /2: an unchained journal beside it may be honest, and is not evidence.)
JOURNAL_OF_PREDECISION: dict[str, str] = {"gatekit.predecision/2": JOURNAL_SCHEMA, PREDECISION_SCHEMA: JOURNAL_SCHEMA}


def upgrade(document: Mapping[str, Any], schema: object) -> dict[str, Any]:
    """`document` (or one event of a journal) of format `schema` (as the document names it, `schema_problem`
    having found it known), as the current version of its format."""
    upgraded = dict(document)
    while isinstance(schema, str) and schema in UPGRADES:
        schema, step = UPGRADES[schema]
        upgraded = step(upgraded)
    return upgraded


RecordT = TypeVar("RecordT", bound="Record")


def from_schema_document(cls: type[RecordT], data: Mapping[str, Any], schema: str, source: str,
                         error: Callable[[str], Exception]) -> RecordT:
    """A record from a document of the format `schema` (a format with no upgrades): its schema key checked,
    then left out; a wrong format or a malformed key raises `error` with a line naming `source`."""
    problem = schema_problem(data.get(SCHEMA_KEY), schema)
    if problem:
        raise error(f"{source}: {problem}")
    try:
        return cls.from_dict({k: v for k, v in data.items() if k != SCHEMA_KEY})
    except RecordError as exc:
        raise error(f"{source}: {exc}") from None


def schema_problem(schema: object, current: str) -> str | None:
    """Why a document that names `schema` cannot be read as the format `current` ("schema: … (why)"), or None."""
    if isinstance(schema, str) and _leads_to(schema, current):
        return None
    family = current.rpartition("/")[0]
    hint = ("written by a newer gatekit; upgrade gatekit to read it"
            if isinstance(schema, str) and schema.startswith(family + "/")
            else f"not a gatekit {family.rpartition('.')[2]}")
    return f"schema: {schema!r} is not {current!r} ({hint})"


def _leads_to(schema: str, current: str) -> bool:
    while schema in UPGRADES:
        schema = UPGRADES[schema][0]
    return schema == current


def journal_schema(first_event: Any) -> object:
    """The format of a journal, from its first event: the `schema` it names, else /2 or /1 by its `prev`.
    A first line that is not an event object is left to the chain's verification (as if chained)."""
    if not isinstance(first_event, Mapping):
        return JOURNAL_SCHEMA
    if SCHEMA_KEY in first_event:
        return first_event[SCHEMA_KEY]
    return CHAINED_JOURNAL_WITHOUT_SCHEMA if "prev" in first_event else UNCHAINED_JOURNAL

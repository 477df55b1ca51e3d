"""A trainer's quality trace and the time it takes to reach a quality target (DESIGN "Time to quality").

A result file's `trace` may hold a time axis — `elapsed_s` (seconds since training started), `step`, or both —
and beside it one or more quality series of the same length (`loss`, `psnr_db`, …): the quality measured at each
of those times. `quality_trace` checks what a trainer wrote (a bounded length, finite numbers, a time that never
goes back) and refuses anything else with a `TraceError` naming the key; the run then fails, as a run with a
broken result file does. Per-iteration series of their own length (`ms_per_iter`) and gatekit's own notes
(`gatekit_*`) are not quality series.

`primary = "time_to_target_s"` (or `"steps_to_target"`) decides on the first time of the trace at which the
gate's `[time_to_target]` metric reaches its target. A run that never reaches it is right-censored at its last
time: it counts, as "more than this long", and is never dropped (`TargetTime.reached` is False).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from gatekit.records import Record, RunOutcome

TIME_KEYS = ("elapsed_s", "step")  # a trace's time axis: seconds since training started, or the step count
NOT_QUALITY_KEYS = ("ms_per_iter",)  # per-iteration series, one value per step, of their own length
GATEKIT_TRACE_PREFIX = "gatekit_"  # notes gatekit adds to a trace (gatekit_dropped_metrics)
# A quality trace is evaluated every so many steps: 100 000 points is 10^6 steps evaluated every ten, and bounds
# the work of every reader of the journal (the result file itself is bounded by gatekit.runfiles).
MAX_TRACE_POINTS = 100_000
# the derived primaries and the time axis each reads
DERIVED_PRIMARIES = {"time_to_target_s": "elapsed_s", "steps_to_target": "step"}
DIRECTIONS = ("lower", "higher")


class TraceError(ValueError):
    """A result file's quality trace breaks the trainer contract; the message names the key."""


@dataclass(frozen=True, slots=True)
class QualityTrace:
    """A trace's time axes (elapsed_s, step or both) and its quality series, all of one length."""

    axes: Mapping[str, tuple[float, ...]]
    series: Mapping[str, tuple[float, ...]]


def _numbers(trace: Mapping[str, Any], key: str) -> tuple[float, ...]:
    values = trace[key]
    if not isinstance(values, list):
        raise TraceError(f"trace.{key}: must be a list of numbers, got {type(values).__name__}")
    if len(values) > MAX_TRACE_POINTS:
        raise TraceError(f"trace.{key}: holds {len(values)} points, more than {MAX_TRACE_POINTS}")
    numbers = []
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise TraceError(f"trace.{key}[{index}]: must be a finite number, got {value!r}")
        numbers.append(float(value))
    return tuple(numbers)


def quality_trace(trace: Mapping[str, Any]) -> QualityTrace | None:
    """The quality trace a result's `trace` holds; None when it has no time axis. Raises TraceError when the trace
    breaks the contract: a time that is negative or goes back, a series or axis of another length, a value that is
    not a finite number, or more than MAX_TRACE_POINTS points."""
    names = [key for key in TIME_KEYS if key in trace]
    if not names:
        return None
    axes = {}
    for key in names:
        times = _numbers(trace, key)
        if not times:
            raise TraceError(f"trace.{key}: is empty")
        if times[0] < 0:
            raise TraceError(f"trace.{key}[0]: must not be negative, got {times[0]:g}")
        for index in range(1, len(times)):
            if times[index] < times[index - 1]:
                raise TraceError(f"trace.{key}[{index}]: goes back in time ({times[index]:g} after "
                                 f"{times[index - 1]:g}); the time axis must never decrease")
        axes[key] = times
    first = names[0]
    length = len(axes[first])
    series = {}
    for key in trace:
        if key == first or key in NOT_QUALITY_KEYS or key.startswith(GATEKIT_TRACE_PREFIX):
            continue
        values = axes[key] if key in axes else _numbers(trace, key)
        if len(values) != length:
            raise TraceError(f"trace.{key}: holds {len(values)} values but trace.{first} holds {length}; "
                             "a quality series has one value per time")
        if key not in axes:
            series[key] = values
    if not series:
        raise TraceError(f"trace: has trace.{first} but no quality series beside it (e.g. trace.loss)")
    return QualityTrace(axes, series)


def trace_problem(trace: Mapping[str, Any]) -> str:
    """Why a result's trace breaks the trainer contract ('' when it does not)."""
    try:
        quality_trace(trace)
    except TraceError as exc:
        return str(exc)
    return ""


@dataclass(frozen=True, slots=True)
class TargetSpec(Record):
    """The gate file's [time_to_target] table: reached when `metric` is at `target` or better."""

    metric: str
    target: float
    direction: str = field(default="lower", metadata={"choices": DIRECTIONS})  # lower: reached when metric <= target

    def reached_by(self, value: float) -> bool:
        return value <= self.target if self.direction == "lower" else value >= self.target


@dataclass(frozen=True, slots=True)
class TargetTime(Record):
    """When a run reached its target: `value` (seconds or steps) is the first trace time at which it had, or, when
    it never did (`reached` False), the trace's last time — a right-censored observation: "longer than this"."""

    value: float
    reached: bool


def time_to_target(trace: Mapping[str, Any], primary: str, target: TargetSpec) -> TargetTime:
    """A run's time (primary time_to_target_s) or steps (steps_to_target) to `target`, reached or censored.
    Raises TraceError when the trace lacks the axis the primary reads or the target's metric."""
    axis = DERIVED_PRIMARIES[primary]
    quality = quality_trace(trace)
    if quality is None or axis not in quality.axes:
        raise TraceError(f"trace.{axis}: is missing; primary = \"{primary}\" reads the trace's {axis} axis")
    if target.metric not in quality.series:
        raise TraceError(f"trace.{target.metric}: is missing; [time_to_target] metric = \"{target.metric}\" names "
                         "a quality series the result's trace must hold")
    times = quality.axes[axis]
    for time, value in zip(times, quality.series[target.metric]):
        if target.reached_by(value):
            return TargetTime(value=time, reached=True)
    return TargetTime(value=times[-1], reached=False)


def stated_target(primary: str, target: TargetSpec) -> str:
    """The preregistered target rule in words."""
    axis = DERIVED_PRIMARIES[primary]
    sign = "<=" if target.direction == "lower" else ">="
    return (f"Time to target: {primary} = the first trace.{axis} at which trace.{target.metric} {sign} "
            f"{target.target:g}; a run that never reaches it is right-censored at its last trace.{axis} (it counts "
            "as 'longer than that', is never dropped and never a failure); a run whose trace lacks either series "
            "fails.")


def with_derived_primary(outcome: RunOutcome, primary: str, target: TargetSpec | None) -> RunOutcome:
    """A run's outcome with its derived primary among its metrics (gatekit's, whatever the trainer reported under
    that name): the time or steps to `target`, or its censoring time. A run that failed stays as it was; a trace
    without what the primary reads fails the run. Any other primary: the outcome unchanged."""
    if target is None or primary not in DERIVED_PRIMARIES or outcome.error:
        return outcome
    try:
        reached = time_to_target(outcome.trace, primary, target)
    except TraceError as exc:
        return replace(outcome, error=f"result {exc}")
    return replace(outcome, metrics={**outcome.metrics, primary: reached.value})


def target_of(outcome: RunOutcome, primary: str, target: TargetSpec | None) -> TargetTime | None:
    """The run's time to target, reached or censored; None for another primary or a run without a usable trace."""
    if target is None or primary not in DERIVED_PRIMARIES or outcome.error:
        return None
    try:
        return time_to_target(outcome.trace, primary, target)
    except TraceError:
        return None

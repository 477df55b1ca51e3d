"""The decision and its reasons, from Δ, the threshold, the guards and what invalidated the series."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from gatekit import stats
from gatekit.config import GuardSpec
from gatekit.records import Record

DECISIONS = ("adopted", "rejected", "regression", "guard_failed", "invalid", "equivalent", "inconclusive")


@dataclass(frozen=True, slots=True)
class GuardResult(Record):
    """A quality guard evaluated on the used runs: delta = mean_on − mean_off (absolute units)."""

    metric: str
    direction: str
    off_mean: float | None
    on_mean: float | None
    delta: float | None
    limit: float
    passed: bool
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"metric": self.metric, "direction": self.direction, "off_mean": self.off_mean,
                "on_mean": self.on_mean, "delta": self.delta, "limit": self.limit, "pass": self.passed,
                "note": self.note}


def evaluate_guard(spec: GuardSpec, off_values: Sequence[float], on_values: Sequence[float]) -> GuardResult:
    """On may be worse than off by at most max_drop: higher-is-better needs on − off ≥ −max_drop."""
    limit = -spec.max_drop if spec.direction == "higher" else spec.max_drop
    if not off_values or not on_values:
        return GuardResult(spec.metric, spec.direction, None, None, None, limit, False,
                           "metric missing from the used runs: the guard cannot be evaluated")
    off_mean, on_mean = stats.mean(off_values), stats.mean(on_values)
    delta = on_mean - off_mean
    passed = delta >= limit if spec.direction == "higher" else delta <= limit
    return GuardResult(spec.metric, spec.direction, off_mean, on_mean, delta, limit, passed)


@dataclass(frozen=True, slots=True)
class Verdict(Record):
    decision: str
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


def decide(*, delta_pct: float, threshold_pct: float, direction: str, primary: str,
           guards: Sequence[GuardResult], invalid_reasons: Sequence[str], warnings: Sequence[str]) -> Verdict:
    """Adopt iff Δ clears the threshold in the right direction AND every guard holds.

    Precedence: invalid > regression > guard_failed > adopted | rejected — a quality loss is never
    hidden behind a time regression's label, both reasons are listed.
    """
    if invalid_reasons:
        return Verdict("invalid", tuple(invalid_reasons), tuple(warnings))
    if math.isnan(delta_pct):
        return Verdict("invalid", ("no usable runs in one of the arms",), tuple(warnings))
    better = "lower" if direction == "lower" else "higher"
    improvement = -delta_pct if direction == "lower" else delta_pct
    failed_guards = [g for g in guards if not g.passed]
    reasons = []
    if improvement >= threshold_pct:
        decision = "adopted"
        reasons.append(f"{primary} Δ {delta_pct:+.4f} % clears the threshold ±{threshold_pct:.4f} % "
                       f"({better} is better)")
    elif improvement <= -threshold_pct:
        decision = "regression"
        reasons.append(f"{primary} Δ {delta_pct:+.4f} % is beyond the threshold ±{threshold_pct:.4f} % "
                       f"in the wrong direction ({better} is better)")
    else:
        decision = "rejected"
        reasons.append(f"{primary} Δ {delta_pct:+.4f} % is within the threshold ±{threshold_pct:.4f} %")
    for guard in guards:
        if guard.passed:
            reasons.append(f"guard {guard.metric}: Δ {guard.delta:+.4f} within limit {guard.limit:+g}")
        elif guard.delta is None:
            reasons.append(f"guard {guard.metric} failed: {guard.note}")
        else:
            reasons.append(f"guard {guard.metric} failed: Δ {guard.delta:+.4f} beyond limit {guard.limit:+g}")
    if failed_guards and decision != "regression":
        decision = "guard_failed"
    return Verdict(decision, tuple(reasons), tuple(warnings))

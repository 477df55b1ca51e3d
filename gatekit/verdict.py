"""The decision: its names and what each means, the classic rule (written once, vectorised), guards, verdict."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from gatekit import stats
from gatekit.config import GuardSpec
from gatekit.records import Record


class Decision(enum.StrEnum):
    """A gate's outcome. Each decision owns its name, its polarity (meta.polarity), its severity (how a
    report shows it) and whether CI counts it as a failure. It is a str: `decision == "adopted"` holds."""

    ADOPTED = "adopted"
    REJECTED = "rejected"
    REGRESSION = "regression"
    GUARD_FAILED = "guard_failed"
    INVALID = "invalid"
    EQUIVALENT = "equivalent"
    INCONCLUSIVE = "inconclusive"

    @property
    def polarity(self) -> str:
        return _POLARITY[self]

    @property
    def severity(self) -> str:
        """success | info | danger | warning: the callout variant a report gives it."""
        return _SEVERITY[self]

    @property
    def failing(self) -> bool:
        """A failed check in CI outputs (JUnit, step summary): a regression, a failed guard, an invalid series."""
        return self in (Decision.REGRESSION, Decision.GUARD_FAILED, Decision.INVALID)

    @property
    def untold(self) -> bool:
        """The series could not tell (inconclusive): neither a pass nor a failure, a skipped check in JUnit."""
        return self is Decision.INCONCLUSIVE


_POLARITY = {Decision.ADOPTED: "positive", Decision.REJECTED: "neutral", Decision.REGRESSION: "negative",
             Decision.GUARD_FAILED: "negative", Decision.INVALID: "invalid", Decision.EQUIVALENT: "neutral",
             Decision.INCONCLUSIVE: "neutral"}
# inconclusive is a warning, never shown like a plain rejection: the series could not tell
_SEVERITY = {Decision.ADOPTED: "success", Decision.REJECTED: "info", Decision.REGRESSION: "danger",
             Decision.GUARD_FAILED: "danger", Decision.INVALID: "warning", Decision.EQUIVALENT: "info",
             Decision.INCONCLUSIVE: "warning"}
DECISIONS = tuple(d.value for d in Decision)


def decision_words(decision: Decision) -> str:
    """A decision as a reader scans for it: `guard_failed` → `GUARD FAILED`."""
    return decision.value.replace("_", " ").upper()

# Outcome codes of the vectorised rules (`gate simulate` decides 100 000 gates at once with them).
CONTINUE, ADOPTED, REGRESSION, EQUIVALENT, REJECTED, INCONCLUSIVE = range(6)
CODE_NAMES = {CONTINUE: "continue", ADOPTED: "adopted", REGRESSION: "regression", EQUIVALENT: "equivalent",
              REJECTED: "rejected", INCONCLUSIVE: "inconclusive"}


def classic_codes(delta_pct: np.ndarray | float, threshold_pct: np.ndarray | float, direction: str,
                  max_threshold_pct: float = 0.0) -> np.ndarray:
    """The classic rule (DESIGN step 6), for any number of gates at once: adopted iff Δ clears the threshold
    in the better direction, regression iff it clears it in the other, else rejected — or inconclusive where
    the threshold exceeds `max_threshold_pct` (> 0): too noisy to tell."""
    delta, threshold = np.asarray(delta_pct, float), np.asarray(threshold_pct, float)
    improvement = -delta if direction == "lower" else delta
    too_noisy = threshold > max_threshold_pct if max_threshold_pct > 0 else np.zeros(threshold.shape, bool)
    return np.select([improvement >= threshold, improvement <= -threshold, too_noisy],
                     [ADOPTED, REGRESSION, INCONCLUSIVE], default=REJECTED)


def classic_decision(delta_pct: float, threshold_pct: float, direction: str,
                     max_threshold_pct: float = 0.0) -> Decision:
    """The classic rule for one gate, from Δ and the threshold alone (no guards); NaN Δ is invalid."""
    if math.isnan(delta_pct):
        return Decision.INVALID
    return Decision(CODE_NAMES[int(classic_codes(delta_pct, threshold_pct, direction, max_threshold_pct))])


class ReasonCode(enum.StrEnum):
    """What a verdict's reason says, as a stable code stored beside its prose (`verdict.reason_codes`).
    The prose is rendered from the code and the series' figures; a later gatekit may word it otherwise, the
    code stays. `gate verify` compares the codes with the recomputation's, then each reason's prose with what
    its code renders to from the recomputed series. Never rename a value: add one."""

    # the classic rule (decide) and its guards
    CLEARS_THRESHOLD = "clears_threshold"  # adopted: Δ beyond the threshold, the better way
    BEYOND_THRESHOLD_WORSE = "beyond_threshold_worse"  # regression: beyond it, the worse way
    WITHIN_THRESHOLD = "within_threshold"  # rejected
    THRESHOLD_ABOVE_MAX = "threshold_above_max"  # inconclusive: within a threshold above rules.max_threshold_pct
    TOO_NOISY = "too_noisy"  # the smallest effect the series could have seen
    GUARD_HELD = "guard_held"
    GUARD_BEYOND_LIMIT = "guard_beyond_limit"
    GUARD_MISSING = "guard_missing"  # the guard's metric is missing from the used runs
    NO_USABLE_RUNS = "no_usable_runs"
    # why a series is invalid
    RUN_NOT_REPLACED = "run_not_replaced"  # a failed or flagged run whose pair has no retry left
    IMPORTED_RUN_FAILED = "imported_run_failed"  # a failed run of another tool's, which cannot be run again
    NO_WINDOW_SAMPLES = "no_window_samples"
    CONFIG_DIFFERS_IN_ARM = "config_differs_in_arm"
    CONFIG_UNDECLARED_DIFFERENCE = "config_undeclared_difference"
    CONFIG_FLAG_NOT_DIFFERING = "config_flag_not_differing"
    TOO_FEW_USED = "too_few_used_runs"
    SERIES_INVALIDATED = "series_invalidated"  # journaled as invalid while it ran (`invalid` event)
    ARTIFACT_CHANGED = "artifact_changed"
    BACKEND_CHANGED = "backend_changed"
    IMPORTED_ZERO_TIMES = "imported_zero_times"
    EVIDENCE_INVALID = "evidence_invalid"  # a cause the evidence gave that has no code of its own
    # after a verdict that could not decide; confirmation in cycles
    NEXT_STEP = "next_step"
    NOT_CONFIRMED_IN_CYCLES = "not_confirmed_in_cycles"
    # the paired policies (sequential, duet)
    FLAGGED_NOT_REPLACED = "flagged_not_replaced"  # flagged by telemetry, no replacement left
    LOOK = "look"  # a sequential look: its estimate, interval and outcome
    EARLY_STOP = "early_stop"
    NO_NEXT_LOOK = "no_next_look"
    NEXT_LOOK = "next_look"
    TWO_SPEED_STATES = "two_speed_states"  # v5's state check: runs in two speed states, taken out or undecided
    STAGE_MISSING = "stage_missing"
    DUET_ESTIMATE = "duet_estimate"
    DUET_SLOT_EFFECT = "duet_slot_effect"
    DUET_TOO_FEW_PAIRS = "duet_too_few_pairs"
    PAIRED_GUARD = "paired_guard"
    GUARD_BOUND_TOO_WIDE = "guard_bound_too_wide"
    CLASSIC_BESIDE = "classic_beside"  # the classic verdict, reported beside a policy that decides otherwise
    # the censored policy (a time to target)
    AFT_ESTIMATE = "aft_estimate"  # the time ratio of the censored fit, its interval and outcome
    TOO_CENSORED = "too_censored"  # too many runs never reached the target to fit their times
    RANK_ESTIMATE = "rank_estimate"  # the robust policy's Hodges–Lehmann shift, its interval and outcome
    CAMPAIGN_FDR = "campaign_fdr"  # a campaign's false-discovery control withdrew the gate's own decision
    BISECT_PROBE = "bisect_probe"  # one run per arm of a `gate bisect` probe: the bisect's posterior reads it


class Reason(str):
    """One reason of a verdict: its prose (the string itself, which is what every reader shows) and the
    stable code of what it says (`code`). A Verdict made of Reasons stores their codes beside the prose."""

    code: ReasonCode

    def __new__(cls, code: ReasonCode, text: str) -> Reason:
        reason = super().__new__(cls, text)
        reason.code = ReasonCode(code)
        return reason

    def __getnewargs__(self) -> tuple[str, str]:  # type: ignore[override]  # pickled (a Ray worker's verdict) with its code: str's takes the text alone
        return self.code.value, str(self)


def coded(code: ReasonCode, text: str) -> Reason:
    """`text` as a reason of kind `code` (an already coded reason keeps its own code)."""
    return text if isinstance(text, Reason) else Reason(code, text)


def too_noisy_reason(smallest_pct: float, mde_pct: float | None = None, basis: str = "the threshold") -> Reason:
    """Why a series that could not have seen the effect is inconclusive (every policy): the smallest effect it
    could have detected and what that is (`basis`: the classic threshold, a paired policy's half interval)."""
    mde = f"; its minimum detectable effect was {mde_pct:.4g} %" if mde_pct is not None and math.isfinite(mde_pct) \
        else ""
    return Reason(ReasonCode.TOO_NOISY, f"too noisy to tell: this series could not have detected an effect smaller "
                                        f"than {smallest_pct:.4g} % ({basis}){mde}")


# What to do after a verdict that could not decide: the words every policy's inconclusive or invalid verdict ends
# with, so a reader is never left with "inconclusive" alone.
QUIETER_MACHINE = ("run the gate again when the machine is quieter, or on another machine (`gate check` shows "
                   "its load and CPU pressure now)")
MORE_RUNS = ("`gate calibrate` measures this machine's noise and `gate plan` the runs per arm that noise needs; "
             "run again with that `--n`")


# A `gate bisect` probe of one run per arm (gate.bisect_probe) has no σ of its own: it is a measurement the
# bisect's posterior reads with every other pair of the bisect (which estimates the noise from all of them).
BISECT_PROBE = ("one run per arm: a bisect probe, read by the bisect's posterior (which estimates the noise from "
                "every pair of the bisect), not decided here")


NEXT_STEP = "next step: "
TOO_FEW_USED = "fewer than two used runs in an arm"


def without_explanations(reasons: Sequence[str]) -> tuple[str, ...]:
    """The reasons as gatekit wrote them before verdicts explained themselves (no `next step:` reason, no
    cause after "fewer than two used runs in an arm (off 0, on 0)"): the same decision for the same reasons,
    so `gate verify` compares a finding written then with its recomputation now in these words."""
    return tuple(reason.split("): ", 1)[0] + ")" if reason.startswith(TOO_FEW_USED) and "): " in reason
                 else reason for reason in reasons if not reason.startswith(NEXT_STEP))


# Warnings later versions no longer give, with where they went: "rule (ii) cannot fire" is in the predecision and
# the report's rules section now. A finding written with one still verifies.
RETIRED_WARNINGS = ("rule (ii) cannot fire",)


def without_retired_warnings(warnings: Sequence[str]) -> tuple[str, ...]:
    """A finding's warnings less those this version no longer gives (RETIRED_WARNINGS)."""
    return tuple(w for w in warnings if not w.startswith(RETIRED_WARNINGS))


def next_step(decision: Decision, *, busy: bool) -> Reason | None:
    """The last reason of a verdict that could not decide: what to try next; `busy` when runs were flagged by
    load or pressure evidence. None for a decided verdict, and for an invalid one whose cause is not the
    machine (its own reasons say what to fix: the trainer, a changed file, a missing window)."""
    if decision is Decision.INCONCLUSIVE:
        return Reason(ReasonCode.NEXT_STEP, f"{NEXT_STEP}{MORE_RUNS}" + (f"; or {QUIETER_MACHINE}" if busy else ""))
    if decision is Decision.INVALID and busy:
        return Reason(ReasonCode.NEXT_STEP, f"{NEXT_STEP}{QUIETER_MACHINE}; {MORE_RUNS}")
    return None


@dataclass(frozen=True, slots=True)
class GuardResult(Record):
    """A quality guard evaluated on the used runs: delta = mean_on − mean_off (absolute units)."""

    metric: str
    direction: str
    off_mean: float | None
    on_mean: float | None
    delta: float | None
    limit: float
    passed: bool = field(metadata={"key": "pass"})
    note: str = ""


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
    """The decision, its reasons (prose, in order) and their codes (`ReasonCode` values, one per reason; none
    in a finding written before reasons had codes), and the warnings. Made from `Reason`s, the codes are
    theirs; read from a document, they are what it stores (a code this gatekit does not know stays a string)."""

    decision: Decision
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    reason_codes: tuple[str, ...] = field(default=(), metadata={"omit": ()})

    def __post_init__(self) -> None:
        if self.reasons and all(isinstance(reason, Reason) for reason in self.reasons):
            object.__setattr__(self, "reason_codes", tuple(reason.code.value for reason in self.reasons
                                                             if isinstance(reason, Reason)))


def decide(*, delta_pct: float, threshold_pct: float, direction: str, primary: str,
           guards: Sequence[GuardResult], invalid_reasons: Sequence[str], warnings: Sequence[str],
           max_threshold_pct: float = 0.0, mde_pct: float | None = None) -> Verdict:
    """Adopt iff Δ clears the threshold in the right direction AND every guard holds.

    Precedence: invalid > regression > guard_failed > adopted | rejected | inconclusive — a quality loss is
    never hidden behind a time regression's label, both reasons are listed. Inconclusive: what would be
    rejected with a threshold above `max_threshold_pct`, which no plausible effect could clear.
    """
    if invalid_reasons:  # a cause the evidence gave without a code of its own is still one reason
        return Verdict(Decision.INVALID, tuple(coded(ReasonCode.EVIDENCE_INVALID, r) for r in invalid_reasons),
                       tuple(warnings))
    if math.isnan(delta_pct):
        return Verdict(Decision.INVALID, (Reason(ReasonCode.NO_USABLE_RUNS, "no usable runs in one of the arms"),),
                       tuple(warnings))
    better = "lower" if direction == "lower" else "higher"
    decision = classic_decision(delta_pct, threshold_pct, direction, max_threshold_pct)
    reasons = [too_noisy_reason(threshold_pct, mde_pct)] if decision is Decision.INCONCLUSIVE else []
    reasons += [Reason(*{
        Decision.ADOPTED: (ReasonCode.CLEARS_THRESHOLD, f"{primary} Δ {delta_pct:+.4f} % clears the threshold "
                                                        f"±{threshold_pct:.4f} % ({better} is better)"),
        Decision.REGRESSION: (ReasonCode.BEYOND_THRESHOLD_WORSE, f"{primary} Δ {delta_pct:+.4f} % is beyond the "
                              f"threshold ±{threshold_pct:.4f} % in the wrong direction ({better} is better)"),
        Decision.REJECTED: (ReasonCode.WITHIN_THRESHOLD, f"{primary} Δ {delta_pct:+.4f} % is within the threshold "
                                                         f"±{threshold_pct:.4f} %"),
        Decision.INCONCLUSIVE: (ReasonCode.THRESHOLD_ABOVE_MAX, f"{primary} Δ {delta_pct:+.4f} % is within the "
                                f"threshold ±{threshold_pct:.4f} %, which is above rules.max_threshold_pct = "
                                f"{max_threshold_pct:g} %"),
    }[decision])]
    for guard in guards:
        if guard.passed:
            reasons.append(Reason(ReasonCode.GUARD_HELD,
                                  f"guard {guard.metric}: Δ {guard.delta:+.4f} within limit {guard.limit:+g}"))
        elif guard.delta is None:
            reasons.append(Reason(ReasonCode.GUARD_MISSING, f"guard {guard.metric} failed: {guard.note}"))
        else:
            reasons.append(Reason(ReasonCode.GUARD_BEYOND_LIMIT, f"guard {guard.metric} failed: Δ {guard.delta:+.4f} "
                                                                 f"beyond limit {guard.limit:+g}"))
    if any(not g.passed for g in guards) and decision is not Decision.REGRESSION:
        decision = Decision.GUARD_FAILED
    return Verdict(decision, tuple(reasons), tuple(warnings))

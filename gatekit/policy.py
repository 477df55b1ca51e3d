"""Decision policies behind one protocol. Adding a policy touches this file (and its statistics module).

A policy owns everything that differs between ways of deciding: the rules it states in the predecision
file, how it classifies runs (contamination) and which pairs it re-runs, whether a series extends after a
look, the decision itself, the warnings about its own evidence, and its vectorised form for `gate simulate`.
Everything the policies share (the run table, the classic figures, guards, diagnostics, the finding) is in
`gatekit.analysis`, which asks the policy object — never compares policy names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd

from gatekit import diagnostics, rules, sequential
from gatekit.config import POLICIES, SEQUENTIAL_ORDER, SEQUENTIAL_RUNS, RulesSpec, ThresholdSpec
from gatekit.finding import SensitivityRow, SequentialInfo
from gatekit.records import RunRecord
from gatekit.verdict import CONTINUE, Decision, Verdict, classic_codes

Flagged = Mapping[str, Mapping[str, object]]  # run label -> {contaminated, z, detail}


@dataclass(frozen=True, slots=True)
class Retry:
    """A pair to re-run: the round it replaces, what flagged its runs, and which arm goes first (None: the
    schedule's usual order)."""

    replaces: int
    flagged: Flagged
    first: str | None = None
    reason_suffix: str = ""


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a policy's warnings look at: the classic figures of the used runs and the series' context."""

    order: str
    direction: str
    n_off: int
    max_z: float | None  # the largest |z| rule (ii) can see at this n (Samuelson); None: σ not from the arm
    sigma_k: float
    sigma_off_pct: float
    sigma_on_pct: float
    delta_pct: float
    threshold_pct: float
    diagnostics: diagnostics.Diagnostics
    sensitivity: Sequence[SensitivityRow]
    guard_warnings: Sequence[str]  # guards decided inside their own noise
    invalid: bool
    cores: int | None


@dataclass(frozen=True, slots=True)
class Decided:
    """A policy's decision: the verdict, the sequential looks (None for a fixed-n policy), and whether the
    series must extend before it can decide."""

    verdict: Verdict
    sequential: SequentialInfo | None = None
    extend: bool = False


class Policy(Protocol):
    name: str
    default_order: str

    def max_rounds(self, n: int) -> int:
        """Runs per arm at most, for a gate file's n."""
        ...

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        """The policy's own rules in words, for the predecision file."""
        ...

    def classify(self, runs: pd.DataFrame, rules_spec: RulesSpec, replaced: Mapping[int, rules.Replacement],
                 cores: int | None) -> pd.DataFrame:
        """The run table with `replaced, missing_window, load_evidence, z, contaminated, reason, used`."""
        ...

    def retries(self, classified: pd.DataFrame, rules_spec: RulesSpec, off_arm: str, on_arm: str) -> list[Retry]:
        """Pairs that must be re-run (before the max_retries budget is applied)."""
        ...

    def unresolved(self, classified: pd.DataFrame) -> pd.Series:
        """Runs whose problem, left without a retry, makes the series invalid."""
        ...

    def warnings(self, evidence: Evidence) -> list[str]:
        """Warnings about this policy's evidence."""
        ...

    def decide(self, classic: Verdict, classified: pd.DataFrame, records: Sequence[RunRecord], *, off_arm: str,
               on_arm: str, primary: str, direction: str, guards: Sequence[Any], floor_pct: float,
               warnings: Sequence[str]) -> Decided:
        """The decision, given the classic verdict the shared analysis computed."""
        ...

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec
                 ) -> tuple[np.ndarray, np.ndarray]:
        """Outcome codes and runs per arm of many simulated gates at once (lower is better)."""
        ...


class ClassicPolicy:
    """The team's rule (DESIGN step 6): Δ against max(k·σ_off, floor), contamination = load evidence AND
    deviation beyond sigma_k, a contaminated or failed pair re-run once."""

    name = "classic"
    default_order = "abab"

    def max_rounds(self, n: int) -> int:
        return n

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        return []  # the classic rules are the predecision's common rules

    def classify(self, runs: pd.DataFrame, rules_spec: RulesSpec, replaced: Mapping[int, rules.Replacement],
                 cores: int | None) -> pd.DataFrame:
        return rules.classify(runs, rules_spec, replaced)

    def retries(self, classified: pd.DataFrame, rules_spec: RulesSpec, off_arm: str, on_arm: str) -> list[Retry]:
        return [Retry(round_, flagged) for round_, flagged in rules.rounds_needing_retry(classified, rules_spec).items()]

    def unresolved(self, classified: pd.DataFrame) -> pd.Series:
        return ~classified["replaced"] & (classified["failed"] | classified["contaminated"])

    def warnings(self, evidence: Evidence) -> list[str]:
        found: list[str] = []
        if evidence.max_z is not None and evidence.max_z < evidence.sigma_k:
            found.append(f"rule (ii) cannot fire: at n={evidence.n_off} no run can be more than {evidence.max_z:.3f}σ "
                         f"from its own arm's mean (Samuelson bound (n−1)/√n), below sigma_k = {evidence.sigma_k:g}; "
                         "contamination retries are effectively disabled")
        flips = [row.variant for row in evidence.sensitivity[1:] if row.decision != evidence.sensitivity[0].decision]
        if flips and not evidence.invalid:
            found.append("the decision is sensitive to single runs: it changes when you " + "; ".join(flips))
        found += diagnostics.classic_warnings(
            evidence.diagnostics, order=evidence.order, direction=evidence.direction,
            sigma_off_pct=evidence.sigma_off_pct, sigma_on_pct=evidence.sigma_on_pct,
            delta_pct=evidence.delta_pct, threshold_pct=evidence.threshold_pct)
        return found + list(evidence.guard_warnings)

    def decide(self, classic: Verdict, classified: pd.DataFrame, records: Sequence[RunRecord], *, off_arm: str,
               on_arm: str, primary: str, direction: str, guards: Sequence[Any], floor_pct: float,
               warnings: Sequence[str]) -> Decided:
        return Decided(classic)

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The classic rule on arithmetic means, vectorised: the same stats.threshold_pct and
        verdict.classic_codes a gate runs."""
        off, on = np.exp(off_log), np.exp(on_log)
        mean_off, mean_on = off.mean(axis=-1), on.mean(axis=-1)
        if off.shape[-1] > 1:
            sigma_off_pct = 100 * off.std(axis=-1, ddof=1) / mean_off
            threshold = np.maximum(thresholds.sigma_k * sigma_off_pct, thresholds.floor_pct)
        else:
            threshold = np.full(mean_off.shape, thresholds.floor_pct)
        delta = 100 * (mean_on - mean_off) / mean_off
        return classic_codes(delta, threshold, "lower"), np.full(off.shape[0], off.shape[-1])


class SequentialPolicy:
    """Two looks (4, then 8 runs per arm, Thue–Morse order) on the AB/BA pair differences: a robust estimate,
    a calibrated Pocock boundary, equivalence, group-sequential paired guards, telemetry-only contamination
    (gatekit.sequential holds its statistics)."""

    name = "sequential"
    default_order = SEQUENTIAL_ORDER

    def max_rounds(self, n: int) -> int:
        return SEQUENTIAL_RUNS[1]

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        first, last = SEQUENTIAL_RUNS
        floor, alpha, level = threshold.floor_pct, sequential.ALPHA, sequential.GUARD_LEVEL
        c1, c2 = sequential.CRITICAL
        return [
            f"Policy sequential: look 1 after {first} runs per arm, look 2 after {last}; stop at the first look "
            "that decides. The classic Delta and threshold are reported beside it and decide nothing.",
            f"At each look: the rounds' pair differences d = ln(on) - ln(off) (each round an adjacent AB or BA "
            f"pair; the Thue-Morse order balances them, so a linear drift cancels from the centre); estimate HL = "
            f"Hodges-Lehmann median of the Walsh averages of d, scale S = mean(min(|d - median d|, "
            f"{sequential.SCALE_CAP:g} median|d - median d|)) / sqrt(n). Adopted iff "
            f"HL/S is beyond c = {c1:g} (look 1), {c2:g} (look 2) on the better side (a Pocock "
            f"boundary calibrated by simulation to {100 * sequential.CALIBRATION_ALPHA:g} % under normal noise: "
            f"one-sided alpha at most {alpha:g} over both looks) AND HL is at least {floor:g} % better AND every guard "
            f"passes. Regression iff HL/S is beyond c on the worse side AND at least "
            f"{floor:g} % worse.",
            f"Equivalent iff HL +/- c S lies inside +/-{floor:g} %. Rejected iff that interval "
            f"excludes an improvement of {floor:g} % (stops look 1 too). At look 2 anything else is inconclusive.",
            f"Guards: paired non-inferiority on the rounds' (off, on) pairs: pass iff the one-sided "
            f"{100 * level:.3f} % t bound of mean(on - off) clears -max_drop (+max_drop for lower-is-better "
            f"guards); that per-look level holds a false pass to {100 * sequential.CALIBRATION_ALPHA:g} % over both "
            "looks when the true drop equals the limit. Fail iff the opposite "
            "bound is beyond it; otherwise the guard is inconclusive and an adoption waits for look 2, then "
            "becomes inconclusive — never a pass.",
            f"Contamination only from telemetry that does not look at the result: the load evidence of "
            f"rules.evidence = {rules_spec.evidence} (load1: the window's {rules_spec.load_stat} of load1 per core "
            f"above {rules_spec.load_per_core_limit:g}; psi and steal: see the common rules, with that load1 rule "
            "where a window did not record them), the backend's evidence, or the machine on battery. A flagged run's pair is re-run once at the end of its stage in the mirror order; "
            f"needing more than {rules_spec.max_retries} re-run(s) for a pair makes the outcome inconclusive.",
        ]

    def classify(self, runs: pd.DataFrame, rules_spec: RulesSpec, replaced: Mapping[int, rules.Replacement],
                 cores: int | None) -> pd.DataFrame:
        return sequential.classify(runs, rules_spec, replaced, cores)

    def retries(self, classified: pd.DataFrame, rules_spec: RulesSpec, off_arm: str, on_arm: str) -> list[Retry]:
        # in the mirror slot: the arm that ran second goes first
        return [Retry(round_, flagged, sequential.mirror_first(classified, round_, off_arm, on_arm),
                      " in the mirror order")
                for round_, flagged in sequential.rounds_needing_replacement(classified).items()]

    def unresolved(self, classified: pd.DataFrame) -> pd.Series:
        # a run flagged twice makes the outcome inconclusive (the decision says so); a failure stays invalid
        return ~classified["replaced"] & classified["failed"]

    def warnings(self, evidence: Evidence) -> list[str]:
        if not evidence.cores:
            return ["the host's CPU count is unknown, so load per core cannot flag runs"]
        return []

    def decide(self, classic: Verdict, classified: pd.DataFrame, records: Sequence[RunRecord], *, off_arm: str,
               on_arm: str, primary: str, direction: str, guards: Sequence[Any], floor_pct: float,
               warnings: Sequence[str]) -> Decided:
        """The sequential looks decide; the classic verdict is reported beside it as one reason."""
        by_label = {r.label: r for r in records}
        guard_values = {g.metric: {label: value for label in classified["label"]
                                   if (value := by_label[label].value_of(g.metric)) is not None}
                        for g in guards}
        outcome = sequential.decide(classified, guard_values, off_arm=off_arm, on_arm=on_arm, guard_specs=guards,
                                    floor_pct=floor_pct, direction=direction, primary=primary)
        all_warnings = (*warnings, *outcome.warnings)
        if classic.decision is Decision.INVALID:  # nothing to extend: the series cannot be trusted
            info = replace(outcome, extend=False).info(floor_pct)
            return Decided(Verdict(Decision.INVALID, classic.reasons, all_warnings), info)
        decision, reasons = outcome.decision, list(outcome.reasons)
        if decision == "continue":  # look 1 undecided and stage 2 never ran
            decision = "inconclusive"
            reasons.append("stage 2 did not run, so look 2 is missing")
        reasons.append(f"classic rule beside it (decides nothing here): {classic.decision.value} — "
                       + (classic.reasons[0] if classic.reasons else ""))
        return Decided(Verdict(Decision(decision), tuple(reasons), all_warnings), outcome.info(floor_pct),
                       outcome.extend)

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The two looks (sequential.look_codes, the function behind `gate run`), columns paired by round."""
        first, last = SEQUENTIAL_RUNS
        look1 = sequential.look_codes(*sequential.pair_arrays(off_log[:, :first], on_log[:, :first]),
                                      floor_pct=thresholds.floor_pct, direction="lower", final=False)
        look2 = sequential.look_codes(*sequential.pair_arrays(off_log[:, :last], on_log[:, :last]),
                                      floor_pct=thresholds.floor_pct, direction="lower", final=True)
        decided = look1 != CONTINUE
        return np.where(decided, look1, look2), np.where(decided, first, last)


CLASSIC, SEQUENTIAL = ClassicPolicy(), SequentialPolicy()
_BY_NAME: dict[str, Policy] = {p.name: p for p in (CLASSIC, SEQUENTIAL)}
assert tuple(_BY_NAME) == POLICIES, "config.POLICIES names the policies of this module"


def policy_for(name: str) -> Policy:
    """The policy object of a preregistered name (config validated it)."""
    return _BY_NAME[name]

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

from gatekit import diagnostics, duet, rules, sequential
from gatekit.config import RulesSpec, ThresholdSpec
from gatekit.finding import DuetInfo, SensitivityRow, SequentialInfo
from gatekit.policies.descriptors import describe, gate_policies
from gatekit.records import RunRecord
from gatekit.verdict import Decision, Verdict, classic_codes

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
    """A policy's decision: the verdict, the sequential looks (None for a fixed-n policy), whether the
    series must extend before it can decide, and the duet estimate with its slot effect (duet policy only)."""

    verdict: Verdict
    sequential: SequentialInfo | None = None
    extend: bool = False
    duet: DuetInfo | None = None


def _guard_values(classified: pd.DataFrame, records: Sequence[RunRecord],
                  guards: Sequence[Any]) -> dict[str, dict[str, float]]:
    """Each guard metric's value in each classified run that has it (the paired policies' guard input)."""
    by_label = {r.label: r for r in records}
    return {g.metric: {label: value for label in classified["label"]
                       if (value := by_label[label].value_of(g.metric)) is not None} for g in guards}


def classic_beside(classic: Verdict) -> str:
    """The classic verdict as one reason of a policy that decides otherwise."""
    return (f"classic rule beside it (decides nothing here): {classic.decision.value} — "
            + (classic.reasons[0] if classic.reasons else ""))


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
    """Up to three looks (v4: 4, 8, then 12 runs per arm, Thue–Morse order; v3: 4, then 8) on the AB/BA pair
    differences: a robust estimate, a calibrated boundary, an early stop, equivalence, group-sequential paired
    guards, telemetry-only contamination (gatekit.sequential holds its statistics). One object per design
    version: a series is decided by the version its predecision records."""

    name = "sequential"
    default_order = describe("sequential").order

    def __init__(self, design: sequential.Design = sequential.CURRENT) -> None:
        self.design = design

    def max_rounds(self, n: int) -> int:
        return self.design.runs[-1]

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        if self.design.looks == 2:
            return self._v3_rules(rules_spec, threshold)
        first, second, third = self.design.runs
        floor, alpha, level = threshold.floor_pct, sequential.ALPHA, self.design.guard_look_level
        c1, c2, c3 = self.design.critical
        low, high = self.design.stop_band or (0.0, 0.0)
        window = self.design.extend_window
        return [
            f"Policy sequential (version {self.design.version}): look 1 after {first} runs per arm, look 2 after "
            f"{second}, look 3 after {third} only when look 2 is undecided and its HL/S lies within {window:g} of "
            f"c2 on the better side; stop at the first look that decides. Look 1 stops early as inconclusive when "
            f"HL/S on the better side is at least {low:g} and below {high:g} (on is not ahead). The classic Delta "
            "and threshold are reported beside it and decide nothing.",
            f"At each look: the rounds' pair differences d = ln(on) - ln(off) (each round an adjacent AB or BA "
            f"pair; the Thue-Morse order balances them, so a linear drift cancels from the centre); estimate HL = "
            f"Hodges-Lehmann median of the Walsh averages of d, scale S = mean(min(|d - median d|, "
            f"{sequential.SCALE_CAP:g} median|d - median d|)) / sqrt(n). Adopted iff "
            f"HL/S is beyond c = {c1:g} (look 1), {c2:g} (look 2), {c3:g} (look 3) on the better side (calibrated "
            f"by simulation under normal noise: looks 1 and 2 spend {100 * self.design.early_alpha:g} % in equal "
            f"shares, look 3 the rest of {100 * sequential.CALIBRATION_ALPHA:g} %: one-sided alpha at most "
            f"{alpha:g} over all looks) AND HL is at least {floor:g} % better AND every guard passes. Regression "
            f"iff HL/S is beyond c on the worse side AND at least {floor:g} % worse.",
            f"Equivalent iff HL +/- c S lies inside +/-{floor:g} %. Rejected iff that interval "
            f"excludes an improvement of {floor:g} % (at any look). At the last look run anything else is "
            "inconclusive.",
            f"Guards: paired non-inferiority on the rounds' (off, on) pairs: pass iff the one-sided "
            f"{100 * level:.3f} % t bound of mean(on - off) clears -max_drop (+max_drop for lower-is-better "
            f"guards); that per-look level holds a false pass to {100 * sequential.CALIBRATION_ALPHA:g} % over "
            "three looks when the true drop equals the limit. Fail iff the opposite "
            "bound is beyond it; otherwise the guard is inconclusive and an adoption waits for the next look, "
            "then becomes inconclusive — never a pass.",
            self._contamination_rule(rules_spec),
        ]

    def _contamination_rule(self, rules_spec: RulesSpec) -> str:
        return (f"Contamination only from telemetry that does not look at the result: the load evidence of "
                f"rules.evidence = {rules_spec.evidence} (load1: the window's {rules_spec.load_stat} of load1 per "
                f"core above {rules_spec.load_per_core_limit:g}; psi and steal: see the common rules, with that "
                "load1 rule where a window did not record them), the backend's evidence, or the machine on "
                "battery. A flagged run's pair is re-run once at the end of its stage in the mirror order; "
                f"needing more than {rules_spec.max_retries} re-run(s) for a pair makes the outcome inconclusive.")

    def _v3_rules(self, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        """Version 3's words, unchanged (a v3 predecision states them)."""
        first, last = self.design.runs
        floor, alpha, level = threshold.floor_pct, sequential.ALPHA, self.design.guard_look_level
        c1, c2 = self.design.critical
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
        guard_values = _guard_values(classified, records, guards)
        outcome = sequential.decide(classified, guard_values, off_arm=off_arm, on_arm=on_arm, guard_specs=guards,
                                    floor_pct=floor_pct, direction=direction, primary=primary,
                                    design=self.design)
        all_warnings = (*warnings, *outcome.warnings)
        if classic.decision is Decision.INVALID:  # nothing to extend: the series cannot be trusted
            info = replace(outcome, extend=False).info(floor_pct)
            return Decided(Verdict(Decision.INVALID, classic.reasons, all_warnings), info)
        decision, reasons = outcome.decision, list(outcome.reasons)
        if decision == "continue":  # a look undecided and the next stage never ran
            decision = "inconclusive"
            missing = len(outcome.looks) + 1
            reasons.append(f"stage {missing} did not run, so look {missing} is missing")
        reasons.append(classic_beside(classic))
        return Decided(Verdict(Decision(decision), tuple(reasons), all_warnings), outcome.info(floor_pct),
                       outcome.extend)

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The design's looks with their stop rules (sequential.design_codes: the same look_codes and
        stop_codes behind `gate run`), columns paired by round."""
        return sequential.design_codes(off_log, on_log, floor_pct=thresholds.floor_pct, direction="lower",
                                       design=self.design)


class DuetPolicy:
    """Both arms of a pair at once on twin slots, the slots swapped every pair: the pairs' log-ratios with the
    slot effect estimated (OLS on [1, slot sign]) and removed, a Student t interval with n − 2 df, the
    sequential policy's floor-aware outcomes, paired guards, telemetry-only contamination (gatekit.duet)."""

    name = "duet"
    default_order = "duet"  # not an interleaving: pair k runs both arms together

    def max_rounds(self, n: int) -> int:
        return n

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        floor, alpha, level = threshold.floor_pct, duet.TEST_ALPHA, duet.INTERVAL_LEVEL
        return [
            "Policy duet: pair k runs the off and the on run at the same time, one on each slot; odd pairs run "
            "off on slot 0 and on on slot 1, even pairs the reverse. The classic Delta and threshold are "
            "reported beside it and decide nothing.",
            "Per pair d = ln(on) - ln(off) = Delta + s*sign + noise, sign = +1 when on ran on slot 1, -1 when "
            "on ran on slot 0 (from the runs' recorded slots; the pair's parity where none was recorded); s is "
            "the slot-1-minus-slot-0 effect. Noise both runs share cancels from d. Delta and s are the least "
            f"squares fit of d on [1, sign]; SE from the residuals with n - 2 degrees of freedom; c = the "
            f"one-sided {1 - alpha:g} Student t quantile with n - 2 df; interval Delta +/- c SE ({100 * level:g} %).",
            f"Adopted iff Delta/SE is beyond c on the better side AND Delta is at least {floor:g} % better AND "
            f"every guard passes. Regression iff Delta/SE is beyond c on the worse side AND at least {floor:g} % "
            f"worse. Equivalent iff the interval lies inside +/-{floor:g} %. Rejected iff it excludes an "
            f"improvement of {floor:g} %. Anything else is inconclusive. The slot effect is reported in % with "
            "its interval.",
            f"Guards: paired non-inferiority on the pairs' (off, on) values: pass iff the one-sided "
            f"{100 * duet.GUARD_LEVEL:g} % t bound of mean(on - off) clears -max_drop (+max_drop for "
            "lower-is-better guards); fail iff the opposite bound is beyond it; otherwise inconclusive, and an "
            "adoption becomes inconclusive — never a pass.",
            f"Contamination only from telemetry that does not look at the result (rules.evidence = "
            f"{rules_spec.evidence}, the backend's evidence for the slot, the machine on battery); a flagged or "
            f"failed run takes its pair out, and the pair is re-run, both runs together; needing more than "
            f"{rules_spec.max_retries} re-run(s) for a pair makes the outcome inconclusive.",
        ]

    def classify(self, runs: pd.DataFrame, rules_spec: RulesSpec, replaced: Mapping[int, rules.Replacement],
                 cores: int | None) -> pd.DataFrame:
        return sequential.classify(runs, rules_spec, replaced, cores)

    def retries(self, classified: pd.DataFrame, rules_spec: RulesSpec, off_arm: str, on_arm: str) -> list[Retry]:
        # both runs of the pair again, together: neither goes first
        return [Retry(round_, flagged) for round_, flagged in sequential.rounds_needing_replacement(classified).items()]

    def unresolved(self, classified: pd.DataFrame) -> pd.Series:
        return ~classified["replaced"] & classified["failed"]

    def warnings(self, evidence: Evidence) -> list[str]:
        return SEQUENTIAL.warnings(evidence)

    def decide(self, classic: Verdict, classified: pd.DataFrame, records: Sequence[RunRecord], *, off_arm: str,
               on_arm: str, primary: str, direction: str, guards: Sequence[Any], floor_pct: float,
               warnings: Sequence[str]) -> Decided:
        """The duet estimate decides; the classic verdict is reported beside it as one reason."""
        guard_values = _guard_values(classified, records, guards)
        outcome = duet.decide(classified, guard_values, off_arm=off_arm, on_arm=on_arm, guard_specs=guards,
                              floor_pct=floor_pct, direction=direction, primary=primary)
        all_warnings = (*warnings, *outcome.warnings)
        if classic.decision is Decision.INVALID:
            return Decided(Verdict(Decision.INVALID, classic.reasons, all_warnings), duet=outcome.info)
        reasons = [*outcome.reasons, classic_beside(classic)]
        return Decided(Verdict(Decision(outcome.decision), tuple(reasons), all_warnings), duet=outcome.info)

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec
                 ) -> tuple[np.ndarray, np.ndarray]:
        """duet.pair_codes (the function behind `gate run`); column k is pair k + 1, its slot sign from the
        swap rule."""
        signs = duet.parity_signs(np.arange(1, off_log.shape[-1] + 1))
        codes = duet.pair_codes(on_log - off_log, signs, floor_pct=thresholds.floor_pct, direction="lower")
        return codes, np.full(off_log.shape[0], off_log.shape[-1])


CLASSIC, SEQUENTIAL, DUET = ClassicPolicy(), SequentialPolicy(), DuetPolicy()
_BY_NAME: dict[str, Policy] = {p.name: p for p in (CLASSIC, SEQUENTIAL, DUET)}
assert tuple(_BY_NAME) == gate_policies(), "gatekit.policies.descriptors names the policies of this module"
_SEQUENTIAL_BY_VERSION = {version: SequentialPolicy(design) for version, design in sequential.DESIGNS.items()}


def policy_for(name: str, sequential_version: int | None = None) -> Policy:
    """The policy object of a preregistered name (config validated it); the sequential policy in the design
    version the predecision records (None: the current one)."""
    if name == SEQUENTIAL.name and sequential_version is not None:
        return _SEQUENTIAL_BY_VERSION[sequential_version]
    return _BY_NAME[name]

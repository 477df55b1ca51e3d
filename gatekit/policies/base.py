"""The `Policy` protocol and what its methods exchange; each policy implements it in its own module.

A policy owns everything that differs between ways of deciding: the rules it states in the predecision
file, how it classifies runs (contamination) and which pairs it re-runs, its stages (whether a series
extends after a look), the decision itself, the warnings about its own evidence, its vectorised form for
`gate simulate` with the scenarios it can simulate, what `gate plan` says when a target is out of its
reach, and the words its record of a finding adds to the narrative and the terminal summary (`PolicyWords`).
Everything the policies share (the run table, the classic figures, guards, diagnostics, the finding) is in
`gatekit.analysis`, which asks the policy object — never compares policy names. A comparison rule that only
`gate simulate` runs (welch, bootstrap) implements the smaller `SimulatedPolicy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

import numpy as np

from gatekit import diagnostics, rules
from gatekit.config import RulesSpec, ThresholdSpec
from gatekit.finding import DuetInfo, Finding, RankInfo, Section, SensitivityRow, SequentialInfo
from gatekit.policy_descriptors import gate_policies, policy_for
from gatekit.records import RunRecord
from gatekit.runtable import RunTable
from gatekit.verdict import (CODE_NAMES, REGRESSION, Decision, Reason, ReasonCode, Verdict, decision_words,
                             evaluate_guard)

if TYPE_CHECKING:
    from gatekit.simulate import Scenario

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
    series must extend before it can decide, the duet estimate with its slot effect (duet policy only), and the
    rank estimate (robust policy only)."""

    verdict: Verdict
    sequential: SequentialInfo | None = None
    extend: bool = False
    duet: DuetInfo | None = None
    ranks: RankInfo | None = None


def guard_values(classified: RunTable, records: Sequence[RunRecord],
                 guards: Sequence[Any]) -> dict[str, dict[str, float]]:
    """Each guard metric's value in each classified run that has it (the paired policies' guard input)."""
    by_label = {r.label: r for r in records}
    return {g.metric: {label: value for label in classified.labels()
                       if (value := by_label[label].value_of(g.metric)) is not None} for g in guards}


def classic_beside(classic: Verdict) -> Reason:
    """The classic verdict as one reason of a policy that decides otherwise."""
    first = classic.reasons[0] if classic.reasons else ""
    return Reason(ReasonCode.CLASSIC_BESIDE,
                  f"classic rule beside it (decides nothing here): {classic.decision.value} — {first}")


@dataclass(frozen=True, slots=True)
class PolicyWords:
    """What a policy's own record of a finding adds to the narrative and the terminal summary; a field left
    empty keeps the common words (the classic figures' lead, the gate's order and n)."""

    lead: str | None = None  # the narrative's lead sentence
    sections: tuple[Section, ...] = ()  # its own narrative sections, after the backend evidence
    arrangement: str | None = None  # the summary's first line: how the runs were arranged (default: the order)
    size: str | None = None  # and how many ran (default: n=<gate.n>)
    lines: tuple[str, ...] = ()  # summary lines after the guards (looks, estimates)
    # a decision the policy made that the evidence does not confirm (the classic rule adopting while the CI of Δ
    # holds 0): the headline, the summary, JUnit and the report's verdict box say it beside the decision
    qualifier: str = ""  # after the decision's words: "by the team's rule — not confirmed"
    unconfirmed: str = ""  # why, and the next step
    # the summary's classic-figures line begins so where they decide nothing (default: they are the decision)
    classic_label: str = ""


class SimulatedPolicy(Protocol):
    """What `gate simulate` runs: a gate policy, or a comparison rule that exists only there."""

    name: str
    simulates_guard: bool  # guard scenarios (--guard-drop) simulate its paired guard
    applies_max_threshold: bool  # its verdict turns into inconclusive above rules.max_threshold_pct (classic)

    def max_rounds(self, n: int) -> int:
        """Runs per arm at most, for a gate file's (or a scenario's) n."""
        ...

    def check_scenario(self, scenario: Scenario) -> None:
        """Refuse a scenario this policy cannot run (a ConfigError naming the option)."""
        ...

    def values_per_gate(self, rounds: int) -> int:
        """Floats one simulated gate holds at once, so the simulation chunks its gates to bounded memory."""
        ...

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec,
                 max_threshold_pct: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Outcome codes and runs per arm of many simulated gates at once (lower is better). `max_threshold_pct`
        is the gate's rules.max_threshold_pct (0: no limit): the classic rule turns a rejection whose threshold
        is above it into inconclusive; the other policies decide without the classic verdict, so ignore it."""
        ...

    def guard_passes(self, scenario: Scenario, draws: int, rng: np.random.Generator) -> np.ndarray:
        """Whether its guard passes in each of `draws` guard scenarios (only when simulates_guard)."""
        ...


class Policy(SimulatedPolicy, Protocol):
    """A gate policy: everything `gate run`, analysis, planning and the reports ask of one."""

    def stages(self, n: int) -> tuple[int, ...]:
        """Runs per arm at each look, for a gate file's n; a series extends to the next one while undecided."""
        ...

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        """The policy's own rules in words, for the predecision file."""
        ...

    def classify(self, runs: RunTable, rules_spec: RulesSpec, replaced: Mapping[int, rules.Replacement],
                 cores: int | None) -> RunTable:
        """A new run table whose rows carry `replaced, missing_window, load_evidence, z, contaminated, reason,
        used`."""
        ...

    def retries(self, classified: RunTable, rules_spec: RulesSpec, off_arm: str, on_arm: str) -> list[Retry]:
        """Pairs that must be re-run (before the max_retries budget is applied)."""
        ...

    def unresolved(self, classified: RunTable) -> RunTable:
        """Runs whose problem, left without a retry, makes the series invalid."""
        ...

    def warnings(self, evidence: Evidence) -> list[str]:
        """Warnings about this policy's evidence."""
        ...

    def decide(self, classic: Verdict, classified: RunTable, records: Sequence[RunRecord], *, off_arm: str,
               on_arm: str, primary: str, direction: str, guards: Sequence[Any], floor_pct: float,
               warnings: Sequence[str]) -> Decided:
        """The decision, given the classic verdict the shared analysis computed."""
        ...

    def unreachable(self, effect_pct: float, cv_pct: float, thresholds: ThresholdSpec, most: int) -> str:
        """Why `gate plan` finds no size up to `most` runs per arm for this effect (it scans its sizes)."""
        ...

    def words(self, finding: Finding) -> PolicyWords:
        """What its record of the finding adds to the narrative and the summary."""
        ...


class OneLook:
    """A policy that decides once, on the gate file's n runs per arm (classic, duet, censored): no look before."""

    def stages(self, n: int) -> tuple[int, ...]:
        return (n,)

    def max_rounds(self, n: int) -> int:
        return n


class SimulationDefaults:
    """The simulation a policy has unless it says otherwise: any scenario, 4 floats a round, no guard."""

    simulates_guard = False
    applies_max_threshold = False

    def check_scenario(self, scenario: Scenario) -> None:
        return None

    def values_per_gate(self, rounds: int) -> int:
        return 4 * rounds

    def guard_passes(self, scenario: Scenario, draws: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError(f"the {getattr(self, 'name', 'this')} policy simulates no guard")


def verdict_headline(finding: Finding) -> str:
    """The decision as headlines say it: `ADOPTED`, or `ADOPTED by the team's rule — not confirmed` when the
    policy qualifies it."""
    words = decision_words(finding.decision)
    qualifier = words_of(finding).qualifier
    return f"{words} {qualifier}" if qualifier else words


def verdict_sentence(finding: Finding) -> str:
    """The qualified decision in full ("adopted by the team's rule — not confirmed: …; next step: …"), or ''
    when the policy does not qualify it."""
    words = words_of(finding)
    if not words.qualifier:
        return ""
    return f"{finding.decision.value} {words.qualifier}: {words.unconfirmed}"


def words_of(finding: Finding) -> PolicyWords:
    """What the finding's policy adds to the common words: the one call the narrative and the terminal make
    (a finding of a policy this gatekit does not know gets the common words alone)."""
    if finding.gate.policy not in gate_policies():
        return PolicyWords()
    return policy_for(finding.gate.policy).words(finding)


def guard_results(used: RunTable, records: Sequence[RunRecord], guards: Sequence[Any], off_arm: str,
                   on_arm: str) -> list[Any]:
    """The classic guards on the used runs' arm means."""
    by_label = {r.label: r for r in records}

    def values(arm: str, metric: str) -> list[float]:
        return [value for label in used.arm(arm).labels() if (value := by_label[label].value_of(metric)) is not None]

    return [evaluate_guard(g, values(off_arm, g.metric), values(on_arm, g.metric)) for g in guards]


def guard_reasons(checked: Sequence[Any]) -> list[Reason]:
    """A reason line per checked guard (guard_results): held, beyond its limit, or missing."""
    return [Reason(ReasonCode.GUARD_HELD if g.passed else ReasonCode.GUARD_BEYOND_LIMIT,
                   f"guard {g.metric}: Δ {g.delta:+.4f} " + ("within" if g.passed else "beyond")
                   + f" limit {g.limit:+g}") if g.delta is not None else
            Reason(ReasonCode.GUARD_MISSING, f"guard {g.metric} failed: {g.note}") for g in checked]


def guarded_decision(code: int, checked: Sequence[Any]) -> Decision:
    """The decision an interval's code gives beside the checked guards (guard_results): a regression stands;
    otherwise a failed guard fails the gate."""
    if code == REGRESSION:
        return Decision.REGRESSION
    if any(not g.passed for g in checked):
        return Decision.GUARD_FAILED
    return Decision(CODE_NAMES[code])

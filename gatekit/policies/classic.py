"""The classic policy: the team's rule as the seed finding applies it (DESIGN step 6), exactly.

Δ of the arithmetic means against max(k·σ_off, floor); contamination = load evidence (i) AND a deviation
beyond sigma_k (ii); a contaminated or failed pair re-run once. Its statistics are the shared ones
(`gatekit.rules`, `gatekit.verdict`, `gatekit.diagnostics`), so this module is the thin object over them;
its words are the predecision's common rules and the narrative's common lead.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gatekit import diagnostics, rules
from gatekit.config import RulesSpec, ThresholdSpec
from gatekit.finding import Finding
from gatekit.policies.base import Decided, Evidence, OneLook, PolicyWords, Retry, SimulationDefaults
from gatekit.records import RunRecord
from gatekit.runtable import RunTable
from gatekit.verdict import Decision, Verdict, classic_codes


class SeedContamination:
    """The seed's contamination rules as a policy applies them (docs/statistics.md): a run is flagged on load
    evidence AND 3σ from its arm, a flagged or failed run's pair is retried once, and one left flagged is
    unresolved. The classic policy and every policy that keeps its rules (censored) share this one home."""

    def classify(self, runs: RunTable, rules_spec: RulesSpec, replaced: Mapping[int, rules.Replacement],
                 cores: int | None) -> RunTable:
        return rules.classify(runs, rules_spec, replaced)

    def retries(self, classified: RunTable, rules_spec: RulesSpec, off_arm: str, on_arm: str) -> list[Retry]:
        return [Retry(round_, flagged) for round_, flagged in rules.rounds_needing_retry(classified, rules_spec).items()]

    def unresolved(self, classified: RunTable) -> RunTable:
        return classified.filter(lambda row: row.problem)


class ClassicPolicy(SeedContamination, OneLook, SimulationDefaults):
    """The team's rule (DESIGN step 6): Δ against max(k·σ_off, floor), contamination = load evidence AND
    deviation beyond sigma_k, a contaminated or failed pair re-run once."""

    name = "classic"
    applies_max_threshold = True

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        return []  # the classic rules are the predecision's common rules

    def warnings(self, evidence: Evidence) -> list[str]:
        # That rule (ii) cannot fire at this n is a property of the rules, not of this evidence: the predecision
        # states it and the report's rules section shows it (rule_ii_note), not every summary.
        found: list[str] = []
        flips = [row.variant for row in evidence.sensitivity[1:] if row.decision != evidence.sensitivity[0].decision]
        if flips and not evidence.invalid:
            found.append("the decision is sensitive to single runs: it changes when you " + "; ".join(flips))
        found += diagnostics.classic_warnings(
            evidence.diagnostics, order=evidence.order, direction=evidence.direction,
            sigma_off_pct=evidence.sigma_off_pct, sigma_on_pct=evidence.sigma_on_pct,
            delta_pct=evidence.delta_pct, threshold_pct=evidence.threshold_pct)
        return found + list(evidence.guard_warnings)

    def decide(self, classic: Verdict, classified: RunTable, records: Sequence[RunRecord], *, off_arm: str,
               on_arm: str, primary: str, direction: str, guards: Sequence[Any], floor_pct: float,
               warnings: Sequence[str]) -> Decided:
        return Decided(classic)

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec,
                 max_threshold_pct: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """The classic rule on arithmetic means, vectorised: the same stats.threshold_pct and
        verdict.classic_codes a gate runs, with its rules.max_threshold_pct (above it: inconclusive)."""
        off, on = np.exp(off_log), np.exp(on_log)
        mean_off, mean_on = off.mean(axis=-1), on.mean(axis=-1)
        if off.shape[-1] > 1:
            sigma_off_pct = 100 * off.std(axis=-1, ddof=1) / mean_off
            threshold = np.maximum(thresholds.sigma_k * sigma_off_pct, thresholds.floor_pct)
        else:
            threshold = np.full(mean_off.shape, thresholds.floor_pct)
        delta = 100 * (mean_on - mean_off) / mean_off
        return (classic_codes(delta, threshold, "lower", max_threshold_pct),
                np.full(off.shape[0], off.shape[-1]))

    def unreachable(self, effect_pct: float, cv_pct: float, thresholds: ThresholdSpec, most: int) -> str:
        limit = max(thresholds.sigma_k * cv_pct, thresholds.floor_pct)
        if -effect_pct <= limit:  # more runs do not lower max(k·σ, floor)
            return (f"the classic rule adopts only when Δ is beyond max({thresholds.sigma_k:g}·σ_off, floor "
                    f"{thresholds.floor_pct:g} %) ≈ {limit:g} %, and more runs do not lower that: a true "
                    f"{effect_pct:+g} % is not beyond it; state a larger effect, lower the noise or the floor")
        return f"more than {most} runs per arm are needed: lower the noise first"

    def words(self, finding: Finding) -> PolicyWords:
        # the common lead and summary are the classic figures; an adoption the evidence does not confirm is said
        # where people look, not only among the warnings
        gaps = unconfirmed_adoption(finding)
        if not gaps:
            return PolicyWords()
        return PolicyWords(qualifier=QUALIFIER, unconfirmed="; ".join(gaps) + f"; next step: {CONFIRM_STEP}")


QUALIFIER = "by the team's rule — not confirmed"
CONFIRM_STEP = ("re-run with `--policy sequential`, which keeps running until its interval excludes no change "
                "(or says it cannot tell)")


def unconfirmed_adoption(finding: Finding) -> list[str]:
    """Why an adoption by the classic rule is not confirmed by its own evidence: the Welch CI of Δ contains 0 % (or
    reaches inside the floor),
    or σ_on is more than twice σ_off (the threshold max(k·σ_off, floor) ignores the on arm's noise). Empty for
    any other decision, or when neither holds."""
    if finding.decision is not Decision.ADOPTED:
        return []
    s = finding.stats
    gaps = []
    floor = finding.gate.threshold.floor_pct or 0.0
    if s.ci_low_pct is not None and s.ci_high_pct is not None:
        level = f"{100 * s.ci_level:g} % " if s.ci_level is not None else ""
        ci = f"the {level}CI of Δ [{s.ci_low_pct:+.4f} %, {s.ci_high_pct:+.4f} %]"
        # the rule compares the estimate with the floor, so a true change below the floor is adopted whenever
        # the estimate lands beyond it (a true −0.8 % at CV 0.2 %: 10.6 % of gates): the interval says so
        inside = s.ci_high_pct > -floor if finding.gate.direction == "lower" else s.ci_low_pct < floor
        if s.ci_low_pct <= 0 <= s.ci_high_pct:
            gaps.append(f"{ci} includes 0 %")
        elif floor and inside:
            gaps.append(f"{ci} reaches inside the ±{floor:g} % floor (a change smaller than the floor is not ruled "
                        "out)")
    if s.sigma_on_pct is not None and s.sigma_off_pct is not None and s.sigma_on_pct > 2 * s.sigma_off_pct:
        gaps.append(f"σ_on {s.sigma_on_pct:.4f} % is more than twice σ_off {s.sigma_off_pct:.4f} %")
    return gaps


CLASSIC = ClassicPolicy()


def policy(version: int | None = None) -> ClassicPolicy:
    """The classic policy (it has one design)."""
    return CLASSIC

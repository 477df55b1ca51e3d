"""A campaign's false-discovery control: many gates in one CI job decided together at a preregistered level.

Each gate gives two one-sided p-values, on better than off and on worse (`one_sided_p`: the policy's own where it
has one — the robust policy's Mann–Whitney — else the Welch test on log values the finding records, multiplied by
the looks a sequential design plans, a Bonferroni bound over its looks that keeps the p valid however the looks
stopped). Benjamini–Hochberg (1995) at level q runs over all 2·m one-sided hypotheses; as one p of each gate's pair
is ≥ ½, that is BH on min(1, 2·min(p_better, p_worse)) of the m gates. A gate's own adoption (or regression)
stands when its direction's hypothesis is rejected; otherwise the campaign reports it as "adopted by its rule, not
significant at campaign FDR q" and counts it inconclusive. Control never creates a decision the gate did not make.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from gatekit.finding import Finding
from gatekit.policy_descriptors import gate_policies, policy_for
from gatekit.verdict import Decision, Reason, ReasonCode, Verdict


def benjamini_hochberg(p_values: Sequence[float] | np.ndarray, q: float) -> np.ndarray:
    """Which hypotheses BH rejects at level q: those with p ≤ p_(k*), k* the largest k with p_(k) ≤ k·q/m
    (NaN p: never rejected)."""
    p = np.asarray(p_values, float)
    p = np.where(np.isnan(p), 1.0, p)
    m = p.size
    if m == 0:
        return np.zeros(0, bool)
    order = np.argsort(p, kind="stable")
    passing = np.nonzero(p[order] <= q * np.arange(1, m + 1) / m)[0]
    rejected = np.zeros(m, bool)
    if passing.size:
        rejected[order[: passing[-1] + 1]] = True
    return rejected


def bh_cutoff(p_values: Sequence[float], q: float) -> float:
    """The largest p BH rejects at level q (0 when it rejects none): what a p had to reach."""
    p = np.where(np.isnan(np.asarray(p_values, float)), 1.0, np.asarray(p_values, float))
    rejected = benjamini_hochberg(p, q)
    return float(p[rejected].max()) if rejected.any() else 0.0


def one_sided_p(finding: Finding) -> tuple[float, float]:
    """(on better than off, on worse than off) of one finding, each a valid p under no change (1: no evidence)."""
    if finding.gate.policy in gate_policies():
        own = getattr(policy_for(finding.gate.policy), "one_sided_p", None)
        if own is not None:
            return own(finding)
    p = finding.stats.p_one_sided
    if p is None or not math.isfinite(p):
        return 1.0, 1.0
    looks = len(finding.sequential.runs_per_arm) if finding.sequential is not None else 1
    return min(1.0, looks * p), min(1.0, looks * (1 - p))


def campaign_p(p_better: float, p_worse: float) -> float:
    """One gate's p in the campaign's BH: its two one-sided hypotheses as one, min(1, 2·min(p_better, p_worse))."""
    return min(1.0, 2 * min(p_better, p_worse))


@dataclass(frozen=True, slots=True)
class Controlled:
    """One gate under the campaign's control: its finding as the campaign reports it, and what decided that."""

    finding: Finding  # the gate's own, or with the decision withdrawn (inconclusive, CAMPAIGN_FDR first)
    own: Decision  # the gate's own decision
    p: float  # its campaign p
    significant: bool

    @property
    def withdrawn(self) -> bool:
        return self.finding.decision is not self.own


def control(findings: Sequence[Finding], q: float) -> list[Controlled]:
    """Every finding as a campaign at false-discovery level q reports it: an adoption or regression whose
    campaign p BH does not reject becomes inconclusive, its first reason saying why."""
    ps = [campaign_p(*one_sided_p(f)) for f in findings]
    rejected = benjamini_hochberg(ps, q)
    cutoff = bh_cutoff(ps, q)
    result = []
    for finding, p, significant in zip(findings, ps, rejected):
        own = finding.decision
        if own in (Decision.ADOPTED, Decision.REGRESSION) and not significant:
            reason = Reason(ReasonCode.CAMPAIGN_FDR,
                            f"{own.value} by its rule, not significant at campaign FDR {100 * q:g} %: campaign p "
                            f"{p:.3g} (2·min of the one-sided p-values), Benjamini–Hochberg over {len(findings)} "
                            f"gates needed ≤ {cutoff:.3g}")
            verdict = Verdict(Decision.INCONCLUSIVE, (reason, *finding.verdict.reasons), finding.verdict.warnings,
                              (ReasonCode.CAMPAIGN_FDR.value, *finding.verdict.reason_codes))
            finding = dataclasses.replace(finding, verdict=verdict)
        result.append(Controlled(finding, own, p, bool(significant)))
    return result

"""What the one-step posterior cannot say by itself, as pure statistics over the bisect's pairs: whether one step
explains them (two culprits in one range look like a step at neither), and whether the endpoints could have shown
a change at all (a `no_change` needs the power to see one).

**More than one step.** The posterior assumes one step, so with two culprits it still concentrates somewhere —
often between them, where the commits sit at the middle level and the noise decides which side each falls.
Given the named commit k, the pairs are refitted with a second step at every other commit j the pairs tell apart
(the least squares of d on a(k) and a(j), a(·) as in `posterior`), and the best j's F statistic

    F = (SSE₁ − SSE₂) / (SSE₂ / (n − 2)),  F(1, n − 2) under one step,

is judged with Bonferroni over the candidates j (the max-type search is part of the null). A second step whose
middle segment holds fewer than MIN_MIDDLE_PAIRS pairs is not a candidate: one outlying pair beside the named
commit would otherwise be a step. The test is conditional on the probed commits (the probes were chosen from the
data; the simulation measures its level under one step: docs/bisect.md).

**A culprit's own step, shown by its neighbours.** The search stops where the posterior concentrates, and with
two culprits it can concentrate between them: it keeps probing until some boundary looks sharp, so the pairs
that led it there are selected for a jump the commits do not have. A commit k is named the culprit only when
the commits beside the step (k − 1 and k; GOOD's level is 0 by construction) show the jump one-sided at the
rule's α in the direction of the one-step fit's δ̂; until then the search adds the pairs the rule judges, up to
its maximum (then it stops with the credible set: every look is a chance for noise to pass, so the looks are
few and the level strict). The rule is preregistered by its number
(`NEIGHBOUR_RULES`):

1. every pair of k − 1 and of k against GOOD, at least 3 a side (the search adds them to the side with fewer
   first, up to 6), a pooled two-sample t (one-sample where k − 1 is GOOD). The
   pairs that made k the posterior's choice are in it, so two commits at one middle level passed it in 5.4 %
   of two-culprit bisects (rule 2: 0.5 %; docs/benchmarks.md).
2. the step's own pairs — commit k run beside k − 1, each pair a measurement of the jump with the noise of one
   pair (a pair a side against GOOD has the noise of two, in twice the runs) — and only those taken after the
   look at which k first held the confidence alone (`held_since`): the search chose k from the earlier pairs,
   and these it did not. At least 1, at most 4; the noise s is the one-step fit's over every pair (n − 1
   degrees of freedom: a second step only inflates it, which makes the test stricter where it matters), so
   t = d̄ / (s/√m) against t(n − 1), m the step's fresh pairs.

**Endpoints that lack power.** The endpoints' gate saw no change; that is `no_change` only when the pairs could
have shown a change of the gate's floor: their minimum detectable effect (a paired t on the pairs' log
differences, one-sided α 0.05, power 0.8 — the MDE a gate finding reports, `diagnostics.mde_log`) is at most the
floor, and their 95 % interval holds 0. Otherwise `inconclusive`, with the MDE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import stats as scipy_stats

from gatekit.bisect.posterior import Pair, credible_set, design, posterior
from gatekit.diagnostics import mde_log

STEPS_ALPHA = 0.01  # `gate bisect` preregisters this level of the test for more than one step
MIN_MIDDLE_PAIRS = 2  # pairs between two steps, at least (one pair is an outlier's place, not a segment)
ENDPOINTS_CI_LEVEL = 0.95


@dataclass(frozen=True, slots=True)
class NeighbourRule:
    """How a named step must show between its neighbours (the module's docstring), preregistered by number."""

    fresh: bool  # only the pairs taken after k first held the confidence alone (held_since)
    noise_from_fit: bool  # s from the one-step fit over every pair, not the neighbours' pooled variance
    min_pairs: int  # at each side before the jump is judged
    max_pairs: int  # the search adds pairs beside a step up to this many a side, then stops unconfirmed
    alpha: float  # one-sided level of the jump
    # the pairs judged are the step's own, commit k against k − 1 beside it (not each side against GOOD)
    direct: bool = False


NEIGHBOUR_RULES = {1: NeighbourRule(fresh=False, noise_from_fit=False, min_pairs=3, max_pairs=6, alpha=0.01),
                   2: NeighbourRule(fresh=True, noise_from_fit=True, min_pairs=1, max_pairs=4, alpha=0.01, direct=True)}
NEIGHBOUR_RULE = 2  # what `gate bisect` preregisters now


def neighbour_rule(number: int | None) -> NeighbourRule:
    """The rule a plan preregistered; a plan with `steps_alpha` but no number is from before the numbers: 1."""
    if number is not None and number not in NEIGHBOUR_RULES:
        raise ValueError(f"neighbour rule {number}: this gatekit knows rules {sorted(NEIGHBOUR_RULES)}")
    return NEIGHBOUR_RULES[1 if number is None else number]


def neighbour_since(rounds: Sequence[Sequence[Pair]], commits: int, confidence: float, named: int) -> int:
    """Where the pairs a rule of fresh pairs judges begin for `named`: held_since's count, or all the pairs when
    it never held the confidence alone."""
    return held_since(rounds, commits, confidence).get(named, sum(len(r) for r in rounds))


@dataclass(frozen=True, slots=True)
class StepsTest:
    """The test for a second step beside the named one: p (Bonferroni over the candidates), F, its residual
    degrees of freedom, the best two-step fit's commits (ascending) and their log effects, and how many
    candidates were searched."""

    p: float
    f: float
    dof: int
    steps: tuple[int, int]
    effects_log: tuple[float, float]
    candidates: int

    def rejects(self, alpha: float) -> bool:
        return self.p <= alpha


def distinct_steps(pairs: Sequence[Pair], commits: int) -> list[int]:
    """The culprits k = 1 … N the pairs tell apart: the first k of each distinct column a(k)."""
    a = design(pairs, commits)
    seen: set[bytes] = set()
    out = []
    for k in range(1, commits + 1):
        key = a[:, k - 1].tobytes()
        if key not in seen:
            seen.add(key)
            out.append(k)
    return out


def second_step_test(pairs: Sequence[Pair], commits: int, named: int) -> StepsTest | None:
    """The F test of a second step beside `named` (the module's docstring); None when no candidate can be
    fitted (too few pairs, or no commit the pairs tell apart with enough pairs between it and `named`) or when
    the one step leaves no residual to explain (noiseless pairs: an F of two rounding errors means nothing)."""
    n = len(pairs)
    if n < 4:
        return None
    a = design(pairs, commits)
    d = np.array([p.log_diff for p in pairs])
    first = a[:, named - 1]
    s11 = float(first @ first)
    if s11 == 0:
        return None
    sse1 = float(d @ d) - float(first @ d) ** 2 / s11
    if sse1 <= 1e-12 * float(d @ d):  # one step explains the pairs exactly: what is left is rounding, no evidence
        return None
    best: tuple[float, int, float, float] | None = None
    candidates = 0
    for j in distinct_steps(pairs, commits):
        second = a[:, j - 1]
        middle = int(np.count_nonzero(second != first))  # pairs whose commit lies between the two steps
        if j == named or middle < MIN_MIDDLE_PAIRS:
            continue
        s22, s12 = float(second @ second), float(first @ second)
        det = s11 * s22 - s12 * s12
        if det <= 1e-12 * s11 * s22:
            continue
        candidates += 1
        r1, r2 = float(first @ d), float(second @ d)
        b1, b2 = (s22 * r1 - s12 * r2) / det, (s11 * r2 - s12 * r1) / det
        sse2 = float(((d - b1 * first - b2 * second) ** 2).sum())
        if best is None or sse2 < best[0]:
            best = (sse2, j, b1, b2)
    if best is None:
        return None
    sse2, j, b1, b2 = best
    dof = n - 2
    f = (sse1 - sse2) / (sse2 / dof) if sse2 > 0 else math.inf
    p = min(1.0, float(scipy_stats.f.sf(f, 1, dof)) * candidates) if math.isfinite(f) else 0.0
    steps, effects = ((named, j), (b1, b2)) if named < j else ((j, named), (b2, b1))
    return StepsTest(p, f, dof, steps, effects, candidates)


def pairs_at(pairs: Sequence[Pair], commit: int) -> list[float]:
    """The log differences of the pairs of `commit` against GOOD."""
    return [p.log_diff for p in pairs if p.probe == commit and p.reference == 0]


def held_since(rounds: Sequence[Sequence[Pair]], commits: int, confidence: float) -> dict[int, int]:
    """For each commit that alone held the confidence at some look (the search looks after every round), the
    number of pairs at the first such look: the pairs after it are the ones the search did not choose it by.
    `rounds` in the order they ran (a round's pairs in any order)."""
    held: dict[int, int] = {}
    pairs: list[Pair] = []
    for round_pairs in rounds:
        pairs.extend(round_pairs)
        if len(pairs) < 2 or not round_pairs:
            continue
        credible = credible_set(posterior(pairs, commits), confidence)
        if len(credible) == 1:
            held.setdefault(credible[0], len(pairs))
    return held


def _sides(named: int) -> tuple[int, ...]:
    return tuple(c for c in (named - 1, named) if c > 0)


def step_pairs(pairs: Sequence[Pair], named: int) -> list[float]:
    """The log differences of the pairs of `named` against the commit before it (its step's own pairs)."""
    return [p.log_diff for p in pairs if p.probe == named and p.reference == named - 1]


def unconfirmed_sides(pairs: Sequence[Pair], named: int, rule: NeighbourRule = NEIGHBOUR_RULES[1],
                      since: int = 0) -> list[int]:
    """The commits beside the step at `named` (named − 1 unless GOOD, and named) holding fewer than the rule's
    minimum of the pairs it judges (those from `since` on, for a rule of fresh pairs)."""
    judged = pairs[since:] if rule.fresh else pairs
    if rule.direct:
        return [named] if len(step_pairs(judged, named)) < rule.min_pairs else []
    return [c for c in _sides(named) if len(pairs_at(judged, c)) < rule.min_pairs]


def confirming_sides(pairs: Sequence[Pair], named: int, rule: NeighbourRule = NEIGHBOUR_RULES[1],
                     since: int = 0) -> list[int]:
    """The sides the search may still add pairs to (below the rule's maximum), the one with fewer pairs first
    (one probe a round must not keep feeding one side)."""
    judged = pairs[since:] if rule.fresh else pairs
    if rule.direct:
        return [named] if len(step_pairs(judged, named)) < rule.max_pairs else []
    counts = {c: len(pairs_at(judged, c)) for c in _sides(named)}
    return sorted((c for c, count in counts.items() if count < rule.max_pairs), key=lambda c: (counts[c], c))


def jump_p(pairs: Sequence[Pair], commits: int, named: int, rule: NeighbourRule = NEIGHBOUR_RULES[1],
           since: int = 0) -> float:
    """One-sided p of the jump from commit named − 1 to named, in the direction of the one-step fit's δ̂ at
    `named`, under `rule` (the module's docstring; `since`: the pairs before it are not judged by a rule of
    fresh pairs). 1 when a side holds fewer than the rule's minimum, or the pairs do not vary."""
    if unconfirmed_sides(pairs, named, rule, since):
        return 1.0
    a = design(pairs, commits)[:, named - 1]
    d = np.array([p.log_diff for p in pairs])
    direction = 1.0 if float(a @ d) >= 0 else -1.0
    judged = pairs[since:] if rule.fresh else pairs
    if rule.direct:  # each pair measures the jump itself: a one-sample mean against 0
        high, low = np.array(step_pairs(judged, named)), np.zeros(0)
    else:
        high = np.array(pairs_at(judged, named))
        low = np.array(pairs_at(judged, named - 1)) if named > 1 else np.zeros(0)
    jump = float(high.mean() - (low.mean() if low.size else 0.0))
    if rule.noise_from_fit:
        dof = len(pairs) - 1
        variance = float(((d - float(a @ d) / float(a @ a) * a) ** 2).sum()) / dof
    elif low.size:
        dof = high.size + low.size - 2
        variance = float(((high - high.mean()) ** 2).sum() + ((low - low.mean()) ** 2).sum()) / dof
    else:
        dof = high.size - 1
        variance = float(high.var(ddof=1))
    se = math.sqrt(variance * (1 / high.size + (1 / low.size if low.size else 0.0)))
    if se == 0:
        return 0.0 if direction * jump > 0 else 1.0
    return float(scipy_stats.t.sf(direction * jump / se, dof))


def step_confirmed(pairs: Sequence[Pair], commits: int, named: int, rule: NeighbourRule = NEIGHBOUR_RULES[1],
                   since: int = 0) -> bool:
    """The named step's jump is shown by its neighbours (jump_p ≤ the rule's α)."""
    return jump_p(pairs, commits, named, rule, since) <= rule.alpha


@dataclass(frozen=True, slots=True)
class EndpointsPower:
    """What the endpoint pairs can tell: their mean change and its 95 % interval, and the MDE, in percent."""

    change_pct: float
    ci_low_pct: float
    ci_high_pct: float
    mde_pct: float
    pairs: int

    def enough(self, floor_pct: float) -> bool:
        """A `no_change` may be said: a change of the floor would have been seen, and none is."""
        return self.mde_pct <= floor_pct and self.ci_low_pct <= 0.0 <= self.ci_high_pct


def endpoints_power(log_diffs: Sequence[float]) -> EndpointsPower | None:
    """The endpoints' paired t on their pairs' log differences (BAD − GOOD); None with fewer than two pairs."""
    d = np.asarray(log_diffs, dtype=float)
    n = d.size
    if n < 2:
        return None
    mean = float(d.mean())
    se = float(d.std(ddof=1)) / math.sqrt(n)
    half = float(scipy_stats.t.ppf(0.5 + ENDPOINTS_CI_LEVEL / 2, n - 1)) * se
    mde = mde_log(se, n - 1)
    return EndpointsPower(100 * math.expm1(mean), 100 * math.expm1(mean - half), 100 * math.expm1(mean + half),
                          100 * math.expm1(mde), n)

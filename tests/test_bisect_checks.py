"""gatekit.bisect.checks against hand-computed values and scipy, and the outcomes they give the search: more than
one step, a named step its neighbours must show, endpoints too noisy to say no change."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pytest
from scipy import stats as scipy_stats

from gatekit.bisect.checks import (NEIGHBOUR_RULES, confirming_sides, endpoints_power, held_since, jump_p,
                                   second_step_test, step_confirmed, unconfirmed_sides)
from gatekit.bisect.posterior import Pair, credible_set, posterior
from gatekit.bisect.simulation import BisectScenario, simulate_bisect
from gatekit.bisect.search import Measured, Outcome, SearchPlan, search
from gatekit.diagnostics import mde_log


def _pairs(levels: dict[int, Sequence[float]]) -> list[Pair]:
    return [Pair(commit, 0, d) for commit, values in levels.items() for d in values]


def test_second_step_f_test_by_hand_and_scipy() -> None:
    # commits 0 … 4; steps at 2 and 4: levels 0 at 1, 1 at 2-3, 2 at 4 (BAD), small noise
    pairs = _pairs({1: [0.01, -0.01], 2: [1.02, 0.98], 3: [1.0, 1.01], 4: [2.0, 1.99, 2.02]})
    test = second_step_test(pairs, 4, named=4)
    assert test is not None and test.steps == (2, 4)
    d = np.array([p.log_diff for p in pairs])
    a1 = np.array([p.probe >= 4 for p in pairs], float)
    a2 = np.array([p.probe >= 2 for p in pairs], float)
    sse1 = float(d @ d - (a1 @ d) ** 2 / (a1 @ a1))
    x = np.column_stack([a2, a1])
    beta, *_ = np.linalg.lstsq(x, d, rcond=None)
    sse2 = float(((d - x @ beta) ** 2).sum())
    f = (sse1 - sse2) / (sse2 / (len(d) - 2))
    assert test.f == pytest.approx(f) and test.dof == len(d) - 2
    assert test.effects_log == pytest.approx(tuple(beta))
    # candidates: steps at 1, 2 and 3 each have ≥ 2 pairs between them and 4 (Bonferroni over 3)
    assert test.candidates == 3
    assert test.p == pytest.approx(min(1.0, 3 * scipy_stats.f.sf(f, 1, len(d) - 2)))
    assert test.rejects(0.01)
    # one step (at 2) with the same noise: the second step explains nothing
    one = _pairs({1: [0.01, -0.01], 2: [2.02, 1.98], 3: [2.0, 2.01], 4: [2.0, 1.99, 2.02]})
    assert not second_step_test(one, 4, named=2).rejects(0.05)  # type: ignore[union-attr]


def test_noiseless_pairs_of_one_step_are_no_second_step() -> None:
    # a deterministic trainer: every pair is exactly 0 or log 1.2, so both fits leave only rounding residuals,
    # whose ratio is any F at all (a one-step bisect of such a trainer was called multiple_steps)
    step = math.log(1.2)
    pairs = _pairs({1: [0.0, 0.0], 2: [0.0, 0.0, 0.0], 3: [step, step, step], 4: [step, step], 5: [step, step]})
    assert second_step_test(pairs, 5, named=3) is None


def test_a_lone_outlier_beside_the_step_is_not_a_second_step() -> None:
    # one pair at commit 3 (just before the named 4) is far off: its segment holds one pair, not a candidate
    pairs = _pairs({1: [0.0, 0.01], 2: [0.01, -0.01], 3: [0.9], 4: [2.0, 1.99, 2.02]})
    test = second_step_test(pairs, 4, named=4)
    assert test is None or test.steps != (3, 4)


def test_jump_between_the_neighbours_by_hand_and_scipy() -> None:
    low, high = [0.9, 1.1, 1.0], [1.9, 2.2, 2.0]
    pairs = _pairs({5: low, 6: high, 10: [2.0, 2.1, 1.9]})
    assert unconfirmed_sides(pairs, 6) == []
    welch = scipy_stats.ttest_ind(high, low, equal_var=True, alternative="greater")
    assert jump_p(pairs, 10, 6) == pytest.approx(welch.pvalue)
    assert step_confirmed(pairs, 10, 6)
    # two commits at the same middle level show no jump, whatever the posterior says
    assert not step_confirmed(_pairs({5: low, 6: [1.0, 0.95, 1.05], 10: [2.0, 2.1, 1.9]}), 10, 6)
    # named 1: GOOD's level is 0, a one-sample t
    one = _pairs({1: high, 10: [2.0, 2.1, 1.9]})
    assert jump_p(one, 10, 1) == pytest.approx(scipy_stats.ttest_1samp(high, 0.0, alternative="greater").pvalue)
    # too few pairs a side: not yet judged
    assert unconfirmed_sides(_pairs({5: low[:1], 6: high}), 6) == [5] and NEIGHBOUR_RULES[1].min_pairs == 3
    assert jump_p(_pairs({5: low[:1], 6: high}), 10, 6) == 1.0


def test_the_steps_own_fresh_pairs_with_the_fits_noise_by_hand_and_scipy() -> None:
    # rule 2 judges only the pairs of 6 beside 5 from `since` on, with s from the one-step fit over every pair
    rule = NEIGHBOUR_RULES[2]
    chosen_by = _pairs({5: [-0.5, -0.6], 6: [2.5, 2.6], 10: [2.0, 2.1, 1.9]})  # the search chose 6 by these
    own = [Pair(6, 5, 1.9), Pair(6, 5, 2.3)]
    pairs = chosen_by + own
    since = len(chosen_by)
    d = np.array([p.log_diff for p in pairs])
    a = np.array([(p.probe >= 6) - (p.reference >= 6) for p in pairs], float)
    residual = d - (a @ d) / (a @ a) * a
    s = math.sqrt(float(residual @ residual) / (len(d) - 1))
    t = np.mean([1.9, 2.3]) / (s / math.sqrt(2))
    assert jump_p(pairs, 10, 6, rule, since) == pytest.approx(float(scipy_stats.t.sf(t, len(d) - 1)))
    assert step_confirmed(pairs, 10, 6, rule, since)
    # the pairs before `since` are not judged, nor pairs of 6 against GOOD: none of its own yet
    assert unconfirmed_sides(chosen_by + _pairs({6: [2.0]}), 6, rule, since) == [6]
    assert jump_p(chosen_by + _pairs({6: [2.0]}), 10, 6, rule, since) == 1.0
    # a fresh middle level shows no jump, however sharp the pairs that chose the commit were
    flat = [Pair(6, 5, 0.05), Pair(6, 5, -0.1), Pair(6, 5, 0.02)]
    assert not step_confirmed(chosen_by + flat, 10, 6, rule, since)
    # the search adds the step's own pairs up to the rule's maximum
    assert confirming_sides(pairs, 6, rule, since) == [6]
    assert confirming_sides(chosen_by + own * 2, 6, rule, since) == []
    # rule 1 feeds the side with fewer pairs first
    assert confirming_sides(_pairs({5: [0.0] * 4, 6: [2.0] * 3}), 6) == [6, 5]


def test_held_since_is_the_first_look_where_one_commit_holds_the_confidence() -> None:
    rounds = [tuple(_pairs({8: [1.0, 1.02, 0.98]})), tuple(_pairs({4: [0.01]})), tuple(_pairs({6: [1.0]})),
              tuple(_pairs({5: [0.0]})), tuple(_pairs({5: [0.01], 6: [0.99]}))]
    held = held_since(rounds, 8, 0.95)
    counts = np.cumsum([len(r) for r in rounds])
    flat: list[Pair] = []
    first: dict[int, int] = {}
    for round_pairs, count in zip(rounds, counts):
        flat.extend(round_pairs)
        credible = credible_set(posterior(flat, 8), 0.95)
        if len(credible) == 1:
            first.setdefault(credible[0], int(count))
    assert held == first and held  # some commit held the confidence, at a round's end


def test_two_culprits_name_no_wrong_commit_at_the_confidence() -> None:
    # seeded: two +1.5 % culprits at CV 1 % over 64 commits, 200 draws; rule 1 names a commit that is neither
    # in 4.5 % of them, rule 2 (the step's own fresh pairs) in 1 % (2 draws)
    def wrong(rule: int) -> float:
        scenario = BisectScenario(commits=64, effect_pct=1.5, second_effect_pct=1.5, cv_pct=1.0, neighbour_rule=rule)
        return simulate_bisect(scenario, draws=200, seed=3).gatekit.wrong_named

    old, new = wrong(1), wrong(2)
    assert old >= 0.03
    assert new <= 0.015 and new <= old / 3


def test_endpoints_power_by_hand() -> None:
    d = [0.03, 0.01, 0.02, 0.025, 0.015, 0.02]
    power = endpoints_power(d)
    assert power is not None
    se = float(np.std(d, ddof=1)) / math.sqrt(6)
    half = float(scipy_stats.t.ppf(0.975, 5)) * se
    assert power.change_pct == pytest.approx(100 * math.expm1(np.mean(d)))
    assert power.ci_low_pct == pytest.approx(100 * math.expm1(np.mean(d) - half))
    assert power.mde_pct == pytest.approx(100 * math.expm1(mde_log(se, 5)))
    # noncentral t by hand: the MDE is found with power 0.8 at one-sided 0.05
    crit = scipy_stats.t.ppf(0.95, 5)
    assert scipy_stats.nct.sf(crit, 5, mde_log(se, 5) / se) == pytest.approx(0.8, abs=1e-9)
    assert not power.enough(1.0)  # 0 is outside the interval: a change the gate's rule did not show
    quiet = endpoints_power([0.001, -0.002, 0.0015, -0.001, 0.0005, -0.0005])
    assert quiet is not None and quiet.enough(1.0)
    noisy = endpoints_power([0.02, -0.015, 0.01, -0.02, 0.015, -0.01])
    assert noisy is not None and noisy.mde_pct > 1.0 and not noisy.enough(1.0)
    assert endpoints_power([0.01]) is None


class TwoSteps:
    """Pairs from a machine with steps at `steps` (log effects), seeded noise."""

    def __init__(self, steps: dict[int, float], noise: float, seed: int = 0) -> None:
        self.steps, self.noise = steps, noise
        self.rng = np.random.default_rng(seed)
        self.runs = 0

    def pair(self, commit: int, reference: int = 0) -> Pair:
        self.runs += 2
        jump = sum(effect for at, effect in self.steps.items() if commit >= at > reference)
        return Pair(commit, reference, jump + self.noise * float(self.rng.standard_normal()))

    def endpoints(self, commits: int, changed: bool = True):  # type: ignore[no-untyped-def]
        return lambda: (tuple(self.pair(commits) for _ in range(3)), changed)

    def measure(self, commits: Sequence[int], reference: int) -> Measured:
        return Measured(tuple(self.pair(c, reference) for c in commits))


def test_two_culprits_are_more_than_one_step() -> None:
    machine = TwoSteps({8: math.log(1.05), 20: math.log(1.05)}, 0.005)
    plan = SearchPlan(32, floor_pct=1.0, steps_alpha=0.01)
    result = search(plan, machine.endpoints(32), machine.measure, lambda: machine.runs)
    assert result.outcome is Outcome.MULTIPLE_STEPS
    # each step is named by the first commit the pairs cannot tell from it (20 was not probed, 16 was)
    assert result.steps is not None and result.steps.steps[0] == 8 and 16 < result.steps.steps[1] <= 20


def test_one_culprit_is_named_once_its_neighbours_show_the_step() -> None:
    machine = TwoSteps({13: math.log(1.10)}, 0.005)
    plan = SearchPlan(24, floor_pct=1.0, steps_alpha=0.01, neighbour_rule=2)
    result = search(plan, machine.endpoints(24), machine.measure, lambda: machine.runs)
    assert result.outcome is Outcome.CULPRIT and result.culprit == 13
    assert any(p.probe == 13 and p.reference == 12 for p in result.pairs)  # the step's own pair
    # rule 1 (a plan from before the rules were numbered): 3 pairs a side against GOOD
    machine = TwoSteps({13: math.log(1.10)}, 0.005)
    first = search(SearchPlan(24, floor_pct=1.0, steps_alpha=0.01), machine.endpoints(24), machine.measure,
                   lambda: machine.runs)
    probes = [p.probe for p in first.pairs]
    assert first.outcome is Outcome.CULPRIT and first.culprit == 13
    assert probes.count(12) >= 3 and probes.count(13) >= 3 and all(p.reference == 0 for p in first.pairs)
    # a plan from before the checks names it without them
    machine = TwoSteps({13: math.log(1.10)}, 0.005)
    old = search(SearchPlan(24), machine.endpoints(24), machine.measure, lambda: machine.runs)
    assert old.outcome is Outcome.CULPRIT and old.steps is None and len(old.pairs) < len(result.pairs)


def test_endpoints_without_power_are_inconclusive() -> None:
    noisy = TwoSteps({}, 0.02)
    plan = SearchPlan(8, floor_pct=1.0, steps_alpha=0.01)
    result = search(plan, noisy.endpoints(8, changed=False), noisy.measure, lambda: noisy.runs)
    assert result.outcome is Outcome.INCONCLUSIVE and result.endpoints is not None
    assert result.endpoints.mde_pct > 1.0
    quiet = TwoSteps({}, 0.0005)
    result = search(plan, quiet.endpoints(8, changed=False), quiet.measure, lambda: quiet.runs)
    assert result.outcome is Outcome.NO_CHANGE and result.endpoints is not None
    assert search(SearchPlan(8), noisy.endpoints(8, changed=False), noisy.measure,
                  lambda: noisy.runs).outcome is Outcome.NO_CHANGE  # a plan from before: as it was

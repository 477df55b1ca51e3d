"""gatekit.bisect.search with a deterministic machine: the outcomes, skipped commits and the budget."""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from gatekit.bisect.posterior import Pair
from gatekit.bisect.search import Measured, Outcome, SearchPlan, search

STEP = math.log(1.10)  # a 10 % slowdown


class Machine:
    """Runs with a small seeded noise; commits in `unbuildable` are reported skipped."""

    def __init__(self, culprit: int, unbuildable: Sequence[int] = (), seed: int = 0) -> None:
        self.culprit, self.unbuildable = culprit, set(unbuildable)
        self.rng = np.random.default_rng(seed)
        self.runs = 0
        self.probed: list[int] = []

    def pair(self, commit: int, reference: int = 0) -> Pair:
        self.runs += 2
        jump = STEP * ((commit >= self.culprit) - (reference >= self.culprit))
        return Pair(commit, reference, jump + 0.005 * float(self.rng.standard_normal()))

    def endpoints(self, commits: int, changed: bool | None = True):  # type: ignore[no-untyped-def]
        return lambda: (tuple(self.pair(commits) for _ in range(3)), changed)

    def measure(self, commits: Sequence[int], reference: int) -> Measured:
        self.probed.extend(commits)
        built = [c for c in commits if c not in self.unbuildable]
        return Measured(tuple(self.pair(c, reference) for c in built),
                        frozenset(c for c in commits if c in self.unbuildable))


def test_names_the_culprit_with_one_and_two_probes_at_once() -> None:
    for width in (1, 2):
        machine = Machine(culprit=13)
        result = search(SearchPlan(24, max_parallel=width), machine.endpoints(24), machine.measure,
                        lambda: machine.runs)
        assert result.outcome is Outcome.CULPRIT and result.culprit == 13
        assert max(result.probabilities) >= 0.95 and result.credible == (13,)
        assert machine.runs == 2 * len(result.pairs) and len(result.pairs) < 24  # fewer probes than commits


def test_a_skipped_culprit_leaves_a_credible_set_of_it_and_its_neighbour() -> None:
    machine = Machine(culprit=13, unbuildable=[13])
    result = search(SearchPlan(24), machine.endpoints(24), machine.measure, lambda: machine.runs)
    # 13 cannot be probed: 12 good and 14 bad leave 13 and 14 indistinguishable
    assert result.outcome is Outcome.CREDIBLE_SET and set(result.credible) == {13, 14}
    assert 13 in result.skipped and machine.probed.count(13) == 1  # tried once, never again


def test_no_change_invalid_and_budget() -> None:
    machine = Machine(culprit=5)
    assert search(SearchPlan(8), machine.endpoints(8, changed=False), machine.measure,
                  lambda: machine.runs).outcome is Outcome.NO_CHANGE
    assert search(SearchPlan(8), machine.endpoints(8, changed=None), machine.measure,
                  lambda: machine.runs).outcome is Outcome.INVALID
    machine = Machine(culprit=5, unbuildable=range(1, 8))
    assert search(SearchPlan(8), machine.endpoints(8), machine.measure, lambda: machine.runs).outcome \
        is Outcome.INVALID
    machine = Machine(culprit=5)
    result = search(SearchPlan(64, budget=10), machine.endpoints(64), machine.measure, lambda: machine.runs)
    assert result.outcome is Outcome.CREDIBLE_SET and machine.runs <= 10


def test_a_resumed_search_continues_from_its_pairs() -> None:
    machine = Machine(culprit=6)
    first = search(SearchPlan(16, budget=12), machine.endpoints(16), machine.measure, lambda: machine.runs)
    assert first.outcome is Outcome.CREDIBLE_SET
    calls: list[int] = []

    def endpoints_never():  # type: ignore[no-untyped-def]
        calls.append(1)
        raise AssertionError("a resumed search does not measure the endpoints again")

    done = search(SearchPlan(16), endpoints_never, machine.measure, lambda: machine.runs, pairs=first.pairs,
                  skipped=first.skipped, rounds=first.rounds)
    assert done.outcome is Outcome.CULPRIT and done.culprit == 6 and not calls
    assert done.pairs[:len(first.pairs)] == first.pairs


class NoisyMachine(Machine):
    """Noise of 4 % a pair: the step's own pairs then take more than one round to show it."""

    def pair(self, commit: int, reference: int = 0) -> Pair:
        self.runs += 2
        jump = STEP * ((commit >= self.culprit) - (reference >= self.culprit))
        return Pair(commit, reference, jump + 0.04 * float(self.rng.standard_normal()))


def test_a_resumed_search_replays_where_each_commit_first_held_the_confidence() -> None:
    # neighbour rule 2 judges only the pairs after the look at which the commit first held the confidence: a
    # search stopped by its budget at any round and resumed with its round ends runs exactly as one that was not
    # (without them, this seed cut at 26 or 28 runs judges fewer of the step's own pairs and runs differently)
    plan = SearchPlan(24, floor_pct=1.0, steps_alpha=0.01, neighbour_rule=2)
    whole = NoisyMachine(culprit=13, seed=20)
    done = search(plan, whole.endpoints(24), whole.measure, lambda: whole.runs)
    assert done.outcome is Outcome.CULPRIT and done.culprit == 13
    assert any(p.reference == 12 for p in done.pairs)
    for budget in range(8, whole.runs, 2):
        machine = NoisyMachine(culprit=13, seed=20)
        ends: list[int] = []
        pairs: list[Pair] = []

        def measure(commits: Sequence[int], reference: int) -> Measured:
            measured = machine.measure(commits, reference)
            pairs.extend(measured.pairs)
            ends.append(len(pairs))
            return measured

        def endpoints():  # type: ignore[no-untyped-def]
            first, changed = machine.endpoints(24)()
            pairs.extend(first)
            ends.append(len(pairs))
            return first, changed

        cut = search(dataclasses.replace(plan, budget=budget), endpoints, measure, lambda: machine.runs)
        resumed = search(plan, endpoints, machine.measure, lambda: machine.runs, cut.pairs, cut.skipped, cut.rounds,
                         ends)
        assert resumed.pairs == done.pairs and resumed.outcome is done.outcome, budget

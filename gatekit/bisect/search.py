"""The bisect's search, once for the command and the simulation: the endpoints, then rounds of probes chosen
from the posterior, until the preregistered stop. Where the runs come from is the caller's: `measure` runs
pairs (a simulated machine, or probes on an engine) and says which commits could not be built."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from gatekit.bisect.checks import EndpointsPower, StepsTest, confirming_sides, endpoints_power, held_since, \
    neighbour_rule, second_step_test, step_confirmed, unconfirmed_sides
from gatekit.bisect.posterior import Pair, best_probes, binary_information, credible_set, cumulative, \
    noise_estimate, posterior

MIN_BITS = 1e-3  # a probe expected to tell less than this about the culprit is not worth its runs
# Pairs per probe (`--pairs-per-probe`, preregistered): the posterior estimates the noise from every pair of the
# bisect, so one pair a probe is what the model needs; a probe's gate series then has one run per arm and leaves
# the decision to the posterior (gatekit.bisect.run). The simulation counts the same.
PROBE_PAIRS = 1


class Outcome(enum.Enum):
    CULPRIT = "culprit"  # one commit holds the confidence
    CREDIBLE_SET = "credible_set"  # the budget is spent (or nothing probeable is left to tell): the set is the answer
    NO_CHANGE = "no_change"  # the endpoints do not differ, and could have shown a change of the floor
    INCONCLUSIVE = "inconclusive"  # the endpoints' gate saw no change, but their pairs lack the power to say none
    MULTIPLE_STEPS = "multiple_steps"  # one step does not explain the pairs (checks.second_step_test)
    INVALID = "invalid"  # the endpoints could not be measured, or every commit between them was skipped


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """What is fixed before the first run (preregistered)."""

    commits: int  # N: commits 0 (GOOD) … N (BAD)
    confidence: float = 0.95
    budget: int = 400  # runs, endpoints and references included
    max_parallel: int = 1
    pairs_per_probe: int = PROBE_PAIRS  # each probe's pairs (two runs each) in one round
    # None (a plan from before these checks): no_change without a power check, no test for a second step
    floor_pct: float | None = None  # the change the endpoints must be able to show before no_change is said
    steps_alpha: float | None = None  # the level of the test for more than one step
    # how a named step must show between its neighbours (checks.NEIGHBOUR_RULES); None with steps_alpha: rule 1
    neighbour_rule: int | None = None


@dataclass(frozen=True, slots=True)
class Measured:
    """What one call of `measure` brought back: the pairs, and the commits found unbuildable (skipped)."""

    pairs: tuple[Pair, ...] = ()
    skipped: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class SearchResult:
    outcome: Outcome
    pairs: tuple[Pair, ...]
    probabilities: tuple[float, ...]  # P(culprit = k), k = 1 … N; empty when the search stopped at the endpoints
    credible: tuple[int, ...]  # commits holding the confidence, most likely first
    skipped: frozenset[int] = field(default_factory=frozenset)
    rounds: int = 0
    endpoints: EndpointsPower | None = None  # what the endpoint pairs can tell (when they showed no change)
    steps: StepsTest | None = None  # the test for a second step at the stop

    @property
    def culprit(self) -> int | None:
        """The named commit: the one of a `culprit` outcome, else the most likely one (None: no posterior)."""
        return self.credible[0] if self.credible else None


Endpoints = Callable[[], "tuple[tuple[Pair, ...], bool | None]"]  # the pairs, changed? (None: could not measure)
Measure = Callable[[Sequence[int], int], Measured]  # the commits to probe, against this reference


def search(plan: SearchPlan, endpoints: Endpoints, measure: Measure, runs_so_far: Callable[[], int],
           pairs: Sequence[Pair] = (), skipped: frozenset[int] = frozenset(), rounds: int = 1,
           round_ends: Sequence[int] = ()) -> SearchResult:
    """Run the search. `endpoints` is called only when `pairs` is empty (a resumed search brings its pairs in the
    order of their rounds, the pair count at the end of each round, skipped commits and rounds); each round
    `measure` gets the commits to probe and their reference (GOOD, or the commit before a named one for the
    step's own pairs), `plan.pairs_per_probe` pairs each."""
    pairs = list(pairs)
    if not pairs:
        first, changed = endpoints()
        if changed is None:
            return SearchResult(Outcome.INVALID, tuple(first), (), (), skipped, rounds)
        if not changed:
            outcome, power = endpoints_outcome(first, plan.floor_pct)
            return SearchResult(outcome, tuple(first), (), (), skipped, rounds, power)
        pairs = list(first)
    skipped = frozenset(skipped)
    n = plan.commits
    rule = neighbour_rule(plan.neighbour_rule)
    # where each commit first held the confidence alone: a rule of fresh pairs judges only the pairs after it
    ends = [0, *round_ends]
    held = held_since([pairs[a:b] for a, b in zip(ends, ends[1:])], n, plan.confidence) if rule.fresh else {}
    while True:
        probabilities = posterior(pairs, n)
        credible = tuple(credible_set(probabilities, plan.confidence))
        confirming: list[int] = []
        if len(credible) == 1:
            named = credible[0]
            since = held.setdefault(named, len(pairs))
            if plan.steps_alpha is None or step_confirmed(pairs, n, named, rule, since):
                return stopped(plan, Outcome.CULPRIT, pairs, probabilities, credible, skipped, rounds)
            # the step's neighbours must show it in pairs of their own (checks: a culprit's own step)
            confirming = [c for c in confirming_sides(pairs, named, rule, since) if c < n and c not in skipped
                          and not (rule.direct and named - 1 in skipped)]
            unconfirmed = unconfirmed_sides(pairs, named, rule, since)
            confirming = [c for c in confirming if c in unconfirmed] if unconfirmed else confirming
            if not confirming:
                return stopped(plan, Outcome.CREDIBLE_SET, pairs, probabilities, credible, skipped, rounds)
        probeable = [c for c in range(1, n) if c not in skipped]
        if not probeable:
            outcome = Outcome.INVALID if n > 1 else Outcome.CREDIBLE_SET
            return SearchResult(outcome, tuple(pairs), tuple(probabilities), credible, skipped, rounds)
        delta, noise = noise_estimate(pairs, probabilities, n)
        snr = abs(delta) / max(noise, 1e-12)
        width = min(plan.max_parallel, (plan.budget - runs_so_far()) // (2 * plan.pairs_per_probe))
        q = cumulative(probabilities)
        informative = binary_information(q[np.array(probeable)], snr).max() >= MIN_BITS
        if width < 1 or not (informative or confirming):
            return stopped(plan, Outcome.CREDIBLE_SET, pairs, probabilities, credible, skipped, rounds)
        chosen = confirming[:width] if confirming else best_probes(probabilities, snr, probeable, width)
        # a rule of the step's own pairs runs the named commit against the one before it; else GOOD
        reference = chosen[0] - 1 if confirming and rule.direct else 0
        rounds += 1
        measured = measure(chosen, reference)
        pairs.extend(measured.pairs)
        skipped = skipped | measured.skipped


def endpoints_outcome(pairs: Sequence[Pair], floor_pct: float | None) -> tuple[Outcome, EndpointsPower | None]:
    """The outcome of endpoints whose gate saw no change: `no_change` when their pairs could have shown a change
    of `floor_pct` (checks.endpoints_power), else `inconclusive`; a plan without a floor says `no_change`."""
    if floor_pct is None:
        return Outcome.NO_CHANGE, None
    power = endpoints_power([p.log_diff for p in pairs])
    return (Outcome.NO_CHANGE if power is not None and power.enough(floor_pct) else Outcome.INCONCLUSIVE), power


def step_outcome(outcome: Outcome, pairs: Sequence[Pair], commits: int, named: int,
                 steps_alpha: float | None) -> tuple[Outcome, StepsTest | None]:
    """A stop's outcome after the test for a second step beside the named commit: `multiple_steps` when it
    rejects at `steps_alpha` (None: not tested, a plan from before the test)."""
    if steps_alpha is None:
        return outcome, None
    test = second_step_test(pairs, commits, named)
    return (Outcome.MULTIPLE_STEPS if test is not None and test.rejects(steps_alpha) else outcome), test


def stopped(plan: SearchPlan, outcome: Outcome, pairs: Sequence[Pair], probabilities: np.ndarray,
            credible: tuple[int, ...], skipped: frozenset[int], rounds: int) -> SearchResult:
    outcome, test = step_outcome(outcome, pairs, plan.commits, credible[0], plan.steps_alpha)
    return SearchResult(outcome, tuple(pairs), tuple(probabilities), credible, skipped, rounds, steps=test)

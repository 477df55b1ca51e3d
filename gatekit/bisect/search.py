"""The bisect's search, once for the command and the simulation: the endpoints, then rounds of probes chosen
from the posterior, until the preregistered stop. Where the runs come from is the caller's: `measure` runs
pairs (a simulated machine, or probes on an engine) and says which commits could not be built."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

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
    NO_CHANGE = "no_change"  # the endpoints do not differ
    INVALID = "invalid"  # the endpoints could not be measured, or every commit between them was skipped


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """What is fixed before the first run (preregistered)."""

    commits: int  # N: commits 0 (GOOD) … N (BAD)
    confidence: float = 0.95
    budget: int = 400  # runs, endpoints and references included
    max_parallel: int = 1
    pairs_per_probe: int = PROBE_PAIRS  # each probe's pairs (two runs each) in one round


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

    @property
    def culprit(self) -> int | None:
        """The named commit: the one of a `culprit` outcome, else the most likely one (None: no posterior)."""
        return self.credible[0] if self.credible else None


Endpoints = Callable[[], "tuple[tuple[Pair, ...], bool | None]"]  # the pairs, changed? (None: could not measure)
Measure = Callable[[Sequence[int]], Measured]


def search(plan: SearchPlan, endpoints: Endpoints, measure: Measure, runs_so_far: Callable[[], int],
           pairs: Sequence[Pair] = (), skipped: frozenset[int] = frozenset(), rounds: int = 1) -> SearchResult:
    """Run the search. `endpoints` is called only when `pairs` is empty (a resumed search brings its pairs,
    skipped commits and rounds); each round `measure` gets the commits to probe, `plan.pairs_per_probe` pairs
    each."""
    pairs = list(pairs)
    if not pairs:
        first, changed = endpoints()
        if changed is None:
            return SearchResult(Outcome.INVALID, tuple(first), (), (), skipped, rounds)
        if not changed:
            return SearchResult(Outcome.NO_CHANGE, tuple(first), (), (), skipped, rounds)
        pairs = list(first)
    skipped = frozenset(skipped)
    n = plan.commits
    while True:
        probabilities = posterior(pairs, n)
        credible = tuple(credible_set(probabilities, plan.confidence))
        if len(credible) == 1:
            return SearchResult(Outcome.CULPRIT, tuple(pairs), tuple(probabilities), credible, skipped, rounds)
        probeable = [c for c in range(1, n) if c not in skipped]
        if not probeable:
            outcome = Outcome.INVALID if n > 1 else Outcome.CREDIBLE_SET
            return SearchResult(outcome, tuple(pairs), tuple(probabilities), credible, skipped, rounds)
        delta, noise = noise_estimate(pairs, probabilities, n)
        snr = abs(delta) / max(noise, 1e-12)
        width = min(plan.max_parallel, (plan.budget - runs_so_far()) // (2 * plan.pairs_per_probe))
        q = cumulative(probabilities)
        informative = binary_information(q[np.array(probeable)], snr).max() >= MIN_BITS
        if width < 1 or not informative:
            return SearchResult(Outcome.CREDIBLE_SET, tuple(pairs), tuple(probabilities), credible, skipped, rounds)
        chosen = best_probes(probabilities, snr, probeable, width)
        rounds += 1
        measured = measure(chosen)
        pairs.extend(measured.pairs)
        skipped = skipped | measured.skipped

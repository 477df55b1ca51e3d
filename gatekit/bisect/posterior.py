"""The one-step-change model of a bisect, as pure statistics over plain sequences.

Commits are numbered 0 (GOOD) … N (BAD). The culprit k ∈ {1, …, N} is the first commit whose level differs:
a run at commit i has log value μ_t + δ·[i ≥ k] + ε, ε ~ N(0, σ²), where μ_t is the machine's level at the
time of the run. Every measurement is a *pair*: one run of a probed commit p and one of a reference commit r,
run back to back, so μ_t cancels in their log difference

    d = log x_p − log x_r = δ·a(k) + e,   a(k) = [p ≥ k] − [r ≥ k] ∈ {−1, 0, 1},   e ~ N(0, s²).

For a given k this is a linear model with one coefficient δ. With a flat prior on δ and p(s) ∝ 1/s (both
preregistered, neither looks at the data), δ and s integrate out in closed form (Gelman et al., *Bayesian Data
Analysis*, 3rd ed., §14.2, the marginal likelihood of a normal linear model with the noninformative prior):

    p(d | k) ∝ (Σ a²)^(−1/2) · SSE(k)^(−(n−1)/2),   SSE(k) = Σ d² − (Σ a·d)² / Σ a²,

n the number of pairs. The constants are the same for every k, so the posterior over the culprit is this times
the prior (uniform over the commits that can be told apart), normalised. The endpoints' own pairs (p = N,
r = 0: a = 1 whatever k is) make Σ a² > 0 for every k, so the model is defined from the first look.

The next probe is chosen for its expected information per run: a pair at commit i against GOOD observes
X = [i ≥ k] through Gaussian noise, so its mutual information with the culprit is I(X; d), a function of
q = P(k ≤ i) and of the signal-to-noise ratio δ/s alone — largest where q is nearest ½.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

QUADRATURE_POINTS = 81  # Gauss–Hermite nodes for I(X; d); exact to < 1e-6 bit for |δ/s| ≤ 20


@dataclass(frozen=True, slots=True)
class Pair:
    """One measurement: the log difference of a run of `probe` and the run of `reference` beside it."""

    probe: int  # commit index, 0 = GOOD … N = BAD
    reference: int
    log_diff: float  # log x_probe − log x_reference


def design(pairs: Sequence[Pair], commits: int) -> np.ndarray:
    """a_j(k) for every pair j (rows) and culprit k = 1 … N (columns): [p ≥ k] − [r ≥ k]."""
    culprits = np.arange(1, commits + 1)
    probe = np.array([p.probe for p in pairs])[:, None]
    reference = np.array([p.reference for p in pairs])[:, None]
    return (probe >= culprits).astype(float) - (reference >= culprits).astype(float)


def log_evidence(pairs: Sequence[Pair], commits: int) -> np.ndarray:
    """log p(d | k) up to a constant, for k = 1 … N (see the module's docstring). −inf where the data cannot
    identify δ (Σ a² = 0) — never the case once the endpoints' pairs are in."""
    if len(pairs) < 2:
        raise ValueError("the one-step model needs at least two pairs (one to estimate δ, one for the noise)")
    a = design(pairs, commits)
    d = np.array([p.log_diff for p in pairs])
    saa = (a * a).sum(axis=0)
    sad = (a * d[:, None]).sum(axis=0)
    sdd = float(d @ d)
    with np.errstate(divide="ignore", invalid="ignore"):
        sse = np.where(saa > 0, sdd - np.where(saa > 0, sad * sad / np.where(saa > 0, saa, 1.0), 0.0), np.nan)
        # pairs that fit exactly (no noise at all): a floor keeps the logarithm finite and the ranking right
        sse = np.maximum(sse, 1e-300)
        out = -0.5 * np.log(saa) - 0.5 * (len(pairs) - 1) * np.log(sse)
    return np.where(saa > 0, out, -np.inf)


def posterior(pairs: Sequence[Pair], commits: int, prior: Sequence[float] | None = None) -> np.ndarray:
    """P(culprit = k | pairs) for k = 1 … N; `prior` (length N, default uniform) may be zero where a commit
    is known not to be the culprit."""
    weights = np.ones(commits) if prior is None else np.asarray(prior, dtype=float)
    logp = log_evidence(pairs, commits) + np.log(np.where(weights > 0, weights, 1.0))
    logp = np.where(weights > 0, logp, -np.inf)
    logp -= logp.max()
    p = np.exp(logp)
    return p / p.sum()


def effect_estimate(pairs: Sequence[Pair], commits: int, culprit: int) -> tuple[float, float, int]:
    """δ̂, its standard error and the degrees of freedom (n − 1) given the culprit (least squares of d on a)."""
    a = design(pairs, commits)[:, culprit - 1]
    d = np.array([p.log_diff for p in pairs])
    saa = float(a @ a)
    delta = float(a @ d) / saa
    dof = len(pairs) - 1
    sse = float(((d - delta * a) ** 2).sum())
    return delta, math.sqrt(sse / dof / saa) if dof > 0 else math.inf, dof


def noise_estimate(pairs: Sequence[Pair], probabilities: np.ndarray, commits: int) -> tuple[float, float]:
    """δ and s averaged over the posterior (the plug-in values the probe choice uses)."""
    a = design(pairs, commits)
    d = np.array([p.log_diff for p in pairs])
    saa = (a * a).sum(axis=0)
    deltas = (a * d[:, None]).sum(axis=0) / saa
    sse = ((d[:, None] - deltas[None, :] * a) ** 2).sum(axis=0)
    s = np.sqrt(sse / max(len(pairs) - 1, 1))
    return float(probabilities @ deltas), float(probabilities @ s)


def binary_information(q: np.ndarray, snr: float) -> np.ndarray:
    """I(X; d) in bits for X ~ Bernoulli(q) seen as d ~ N(snr·X, 1): H(d) − H(d | X), by Gauss–Hermite
    quadrature over each component of the mixture."""
    q = np.clip(np.asarray(q, dtype=float), 0.0, 1.0)
    nodes, weights = _quadrature()

    def log_mix(x: np.ndarray) -> np.ndarray:  # log of the mixture density (up to the Gaussian constant)
        lo = np.log(np.maximum(1.0 - q[..., None], 1e-300)) - 0.5 * x * x  # q = 1: that component has no weight
        hi = np.log(np.maximum(q[..., None], 1e-300)) - 0.5 * (x - snr) ** 2
        return np.logaddexp(lo, hi)

    # E[-log f(d)] under each component, f the mixture; the component's own entropy is the same for both
    cross0 = -(log_mix(nodes[None, :]) @ weights)
    cross1 = -(log_mix(nodes[None, :] + snr) @ weights)
    entropy_d = (1 - q) * cross0 + q * cross1
    own = 0.5  # E[x²/2] of a unit normal: the entropy of d given X, same constant dropped
    return np.maximum(entropy_d - own, 0.0) / math.log(2)


@functools.lru_cache(maxsize=1)
def _quadrature() -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Hermite nodes and weights (normalised) for a unit normal: computed once (an eigenproblem each time
    was most of a simulated bisect's time)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(QUADRATURE_POINTS)
    return nodes, weights / weights.sum()


def cumulative(probabilities: np.ndarray) -> np.ndarray:
    """q_i = P(k ≤ i) for i = 0 … N (q_0 = 0, q_N = 1)."""
    return np.concatenate([[0.0], np.cumsum(probabilities)])


def best_probes(probabilities: np.ndarray, snr: float, probeable: Sequence[int], count: int) -> list[int]:
    """The commits to probe next. One probe: the probeable commit whose pair against GOOD carries the most
    expected information. Several at once: the commits nearest the posterior's j/(count+1) quantiles (each
    the most informative of its share; noise-free they split the culprit into count+1 equal parts), distinct."""
    q = cumulative(probabilities)
    candidates = np.array(sorted(set(probeable)))
    if candidates.size == 0:
        return []
    info = binary_information(q[candidates], snr)
    if count == 1:
        return [int(candidates[int(np.argmax(info))])]
    chosen: list[int] = []
    for j in range(1, count + 1):
        target = j / (count + 1)
        order = np.argsort(np.abs(q[candidates] - target), kind="stable")
        for index in order:
            commit = int(candidates[index])
            if commit not in chosen:
                chosen.append(commit)
                break
    return sorted(chosen)


def credible_set(probabilities: np.ndarray, level: float) -> list[int]:
    """The fewest culprits (1-based commit indices) whose posterior adds up to `level`, most likely first."""
    order = np.argsort(-probabilities, kind="stable")
    total, chosen = 0.0, []
    for index in order:
        chosen.append(int(index) + 1)
        total += float(probabilities[index])
        if total >= level - 1e-12:
            break
    return chosen

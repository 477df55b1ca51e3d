"""`gate simulate-bisect`: Monte-Carlo of a bisect under a noise scenario, beside a Pinpoint-style baseline.

Commits 0 (GOOD) … N (BAD); the culprit is drawn uniformly from 1 … N; a run at commit i has log value
log(1 + effect)·[i ≥ culprit] + σ·ε, σ = sqrt(log(1 + CV²)), ε standard normal. With a second effect, a second
culprit is drawn uniformly from the other commits and adds log(1 + second effect)·[i ≥ second culprit]. Every
trainer execution is counted as a run, the endpoints' and the references' included.

- gatekit: the endpoints as a classic gate (n pairs GOOD/BAD; the bisect goes on only if the classic rule
  shows a change either way; when it does not, once, n more pairs and the rule judges all 2n), then rounds
  of up to `max_parallel` probes, each `pairs_per_probe` pairs (a run of the probed commit beside a run of GOOD,
  or of the commit before it for a named step's own pairs; two, as `gate bisect` runs them), chosen
  and judged by `posterior`, until one commit holds `confidence` of the posterior or the budget is spent
  (then the most likely commit is its answer); endpoints that show no change are `no_change` only with the
  power to show the floor, else `inconclusive`, and a stop whose pairs need a second step is `multiple_steps`
  (gatekit.bisect.checks), as `gate bisect` preregisters them.
- Pinpoint-style baseline (Chromium's Pinpoint, as its documentation and code describe it): 10 runs at each
  probed commit, unpaired; adjacent probed commits compared by p = min(Kolmogorov–Smirnov, Mann–Whitney U):
  different below 0.01, the same above `BASELINE_HIGH_P`, unknown between (10 more runs at both, up to
  `BASELINE_MAX_RUNS` per commit; still unknown then: the smaller p decides); with `max_parallel` ≥ 3, two
  levels of speculative midpoints run in one round (each round probes the midpoint and its two children).
  Pinpoint's own "high" threshold comes from a table by effect size and sample size; a fixed 0.05 stands in.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np
from scipy import stats as scipy_stats

from gatekit.bisect.checks import NEIGHBOUR_RULE, STEPS_ALPHA
from gatekit.bisect.posterior import Pair
from gatekit.bisect.search import PROBE_PAIRS, Measured, Outcome, SearchPlan, search

BASELINE_RUNS = 10
BASELINE_LOW_P = 0.01
BASELINE_HIGH_P = 0.05
BASELINE_MAX_RUNS = 40
DEFAULT_DRAWS = 1000
ENDPOINT_PAIRS = 3  # the gate's default n
ENDPOINT_SIGMA_K = 2.0  # the classic threshold: max(2·σ_off, 1 %)
ENDPOINT_FLOOR_PCT = 1.0


@dataclass(frozen=True, slots=True)
class BisectScenario:
    commits: int = 128
    effect_pct: float = 2.0
    cv_pct: float = 0.5
    max_parallel: int = 1
    confidence: float = 0.95
    budget: int = 400  # runs, endpoints and references included
    endpoint_pairs: int = ENDPOINT_PAIRS
    pairs_per_probe: int = PROBE_PAIRS
    second_effect_pct: float = 0.0  # a second culprit's step (0: one culprit)
    floor_pct: float = ENDPOINT_FLOOR_PCT
    steps_alpha: float = STEPS_ALPHA
    neighbour_rule: int = NEIGHBOUR_RULE  # checks.NEIGHBOUR_RULES


@dataclass(frozen=True, slots=True)
class MethodResult:
    method: str
    draws: int
    right_culprit: float  # fraction of draws that named the true culprit
    right_culprit_se: float
    mean_runs: float
    mean_rounds: float
    stopped_on_budget: float  # gatekit: fraction ending as a credible set; baseline: 0
    no_change: float  # fraction stopped at the endpoints (their comparison showed no change)
    inconclusive: float = 0.0  # fraction stopped at endpoints that lacked the power to say no_change
    multiple_steps: float = 0.0  # fraction ending `multiple_steps`
    # a commit that is no culprit named: gatekit at the confidence (outcome culprit); the baseline at all
    wrong_named: float = 0.0

    @property
    def right_when_bisected(self) -> float:
        """The right-culprit rate among the bisects that got past the endpoints."""
        stopped = self.no_change + self.inconclusive
        return self.right_culprit / (1.0 - stopped) if stopped < 1 else 0.0


@dataclass(frozen=True, slots=True)
class BisectSimulation:
    scenario: BisectScenario
    gatekit: MethodResult
    baseline: MethodResult

    def to_dict(self) -> dict[str, Any]:
        methods = {name: {**asdict(m), "right_when_bisected": m.right_when_bisected}
                   for name, m in (("gatekit", self.gatekit), ("baseline", self.baseline))}
        return {"scenario": asdict(self.scenario), **methods, "runs_ratio": self.gatekit.mean_runs / self.baseline.mean_runs}


class _Machine:
    """Draws run values for one simulated bisect."""

    def __init__(self, scenario: BisectScenario, culprits: tuple[int, int], rng: np.random.Generator) -> None:
        self.shift = math.log1p(scenario.effect_pct / 100.0)
        self.second_shift = math.log1p(scenario.second_effect_pct / 100.0)
        self.sigma = math.sqrt(math.log1p((scenario.cv_pct / 100.0) ** 2))
        self.culprit, self.second = culprits
        self.rng = rng
        self.runs = 0

    def log_runs(self, commit: int, count: int) -> np.ndarray:
        self.runs += count
        level = self.shift * (commit >= self.culprit) + self.second_shift * (commit >= self.second)
        return level + self.sigma * self.rng.standard_normal(count)


def endpoints_differ(good_log: Sequence[float] | np.ndarray, bad_log: Sequence[float] | np.ndarray, *, sigma_k: float = ENDPOINT_SIGMA_K,
                     floor_pct: float = ENDPOINT_FLOOR_PCT) -> bool:
    """The classic gate's rule on the endpoints, either direction: |Δ| ≥ max(sigma_k·σ_off, floor_pct), σ_off
    the GOOD runs' relative standard deviation (`gate bisect` judges its extended endpoints by it too)."""
    good, bad = np.exp(np.asarray(good_log, dtype=float)), np.exp(np.asarray(bad_log, dtype=float))
    delta_pct = (bad.mean() / good.mean() - 1.0) * 100.0
    sigma_pct = good.std(ddof=1) / good.mean() * 100.0
    return bool(abs(delta_pct) >= max(sigma_k * sigma_pct, floor_pct))


def _gatekit_once(scenario: BisectScenario, machine: _Machine) -> tuple[int | None, int, Outcome]:
    """One simulated gatekit bisect: (named culprit or None, rounds, outcome)."""
    n = scenario.commits

    def endpoints() -> tuple[tuple[Pair, ...], bool]:
        good = machine.log_runs(0, scenario.endpoint_pairs)
        bad = machine.log_runs(n, scenario.endpoint_pairs)
        changed = endpoints_differ(good, bad)
        if not changed:
            # one preregistered extension, no chain: n more pairs, and the rule judges all 2n
            good = np.concatenate([good, machine.log_runs(0, scenario.endpoint_pairs)])
            bad = np.concatenate([bad, machine.log_runs(n, scenario.endpoint_pairs)])
            changed = endpoints_differ(good, bad)
            extended.append(True)
        return tuple(Pair(n, 0, float(b - g)) for g, b in zip(good, bad)), changed

    def measure(commits: Sequence[int], reference: int) -> Measured:
        pairs = []
        for commit in commits:
            for _ in range(scenario.pairs_per_probe):
                probe = machine.log_runs(commit, 1)[0]
                beside = machine.log_runs(reference, 1)[0]
                pairs.append(Pair(commit, reference, float(probe - beside)))
        return Measured(tuple(pairs))

    extended: list[bool] = []
    plan = SearchPlan(n, scenario.confidence, scenario.budget, scenario.max_parallel, scenario.pairs_per_probe,
                      scenario.floor_pct, scenario.steps_alpha, scenario.neighbour_rule)
    result = search(plan, endpoints, measure, lambda: machine.runs)
    return result.culprit, result.rounds + len(extended), result.outcome


def _compare(a: np.ndarray, b: np.ndarray) -> tuple[str, float]:
    """Pinpoint's comparison: p = min(KS, MWU); different, same or unknown."""
    p = min(scipy_stats.ks_2samp(a, b).pvalue, scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    if p < BASELINE_LOW_P:
        return "different", p
    return ("same" if p > BASELINE_HIGH_P else "unknown"), p


def _baseline_once(scenario: BisectScenario, machine: _Machine) -> tuple[int | None, int]:
    """One simulated Pinpoint-style bisect: (named culprit or None, rounds)."""
    values: dict[int, np.ndarray] = {}

    def measure(commit: int) -> None:
        values[commit] = np.concatenate([values.get(commit, np.empty(0)), machine.log_runs(commit, BASELINE_RUNS)])

    def judge(lo: int, hi: int) -> tuple[str, float]:
        """Compare two probed commits, adding runs to both while unknown."""
        while True:
            verdict, p = _compare(values[lo], values[hi])
            if verdict != "unknown" or max(len(values[lo]), len(values[hi])) >= BASELINE_MAX_RUNS:
                return verdict, p
            for commit in (lo, hi):
                if len(values[commit]) < BASELINE_MAX_RUNS:
                    measure(commit)

    lo, hi = 0, scenario.commits
    measure(lo)
    measure(hi)
    rounds = 1
    if judge(lo, hi)[0] != "different":
        return None, rounds
    speculate = scenario.max_parallel >= 3
    while hi - lo > 1:
        mid = (lo + hi) // 2
        rounds += 1
        wanted = [mid]
        if speculate:  # the midpoints of both halves too, before knowing which half it is
            wanted += [c for c in ((lo + mid) // 2, (mid + hi) // 2) if c not in (lo, mid, hi)]
        for commit in wanted:
            if commit not in values:
                measure(commit)
        left, left_p = judge(lo, mid)
        right, right_p = judge(mid, hi)
        go_left = (left == "different") if left != right else (left_p <= right_p)
        lo, hi = (lo, mid) if go_left else (mid, hi)
        if speculate and hi - lo > 1:
            # the speculative child of the chosen half is probed already: one more level in this round
            mid = (lo + hi) // 2
            if mid in values:
                left, left_p = judge(lo, mid)
                right, right_p = judge(mid, hi)
                go_left = (left == "different") if left != right else (left_p <= right_p)
                lo, hi = (lo, mid) if go_left else (mid, hi)
    return hi, rounds


def _second_culprits(rng: np.random.Generator, first: np.ndarray, commits: int, wanted: bool) -> np.ndarray:
    """A second culprit per draw, uniform over the commits other than the first (past BAD, never reached: none)."""
    if not wanted:
        return np.full(first.size, commits + 1)
    other = rng.integers(1, commits, size=first.size)  # 1 … N − 1, then shifted past the first culprit
    return other + (other >= first)


def simulate_bisect(scenario: BisectScenario, *, draws: int = DEFAULT_DRAWS, seed: int = 0) -> BisectSimulation:
    """Both methods on the same drawn culprits (each its own noise stream)."""
    rng = np.random.default_rng(seed)
    culprits = rng.integers(1, scenario.commits + 1, size=draws)
    seconds = _second_culprits(rng, culprits, scenario.commits, scenario.second_effect_pct != 0 and scenario.commits > 1)
    ours: list[tuple[int | None, Outcome]] = []
    ours_runs, ours_rounds = np.zeros(draws), np.zeros(draws)
    theirs: list[int | None] = []
    theirs_runs, theirs_rounds = np.zeros(draws), np.zeros(draws)
    streams = rng.spawn(2 * draws)
    for index, both in enumerate(zip(culprits.tolist(), seconds.tolist())):
        machine = _Machine(scenario, both, streams[2 * index])
        named, rounds, outcome = _gatekit_once(scenario, machine)
        ours.append((named, outcome))
        ours_runs[index], ours_rounds[index] = machine.runs, rounds
        machine = _Machine(scenario, both, streams[2 * index + 1])
        named, rounds = _baseline_once(scenario, machine)
        theirs.append(named)
        theirs_runs[index], theirs_rounds[index] = machine.runs, rounds
    truth = [set(both) for both in zip(culprits.tolist(), seconds.tolist())]

    def share(flags: Sequence[bool]) -> float:
        return float(np.mean(flags))

    answered = (Outcome.CULPRIT, Outcome.CREDIBLE_SET)
    right = share([o in answered and named in t for (named, o), t in zip(ours, truth)])
    gatekit = MethodResult(
        "gatekit", draws, right, math.sqrt(right * (1 - right) / draws), float(ours_runs.mean()),
        float(ours_rounds.mean()), share([o is Outcome.CREDIBLE_SET for _, o in ours]),
        share([o is Outcome.NO_CHANGE for _, o in ours]), share([o is Outcome.INCONCLUSIVE for _, o in ours]),
        share([o is Outcome.MULTIPLE_STEPS for _, o in ours]),
        share([o is Outcome.CULPRIT and named not in t for (named, o), t in zip(ours, truth)]))
    right = share([named in t for named, t in zip(theirs, truth)])
    baseline = MethodResult(
        "pinpoint-style", draws, right, math.sqrt(right * (1 - right) / draws), float(theirs_runs.mean()),
        float(theirs_rounds.mean()), 0.0, share([named is None for named in theirs]),
        wrong_named=share([named is not None and named not in t for named, t in zip(theirs, truth)]))
    return BisectSimulation(scenario, gatekit, baseline)


def table(results: list[BisectSimulation]) -> str:
    """A Markdown table: each scenario's two methods side by side, and gatekit's runs as a share of the baseline's."""
    lines = ["| commits | Δ | CV | parallel | method | right culprit | stopped at the endpoints | right when bisected "
             "| mean runs | mean rounds | runs vs baseline |",
             "| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for result in results:
        s = result.scenario
        for method in (result.gatekit, result.baseline):
            share = f"{method.mean_runs / result.baseline.mean_runs:.2f}"
            lines.append(f"| {s.commits} | {effect_text(s)} | {s.cv_pct:g} % | {s.max_parallel} | {method.method} | "
                         f"{method.right_culprit * 100:.1f} ± {method.right_culprit_se * 100:.1f} % | "
                         f"{(method.no_change + method.inconclusive) * 100:.1f} % | "
                         f"{method.right_when_bisected * 100:.1f} % | "
                         f"{method.mean_runs:.1f} | {method.mean_rounds:.1f} | {share} |")
    return "\n".join(lines)


def effect_text(scenario: BisectScenario) -> str:
    """`2 %`, or `1.5 % + 1.5 %` with two culprits."""
    first = f"{scenario.effect_pct:g} %"
    return first if scenario.second_effect_pct == 0 else f"{first} + {scenario.second_effect_pct:g} %"


def outcome_table(results: list[BisectSimulation]) -> str:
    """A Markdown table of how gatekit's bisects ended, ± one Monte-Carlo standard error: the outcomes, and a
    commit that is no culprit named at the confidence (the Pinpoint-style baseline names one without any)."""
    def rate(p: float, draws: int) -> str:
        return f"{100 * p:.1f} ± {100 * math.sqrt(p * (1 - p) / draws):.1f}"

    lines = ["| commits | Δ | CV | draws | right culprit | wrong commit at the confidence | multiple steps "
             "| no change | inconclusive | baseline: right / wrong commit |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for result in results:
        s, ours, theirs = result.scenario, result.gatekit, result.baseline
        lines.append(f"| {s.commits} | {effect_text(s)} | {s.cv_pct:g} % | {ours.draws} | "
                     f"{rate(ours.right_culprit, ours.draws)} | {rate(ours.wrong_named, ours.draws)} | "
                     f"{rate(ours.multiple_steps, ours.draws)} | {rate(ours.no_change, ours.draws)} | "
                     f"{rate(ours.inconclusive, ours.draws)} | "
                     f"{100 * theirs.right_culprit:.1f} / {100 * theirs.wrong_named:.1f} |")
    return "\n".join(lines)

"""The robust policy: decides thousands of heavy-tailed times (what `gate import` reads from hyperfine, pyperf,
pytest-benchmark, Criterion and `go test`) by ranks, so a few runs 5–30× slower move nothing.

The shift is the Hodges–Lehmann estimate of log on − log off (the median of all m·n differences), its interval the
Mann–Whitney inversion (`gatekit.ranks.shift_interval`, two-sided 1 − 2·ALPHA, distribution-free), read against
the floor: adopted when the whole interval lies beyond a floor-sized improvement, regression beyond a floor-sized
slowdown, equivalent inside ±floor, rejected when it rules out a floor-sized improvement, else inconclusive. The
classic threshold max(k·σ_off, floor) decides nothing here: one run 30× slower makes σ_off hundreds of percent.
The one-sided Mann–Whitney p-values (on better, on worse) are recorded for a campaign's false-discovery control.
Guards are the classic guards on the arm means; contamination and retries are the classic rules'.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from scipy import special

from gatekit import ranks
from gatekit.config import RulesSpec, ThresholdSpec
from gatekit.errors import ConfigError
from gatekit.finding import Finding, RankInfo
from gatekit.policies.base import (Decided, Evidence, OneLook, PolicyWords, SimulationDefaults, classic_beside,
                                   guard_reasons, guard_results, guarded_decision)
from gatekit.policies.classic import SeedContamination
from gatekit.policies.duet import CLASSIC_LABEL
from gatekit.policies.sequential import gain_bounds
from gatekit.records import RunRecord
from gatekit.runtable import RunTable
from gatekit.verdict import (CODE_NAMES, INCONCLUSIVE, Decision, Reason, ReasonCode, Verdict,
                             too_noisy_reason)

if TYPE_CHECKING:
    from gatekit.simulate import Scenario

VERSION = 1
METHOD = "hodges-lehmann shift of log values, Mann-Whitney inversion interval"
ALPHA = 0.05  # one-sided: the interval is the two-sided 90 % one


def floor_bounds(floor_pct: float, direction: str) -> tuple[float, float]:
    """The floor as two log bounds on the shift, oriented so lower is better (values of a higher-is-better
    metric are negated first): a floor-sized improvement is below the first, a floor-sized slowdown above the
    second."""
    gain_adopt, gain_regress = gain_bounds(floor_pct, direction)
    return -gain_adopt, -gain_regress


def oriented_logs(values: Sequence[float], direction: str) -> np.ndarray | None:
    """Log values, negated for a higher-is-better metric; None when a value is not positive."""
    array = np.asarray(values, float)
    if array.size == 0 or not np.all(array > 0):
        return None
    logs = np.log(array)
    return logs if direction == "lower" else -logs


def _pct(log_shift: float, direction: str) -> float | None:
    """An oriented log shift as the change of the metric itself, in percent (None for ±inf)."""
    if not math.isfinite(log_shift):
        return None
    return 100 * math.expm1(log_shift if direction == "lower" else -log_shift)


def _p_words(p: float) -> str:
    """A p-value as a reason says it: one that underflows a float is "< 1e-300", not 0."""
    return "< 1e-300" if p < 1e-300 else f"{p:.3g}"


class RobustPolicy(SeedContamination, OneLook, SimulationDefaults):
    """Hodges–Lehmann shift of log values with its Mann–Whitney interval against the floor."""

    name = "robust"

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        level = 100 * (1 - 2 * ALPHA)
        return [
            f"Robust policy v{VERSION}: the shift of log {primary} on - off is the Hodges-Lehmann estimate (the "
            "median of all n_off x n_on differences of the used runs); its interval is the Mann-Whitney "
            f"(rank-sum) inversion at one-sided alpha {ALPHA:g} ({level:g} % two-sided): from the k-th to the "
            "(n_off n_on + 1 - k)-th difference, k the largest count with P(U <= k - 1) <= alpha under no shift "
            f"(exact up to {ranks.EXACT_MAX} runs per arm, normal beyond).",
            f"Decision against the floor {threshold.floor_pct:g} %: adopted when the whole interval is a floor-sized "
            "improvement or more; regression when it is a floor-sized slowdown or more; equivalent when it lies "
            "inside ±floor; rejected when it rules out a floor-sized improvement; else inconclusive. The classic "
            "threshold decides nothing here.",
            "Campaign evidence: the one-sided Mann-Whitney p-values (on better, on worse) of the used runs.",
            "Guards: the classic guards on the arm means; a failed guard fails the gate, a regression stands.",
        ]

    def warnings(self, evidence: Evidence) -> list[str]:
        return list(evidence.guard_warnings)

    def decide(self, classic: Verdict, classified: RunTable, records: Sequence[RunRecord], *, off_arm: str,
               on_arm: str, primary: str, direction: str, guards: Sequence[Any], floor_pct: float,
               warnings: Sequence[str]) -> Decided:
        if classic.decision is Decision.INVALID:
            return Decided(classic)
        used = classified.used
        off_values, on_values = [row.value for row in used.arm(off_arm)], [row.value for row in used.arm(on_arm)]
        checked = guard_results(used, records, guards, off_arm, on_arm)
        guard_lines = guard_reasons(checked)
        beside = classic_beside(classic)
        off_logs, on_logs = oriented_logs(off_values, direction), oriented_logs(on_values, direction)
        if off_logs is None or on_logs is None:
            reason = Reason(ReasonCode.RANK_ESTIMATE,
                            f"{primary}: the robust policy compares log values and an arm holds a value ≤ 0 (or "
                            "none) → inconclusive")
            info = RankInfo(VERSION, METHOD, ALPHA, floor_pct, len(off_values), len(on_values), None)
            return Decided(Verdict(guarded_decision(INCONCLUSIVE, checked), (reason, *guard_lines, beside),
                                   tuple(warnings)), ranks=info)
        interval = ranks.shift_interval(off_logs, on_logs, ALPHA)
        better_log, worse_log = floor_bounds(floor_pct, direction)
        code = ranks.interval_code(interval.low, interval.high, better_log=better_log, worse_log=worse_log)
        p_better, p_worse = ranks.rank_sum_p(off_logs, on_logs)
        # the oriented interval's ends, as changes of the metric: low, high in the metric's own order
        ends = sorted(v for v in (_pct(interval.low, direction), _pct(interval.high, direction)) if v is not None)
        low_pct, high_pct = (ends[0], ends[1]) if len(ends) == 2 else (None, None)
        shift_pct = _pct(interval.shift, direction)
        info = RankInfo(VERSION, METHOD, ALPHA, floor_pct, off_logs.size, on_logs.size, shift_pct, low_pct,
                        high_pct, p_better, p_worse)
        level = 100 * (1 - 2 * ALPHA)
        span = (f"[{low_pct:+.4f} %, {high_pct:+.4f} %]" if low_pct is not None and high_pct is not None
                else "unbounded (too few runs for this level)")
        estimate = Reason(ReasonCode.RANK_ESTIMATE,
                          f"{primary}: Hodges–Lehmann shift {shift_pct:+.4f} % (on vs off, {off_logs.size} + "
                          f"{on_logs.size} runs), {level:g} % Mann–Whitney interval {span}, one-sided p on better "
                          f"{_p_words(p_better)}, worse {_p_words(p_worse)}; floor ±{floor_pct:g} % → "
                          f"{CODE_NAMES[code]}")
        reasons: list[Reason] = [estimate]
        if code == INCONCLUSIVE and low_pct is not None and high_pct is not None:
            reasons.insert(0, too_noisy_reason((high_pct - low_pct) / 2, basis="half the width of its interval"))
        return Decided(Verdict(guarded_decision(code, checked), (*reasons, *guard_lines, beside), tuple(warnings)),
                       ranks=info)

    def one_sided_p(self, finding: Finding) -> tuple[float, float]:
        """(on better, on worse): the Mann–Whitney p-values the finding records (1: none recorded)."""
        info = finding.ranks
        if info is None or info.p_better is None or info.p_worse is None:
            return 1.0, 1.0
        return info.p_better, info.p_worse

    def one_sided_p_arrays(self, off_log: np.ndarray, on_log: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`one_sided_p` of many simulated gates: the rank-sum test, normal with continuity (lower is better)."""
        m, n = off_log.shape[-1], on_log.shape[-1]
        above = ranks.count_at_least(off_log, on_log, 0.0)  # pairs where on is the slower
        sd = math.sqrt(m * n * (m + n + 1) / 12)
        return (special.ndtr((above + 0.5 - m * n / 2) / sd),
                special.ndtr((m * n - above + 0.5 - m * n / 2) / sd))

    def check_scenario(self, scenario: Scenario) -> None:
        if scenario.guard_drop is not None:
            raise ConfigError("--guard-drop: the robust policy simulates no guard")

    def values_per_gate(self, rounds: int) -> int:
        return 12 * rounds  # both arms joined, their argsorts and ranks

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec,
                 max_threshold_pct: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """`ranks.interval_codes`: the same interval against the same floor bounds, by rank sums (lower is
        better)."""
        better_log, worse_log = floor_bounds(thresholds.floor_pct, "lower")
        codes = ranks.interval_codes(off_log, on_log, alpha=ALPHA, better_log=better_log, worse_log=worse_log)
        return codes, np.full(off_log.shape[0], off_log.shape[-1])

    def unreachable(self, effect_pct: float, cv_pct: float, thresholds: ThresholdSpec, most: int) -> str:
        if abs(effect_pct) <= thresholds.floor_pct:
            return (f"the robust policy adopts only when its whole interval is beyond the floor "
                    f"{thresholds.floor_pct:g} %: a true {effect_pct:+g} % is not beyond it")
        return f"more than {most} runs per arm are needed: lower the noise first"

    def words(self, finding: Finding) -> PolicyWords:
        info = finding.ranks
        if info is None or info.shift_pct is None:
            return PolicyWords()
        span = (f"[{info.low_pct:+.4f}, {info.high_pct:+.4f}] %" if info.low_pct is not None
                and info.high_pct is not None else "unbounded")
        line = (f"robust v{info.version}: Hodges–Lehmann shift {info.shift_pct:+.4f} %, "
                f"{100 * (1 - 2 * info.alpha):g} % interval {span}, floor ±{info.floor_pct:g} % "
                f"(the classic figures above decide nothing)")
        return PolicyWords(lines=(line,), classic_label=CLASSIC_LABEL)


ROBUST = RobustPolicy()


def policy(version: int | None = None) -> RobustPolicy:
    """The robust policy (version 1 is its one design)."""
    if version not in (None, VERSION):
        raise KeyError(version)
    return ROBUST

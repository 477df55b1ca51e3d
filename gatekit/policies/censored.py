"""The censored policy: decides a time to a quality target, where some runs never reach it (right-censored).

Each arm's times (`time_to_target_s` or `steps_to_target`, or any time primary) are fitted by the lognormal
accelerated-failure-time model with censoring (`gatekit.survival`): the on arm multiplies every time by the ratio
exp(β). Its interval β̂ ± c·SE (c = Student t, one-sided α ALPHA, reached runs − 2 degrees of freedom) is read by the
sequential policy's floor-aware rule (`sequential.look_codes`, final): adopted / regression when beyond the floor and
significant, equivalent when the interval lies inside ±floor, rejected when it rules out a floor-sized improvement,
inconclusive otherwise. Too many censored runs leave nothing to fit: more than MAX_CENSORED_FRAC of an arm's used runs
censored, or fewer than two reached, is inconclusive with its own reason (`too_censored`). Guards are the classic
guards on the arm means; a failed guard fails the gate, a regression stands. Contamination and retries are the
classic rules'. With nothing censored the rule is the two-sample t interval on log times.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from scipy import stats as scipy_stats

from gatekit import survival
from gatekit.config import RulesSpec, ThresholdSpec
from gatekit.errors import ConfigError
from gatekit.finding import Finding
from gatekit.policies.base import (Decided, Evidence, OneLook, PolicyWords, SimulationDefaults, classic_beside,
                                   guard_reasons, guard_results, guarded_decision)
from gatekit.policies.classic import SeedContamination
from gatekit.policies.sequential import look_codes
from gatekit.records import RunRecord
from gatekit.runtable import RunTable
from gatekit.verdict import (CODE_NAMES, INCONCLUSIVE, Decision, Reason, ReasonCode, Verdict,
                             too_noisy_reason)

if TYPE_CHECKING:
    from gatekit.simulate import Scenario

ALPHA = 0.05  # one-sided: the interval the rule reads is the two-sided 90 % one
MAX_CENSORED_FRAC = 0.5  # more than half of an arm's used runs censored: its time is mostly unknown


def codes(log_ratio: np.ndarray, se: np.ndarray, df: np.ndarray, *, floor_pct: float,
          direction: str = "lower") -> np.ndarray:
    """Outcome codes of many gates from β̂, its SE and degrees of freedom (NaN β̂: inconclusive)."""
    critical = scipy_stats.t.ppf(1 - ALPHA, np.asarray(df, float))
    # look_codes reads diff/scale against its critical value and diff ± critical·scale: scale = c·SE, critical 1
    return look_codes(np.asarray(log_ratio, float), critical * np.asarray(se, float), floor_pct=floor_pct,
                      direction=direction, final=True, critical=1.0)


def too_censored(censored: np.ndarray, on: np.ndarray) -> np.ndarray:
    """Per gate: more than MAX_CENSORED_FRAC of an arm's runs censored, or fewer than two reached in an arm."""
    result = np.zeros(censored.shape[0], bool)
    for arm in (0, 1):
        mine = on == arm
        count = mine.sum(-1)
        cut = (censored & mine).sum(-1)
        result |= (cut > MAX_CENSORED_FRAC * count) | (count - cut < survival.MIN_REACHED_PER_ARM)
    return result


class CensoredPolicy(SeedContamination, OneLook, SimulationDefaults):
    """A time to target with censored runs: the lognormal AFT time ratio and its interval against the floor."""

    name = "censored"
    simulates_censoring = True

    def stated_rules(self, primary: str, rules_spec: RulesSpec, threshold: ThresholdSpec) -> list[str]:
        level = 100 * (1 - 2 * ALPHA)
        return [
            f"Censored policy: {primary} of each used run, a run that never reached the target censored at its last "
            "time, is fitted by the lognormal accelerated-failure-time model by maximum likelihood (log time = mu + "
            "beta x on + sigma x normal; a censored run adds log P(T > its time)). Time ratio on/off = exp(beta).",
            f"Interval: beta ± t(1 - {ALPHA:g}, d - 2) x SE x sqrt(d / (d - 2)), SE from the observed information, d "
            f"= the reached runs ({level:g} % two-sided; with nothing censored, the two-sample t interval on log "
            "times).",
            f"Decision against the floor {threshold.floor_pct:g} %: adopted when beta/SE' is beyond the critical "
            "value on the better side and the ratio is at least the floor better; regression the same on the worse "
            "side; equivalent when the interval lies inside ±floor; rejected when it excludes a floor-sized "
            "improvement; else inconclusive. The classic threshold decides nothing here.",
            f"Too censored: more than {100 * MAX_CENSORED_FRAC:g} % of an arm's used runs censored, or fewer than "
            f"{survival.MIN_REACHED_PER_ARM} reached in an arm → inconclusive (too_censored).",
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
        off, on = used.arm(off_arm), used.arm(on_arm)
        flags = np.array([[row.censored for row in (*off, *on)]])
        arm = np.array([[0.0] * len(off) + [1.0] * len(on)])
        beside = classic_beside(classic)
        count = {name: (sum(row.censored for row in rows), len(rows)) for name, rows in ((off_arm, off), (on_arm, on))}
        censored_words = ", ".join(f"{name} {cut}/{total}" for name, (cut, total) in count.items())
        checked = guard_results(used, records, guards, off_arm, on_arm)
        guard_lines = guard_reasons(checked)
        if too_censored(flags, arm)[0]:
            reason = Reason(ReasonCode.TOO_CENSORED,
                            f"too many runs censored (never reached the target) to fit their times: {censored_words} "
                            f"(at most {100 * MAX_CENSORED_FRAC:g} % of an arm, at least "
                            f"{survival.MIN_REACHED_PER_ARM} reached) → inconclusive; run longer or set a target the "
                            "runs reach")
            return Decided(Verdict(guarded_decision(INCONCLUSIVE, checked), (reason, *guard_lines, beside),
                                   tuple(warnings)))
        fit = survival.fit([row.value for row in off], [row.censored for row in off],
                           [row.value for row in on], [row.censored for row in on])
        code = int(codes(np.array([fit.log_ratio]), np.array([fit.se]), np.array([fit.df]), floor_pct=floor_pct,
                         direction=direction)[0])
        low, high = fit.interval(ALPHA)
        pct = 100 * math.expm1(fit.log_ratio)
        estimate = Reason(ReasonCode.AFT_ESTIMATE,
                          f"{primary}: time ratio on/off {math.exp(fit.log_ratio):.4f} (Δ {pct:+.4f} %), lognormal "
                          f"AFT fit with censoring ({censored_words} censored), {100 * (1 - 2 * ALPHA):g} % interval "
                          f"[{100 * math.expm1(low):+.4f} %, {100 * math.expm1(high):+.4f} %], {fit.df} df, floor "
                          f"±{floor_pct:g} % → {CODE_NAMES[code]}")
        reasons: list[Reason] = [estimate]
        if code == INCONCLUSIVE:
            reasons.insert(0, too_noisy_reason(100 * math.expm1((high - low) / 2),
                                               basis="half the width of its interval"))
        return Decided(Verdict(guarded_decision(code, checked), (*reasons, *guard_lines, beside), tuple(warnings)))

    def check_scenario(self, scenario: Scenario) -> None:
        if scenario.guard_drop is not None:
            raise ConfigError("--guard-drop: the censored policy simulates no guard")

    def values_per_gate(self, rounds: int) -> int:
        return 40 * rounds  # the fit's [gates, runs] arrays and its Hessians

    def simulate(self, off_log: np.ndarray, on_log: np.ndarray, thresholds: ThresholdSpec,
                 max_threshold_pct: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Nothing censored: the fit is the t interval on log times."""
        return self.simulate_censored(off_log, on_log, math.inf, thresholds)

    def simulate_censored(self, off_log: np.ndarray, on_log: np.ndarray, censor_log: float,
                          thresholds: ThresholdSpec) -> tuple[np.ndarray, np.ndarray]:
        """Outcome codes of many gates whose runs are censored at exp(censor_log): a time beyond it is recorded as
        that time, censored (lower is better)."""
        logs = np.concatenate([off_log, on_log], axis=-1)
        censored = logs > censor_log
        logs = np.minimum(logs, censor_log)
        on = np.concatenate([np.zeros(off_log.shape[-1]), np.ones(on_log.shape[-1])])[None, :]
        beta, se, _, df, _ = survival.fit_arrays(logs, censored, on)
        result = codes(beta, se, df, floor_pct=thresholds.floor_pct)
        result = np.where(too_censored(censored, np.broadcast_to(on, censored.shape)), INCONCLUSIVE, result)
        return result, np.full(off_log.shape[0], off_log.shape[-1])

    def unreachable(self, effect_pct: float, cv_pct: float, thresholds: ThresholdSpec, most: int) -> str:
        if abs(effect_pct) <= thresholds.floor_pct:
            return (f"the censored policy adopts only beyond the floor {thresholds.floor_pct:g} %: a true "
                    f"{effect_pct:+g} % is not beyond it")
        return f"more than {most} runs per arm are needed: lower the noise first"

    def words(self, finding: Finding) -> PolicyWords:
        return PolicyWords()


CENSORED = CensoredPolicy()


def policy(version: int | None = None) -> CensoredPolicy:
    """The censored policy (it has one design)."""
    return CENSORED

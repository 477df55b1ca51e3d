"""The duet policy (v1): both arms of a pair run at the same time on twin slots (two GPUs of one host, or two
CPU core sets), the slots swapped every pair; the decision reads the pairs' log-ratios with the slot effect
estimated and removed.

Model (per pair k = 1 … n, n even):  d_k = ln(on_k) − ln(off_k) = Δ + s·σ_k + ε_k, where
  σ_k = +1 when on ran on slot 1 (odd pairs by the swap rule: off on slot 0, on on slot 1),
  σ_k = −1 when on ran on slot 0 (even pairs), σ_k = 0 if both runs shared a slot (no slot contrast),
  s   = the slot-1-minus-slot-0 effect on a run's log value (the full difference: a run on slot 1 takes
        e^s times as long as on slot 0; reported as 100·(e^s − 1) %),
  ε_k = the noise the two runs do not share. Noise the host imposes on both runs at once (measured: the
        two runs of a pair correlate 0.984) cancels from d_k, and so does any drift: both run together.
Δ and s are the ordinary least squares fit of d on [1, σ] (with the design balanced, Δ̂ = mean d and
ŝ = (mean d_odd − mean d_even)/2); the swap is what makes them separable. Under normal ε the studentized
Δ̂ is exactly Student t with n − 2 degrees of freedom (the textbook regression t, e.g. Draper & Smith,
Applied Regression Analysis, §1.4), so its critical value needs no simulation: false adoption ≤ TEST_ALPHA
one-sided whatever the slot effect or the shared noise; benchmarks/duet_calibration.py checks that by
simulation and measures the margin to ALPHA under unequal slot noise, heavy tails and outliers. The rule is
the sequential policy's own (`sequential.look_codes`: adopted / regression beyond the critical value AND the
floor, equivalent, rejected, else inconclusive) with that t critical value and the OLS standard error as its
scale.

Pure: tables and values in, decisions out; `pair_codes` is vectorised so `gate simulate --policy duet` runs
this exact rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from gatekit import rules
from gatekit.config import GuardSpec
from gatekit.diagnostics import log_values, pct
from gatekit.finding import DuetInfo, PairedGuard
from gatekit.sequential import guard_reason, look_codes, paired_guard, unreplaced_flags, with_guards
from gatekit.verdict import CODE_NAMES, too_noisy_reason

VERSION = 1
ALPHA = 0.05  # one-sided: the bound on false adoption (and on a guard's false pass)
# The level the rule tests at: half a point under ALPHA (as the sequential policy's calibration), a margin for
# what the exact t does not cover — slots that differ in noise (the t's df then overstate), heavy tails.
TEST_ALPHA = 0.045
INTERVAL_LEVEL = 1 - 2 * TEST_ALPHA  # Δ̂ ± c·SE, c = t_{1−TEST_ALPHA, n−2}: the interval the rule reads
GUARD_LEVEL = 1 - TEST_ALPHA  # one look: the guard's one-sided bound
MIN_PAIRS = 4  # two of each slot order: the fewest that leave n − 2 ≥ 2 degrees of freedom for the noise
METHOD = "pair log-ratios, OLS on [1, slot sign], Student t with n-2 df"


def parity_signs(rounds: Sequence[int] | np.ndarray) -> np.ndarray:
    """σ_k from the swap rule alone: +1 for odd pairs (on on slot 1), −1 for even pairs (on on slot 0)."""
    return np.where(np.asarray(rounds, int) % 2 == 1, 1.0, -1.0)


@dataclass(frozen=True, slots=True)
class DuetEstimate:
    """The OLS fit of d on [1, σ]: log-scale estimates, their standard errors, and the t critical value."""

    n_pairs: int
    delta: float
    delta_se: float
    slot: float
    slot_se: float
    df: int
    critical: float

    def interval(self, estimate: float, se: float) -> tuple[float, float]:
        return estimate - self.critical * se, estimate + self.critical * se


def critical_value(df: int | np.ndarray, alpha: float = TEST_ALPHA) -> float | np.ndarray:
    """t_{1−α, df}: the one-sided critical value of the studentized Δ̂ (nan when df < 1)."""
    df_array = np.asarray(df, float)
    with np.errstate(invalid="ignore"):
        return np.where(df_array >= 1, sps.t.ppf(1 - alpha, np.maximum(df_array, 1)), np.nan)


def fit_arrays(d: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Δ̂, SE Δ̂, ŝ, SE ŝ) of d on [1, σ] over the last axis, for many gates at once.

    Normal equations of X = [1, σ] (Σσ² = m, the pairs with a slot contrast): det = n·m − (Σσ)²;
    Δ̂ = (m·Σd − Σσ·Σσd)/det, ŝ = (n·Σσd − Σσ·Σd)/det; residual variance RSS/(n − 2);
    Var Δ̂ = σ̂²·m/det, Var ŝ = σ̂²·n/det. Not separable (det = 0: every pair in one slot order) or n < 3:
    nan, and the rule then reads inconclusive.
    """
    d = np.asarray(d, float)
    sigma = np.broadcast_to(np.asarray(sigma, float), d.shape)
    n = d.shape[-1]
    sum_s, sum_ss = sigma.sum(axis=-1), (sigma ** 2).sum(axis=-1)
    sum_d, sum_sd = d.sum(axis=-1), (sigma * d).sum(axis=-1)
    det = n * sum_ss - sum_s ** 2
    ok = (det > 0) & (n >= 3)
    safe_det = np.where(ok, det, 1.0)
    delta = (sum_ss * sum_d - sum_s * sum_sd) / safe_det
    slot = (n * sum_sd - sum_s * sum_d) / safe_det
    residual = d - delta[..., None] - slot[..., None] * sigma
    variance = (residual ** 2).sum(axis=-1) / max(n - 2, 1)
    delta_se = np.sqrt(variance * sum_ss / safe_det)
    slot_se = np.sqrt(variance * n / safe_det)
    nan = np.float64(math.nan)
    return (np.where(ok, delta, nan), np.where(ok, delta_se, nan), np.where(ok, slot, nan),
            np.where(ok, slot_se, nan))


def fit(d: Sequence[float], sigma: Sequence[float]) -> DuetEstimate:
    """The fit of one gate's pairs."""
    delta, delta_se, slot, slot_se = (float(x) for x in fit_arrays(np.asarray(d, float), np.asarray(sigma, float)))
    df = len(d) - 2
    return DuetEstimate(len(d), delta, delta_se, slot, slot_se, df, float(critical_value(df)))


def pair_codes(d: np.ndarray, sigma: np.ndarray, *, floor_pct: float, direction: str) -> np.ndarray:
    """The primary outcome codes of many gates at once (d: [gates, pairs]): the sequential policy's final
    look rule (`sequential.look_codes`) on Δ̂ with scale SE Δ̂ and critical value t_{1−α, n−2}."""
    delta, delta_se, _, _ = fit_arrays(d, sigma)
    critical = float(critical_value(np.asarray(d).shape[-1] - 2))
    if not math.isfinite(critical):
        delta = np.full_like(delta, math.nan)
        critical = 1.0  # every gate is nan, so look_codes says inconclusive whatever c is
    return look_codes(delta, delta_se, floor_pct=floor_pct, direction=direction, final=True, critical=critical)


# -- the pairs of a series ------------------------------------------------------------------------------

def _present(value: object) -> bool:
    return value is not None and not bool(pd.isna(value))


def slot_order(classified: pd.DataFrame, off_arm: str) -> tuple[str, str] | None:
    """(slot 0, slot 1) as the runs recorded them: slot 0 is where off ran in the first odd pair (the swap
    rule puts it there), else where on ran in the first even pair; None when no run recorded a slot."""
    if "slot" not in classified:
        return None
    rows = classified[classified["slot"].map(_present)]
    if rows.empty:
        return None
    names = list(dict.fromkeys(str(s) for s in rows.sort_values("order")["slot"]))
    first = rows.sort_values(["pair", "order"]).iloc[0]
    parity_one = int(first["pair"]) % 2 == 1
    is_off = first["arm"] == off_arm
    # odd pairs put off on slot 0, even pairs put on there
    first_slot = str(first["slot"])
    other = next((s for s in names if s != first_slot), first_slot)  # itself when every run shared one slot
    return (first_slot, other) if parity_one == is_off else (other, first_slot)


@dataclass(frozen=True, slots=True)
class DuetPair:
    """One pair as the decision reads it: its round, both values, and the slot sign σ."""

    round: int
    off: float
    on: float
    sigma: float
    off_label: str
    on_label: str


def pairs_of(classified: pd.DataFrame, off_arm: str, on_arm: str) -> tuple[list[DuetPair], tuple[str, str] | None]:
    """The used pairs with σ_k: from the `slot` column where the runs recorded one (on on slot 1: +1, on on
    slot 0: −1, both on one slot: 0), else from the parity of the pair's original round (a replacement
    re-runs its round in the same slots)."""
    order = slot_order(classified, off_arm)
    retry_of = {int(r.pair): int(r.retry_of) for r in classified.itertuples()
                if _present(getattr(r, "retry_of", None))}
    pairs: list[DuetPair] = []
    for round_, rows in classified[classified["used"]].groupby("pair"):
        by_arm = {r.arm: r for r in rows.itertuples()}
        if off_arm not in by_arm or on_arm not in by_arm:
            continue
        off_row, on_row = by_arm[off_arm], by_arm[on_arm]
        off_slot, on_slot = getattr(off_row, "slot", None), getattr(on_row, "slot", None)
        if order is not None and _present(off_slot) and _present(on_slot):
            sigma = 0.0 if off_slot == on_slot else (1.0 if str(on_slot) == order[1] else -1.0)
        else:
            sigma = float(parity_signs([rules.lineage_root(int(round_), retry_of)])[0])
        pairs.append(DuetPair(int(round_), float(off_row.value), float(on_row.value), sigma,
                              str(off_row.label), str(on_row.label)))
    return pairs, order


# -- the decision ------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DuetOutcome:
    decision: str  # adopted | rejected | regression | equivalent | inconclusive | guard_failed
    reasons: tuple[str, ...]
    info: DuetInfo | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


def _info(estimate: DuetEstimate | None, *, floor_pct: float, primary: str, decision: str,
          guards: Mapping[str, PairedGuard], slots: tuple[str, str] | None, balance: tuple[int, int]) -> DuetInfo:
    def bounds(value: float, se: float) -> tuple[float, float, float]:
        lo, hi = estimate.interval(value, se) if estimate else (math.nan, math.nan)
        return pct(value), pct(lo), pct(hi)

    delta = bounds(estimate.delta, estimate.delta_se) if estimate else (math.nan,) * 3
    slot = bounds(estimate.slot, estimate.slot_se) if estimate else (math.nan,) * 3
    ci95 = (math.nan, math.nan)
    if estimate and estimate.df >= 1:
        half = float(critical_value(estimate.df, 0.025)) * estimate.delta_se
        ci95 = (pct(estimate.delta - half), pct(estimate.delta + half))
    return DuetInfo(
        version=VERSION, method=METHOD, alpha=ALPHA, test_alpha=TEST_ALPHA, interval_level=INTERVAL_LEVEL,
        floor_pct=floor_pct,
        n_pairs=estimate.n_pairs if estimate else sum(balance), pairs_on_slot1=balance[0],
        pairs_on_slot0=balance[1], df=estimate.df if estimate else None,
        critical=estimate.critical if estimate and math.isfinite(estimate.critical) else None,
        delta_pct=delta[0], ci_low_pct=delta[1], ci_high_pct=delta[2],
        slot_effect_pct=slot[0], slot_ci_low_pct=slot[1], slot_ci_high_pct=slot[2],
        slots=slots or (), ci95_low_pct=ci95[0], ci95_high_pct=ci95[1], guard_level=GUARD_LEVEL,
        guards=dict(guards), primary=primary, decision=decision)


def decide(classified: pd.DataFrame, guard_values: Mapping[str, Mapping[str, float]], *, off_arm: str,
           on_arm: str, guard_specs: Sequence[GuardSpec], floor_pct: float, direction: str,
           primary: str) -> DuetOutcome:
    """The duet decision on the used pairs. `guard_values` maps guard metric → {run label: value}."""
    flagged = unreplaced_flags(classified)
    if flagged:
        return DuetOutcome("inconclusive", (flagged,))
    pairs, slots = pairs_of(classified, off_arm, on_arm)
    balance = (sum(p.sigma > 0 for p in pairs), sum(p.sigma < 0 for p in pairs))
    guards: dict[str, PairedGuard] = {}
    for spec in guard_specs:
        values = guard_values.get(spec.metric, {})
        guard_pairs = [(values[p.off_label], values[p.on_label]) for p in pairs
                       if p.off_label in values and p.on_label in values]
        guards[spec.metric] = paired_guard(spec, guard_pairs, GUARD_LEVEL)
    off_logs, on_logs = log_values([p.off for p in pairs]), log_values([p.on for p in pairs])
    warnings: list[str] = []
    if balance[0] != balance[1]:
        warnings.append(f"the pairs are unbalanced across the slots ({balance[0]} with on on slot 1, {balance[1]} "
                        "on slot 0): the slot effect is still removed, at some cost in precision")
    reasons: list[str] = []
    if off_logs is None or on_logs is None or len(pairs) < MIN_PAIRS or min(balance) == 0:
        why = ("a value is not positive" if off_logs is None or on_logs is None
               else f"{len(pairs)} used pair(s), fewer than {MIN_PAIRS}" if len(pairs) < MIN_PAIRS
               else "every used pair ran in one slot order, so the slot effect cannot be told from Δ")
        info = _info(None, floor_pct=floor_pct, primary="inconclusive", decision="inconclusive", guards=guards,
                     slots=slots, balance=balance)
        return DuetOutcome("inconclusive", (f"the duet estimate needs both slot orders and at least "
                                            f"{MIN_PAIRS} pairs: {why}",), info, tuple(warnings))
    d = on_logs - off_logs
    estimate = fit(d, [p.sigma for p in pairs])
    code = int(pair_codes(d[None, :], np.array([[p.sigma for p in pairs]]), floor_pct=floor_pct,
                          direction=direction)[0])
    primary_outcome = CODE_NAMES[code]
    decision = with_guards(code, guards, final=True)
    info = _info(estimate, floor_pct=floor_pct, primary=primary_outcome, decision=decision, guards=guards,
                 slots=slots, balance=balance)
    reasons += _reasons(info, estimate, primary)
    return DuetOutcome(decision, tuple(reasons), info, tuple(warnings))


def _reasons(info: DuetInfo, estimate: DuetEstimate, primary: str) -> list[str]:
    c, floor = estimate.critical, info.floor_pct
    t = estimate.delta / estimate.delta_se if estimate.delta_se > 0 else math.copysign(math.inf, estimate.delta)
    why = {"adopted": "significantly better by at least the floor",
           "regression": "significantly worse by at least the floor",
           "equivalent": f"the interval lies inside ±{floor:g} %",
           "rejected": f"the interval rules out an improvement of {floor:g} %",
           "inconclusive": "neither a floor-sized difference nor equivalence is shown"}
    lines = [f"duet ({info.n_pairs} pairs, slots swapped every pair): {primary} Δ {info.delta_pct:+.4f} % (OLS of "
             f"the pair log-ratios with the slot effect removed), {100 * INTERVAL_LEVEL:g} % interval "
             f"[{info.ci_low_pct:+.4f} %, {info.ci_high_pct:+.4f} %], t {t:+.3f} vs ±{c:.4g} (Student t, "
             f"{estimate.df} df, one-sided α {TEST_ALPHA:g}), floor ±{floor:g} % → {info.primary} "
             f"({why[info.primary]}); two-sided 95 % CI [{info.ci95_low_pct:+.4f} %, {info.ci95_high_pct:+.4f} %]"]
    slot_names = f" ({info.slots[1]} minus {info.slots[0]})" if len(info.slots) == 2 else ""
    lines.append(f"slot effect{slot_names}: {info.slot_effect_pct:+.4f} %, {100 * INTERVAL_LEVEL:g} % interval "
                 f"[{info.slot_ci_low_pct:+.4f} %, {info.slot_ci_high_pct:+.4f} %] — estimated from the swap and "
                 "removed from Δ")
    if info.primary == "inconclusive":
        half_width = (info.ci_high_pct - info.ci_low_pct) / 2
        lines.insert(0, too_noisy_reason(half_width, basis="half the width of its interval"))
    lines += [guard_reason(guard, f"{100 * GUARD_LEVEL:g} % bound") for guard in info.guards.values()]
    if info.primary == "adopted" and info.decision == "inconclusive":
        lines.append("a guard's bound is too wide to pass: inconclusive, never a pass")
    return lines

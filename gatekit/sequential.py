"""The sequential policy: two looks (4, then 8 runs per arm, Thue–Morse order), a Welch test on log values
at one-sided α = 0.0325 per look, equivalence, paired non-inferiority guards, telemetry-only contamination.

Outcomes follow Chromium Pinpoint's SAME / DIFFERENT / UNKNOWN: adopted or regression (different by at least
the floor), equivalent (CI inside ±floor: same), rejected (an improvement of the floor is ruled out),
inconclusive (unknown — never a pass). docs/statistics.md gives the simulated error rates.

Pure: tables and values in, decisions out. `look_codes` is vectorised so `gate simulate` runs this exact rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sps

from gatekit import rules, stats
from gatekit.config import SEQUENTIAL_RUNS, GuardSpec, RulesSpec
from gatekit.diagnostics import ci_arrays, log_values, p_better_arrays, pct, welch_arrays
from gatekit.finding import Look, PairedGuard, SequentialInfo
from gatekit.verdict import ADOPTED, CODE_NAMES, CONTINUE, EQUIVALENT, INCONCLUSIVE, REGRESSION, REJECTED

ALPHA = 0.0325  # one-sided, per look
GUARD_LEVEL = 0.95  # one-sided bound of the paired guard difference
DF_MODE = "conservative"  # min(n_off, n_on) − 1; docs/statistics.md shows why (Satterthwaite df: 6 % at σ_on = 4σ_off)

STAGE1_ROUNDS = SEQUENTIAL_RUNS[0]


# -- the look, vectorised ----------------------------------------------------------------------------

def gain_bounds(floor_pct: float, direction: str) -> tuple[float, float]:
    """Log gains (positive = on better) that count as a floor-sized improvement and regression."""
    f = floor_pct / 100
    if direction == "lower":  # Δ ≤ −f ⇔ log ratio ≤ ln(1 − f)
        return -math.log1p(-f), -math.log1p(f)
    return math.log1p(f), math.log1p(-f)


def look_codes(diff: np.ndarray, se: np.ndarray, df: np.ndarray, *, floor_pct: float, direction: str,
               final: bool, alpha: float = ALPHA) -> np.ndarray:
    """The primary metric's outcome at one look, for any number of gates at once.

    diff = mean(log on) − mean(log off). Adopted: p(on better) < α AND at least floor better. Regression:
    p(on worse) < α AND at least floor worse. Equivalent: the (1 − 2α) CI of the ratio inside ±floor.
    Rejected: that CI excludes a floor-sized improvement. Else continue (look 1) or inconclusive (final).
    """
    diff, se, df = np.asarray(diff, float), np.asarray(se, float), np.asarray(df, float)
    sign = -1.0 if direction == "lower" else 1.0
    gain = sign * diff
    g_adopt, g_regress = gain_bounds(floor_pct, direction)
    p_better = p_better_arrays(diff, se, df, direction)
    p_worse = p_better_arrays(diff, se, df, "higher" if direction == "lower" else "lower")
    lo, hi = ci_arrays(diff, se, df, 1 - 2 * alpha)
    gain_hi = np.maximum(sign * lo, sign * hi)
    f = floor_pct / 100
    valid = np.isfinite(diff) & np.isfinite(se)
    adopted = valid & (p_better < alpha) & (gain >= g_adopt)
    regression = valid & (p_worse < alpha) & (gain <= g_regress)
    equivalent = valid & (lo > math.log1p(-f)) & (hi < math.log1p(f))
    rejected = valid & (gain_hi < g_adopt)
    rest = INCONCLUSIVE if final else CONTINUE
    return np.select([adopted, regression, equivalent, rejected], [ADOPTED, REGRESSION, EQUIVALENT, REJECTED],
                     default=rest)


# -- guards ------------------------------------------------------------------------------------------

def paired_guard(spec: GuardSpec, pairs: Sequence[tuple[float, float]]) -> PairedGuard:
    """Pass iff the one-sided 95 % bound of mean(on − off) clears the limit (lower bound ≥ −max_drop when
    higher is better); fail iff the opposite bound is beyond it; otherwise inconclusive, never a pass."""
    limit = -spec.max_drop if spec.direction == "higher" else spec.max_drop
    diffs = [on - off for off, on in pairs]
    if len(diffs) < 2:
        return PairedGuard(spec.metric, spec.direction, limit, len(diffs), stats.mean(diffs) if diffs else None,
                           None, None, GUARD_LEVEL, status="inconclusive")
    m, s = stats.mean(diffs), stats.sample_sd(diffs)
    half = float(sps.t.ppf(GUARD_LEVEL, len(diffs) - 1)) * s / math.sqrt(len(diffs)) if s > 0 else 0.0
    if spec.direction == "higher":
        bound, far = m - half, m + half
        status = "pass" if bound >= limit else "fail" if far < limit else "inconclusive"
    else:
        bound, far = m + half, m - half
        status = "pass" if bound <= limit else "fail" if far > limit else "inconclusive"
    return PairedGuard(spec.metric, spec.direction, limit, len(diffs), m, bound, far, GUARD_LEVEL, status=status)


# -- contamination from telemetry alone ------------------------------------------------------------

def telemetry_flags(table: pd.DataFrame, rule_set: RulesSpec, cores: int | None) -> tuple[pd.Series, pd.Series]:
    """(flagged, detail) per run, from the run window only — never from the run's result: load1 per core
    above `load_per_core_limit` (the window's `load_stat`), the machine on battery, or the backend's
    evidence for the window (another process on the GPU, a thermal or power-brake slowdown, …)."""
    stat = table[f"load1_{rule_set.load_stat}"].astype(float)
    per_core = stat / cores if cores else pd.Series(math.nan, index=table.index)
    loaded = (per_core > rule_set.load_per_core_limit).fillna(False).astype(bool)
    if "on_ac" in table:  # True / False / None (no battery); pandas may hold numpy booleans
        on_battery = table["on_ac"].map(lambda v: v is not None and not pd.isna(v) and not bool(v))
    else:
        on_battery = pd.Series(False, index=table.index)
    backend = rules.backend_evidence(table)
    details = []
    for index in table.index:
        parts = []
        if backend[index]:
            parts.append(str(table.at[index, "backend_evidence"]))
        if loaded[index]:
            parts.append(f"load1 {rule_set.load_stat} per core {per_core[index]:.2f} > {rule_set.load_per_core_limit:g}")
        if on_battery[index]:
            parts.append("on battery")
        details.append("flagged: " + " and ".join(parts) if parts else "")
    return (loaded | on_battery | backend).astype(bool), pd.Series(details, index=table.index)


def classify(table: pd.DataFrame, rule_set: RulesSpec, replaced: Mapping[int, rules.Replacement],
             cores: int | None) -> pd.DataFrame:
    """The sequential policy's run classification, in the columns rules.classify gives (so the finding's
    run table reads the same): a flagged or failed run takes its pair out; `z` is informational only."""
    out = table.copy()
    out["replaced"] = out["pair"].isin(list(replaced))
    out["missing_window"] = (out["samples"] == 0) & rule_set.require_window_samples
    in_play = ~out["replaced"] & ~out["failed"]
    flagged, detail = telemetry_flags(out, rule_set, cores)
    out["load_evidence"] = flagged
    out["z"] = rules.deviation_z(out, in_play, "arm")
    out["deviant"] = False
    out["contaminated"] = in_play & flagged
    for index, row in out[out["replaced"]].iterrows():
        info = replaced[row["pair"]].flagged.get(row["label"])
        if info:
            out.loc[index, "contaminated"] = bool(info.get("contaminated", False))

    def problem(index: Any, row: pd.Series) -> str:
        return f"failed: {row['error']}" if row["failed"] else str(detail[index])

    return rules.settle_pairs(out, replaced, problem, "failed or flagged")


def rounds_needing_replacement(classified: pd.DataFrame) -> dict[int, dict[str, Mapping[str, object]]]:
    """Rounds whose pair must be re-run (a failed or flagged run), with what flagged each run."""
    problems = classified[~classified["replaced"] & (classified["failed"] | classified["contaminated"])]
    needed: dict[int, dict[str, Mapping[str, object]]] = {}
    for row in problems.itertuples():
        detail = f"failed: {row.error}" if row.failed else row.reason
        needed.setdefault(int(row.pair), {})[row.label] = {
            "contaminated": bool(row.contaminated), "z": float(row.z), "detail": detail}
    return needed


def mirror_first(classified: pd.DataFrame, round_: int, off_arm: str, on_arm: str) -> str:
    """The arm that runs first in the replacement of `round_`: the one that ran second in it."""
    rows = classified[classified["pair"] == round_].sort_values("order")
    if rows.empty:
        return off_arm
    return on_arm if rows.iloc[0]["arm"] == off_arm else off_arm


# -- the decision ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SequentialOutcome:
    decision: str  # adopted | rejected | regression | equivalent | inconclusive | guard_failed | continue
    reasons: tuple[str, ...]
    looks: tuple[Look, ...] = ()
    extend: bool = False  # look 1 did not decide and stage 2 has not run yet
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def info(self, floor_pct: float) -> SequentialInfo:
        """The looks and constants as the finding records them."""
        return SequentialInfo(ALPHA, DF_MODE, floor_pct, SEQUENTIAL_RUNS, GUARD_LEVEL, self.looks, self.decision,
                              "extend" if self.extend else "stop")


def _look(number: int, off: Sequence[float], on: Sequence[float], guard_pairs: Mapping[str, list[tuple[float, float]]],
          guard_specs: Sequence[GuardSpec], *, floor_pct: float, direction: str, final: bool) -> Look:
    off_logs, on_logs = log_values(off), log_values(on)
    if off_logs is None or on_logs is None:
        nan = math.nan
        diff = se = df = np.float64(nan)
    else:
        diff, se, df = welch_arrays(off_logs, on_logs, DF_MODE)
    code = int(look_codes(diff, se, df, floor_pct=floor_pct, direction=direction, final=final))
    lo, hi = ci_arrays(diff, se, df, 1 - 2 * ALPHA)
    guards = {g.metric: paired_guard(g, guard_pairs.get(g.metric, [])) for g in guard_specs}
    statuses = [g.status for g in guards.values()]
    primary = CODE_NAMES[code]
    if code == REGRESSION:
        decision = "regression"
    elif "fail" in statuses:
        decision = "guard_failed"
    elif code == ADOPTED:
        decision = "adopted" if all(s == "pass" for s in statuses) else ("inconclusive" if final else "continue")
    else:
        decision = primary
    p_b = float(p_better_arrays(diff, se, df, direction))
    p_w = float(p_better_arrays(diff, se, df, "higher" if direction == "lower" else "lower"))
    return Look(number, len(off), len(on), pct(float(diff)), pct(float(lo)), pct(float(hi)), 1 - 2 * ALPHA,
                float(df), p_b, p_w, primary=primary, guards=guards, decision=decision)


def _reasons(look: Look, floor_pct: float, primary: str) -> list[str]:
    level = f"{100 * (1 - 2 * ALPHA):g} %"
    head = (f"look {look.look} ({look.n_off}+{look.n_on} runs): {primary} Δ {look.delta_pct:+.4f} % (ratio of "
            f"geometric means), {level} CI [{look.ci_low_pct:+.4f} %, {look.ci_high_pct:+.4f} %], one-sided "
            f"p(on better) {look.p_better:.4f}, p(on worse) {look.p_worse:.4f}, α {ALPHA:g}, floor ±{floor_pct:g} %")
    why = {"adopted": "significantly better by at least the floor",
           "regression": "significantly worse by at least the floor",
           "equivalent": f"the CI lies inside ±{floor_pct:g} %",
           "rejected": f"the CI rules out an improvement of {floor_pct:g} %",
           "inconclusive": "neither a floor-sized difference nor equivalence is shown",
           "continue": "undecided: extend to the next stage"}
    lines = [f"{head} → {look.primary} ({why[look.primary]})"]
    for guard in look.guards.values():
        if guard.bound is None:
            lines.append(f"guard {guard.metric}: {guard.pairs} pair(s), too few for a bound → {guard.status}")
        else:
            lines.append(f"guard {guard.metric}: mean(on − off) {guard.mean_diff:+.4f} over {guard.pairs} pairs, "
                         f"one-sided {100 * GUARD_LEVEL:g} % bound {guard.bound:+.4f} vs limit {guard.limit:+g} "
                         f"→ {guard.status}")
    if look.primary == "adopted" and look.decision in ("continue", "inconclusive"):
        lines.append("a guard's bound is too wide to pass: " + ("extend" if look.decision == "continue"
                                                               else "inconclusive, never a pass"))
    return lines


def stage_of_rounds(classified: pd.DataFrame) -> pd.Series:
    """1 for the preregistered rounds 1–4 and their replacements, 2 for the rest."""
    retry_of = {int(r.pair): int(r.retry_of) for r in classified.itertuples()
                if r.retry_of is not None and not (isinstance(r.retry_of, float) and math.isnan(r.retry_of))}
    roots = classified["pair"].map(lambda p: rules.lineage_root(int(p), retry_of))
    return roots.map(lambda root: 1 if root <= STAGE1_ROUNDS else 2)


def decide(classified: pd.DataFrame, guard_values: Mapping[str, Mapping[str, float]], *, off_arm: str,
           on_arm: str, guard_specs: Sequence[GuardSpec], floor_pct: float, direction: str,
           primary: str) -> SequentialOutcome:
    """Run the looks on the used runs. `guard_values` maps guard metric → {run label: value}."""
    stage = stage_of_rounds(classified)
    unresolved = classified[~classified["replaced"] & classified["contaminated"]]
    if not unresolved.empty:
        labels = ", ".join(unresolved["label"])
        return SequentialOutcome("inconclusive", (f"{labels} flagged by telemetry and the pair has no "
                                                  "replacement left; a second replacement makes the gate "
                                                  "inconclusive",))
    reasons: list[str] = []
    looks: list[Look] = []
    has_stage2 = bool((stage == 2).any())
    for number, stages in ((1, (1,)), (2, (1, 2))):
        rows = classified[classified["used"] & stage.isin(stages)]
        off = rows.loc[rows["arm"] == off_arm, "value"].astype(float).tolist()
        on = rows.loc[rows["arm"] == on_arm, "value"].astype(float).tolist()
        pairs: dict[str, list[tuple[float, float]]] = {}
        for metric, by_label in guard_values.items():
            for _, round_rows in rows.groupby("pair"):
                values = {r.arm: by_label.get(r.label) for r in round_rows.itertuples()}
                if values.get(off_arm) is not None and values.get(on_arm) is not None:
                    pairs.setdefault(metric, []).append((values[off_arm], values[on_arm]))
        look = _look(number, off, on, pairs, guard_specs, floor_pct=floor_pct, direction=direction,
                     final=number == 2)
        looks.append(look)
        reasons += _reasons(look, floor_pct, primary)
        if look.decision != "continue":
            warnings = (("stage 2 ran although look 1 had decided; look 1 decides",)
                        if number == 1 and has_stage2 else ())
            return SequentialOutcome(look.decision, tuple(reasons), tuple(looks), warnings=warnings)
        if not has_stage2:
            return SequentialOutcome("continue", tuple(reasons), tuple(looks), extend=True)
    raise AssertionError("look 2 always decides")  # pragma: no cover

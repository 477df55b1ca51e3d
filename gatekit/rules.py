"""Preregistered contamination rules and exclusion sensitivity: pure, table in, table out.

The run table has one row per executed run with columns
`order, arm, label, pair, value, failed, error, samples, load1_mean, load1_max, backend_evidence, on_ac,
retry_of, psi_cpu_pct, psi_io_pct, psi_memory_pct, steal_pct, sm_clock_mean_mhz, sm_clock_locked_mhz`
(`backend_evidence`: the backend's evidence lines for the window joined with "; ", empty when none; the
pressure, steal and clock columns NaN where the window did not record them).

Which window telemetry counts as load evidence is preregistered as `rules.evidence` (`window_evidence`, shared
by the policies): load1, pressure stall (psi), CPU steal, or any of them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from gatekit import stats
from gatekit.config import RulesSpec
from gatekit.finding import SensitivityRow
from gatekit.records import PSI_RESOURCES, Record, WindowSummary
from gatekit.verdict import classic_decision

PRESSURE_COLUMNS = (*(f"psi_{resource}_pct" for resource in PSI_RESOURCES), "steal_pct")
# the run's clock state from the backend's window summary (cuda: time-weighted over non-idle samples)
CLOCK_COLUMNS = ("sm_clock_mean_mhz", "sm_clock_locked_mhz")
RUN_COLUMNS = ("order", "arm", "label", "pair", "value", "failed", "error", "samples", "load1_mean", "load1_max",
               "backend_evidence", "on_ac", "retry_of", "slot", *PRESSURE_COLUMNS, *CLOCK_COLUMNS)


def load_over_limit(table: pd.DataFrame, rules: RulesSpec) -> pd.Series:
    """The classic rule (i): the window statistic exceeds load_limit or load_rel_median × the series median."""
    stat = table[f"load1_{rules.load_stat}"].astype(float)
    series_median = stat.dropna().median()
    over_limit = stat > rules.load_limit
    over_median = stat > rules.load_rel_median * series_median if not math.isnan(series_median) else False
    return (over_limit | over_median).fillna(False).astype(bool)


def backend_evidence(table: pd.DataFrame) -> pd.Series:
    """Whether the backend found evidence in the window (e.g. another process on the GPU)."""
    if "backend_evidence" not in table:
        return pd.Series(False, index=table.index)
    return table["backend_evidence"].fillna("").astype(str).str.len() > 0


def window_columns(window: WindowSummary) -> dict[str, float | None]:
    """The run table's pressure-stall, steal and clock columns of one run window."""
    clock = {column: value if isinstance(value := window.telemetry.get(column), (int, float))
             and not isinstance(value, bool) else None for column in CLOCK_COLUMNS}
    return {**{column: getattr(window, column) for column in PRESSURE_COLUMNS}, **clock}


@dataclass(frozen=True, slots=True)
class WindowEvidence:
    """Load evidence per run under `rules.evidence`, from the run window alone (never the run's result)."""

    flagged: pd.Series  # bool
    detail: pd.Series  # what fired, in words; "" where nothing did
    fell_back: pd.Series  # bool: the window lacks what rules.evidence asks for, so load1 decided


def _numbers(table: pd.DataFrame, column: str) -> pd.Series:
    if column not in table:
        return pd.Series(math.nan, index=table.index)
    return pd.to_numeric(table[column], errors="coerce").astype(float)


def _over(table: pd.DataFrame, checks: Sequence[tuple[str, str, float]]) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(over, detail, recorded) for (column, words, limit) checks: over where some column exceeds its limit,
    recorded where some column has a value."""
    over = pd.Series(False, index=table.index)
    recorded = pd.Series(False, index=table.index)
    words: list[list[str]] = [[] for _ in table.index]
    for column, name, limit in checks:
        values = _numbers(table, column)
        recorded |= values.notna()
        hit = (values > limit).fillna(False).astype(bool)
        over |= hit
        for position, (is_hit, value) in enumerate(zip(hit, values)):
            if is_hit:
                words[position].append(f"{name} {value:.1f} % of the window > {limit:g} %")
    return over, pd.Series(["; ".join(w) for w in words], index=table.index), recorded


def pressure_over_limit(table: pd.DataFrame, rules: RulesSpec) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(over, detail, recorded): some task stalled on CPU, I/O or memory for more than psi_limit_pct of the
    window (Linux PSI `some`, the total's growth over the window)."""
    return _over(table, [(f"psi_{resource}_pct", f"{resource} pressure stall", rules.psi_limit_pct)
                         for resource in PSI_RESOURCES])


def steal_over_limit(table: pd.DataFrame, rules: RulesSpec) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(over, detail, recorded): the hypervisor took more than steal_limit_pct of the window's CPU time."""
    return _over(table, [("steal_pct", "CPU steal", rules.steal_limit_pct)])


def clock_below_share(table: pd.DataFrame, rules: RulesSpec) -> tuple[pd.Series, pd.Series]:
    """(flagged, detail): the clock rule. A run whose mean SM clock is below `min_clock_share` × the series'
    median of it — or × the locked clock, where the window recorded one — is flagged; outcome-blind, like
    load_rel_median. Never fires when the rule is off (0) or no run recorded its clock."""
    none = pd.Series(False, index=table.index)
    clock = _numbers(table, "sm_clock_mean_mhz")
    if rules.min_clock_share <= 0 or clock.isna().all():
        return none, pd.Series("", index=table.index)
    locked = _numbers(table, "sm_clock_locked_mhz")
    median = float(clock.dropna().median())
    reference = locked.where(locked.notna(), median)
    flagged = (clock < rules.min_clock_share * reference).fillna(False).astype(bool)
    words = [f"mean SM clock {value:.0f} MHz < {rules.min_clock_share:g} x the "
             + (f"locked clock {ref:.0f} MHz" if not math.isnan(lock) else f"series median {median:.0f} MHz")
             if hit else "" for hit, value, ref, lock in zip(flagged, clock, reference, locked)]
    return flagged, pd.Series(words, index=table.index, dtype=object).astype(str)


def window_evidence(table: pd.DataFrame, rules: RulesSpec, load1_flagged: pd.Series,
                    load1_detail: pd.Series) -> WindowEvidence:
    """Load evidence as `rules.evidence` preregisters it, given the policy's own load1 rule and its words,
    and the clock rule (`rules.min_clock_share`) beside it whatever the evidence kind.

    load1: the policy's load1 rule alone (the classic behaviour). psi / steal: that telemetry, and the load1
    rule for a window that did not record it (`fell_back`; `evidence_warnings` says so). any: any of the three
    that fires on what the window recorded. The backend's evidence is the caller's to add.
    """
    load = _load_evidence(table, rules, load1_flagged, load1_detail)
    slow, slow_words = clock_below_share(table, rules)
    if not slow.any():
        return load
    detail = [("; ".join(part for part in (words, clock) if part)) for words, clock in zip(load.detail, slow_words)]
    return WindowEvidence((load.flagged | slow).astype(bool), pd.Series(detail, index=table.index, dtype=object),
                          load.fell_back)


def _load_evidence(table: pd.DataFrame, rules: RulesSpec, load1_flagged: pd.Series,
                   load1_detail: pd.Series) -> WindowEvidence:
    load1_flagged = load1_flagged.astype(bool)
    load1_detail = load1_detail.where(load1_flagged, "")
    none = pd.Series(False, index=table.index)
    if rules.evidence == "load1":
        return WindowEvidence(load1_flagged, load1_detail, none)
    found = {"psi": pressure_over_limit(table, rules), "steal": steal_over_limit(table, rules)}
    if rules.evidence == "any":
        flagged = load1_flagged | found["psi"][0] | found["steal"][0]
        parts = pd.concat([load1_detail, found["psi"][1], found["steal"][1]], axis=1)
        detail = parts.apply(lambda row: "; ".join(part for part in row if part), axis=1)
        return WindowEvidence(flagged.astype(bool), detail.astype(str), none)
    over, words, recorded = found[rules.evidence]
    return WindowEvidence(over.where(recorded, load1_flagged).astype(bool),
                          words.where(recorded, load1_detail).astype(str), ~recorded)


def stated_evidence(rules: RulesSpec) -> str | None:
    """rules.evidence in words for the predecision file; None for load1 (the load rule is stated already)."""
    psi = (f"some task waited for CPU, I/O or memory for more than {rules.psi_limit_pct:g} % of the run window's "
           "wall time (Linux pressure-stall information, the `some` total's growth from window open to close)")
    steal = f"the hypervisor stole more than {rules.steal_limit_pct:g} % of the window's CPU time (psutil cpu_times)"
    fallback = "; a window that did not record it falls back to the load1 rule, and a warning names it"
    return {
        "load1": None,
        "psi": f"Load evidence = psi, in place of load1: {psi}{fallback}.",
        "steal": f"Load evidence = steal, in place of load1: {steal}{fallback}.",
        "any": f"Load evidence = any: the load1 rule, OR {psi}, OR {steal} (each where the window recorded it).",
    }[rules.evidence]


def stated_clock_rules(rules: RulesSpec) -> list[str]:
    """The clock rule and the cycle check in words for the predecision file; nothing when both are off."""
    lines = []
    if rules.min_clock_share > 0:
        lines.append(
            f"Clock rule: a run whose mean SM clock (time-weighted over the window's non-idle samples, as the "
            f"backend records it) is below {rules.min_clock_share:g} x the median of it over all runs of the "
            "series, or x the locked SM clock where the window recorded one, is flagged like load evidence (i); "
            "a run without a clock reading is never flagged by it.")
    if rules.confirm_cycles:
        lines.append(
            "Cycle check: for a time primary, each used run's value x its mean SM clock is decided by the same "
            "policy; a decision the cycles do not reach too (nor can be checked, a used run lacking its clock) is "
            "inconclusive, with the reason. Invalid and inconclusive decisions stay as they are.")
    return lines


EVIDENCE_SOURCES = {"psi": "pressure-stall information (Linux /proc/pressure)", "steal": "CPU steal time"}


def evidence_warnings(table: pd.DataFrame, rules: RulesSpec) -> list[str]:
    """A warning naming the runs whose window lacked what rules.evidence asks for (load1 decided for them)."""
    if rules.evidence not in EVIDENCE_SOURCES:
        return []
    check = pressure_over_limit if rules.evidence == "psi" else steal_over_limit
    recorded = check(table, rules)[2]
    labels = table.loc[~recorded, "label"].tolist()
    if not labels:
        return []
    shown = ", ".join(map(str, labels[:6])) + (f" and {len(labels) - 6} more" if len(labels) > 6 else "")
    return [f"rules.evidence = \"{rules.evidence}\" but {len(labels)} of {len(table)} run window(s) recorded no "
            f"{EVIDENCE_SOURCES[rules.evidence]}, so the load1 rule decided their load evidence: {shown}"]


def classic_load1_detail(table: pd.DataFrame, rules: RulesSpec) -> pd.Series:
    """The classic load1 rule's words for each run: `load1 max 7.10`."""
    stat = table[f"load1_{rules.load_stat}"].astype(float)
    return stat.map(lambda value: f"load1 {rules.load_stat} {value:.2f}")


def per_core_load1(table: pd.DataFrame, rules: RulesSpec, cores: int | None) -> tuple[pd.Series, pd.Series]:
    """The sequential policy's load1 rule and its words: the window's `load_stat` of load1 per core above
    `load_per_core_limit` (never fires when the core count is unknown)."""
    stat = table[f"load1_{rules.load_stat}"].astype(float)
    per_core = stat / cores if cores else pd.Series(math.nan, index=table.index)
    loaded = (per_core > rules.load_per_core_limit).fillna(False).astype(bool)
    words = per_core.map(lambda value: f"load1 {rules.load_stat} per core {value:.2f} > {rules.load_per_core_limit:g}")
    return loaded, words.where(loaded, "").astype(str)


def classic_window_evidence(table: pd.DataFrame, rules: RulesSpec) -> WindowEvidence:
    """The classic policy's window evidence: its load1 rule (load_over_limit) under rules.evidence."""
    return window_evidence(table, rules, load_over_limit(table, rules), classic_load1_detail(table, rules))


def load_evidence(table: pd.DataFrame, rules: RulesSpec) -> pd.Series:
    """Rule (i): the window's load evidence (rules.evidence; load1: the classic rule) OR the backend's evidence
    for the window."""
    return classic_window_evidence(table, rules).flagged | backend_evidence(table)


def history_deviation_sigma_pct(sigma_history_pct: float, n: int) -> float:
    """The SD (in % of the mean) of a run's deviation from the mean of its arm's n − 1 other runs, when each
    run has SD σ_hist: x − mean(others) has variance σ²(1 + 1/(n − 1)), so a z against it exceeds 3 in
    0.27 % of clean runs, not the 1.42 % that σ_hist alone gives at n = 3. σ_hist counts as known: the
    calibration's own sampling error is not included."""
    return sigma_history_pct * math.sqrt(1 + 1 / (n - 1)) if n > 1 else sigma_history_pct


def deviation_z(table: pd.DataFrame, in_play: pd.Series, sigma_ref: str,
                sigma_history_pct: float = 0.0) -> pd.Series:
    """Rule (ii)'s |x − arm mean| / σ for in-play runs, σ from the arm (classic), leave-one-out, or history
    (a calibrated CV, so the rule can fire at n = 3; the deviation's SD, see history_deviation_sigma_pct)."""
    if sigma_ref == "history":
        def score(values: list[float]) -> list[float]:
            return stats.history_z_scores(values, history_deviation_sigma_pct(sigma_history_pct, len(values)))
    else:
        score = stats.z_scores if sigma_ref == "arm" else stats.leave_one_out_z_scores
    z = pd.Series(0.0, index=table.index)
    for _, rows in table[in_play].groupby("arm", sort=False):
        z.loc[rows.index] = score(rows["value"].astype(float).tolist())
    return z


@dataclass(frozen=True, slots=True)
class Replacement(Record):
    """Why a round's pair was re-run: the reason, and each flagged run's finding at that moment."""

    reason: str
    flagged: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # label -> {contaminated, z, detail}


def _problem(row: object, rules: RulesSpec) -> str:
    if row.failed:  # type: ignore[attr-defined]
        return f"failed: {row.error}"  # type: ignore[attr-defined]
    found = getattr(row, "backend_evidence", "") or ""
    # the window's evidence in words (the classic wording under load1), the backend's after it when there is some
    evidence = "; ".join(part for part in (row.window_detail, found) if part)  # type: ignore[attr-defined]
    return f"contaminated: {evidence} and {row.z:.2f}σ > {rules.sigma_k:g}σ"  # type: ignore[attr-defined]


def classify(table: pd.DataFrame, rules: RulesSpec, replaced: Mapping[int, Replacement]) -> pd.DataFrame:
    """Mark each run used or not, and why.

    `replaced` maps a round to why its pair was re-run; those runs stay in the record, unused, with the
    contamination finding they had when the retry was decided.
    A failed run, or a run with load evidence AND |z| > sigma_k, takes its whole pair out.
    """
    out = table.copy()
    out["replaced"] = out["pair"].isin(list(replaced))
    out["missing_window"] = (out["samples"] == 0) & rules.require_window_samples
    in_play = ~out["replaced"] & ~out["failed"]
    if "backend_evidence" not in out:
        out["backend_evidence"] = ""
    out["backend_evidence"] = out["backend_evidence"].fillna("").astype(str)
    window = classic_window_evidence(out, rules)
    out["window_detail"] = window.detail
    out["load_evidence"] = window.flagged | backend_evidence(out)
    out["z"] = deviation_z(out, in_play, rules.sigma_ref, rules.sigma_history_pct)
    out["contaminated"] = in_play & out["load_evidence"] & (out["z"] > rules.sigma_k)
    for index, row in out[out["replaced"]].iterrows():
        flagged = replaced[row["pair"]].flagged.get(row["label"])
        if flagged:
            out.loc[index, "z"] = float(flagged.get("z", 0.0))  # type: ignore[arg-type]
            out.loc[index, "contaminated"] = bool(flagged.get("contaminated", False))
    out["deviant"] = out["z"] > rules.sigma_k
    return settle_pairs(out, replaced, lambda index, row: _problem(row, rules), "failed or contaminated")


def evidence_kinds(reason: str) -> list[str]:
    """The kinds of evidence a flagged run's reason names, its numbers dropped, so runs can be counted by
    kind: "flagged: cpu pressure stall 42.0 % > 20 %; pair re-run as r5" → ["cpu pressure stall"]; the
    classic "contaminated: load1 max 9.00 and 3.20σ > 3σ" → ["load1 max"] (the deviation is no kind)."""
    evidence = reason.split(": ", 1)[-1].split("; pair re-run")[0]
    kinds = []
    for part in re.split(r" and |; ", evidence):
        kind = re.split(r"(?<![A-Za-z_])[-+]?\d", part, maxsplit=1)[0].strip(" ,:")  # load1 keeps its 1
        if kind and kind not in kinds:
            kinds.append(kind)
    return kinds


def flagged_summary(classified: pd.DataFrame) -> tuple[int, str]:
    """How many runs load or telemetry evidence took out (contaminated or flagged, failures aside), and by
    which kinds, most frequent first: (16, "load1 mean per core on 16")."""
    flagged = classified[classified["contaminated"] & ~classified["failed"]]
    counts: dict[str, int] = {}
    for reason in flagged["reason"]:
        for kind in evidence_kinds(str(reason)):
            counts[kind] = counts.get(kind, 0) + 1
    kinds = ", ".join(f"{kind} on {count}" for kind, count in sorted(counts.items(), key=lambda kv: -kv[1]))
    return len(flagged), kinds


def settle_pairs(out: pd.DataFrame, replaced: Mapping[int, Replacement],
                 problem: Callable[[Any, pd.Series], str], partner_word: str) -> pd.DataFrame:
    """The `reason` and `used` columns every policy shares: a failed or contaminated run takes its whole
    pair out; a replaced pair keeps what flagged it; a run without window samples is not used.

    `problem(index, row)` words a failed or contaminated run's reason; `partner_word` its partner's.
    """
    bad_rounds = set(out.loc[out["failed"] | out["contaminated"], "pair"]) - set(replaced)
    reasons = []
    for index, row in out.iterrows():
        if row["replaced"]:
            flagged = replaced[row["pair"]].flagged.get(row["label"])
            detail = str(flagged["detail"]) if flagged else f"pair partner {partner_word}"
            reasons.append(f"{detail}; {replaced[row['pair']].reason}")
        elif row["failed"] or row["contaminated"]:
            reasons.append(problem(index, row))
        elif row["pair"] in bad_rounds:
            reasons.append(f"pair partner {partner_word}")
        elif row["missing_window"]:
            reasons.append("no in-window load samples")
        else:
            reasons.append("")
    out["reason"] = reasons
    out["used"] = ~out["replaced"] & ~out["pair"].isin(bad_rounds) & ~out["missing_window"]
    return out


def rounds_needing_retry(classified: pd.DataFrame, rules: RulesSpec) -> dict[int, dict[str, Mapping[str, object]]]:
    """Rounds whose pair must be re-run (a failed or contaminated run), with what flagged each run."""
    problems = classified[~classified["replaced"] & (classified["failed"] | classified["contaminated"])]
    needed: dict[int, dict[str, Mapping[str, object]]] = {}
    for row in problems.itertuples():
        needed.setdefault(int(row.pair), {})[row.label] = {
            "contaminated": bool(row.contaminated), "z": float(row.z), "detail": _problem(row, rules)}
    return needed


def lineage_root(round_: int, retry_of: Mapping[int, int]) -> int:
    """The original round a retry descends from (retries of retries never happen, but follow the chain)."""
    while round_ in retry_of:
        round_ = retry_of[round_]
    return round_


def _delta_and_threshold(used: pd.DataFrame, off_arm: str, on_arm: str, sigma_k: float,
                         floor_pct: float) -> tuple[float, float]:
    off = used.loc[used["arm"] == off_arm, "value"].astype(float).tolist()
    on = used.loc[used["arm"] == on_arm, "value"].astype(float).tolist()
    if not off or not on:
        return math.nan, math.nan
    delta = stats.delta_pct(stats.mean(off), stats.mean(on))
    return delta, stats.threshold_pct(stats.relative_sd_pct(off), sigma_k, floor_pct)


def exclusion_sensitivity(used: pd.DataFrame, off_arm: str, on_arm: str, *, sigma_k: float, floor_pct: float,
                          direction: str, load_stat: str, max_threshold_pct: float = 0.0) -> list[SensitivityRow]:
    """The verdict with all used runs, without the most deviant run and its pair, and without the
    highest-load run and its pair (the seed's §6 check that one point does not flip the decision)."""
    variants: list[tuple[str, tuple[str, ...]]] = [("all used runs", ())]
    if len(used) >= 3:
        z = pd.Series(0.0, index=used.index)
        for _, rows in used.groupby("arm", sort=False):
            z.loc[rows.index] = stats.z_scores(rows["value"].astype(float).tolist())
        suspects = [(used.loc[z.idxmax()], f"most deviant run, {z.max():.2f}σ")]
        load = used[f"load1_{load_stat}"].astype(float)
        if load.notna().any():
            suspects.append((used.loc[load.idxmax()], f"highest load1 {load_stat}, {load.max():.2f}"))
        for row, why in suspects:
            pair_labels = tuple(used.loc[used["pair"] == row["pair"], "label"])
            for variant in ((f"drop {row['label']} ({why})", (row["label"],)),
                            (f"drop pair r{row['pair']} ({why})", pair_labels)):
                if variant[1] not in [v[1] for v in variants]:
                    variants.append(variant)
    rows = []
    for name, dropped in variants:
        kept = used[~used["label"].isin(dropped)]
        delta, threshold = _delta_and_threshold(kept, off_arm, on_arm, sigma_k, floor_pct)
        rows.append(SensitivityRow(name, dropped, delta, threshold,
                                   decision=classic_decision(delta, threshold, direction, max_threshold_pct)))
    return rows


def run_table(rows: Sequence[Mapping[str, object]]) -> pd.DataFrame:
    """Build the run table with the expected columns and dtypes from plain rows."""
    table = pd.DataFrame(list(rows), columns=list(RUN_COLUMNS))
    table["failed"] = table["failed"].astype(bool)
    table["samples"] = table["samples"].fillna(0).astype(int)
    for column in ("value", "load1_mean", "load1_max", *PRESSURE_COLUMNS, *CLOCK_COLUMNS):
        table[column] = pd.to_numeric(table[column], errors="coerce").astype(float)
    # rows without the column (CSV input, sequential telemetry tables) come in as all-NaN floats
    table["backend_evidence"] = table["backend_evidence"].astype(object).where(
        table["backend_evidence"].notna(), "").astype(str)
    return table

"""Preregistered contamination rules and exclusion sensitivity: pure, run table in, new run table out.

The run table (`gatekit.runtable`) has one frozen row per executed run; a rule over the whole table returns
numpy arrays aligned with its rows (flags, words as tuples of strings), a classification a new table.

Which window telemetry counts as load evidence is preregistered as `rules.evidence` (`window_evidence`, shared
by the policies): load1, pressure stall (psi), CPU steal, or any of them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from gatekit import stats
from gatekit.config import RulesSpec
from gatekit.finding import SensitivityRow
from gatekit.records import PSI_RESOURCES, Record
from gatekit.runtable import RunTable, TableRow
from gatekit.verdict import classic_decision

# plain rows keyed by column -> a run table, where tests and tools build one by hand
run_table = RunTable.of

Words = tuple[str, ...]  # one entry per run, "" where nothing fired


def nan_median(values: np.ndarray) -> float:
    """The median of the values that are not NaN; NaN when none is (as pandas' Series.median)."""
    present = values[~np.isnan(values)]
    return float(np.median(present)) if len(present) else math.nan


def load_over_limit(table: RunTable, rules: RulesSpec) -> np.ndarray:
    """The classic rule (i): the window statistic exceeds load_limit or load_rel_median × the series median."""
    stat = table.floats(lambda row: row.load1(rules.load_stat))
    series_median = nan_median(stat)
    over = stat > rules.load_limit
    if not math.isnan(series_median):
        over |= stat > rules.load_rel_median * series_median
    return over


def backend_evidence(table: RunTable) -> np.ndarray:
    """Whether the backend found evidence in the window (e.g. another process on the GPU)."""
    return table.flags(lambda row: len(row.backend_evidence) > 0)


@dataclass(frozen=True, slots=True)
class WindowEvidence:
    """Load evidence per run under `rules.evidence`, from the run window alone (never the run's result)."""

    flagged: np.ndarray  # bool
    detail: Words  # what fired, in words; "" where nothing did
    fell_back: np.ndarray  # bool: the window lacks what rules.evidence asks for, so load1 decided


Check = tuple[Callable[[TableRow], float], str, float]  # (column, words, limit)


def _over(table: RunTable, checks: Sequence[Check]) -> tuple[np.ndarray, Words, np.ndarray]:
    """(over, detail, recorded) for (column, words, limit) checks: over where some column exceeds its limit,
    recorded where some column has a value."""
    over = np.zeros(len(table), dtype=bool)
    recorded = np.zeros(len(table), dtype=bool)
    words: list[list[str]] = [[] for _ in table]
    for column, name, limit in checks:
        values = table.floats(column)
        recorded |= ~np.isnan(values)
        hit = values > limit
        over |= hit
        for position, (is_hit, value) in enumerate(zip(hit, values)):
            if is_hit:
                words[position].append(f"{name} {value:.1f} % of the window > {limit:g} %")
    return over, tuple("; ".join(w) for w in words), recorded


def pressure_over_limit(table: RunTable, rules: RulesSpec) -> tuple[np.ndarray, Words, np.ndarray]:
    """(over, detail, recorded): some task stalled on CPU, I/O or memory for more than psi_limit_pct of the
    window (Linux PSI `some`, the total's growth over the window)."""
    return _over(table, [(_psi_column(resource), f"{resource} pressure stall", rules.psi_limit_pct)
                         for resource in PSI_RESOURCES])


def _psi_column(resource: str) -> Callable[[TableRow], float]:
    return lambda row: row.psi_pct(resource)


def steal_over_limit(table: RunTable, rules: RulesSpec) -> tuple[np.ndarray, Words, np.ndarray]:
    """(over, detail, recorded): the hypervisor took more than steal_limit_pct of the window's CPU time."""
    return _over(table, [(lambda row: row.steal_pct, "CPU steal", rules.steal_limit_pct)])


def clock_below_share(table: RunTable, rules: RulesSpec) -> tuple[np.ndarray, Words]:
    """(flagged, detail): the clock rule. A run whose mean SM clock is below `min_clock_share` × the series'
    median of it — or × the locked clock, where the window recorded one — is flagged; outcome-blind, like
    load_rel_median. Never fires when the rule is off (0) or no run recorded its clock."""
    clock = table.floats(lambda row: row.sm_clock_mean_mhz)
    if rules.min_clock_share <= 0 or np.isnan(clock).all():
        return np.zeros(len(table), dtype=bool), ("",) * len(table)
    locked = table.floats(lambda row: row.sm_clock_locked_mhz)
    median = nan_median(clock)
    reference = np.where(np.isnan(locked), median, locked)
    flagged = clock < rules.min_clock_share * reference
    words = tuple(f"mean SM clock {value:.0f} MHz < {rules.min_clock_share:g} x the "
                  + (f"locked clock {ref:.0f} MHz" if not math.isnan(lock) else f"series median {median:.0f} MHz")
                  if hit else "" for hit, value, ref, lock in zip(flagged, clock, reference, locked))
    return flagged, words


def _joined(*columns: Words) -> Words:
    """Each run's words of several rules, the empty ones left out."""
    return tuple("; ".join(part for part in parts if part) for parts in zip(*columns))


def window_evidence(table: RunTable, rules: RulesSpec, load1_flagged: np.ndarray,
                    load1_detail: Words) -> WindowEvidence:
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
    return WindowEvidence(load.flagged | slow, _joined(load.detail, slow_words), load.fell_back)


def _load_evidence(table: RunTable, rules: RulesSpec, load1_flagged: np.ndarray,
                   load1_detail: Words) -> WindowEvidence:
    load1_flagged = np.asarray(load1_flagged, dtype=bool)
    load1_detail = tuple(words if flagged else "" for flagged, words in zip(load1_flagged, load1_detail))
    none = np.zeros(len(table), dtype=bool)
    if rules.evidence == "load1":
        return WindowEvidence(load1_flagged, load1_detail, none)
    found = {"psi": pressure_over_limit(table, rules), "steal": steal_over_limit(table, rules)}
    if rules.evidence == "any":
        flagged = load1_flagged | found["psi"][0] | found["steal"][0]
        return WindowEvidence(flagged, _joined(load1_detail, found["psi"][1], found["steal"][1]), none)
    over, words, recorded = found[rules.evidence]
    return WindowEvidence(np.where(recorded, over, load1_flagged),
                          tuple(own if kept else load1 for kept, own, load1 in zip(recorded, words, load1_detail)),
                          ~recorded)


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


def evidence_warnings(table: RunTable, rules: RulesSpec) -> list[str]:
    """A warning naming the runs whose window lacked what rules.evidence asks for (load1 decided for them)."""
    if rules.evidence not in EVIDENCE_SOURCES:
        return []
    check = pressure_over_limit if rules.evidence == "psi" else steal_over_limit
    recorded = check(table, rules)[2]
    labels = table.where(~recorded).labels()
    if not labels:
        return []
    shown = ", ".join(map(str, labels[:6])) + (f" and {len(labels) - 6} more" if len(labels) > 6 else "")
    return [f"rules.evidence = \"{rules.evidence}\" but {len(labels)} of {len(table)} run window(s) recorded no "
            f"{EVIDENCE_SOURCES[rules.evidence]}, so the load1 rule decided their load evidence: {shown}"]


def classic_load1_detail(table: RunTable, rules: RulesSpec) -> Words:
    """The classic load1 rule's words for each run: `load1 max 7.10`."""
    return tuple(f"load1 {rules.load_stat} {row.load1(rules.load_stat):.2f}" for row in table)


def per_core_load1(table: RunTable, rules: RulesSpec, cores: int | None) -> tuple[np.ndarray, Words]:
    """The sequential policy's load1 rule and its words: the window's `load_stat` of load1 per core above
    `load_per_core_limit` (never fires when the core count is unknown)."""
    stat = table.floats(lambda row: row.load1(rules.load_stat))
    per_core = stat / cores if cores else np.full(len(table), math.nan)
    loaded = per_core > rules.load_per_core_limit
    words = tuple(f"load1 {rules.load_stat} per core {value:.2f} > {rules.load_per_core_limit:g}" if hit else ""
                  for hit, value in zip(loaded, per_core))
    return loaded, words


def classic_window_evidence(table: RunTable, rules: RulesSpec) -> WindowEvidence:
    """The classic policy's window evidence: its load1 rule (load_over_limit) under rules.evidence."""
    return window_evidence(table, rules, load_over_limit(table, rules), classic_load1_detail(table, rules))


def load_evidence(table: RunTable, rules: RulesSpec) -> np.ndarray:
    """Rule (i): the window's load evidence (rules.evidence; load1: the classic rule) OR the backend's evidence
    for the window."""
    return classic_window_evidence(table, rules).flagged | backend_evidence(table)


def history_deviation_sigma_pct(sigma_history_pct: float, n: int) -> float:
    """The SD (in % of the mean) of a run's deviation from the mean of its arm's n − 1 other runs, when each
    run has SD σ_hist: x − mean(others) has variance σ²(1 + 1/(n − 1)), so a z against it exceeds 3 in
    0.27 % of clean runs, not the 1.42 % that σ_hist alone gives at n = 3. σ_hist counts as known: the
    calibration's own sampling error is not included."""
    return sigma_history_pct * math.sqrt(1 + 1 / (n - 1)) if n > 1 else sigma_history_pct


def deviation_z(table: RunTable, in_play: np.ndarray, sigma_ref: str,
                sigma_history_pct: float = 0.0) -> np.ndarray:
    """Rule (ii)'s |x − arm mean| / σ for in-play runs, σ from the arm (classic), leave-one-out, or history
    (a calibrated CV, so the rule can fire at n = 3; the deviation's SD, see history_deviation_sigma_pct);
    0 for the other runs."""
    if sigma_ref == "history":
        def score(values: list[float]) -> list[float]:
            return stats.history_z_scores(values, history_deviation_sigma_pct(sigma_history_pct, len(values)))
    else:
        score = stats.z_scores if sigma_ref == "arm" else stats.leave_one_out_z_scores
    return _z_within_arms(table, in_play, score)


def _z_within_arms(table: RunTable, in_play: np.ndarray,
                   score: Callable[[list[float]], list[float]]) -> np.ndarray:
    """Each in-play run's score among the in-play runs of its arm; 0 for the others."""
    z = np.zeros(len(table))
    positions: dict[str, list[int]] = {}
    for position, (row, playing) in enumerate(zip(table, in_play)):
        if playing:
            positions.setdefault(row.arm, []).append(position)
    for arm_positions in positions.values():
        z[arm_positions] = score([table.rows[p].value for p in arm_positions])
    return z


@dataclass(frozen=True, slots=True)
class Replacement(Record):
    """Why a round's pair was re-run: the reason, and each flagged run's finding at that moment."""

    reason: str
    flagged: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # label -> {contaminated, z, detail}


def _problem(row: TableRow, rules: RulesSpec) -> str:
    if row.failed:
        return f"failed: {row.error}"
    # the window's evidence in words (the classic wording under load1), the backend's after it when there is some
    evidence = "; ".join(part for part in (row.window_detail, row.backend_evidence) if part)
    return f"contaminated: {evidence} and {row.z:.2f}σ > {rules.sigma_k:g}σ"


def classify(table: RunTable, rules: RulesSpec, replaced: Mapping[int, Replacement]) -> RunTable:
    """Mark each run used or not, and why.

    `replaced` maps a round to why its pair was re-run; those runs stay in the record, unused, with the
    contamination finding they had when the retry was decided.
    A failed run, or a run with load evidence AND |z| > sigma_k, takes its whole pair out.
    """
    is_replaced = table.flags(lambda row: row.pair in replaced)
    in_play = ~is_replaced & ~table.flags(lambda row: row.failed)
    window = classic_window_evidence(table, rules)
    loaded = window.flagged | backend_evidence(table)
    z = deviation_z(table, in_play, rules.sigma_ref, rules.sigma_history_pct)
    contaminated = in_play & loaded & (z > rules.sigma_k)
    rows = []
    for position, row in enumerate(table):
        run_z, run_contaminated = float(z[position]), bool(contaminated[position])
        flagged = replaced[row.pair].flagged.get(row.label) if row.pair in replaced else None
        if flagged:  # the finding it had when the retry was decided
            run_z, run_contaminated = float(flagged.get("z", 0.0)), bool(flagged.get("contaminated", False))
        rows.append(replace(row, replaced=bool(is_replaced[position]),
                            missing_window=row.samples == 0 and rules.require_window_samples,
                            load_evidence=bool(loaded[position]), window_detail=window.detail[position],
                            z=run_z, contaminated=run_contaminated))
    return settle_pairs(RunTable(tuple(rows)), replaced, lambda row: _problem(row, rules), "failed or contaminated")


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


def flagged_summary(classified: RunTable) -> tuple[int, str]:
    """How many runs load or telemetry evidence took out (contaminated or flagged, failures aside), and by
    which kinds, most frequent first: (16, "load1 mean per core on 16")."""
    flagged = classified.filter(lambda row: row.contaminated and not row.failed)
    counts: dict[str, int] = {}
    for row in flagged:
        for kind in evidence_kinds(row.reason):
            counts[kind] = counts.get(kind, 0) + 1
    kinds = ", ".join(f"{kind} on {count}" for kind, count in sorted(counts.items(), key=lambda kv: -kv[1]))
    return len(flagged), kinds


def settle_pairs(table: RunTable, replaced: Mapping[int, Replacement], problem: Callable[[TableRow], str],
                 partner_word: str) -> RunTable:
    """The `reason` and `used` every policy shares, as a new table: a failed or contaminated run takes its
    whole pair out; a replaced pair keeps what flagged it; a run without window samples is not used.

    `problem(row)` words a failed or contaminated run's reason; `partner_word` its partner's.
    """
    bad_rounds = {row.pair for row in table if row.failed or row.contaminated} - set(replaced)

    def reason(row: TableRow) -> str:
        if row.replaced:
            flagged = replaced[row.pair].flagged.get(row.label)
            detail = str(flagged["detail"]) if flagged else f"pair partner {partner_word}"
            return f"{detail}; {replaced[row.pair].reason}"
        if row.failed or row.contaminated:
            return problem(row)
        if row.pair in bad_rounds:
            return f"pair partner {partner_word}"
        return "no in-window load samples" if row.missing_window else ""

    return table.map(lambda row: replace(row, reason=reason(row), used=not row.replaced
                                         and row.pair not in bad_rounds and not row.missing_window))


def rounds_needing_retry(classified: RunTable, rules: RulesSpec) -> dict[int, dict[str, Mapping[str, object]]]:
    """Rounds whose pair must be re-run (a failed or contaminated run), with what flagged each run."""
    needed: dict[int, dict[str, Mapping[str, object]]] = {}
    for row in classified.filter(lambda row: row.problem):
        needed.setdefault(row.pair, {})[row.label] = {
            "contaminated": row.contaminated, "z": row.z, "detail": _problem(row, rules)}
    return needed


def lineage_root(round_: int, retry_of: Mapping[int, int]) -> int:
    """The original round a retry descends from (retries of retries never happen, but follow the chain)."""
    while round_ in retry_of:
        round_ = retry_of[round_]
    return round_


def _delta_and_threshold(used: RunTable, off_arm: str, on_arm: str, sigma_k: float,
                         floor_pct: float) -> tuple[float, float]:
    off, on = used.arm(off_arm).values(), used.arm(on_arm).values()
    if not off or not on:
        return math.nan, math.nan
    delta = stats.delta_pct(stats.mean(off), stats.mean(on))
    return delta, stats.threshold_pct(stats.relative_sd_pct(off), sigma_k, floor_pct)


def exclusion_sensitivity(used: RunTable, off_arm: str, on_arm: str, *, sigma_k: float, floor_pct: float,
                          direction: str, load_stat: str, max_threshold_pct: float = 0.0) -> list[SensitivityRow]:
    """The verdict with all used runs, without the most deviant run and its pair, and without the
    highest-load run and its pair (the seed's §6 check that one point does not flip the decision)."""
    variants: list[tuple[str, tuple[str, ...]]] = [("all used runs", ())]
    if len(used) >= 3:
        z = _z_within_arms(used, np.ones(len(used), dtype=bool), stats.z_scores)
        suspects = [(used.rows[int(np.argmax(z))], f"most deviant run, {z.max():.2f}σ")]
        load = used.floats(lambda row: row.load1(load_stat))
        if not np.isnan(load).all():  # the first highest, NaN left out
            suspects.append((used.rows[int(np.nanargmax(load))], f"highest load1 {load_stat}, {np.nanmax(load):.2f}"))
        for suspect, why in suspects:
            pair_labels = tuple(row.label for row in used if row.pair == suspect.pair)
            for variant in ((f"drop {suspect.label} ({why})", (suspect.label,)),
                            (f"drop pair r{suspect.pair} ({why})", pair_labels)):
                if variant[1] not in [v[1] for v in variants]:
                    variants.append(variant)
    rows = []
    for name, dropped in variants:
        kept = used.filter(lambda row: row.label not in dropped)
        delta, threshold = _delta_and_threshold(kept, off_arm, on_arm, sigma_k, floor_pct)
        rows.append(SensitivityRow(name, dropped, delta, threshold,
                                   decision=classic_decision(delta, threshold, direction, max_threshold_pct)))
    return rows

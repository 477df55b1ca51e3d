"""Preregistered contamination rules and exclusion sensitivity: pure, table in, table out.

The run table has one row per executed run with columns
`order, arm, label, pair, value, failed, error, samples, load1_mean, load1_max, backend_evidence, on_ac,
retry_of` (`backend_evidence`: the backend's evidence lines for the window joined with "; ", empty when none).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from gatekit import stats
from gatekit.config import RulesSpec
from gatekit.finding import SensitivityRow
from gatekit.verdict import classic_decision

RUN_COLUMNS = ("order", "arm", "label", "pair", "value", "failed", "error", "samples", "load1_mean", "load1_max",
               "backend_evidence", "on_ac", "retry_of")


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


def load_evidence(table: pd.DataFrame, rules: RulesSpec) -> pd.Series:
    """Rule (i): load evidence (the classic rule) OR the backend's evidence for the window."""
    return load_over_limit(table, rules) | backend_evidence(table)


def deviation_z(table: pd.DataFrame, in_play: pd.Series, sigma_ref: str,
                sigma_history_pct: float = 0.0) -> pd.Series:
    """Rule (ii)'s |x − arm mean| / σ for in-play runs, σ from the arm (classic), leave-one-out, or history
    (a calibrated CV, so the rule can fire at n = 3)."""
    if sigma_ref == "history":
        def score(values: list[float]) -> list[float]:
            return stats.history_z_scores(values, sigma_history_pct)
    else:
        score = stats.z_scores if sigma_ref == "arm" else stats.leave_one_out_z_scores
    z = pd.Series(0.0, index=table.index)
    for _, rows in table[in_play].groupby("arm", sort=False):
        z.loc[rows.index] = score(rows["value"].astype(float).tolist())
    return z


@dataclass(frozen=True, slots=True)
class Replacement:
    """Why a round's pair was re-run: the reason, and each flagged run's finding at that moment."""

    reason: str
    flagged: Mapping[str, Mapping[str, object]]  # label -> {contaminated, z, detail}

    def to_dict(self) -> dict[str, object]:
        return {"reason": self.reason, "flagged": {k: dict(v) for k, v in self.flagged.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Replacement:
        return cls(str(data["reason"]), dict(data.get("flagged", {})))  # type: ignore[arg-type]


def _problem(row: object, rules: RulesSpec) -> str:
    if row.failed:  # type: ignore[attr-defined]
        return f"failed: {row.error}"  # type: ignore[attr-defined]
    stat = getattr(row, f"load1_{rules.load_stat}")
    found = getattr(row, "backend_evidence", "") or ""
    if found and not row.load_over:  # type: ignore[attr-defined]
        evidence = found
    else:  # the classic wording, with the backend's evidence after it when there is some
        evidence = f"load1 {rules.load_stat} {stat:.2f}" + (f"; {found}" if found else "")
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
    out["load_over"] = load_over_limit(out, rules)
    out["load_evidence"] = load_evidence(out, rules)
    out["z"] = deviation_z(out, in_play, rules.sigma_ref, rules.sigma_history_pct)
    out["contaminated"] = in_play & out["load_evidence"] & (out["z"] > rules.sigma_k)
    for index, row in out[out["replaced"]].iterrows():
        flagged = replaced[row["pair"]].flagged.get(row["label"])
        if flagged:
            out.loc[index, "z"] = float(flagged.get("z", 0.0))  # type: ignore[arg-type]
            out.loc[index, "contaminated"] = bool(flagged.get("contaminated", False))
    out["deviant"] = out["z"] > rules.sigma_k
    return settle_pairs(out, replaced, lambda index, row: _problem(row, rules), "failed or contaminated")


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
    for column in ("value", "load1_mean", "load1_max"):
        table[column] = pd.to_numeric(table[column], errors="coerce").astype(float)
    # rows without the column (CSV input, sequential telemetry tables) come in as all-NaN floats
    table["backend_evidence"] = table["backend_evidence"].astype(object).where(
        table["backend_evidence"].notna(), "").astype(str)
    return table

"""The Finding record: built from a series' evidence, serialized to TOML and JSON, written atomically.

Schema history:
  gatekit.finding/1 — meta, gate, predecision, provenance, rules, runs, stats, guards, sensitivity,
                      verdict, sections (DESIGN "Finding").
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import tomlkit

from gatekit import FINDING_SCHEMA, diagnostics, rules, sequential, stats
from gatekit.config import ALWAYS_MEASURED
from gatekit.errors import FindingError
from gatekit.finding_schema import validate_finding
from gatekit.prereg import DecisionSpec
from gatekit.records import RunRecord
from gatekit.schedule import WARMUP_ROUND, needs_seed, order_seed
from gatekit.storage import write_output
from gatekit.verdict import GuardResult, Verdict, decide, evaluate_guard

SECTIONS = ("meta", "gate", "predecision", "provenance", "rules", "runs", "stats", "guards", "sensitivity",
            "verdict", "sections")
POLARITY = {"adopted": "positive", "rejected": "neutral", "regression": "negative",
            "guard_failed": "negative", "invalid": "invalid", "equivalent": "neutral", "inconclusive": "neutral"}


@dataclass(frozen=True, slots=True)
class SeriesEvidence:
    """Everything a finding is computed from; all of it journaled, so analysis can redo it offline."""

    series_id: str
    finding_id: str
    spec: DecisionSpec
    records: tuple[RunRecord, ...]
    replaced: Mapping[int, rules.Replacement] = field(default_factory=dict)
    date: str = ""
    predecision_path: str = ""
    predecision_sha256: str = ""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    invalid_reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    config_paths: tuple[str, ...] = ()
    related_runs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Finding:
    """A finding document; `data` holds the DESIGN sections as plain, JSON/TOML-ready data."""

    data: Mapping[str, Any]

    @property
    def id(self) -> str:
        return str(self.data["meta"]["id"])

    @property
    def decision(self) -> str:
        return str(self.data["verdict"]["decision"])

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "finding") -> Finding:
        schema = data.get("schema")
        if schema != FINDING_SCHEMA:
            hint = ("written by a newer gatekit; upgrade gatekit to read it"
                    if isinstance(schema, str) and schema.startswith("gatekit.finding/")
                    else "not a gatekit finding")
            raise FindingError(f"{source}: schema: {schema!r} is not {FINDING_SCHEMA!r} ({hint})")
        missing = [key for key in SECTIONS if key not in data]
        if missing:
            raise FindingError(f"{source}: missing section(s) {', '.join(missing)}")
        validate_finding(data, source, decisions=tuple(POLARITY))
        return cls(dict(data))

    def to_json(self) -> str:
        return json.dumps(self.data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    def to_toml(self) -> str:
        return tomlkit.dumps(self.data)


def plain(value: Any) -> Any:
    """Drop None and non-finite floats (neither TOML nor JSON can hold them the same way)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items() if _keep(v)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value if _keep(v)]
    return value


def _keep(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and not math.isfinite(value))


def load_finding(path: Path) -> Finding:
    """Read a finding from .toml or .json; an unknown schema says what to do."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise FindingError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:
        raise FindingError(f"{path}: not a readable finding: {exc}") from None
    if not isinstance(data, dict):
        raise FindingError(f"{path}: not a readable finding: top level is not a table")
    return Finding.from_dict(data, source=str(path))


def write_finding(finding: Finding, out_dir: Path) -> tuple[Path, Path]:
    """Write `<out>/<id>.toml` and `.json` (same content), each atomically."""
    toml_path, json_path = out_dir / f"{finding.id}.toml", out_dir / f"{finding.id}.json"
    write_output(toml_path, finding.to_toml(), "finding")
    write_output(json_path, finding.to_json(), "finding")
    return toml_path, json_path


# -- analysis --------------------------------------------------------------------------------------

def primary_value(record: RunRecord, primary: str) -> float | None:
    if primary == ALWAYS_MEASURED:
        return record.outcome.process_wallclock_s
    return record.outcome.metrics.get(primary)


def records_table(records: Sequence[RunRecord], primary: str) -> pd.DataFrame:
    """The run table rules work on; a run without its primary metric counts as failed. Warm-up runs
    (round 0) are not in it: they are discarded by preregistration."""
    rows = []
    for record in records:
        if record.pair == WARMUP_ROUND:
            continue
        value = primary_value(record, primary)
        error = record.outcome.error
        if not error and value is None:
            error = f"primary metric '{primary}' missing or not a finite number"
        if not error and value is not None and not value > 0:
            # Δ is relative to the off arm's mean: a time, a rate or a loss used as primary must be > 0.
            error = f"primary metric '{primary}' is {value:g}, not a positive number"
        if not error and not record.artifacts_ok:
            error = "hashed artifact changed during the run"
        rows.append({"order": record.order, "arm": record.arm, "label": record.label, "pair": record.pair,
                     "value": value, "failed": bool(error), "error": error, "samples": record.window.samples,
                     "load1_mean": record.window.load1_mean, "load1_max": record.window.load1_max,
                     "backend_evidence": "; ".join(record.window.evidence),
                     "on_ac": record.window.on_ac, "retry_of": record.retry_of})
    return rules.run_table(rows)


def config_check(records: Sequence[RunRecord], off_arm: str, on_arm: str,
                 expect_diff: Sequence[str]) -> tuple[list[str], list[str]]:
    """Invalid reasons and warnings from the trainers' echoed effective configs."""
    by_arm: dict[str, list[Mapping[str, Any]]] = {off_arm: [], on_arm: []}
    for record in records:
        if not record.failed and record.arm in by_arm:
            by_arm[record.arm].append(record.outcome.config)
    if not all(any(c) for c in by_arm.values()):
        note = "the trainer echoed no effective config, so the arms' difference is unchecked"
        return [], [note + f" (expect_diff = {list(expect_diff)})"] if expect_diff else [note]
    invalid = []
    for arm, configs in by_arm.items():
        keys = sorted({k for c in configs for k in c if any(c.get(k) != o.get(k) for o in configs)}, key=str)
        if keys:
            invalid.append(f"effective config differs between runs of arm {arm}: {', '.join(keys)}")
    off_config, on_config = by_arm[off_arm][0], by_arm[on_arm][0]
    differing = {k for k in set(off_config) | set(on_config) if off_config.get(k) != on_config.get(k)}
    unexpected = sorted(differing - set(expect_diff), key=str)
    absent = sorted(set(expect_diff) - differing, key=str)
    if unexpected:
        invalid.append(f"arms differ in undeclared effective-config key(s): {', '.join(unexpected)} "
                       f"(expect_diff = {list(expect_diff)})")
    if absent:
        invalid.append(f"declared flag(s) do not differ in the effective config: {', '.join(absent)} "
                       "(a silent fallback?)")
    return invalid, []


def _metric_values(used: pd.DataFrame, records: Sequence[RunRecord], arm: str, metric: str) -> list[float]:
    by_label = {r.label: r for r in records}
    values = []
    for label in used.loc[used["arm"] == arm, "label"]:
        value = by_label[label].outcome.metrics.get(metric)
        if metric == ALWAYS_MEASURED:
            value = by_label[label].outcome.process_wallclock_s
        if value is not None:
            values.append(value)
    return values


def analyze(evidence: SeriesEvidence) -> Finding:
    """Compute stats, rules, guards, sensitivity and the verdict: a pure function of the evidence."""
    spec, records = evidence.spec, evidence.records
    off_arm, on_arm = spec.off_arm, spec.on_arm
    is_sequential = spec.policy == "sequential"
    cores = evidence.provenance.get("host", {}).get("cpu_count")
    if is_sequential:
        table = sequential.classify(records_table(records, spec.primary), spec.rules, evidence.replaced, cores)
    else:
        table = rules.classify(records_table(records, spec.primary), spec.rules, evidence.replaced)
    used = table[table["used"]]

    invalid = list(evidence.invalid_reasons)
    warnings = list(evidence.warnings)
    # the sequential policy turns a run flagged twice into "inconclusive"; a failure stays invalid
    problem = table["failed"] if is_sequential else table["failed"] | table["contaminated"]
    unresolved = table[~table["replaced"] & problem]
    for row in unresolved.itertuples():
        invalid.append(f"{row.label} {row.reason} and its pair has no retry left")
    if spec.rules.require_window_samples:
        for row in table[table["missing_window"] & ~table["replaced"]].itertuples():
            invalid.append(f"{row.label} has no in-window load samples; it cannot be audited")
    config_invalid, config_warnings = config_check(
        [r for r in records if r.label in set(used["label"])], off_arm, on_arm, spec.expect_diff)
    invalid += config_invalid
    warnings += config_warnings

    off = used.loc[used["arm"] == off_arm, "value"].tolist()
    on = used.loc[used["arm"] == on_arm, "value"].tolist()
    if len(off) < 2 or len(on) < 2:
        invalid.append(f"fewer than two used runs in an arm (off {len(off)}, on {len(on)})")
    mean_off, mean_on = stats.mean(off), stats.mean(on)
    sigma_off_pct, sigma_on_pct = stats.relative_sd_pct(off), stats.relative_sd_pct(on)
    delta = stats.delta_pct(mean_off, mean_on) if off and on else math.nan
    threshold = stats.threshold_pct(sigma_off_pct, spec.threshold.sigma_k, spec.threshold.floor_pct)
    pairs = []
    for _, rows in used.groupby("pair"):
        values = dict(zip(rows["arm"], rows["value"]))
        if off_arm in values and on_arm in values:
            pairs.append((values[off_arm], values[on_arm]))
    consistent = f"{stats.pairs_better(pairs, spec.direction)}/{len(pairs)}"

    guards: list[GuardResult] = [
        evaluate_guard(g, _metric_values(used, records, off_arm, g.metric),
                       _metric_values(used, records, on_arm, g.metric))
        for g in spec.guards]

    max_z = stats.max_attainable_z(len(off)) if spec.rules.sigma_ref == "arm" else None
    if is_sequential and not cores:
        warnings.append("the host's CPU count is unknown, so load per core cannot flag runs")
    if max_z is not None and max_z < spec.rules.sigma_k and not is_sequential:
        warnings.append(f"rule (ii) cannot fire: at n={len(off)} no run can be more than {max_z:.3f}σ from "
                        f"its own arm's mean (Samuelson bound (n−1)/√n), below sigma_k = {spec.rules.sigma_k:g}; "
                        "contamination retries are effectively disabled")

    sensitivity = rules.exclusion_sensitivity(
        used, off_arm, on_arm, sigma_k=spec.threshold.sigma_k, floor_pct=spec.threshold.floor_pct,
        direction=spec.direction, load_stat=spec.rules.load_stat)
    flips = [row.variant for row in sensitivity[1:] if row.decision != sensitivity[0].decision]
    if flips and not invalid and not is_sequential:
        warnings.append("the decision is sensitive to single runs: it changes when you " + "; ".join(flips))

    diag = diagnostics.diagnose(
        off, on, used.loc[used["arm"] == off_arm, "order"].tolist(), used.loc[used["arm"] == on_arm, "order"].tolist(),
        direction=spec.direction, pairs_better=stats.pairs_better(pairs, spec.direction), pairs=len(pairs))
    warnings += diagnostics.classic_warnings(
        diag, order=spec.order, sigma_off_pct=sigma_off_pct, sigma_on_pct=sigma_on_pct, delta_pct=delta,
        threshold_pct=threshold, decide=lambda d, t: rules.point_decision(d, t, spec.direction),
        policy=spec.policy)
    guard_rows: dict[str, dict[str, Any]] = {}
    for spec_g, guard in zip(spec.guards, guards):
        noise = diagnostics.guard_noise(spec_g, _metric_values(used, records, off_arm, spec_g.metric),
                                        _metric_values(used, records, on_arm, spec_g.metric))
        guard_rows[guard.metric] = {**guard.to_dict(), **(noise.to_dict() if noise else {})}
        if noise is not None and noise.within_noise and guard.delta is not None and not is_sequential:
            warnings.append(diagnostics.guard_warning(guard.metric, guard.delta, noise, guard.limit))

    verdict = decide(delta_pct=delta, threshold_pct=threshold, direction=spec.direction, primary=spec.primary,
                     guards=guards, invalid_reasons=invalid, warnings=warnings)
    outcome: sequential.SequentialOutcome | None = None
    if is_sequential:
        outcome, verdict = _sequential_verdict(table, records, spec, verdict, warnings)
    data = {
        "schema": FINDING_SCHEMA,
        "meta": _meta(evidence, verdict),
        "gate": {
            "id": spec.gate_id, "arms": {"off": off_arm, "on": on_arm}, "n": spec.n, "order": spec.order,
            "seed": spec.seed, "primary": spec.primary, "direction": spec.direction,
            "expect_diff": list(spec.expect_diff), "policy": spec.policy, "warmup": spec.warmup,
            **_seed_info(spec, evidence.predecision_sha256),
            "threshold": {"sigma_k": spec.threshold.sigma_k, "floor_pct": spec.threshold.floor_pct,
                          "rule": f"max({spec.threshold.sigma_k:g}·σ_off, {spec.threshold.floor_pct:g} %)"},
            "guards": [{"metric": g.metric, "direction": g.direction, "max_drop": g.max_drop}
                       for g in spec.guards],
        },
        "predecision": {"path": evidence.predecision_path, "sha256": evidence.predecision_sha256},
        "provenance": dict(evidence.provenance),
        "rules": {**_rules_dict(spec), "max_attainable_z": max_z,
                  "rule_ii_reachable": None if max_z is None else max_z >= spec.rules.sigma_k},
        "runs": _run_rows(table, records),
        "stats": {
            "n_off": len(off), "n_on": len(on), "mean_off": mean_off, "mean_on": mean_on,
            "sigma_off_pct": sigma_off_pct, "sigma_on_pct": sigma_on_pct, "delta_pct": delta,
            "threshold_pct": threshold, "pairs_consistent": consistent, **diag.to_dict(),
        },
        "guards": guard_rows,
        "sensitivity": [row.to_dict() for row in sensitivity],
        "verdict": verdict.to_dict(),
    }
    if outcome is not None:
        data["sequential"] = outcome.to_dict(spec.threshold.floor_pct)
    data["sections"] = narrative(data)
    return Finding(plain(data))


def _seed_info(spec: DecisionSpec, predecision_sha256: str) -> dict[str, Any]:
    """The order seed as given, or as derived from the predecision's sha256 (then with its source)."""
    if spec.seed is not None:
        return {"seed": spec.seed}
    if needs_seed(spec.order) and predecision_sha256:
        return {"seed": order_seed(predecision_sha256), "seed_source": "predecision sha256"}
    return {}


def _sequential_verdict(table: pd.DataFrame, records: Sequence[RunRecord], spec: DecisionSpec,
                        classic: Verdict, warnings: list[str]) -> tuple[sequential.SequentialOutcome, Verdict]:
    """The sequential policy decides; the classic verdict is reported beside it as one reason."""
    by_label = {r.label: r for r in records}
    guard_values = {g.metric: {label: value for label, value in
                               ((lbl, _metric_of(by_label[lbl], g.metric)) for lbl in table["label"])
                               if value is not None} for g in spec.guards}
    outcome = sequential.decide(table, guard_values, off_arm=spec.off_arm, on_arm=spec.on_arm,
                                guard_specs=spec.guards, floor_pct=spec.threshold.floor_pct,
                                direction=spec.direction, primary=spec.primary)
    all_warnings = (*warnings, *outcome.warnings)
    if classic.decision == "invalid":  # nothing to extend: the series cannot be trusted
        return dataclasses.replace(outcome, extend=False), Verdict("invalid", classic.reasons, all_warnings)
    decision, reasons = outcome.decision, list(outcome.reasons)
    if decision == "continue":  # look 1 undecided and stage 2 never ran
        decision = "inconclusive"
        reasons.append("stage 2 did not run, so look 2 is missing")
    reasons.append(f"classic rule beside it (decides nothing here): {classic.decision} — "
                   + (classic.reasons[0] if classic.reasons else ""))
    return outcome, Verdict(decision, tuple(reasons), all_warnings)


def _metric_of(record: RunRecord, metric: str) -> float | None:
    return record.outcome.process_wallclock_s if metric == ALWAYS_MEASURED else record.outcome.metrics.get(metric)


def _rules_dict(spec: DecisionSpec) -> dict[str, Any]:
    r = spec.rules
    return {"load_stat": r.load_stat, "load_limit": r.load_limit, "load_rel_median": r.load_rel_median,
            "sigma_k": r.sigma_k, "sigma_ref": r.sigma_ref, "max_retries": r.max_retries,
            "require_window_samples": r.require_window_samples, "sample_interval_s": r.sample_interval_s,
            "sigma_history_pct": r.sigma_history_pct, "load_per_core_limit": r.load_per_core_limit}


def _meta(evidence: SeriesEvidence, verdict: Verdict) -> dict[str, Any]:
    spec = evidence.spec
    git_start = evidence.provenance.get("git", {}).get("start", {})
    return {
        "id": evidence.finding_id, "title": spec.title or f"{spec.gate_id}: {spec.on_arm} vs {spec.off_arm}",
        "date": evidence.date, "status": "final" if verdict.decision != "invalid" else "invalid",
        "category": "gate", "polarity": POLARITY[verdict.decision],
        "tags": [spec.gate_id, f"gate-{verdict.decision}", *spec.expect_diff],
        "commit": git_start.get("rev"), "branch": git_start.get("branch"),
        "series_id": evidence.series_id, "config_paths": list(evidence.config_paths),
        "related_runs": list(evidence.related_runs), "related_findings": [],
    }


def _run_rows(table: pd.DataFrame, records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    by_label = {r.label: r for r in records}
    rows = []
    for row in table.sort_values("order").itertuples():
        record = by_label[row.label]
        rows.append({
            "order": int(row.order), "arm": row.arm, "label": row.label, "pair": int(row.pair),
            "exit_code": record.outcome.exit_code, "timed_out": record.outcome.timed_out,
            "metrics": dict(record.outcome.metrics), "process_wallclock_s": record.outcome.process_wallclock_s,
            "window": record.window.to_dict(), "load_evidence": bool(row.load_evidence), "z": float(row.z),
            "contaminated": bool(row.contaminated), "retry_of": record.retry_of, "used": bool(row.used),
            "reason": row.reason, "started_at": record.started_at, "config": dict(record.outcome.config),
        })
    warmups = [r for r in records if r.pair == WARMUP_ROUND]
    for record in warmups:
        reason = "warm-up run, discarded by preregistration" + (f" (failed: {record.outcome.error})"
                                                                 if record.failed else "")
        rows.append({
            "order": record.order, "arm": record.arm, "label": record.label, "pair": record.pair,
            "exit_code": record.outcome.exit_code, "timed_out": record.outcome.timed_out,
            "metrics": dict(record.outcome.metrics), "process_wallclock_s": record.outcome.process_wallclock_s,
            "window": record.window.to_dict(), "load_evidence": False, "z": 0.0, "contaminated": False,
            "retry_of": record.retry_of, "used": False, "reason": reason, "started_at": record.started_at,
            "config": dict(record.outcome.config), "warmup": True,
        })
    return sorted(rows, key=lambda row: row["order"]) if warmups else rows


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def narrative(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Narrative blocks in the seed finding's shape (lead, heading, table, kv, callout, list)."""
    gate, s, verdict = data["gate"], data["stats"], data["verdict"]
    primary = gate["primary"]
    guard_names = [g["metric"] for g in gate["guards"]]
    off_arm, on_arm = gate["arms"]["off"], gate["arms"]["on"]
    decision = verdict["decision"]
    lead = (f"Interleaved {gate['order']} gate of `{on_arm}` against `{off_arm}`, {gate['n']} runs per arm, "
            f"deciding on {primary} ({gate['direction']} is better). Decision: **{decision}** — "
            f"Δ {_fmt(s.get('delta_pct'))} % against a threshold of {_fmt(s.get('threshold_pct'))} %.")
    seq = data.get("sequential")
    if seq:
        last = seq["looks"][-1] if seq["looks"] else {}
        lead = (f"Sequential gate of `{on_arm}` against `{off_arm}` in {gate['order']} order, "
                f"{' then '.join(str(n) for n in seq['runs_per_arm'])} runs per arm, deciding on {primary} "
                f"({gate['direction']} is better). Decision: **{decision}** at look {last.get('look', '—')} — "
                f"Δ {_signed(last.get('delta_pct'))} as a ratio of geometric means, "
                f"{100 * last.get('ci_level', 0):g} % CI [{_signed(last.get('ci_low_pct'))}, "
                f"{_signed(last.get('ci_high_pct'))}], floor ±{seq['floor_pct']:g} %. The classic Δ "
                f"{_fmt(s.get('delta_pct'))} % against {_fmt(s.get('threshold_pct'))} % is reported beside it.")
    columns = ["order", "arm", "run", primary, *guard_names, "load1 mean/max", "used"]
    rows = []
    for run in data["runs"]:
        window = run["window"]
        load = f"{_fmt(window.get('load1_mean'), 2)} / {_fmt(window.get('load1_max'), 2)}"
        value = run["process_wallclock_s"] if primary == ALWAYS_MEASURED else run["metrics"].get(primary)
        rows.append([str(run["order"]), run["arm"], run["label"], _fmt(value),
                     *[_fmt(run["metrics"].get(g)) for g in guard_names], load,
                     "yes" if run["used"] else f"no: {run['reason']}"])
    stat_items = [
        {"key": f"mean {off_arm} (n={s['n_off']})", "value": _fmt(s.get("mean_off"))},
        {"key": f"mean {on_arm} (n={s['n_on']})", "value": _fmt(s.get("mean_on"))},
        {"key": "σ off / σ on", "value": f"{_fmt(s.get('sigma_off_pct'))} % / {_fmt(s.get('sigma_on_pct'))} %"},
        {"key": "Δ", "value": f"{_fmt(s.get('delta_pct'))} %"},
        {"key": "threshold", "value": f"{_fmt(s.get('threshold_pct'))} % = {gate['threshold']['rule']}"},
        {"key": "pairs consistent", "value": s["pairs_consistent"]},
    ]
    for name, guard in data["guards"].items():
        stat_items.append({"key": f"guard {name}", "value": f"Δ {_fmt(guard.get('delta'))} (limit "
                           f"{guard['limit']:+g}) {'pass' if guard['pass'] else 'FAIL'}"})
    variant = {"adopted": "success", "rejected": "info", "regression": "danger", "guard_failed": "danger",
               "invalid": "warning", "equivalent": "info", "inconclusive": "warning"}[decision]
    sections: list[dict[str, Any]] = [
        {"type": "lead", "text": lead},
        {"type": "heading", "text": "Runs (execution order)"},
        {"type": "table", "columns": columns, "align": ["right", "left", "left", "right",
                                                        *["right"] * len(guard_names), "right", "left"],
         "rows": rows},
        {"type": "heading", "text": "Decision"},
        {"type": "kv", "items": stat_items},
        {"type": "callout", "label": f"Verdict: {decision}", "variant": variant,
         "text": "; ".join(verdict.get("reasons", []))},
        {"type": "heading", "text": "Exclusion sensitivity"},
        {"type": "table", "columns": ["variant", "Δ %", "threshold %", "decision"],
         "align": ["left", "right", "right", "left"],
         "rows": [[r["variant"], _fmt(r.get("delta_pct")), _fmt(r.get("threshold_pct")), r["decision"]]
                  for r in data["sensitivity"]]},
    ]
    evidence = [f"{run['label']}: {line}" for run in data["runs"] for line in run["window"].get("evidence", [])]
    if evidence:
        sections += [{"type": "heading", "text": "Backend evidence (rule i)"}, {"type": "list", "items": evidence}]
    if seq:
        sections += [
            {"type": "heading", "text": "Sequential looks"},
            {"type": "table", "columns": ["look", "runs off+on", "Δ gm %", "CI %", "p on better", "p on worse",
                                          primary, "guards", "decision"],
             "align": ["right", "right", "right", "left", "right", "right", "left", "left", "left"],
             "rows": [[str(look["look"]), f"{look['n_off']}+{look['n_on']}", _signed(look.get("delta_pct"), 4, ""),
                       f"[{_signed(look.get('ci_low_pct'), 4, '')}, {_signed(look.get('ci_high_pct'), 4, '')}]",
                       _fmt(look.get("p_better")), _fmt(look.get("p_worse")), look["primary"],
                       ", ".join(f"{k} {g['status']}" for k, g in look["guards"].items()) or "—",
                       look["decision"]] for look in seq["looks"]]},
        ]
    sections += [{"type": "heading", "text": "Diagnostics"}, {"type": "kv", "items": _diagnostic_items(s)}]
    if verdict.get("warnings"):
        sections += [{"type": "heading", "text": "Warnings"}, {"type": "list", "items": list(verdict["warnings"])}]
    return sections


def _signed(value: Any, digits: int = 4, unit: str = " %") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:+.{digits}f}{unit}"


def _diagnostic_items(s: Mapping[str, Any]) -> list[dict[str, str]]:
    """The diagnostics of `stats` as kv items (docs/statistics.md explains each)."""
    level = f"{100 * s.get('ci_level', diagnostics.CI_LEVEL):g} %"
    mde = s.get("mde_pct")
    return [
        {"key": "Δ as a ratio of geometric means", "value": f"{_signed(s.get('gm_delta_pct'))}, {level} CI "
         f"[{_signed(s.get('ci_low_pct'))}, {_signed(s.get('ci_high_pct'))}] (Welch on log values, "
         f"df {_fmt(s.get('welch_df'), 1)})"},
        {"key": "one-sided p (on better)", "value": _fmt(s.get("p_one_sided"))},
        {"key": f"minimum detectable effect ({100 * diagnostics.MDE_POWER:g} % power, one-sided α "
                f"{diagnostics.MDE_ALPHA:g})", "value": f"{_fmt(mde)} %" if mde is not None else "—"},
        {"key": "Hodges–Lehmann shift (n ≥ 4)", "value": _signed(s.get("hl_shift_pct"))},
        {"key": "drift per run off / on / pooled", "value": f"{_signed(s.get('drift_off_pct_per_run'))} / "
         f"{_signed(s.get('drift_on_pct_per_run'))} / {_signed(s.get('drift_pct_per_run'))}"},
        {"key": "order bias (pooled drift × position gap)", "value": f"{_signed(s.get('order_bias_pct'))} "
         f"(on runs {_signed(s.get('order_gap_runs'), 2, '')} runs after off)"},
        {"key": "pairs consistent as a sign test", "value": f"{s['pairs_consistent']}, one-sided p "
         f"{_fmt(s.get('pairs_sign_p'))}"},
    ]

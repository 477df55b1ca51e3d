"""From a series' evidence to a typed Finding: run table, the policy's classification and decision, the
classic figures, guards, diagnostics, sensitivity. A pure function of the evidence, so `gate analyze`
recomputes exactly what `gate run` wrote."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gatekit import diagnostics, rules, stats
from gatekit.contract import TRACE_WARM_PARENT
from gatekit.finding import (Arms, CommitsInfo, ConfigChange, CycleCheck, Finding, GateInfo, GuardRow, Meta,
                             Predecision, Provenance, RulesInfo, RunRow, Stats, ThresholdRule)
from gatekit.policies.base import Decided, Evidence, Policy
from gatekit.policy_descriptors import describe, policy_for
from gatekit.prereg import DecisionSpec
from gatekit.quality import TargetSpec, target_of
from gatekit.records import RunOutcome, RunRecord, is_time_metric, startup_overhead_s
from gatekit.report.narrative import narrative
from gatekit.runtable import RunTable, records_table
from gatekit.schedule import WARMUP_ROUND, needs_seed, order_seed
from gatekit.verdict import (BISECT_PROBE, TOO_FEW_USED, Decision, Reason, ReasonCode, Verdict, decide,
                             evaluate_guard, next_step)


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
    chain_head: str | None = None  # sha256 of the journal's last line, the series' tamper-evident summary

    @property
    def cores(self) -> int | None:
        return self.provenance.get("host", {}).get("cpu_count")


def classify(records: Sequence[RunRecord], spec: DecisionSpec, replaced: Mapping[int, rules.Replacement],
             cores: int | None) -> RunTable:
    """The run table classified by the spec's policy: used or not, and why."""
    policy = policy_for(spec.policy, spec.design_version)
    return policy.classify(records_table(records, spec.primary, spec.time_to_target), spec.rules, replaced, cores)


def config_check(records: Sequence[RunRecord], off_arm: str, on_arm: str, expect_diff: Sequence[str], *,
                 between_commits: bool = False) -> tuple[list[Reason], list[str], tuple[ConfigChange, ...]]:
    """Invalid reasons, warnings and the config differences between the arms, from the trainers' echoed effective
    configs. Each arm's config must be the same in all its runs. Between the arms, only the declared keys may
    differ — unless the arms are one arm at two commits (`between_commits`: gate compare, a bisect probe), where
    what differs is what the commits changed: recorded (key, base = off value, head = on value), never an error."""
    by_arm: dict[str, list[Mapping[str, Any]]] = {off_arm: [], on_arm: []}
    for record in records:
        if not record.failed and record.arm in by_arm:
            by_arm[record.arm].append(record.outcome.config)
    # An arm whose every run failed echoed nothing because nothing finished: the failures say so already.
    silent = [arm for arm, configs in by_arm.items() if configs and not any(configs)]
    if silent or not all(by_arm.values()):
        if len(silent) == 2:
            note = "the trainer echoed no effective config, so the arms' difference is unchecked"
        elif silent:
            note = f"the trainer echoed no effective config for arm {silent[0]}, so the arms' difference is unchecked"
        else:
            return [], [], ()
        return [], [note + f" (expect_diff = {list(expect_diff)})"] if expect_diff else [note], ()
    invalid = []
    for arm, configs in by_arm.items():
        # a key differs between runs iff some run's value differs from the first run's (linear in runs)
        first = configs[0] if configs else {}
        keys = sorted({k for c in configs for k in c} | set(first), key=str)
        keys = [k for k in keys if any(c.get(k) != first.get(k) for c in configs)]
        if keys:
            invalid.append(Reason(ReasonCode.CONFIG_DIFFERS_IN_ARM,
                                  f"effective config differs between runs of arm {arm}: {', '.join(keys)}"))
    off_config, on_config = by_arm[off_arm][0], by_arm[on_arm][0]
    differing = sorted({k for k in set(off_config) | set(on_config) if off_config.get(k) != on_config.get(k)},
                       key=str)
    if between_commits:
        return invalid, [], tuple(ConfigChange(str(k), off_config.get(k), on_config.get(k)) for k in differing)
    unexpected = sorted(set(differing) - set(expect_diff), key=str)
    absent = sorted(set(expect_diff) - set(differing), key=str)
    if unexpected:
        invalid.append(Reason(ReasonCode.CONFIG_UNDECLARED_DIFFERENCE, f"arms differ in undeclared effective-config "
                              f"key(s): {', '.join(unexpected)} (expect_diff = {list(expect_diff)})"))
    if absent:
        invalid.append(Reason(ReasonCode.CONFIG_FLAG_NOT_DIFFERING, f"declared flag(s) do not differ in the "
                              f"effective config: {', '.join(absent)} (a silent fallback?)"))
    return invalid, [], ()


@dataclass(frozen=True, slots=True)
class Assessment:
    """The decision and everything computed on the way to it — a finding without its narrative."""

    table: RunTable
    decided: Decided
    stats: Stats
    guards: Mapping[str, GuardRow]
    sensitivity: tuple[Any, ...]
    max_z: float | None
    config_diff: tuple[ConfigChange, ...] = ()  # the arms' effective configs, where they are two commits

    @property
    def verdict(self) -> Verdict:
        return self.decided.verdict


def _used_values(used: RunTable, by_label: Mapping[str, RunRecord], arm: str, metric: str) -> list[float]:
    values = [by_label[label].value_of(metric) for label in used.arm(arm).labels()]
    return [v for v in values if v is not None]


def assess(evidence: SeriesEvidence) -> Assessment:
    """Classify, compute the figures and let the policy decide: a pure function of the evidence."""
    spec, records = evidence.spec, evidence.records
    policy: Policy = policy_for(spec.policy, spec.design_version)
    off_arm, on_arm = spec.off_arm, spec.on_arm
    by_label = {r.label: r for r in records}
    table = classify(records, spec, evidence.replaced, evidence.cores)
    used = table.used

    invalid = list(evidence.invalid_reasons)
    warnings = list(evidence.warnings)
    imported_from = evidence.provenance.get("imported_from")
    for row in policy.unresolved(table):
        if isinstance(imported_from, Mapping):  # another tool's runs: not paired, and none can be run again
            invalid.append(Reason(ReasonCode.IMPORTED_RUN_FAILED, f"{row.label} {row.reason}; imported from "
                                  f"{imported_from.get('format') or 'another tool'}, it cannot be retried, so no "
                                  "run replaces it"))
        else:
            invalid.append(Reason(ReasonCode.RUN_NOT_REPLACED, f"{row.label} {row.reason} and its pair has no retry "
                                                               "left"))
    if spec.rules.require_window_samples:
        for row in table.filter(lambda row: row.missing_window and not row.replaced):
            invalid.append(Reason(ReasonCode.NO_WINDOW_SAMPLES,
                                  f"{row.label} has no in-window load samples; it cannot be audited"))
    used_labels = set(used.labels())
    config_invalid, config_warnings, config_diff = config_check(
        [r for r in records if r.label in used_labels], off_arm, on_arm, spec.expect_diff,
        between_commits=spec.commits is not None)
    invalid += config_invalid
    warnings += config_warnings
    warnings += rules.evidence_warnings(table, spec.rules)

    off, on = used.arm(off_arm).values(), used.arm(on_arm).values()
    # a bisect probe's one run per arm is its bisect's measurement; with fewer, or any other cause, it is invalid
    probe_only = spec.bisect_probe and len(off) == len(on) == 1
    if (len(off) < 2 or len(on) < 2) and not probe_only:
        invalid.append(too_few_used_reason(table, len(off), len(on)))
    mean_off, mean_on = stats.mean(off), stats.mean(on)
    sigma_off_pct, sigma_on_pct = stats.relative_sd_pct(off), stats.relative_sd_pct(on)
    delta = stats.delta_pct(mean_off, mean_on) if off and on else math.nan
    threshold = stats.threshold_pct(sigma_off_pct, spec.threshold.sigma_k, spec.threshold.floor_pct)
    pairs = []
    for rows in used.by_pair().values():
        values = {row.arm: row.value for row in rows}
        if off_arm in values and on_arm in values:
            pairs.append((values[off_arm], values[on_arm]))
    better = stats.pairs_better(pairs, spec.direction)

    guard_rows: dict[str, GuardRow] = {}
    guard_warnings = []
    for guard_spec in spec.guards:
        off_values = _used_values(used, by_label, off_arm, guard_spec.metric)
        on_values = _used_values(used, by_label, on_arm, guard_spec.metric)
        result = evaluate_guard(guard_spec, off_values, on_values)
        noise = diagnostics.guard_noise(guard_spec, off_values, on_values)
        measured: dict[str, Any] = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        within: dict[str, Any] = ({"ci_low": noise.ci_low, "ci_high": noise.ci_high, "ci_level": diagnostics.CI_LEVEL,
                                   "within_noise": noise.within_noise} if noise else {})
        guard_rows[result.metric] = GuardRow(**measured, **within)
        if noise is not None and noise.within_noise and result.delta is not None:
            guard_warnings.append(diagnostics.guard_warning(result.metric, result.delta, noise, result.limit))

    max_z = stats.max_attainable_z(len(off)) if spec.rules.sigma_ref == "arm" else None
    sensitivity = rules.exclusion_sensitivity(
        used, off_arm, on_arm, sigma_k=spec.threshold.sigma_k, floor_pct=spec.threshold.floor_pct,
        direction=spec.direction, load_stat=spec.rules.load_stat, max_threshold_pct=spec.rules.max_threshold_pct)
    diag = diagnostics.diagnose(
        off, on, [row.order for row in used.arm(off_arm)], [row.order for row in used.arm(on_arm)],
        direction=spec.direction, pairs_better=better, pairs=len(pairs))
    warnings += policy.warnings(Evidence(
        order=spec.order, direction=spec.direction, n_off=len(off), max_z=max_z, sigma_k=spec.rules.sigma_k,
        sigma_off_pct=sigma_off_pct,
        sigma_on_pct=sigma_on_pct, delta_pct=delta, threshold_pct=threshold, diagnostics=diag,
        sensitivity=sensitivity, guard_warnings=guard_warnings, invalid=bool(invalid), cores=evidence.cores))

    classic = decide(delta_pct=delta, threshold_pct=threshold, direction=spec.direction, primary=spec.primary,
                     guards=list(guard_rows.values()), invalid_reasons=invalid, warnings=warnings,
                     max_threshold_pct=spec.rules.max_threshold_pct, mde_pct=diag.mde_pct)
    decided = policy.decide(classic, table, records, off_arm=off_arm, on_arm=on_arm, primary=spec.primary,
                            direction=spec.direction, guards=spec.guards, floor_pct=spec.threshold.floor_pct,
                            warnings=warnings)
    if probe_only and decided.verdict.decision is not Decision.INVALID:
        decided = dataclasses.replace(decided, verdict=Verdict(
            Decision.INCONCLUSIVE, (Reason(ReasonCode.BISECT_PROBE, BISECT_PROBE),), decided.verdict.warnings))
    cycles = cycle_check(table, records, spec, policy, decided, list(guard_rows.values()))
    decided = confirm_in_cycles(decided, cycles, spec)
    busy = any(row.load_evidence and not row.failed for row in table)
    step = None if probe_only else next_step(decided.verdict.decision, busy=busy)
    if step and step not in decided.verdict.reasons:
        decided = dataclasses.replace(decided, verdict=dataclasses.replace(
            decided.verdict, reasons=(*decided.verdict.reasons, step)))
    figures = Stats(n_off=len(off), n_on=len(on), mean_off=mean_off, mean_on=mean_on, sigma_off_pct=sigma_off_pct,
                    sigma_on_pct=sigma_on_pct, delta_pct=delta, threshold_pct=threshold,
                    pairs_consistent=f"{better}/{len(pairs)}", cycles=cycles, **diag.to_dict())
    return Assessment(table, decided, figures, guard_rows, tuple(sensitivity), max_z, config_diff)


TWO_STATES_RATIO = 0.5  # σ in cycles at most this share of σ in time: the clock states explain the spread
TWO_STATES_MIN_SIGMA_PCT = 1.0  # below this σ in time there is no spread worth explaining


def cycle_check(table: RunTable, records: Sequence[RunRecord], spec: DecisionSpec, policy: Policy,
                decided: Decided, guards: Sequence[GuardRow]) -> CycleCheck | None:
    """Δ in cycles (each used run's time × its mean SM clock), decided by the same policy on the same runs;
    None unless the primary is a time and some run recorded its clock (a CPU gate has no clock state)."""
    if not is_time_metric(spec.primary) or all(math.isnan(row.sm_clock_mean_mhz) for row in table):
        return None
    used = table.used
    clocked = sum(1 for row in used if not math.isnan(row.sm_clock_mean_mhz))
    check = CycleCheck(runs_with_clock=clocked, used_runs=len(used))
    if clocked < len(used) or decided.extend:
        return check
    cycle_table = table.map(lambda row: dataclasses.replace(row, value=row.value * row.sm_clock_mean_mhz))
    cycle_used = cycle_table.used
    off, on = cycle_used.arm(spec.off_arm).values(), cycle_used.arm(spec.on_arm).values()
    if len(off) < 2 or len(on) < 2:
        return check
    sigma_off, sigma_on = stats.relative_sd_pct(off), stats.relative_sd_pct(on)
    delta = stats.delta_pct(stats.mean(off), stats.mean(on))
    classic = decide(delta_pct=delta, threshold_pct=stats.threshold_pct(sigma_off, spec.threshold.sigma_k,
                                                                        spec.threshold.floor_pct),
                     direction=spec.direction, primary=f"{spec.primary} x SM clock", guards=list(guards),
                     invalid_reasons=[], warnings=[], max_threshold_pct=spec.rules.max_threshold_pct)
    in_cycles = policy.decide(classic, cycle_table, records, off_arm=spec.off_arm, on_arm=spec.on_arm,
                              primary=spec.primary, direction=spec.direction, guards=spec.guards,
                              floor_pct=spec.threshold.floor_pct, warnings=[]).verdict.decision
    clock = {arm: stats.compensated_mean([row.sm_clock_mean_mhz for row in rows])
             for arm, rows in used.by_arm().items()}
    time_off, time_on = used.arm(spec.off_arm).values(), used.arm(spec.on_arm).values()
    time_sigma = max(stats.relative_sd_pct(time_off), stats.relative_sd_pct(time_on))
    cycle_sigma = max(sigma_off, sigma_on)
    two_states = (f"per-run clock states explain the spread of {spec.primary}: σ off / on "
                  f"{stats.relative_sd_pct(time_off):.2f} / {stats.relative_sd_pct(time_on):.2f} % in time, "
                  f"{sigma_off:.2f} / {sigma_on:.2f} % in cycles (time x mean SM clock)"
                  if time_sigma >= TWO_STATES_MIN_SIGMA_PCT and cycle_sigma <= TWO_STATES_RATIO * time_sigma else "")
    return dataclasses.replace(
        check, mean_clock_off_mhz=float(clock.get(spec.off_arm, math.nan)),
        mean_clock_on_mhz=float(clock.get(spec.on_arm, math.nan)), delta_cycles_pct=delta,
        sigma_off_cycles_pct=sigma_off, sigma_on_cycles_pct=sigma_on, decision_in_cycles=in_cycles.value,
        supports=in_cycles is decided.verdict.decision, two_states=two_states)


def confirm_in_cycles(decided: Decided, cycles: CycleCheck | None, spec: DecisionSpec) -> Decided:
    """Under the preregistered `rules.confirm_cycles`, a time decision that Δ in cycles does not support (or
    cannot be checked against) is inconclusive, with the reason; the two-state note is a warning either way."""
    verdict = decided.verdict
    if cycles is not None and cycles.two_states and cycles.two_states not in verdict.warnings:
        verdict = dataclasses.replace(verdict, warnings=(*verdict.warnings, cycles.two_states))
    if (not spec.rules.confirm_cycles or decided.extend or not is_time_metric(spec.primary)
            or verdict.decision in (Decision.INVALID, Decision.INCONCLUSIVE)
            or (cycles is not None and cycles.supports)):
        return dataclasses.replace(decided, verdict=verdict)
    if cycles is None:
        why = "no run recorded its SM clock, so the time decision cannot be confirmed in cycles"
    elif cycles.supports is None:
        why = (f"{cycles.used_runs - cycles.runs_with_clock} of {cycles.used_runs} used runs recorded no SM "
               "clock, so the time decision cannot be confirmed in cycles")
    else:
        why = (f"Δ in cycles (time x mean SM clock) {cycles.delta_cycles_pct:+.2f} % decides "
               f"{cycles.decision_in_cycles}, not {verdict.decision.value}: the time difference is not confirmed "
               "in cycle space, so the GPU's clock may explain it rather than the change")
    reason = Reason(ReasonCode.NOT_CONFIRMED_IN_CYCLES,
                    f"{why} (rules.confirm_cycles, preregistered); was {verdict.decision.value}")
    return dataclasses.replace(decided, verdict=dataclasses.replace(
        verdict, decision=Decision.INCONCLUSIVE, reasons=(reason, *verdict.reasons)))


def too_few_used_reason(table: RunTable, n_off: int, n_on: int) -> Reason:
    """Why an arm has fewer than two used runs, with the cause: the machine was busy (runs flagged by load or
    telemetry evidence, and no replacement left), the trainer failed, or both — counted over every run."""
    total = len(table)
    flagged, kinds = rules.flagged_summary(table)
    failed = sum(1 for row in table if row.failed)
    causes = []
    if flagged:
        causes.append(("the machine was busy: " if 2 * flagged >= total else "")
                      + f"{flagged} of {total} runs flagged" + (f" by {kinds}" if kinds else "")
                      + ", and no replacement left")
    if failed:
        causes.append(f"{failed} of {total} runs failed")
    return Reason(ReasonCode.TOO_FEW_USED, f"{TOO_FEW_USED} (off {n_off}, on {n_on})"
                  + (": " + "; ".join(causes) if causes else ""))


def analyze(evidence: SeriesEvidence) -> Finding:
    """The finding of a series: its assessment, the records it came from, and the narrative."""
    spec = evidence.spec
    assessment = assess(evidence)
    finding = Finding(
        meta=_meta(evidence, assessment.verdict.decision, assessment.config_diff),
        gate=GateInfo(
            id=spec.gate_id, arms=Arms(spec.off_arm, spec.on_arm), n=spec.n,
            order=describe(spec.policy).recorded_order(spec.order),
            primary=spec.primary, direction=spec.direction, expect_diff=spec.expect_diff, policy=spec.policy,
            warmup=spec.warmup, **_seed_info(spec, evidence.predecision_sha256),
            threshold=ThresholdRule(spec.threshold.sigma_k, spec.threshold.floor_pct,
                                    rule=f"max({spec.threshold.sigma_k:g}·σ_off, {spec.threshold.floor_pct:g} %)"),
            guards=spec.guards, time_to_target=spec.time_to_target),
        predecision=Predecision(evidence.predecision_path, evidence.predecision_sha256,
                                chain_head=evidence.chain_head),
        provenance=Provenance.from_dict(evidence.provenance),
        rules=RulesInfo(spec.rules, assessment.max_z,
                        None if assessment.max_z is None else assessment.max_z >= spec.rules.sigma_k),
        runs=_run_rows(assessment.table, evidence.records, spec.primary, spec.time_to_target),
        stats=assessment.stats,
        guards=assessment.guards,
        sensitivity=assessment.sensitivity,
        verdict=assessment.verdict,
        sequential=assessment.decided.sequential,
        duet=assessment.decided.duet,
        ranks=assessment.decided.ranks,
    )
    return dataclasses.replace(finding, sections=narrative(finding))


def _seed_info(spec: DecisionSpec, predecision_sha256: str) -> dict[str, Any]:
    """The order seed as given, or as derived from the predecision's sha256 (then with its source)."""
    if spec.seed is not None:
        return {"seed": spec.seed}
    if needs_seed(spec.order) and predecision_sha256:
        return {"seed": order_seed(predecision_sha256), "seed_source": "predecision sha256"}
    return {}


def _meta(evidence: SeriesEvidence, decision: Decision, config_diff: tuple[ConfigChange, ...]) -> Meta:
    spec = evidence.spec
    commits = spec.commits
    compared = None if commits is None else CommitsInfo(commits.base, commits.head, commits.requested_base,
                                                        commits.merge_base, config_diff)
    git_start = evidence.provenance.get("git", {}).get("start", {})
    return Meta(
        # without a title, the gate id: reports already say "on vs off" beside the title
        id=evidence.finding_id, title=spec.title or spec.gate_id,
        date=evidence.date, status="invalid" if decision is Decision.INVALID else "final", category="gate",
        polarity=decision.polarity, tags=(spec.gate_id, f"gate-{decision.value}", *spec.expect_diff),
        commit=git_start.get("rev"), branch=git_start.get("branch"), series_id=evidence.series_id,
        config_paths=evidence.config_paths, related_runs=evidence.related_runs, related_findings=(), commits=compared)


def _run_rows(table: RunTable, records: Sequence[RunRecord], primary: str,
              target: TargetSpec | None = None) -> tuple[RunRow, ...]:
    by_label = {r.label: r for r in records}
    rows = []
    for row in table.in_order():
        record = by_label[row.label]
        rows.append(_run_row(record, primary, target, load_evidence=row.load_evidence, z=row.z,
                             contaminated=row.contaminated, used=row.used, reason=row.reason))
    warmups = [r for r in records if r.pair == WARMUP_ROUND]
    for record in warmups:
        reason = "warm-up run, discarded by preregistration" + (f" (failed: {record.outcome.error})"
                                                                 if record.failed else "")
        rows.append(_run_row(record, primary, target, used=False, reason=reason, warmup=True))
    return tuple(sorted(rows, key=lambda row: row.order)) if warmups else tuple(rows)


def warm_parent_of(outcome: RunOutcome) -> int | None:
    """The warm parent a run was forked from, as its driver traced it (`[driver] preload`); None if cold."""
    pid = outcome.trace.get(TRACE_WARM_PARENT)
    return pid if isinstance(pid, int) and not isinstance(pid, bool) else None


def _run_row(record: RunRecord, primary: str, target: TargetSpec | None, **classified: Any) -> RunRow:
    outcome = record.outcome
    startup_s = startup_overhead_s(outcome.metrics, outcome.process_wallclock_s, primary)
    return RunRow(order=record.order, arm=record.arm, label=record.label, pair=record.pair,
                  exit_code=outcome.exit_code, timed_out=outcome.timed_out, metrics=dict(outcome.metrics),
                  process_wallclock_s=outcome.process_wallclock_s, window=record.window, retry_of=record.retry_of,
                  started_at=record.started_at, config=dict(outcome.config), slot=record.slot, startup_s=startup_s,
                  warm_parent=warm_parent_of(outcome),
                  target=target_of(outcome, primary, target), **classified)

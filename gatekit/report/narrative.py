"""The narrative sections gatekit writes into every finding, in the seed finding's shape (lead, heading,
table, kv, callout, list). Read from the typed finding; each section is marked `generated`, so a report
can tell them from the sections people add."""

from __future__ import annotations

from typing import Any, Mapping

from gatekit import diagnostics
from gatekit.finding import Finding, Section, Stats, generated_section as _section
from gatekit.formatting import fmt, fmt_signed
from gatekit.policies.base import words_of


# The narrative's runs table stops here: a table of thousands of rows reads as nothing (the runs themselves are
# all in the finding), and TOML writers grow quadratically with an array's length.
RUNS_TABLE_MAX = 200


def _warm_start_line(finding: Finding) -> str:
    """Which runs were forked from a warm parent (`[driver] preload`), '' when none was."""
    warm = [run.label for run in finding.runs if run.warm_parent is not None]
    if not warm:
        return ""
    parents = len({run.warm_parent for run in finding.runs if run.warm_parent is not None})
    which = "every run" if len(warm) == len(finding.runs) else f"{len(warm)} of {len(finding.runs)} runs ({', '.join(warm)})"
    return (f"warm start: {which} forked from {parents} warm parent{'s' if parents > 1 else ''} that preloaded "
            "the driver's modules (driver.preload); each run its own process, its CUDA initialised fresh")


def narrative(finding: Finding) -> tuple[Section, ...]:
    """Narrative blocks in the seed finding's shape (lead, heading, table, kv, callout, list)."""
    gate, s, verdict = finding.gate, finding.stats, finding.verdict
    primary = gate.primary
    guard_names = [g.metric for g in gate.guards]
    off_arm, on_arm = finding.off_arm, finding.on_arm
    decision = verdict.decision
    kind = "Blocked (not interleaved) comparison" if gate.order == "blocked" else f"Interleaved {gate.order} gate"
    lead = (f"{kind} of `{on_arm}` against `{off_arm}`, {gate.n} runs per arm, "
            f"deciding on {primary} ({gate.direction} is better). Decision: **{decision.value}** — "
            f"Δ {fmt_signed(s.delta_pct, unit=' %')} against a threshold of {fmt(s.threshold_pct)} %.")
    words = words_of(finding)  # the policy's own: its lead, its sections
    lead = words.lead or lead
    # start-up overhead (wallclock − primary) is shown only when the primary is a time, so it exists
    shows_startup = any(run.startup_s is not None for run in finding.runs)
    startup_column = ("start-up s",) if shows_startup else ()
    # the GPU's clock state (time-weighted over the window's non-idle samples) where the backend recorded one
    shows_clock = any(isinstance(run.window.telemetry.get("sm_clock_mean_mhz"), (int, float)) for run in finding.runs)
    clock_column = ("SM clock MHz (share below max)",) if shows_clock else ()
    columns = ("order", "arm", "run", primary, *startup_column, *guard_names, "load1 mean/max", *clock_column, "used")
    rows = []
    for run in finding.runs[:RUNS_TABLE_MAX]:
        load = f"{fmt(run.window.load1_mean, 2)} / {fmt(run.window.load1_max, 2)}"
        startup = (fmt(run.startup_s),) if shows_startup else ()
        clock = (_clock_cell(run.window.telemetry),) if shows_clock else ()
        rows.append((str(run.order), run.arm, run.label, fmt(run.value_of(primary)), *startup,
                     *[fmt(run.metrics.get(g)) for g in guard_names], load, *clock,
                     "yes" if run.used else f"no: {run.reason}"))
    stat_items = [
        {"key": f"mean {off_arm} (n={s.n_off})", "value": fmt(s.mean_off)},
        {"key": f"mean {on_arm} (n={s.n_on})", "value": fmt(s.mean_on)},
        {"key": "σ off / σ on", "value": f"{fmt(s.sigma_off_pct)} % / {fmt(s.sigma_on_pct)} %"},
        {"key": "Δ", "value": fmt_signed(s.delta_pct, unit=" %")},
        {"key": "threshold", "value": f"{fmt(s.threshold_pct)} % = {gate.threshold.rule}"},
        {"key": "pairs consistent", "value": s.pairs_consistent},
    ]
    if s.cycles is not None and s.cycles.delta_cycles_pct is not None:
        stat_items.append({"key": "Δ in cycles (time x mean SM clock)", "value":
                           f"{fmt(s.cycles.delta_cycles_pct)} %, σ off / on {fmt(s.cycles.sigma_off_cycles_pct)} % / "
                           f"{fmt(s.cycles.sigma_on_cycles_pct)} %: decides {s.cycles.decision_in_cycles}"})
    for name, guard in finding.guards.items():
        stat_items.append({"key": f"guard {name}", "value": f"Δ {fmt(guard.delta)} (limit "
                           f"{guard.limit:+g}) {'pass' if guard.passed else 'FAIL'}"})
    sections = [
        _section("lead", text=lead),
        _section("heading", text="Runs (execution order)"),
        _section("table", columns=columns, align=("right", "left", "left", "right", *["right"] * len(startup_column),
                                                  *["right"] * len(guard_names), "right",
                                                  *["right"] * len(clock_column), "left"), rows=tuple(rows)),
        *([_section("list", items=(f"the first {RUNS_TABLE_MAX} of {len(finding.runs)} runs; every run is in "
                                    "the finding's runs",))] if len(finding.runs) > RUNS_TABLE_MAX else []),
        *([_section("list", items=(warm,))] if (warm := _warm_start_line(finding)) else []),
        _section("heading", text="Decision"),
        _section("kv", items=tuple(stat_items)),
        _section("callout", label=f"Verdict: {decision.value}", variant=decision.severity,
                 text="; ".join(verdict.reasons)),
        _section("heading", text="Exclusion sensitivity"),
        _section("table", columns=("variant", "Δ %", "threshold %", "decision"),
                 align=("left", "right", "right", "left"),
                 rows=tuple((r.variant, fmt(r.delta_pct), fmt(r.threshold_pct), r.decision.value)
                            for r in finding.sensitivity)),
    ]
    evidence = [f"{run.label}: {line}" for run in finding.runs for line in run.window.evidence]
    if evidence:
        sections += [_section("heading", text="Backend evidence (rule i)"), _section("list", items=tuple(evidence))]
    sections += words.sections
    sections += [_section("heading", text="Diagnostics"), _section("kv", items=tuple(_diagnostic_items(s)))]
    if verdict.warnings:
        sections += [_section("heading", text="Warnings"), _section("list", items=tuple(verdict.warnings))]
    return tuple(sections)


def _diagnostic_items(s: Stats) -> list[dict[str, str]]:
    """The diagnostics of `stats` as kv items (docs/statistics.md explains each)."""
    level = f"{100 * (s.ci_level if s.ci_level is not None else diagnostics.CI_LEVEL):g} %"
    return [
        {"key": "Δ as a ratio of geometric means", "value": f"{fmt_signed(s.gm_delta_pct, unit=' %')}, {level} CI "
         f"[{fmt_signed(s.ci_low_pct, unit=' %')}, {fmt_signed(s.ci_high_pct, unit=' %')}] (Welch on log values, "
         f"df {fmt(s.welch_df, 1)})"},
        {"key": "one-sided p (on better)", "value": fmt(s.p_one_sided)},
        {"key": f"minimum detectable effect ({100 * diagnostics.MDE_POWER:g} % power, one-sided α "
                f"{diagnostics.MDE_ALPHA:g})", "value": fmt(s.mde_pct, unit=" %")},
        {"key": "Hodges–Lehmann shift (n ≥ 4)", "value": fmt_signed(s.hl_shift_pct, unit=' %')},
        {"key": "drift per run off / on / pooled", "value": f"{fmt_signed(s.drift_off_pct_per_run, unit=' %')} / "
         f"{fmt_signed(s.drift_on_pct_per_run, unit=' %')} / {fmt_signed(s.drift_pct_per_run, unit=' %')}"},
        {"key": "order bias (pooled drift × position gap)", "value": f"{fmt_signed(s.order_bias_pct, unit=' %')} "
         f"(on runs {fmt_signed(s.order_gap_runs, 2)} runs after off)"},
        {"key": "pairs consistent as a sign test", "value": f"{s.pairs_consistent}, one-sided p "
         f"{fmt(s.pairs_sign_p)}"},
    ]


def _clock_cell(telemetry: Mapping[str, Any]) -> str:
    """A run's mean SM clock and the share of its busy samples below the max (or locked) clock: '1980 (0.00)'."""
    mean, below = telemetry.get("sm_clock_mean_mhz"), telemetry.get("sm_clock_below_ref_frac")
    if not isinstance(mean, (int, float)):
        return "—"
    return f"{mean:.0f}" + (f" ({below:.2f})" if isinstance(below, (int, float)) else "")

"""The one-screen terminal summary of a finding."""

from __future__ import annotations

from gatekit.finding import Finding, RunRow
from gatekit.formatting import fmt, fmt_signed, level_text as _level
from gatekit.policies.base import words_of
from gatekit.report.common import commits_lines, runs_per_arm
from gatekit.sanitize import show_controls


def render_table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths]), *[line(r) for r in rows]]


# Above this many runs, the table shows the first and the last TABLE_EDGE_ROWS and counts the rest (a 6 000-run
# import once printed 6 000 rows); every run stays in the finding, its report and `gate analyze`.
TABLE_MAX_ROWS = 40
TABLE_EDGE_ROWS = 10


def _shown_runs(finding: Finding) -> list[RunRow | None]:
    """The runs the table shows, None where the ones not shown are counted."""
    runs = list(finding.runs)
    if len(runs) <= TABLE_MAX_ROWS:
        return list(runs)
    return [*runs[:TABLE_EDGE_ROWS], None, *runs[-TABLE_EDGE_ROWS:]]


def summary(finding: Finding, paths: tuple[str, ...] = ()) -> str:
    """The finding on one screen: the runs, the statistics, the guards, the looks and the verdict."""
    # every string from the finding or a trainer, before it reaches the terminal: a newline in one is escaped
    # too, so it cannot forge a summary line
    t = show_controls
    paths = tuple(t(p) for p in paths)
    gate, s, verdict = finding.gate, finding.stats, finding.verdict
    primary = gate.primary
    guard_names = list(finding.guards)
    header = ["#", "arm", "run", t(primary), *[t(g) for g in guard_names], "load1 mean/max", "used"]
    rows = []
    for run in _shown_runs(finding):
        if run is None:
            hidden = finding.runs[TABLE_EDGE_ROWS:-TABLE_EDGE_ROWS]
            used = sum(1 for r in hidden if r.used)
            rows.append(["…", "", f"{len(hidden)} runs not shown", "", *[""] * len(guard_names), "",
                         f"{used} used"])
            continue
        window = run.window
        rows.append([str(run.order), t(run.arm), t(run.label), fmt(run.value_of(primary)),
                     *[fmt(run.metrics.get(g)) for g in guard_names],
                     f"{fmt(window.load1_mean, 2)} / {fmt(window.load1_max, 2)}",
                     "yes" if run.used else f"no ({t(run.reason)})"])
    right = {0, 3, *range(4, 4 + len(guard_names)), 4 + len(guard_names)}
    words = words_of(finding)  # the policy's own: how its runs were arranged, how many, its lines
    size = t(words.size or runs_per_arm(finding))
    arrangement = t(words.arrangement or gate.order)  # a duet has no order: its pairs ran together on two slots
    lines = [f"gate {t(gate.id)}: {t(finding.on_arm)} vs {t(finding.off_arm)} "
             f"({arrangement}, {size}, {t(primary)}, {t(gate.direction)} is better)", ""]
    compared = commits_lines(finding)
    lines += [t(line) for line in compared] + ([""] if compared else [])
    lines += render_table(header, rows, right)
    lines += [f"evidence {t(run.label)}: {t(line)}" for run in finding.runs for line in run.window.evidence]
    lines += ["",
              f"mean off {fmt(s.mean_off)}  mean on {fmt(s.mean_on)}  "
              f"σ_off {fmt(s.sigma_off_pct)} %  σ_on {fmt(s.sigma_on_pct)} %",
              f"{t(words.classic_label)}Δ {fmt_signed(s.delta_pct, unit=' %')}   threshold {fmt(s.threshold_pct)} % "
              f"({t(gate.threshold.rule)})   pairs consistent {t(s.pairs_consistent)}"]
    if s.gm_delta_pct is not None:
        lines.append(f"Δ_gm {fmt_signed(s.gm_delta_pct)} % ({_level(s.ci_level)} CI {fmt_signed(s.ci_low_pct)} … "
                     f"{fmt_signed(s.ci_high_pct)} %)   one-sided p {fmt(s.p_one_sided)}   "
                     f"MDE(80 %) {fmt(s.mde_pct)} %   drift {fmt(s.drift_pct_per_run)} %/run")
    for name, guard in finding.guards.items():
        if guard.delta is None:  # no used run has it: no number to fail on
            lines.append(f"guard {t(name)}: not evaluated ({t(guard.note or 'no used runs')})")
            continue
        lines.append(f"guard {t(name)}: Δ {fmt_signed(guard.delta)} (limit {guard.limit:+g}) "
                     f"{'pass' if guard.passed else 'FAIL'}")
    lines += [t(line) for line in words.lines]
    for row in finding.sensitivity[1:]:
        lines.append(f"sensitivity: {t(row.variant)}: Δ {fmt_signed(row.delta_pct, unit=' %')} → {row.decision.value}")
    # an adoption its own evidence does not confirm says why, and the next step, on the verdict's own line
    unconfirmed = f": {t(words.unconfirmed)}" if words.unconfirmed else ""
    qualified = f" {words.qualifier}" if words.qualifier else ""  # the decision as scripts grep it: GUARD_FAILED
    lines += ["", f"VERDICT: {finding.decision.value.upper()}{t(qualified)}{unconfirmed}"]
    lines += [f"  - {t(reason)}" for reason in verdict.reasons]
    lines += [f"  ! {t(warning)}" for warning in verdict.warnings]
    if paths:
        lines += ["", "finding: " + ", ".join(paths)]
    return "\n".join(lines)

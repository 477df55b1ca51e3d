"""The one-screen terminal summary of a finding."""

from __future__ import annotations

from gatekit.finding import Finding
from gatekit.report.common import MISSING, fmt, runs_per_arm
from gatekit.sanitize import show_controls


def clean_terminal_text(text: str) -> str:
    """`text` with control characters (newline included) and bidi overrides shown as escapes, so trainer
    strings cannot recolor, clear or forge summary lines."""
    return show_controls(text)


def render_table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths]), *[line(r) for r in rows]]


def summary(finding: Finding, paths: tuple[str, ...] = ()) -> str:
    """The finding on one screen: the runs, the statistics, the guards, the looks and the verdict."""
    t = clean_terminal_text  # every string from the finding or a trainer, before it reaches the terminal
    paths = tuple(t(p) for p in paths)
    gate, s, verdict = finding.gate, finding.stats, finding.verdict
    primary = gate.primary
    guard_names = list(finding.guards)
    header = ["#", "arm", "run", t(primary), *[t(g) for g in guard_names], "load1 mean/max", "used"]
    rows = []
    for run in finding.runs:
        window = run.window
        rows.append([str(run.order), t(run.arm), t(run.label), fmt(run.value_of(primary)),
                     *[fmt(run.metrics.get(g)) for g in guard_names],
                     f"{fmt(window.load1_mean, 2)} / {fmt(window.load1_max, 2)}",
                     "yes" if run.used else f"no ({t(run.reason)})"])
    right = {0, 3, *range(4, 4 + len(guard_names)), 4 + len(guard_names)}
    seq = finding.sequential
    size = f"n={'→'.join(str(n) for n in seq.runs_per_arm)}, sequential" if seq else runs_per_arm(finding)
    duet = finding.duet
    arrangement = t(gate.order)
    if duet is not None:  # a duet has no order: its pairs ran together on two slots
        size = f"n={duet.n_pairs} pairs, duet"
        arrangement = "slots " + " & ".join(t(s) for s in duet.slots)
    lines = [f"gate {t(gate.id)}: {t(finding.on_arm)} vs {t(finding.off_arm)} "
             f"({arrangement}, {size}, {t(primary)}, {t(gate.direction)} is better)", ""]
    lines += render_table(header, rows, right)
    lines += [f"evidence {t(run.label)}: {t(line)}" for run in finding.runs for line in run.window.evidence]
    lines += ["",
              f"mean off {fmt(s.mean_off)}  mean on {fmt(s.mean_on)}  "
              f"σ_off {fmt(s.sigma_off_pct)} %  σ_on {fmt(s.sigma_on_pct)} %",
              f"Δ {fmt(s.delta_pct)} %   threshold {fmt(s.threshold_pct)} % "
              f"({t(gate.threshold.rule)})   pairs consistent {t(s.pairs_consistent)}"]
    if s.gm_delta_pct is not None:
        lines.append(f"Δ_gm {fmt(s.gm_delta_pct)} % ({_level(s.ci_level)} CI {fmt(s.ci_low_pct)} … "
                     f"{fmt(s.ci_high_pct)} %)   one-sided p {fmt(s.p_one_sided)}   "
                     f"MDE(80 %) {fmt(s.mde_pct)} %   drift {fmt(s.drift_pct_per_run)} %/run")
    for name, guard in finding.guards.items():
        lines.append(f"guard {t(name)}: Δ {fmt(guard.delta)} (limit {guard.limit:+g}) "
                     f"{'pass' if guard.passed else 'FAIL'}")
    for look in seq.looks if seq else ():
        lines.append(f"look {look.look} ({look.n_off}+{look.n_on} runs): Δ_gm {fmt(look.delta_pct)} % "
                     f"({_level(look.ci_level)} CI {fmt(look.ci_low_pct)} … {fmt(look.ci_high_pct)} %), "
                     f"p(better) {fmt(look.p_better)} → {t(look.decision)}")
    if duet is not None:
        lines.append(f"duet: Δ {fmt(duet.delta_pct)} % ({_level(duet.interval_level)} CI {fmt(duet.ci_low_pct)} … "
                     f"{fmt(duet.ci_high_pct)} %, slot effect removed)   slot effect {fmt(duet.slot_effect_pct)} % "
                     f"({fmt(duet.slot_ci_low_pct)} … {fmt(duet.slot_ci_high_pct)} %) → {t(duet.decision)}")
    for row in finding.sensitivity[1:]:
        lines.append(f"sensitivity: {t(row.variant)}: Δ {fmt(row.delta_pct)} % → {row.decision.value}")
    lines += ["", f"VERDICT: {verdict.decision.value.upper()}"]
    lines += [f"  - {t(reason)}" for reason in verdict.reasons]
    lines += [f"  ! {t(warning)}" for warning in verdict.warnings]
    if paths:
        lines += ["", "finding: " + ", ".join(paths)]
    return "\n".join(lines)


def _level(level: float | None) -> str:
    """A confidence level as the summary writes it: 0.95 → "95 %"."""
    return f"{100 * level:g} %" if level is not None else MISSING

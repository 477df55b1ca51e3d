"""A finding as a report page: a header and a list of blocks, rendered alike to HTML and Markdown.

Blocks use the seed finding's section vocabulary (lead, heading, table, kv, callout, list) plus `figure`.
Blocks gatekit builds from data carry `plain = True`: their text is shown as written. The finding's own
narrative `sections` may use inline `code` and **bold**, as the seed does. Sections gatekit generated
itself (`section.generated`, report.narrative) repeat what the full tables show and are left out; sections
people added are rendered in order under "Narrative".
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from gatekit.finding import Finding, Section, Stats, plain
from gatekit.formatting import MISSING, fmt, fmt_signed, is_number
from gatekit.policies.base import verdict_headline, verdict_sentence
from gatekit.report.common import delta_ci, guard_metrics, one_line_why, runs_per_arm, tag_text
from gatekit.report.rundata import RunFiles
from gatekit.verdict import MORE_RUNS, NEXT_STEP, Decision

if TYPE_CHECKING:  # figures import matplotlib; the page only reads their names and sizes
    from gatekit.report.figures import FigureImage

Block = dict[str, Any]
# Stats the Decision block shows in its own rows (the CI of Δ on one line); the page lists every other one.
_SHOWN_STATS = {"n_off", "n_on", "mean_off", "mean_on", "sigma_off_pct", "sigma_on_pct", "delta_pct",
                "threshold_pct", "pairs_consistent", "ci_low_pct", "ci_high_pct", "ci_level", "cycles"}
# How the Decision block names the diagnostics (docs/statistics.md explains each), with their units.
# A statistic not listed here (one a newer or hand-extended finding adds) is shown under its own key.
STAT_LABELS: dict[str, tuple[str, str]] = {
    "gm_delta_pct": ("Δ as a ratio of geometric means", " %"),
    "welch_df": ("Welch degrees of freedom (log values)", ""),
    "p_one_sided": ("one-sided p (on better)", ""),
    "mde_pct": ("minimum detectable effect", " %"),
    "mde_alpha": ("minimum detectable effect: one-sided α", ""),
    "mde_power": ("minimum detectable effect: power", ""),
    "hl_shift_pct": ("Hodges–Lehmann shift", " %"),
    "drift_off_pct_per_run": ("drift per run, off arm", " %/run"),
    "drift_on_pct_per_run": ("drift per run, on arm", " %/run"),
    "drift_pct_per_run": ("drift per run, pooled", " %/run"),
    "order_gap_runs": ("order gap (on runs after off runs, on average)", " runs"),
    "order_bias_pct": ("order bias (pooled drift × order gap)", " %"),
    "pairs_sign_p": ("sign test of the pairs: one-sided p", ""),
}


@dataclass(frozen=True, slots=True)
class Page:
    """What a report shows, before it is written in any format."""

    finding_id: str
    title: str
    eyebrow: str
    subtitle: str
    tags: tuple[str, ...]
    decision: Decision
    why: str
    blocks: tuple[Block, ...]


def _heading(text: str) -> Block:
    return {"type": "heading", "text": text, "plain": True}


def _table(columns: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[str]],
           row_classes: Sequence[str] | None = None) -> Block:
    block: Block = {"type": "table", "columns": list(columns), "align": list(align),
                    "rows": [list(r) for r in rows], "plain": True}
    if row_classes is not None:
        block["row_classes"] = list(row_classes)
    return block


def _kv(items: Sequence[tuple[str, str]]) -> Block:
    return {"type": "kv", "items": [{"key": k, "value": v} for k, v in items], "plain": True}


def run_table(finding: Finding) -> Block:
    """Every run in execution order: arm, label, primary, guards, window load, used or why not."""
    primary = finding.gate.primary
    guards = guard_metrics(finding)
    columns = ["#", "arm", "run", primary, *guards, "load1 mean", "load1 max", "samples", "used"]
    align = ["right", "left", "left", "right", *["right"] * len(guards), "right", "right", "right", "left"]
    rows, classes = [], []
    for run in finding.runs:
        window = run.window
        used = "yes" if run.used else f"no: {run.reason or 'not used'}"
        rows.append([str(run.order), run.arm, run.label, fmt(run.value_of(primary)),
                     *[fmt(run.value_of(g)) for g in guards], fmt(window.load1_mean, 2),
                     fmt(window.load1_max, 2), fmt(window.samples), used])
        classes.append("" if run.used else "unused")
    if any(run.slot is not None for run in finding.runs):  # a duet: which slot each run had
        columns.insert(3, "slot")
        align.insert(3, "left")
        rows = [[*row[:3], run.slot or "", *row[3:]] for row, run in zip(rows, finding.runs)]
    if any(run.startup_s is not None for run in finding.runs):  # a time primary: the start-up beside it
        at = columns.index(primary) + 1
        columns.insert(at, "start-up s")
        align.insert(at, "right")
        rows = [[*row[:at], fmt(run.startup_s), *row[at:]] for row, run in zip(rows, finding.runs)]
    return _table(columns, align, rows, classes)


def _further_stats(s: Stats) -> list[tuple[str, Any]]:
    """The diagnostics beside the classic figures (docs/statistics.md), in the finding's order, then any
    statistic a newer or hand-extended finding adds."""
    typed = [(f.name, getattr(s, f.name)) for f in dataclasses.fields(s)
             if f.name not in _SHOWN_STATS and f.name != "extra_keys"]
    return typed + list(s.extra_keys.items())


def sig(value: Any, digits: int = 3, unit: str = "", signed: bool = False) -> str:
    """A key number to `digits` significant figures (−24.6, 0.763, 17.7, 1230; never an exponent),
    MISSING when absent or not finite: what a reader compares at a glance (the folded table keeps 4 decimals)."""
    if not is_number(value):
        return MISSING
    rounded = float(f"{value:.{digits}g}")  # rounded first, so 9.996 reads 10.0, not 10.00
    decimals = 0 if rounded == 0 else max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:{'+' if signed else ''}.{decimals}f}" + unit


def _arm_rows(s: Stats, number: Callable[[Any], str]) -> list[list[str]]:
    """Each arm's runs used, mean and σ, the mean and σ shown by `number` (sig on the first screen, fmt below)."""
    return [["runs used", fmt(s.n_off), fmt(s.n_on)],
            ["mean", number(s.mean_off), number(s.mean_on)],
            ["σ (% of mean)", number(s.sigma_off_pct), number(s.sigma_on_pct)]]


def key_numbers(finding: Finding) -> list[Block]:
    """The figures a decision rests on, to 3 significant figures: each arm's runs, mean and σ, then Δ against
    the threshold, the CI of Δ and the pairs."""
    gate, s = finding.gate, finding.stats
    arm_rows = _arm_rows(s, sig)
    items = [("Δ = (on − off) / off", f"{sig(s.delta_pct, signed=True)} %"),
             ("threshold", f"± {sig(s.threshold_pct)} % = {gate.threshold.rule}, {gate.direction} is better"),
             ("pairs where on is better", fmt(s.pairs_consistent))]
    ci = delta_ci(s)
    if ci is not None:
        items.insert(1, (f"{ci[2]} of Δ", f"[{sig(ci[0], signed=True)}, {sig(ci[1], signed=True)}] %"))
    return [_table(["", finding.off_arm, finding.on_arm], ["left", "right", "right"], arm_rows), _kv(items)]


def stats_blocks(finding: Finding) -> list[Block]:
    """Per-arm statistics, then Δ, threshold, pairs, the CI and any further diagnostics the analysis gave."""
    gate, s = finding.gate, finding.stats
    arm_rows = _arm_rows(s, fmt)
    items = [("Δ = (mean on − mean off) / mean off", f"{fmt_signed(s.delta_pct)} %"),
             ("threshold", f"± {fmt(s.threshold_pct)} % = {gate.threshold.rule}"),
             ("better is", gate.direction),
             ("pairs where on is better", fmt(s.pairs_consistent))]
    ci = delta_ci(s)
    if ci is not None:
        items.append((f"{ci[2]} of Δ", f"[{fmt_signed(ci[0])}, {fmt_signed(ci[1])}] %"))
    if s.cycles is not None and s.cycles.delta_cycles_pct is not None:
        items.append(("Δ in cycles (time × mean SM clock)",
                      f"{fmt_signed(s.cycles.delta_cycles_pct)} %, decides {s.cycles.decision_in_cycles}"))
    for key, value in _further_stats(s):
        label, unit = STAT_LABELS.get(key, (key, ""))
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            items.append((label, fmt(value, unit=unit)))
        elif isinstance(value, bool):
            items.append((label, "yes" if value else "no"))
    return [_table(["", finding.off_arm, finding.on_arm], ["left", "right", "right"], arm_rows), _kv(items)]


def guards_table(finding: Finding) -> Block | None:
    guards = finding.guards
    if not guards:
        return None
    rows = []
    for name, g in guards.items():
        rows.append([name, g.direction, fmt(g.off_mean), fmt(g.on_mean), fmt_signed(g.delta),
                     fmt_signed(g.limit, 3), "pass" if g.passed else "FAIL", g.note])
    return _table(["guard", "better is", "off mean", "on mean", "Δ (on − off)", "limit", "result", "note"],
                  ["left", "left", "right", "right", "right", "right", "left", "left"], rows,
                  ["" if g.passed else "fail" for g in guards.values()])


def sensitivity_table(finding: Finding) -> Block:
    rows = [[r.variant, ", ".join(r.dropped) or "—", fmt_signed(r.delta_pct), fmt(r.threshold_pct),
             r.decision.value] for r in finding.sensitivity]
    return _table(["variant", "dropped", "Δ %", "threshold %", "decision"],
                  ["left", "left", "right", "right", "left"], rows)


def provenance_blocks(finding: Finding) -> list[Block]:
    """Predecision hash, artifact hashes at start and end, git, host, GPU and software versions."""
    prov, pre, meta = finding.provenance, finding.predecision, finding.meta
    items: list[tuple[str, str]] = []
    if pre.sha256:
        items.append(("predecision", f"{pre.path} sha256 {pre.sha256}"))
    if meta.series_id:
        items.append(("series", meta.series_id))
    end = prov.artifacts.end or {}
    for path, digest in prov.artifacts.start.items():
        after = end.get(path)
        state = ("unchanged at the end" if after == digest else
                 "no end hash (series unfinished)" if after is None else f"CHANGED → {after}")
        items.append((f"artifact {path}", f"sha256 {digest}, {state}"))
    # the git, host and software tables are free-form: what the provenance collector found
    for when, g in (("start", prov.git.start), ("end", prov.git.end)):
        if isinstance(g, Mapping) and g:
            dirty = " (dirty)" if g.get("dirty") else ""
            items.append((f"git at {when}", f"{g.get('rev', '—')} on {g.get('branch') or '—'}{dirty}"))
    if prov.git.moved:
        items.append(("git HEAD moved", str(prov.git.diff_stat or "").strip() or "yes"))
    host = prov.host
    if host:
        items.append(("host", ", ".join(f"{k} {v}" for k, v in host.items() if not isinstance(v, (dict, list)))))
    backend = dict(prov.backend or {})
    if backend:  # what the backend plugin found (cuda: GPU, driver and CUDA versions; metal: chip; cpu: model)
        items.append((f"backend {backend.get('name', '')}".strip(),
                      # an empty table (cpu governors where sysfs has none) is nothing found, not a bare name
                      _describe({k: v for k, v in backend.items()
                                 if k != "name" and v not in ({}, [], "", None)}) or "—"))
    gpu = prov.extra_keys.get("gpu") or host.get("gpu") or backend.get("gpu")
    if gpu:
        items.append(("GPU", _describe(gpu)))
    else:
        items.append(("GPU", "none recorded (no backend plugin reported GPU telemetry)"))
    if prov.software:
        items.append(("software", ", ".join(f"{k} {v}" for k, v in prov.software.items())))
    imported = prov.extra_keys.get("imported_from")
    if isinstance(imported, Mapping):  # one file (`path`, `sha256`), or several (`files`: one table each)
        files = imported.get("files")
        sources = [f for f in files if isinstance(f, Mapping)] if isinstance(files, list) else [imported]
        items.append(("imported from", f"{imported.get('format', '')} " + "; ".join(
            f"file {f.get('path', '')} sha256 {f.get('sha256', '')}" for f in sources)))
    if meta.config_paths:
        items.append(("arm configs", ", ".join(meta.config_paths)))
    if meta.commit:
        items.append(("commit", f"{meta.commit} ({meta.branch or '—'})"))
    return [_kv(items)]


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_describe(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "; ".join(_describe(v) for v in value)
    return str(value)


def config_block(finding: Finding) -> Block | None:
    """The effective config each arm's trainer echoed (its first used run), differing keys marked."""
    arms = (finding.off_arm, finding.on_arm)
    configs: list[Mapping[str, Any]] = []
    for arm in arms:
        runs = [r for r in finding.runs if r.arm == arm and r.config]
        used = [r for r in runs if r.used] or runs
        configs.append(used[0].config if used else {})
    if not any(configs):
        return None
    declared = set(finding.gate.expect_diff)
    rows, classes = [], []
    for key in sorted({str(k) for c in configs for k in c}):
        values = [_describe(c[key]) if key in c else "—" for c in configs]
        differs = values[0] != values[1]
        note = ("differs, as declared" if differs and key in declared else "DIFFERS, not declared" if differs
                else "declared but equal" if key in declared else "")
        rows.append([key, *values, note])
        classes.append("fail" if note in ("DIFFERS, not declared", "declared but equal") else "")
    return _table(["key", *arms, "expect_diff"], ["left", "left", "left", "left"], rows, classes)


def rules_block(finding: Finding) -> Block:
    """Every preregistered rule as the finding records it (the rule set grows; the page lists what is there),
    and, where it matters, that rule (ii) cannot fire at this n."""
    rules = plain(finding.rules.to_dict())
    rows = [(str(k), f"{v:.6g}" if isinstance(v, float) else fmt(v)) for k, v in rules.items()]
    note = rule_ii_note(finding)
    return _kv(rows + ([("rule (ii)", note)] if note else []))


LOAD1_UPDATE_S = 5.0  # Linux recomputes the load averages every 5 s (LOAD_FREQ in kernel/sched/loadavg.c)


def load1_note(finding: Finding) -> str | None:
    """Why the runs' load1 columns barely differ, when every run was shorter than the kernel's load1 update:
    runs that close together read one and the same 1-minute average. None otherwise."""
    runs = finding.runs
    # a wallclock of 0 was never measured (a CSV or an import): nothing is known about the windows then
    if len(runs) < 2 or any(not 0 < run.process_wallclock_s < LOAD1_UPDATE_S for run in runs):
        return None
    return (f"every run was shorter than {LOAD1_UPDATE_S:g} s, the interval at which the kernel updates load1 "
            "(a 1-minute average): runs that close together read the same load1, so it cannot tell their windows "
            "apart; rules.evidence = \"psi\" (Linux) measures each window's own CPU pressure")


def rule_ii_note(finding: Finding) -> str | None:
    """Why rule (ii) cannot fire at this n (the Samuelson bound), None when it can or σ is not the arm's."""
    rules, n = finding.rules, finding.stats.n_off
    if rules.rule_ii_reachable is not False or rules.max_attainable_z is None:
        return None
    return (f"cannot fire: at n={n} no run can be more than {rules.max_attainable_z:.3f}σ from its own arm's mean "
            f"(Samuelson bound (n−1)/√n), below sigma_k = {rules.spec.sigma_k:g}; contamination retries are "
            "effectively disabled")


def _document_of(section: Section) -> dict[str, Any]:
    """A section as its finding document holds it, without the `generated` mark."""
    return {k: v for k, v in plain(section.to_dict()).items() if k != "generated"}


# Keys of a page block that only gatekit's own blocks carry: the verdict box (`verdict_callout`) is drawn
# from the finding's verdict, never from a section, so a section people added cannot show a second one.
GATEKIT_ONLY_KEYS = ("role", "decision")


def narrative_blocks(finding: Finding) -> tuple[str, list[Block]]:
    """The lead text and the sections people added (generated ones and the lead are shown elsewhere)."""
    lead = ""
    blocks: list[Block] = []
    for section in finding.sections:
        if section.type == "lead" and not lead:
            lead = section.text or ""
            continue
        if section.generated:  # a /1 file's are marked by its upgrade (records.UPGRADES)
            continue
        blocks.append({k: v for k, v in _document_of(section).items() if k not in GATEKIT_ONLY_KEYS})
    return lead, blocks


# CPU pressure above this share of a window: some task waited for a CPU a tenth of the time, so the trainer ran
# beside other work (a quiet machine reads well under 1 %).
BUSY_PRESSURE_PCT = 10.0


def noise_source(finding: Finding) -> str:
    """Why the runs spread as they did, from what the finding recorded: the arms' σ and what the machine did
    during the run windows (load1 against its cores, CPU pressure, steal, runs flagged, backend evidence)."""
    s = finding.stats
    spread = f"σ off {sig(s.sigma_off_pct)} %, σ on {sig(s.sigma_on_pct)} %"
    windows = [run.window for run in finding.runs if run.window.samples]
    if not windows:
        return (f"Noise: {spread}; no run window was sampled (a CSV or an imported file), so what the machine "
                "did during the runs is not recorded")
    facts, busy = [], False
    loads = [w.load1_max for w in windows if is_number(w.load1_max)]
    count = finding.provenance.host.get("cpu_count")
    cores = float(count) if is_number(count) and count > 0 else None
    if loads:
        facts.append(f"load1 up to {sig(max(loads))}" + (f" on {count} cores" if cores else ""))
        busy = cores is not None and max(loads) > cores  # more runnable tasks than cores: some waited
    pressure = [w.psi_cpu_pct for w in windows if is_number(w.psi_cpu_pct)]
    if pressure:
        facts.append(f"CPU pressure up to {sig(max(pressure))} % of a window")
        busy = busy or max(pressure) >= BUSY_PRESSURE_PCT
    steal = [w.steal_pct for w in windows if is_number(w.steal_pct) and w.steal_pct > 0]
    if steal:
        facts.append(f"CPU steal up to {sig(max(steal))} %")
    flagged = sum(1 for run in finding.runs if run.load_evidence)
    if flagged:
        facts.append(f"{flagged} of {len(finding.runs)} runs flagged by the load rule")
        busy = True
    evidence = sum(1 for run in finding.runs if run.window.evidence)
    if evidence:
        facts.append(f"backend evidence in {evidence} run windows (another process on the device)")
        busy = True
    state = "the machine was busy during the runs" if busy else "the machine was quiet during the runs"
    return f"Noise: {state} ({', '.join(facts) or 'no load recorded'}); {spread}"


# What to do after each decision, when the verdict's reasons give no next step of their own.
NEXT_STEPS = {
    Decision.ADOPTED: "adopt the change; this finding is its evidence (`gate verify SERIES FINDING` re-checks it)",
    Decision.REGRESSION: "do not merge: on is slower beyond the threshold; `gate bisect GOOD BAD` finds the commit "
                         "when the cause is not known",
    Decision.REJECTED: "keep off: no change of the threshold's size is shown; if a smaller one matters, `gate plan` "
                       "gives the runs per arm that can show it",
    Decision.EQUIVALENT: "the change is neutral within the floor: merge it for its other merits",
    Decision.GUARD_FAILED: "fix the quality loss first (see Quality guards): a failed guard blocks whatever Δ says",
    Decision.INCONCLUSIVE: MORE_RUNS,
    Decision.INVALID: "fix what the reasons name, then run the gate again (`gate check` lists problems before any run)",
}


def next_step_text(finding: Finding) -> str:
    """The verdict's own next step (an undecided verdict's last reason), else the one for its decision."""
    own = [reason.removeprefix(NEXT_STEP) for reason in finding.verdict.reasons if reason.startswith(NEXT_STEP)]
    return "Next step: " + (own[0] if own else NEXT_STEPS[finding.decision])


_FOUR_DECIMALS = re.compile(r"(?<![\w.])([-+]?)(\d+\.\d{4,})(?![\w.])")


def three_figures(text: str) -> str:
    """A reason as the verdict box shows it: its numbers of 4 or more decimals to 3 significant figures
    ("Δ -32.5262 % clears the threshold ±2.1787 %" → "Δ -32.5 % … ±2.18 %"); the Reasons list keeps them whole."""
    return _FOUR_DECIMALS.sub(lambda m: m.group(1) + sig(float(m.group(2))), text)


def verdict_callout(finding: Finding) -> Block:
    """The first thing on the page: the decision, its rule-level reason, the noise source and the next step."""
    decision = finding.decision
    qualified = verdict_sentence(finding)  # an adoption its evidence does not confirm says so in the box
    return {"type": "callout", "label": f"Verdict: {verdict_headline(finding)}",
            "variant": "warning" if qualified else decision.severity,
            "text": three_figures(qualified or one_line_why(finding.verdict)),
            "items": [noise_source(finding), next_step_text(finding)], "marked_items": True, "plain": True,
            "role": "verdict", "decision": decision.value}


def _figure(image: FigureImage, prefix: str) -> Block:
    # role: a figure gatekit drew beside the page (the footer names these; a section's image is not one)
    return {"type": "figure", "role": "drawn", "src": prefix + image.name, "alt": image.alt,
            "caption": image.caption, "width": image.width, "height": image.height}


def build_page(finding: Finding, figures: Mapping[str, FigureImage], run_files: RunFiles, *,
               figure_prefix: str = "", related: Mapping[str, str] | None = None) -> Page:
    """Every part of the report, in reading order. `related` maps finding ids to links that exist."""
    meta, gate, verdict = finding.meta, finding.gate, finding.verdict
    lead, narrative_sections = narrative_blocks(finding)
    blocks: list[Block] = [verdict_callout(finding)]  # the verdict, why and next step lead, in the first screen
    blocks += [_heading("Key numbers"), *key_numbers(finding)]
    if lead:
        blocks.append({"type": "lead", "text": lead})
    if figures.get("runs"):
        blocks.append(_figure(figures["runs"], figure_prefix))
    blocks += [_heading("Runs in execution order"), run_table(finding)]
    blocks += [_heading("Decision"),
               {"type": "details", "summary": "Every statistic, to 4 decimals", "blocks": stats_blocks(finding),
                "plain": True}]
    if figures.get("delta"):
        blocks.append(_figure(figures["delta"], figure_prefix))
    guards = guards_table(finding)
    if guards:
        blocks += [_heading("Quality guards"), guards]
    blocks += [_heading("Exclusion sensitivity"), sensitivity_table(finding)]
    reasons, warnings = list(verdict.reasons), list(verdict.warnings)
    if reasons:
        blocks += [_heading("Reasons"), {"type": "list", "items": reasons, "plain": True}]
    if warnings:
        blocks += [_heading("Warnings"), {"type": "list", "items": warnings, "plain": True}]
    blocks.append(_heading("Run windows"))
    for kind in ("quality", "duet", "load", "pressure", "clock", "ms_per_iter"):
        if figures.get(kind):
            blocks.append(_figure(figures[kind], figure_prefix))
    missing = [what for kind, what in (("load", "load timelines"), ("ms_per_iter", "ms_per_iter traces"))
               if not figures.get(kind)]
    notes = list(run_files.notes)
    short = load1_note(finding)
    if short:
        notes.append(short)
    if run_files.traces and not run_files.has_ms_per_iter:
        notes.append("no run's result file holds trace.ms_per_iter, so there is no per-iteration figure")
    if notes:
        label = ("Left out: " + " and ".join(missing)) if missing else "Notes"
        blocks.append({"type": "callout", "label": label, "variant": "note", "text": "", "items": notes,
                       "plain": True})
    if narrative_sections:
        blocks += [_heading("Narrative"), *narrative_sections]
    config = config_block(finding)
    if config:
        blocks += [_heading("Effective config (echoed by the trainer)"), config]
    blocks += [_heading("Preregistered rules"), rules_block(finding)]
    blocks += [_heading("Provenance"), *provenance_blocks(finding)]
    if meta.related_findings:
        links = related or {}
        blocks += [_heading("Related findings"),
                   {"type": "links", "items": [{"text": r, "href": links.get(r, "")} for r in meta.related_findings]}]
    # an imported finding was no gate's series: it says what it was read from instead
    kind = f"imported from {finding.imported_from}" if finding.imported_from else meta.category
    eyebrow = " · ".join(x for x in (meta.date, kind, meta.status, meta.id) if x)
    if meta.extra_keys.get("eyebrow"):  # a hand-added line above the title
        eyebrow = f"{meta.extra_keys['eyebrow']} · {eyebrow}"
    subtitle = meta.subtitle or (f"{gate.arms.on} vs {gate.arms.off} · {gate.order} · {runs_per_arm(finding)} · "
                                 f"{gate.primary}, {gate.direction} is better")
    return Page(finding_id=meta.id, title=meta.title, eyebrow=eyebrow, subtitle=subtitle,
                tags=tuple(tag_text(t) for t in meta.tags),
                decision=finding.decision, why=one_line_why(verdict), blocks=tuple(blocks))


def headline_numbers(finding: Finding) -> tuple[str, str]:
    """Δ and the first guard's Δ as short strings (for indexes and summaries)."""
    delta_text = fmt_signed(finding.stats.delta_pct, 2, unit=" %")
    guard_text = MISSING
    for name, g in finding.guards.items():
        if is_number(g.delta):
            guard_text = f"{name} {fmt_signed(g.delta, 3)}"
        break
    return delta_text, guard_text

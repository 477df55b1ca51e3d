"""A finding as a report page: a header and a list of blocks, rendered alike to HTML and Markdown.

Blocks use the seed finding's section vocabulary (lead, heading, table, kv, callout, list) plus `figure`.
Blocks gatekit builds from data carry `plain = True`: their text is shown as written. The finding's own
narrative `sections` may use inline `code` and **bold**, as the seed does. Sections gatekit generated
itself (finding.narrative) repeat what the full tables show and are left out; sections people added are
rendered in order under "Narrative".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from gatekit.finding import narrative
from gatekit.report.common import (delta_ci, fmt, fmt_signed, guard_metrics, is_number, one_line_why, run_value,
                                   variant_of)
from gatekit.report.rundata import RunFiles

if TYPE_CHECKING:  # figures import matplotlib; the page only reads their names and sizes
    from gatekit.report.figures import FigureImage

Block = dict[str, Any]
_KNOWN_STATS = {"n_off", "n_on", "mean_off", "mean_on", "sigma_off_pct", "sigma_on_pct", "delta_pct",
                "threshold_pct", "pairs_consistent", "delta_ci_pct", "delta_ci_low_pct", "delta_ci_high_pct",
                "delta_ci_level"}


@dataclass(frozen=True, slots=True)
class Page:
    """What a report shows, before it is written in any format."""

    finding_id: str
    title: str
    eyebrow: str
    subtitle: str
    tags: tuple[str, ...]
    decision: str
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


def run_table(data: Mapping[str, Any]) -> Block:
    """Every run in execution order: arm, label, primary, guards, window load, used or why not."""
    primary = data["gate"]["primary"]
    guards = guard_metrics(data)
    columns = ["#", "arm", "run", primary, *guards, "load1 mean", "load1 max", "samples", "used"]
    align = ["right", "left", "left", "right", *["right"] * len(guards), "right", "right", "right", "left"]
    rows, classes = [], []
    for run in data["runs"]:
        window = run["window"]
        used = "yes" if run["used"] else f"no: {run.get('reason') or 'not used'}"
        rows.append([str(run["order"]), str(run["arm"]), str(run["label"]), fmt(run_value(run, primary)),
                     *[fmt(run_value(run, g)) for g in guards], fmt(window.get("load1_mean"), 2),
                     fmt(window.get("load1_max"), 2), fmt(window.get("samples")), used])
        classes.append("" if run["used"] else "unused")
    return _table(columns, align, rows, classes)


def stats_blocks(data: Mapping[str, Any]) -> list[Block]:
    """Per-arm statistics, then Δ, threshold, pairs, the CI and any further diagnostics the analysis gave."""
    gate, s = data["gate"], data["stats"]
    off, on = str(gate["arms"]["off"]), str(gate["arms"]["on"])
    arm_rows = [["runs used", fmt(s.get("n_off")), fmt(s.get("n_on"))],
                ["mean", fmt(s.get("mean_off")), fmt(s.get("mean_on"))],
                ["σ (% of mean)", fmt(s.get("sigma_off_pct")), fmt(s.get("sigma_on_pct"))]]
    items = [("Δ = (mean on − mean off) / mean off", f"{fmt_signed(s.get('delta_pct'))} %"),
             ("threshold", f"± {fmt(s.get('threshold_pct'))} % = {gate.get('threshold', {}).get('rule', '')}"),
             ("better is", str(gate["direction"])),
             ("pairs where on is better", fmt(s.get("pairs_consistent")))]
    ci = delta_ci(s)
    if ci is not None:
        items.append((f"{ci[2]} of Δ", f"[{ci[0]:+.4f}, {ci[1]:+.4f}] %"))
    for key, value in s.items():
        if key in _KNOWN_STATS:
            continue
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            items.append((key, fmt(value)))
        elif isinstance(value, bool):
            items.append((key, "yes" if value else "no"))
    return [_table(["", off, on], ["left", "right", "right"], arm_rows), _kv(items)]


def guards_table(data: Mapping[str, Any]) -> Block | None:
    guards = data["guards"]
    if not guards:
        return None
    rows = []
    for name, g in guards.items():
        rows.append([str(name), str(g.get("direction", "")), fmt(g.get("off_mean")), fmt(g.get("on_mean")),
                     fmt_signed(g.get("delta")), fmt_signed(g.get("limit"), 3), "pass" if g["pass"] else "FAIL",
                     str(g.get("note", ""))])
    return _table(["guard", "better is", "off mean", "on mean", "Δ (on − off)", "limit", "result", "note"],
                  ["left", "left", "right", "right", "right", "right", "left", "left"], rows,
                  ["" if g["pass"] else "fail" for g in guards.values()])


def sensitivity_table(data: Mapping[str, Any]) -> Block:
    rows = [[str(r["variant"]), ", ".join(str(d) for d in r.get("dropped", [])) or "—",
             fmt_signed(r.get("delta_pct")), fmt(r.get("threshold_pct")), str(r.get("decision", ""))]
            for r in data["sensitivity"]]
    return _table(["variant", "dropped", "Δ %", "threshold %", "decision"],
                  ["left", "left", "right", "right", "left"], rows)


def _short(text: Any, keep: int = 12) -> str:
    text = str(text)
    return text if len(text) <= keep + 1 else text[:keep] + "…"


def provenance_blocks(data: Mapping[str, Any]) -> list[Block]:
    """Predecision hash, artifact hashes at start and end, git, host, GPU and software versions."""
    prov, pre, meta = data.get("provenance", {}), data.get("predecision", {}), data["meta"]
    items: list[tuple[str, str]] = []
    if pre.get("sha256"):
        items.append(("predecision", f"{pre.get('path', '')} sha256 {pre['sha256']}"))
    if meta.get("series_id"):
        items.append(("series", str(meta["series_id"])))
    artifacts = prov.get("artifacts", {})
    start, end = artifacts.get("start", {}), artifacts.get("end", {})
    for path, digest in start.items():
        after = end.get(path)
        state = ("unchanged at the end" if after == digest else
                 "no end hash (series unfinished)" if after is None else f"CHANGED → {after}")
        items.append((f"artifact {path}", f"sha256 {digest}, {state}"))
    git = prov.get("git", {})
    for when in ("start", "end"):
        g = git.get(when)
        if isinstance(g, Mapping) and g:
            dirty = " (dirty)" if g.get("dirty") else ""
            items.append((f"git at {when}", f"{g.get('rev', '—')} on {g.get('branch') or '—'}{dirty}"))
    if git.get("moved"):
        items.append(("git HEAD moved", str(git.get("diff_stat", "")).strip() or "yes"))
    host = prov.get("host", {})
    if isinstance(host, Mapping) and host:
        items.append(("host", ", ".join(f"{k} {v}" for k, v in host.items() if not isinstance(v, (dict, list)))))
    gpu = prov.get("gpu", host.get("gpu") if isinstance(host, Mapping) else None)
    if gpu:
        items.append(("GPU", _describe(gpu)))
    else:
        items.append(("GPU", "none recorded (no backend plugin reported GPU telemetry)"))
    software = prov.get("software", {})
    if isinstance(software, Mapping) and software:
        items.append(("software", ", ".join(f"{k} {v}" for k, v in software.items())))
    imported = prov.get("imported_from")
    if isinstance(imported, Mapping):
        items.append(("imported from", f"{imported.get('format', '')} file {imported.get('path', '')} "
                                       f"sha256 {imported.get('sha256', '')}"))
    if meta.get("config_paths"):
        items.append(("arm configs", ", ".join(str(p) for p in meta["config_paths"])))
    if meta.get("commit"):
        items.append(("commit", f"{meta['commit']} ({meta.get('branch') or '—'})"))
    return [_kv(items)]


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_describe(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "; ".join(_describe(v) for v in value)
    return str(value)


def config_block(data: Mapping[str, Any]) -> Block | None:
    """The effective config each arm's trainer echoed (its first used run), differing keys marked."""
    gate = data["gate"]
    arms = (str(gate["arms"]["off"]), str(gate["arms"]["on"]))
    configs: list[Mapping[str, Any]] = []
    for arm in arms:
        runs = [r for r in data["runs"] if r["arm"] == arm and isinstance(r.get("config"), Mapping) and r["config"]]
        used = [r for r in runs if r["used"]] or runs
        configs.append(used[0]["config"] if used else {})
    if not any(configs):
        return None
    declared = {str(k) for k in gate.get("expect_diff", [])}
    rows, classes = [], []
    for key in sorted({str(k) for c in configs for k in c}):
        values = [_describe(c[key]) if key in c else "—" for c in configs]
        differs = values[0] != values[1]
        note = ("differs, as declared" if differs and key in declared else "DIFFERS, not declared" if differs
                else "declared but equal" if key in declared else "")
        rows.append([key, *values, note])
        classes.append("fail" if note in ("DIFFERS, not declared", "declared but equal") else "")
    return _table(["key", *arms, "expect_diff"], ["left", "left", "left", "left"], rows, classes)


def rules_block(data: Mapping[str, Any]) -> Block | None:
    rules = data.get("rules")
    if not isinstance(rules, Mapping) or not rules:
        return None
    return _kv([(str(k), f"{v:.6g}" if isinstance(v, float) else fmt(v)) for k, v in rules.items()])


def _generated_sections(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The sections finding.narrative makes for this data: the page shows their content in full tables."""
    try:
        return narrative(data)
    except (KeyError, TypeError, ValueError):  # a finding from another gatekit version: keep every section
        return []


def narrative_blocks(data: Mapping[str, Any]) -> tuple[str, list[Block]]:
    """The lead text and the sections people added (generated ones and the lead are shown elsewhere)."""
    generated = _generated_sections(data)
    lead = ""
    blocks: list[Block] = []
    for section in data["sections"]:
        if section.get("type") == "lead" and not lead:
            lead = str(section.get("text", ""))
            continue
        if section in generated:
            continue
        blocks.append(dict(section))
    return lead, blocks


def verdict_callout(data: Mapping[str, Any]) -> Block:
    verdict = data["verdict"]
    decision = str(verdict["decision"])
    text = one_line_why(verdict)
    return {"type": "callout", "label": f"Verdict: {decision.replace('_', ' ').upper()}", "variant": variant_of(decision),
            "text": text, "plain": True, "role": "verdict", "decision": decision}


def _figure(image: FigureImage, prefix: str) -> Block:
    return {"type": "figure", "src": prefix + image.name, "alt": image.alt, "caption": image.caption,
            "width": image.width, "height": image.height}


def build_page(data: Mapping[str, Any], figures: Mapping[str, FigureImage], run_files: RunFiles, *,
               figure_prefix: str = "", related: Mapping[str, str] | None = None) -> Page:
    """Every part of the report, in reading order. `related` maps finding ids to links that exist."""
    meta, gate, verdict = data["meta"], data["gate"], data["verdict"]
    lead, narrative = narrative_blocks(data)
    blocks: list[Block] = []
    if lead:
        blocks.append({"type": "lead", "text": lead})
    blocks.append(verdict_callout(data))
    if figures.get("runs"):
        blocks.append(_figure(figures["runs"], figure_prefix))
    blocks += [_heading("Runs in execution order"), run_table(data)]
    blocks += [_heading("Decision"), *stats_blocks(data)]
    if figures.get("delta"):
        blocks.append(_figure(figures["delta"], figure_prefix))
    guards = guards_table(data)
    if guards:
        blocks += [_heading("Quality guards"), guards]
    blocks += [_heading("Exclusion sensitivity"), sensitivity_table(data)]
    reasons = [str(r) for r in verdict.get("reasons", [])]
    warnings = [str(w) for w in verdict.get("warnings", [])]
    if reasons:
        blocks += [_heading("Reasons"), {"type": "list", "items": reasons, "plain": True}]
    if warnings:
        blocks += [_heading("Warnings"), {"type": "list", "items": warnings, "plain": True}]
    blocks.append(_heading("Run windows"))
    for kind in ("load", "ms_per_iter"):
        if figures.get(kind):
            blocks.append(_figure(figures[kind], figure_prefix))
    missing = [what for kind, what in (("load", "load timelines"), ("ms_per_iter", "ms_per_iter traces"))
               if not figures.get(kind)]
    notes = list(run_files.notes)
    if run_files.traces and not run_files.has_ms_per_iter:
        notes.append("no run's result file holds trace.ms_per_iter, so there is no per-iteration figure")
    if notes:
        label = ("Left out: " + " and ".join(missing)) if missing else "Notes"
        blocks.append({"type": "callout", "label": label, "variant": "note", "text": "", "items": notes,
                       "plain": True})
    if narrative:
        blocks += [_heading("Narrative"), *narrative]
    config = config_block(data)
    if config:
        blocks += [_heading("Effective config (echoed by the trainer)"), config]
    rules = rules_block(data)
    if rules:
        blocks += [_heading("Preregistered rules"), rules]
    blocks += [_heading("Provenance"), *provenance_blocks(data)]
    related_ids = [str(r) for r in meta.get("related_findings", [])]
    if related_ids:
        links = related or {}
        blocks += [_heading("Related findings"),
                   {"type": "links", "items": [{"text": r, "href": links.get(r, "")} for r in related_ids]}]
    tags = tuple(str(t) for t in meta.get("tags", []))
    eyebrow = " · ".join(str(x) for x in (meta.get("date"), meta.get("category"), meta.get("status"), meta["id"]) if x)
    if meta.get("eyebrow"):
        eyebrow = f"{meta['eyebrow']} · {eyebrow}"
    subtitle = str(meta.get("subtitle", "")) or (f"{gate['arms']['on']} vs {gate['arms']['off']} · "
                                                 f"{gate.get('order', '')} · n={gate.get('n', '')} · "
                                                 f"{gate['primary']}, {gate['direction']} is better")
    decision = str(verdict["decision"])
    return Page(finding_id=str(meta["id"]), title=str(meta["title"]), eyebrow=eyebrow, subtitle=subtitle,
                tags=tags, decision=decision, why=one_line_why(verdict), blocks=tuple(blocks))


def headline_numbers(data: Mapping[str, Any]) -> tuple[str, str]:
    """Δ and the first guard's Δ as short strings (for indexes and summaries)."""
    delta = data["stats"].get("delta_pct")
    delta_text = f"{delta:+.2f} %" if is_number(delta) else "—"
    guard_text = "—"
    for name, g in data["guards"].items():
        if is_number(g.get("delta")):
            guard_text = f"{name} {g['delta']:+.3f}"
        break
    return delta_text, guard_text

"""A bisect finding's report page: one verdict box (the culprit, its posterior, the effect at it with its
interval), the metric along the commit range, every probed commit with its runs and values, the skipped
commits and why, the posterior of every commit and the bisect's own numbers. Blocks as the finding pages use
them (`plain`: every string from the finding is escaped as written), rendered by `html.blocks_html`.
"""

from __future__ import annotations

import math
from typing import Any

from gatekit.bisect.finding import BisectFinding, ProbeSummary
from gatekit.bisect.search import Outcome
from gatekit.commits import Commit
from gatekit.formatting import MISSING, fmt, fmt_signed, level_text
from gatekit.report.figures import ARM_COLORS, CSS_PX_PER_IN, DECISION_COLORS, WIDTH_IN, FigureImage, literal
from gatekit.report.html import blocks_html
from gatekit.report.svgplot import Axes, stack

SHA_SHOWN = 12
MAX_VALUES_SHOWN = 6  # values listed in a probe's row; the finding holds all of them

# outcome -> (the verdict box's label, its variant)
OUTCOME_WORDS = {
    Outcome.CULPRIT: ("CULPRIT FOUND", "danger"),
    Outcome.CREDIBLE_SET: ("CREDIBLE SET", "warning"),
    Outcome.NO_CHANGE: ("NO CHANGE", "success"),
    Outcome.INCONCLUSIVE: ("INCONCLUSIVE", "warning"),
    Outcome.MULTIPLE_STEPS: ("MORE THAN ONE STEP", "danger"),
    Outcome.INVALID: ("INVALID", "warning"),
}


def bisect_figure(finding: BisectFinding) -> FigureImage | None:
    """The metric along the commit range: each measured probe's pairs (probe vs its reference, in percent) and
    their median, the skipped commits, the named commit; below, the posterior over the culprit as bars."""
    measured = [p for p in finding.probes if p.values]
    if not measured:
        return None
    n = finding.bad_index
    top, bottom = Axes(width=WIDTH_IN * CSS_PX_PER_IN, height=290), Axes(width=WIDTH_IN * CSS_PX_PER_IN, height=150)
    pct = [(p.index, [100 * (v / r - 1) for v, r in zip(p.values, p.reference_values)],
            100 * math.expm1(p.median_log_diff or 0.0)) for p in measured]
    top.points([(i, v) for i, values, _ in pct for v in values], ARM_COLORS["off"], radius=2.6, alpha=0.35)
    top.add_legend("pairs", "point", ARM_COLORS["off"], alpha=0.35)
    top.points([(i, m) for i, _, m in pct], ARM_COLORS["off"], radius=5.0)
    top.add_legend("median of the probe's pairs", "point", ARM_COLORS["off"])
    top.hline(0, "#6b7280", width=0.8)
    if finding.skipped:
        top.points([(s.index, 0.0) for s in finding.skipped], "#6b7280", radius=4.5, hollow_cross=True)
        top.add_legend("skipped (cannot be built)", "cross", "#6b7280")
    if finding.culprit_index is not None:
        for ax in (top, bottom):
            ax.vline(finding.culprit_index - 0.5, DECISION_COLORS["danger"], dash="--", width=1.2)
        top.add_legend(f"named commit {finding.culprit_index}", "line", DECISION_COLORS["danger"], dash="--")
    top.ylabel = f"{literal(finding.metric, 30)} vs reference (%)"
    if finding.probabilities:
        for p in finding.probabilities:
            color = DECISION_COLORS["danger"] if p.index == finding.culprit_index else ARM_COLORS["on"]
            bottom.rect(p.index - 0.4, p.index + 0.4, 0.0, p.probability, color)
        bottom.hline(finding.confidence, "#6b7280", dash=":", width=1.0)
    bottom.ylim = [0.0, 1.05]
    bottom.ylabel = "P(culprit)"
    bottom.xlabel = f"commit (0 = GOOD … {n} = BAD)"
    step = max(1, math.ceil((n + 1) / 24))
    ticks = list(range(0, n + 1, step))
    bottom.xticks = [(k, str(k)) for k in ticks]
    top.xticks = [(k, "") for k in ticks]  # the x axis is shared: its labels are drawn once, below
    for ax in (top, bottom):
        ax.xlim = [-0.6, n + 0.6]
    data = stack([top, bottom])
    return FigureImage("bisect.svg", f"{finding.metric} of every probe against its reference, in percent (dots: "
                       "pairs, discs: their median), and the posterior over the culprit (bars; dotted: the "
                       f"confidence {finding.confidence:g})",
                       f"{finding.metric} along the commit range, and the posterior over the culprit commit", data,
                       int(top.width), int(top.height + bottom.height))


def short(commit: Commit) -> str:
    return commit.sha[:SHA_SHOWN]


def _block(kind: str, **content: Any) -> dict[str, Any]:
    return {"type": kind, "plain": True, **content}


def _heading(text: str) -> dict[str, Any]:
    return _block("heading", text=text)


def _table(columns: list[str], align: list[str], rows: list[list[str]],
           row_classes: list[str] | None = None) -> dict[str, Any]:
    block = _block("table", columns=columns, align=align, rows=rows)
    if row_classes is not None:
        block["row_classes"] = row_classes
    return block


def effect_text(finding: BisectFinding) -> str:
    """`+10.27 % (95 % CI +9.79 … +10.76 %)`, or MISSING."""
    if finding.effect_pct is None:
        return MISSING
    interval = ("" if finding.ci_low_pct is None or finding.ci_high_pct is None else
                f" (95 % CI {fmt_signed(finding.ci_low_pct, 2)} … {fmt_signed(finding.ci_high_pct, 2, ' %')})")
    return f"{fmt_signed(finding.effect_pct, 2, ' %')}{interval}"


def posterior_text(probability: float | None) -> str:
    """`0.9731`, or `> 0.9999` where four decimals would round a probability up to a certainty."""
    if probability is not None and 0.99995 <= probability < 1.0:
        return "> 0.9999"
    return fmt(probability, 4)


def verdict_block(finding: BisectFinding) -> dict[str, Any]:
    """The one verdict box: what the bisect concluded, in a sentence a reader needs first."""
    label, variant = OUTCOME_WORDS[finding.outcome]
    culprit = finding.culprit
    shown = posterior_text(finding.culprit_posterior)
    held = shown if shown.startswith(">") else f"= {shown}"
    named = ("" if culprit is None else
             f"commit {finding.culprit_index} {short(culprit)} “{culprit.subject}” ({culprit.author_date}) holds "
             f"P {held} of the posterior; {finding.metric} changed by "
             f"{effect_text(finding)} at it.")
    if finding.outcome is Outcome.CULPRIT:
        text = named
    elif finding.outcome is Outcome.CREDIBLE_SET:
        text = (f"No single commit reached the confidence {level_text(finding.confidence)} within the budget; "
                f"{len(finding.credible_set)} commits hold it together. The most likely: {named}")
    elif finding.outcome is Outcome.NO_CHANGE:
        text = (f"GOOD {short(finding.good)} and BAD {short(finding.bad)} do not differ in {finding.metric} by the "
                "gate's own rules: there is nothing to bisect.")
    elif finding.outcome is Outcome.INCONCLUSIVE:
        text = (f"The endpoints' gate saw no change in {finding.metric}, but their pairs cannot rule one out: "
                f"the minimum detectable effect is {fmt(finding.endpoints_mde_pct, 2)} % (the gate's floor "
                f"{fmt(finding.floor_pct, 2)} %), the change {fmt(finding.endpoints_change_pct, 2)} % "
                f"[{fmt(finding.endpoints_ci_low_pct, 2)}, {fmt(finding.endpoints_ci_high_pct, 2)}] %. "
                "Run the endpoints with more pairs (the gate's n) and bisect again.")
    elif finding.outcome is Outcome.MULTIPLE_STEPS:
        steps = ", ".join(f"commit {s.index} {s.sha[:12]} ({s.effect_pct:+.2f} %)" for s in finding.steps)
        text = (f"One step does not explain the pairs (the test for a second step: p {fmt(finding.steps_p, 4)}): "
                f"more than one commit changed {finding.metric}. The best two-step fit: {steps}. Bisect the "
                "range on each side of the first of them apart." + (f" The most likely single commit: {named}"
                                                                     if culprit is not None else ""))
    else:
        text = ("The bisect could not conclude: the endpoints could not be measured, or every commit between them "
                "was skipped." + (f" The most likely: {named}" if culprit is not None else ""))
    items = [f"{short(c)} “{c.subject}”" for c in finding.credible_set] if len(finding.credible_set) > 1 else None
    block = _block("callout", role="verdict", decision=finding.outcome.value, label=label, variant=variant,
                   text=text)
    if items:
        block["items"] = items
    return block


def _values(values: tuple[float, ...]) -> str:
    shown = ", ".join(fmt(v, 4) for v in values[:MAX_VALUES_SHOWN])
    return shown + (f" … ({len(values)})" if len(values) > MAX_VALUES_SHOWN else "") if values else MISSING


def _median_pct(probe: ProbeSummary) -> str:
    return MISSING if probe.median_log_diff is None else fmt_signed(100 * math.expm1(probe.median_log_diff), 2, " %")


def probes_table(finding: BisectFinding) -> dict[str, Any]:
    rows = [[str(p.index), short(p.commit), p.commit.subject, str(p.round), str(p.reference), p.status.value,
             str(p.runs), _median_pct(p), _values(p.values), _values(p.reference_values), p.reason or p.decision]
            for p in finding.probes]
    classes = ["" if p.values else "unused" for p in finding.probes]
    return _table(["#", "commit", "subject", "round", "vs", "status", "runs", "median Δ", finding.metric,
                   "reference", "why"],
                  ["right", "left", "left", "right", "right", "left", "right", "right", "left", "left", "left"],
                  rows, classes)


def skipped_block(finding: BisectFinding) -> dict[str, Any]:
    if not finding.skipped:
        return _block("list", items=["none: every probed commit could be built"])
    return _table(["#", "commit", "subject", "status", "why"], ["right", "left", "left", "left", "left"],
                  [[str(s.index), short(s.commit), s.commit.subject, s.status.value, s.why] for s in finding.skipped])


def posterior_table(finding: BisectFinding) -> dict[str, Any]:
    credible = {c.sha for c in finding.credible_set}
    rows = [[str(p.index), p.sha[:SHA_SHOWN], posterior_text(p.probability), "yes" if p.sha in credible else ""]
            for p in finding.probabilities]
    return _table(["#", "commit", "P(culprit)", "credible set"], ["right", "left", "right", "left"], rows,
                  ["fail" if p.index == finding.culprit_index else "" for p in finding.probabilities])


def bisect_blocks(finding: BisectFinding, figure: FigureImage | None, figure_prefix: str = "") -> list[dict[str, Any]]:
    blocks = [verdict_block(finding)]
    if figure is not None:
        blocks.append(_block("figure", src=figure_prefix + figure.name, caption=figure.caption, alt=figure.alt,
                             width=figure.width, height=figure.height))
    culprit = finding.culprit
    if culprit is not None:
        blocks += [_heading("The named commit" if finding.outcome is not Outcome.CULPRIT else "The culprit"),
                   _block("kv", items=[{"key": k, "value": v} for k, v in (
                       ("commit", culprit.sha), ("subject", culprit.subject), ("author date", culprit.author_date),
                       ("index", f"{finding.culprit_index} of 0 (GOOD) … {finding.bad_index} (BAD)"),
                       ("posterior", posterior_text(finding.culprit_posterior)),
                       (f"effect on {finding.metric}", effect_text(finding)))])]
    blocks += [_heading("Probed commits"), probes_table(finding),
               _heading("Skipped commits"), skipped_block(finding)]
    if finding.probabilities:
        blocks += [_heading("Posterior over the culprit"), posterior_table(finding)]
    blocks += [_heading("The bisect"), _block("kv", items=[{"key": k, "value": v} for k, v in (
        ("GOOD", f"{finding.good.sha} “{finding.good.subject}” ({finding.good.author_date})"),
        ("BAD", f"{finding.bad.sha} “{finding.bad.subject}” ({finding.bad.author_date})"),
        ("arm, metric", f"{finding.arm}, {finding.metric} ({'higher' if finding.higher_is_better else 'lower'} "
                        "is better)"),
        ("runs", f"{finding.runs} of a budget of {finding.budget}, in {finding.rounds} rounds"),
        ("confidence", level_text(finding.confidence)),
        ("started, ended", f"{finding.started or MISSING}, {finding.ended or MISSING}"),
        ("journal chain head", finding.journal_sha256),
        ("exit code", str(finding.exit_code)))])]
    return blocks


def bisect_title(finding: BisectFinding) -> str:
    return f"Bisect {short(finding.good)}..{short(finding.bad)}: {OUTCOME_WORDS[finding.outcome][0].lower()}"


def bisect_report_files(finding: BisectFinding, *, source: str = "", generator: str = "gatekit") -> dict[str, bytes]:
    """The page (index.html) and its figure, by name inside the page's folder."""
    figure = bisect_figure(finding)
    subtitle = (f"{finding.bad_index} commits after GOOD, {finding.metric} of arm {finding.arm}; {finding.runs} "
                f"runs in {finding.rounds} rounds")
    page = blocks_html(bisect_title(finding), "gate bisect", subtitle, bisect_blocks(finding, figure),
                       source=source, generator=generator)
    return {"index.html": page.encode("utf-8"), **({figure.name: figure.data} if figure else {})}

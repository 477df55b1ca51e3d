"""CI outputs of findings: a Markdown job summary, JUnit XML, github-action-benchmark and Bencher JSON.

Pure serializers (findings in, str out), as hyperfine's exporters are; the CLI writes the text with
`storage.write_output`. Formats:
- summary-md: GitHub-flavoured Markdown for `$GITHUB_STEP_SUMMARY` or a PR comment.
- junit: one <testcase> per gate; <failure> on a failing decision (regression, guard_failed, invalid).
- gab-json: github-action-benchmark's `customSmallerIsBetter` input, a list of
  {name, unit, value, range, extra}: the primary's mean per arm (only a lower-is-better primary fits), Δ and
  the verdict in `extra` (a ratio-based alert cannot compare a signed Δ, so Δ is not an entry of its own).
- bmf: Bencher Metric Format, {benchmark: {measure: {value, lower_value, upper_value}}}.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any, Callable, Mapping, Sequence

from gatekit.errors import ConfigError
from gatekit.finding import Finding
from gatekit.report.common import (decision_words, delta_ci, fmt, fmt_signed, guard_metrics, is_number,
                                   one_line_why, unit_of)
from gatekit.report.markdown import literal
from gatekit.stats import mean, sample_sd

# XML 1.0 cannot hold these characters at all, escaped or not.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: Any) -> str:
    return _XML_INVALID.sub("\ufffd", str(text))


def _ci_text(finding: Finding) -> str:
    """The CI of Δ as the text outputs write it ("95 % CI [-7.0000, -3.6000] %"), '' when there is none."""
    ci = delta_ci(finding.stats)
    return f"{ci[2]} [{ci[0]:+.4f}, {ci[1]:+.4f}] %" if ci else ""


# -- summary-md -----------------------------------------------------------------------------------

def _summary_one(finding: Finding) -> list[str]:
    gate, s, verdict = finding.gate, finding.stats, finding.verdict
    primary = gate.primary
    off, on = finding.off_arm, finding.on_arm
    guards = guard_metrics(finding)
    lines = [f"### gate {literal(gate.id)}: **{literal(decision_words(finding.decision))}**", "",
             f"{literal(finding.meta.title)} — {literal(on)} vs {literal(off)}, {literal(gate.order)}, "
             f"n={literal(gate.n)}", "",
             f"> {literal(one_line_why(verdict))}", ""]
    facts = [f"Δ {literal(primary)} **{fmt_signed(s.delta_pct)} %**",
             f"threshold ±{fmt(s.threshold_pct)} % ({literal(gate.direction)} is better)",
             f"pairs {literal(s.pairs_consistent)}"]
    if _ci_text(finding):
        facts.append(_ci_text(finding))
    for name, g in finding.guards.items():
        facts.append(f"guard {literal(name)} {fmt_signed(g.delta)} (limit {fmt_signed(g.limit, 3)}) "
                     f"{'pass' if g.passed else '**FAIL**'}")
    lines += [" · ".join(facts), ""]
    if finding.predecision.chain_head:  # published outside the runs folder: a rewritten series no longer matches
        lines += [f"Journal chain head (sha256): `{finding.predecision.chain_head}` — check it with "
                  f"`gate verify`", ""]
    header = ["#", "arm", "run", literal(primary), *[literal(g) for g in guards], "load1 mean/max", "used"]
    lines += ["| " + " | ".join(header) + " |",
              "| " + " | ".join(["---:", "---", "---", "---:", *["---:"] * len(guards), "---:", "---"]) + " |"]
    for run in finding.runs:
        window = run.window
        used = "yes" if run.used else f"no: {run.reason or 'not used'}"
        cells = [str(run.order), run.arm, run.label, fmt(run.value_of(primary)),
                 *[fmt(run.value_of(g)) for g in guards],
                 f"{fmt(window.load1_mean, 2)} / {fmt(window.load1_max, 2)}", used]
        lines.append("| " + " | ".join(literal(c) for c in cells) + " |")
    warnings, reasons = verdict.warnings, verdict.reasons
    lines += ["", f"<details><summary>Reasons ({len(reasons)}) and warnings ({len(warnings)})</summary>", ""]
    lines += [f"- {literal(r)}" for r in reasons] + [f"- warning: {literal(w)}" for w in warnings]
    lines += ["", f"Finding `{finding.id}`" if "`" not in finding.id else f"Finding {literal(finding.id)}", "",
              "</details>"]
    return lines


def summary_markdown(findings: Sequence[Finding]) -> str:
    """Markdown for a GitHub job summary or a PR comment; an overview table first when there are several."""
    lines: list[str] = []
    if len(findings) > 1:
        lines += ["## gatekit: " + ", ".join(f"{n} {d}" for d, n in sorted(_counts(findings).items())), "",
                  "| gate | verdict | Δ | threshold |", "| --- | --- | ---: | ---: |"]
        for f in findings:
            lines.append(f"| {literal(f.gate.id)} | {literal(f.decision.value)} | "
                         f"{fmt_signed(f.stats.delta_pct, 2)} % | ±{fmt(f.stats.threshold_pct, 2)} % |")
        lines.append("")
    for f in findings:
        lines += _summary_one(f) + [""]
    return "\n".join(lines).rstrip() + "\n"


def _counts(findings: Sequence[Finding]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.decision.value] = counts.get(f.decision.value, 0) + 1
    return counts


# -- junit ------------------------------------------------------------------------------------------

def junit_xml(findings: Sequence[Finding]) -> str:
    """One testsuite, one testcase per gate: <failure> when the decision is failing (Decision.failing:
    regression, guard_failed or invalid)."""
    failures = sum(1 for f in findings if f.decision.failing)
    total_time = 0.0
    suites = ET.Element("testsuites", name="gatekit", tests=str(len(findings)), failures=str(failures), errors="0")
    suite = ET.SubElement(suites, "testsuite", name="gatekit", tests=str(len(findings)), failures=str(failures),
                          errors="0", skipped="0")
    for f in findings:
        gate, verdict, s, decision = f.gate, f.verdict, f.stats, f.decision
        seconds = sum(r.process_wallclock_s for r in f.runs if is_number(r.process_wallclock_s))
        total_time += seconds
        case = ET.SubElement(suite, "testcase", classname=_xml_text(f"gatekit.{gate.id}"),
                             name=_xml_text(f"{gate.id}: {f.on_arm} vs {f.off_arm} ({f.id})"), time=f"{seconds:.3f}")
        if decision.failing:
            failure = ET.SubElement(case, "failure", type=_xml_text(decision.value),
                                    message=_xml_text(f"{decision.value}: {one_line_why(verdict)}"))
            failure.text = _xml_text("\n".join([*verdict.reasons, *[f"warning: {w}" for w in verdict.warnings]]))
        ci = f"; {_ci_text(f)}" if _ci_text(f) else ""
        out = ET.SubElement(case, "system-out")
        out.text = _xml_text(f"decision {decision.value}; Δ {fmt_signed(s.delta_pct)} % "
                             f"(threshold ±{fmt(s.threshold_pct)} %){ci}; pairs {s.pairs_consistent}; "
                             f"finding {f.id}")
    suite.set("time", f"{total_time:.3f}")
    ET.indent(suites, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# -- github-action-benchmark ------------------------------------------------------------------------

def check_export(fmt_name: str, direction: str, primary: str, source: str) -> None:
    """Refuse an export that cannot represent this gate, before anything runs."""
    if fmt_name == "gab-json" and direction != "lower":
        raise ConfigError(f"{source}: gate.primary '{primary}' is higher-is-better, but gab-json is "
                          "github-action-benchmark's customSmallerIsBetter; use --export bmf instead")


def _spread(values: Sequence[float]) -> str:
    sd = sample_sd(values)
    return f"± {sd:.6g}" if is_number(sd) else ""


def gab_json(findings: Sequence[Finding]) -> str:
    """customSmallerIsBetter entries: per gate, the primary's mean per arm (range ± sample SD)."""
    entries: list[dict[str, Any]] = []
    for f in findings:
        gate, s = f.gate, f.stats
        primary = gate.primary
        check_export("gab-json", gate.direction, primary, f.id)
        extra = (f"{f.decision.value}: Δ {fmt_signed(s.delta_pct)} % vs {f.off_arm} (threshold "
                 f"±{fmt(s.threshold_pct)} %), pairs {s.pairs_consistent}, finding {f.id}")
        for arm in (f.on_arm, f.off_arm):
            values = f.used_values(arm, primary)
            if not values:
                continue
            entries.append({"name": f"{gate.id}/{primary} ({arm})", "unit": unit_of(primary) or "value",
                            "value": mean(values), "range": _spread(values),
                            "extra": extra + f"; {len(values)} runs of {arm}"})
    return json.dumps(entries, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# -- Bencher Metric Format --------------------------------------------------------------------------

def _metric(values: Sequence[float]) -> dict[str, float]:
    return {"value": mean(values), "lower_value": min(values), "upper_value": max(values)}


def bmf_json(findings: Sequence[Finding]) -> str:
    """{"<gate>/<arm>": {<metric>: {value: mean, lower_value: min, upper_value: max}}} over used runs,
    and "<gate>/delta": {"delta_pct": {value, lower/upper = the CI of Δ when given}}."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for f in findings:
        gate, s = f.gate, f.stats
        metrics = [gate.primary, *guard_metrics(f)]
        for arm in (f.off_arm, f.on_arm):
            measures = {}
            for metric in metrics:
                values = f.used_values(arm, metric)
                if values:
                    measures[metric] = _metric(values)
            if measures:
                out[f"{gate.id}/{arm}"] = measures
        if is_number(s.delta_pct):
            delta: dict[str, float] = {"value": s.delta_pct}  # type: ignore[dict-item]
            ci = delta_ci(s)
            if ci:
                delta.update(lower_value=ci[0], upper_value=ci[1])
            out[f"{gate.id}/delta"] = {"delta_pct": delta}
    return json.dumps(out, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


EXPORTERS: Mapping[str, Callable[[Sequence[Finding]], str]] = {"gab-json": gab_json, "bmf": bmf_json}

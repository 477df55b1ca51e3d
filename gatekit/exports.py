"""CI outputs of findings: a Markdown job summary, JUnit XML, github-action-benchmark and Bencher JSON.

Pure serializers (findings in, str out), as hyperfine's exporters are; `CiOutputs`, the outputs one command
was asked for, is the one writer (through `storage.write_output`). Formats:
- summary-md: GitHub-flavoured Markdown for `$GITHUB_STEP_SUMMARY` or a PR comment, kept under GitHub's
  1024 KiB limit: whole gates while they fit, then a line saying how many were cut and where the rest is.
- junit: one <testcase> per gate; <failure> on a failing decision (regression, guard_failed, invalid),
  <skipped> on `inconclusive` (the series could not tell: neither a pass nor a failure). The classname is
  `gatekit.<finding id>`: mikepenz/action-junit-report reads a classname's last dotted part as a file and
  finds it by the glob `**/<part>.*`, which is the finding file written under the findings folder.
- gab-json: github-action-benchmark's custom-tool input, a list of {name, unit, value, range, extra}: the
  primary's mean per arm, Δ and the verdict in `extra` (a ratio-based alert cannot compare a signed Δ, so Δ is
  not an entry of its own). The same list serves `customSmallerIsBetter` and `customBiggerIsBetter`; the gate's
  direction says which tool to configure, so one file holds one direction.
- bmf: Bencher Metric Format, {benchmark: {measure: {value, lower_value, upper_value}}}; custom measures named
  by the metric, or (measure "latency") Bencher's built-in `latency` in nanoseconds, as Bencher's own hyperfine
  adapter writes it. Every benchmark is named `<gate>/<arm>`, so two gates never share a history.

The metric exports (gab-json, bmf) leave invalid findings out (`skipped_notes` says which, for stderr) and
refuse to write a file with no entries (`EmptyExportError`): a consumer reads an empty file as an error of
its own, far from its cause. Benchmark names are capped at Bencher's 1024 bytes and measure names at its 64
(one long name rejects the whole file), each with a stable hash suffix; names are unique per finding: several
findings of one gate are told apart by their finding ids.
"""

from __future__ import annotations

import hashlib
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from gatekit.config import FAIL_ON
from gatekit.errors import ConfigError, GatekitError, OutputError
from gatekit.finding import Finding, Stats
from gatekit.formatting import fmt, fmt_signed, is_number
from gatekit.report.common import commits_lines, delta_ci, guard_metrics, one_line_why, runs_per_arm, unit_of
from gatekit.report.markdown import literal
from gatekit.stats import mean, sample_sd
from gatekit.storage import write_output
from gatekit.verdict import Decision

NAME_MAX_BYTES = 1024  # Bencher's MAX_BENCHMARK_NAME_LEN (lib/bencher_valid/src/benchmark_name.rs), UTF-8 bytes
# A measure key is a Bencher ResourceName (or slug): non-empty, trimmed, at most MAX_LEN = 64 bytes
# (lib/bencher_valid/src/lib.rs, resource_name.rs); one longer key fails the whole report.
MEASURE_MAX_BYTES = 64
SUMMARY_MAX_BYTES = 1_000_000  # GitHub refuses a step summary over 1024 KiB (1,048,576 bytes): keep a margin
BMF_MEASURES = ("custom", "latency")
GAB_TOOLS = {"lower": "customSmallerIsBetter", "higher": "customBiggerIsBetter"}

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
    from gatekit.policies.base import verdict_headline, verdict_sentence  # the statistics: when writing, not parsing

    qualified = verdict_sentence(finding)  # an adoption its evidence does not confirm: said in the heading
    lines = [f"### gate {literal(gate.id)}: **{literal(verdict_headline(finding))}**", "",
             f"{literal(finding.meta.title)} — {literal(on)} vs {literal(off)}, {literal(gate.order)}, "
             f"{literal(runs_per_arm(finding))}", "",
             f"> {literal(qualified or one_line_why(verdict))}", ""]
    compared = commits_lines(finding)
    if compared:
        lines += [" · ".join(literal(line) for line in compared), ""]
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


def summary_markdown(findings: Sequence[Finding], *, full_report: str = "",
                     limit_bytes: int = SUMMARY_MAX_BYTES) -> str:
    """Markdown for a GitHub job summary or a PR comment; an overview table first when there are several.

    Whole gates are kept while the text stays under `limit_bytes` (UTF-8); the rest are cut, and a last line
    says how many and where the full report is (`full_report`, else the finding files)."""
    from gatekit.policies.base import words_of  # the statistics: when writing, not when `gate` parses options

    head: list[str] = []
    if len(findings) > 1:
        head += ["## gatekit: " + ", ".join(f"{n} {d}" for d, n in sorted(_counts(findings).items())), "",
                 "| gate | verdict | Δ | threshold |", "| --- | --- | ---: | ---: |"]
        for f in findings:
            verdict = f.decision.value + (f" {words_of(f).qualifier}" if words_of(f).qualifier else "")
            head.append(f"| {literal(f.gate.id)} | {literal(verdict)} | "
                        f"{fmt_signed(f.stats.delta_pct, 2)} % | ±{fmt(f.stats.threshold_pct, 2)} % |")
        head.append("")
    gates = ["\n".join(_summary_one(f) + [""]) for f in findings]
    text = "\n".join(["\n".join(head), *gates] if head else gates).rstrip() + "\n"
    if len(text.encode()) <= limit_bytes:
        return text
    where = literal(full_report) if full_report else "the finding files (`gate report FINDING… --md FILE`)"
    # thousands of gates make the overview itself too long: then the gates' own sections carry it
    kept = ["\n".join(head)] if head and len("\n".join(head).encode()) <= limit_bytes // 2 else []
    shown = 0
    for block in gates:
        trial = "\n".join([*kept, block, _cut_line(len(gates) - shown - 1, len(gates), where)])
        if len(trial.encode()) > limit_bytes:
            break
        kept.append(block)
        shown += 1
    return "\n".join([*kept, _cut_line(len(gates) - shown, len(gates), where)]).rstrip() + "\n"


def _cut_line(cut: int, total: int, where: str) -> str:
    return (f"**{cut} of {total} gate(s) cut** to keep this summary under GitHub's 1024 KiB step-summary "
            f"limit; the full report: {where}")


def _counts(findings: Sequence[Finding]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.decision.value] = counts.get(f.decision.value, 0) + 1
    return counts


# -- junit ------------------------------------------------------------------------------------------

def fails(finding: Finding, fail_on: str | None) -> bool:
    """Whether a finding fails in CI: a failing decision (Decision.failing), or one `--fail-on` names."""
    return finding.decision.failing or (fail_on is not None and finding.decision.value in FAIL_ON[fail_on])


def tolerance_pct(finding: Finding) -> float | None:
    """The slowdown the gate tolerates: rules.max_threshold_pct (a series whose threshold exceeds it cannot
    decide), else — a series preregistered without that rule — its threshold."""
    limit = finding.rules.spec.max_threshold_pct
    return limit if limit > 0 else finding.stats.threshold_pct if is_number(finding.stats.threshold_pct) else None


def unproven_why(finding: Finding) -> str:
    """Why `--fail-on unproven` fails a finding: which of regression, guard_failed, inconclusive or invalid it is,
    in one line (a regression or a failed guard: its first reason; otherwise what could not be ruled out, why,
    and the next step)."""
    decision, s = finding.decision, finding.stats
    if decision in (Decision.REGRESSION, Decision.GUARD_FAILED):
        return f"{decision.value}: {one_line_why(finding.verdict)}"
    tolerance = tolerance_pct(finding)
    head = ("could not rule out a slowdown" + (f" of more than {tolerance:g} %" if tolerance is not None else ""))
    step = next((r for r in finding.verdict.reasons if str(r).startswith("next step")), None)
    if decision is Decision.INCONCLUSIVE:
        why = (f"the runs were too noisy (σ_off {fmt(s.sigma_off_pct, 2)} %, threshold ±{fmt(s.threshold_pct, 2)} %"
               f"; {one_line_why(finding.verdict)})")
    else:
        why = f"the series is {decision.value}: {one_line_why(finding.verdict)}"
    return f"{decision.value}: {head}: {why}" + (f"; {step}" if step else "")


def junit_xml(findings: Sequence[Finding], *, fail_on: str | None = None) -> str:
    """One testsuite, one testcase per gate: <failure> when the decision is failing (Decision.failing:
    regression, guard_failed or invalid) or `--fail-on` names it, <skipped> when it could not tell
    (Decision.untold: inconclusive) and nothing fails it. The message is the verdict's first reason alone
    (report tools print `type: message` themselves); under `--fail-on unproven`, `unproven_why`."""
    from gatekit.policies.base import verdict_sentence  # the statistics: when writing, not when parsing
    failures = sum(1 for f in findings if fails(f, fail_on))
    skipped = sum(1 for f in findings if f.decision.untold and not fails(f, fail_on))
    total_time = 0.0
    suites = ET.Element("testsuites", name="gatekit", tests=str(len(findings)), failures=str(failures), errors="0")
    suite = ET.SubElement(suites, "testsuite", name="gatekit", tests=str(len(findings)), failures=str(failures),
                          errors="0", skipped=str(skipped))
    for f in findings:
        gate, verdict, s, decision = f.gate, f.verdict, f.stats, f.decision
        seconds = sum(r.process_wallclock_s for r in f.runs if is_number(r.process_wallclock_s))
        total_time += seconds
        case = ET.SubElement(suite, "testcase", classname=_xml_text(f"gatekit.{f.id}"),
                             name=_xml_text(f"{gate.id}: {f.on_arm} vs {f.off_arm} ({f.id})"), time=f"{seconds:.3f}")
        if fails(f, fail_on) or decision.untold:
            why = unproven_why(f) if fail_on == "unproven" and fails(f, fail_on) else one_line_why(verdict)
            outcome = ET.SubElement(case, "failure" if fails(f, fail_on) else "skipped", type=_xml_text(decision.value),
                                    message=_xml_text(why))
            outcome.text = _xml_text("\n".join([*verdict.reasons, *[f"warning: {w}" for w in verdict.warnings]]))
        ci = f"; {_ci_text(f)}" if _ci_text(f) else ""
        out = ET.SubElement(case, "system-out")
        qualified = verdict_sentence(f)
        out.text = _xml_text(f"decision {qualified or decision.value}; Δ {fmt_signed(s.delta_pct)} % "
                             f"(threshold ±{fmt(s.threshold_pct)} %){ci}; pairs {s.pairs_consistent}; "
                             f"finding {f.id}")
    suite.set("time", f"{total_time:.3f}")
    ET.indent(suites, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# -- what the metric exports hold -------------------------------------------------------------------

class EmptyExportError(ConfigError):
    """A metric export with no entry: refused, since its consumer fails on an empty file far from the cause."""


def check_export(fmt_name: str, primary: str, source: str, *, bmf_measure: str = "custom") -> None:
    """Refuse an export that cannot represent this gate, before anything runs."""
    if fmt_name == "bmf" and bmf_measure == "latency" and unit_of(primary) != "s":
        raise ConfigError(f"{source}: gate.primary '{primary}' is not a time in seconds (a name ending in _s, "
                          "not a rate such as _per_s), so --bmf-measure latency (Bencher's built-in latency, "
                          "nanoseconds) cannot hold it; drop --bmf-measure to export it as a custom measure")


def skipped_notes(findings: Sequence[Finding]) -> list[str]:
    """One line per finding the metric exports leave out: an invalid series is not a measurement."""
    return [f"skipped finding {f.id} in the metric exports: {f.decision.value}: {one_line_why(f.verdict)}"
            for f in findings if f.decision is Decision.INVALID]


def _measured(findings: Sequence[Finding], fmt_name: str) -> list[Finding]:
    kept = [f for f in findings if f.decision is not Decision.INVALID]
    if not kept:
        raise EmptyExportError(f"no {fmt_name} entry to write: every finding is invalid "
                               f"({', '.join(f.id for f in findings) or 'none given'})")
    return kept


def capped_name(name: str, limit: int = NAME_MAX_BYTES) -> str:
    """`name` within `limit` UTF-8 bytes (Bencher's 1024 for a benchmark, 64 for a measure): cut at a character
    boundary and ended with a hash of the whole name, so the same long name always gives the same benchmark
    and two long names stay apart."""
    raw = name.encode()
    if len(raw) <= limit:
        return name
    suffix = f" #{hashlib.sha256(raw).hexdigest()[:16]}"
    return raw[:limit - len(suffix)].decode("utf-8", errors="ignore").rstrip() + suffix


def _qualifiers(findings: Sequence[Finding]) -> list[str]:
    """Each finding's name prefix: its gate id, or its finding id where one export holds several findings of
    that gate (they would overwrite each other's benchmarks otherwise)."""
    per_gate = Counter(f.gate.id for f in findings)
    names = [f.gate.id if per_gate[f.gate.id] == 1 else f.id for f in findings]
    twice = [name for name, count in Counter(names).items() if count > 1]
    if twice:
        raise ConfigError(f"finding {twice[0]!r} is given twice to one export; give each finding once")
    return names


class _Names:
    """Benchmark names handed out once each: a second entry under one name is an error, never an overwrite."""

    def __init__(self) -> None:
        self.taken: dict[str, str] = {}

    def claim(self, name: str, owner: str) -> str:
        capped = capped_name(name)
        if capped in self.taken and self.taken[capped] != owner:
            raise ConfigError(f"two entries would be named {capped!r} (findings {self.taken[capped]} and "
                              f"{owner}); rename an arm or export the findings to separate files")
        self.taken[capped] = owner
        return capped


# -- github-action-benchmark ------------------------------------------------------------------------

def _spread(values: Sequence[float]) -> str:
    sd = sample_sd(values)
    return f"± {sd:.6g}" if is_number(sd) else ""


def gab_tool(findings: Sequence[Finding]) -> str:
    """The github-action-benchmark `tool` that reads these findings: one direction per file."""
    measured = _measured(findings, "gab-json")
    directions = {f.gate.direction for f in measured}
    if len(directions) > 1:
        by = {d: next(f.id for f in measured if f.gate.direction == d) for d in sorted(directions)}
        raise ConfigError("gab-json: the findings mix directions (" + ", ".join(
            f"{by[d]} is {d}-is-better" for d in sorted(by)) + "); github-action-benchmark reads one file with "
            "one tool (customSmallerIsBetter or customBiggerIsBetter): export each direction to its own file")
    return GAB_TOOLS[directions.pop()]


def gab_json(findings: Sequence[Finding]) -> str:
    """Custom-tool entries: per gate, the primary's mean per arm (range ± sample SD); the tool to configure is
    `gab_tool(findings)`. Invalid findings are left out; no entry at all is an `EmptyExportError`."""
    gab_tool(findings)
    measured = _measured(findings, "gab-json")
    names = _Names()
    entries: list[dict[str, Any]] = []
    for f, prefix in zip(measured, _qualifiers(measured)):
        gate, s = f.gate, f.stats
        primary = gate.primary
        extra = (f"{f.decision.value}: Δ {fmt_signed(s.delta_pct)} % vs {f.off_arm} (threshold "
                 f"±{fmt(s.threshold_pct)} %), pairs {s.pairs_consistent}, finding {f.id}")
        for arm in (f.on_arm, f.off_arm):
            values = f.used_values(arm, primary)
            if not values:
                continue
            entries.append({"name": names.claim(f"{prefix}/{primary} ({arm})", f.id),
                            "unit": unit_of(primary) or "value", "value": mean(values), "range": _spread(values),
                            "extra": extra + f"; {len(values)} runs of {arm}"})
    if not entries:
        raise EmptyExportError("no gab-json entry to write: no finding has a used run")
    return json.dumps(entries, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# -- Bencher Metric Format --------------------------------------------------------------------------

def _metric(values: Sequence[float]) -> dict[str, float]:
    return {"value": mean(values), "lower_value": min(values), "upper_value": max(values)}


def _latency_ns(values: Sequence[float]) -> dict[str, float]:
    """Bencher's `latency` as its hyperfine adapter writes it: mean, and mean ∓ SD as bounds, in ns."""
    average, sd = mean(values), sample_sd(values)
    metric = {"value": average * 1e9}
    if is_number(sd):
        metric.update(lower_value=(average - sd) * 1e9, upper_value=(average + sd) * 1e9)
    return metric


def _delta_measures(s: Stats) -> dict[str, dict[str, float]]:
    """Δ as two measures, each value within its own bounds: the decided (arithmetic) Δ, and the geometric-mean
    Δ with its CI (docs/statistics.md)."""
    delta: dict[str, dict[str, float]] = {}
    if is_number(s.delta_pct):
        delta["delta_pct"] = {"value": float(s.delta_pct)}
    ci = delta_ci(s)
    if is_number(s.gm_delta_pct):
        delta["gm_delta_pct"] = {"value": float(s.gm_delta_pct),
                                 **({"lower_value": ci[0], "upper_value": ci[1]} if ci else {})}
    return delta


def bmf_json(findings: Sequence[Finding], *, measure: str = "custom") -> str:
    """{"<gate>/<arm>": {<metric>: {value: mean, lower_value: min, upper_value: max}}} over used runs, and
    "<gate>/delta": {"delta_pct": {value: the Δ the verdict decided on (difference of the arithmetic means, %
    of off)}, "gm_delta_pct": {value: the geometric-mean Δ, lower/upper: its CI}} — each value inside its own
    bounds (the CI is the geometric-mean Δ's, so it never bounds the arithmetic Δ).

    measure "latency": the primary (a time in seconds) becomes Bencher's built-in `latency` in nanoseconds, as
    Bencher's hyperfine adapter writes it, still under `<gate>/<arm>` (the adapter names a benchmark by its
    command alone, which merges every gate's `off` into one history). Metric names longer than Bencher's 64
    bytes are capped (`capped_name`). Invalid findings are left out; no entry is an `EmptyExportError`."""
    if measure not in BMF_MEASURES:
        raise ConfigError(f"bmf measure {measure!r} is not one of {', '.join(BMF_MEASURES)}")
    measured = _measured(findings, "bmf")
    for f in measured:
        check_export("bmf", f.gate.primary, f"finding {f.id}", bmf_measure=measure)
    names = _Names()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for f, prefix in zip(measured, _qualifiers(measured)):
        gate, s = f.gate, f.stats
        for arm in (f.off_arm, f.on_arm):
            measures = {}
            for metric in [gate.primary, *guard_metrics(f)]:
                values = f.used_values(arm, metric)
                if not values:
                    continue
                if measure == "latency" and metric == gate.primary:
                    measures["latency"] = _latency_ns(values)
                else:
                    measures[capped_name(metric, MEASURE_MAX_BYTES)] = _metric(values)
            if measures:
                out[names.claim(f"{prefix}/{arm}", f.id)] = measures
        delta = _delta_measures(s)
        if delta:
            name = names.claim(f"{prefix}/delta", f.id)
            if name in out:
                raise ConfigError(f"two entries would be named {name!r}; rename arm 'delta'")
            out[name] = delta
    if not out:
        raise EmptyExportError("no bmf entry to write: no finding has a used run")
    return json.dumps(out, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


EXPORTERS: Mapping[str, Callable[..., str]] = {"gab-json": gab_json, "bmf": bmf_json}


# -- the outputs one command writes -----------------------------------------------------------------

@dataclass(frozen=True)
class CiOutputs:
    """The CI outputs a command was asked for (--summary-md, --junit, --export FORMAT FILE, --bmf-measure),
    parsed once: `check` refuses an export that cannot hold a gate before anything runs; `write` is the one
    place the serializers above reach disk."""

    summary_md: Path | None = None
    junit: Path | None = None
    exports: tuple[tuple[str, Path], ...] = ()
    bmf_measure: str = "custom"
    fail_on: str | None = None  # the command's --fail-on: what JUnit counts as a failure besides failing decisions

    @property
    def requested(self) -> bool:
        return bool(self.summary_md or self.junit or self.exports)

    def check(self, primary: str, source: str) -> None:
        """Refuse, before anything runs, an export that cannot hold a gate of this primary (`source` names it)."""
        for name, _ in self.exports:
            check_export(name, primary, source, bmf_measure=self.bmf_measure)

    def _serializers(self, full_report: str) -> list[tuple[Path, Callable[[Sequence[Finding]], str], str]]:
        """(file, serializer, what it is) for every output asked for, in the order they are written."""
        exporters: dict[str, Callable[[Sequence[Finding]], str]] = {
            **EXPORTERS, "bmf": partial(EXPORTERS["bmf"], measure=self.bmf_measure)}
        outputs: list[tuple[Path | None, Callable[[Sequence[Finding]], str], str]] = [
            (self.summary_md, partial(summary_markdown, full_report=full_report), "summary"),
            (self.junit, partial(junit_xml, fail_on=self.fail_on), "JUnit report")]
        outputs += [(path, exporters[name], f"{name} export") for name, path in self.exports]
        return [(path, serialize, what) for path, serialize, what in outputs if path is not None]

    def write(self, findings: Sequence[Finding], *, finding_paths: Sequence[str] = (), full_report: str = "",
              exits_invalid: bool = False, note: Callable[[str], None] = lambda line: None) -> None:
        """Write every output asked for, atomically. `finding_paths` names the finding a series just wrote
        (runs happened, so a failed write is exit 4 and says how to write the output again); `full_report` is
        where a cut summary points (default: that finding). The metric exports leave invalid findings out,
        one `note` line each; an export left with no entry is never written empty: it is refused (exit 2),
        or, where the command then exits 3 for the invalid finding (`exits_invalid`), left unwritten with a
        `note` saying so."""
        if self.exports:
            for line in skipped_notes(findings):
                note(line)
        for path, serialize, what in self._serializers(full_report or next(iter(finding_paths), "")):
            try:
                write_output(path, serialize(findings), what)
            except EmptyExportError as exc:
                if not exits_invalid:
                    raise ConfigError(f"{path}: not written: {exc}") from None
                note(f"{path}: not written: {exc}")
            except ConfigError as exc:  # what the findings hold cannot be this output (exit 2)
                written = f"; the finding is written ({finding_paths[-1]})" if finding_paths else ""
                raise ConfigError(f"{path}: not written: {exc}{written}") from None
            except GatekitError as exc:
                if not finding_paths:
                    raise
                raise OutputError(f"{exc}; the finding is written ({finding_paths[-1]}): write the output "
                                  f"again with `gate report {finding_paths[-1]}` and the same option") from None

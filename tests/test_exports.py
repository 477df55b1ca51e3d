"""CI outputs (--summary-md, --junit, --export gab-json|bmf), against golden files.

One input is the finding of a real hyperfine run, tests/golden/exports/hyperfine-finding.json, written (and
regolded) by tests/test_import_hyperfine.py from tests/fixtures/hyperfine_sleep.json.
Goldens: `GATEKIT_REGOLD=1 pytest tests` rewrites all of them (finding, report pages, exports); review the diff.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from lxml import etree

from gatekit.errors import ConfigError
from gatekit.exports import (NAME_MAX_BYTES, SUMMARY_MAX_BYTES, EmptyExportError, bmf_json, capped_name, gab_json,
                             gab_tool, junit_xml, summary_markdown)
from gatekit.finding import Finding
from tests.conftest import FIXTURES, gate_invoke
from gatekit.report.common import one_line_why
from tests.findings_kit import GOLDEN, PAYLOAD, finding_of, golden_data, hostile_data, variant, write_json


def _golden(name: str, text: str) -> None:
    path = GOLDEN / "exports" / name
    if os.environ.get("GATEKIT_REGOLD"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file (GATEKIT_REGOLD=1 to accept)"


def _hyperfine_finding() -> Finding:
    return finding_of(json.loads((GOLDEN / "exports" / "hyperfine-finding.json").read_text()))


def test_export_formats_match_golden() -> None:
    findings = [finding_of(golden_data()), _hyperfine_finding()]
    _golden("summary.md", summary_markdown(findings))
    _golden("junit.xml", junit_xml(findings))
    _golden("gab.json", gab_json(findings))
    _golden("bmf.json", bmf_json(findings))


def test_gab_json_is_custom_smaller_is_better() -> None:
    assert gab_tool([finding_of(golden_data())]) == "customSmallerIsBetter"
    entries = json.loads(gab_json([finding_of(golden_data())]))
    assert [e["name"] for e in entries] == ["golden/train_elapsed_s (on)", "golden/train_elapsed_s (off)"]
    for entry in entries:
        assert set(entry) == {"name", "unit", "value", "range", "extra"}
        assert isinstance(entry["value"], float) and entry["unit"] == "s" and entry["range"].startswith("± ")
    assert entries[0]["value"] == pytest.approx((9.5 + 9.55 + 9.4) / 3)  # used runs only (on-r2 was not used)


def test_bmf_shape() -> None:
    data = json.loads(bmf_json([finding_of(golden_data())]))
    assert set(data) == {"golden/off", "golden/on", "golden/delta"}
    on = data["golden/on"]["train_elapsed_s"]
    assert on == {"value": pytest.approx(9.48333333), "lower_value": 9.4, "upper_value": 9.55}
    assert set(data["golden/on"]) == {"train_elapsed_s", "psnr_db"}
    assert data["golden/delta"]["delta_pct"]["value"] == pytest.approx(-5.3245, abs=1e-4)


def test_delta_ci_is_the_ci_the_finding_stores() -> None:
    data = golden_data()
    data["stats"].update(ci_low_pct=-7.5, ci_high_pct=-3.1, ci_level=0.9)  # stats.ci_*: where analysis puts it
    delta = json.loads(bmf_json([finding_of(data)]))["golden/delta"]
    # the CI is the geometric-mean Δ's: it bounds gm_delta_pct; the decided Δ goes alone
    assert delta["gm_delta_pct"] == {"value": data["stats"]["gm_delta_pct"], "lower_value": -7.5, "upper_value": -3.1}
    assert delta["delta_pct"] == {"value": pytest.approx(-5.3245, abs=1e-4)}
    assert "90 % CI [-7.5000, -3.1000] %" in summary_markdown([finding_of(data)])
    assert "90 % CI [-7.5000, -3.1000] %" in junit_xml([finding_of(data)])
    for key in ("ci_low_pct", "ci_high_pct", "ci_level"):
        del data["stats"][key]
    assert set(json.loads(bmf_json([finding_of(data)]))["golden/delta"]["gm_delta_pct"]) == {"value"}
    assert "CI [" not in summary_markdown([finding_of(data)]) + junit_xml([finding_of(data)])


def test_every_bmf_value_lies_within_its_own_bounds() -> None:
    """Δ of the arithmetic means can lie outside the CI of the geometric-mean Δ (a skewed sample: −97.81 %
    against [−97.30, −96.16] %); each measure carries the bounds of its own value."""
    data = golden_data()
    data["stats"].update(delta_pct=-97.81, gm_delta_pct=-96.75, ci_low_pct=-97.30, ci_high_pct=-96.16)
    for finding in (finding_of(data), _hyperfine_finding()):
        text = bmf_json([finding])
        assert _bmf_errors(text) == [] and _bounds_errors(text) == []
    assert json.loads(bmf_json([finding_of(data)]))["golden/delta"]["delta_pct"] == {"value": -97.81}


def test_junit_fails_on_regression_guard_failed_and_invalid() -> None:
    findings = _findings_of_every_decision()
    root = ET.fromstring(junit_xml(findings))
    suite = root.find("testsuite")
    assert root.get("tests") == "7" and root.get("failures") == "3" and suite.get("failures") == "3"
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == [f"gatekit.g{i}-2026-11-30" for i in range(7)]
    assert [c.find("failure").get("type") if c.find("failure") is not None else None for c in cases] == \
        [None, None, "regression", "guard_failed", "invalid", None, None]


def test_junit_marks_inconclusive_skipped_not_passed() -> None:
    """An inconclusive gate could not tell: every JUnit consumer shows <skipped>, none shows a pass."""
    findings = _findings_of_every_decision()
    suite = ET.fromstring(junit_xml(findings)).find("testsuite")
    skipped = [(c.get("classname"), c.find("skipped")) for c in suite.findall("testcase") if c.find("skipped") is not None]
    assert [name for name, _ in skipped] == ["gatekit.g6-2026-11-30"] and suite.get("skipped") == "1"
    assert skipped[0][1].get("type") == "inconclusive" and skipped[0][1].get("message") == \
        one_line_why(findings[6].verdict)
    assert [_dorny_result(c) for c in suite.findall("testcase")] == \
        ["success", "success", "failed", "failed", "failed", "success", "skipped"]


def test_hostile_strings_stay_text_in_every_format() -> None:
    finding = finding_of(hostile_data())
    md = summary_markdown([finding])
    assert "<script" not in md and "<img" not in md
    root = ET.fromstring(junit_xml([finding]).encode())  # well-formed despite control characters
    case = root.find("testsuite/testcase")
    assert PAYLOAD.split("|")[0] in case.get("name")
    for text in (gab_json([finding]), bmf_json([finding])):
        json.loads(text)


def test_gate_run_writes_every_ci_output(fake_gate_dir, tmp_path: Path) -> None:
    g = fake_gate_dir(off={"elapsed": {"off-r1": 10.0, "off-r2": 10.1, "off-r3": 9.9}},
                      on={"elapsed": {"on-r1": 10.9, "on-r2": 11.0, "on-r3": 11.1}})
    out = tmp_path / "ci"
    done = gate_invoke("run", "off", "on", "--summary-md", str(out / "summary.md"), "--junit", str(out / "junit.xml"),
                    "--export", "gab-json", str(out / "gab.json"), "--export", "bmf", str(out / "bmf.json"),
                    "--fail-on", "regression", cwd=g.root)
    assert done.returncode == 1, done.stderr  # a regression fails CI, after every output is written
    assert "**REGRESSION**" in (out / "summary.md").read_text()
    failure = ET.parse(out / "junit.xml").getroot().find("testsuite/testcase/failure")
    assert failure.get("type") == "regression" and "beyond the threshold" in failure.get("message")
    assert json.loads((out / "gab.json").read_text())[0]["name"] == "fixture/train_elapsed_s (on)"
    assert json.loads((out / "bmf.json").read_text())["fixture/on"]["train_elapsed_s"]["value"] == pytest.approx(11.0)


def test_bmf_latency_needs_a_primary_in_seconds_before_running(gate_dir, tmp_path: Path) -> None:
    g = gate_dir(gate={"primary": "psnr_db", "direction": "higher"}, guards=[])
    done = gate_invoke("run", "off", "on", "--export", "bmf", str(tmp_path / "b.json"), "--bmf-measure", "latency",
                       cwd=g.root)
    assert done.returncode == 2
    assert "gate.primary 'psnr_db' is not a time in seconds" in done.stderr and "gate.toml" in done.stderr
    assert g.order() == [] and not (tmp_path / "b.json").exists()


def test_report_command_writes_ci_outputs_for_many_findings(tmp_path: Path) -> None:
    a = write_json(tmp_path / "a.json", variant("a-2026-11-30", "2026-11-30", gate_id="a"))
    b = write_json(tmp_path / "b.json", variant("b-2026-11-30", "2026-11-30", gate_id="b", decision="regression"))
    done = gate_invoke("report", str(a), str(b), "--summary-md", "s.md", "--junit", "j.xml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "s.md").read_text().startswith("## gatekit: 1 adopted, 1 regression")
    assert ET.parse(tmp_path / "j.xml").getroot().get("failures") == "1"


# -- what the consumers accept ----------------------------------------------------------------------
# Schemas and rules come from the consumers' own repositories: tests/fixtures/schemas/SOURCES.md.

SCHEMAS = FIXTURES / "schemas"


EVERY_DECISION = ["adopted", "rejected", "regression", "guard_failed", "invalid", "equivalent", "inconclusive"]


def _findings_of_every_decision() -> list[Finding]:
    return [finding_of(variant(f"g{i}-2026-11-30", "2026-11-30", decision=d, gate_id=f"g{i}"))
            for i, d in enumerate(EVERY_DECISION)]


def _gab_extractor_errors(text: str) -> list[str]:
    """github-action-benchmark v1.22.0 (commit c38cce98215cf75e178ecd5a0c1a1ab215e93006), src/extract.ts:
    the custom tools parse the file with zod `z.array(BenchmarkResult)`, BenchmarkResult = {name: string,
    value: number, range?: string, unit: string, extra?: string}; an empty list is "No benchmark result was
    found"; src/write.ts matches the previous run by `benches.find(b => b.name === current.name)`, so a
    second entry with a name already used is never compared."""
    data = json.loads(text)
    if not isinstance(data, list) or not data:
        return ["not a non-empty JSON array"]
    errors = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            errors.append(f"[{i}] is not an object")
            continue
        for key in ("name", "unit"):
            if not isinstance(entry.get(key), str):
                errors.append(f"[{i}].{key} is not a string")
        value = entry.get("value")
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            errors.append(f"[{i}].value is not a finite number")
        errors += [f"[{i}].{key} is not a string" for key in ("range", "extra")
                   if key in entry and not isinstance(entry[key], str)]
    names = [e.get("name") for e in data if isinstance(e, dict)]
    errors += [f"name {n!r} appears twice" for n in set(names) if names.count(n) > 1]
    return errors


def _bmf_errors(text: str) -> list[str]:
    """Bencher's published BMF schema (services/console/public/bmf.json) and its 1024-byte benchmark names."""
    data = json.loads(text)
    schema = json.loads((SCHEMAS / "bencher-bmf.json").read_text())
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(data)]
    errors += [f"{name[:40]}…: {len(name.encode())} bytes" for name in data if len(name.encode()) > NAME_MAX_BYTES]
    # a measure key must parse as a NameId: uuid, slug or ResourceName, the last non-empty, trimmed and at most
    # MAX_LEN = 64 bytes (lib/bencher_valid/src/lib.rs `is_valid_len`, resource_name.rs, name_id.rs)
    errors += [f"measure {measure[:40]!r} of {name[:40]!r}: not a Bencher measure name (1-64 bytes, trimmed)"
               for name, measures in data.items() if isinstance(measures, dict) for measure in measures
               if not (measure and measure == measure.strip() and len(measure.encode()) <= 64)]
    return errors + ([] if data else ["no benchmark"])


def _bounds_errors(text: str) -> list[str]:
    """Each BMF metric's value between its own lower_value and upper_value, where it has them."""
    errors = []
    for name, measures in json.loads(text).items():
        for measure, metric in measures.items():
            low, high = metric.get("lower_value", metric["value"]), metric.get("upper_value", metric["value"])
            if not low <= metric["value"] <= high:
                errors.append(f"{name}/{measure}: {metric['value']} outside [{low}, {high}]")
    return errors


def _dorny_result(case: ET.Element) -> str:
    """dorny/test-reporter's java-junit parser (src/parsers/java-junit/java-junit-parser.ts,
    getTestCaseResult): failure or error → failed, skipped → skipped, else success."""
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    return "skipped" if case.find("skipped") is not None else "success"


def _dorny_message(case: ET.Element) -> str | None:
    """dorny/test-reporter's getTestCaseError: the shown message is `type + ': ' + message`."""
    failure = case.find("failure")
    if failure is None:
        return None
    message = failure.get("message")
    return f"{failure.get('type')}: {message}" if failure.get("type") else message


def _mikepenz_path(case: ET.Element, workspace: Path) -> str:
    """mikepenz/action-junit-report's src/testParser.ts: resolveFileAndLine takes the testcase's `file`
    attribute, else `classname.split('.').slice(-1)[0]`; resolvePath globs `**/<name>.*` in the workspace and
    keeps the name itself when nothing matches."""
    name = case.get("file") or (case.get("classname") or case.get("name")).split(".")[-1]
    matches = sorted(workspace.glob(f"**/{name}.*"))
    return str(matches[0].relative_to(workspace)) if matches else name


def test_junit_passes_jenkins_junit_10_xsd() -> None:
    schema = etree.XMLSchema(etree.parse(str(SCHEMAS / "junit-10.xsd")))
    for findings in ([finding_of(golden_data())], _findings_of_every_decision(), [finding_of(hostile_data())]):
        document = etree.fromstring(junit_xml(findings).encode())
        assert schema.validate(document), schema.error_log


def test_a_schema_check_can_fail() -> None:
    """The validators above reject what their consumers reject (else a passing test proves nothing)."""
    schema = etree.XMLSchema(etree.parse(str(SCHEMAS / "junit-10.xsd")))
    assert not schema.validate(etree.fromstring(b"<testsuites><testcase/></testsuites>"))
    assert _bmf_errors('{"b": {"m": {"lower_value": 1}}}') and _bmf_errors(json.dumps({"x" * 1025: {}}))
    assert _gab_extractor_errors('[{"name": "a", "unit": "s", "value": "1"}, {"name": "a", "unit": "s", "value": 1}]')
    assert _gab_extractor_errors("[]")
    assert _bmf_errors(json.dumps({"b": {"m" * 65: {"value": 1}}})) and _bmf_errors('{"b": {" m": {"value": 1}}}')
    assert _bounds_errors('{"b": {"m": {"value": 3, "lower_value": 1, "upper_value": 2}}}')


@pytest.mark.parametrize("measure", ["custom", "latency"])
def test_bmf_passes_bencher_schema(measure: str) -> None:
    findings = [finding_of(golden_data()), finding_of(variant("v-2026-12-01", "2026-12-01", gate_id="v")),
                finding_of(hostile_data())]
    findings = [f for f in findings if f.gate.primary.endswith("_s")] if measure == "latency" else findings
    assert _bmf_errors(bmf_json(findings, measure=measure)) == []


def test_gab_json_passes_the_extractor_rules() -> None:
    assert _gab_extractor_errors(gab_json([finding_of(golden_data()), finding_of(hostile_data())])) == []
    assert _gab_extractor_errors(gab_json(_findings_of_every_decision())) == []


def test_a_higher_is_better_primary_is_custom_bigger_is_better(tmp_path: Path) -> None:
    higher = golden_data()
    higher["gate"].update(primary="psnr_db", direction="higher", guards=[])
    higher["guards"] = {}
    entries = json.loads(gab_json([finding_of(higher)]))
    assert gab_tool([finding_of(higher)]) == "customBiggerIsBetter" and _gab_extractor_errors(json.dumps(entries)) == []
    assert [e["name"] for e in entries] == ["golden/psnr_db (on)", "golden/psnr_db (off)"]
    assert entries[0]["value"] == pytest.approx((30.02 + 30.06 + 30.08) / 3)  # used runs of on (on-r2 was not)
    # one file, one tool: a lower- and a higher-is-better finding together are refused, naming both
    lower = write_json(tmp_path / "lower.json", variant("low-2026-11-30", "2026-11-30", gate_id="low"))
    higher["meta"]["id"] = "high-2026-11-30"
    done = gate_invoke("report", str(lower), str(write_json(tmp_path / "high.json", higher)),
                       "--export", "gab-json", "gab.json", cwd=tmp_path)
    assert done.returncode == 2 and not (tmp_path / "gab.json").exists()
    assert "gab.json" in done.stderr and "low-2026-11-30 is lower-is-better" in done.stderr
    assert "high-2026-11-30 is higher-is-better" in done.stderr


def test_long_names_are_capped_with_a_stable_hash() -> None:
    long_id = "é" * 700 + "-tail"  # 1405 bytes: the cut must land on a character boundary
    data = variant("long-2026-11-30", "2026-11-30", gate_id=long_id)
    other = variant("long2-2026-11-30", "2026-11-30", gate_id=long_id + "2")
    bmf = json.loads(bmf_json([finding_of(data), finding_of(other)]))
    assert len(bmf) == 6 and _bmf_errors(json.dumps(bmf)) == []
    for name in bmf:
        assert len(name.encode()) <= NAME_MAX_BYTES and name.startswith("é" * 300) and " #" in name
    assert json.loads(bmf_json([finding_of(data)])).keys() <= bmf.keys()  # same finding, same names
    assert capped_name(f"{long_id}/on") == capped_name(f"{long_id}/on") != capped_name(f"{long_id}/off")
    assert capped_name("short/on") == "short/on"
    assert len(capped_name("x" * NAME_MAX_BYTES).encode()) == NAME_MAX_BYTES == len(capped_name("x" * 5000).encode())
    gab = json.loads(gab_json([finding_of(data)]))
    assert all(len(e["name"].encode()) <= NAME_MAX_BYTES for e in gab) and _gab_extractor_errors(json.dumps(gab)) == []


def test_several_findings_of_one_gate_keep_every_entry() -> None:
    monday = finding_of(variant("golden-2026-11-30", "2026-11-30", delta_pct=-5.0))
    tuesday = finding_of(variant("golden-2026-12-01", "2026-12-01", delta_pct=-6.0))
    bmf = json.loads(bmf_json([monday, tuesday]))
    assert sorted(bmf) == sorted(f"golden-2026-{day}/{arm}" for day in ("11-30", "12-01")
                                 for arm in ("off", "on", "delta"))
    assert [bmf[f"golden-2026-{d}/delta"]["delta_pct"]["value"] for d in ("11-30", "12-01")] == [-5.0, -6.0]
    gab = json.loads(gab_json([monday, tuesday]))
    assert len(gab) == 4 and _gab_extractor_errors(json.dumps(gab)) == []
    with pytest.raises(ConfigError, match="given twice"):
        bmf_json([monday, monday])
    # alone, a finding keeps its gate's name: a history in Bencher goes on from one day to the next
    assert set(json.loads(bmf_json([monday]))) == {"golden/off", "golden/on", "golden/delta"}


def test_bmf_latency_is_nanoseconds_as_bencher_hyperfine_adapter_writes_it(tmp_path: Path) -> None:
    finding = finding_of(golden_data())
    bmf = json.loads(bmf_json([finding], measure="latency"))
    # named by gate and arm: another gate's `off` and `on` are other benchmarks, never one merged history
    assert set(bmf) == {"golden/off", "golden/on", "golden/delta"}
    for arm in ("off", "on"):
        seconds = finding.used_values(arm, "train_elapsed_s")
        mean_s, sd_s = statistics.fmean(seconds), statistics.stdev(seconds)
        assert bmf[f"golden/{arm}"]["latency"] == pytest.approx(
            {"value": mean_s * 1e9, "lower_value": (mean_s - sd_s) * 1e9, "upper_value": (mean_s + sd_s) * 1e9})
        assert "train_elapsed_s" not in bmf[f"golden/{arm}"] and "psnr_db" in bmf[f"golden/{arm}"]  # guards: custom
    assert bmf["golden/off"]["latency"]["value"] == pytest.approx(10.0166667e9)  # (10.0 + 9.95 + 10.1) / 3 s
    other = finding_of(variant("other-2026-11-30", "2026-11-30", gate_id="other"))
    assert not set(json.loads(bmf_json([other], measure="latency"))) & set(bmf)
    # a primary that is not seconds has no latency; the CLI names the finding and the option
    not_time = golden_data()
    not_time["gate"].update(primary="psnr_db", direction="higher", guards=[])
    not_time["guards"] = {}
    path = write_json(tmp_path / "psnr.json", not_time)
    done = gate_invoke("report", str(path), "--export", "bmf", "b.json", "--bmf-measure", "latency", cwd=tmp_path)
    assert done.returncode == 2 and not (tmp_path / "b.json").exists()
    assert "gate.primary 'psnr_db' is not a time in seconds" in done.stderr
    done = gate_invoke("report", str(path), "--export", "bmf", "b.json", cwd=tmp_path)  # default: custom
    assert done.returncode == 0 and "psnr_db" in json.loads((tmp_path / "b.json").read_text())["golden/on"]


def test_invalid_findings_are_skipped_and_never_written_empty(tmp_path: Path) -> None:
    good = write_json(tmp_path / "good.json", variant("good-2026-11-30", "2026-11-30", gate_id="good"))
    bad = write_json(tmp_path / "bad.json", variant("bad-2026-11-30", "2026-11-30", gate_id="bad", decision="invalid"))
    done = gate_invoke("report", str(good), str(bad), "--export", "bmf", "b.json", "--export", "gab-json", "g.json",
                       "--junit", "j.xml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    skipped = [line for line in done.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 1 and "bad-2026-11-30" in skipped[0] and "invalid" in skipped[0]
    assert {name.split("/")[0] for name in json.loads((tmp_path / "b.json").read_text())} == {"good"}
    assert all("bad" not in e["name"] for e in json.loads((tmp_path / "g.json").read_text()))
    assert ET.parse(tmp_path / "j.xml").getroot().get("tests") == "2"  # JUnit still reports the invalid gate
    for fmt_name in ("bmf", "gab-json"):
        done = gate_invoke("report", str(bad), "--export", fmt_name, "only.json", "--summary-md", "s.md", cwd=tmp_path)
        assert done.returncode == 2 and not (tmp_path / "only.json").exists()
        assert "only.json: not written: " in done.stderr and "every finding is invalid (bad-2026-11-30)" in done.stderr
        assert (tmp_path / "s.md").exists()  # the summary says why
    with pytest.raises(EmptyExportError):
        bmf_json([finding_of(variant("bad-2026-11-30", "2026-11-30", decision="invalid"))])


def _large_findings(count: int, runs: int) -> list[Finding]:
    data = golden_data()
    rows = data["runs"]
    data["runs"] = [dict(copy.deepcopy(row), order=i + 1, label=f"{row['arm']}-r{i + 1}")
                    for i, row in ((i, rows[i % len(rows)]) for i in range(runs))]
    base = finding_of(data)
    return [dataclasses.replace(base, meta=dataclasses.replace(base.meta, id=f"big{i}-2026-11-30"),
                                gate=dataclasses.replace(base.gate, id=f"big{i}")) for i in range(count)]


def test_summary_stays_under_github_limit_keeping_whole_gates() -> None:
    findings = _large_findings(6, 3000)
    one = len(summary_markdown(findings[:1]).encode())
    assert 6 * one > 1024 * 1024  # uncapped, this summary would be refused by GitHub
    text = summary_markdown(findings, full_report="site/index.html")
    assert len(text.encode()) <= SUMMARY_MAX_BYTES < 1024 * 1024
    shown = text.count("\n### gate ")
    assert 0 < shown < 6 and (shown + 1) * one > SUMMARY_MAX_BYTES - 1000  # as many whole gates as fit
    assert text.rstrip().endswith(f"**{6 - shown} of 6 gate(s) cut** to keep this summary under GitHub's 1024 KiB "
                                  "step-summary limit; the full report: site/index.html")
    for f in findings[:shown]:  # each kept gate is whole: its last table row and its finding id are there
        section = text.split(f"### gate {f.gate.id}:")[1]
        assert f"| {len(f.runs)} | " in section and f"Finding `{f.id}`" in section
    assert all(f"### gate {f.gate.id}:" not in text for f in findings[shown:])
    assert summary_markdown(findings[:1]) == summary_markdown(findings[:1], limit_bytes=one)  # fits: unchanged


def test_summary_cut_at_a_small_limit_names_the_finding_files() -> None:
    findings = [finding_of(variant(f"s{i}-2026-11-30", "2026-11-30", gate_id=f"s{i}")) for i in range(3)]
    full = summary_markdown(findings)
    text = summary_markdown(findings, limit_bytes=len(full.encode()) - 1)
    assert text.count("### gate ") == 2 and "**1 of 3 gate(s) cut**" in text
    assert "the finding files (`gate report FINDING… --md FILE`)" in text
    assert len(text.encode()) < len(full.encode())


def test_bmf_latency_of_a_hyperfine_import_equals_what_bencher_hyperfine_adapter_writes() -> None:
    """Bencher's shell_hyperfine adapter (lib/bencher_adapter/src/adapters/shell/hyperfine.rs) reads the same
    hyperfine file as: latency = mean × 1e9 ns, bounds = (mean ∓ stddev) × 1e9, benchmark = command (gatekit
    adds the gate in front: `<gate>/<command>`)."""
    finding = _hyperfine_finding()
    text = bmf_json([finding], measure="latency")
    _golden("bmf-latency.json", text)
    bmf = json.loads(text)
    for result in json.loads((FIXTURES / "hyperfine_sleep.json").read_text())["results"]:
        mean_s, sd_s = result["mean"], result["stddev"]
        assert bmf[f"{finding.gate.id}/{result['command']}"]["latency"] == pytest.approx(
            {"value": mean_s * 1e9, "lower_value": (mean_s - sd_s) * 1e9, "upper_value": (mean_s + sd_s) * 1e9})
    assert _bmf_errors(text) == []


def test_a_rate_primary_is_not_seconds(tmp_path: Path) -> None:
    """`tokens_per_s` is tokens per second: github-action-benchmark shows its unit, and Bencher's latency
    (a time) cannot hold it."""
    rate = golden_data()
    rate["gate"].update(primary="tokens_per_s", direction="higher", guards=[])
    rate["guards"] = {}
    for run in rate["runs"]:
        if "train_elapsed_s" in run["metrics"]:
            run["metrics"]["tokens_per_s"] = 1e6 / run["metrics"]["train_elapsed_s"]
    entries = json.loads(gab_json([finding_of(rate)]))
    assert {e["unit"] for e in entries} == {"tokens/s"} and _gab_extractor_errors(json.dumps(entries)) == []
    with pytest.raises(ConfigError, match="'tokens_per_s' is not a time in seconds"):
        bmf_json([finding_of(rate)], measure="latency")
    assert "tokens_per_s" in json.loads(bmf_json([finding_of(rate)]))["golden/on"]


def test_long_metric_names_are_capped_as_bencher_measures() -> None:
    """Bencher caps a measure name at 64 bytes and then rejects the whole report: cap it, with a hash."""
    data = golden_data()
    long_metric = "validation_peak_signal_to_noise_ratio_on_the_held_out_kodak_images_db"  # 71 bytes
    data["gate"]["guards"][0]["metric"] = long_metric
    data["guards"] = {long_metric: data["guards"].pop("psnr_db")}
    for run in data["runs"]:
        if "psnr_db" in run["metrics"]:
            run["metrics"][long_metric] = run["metrics"].pop("psnr_db")
    text = bmf_json([finding_of(data)])
    assert _bmf_errors(text) == []
    measures = json.loads(text)["golden/on"]
    (capped,) = set(measures) - {"train_elapsed_s"}
    assert len(capped.encode()) <= 64 and capped.startswith(long_metric[:40]) and capped == capped_name(long_metric, 64)
    assert capped_name(long_metric, 64) != capped_name(long_metric + "2", 64)


def test_mikepenz_annotates_the_finding_file_and_dorny_shows_the_type_once(tmp_path: Path) -> None:
    """mikepenz/action-junit-report turns a classname into a file it looks for in the workspace; dorny/
    test-reporter prints `type: message`, so the message must not start with the type itself."""
    findings = [finding_of(variant("two-text-2026-11-30", "2026-11-30", decision="regression", gate_id="two-text"))]
    (tmp_path / "findings").mkdir()
    (tmp_path / "findings" / "two-text-2026-11-30.toml").write_text("")
    (case,) = ET.fromstring(junit_xml(findings)).iter("testcase")
    assert _mikepenz_path(case, tmp_path) == "findings/two-text-2026-11-30.toml"
    message = _dorny_message(case)
    assert message == f"regression: {one_line_why(findings[0].verdict)}" and "regression: regression" not in message


def test_summary_header_counts_unequal_runs_per_arm() -> None:
    data = golden_data()
    data["runs"] = data["runs"] + [dict(copy.deepcopy(data["runs"][0]), order=len(data["runs"]) + 1,
                                        label="off-r9", pair=9)]
    text = summary_markdown([finding_of(data)])
    assert "n=4 off + 3 on" in text and "n=3" not in text.split("\n")[2]


def test_mentions_and_bare_urls_from_a_finding_reach_the_markdown_summary_neutralised(tmp_path: Path) -> None:
    """GitHub pings `@name` and links bare URLs in a PR comment or a job summary: what a trainer or a user wrote
    (title, reasons, arm names, narrative) reads the same but does neither; code spans are left as they are."""
    import re

    from gatekit.report import markdown

    WORD_JOINER = "\u2060"  # invisible; breaks a mention or an autolink
    data = golden_data()
    data["meta"]["title"] = "cc @octocat and @org/team, see https://evil.example/x and www.evil.example"
    data["verdict"]["reasons"] = ["mail admin@evil.example or visit HTTP://evil.example", *data["verdict"]["reasons"]]
    text = summary_markdown([finding_of(data)])
    mention = re.compile(r"@[A-Za-z0-9]")
    bare_url = re.compile(r"(?i)\b(?:https?://|www\.)")
    assert not mention.search(text) and not bare_url.search(text), text
    assert f"@{WORD_JOINER}octocat" in text and f"https{WORD_JOINER}://evil.example/x" in text
    assert text.replace(WORD_JOINER, "").count("@octocat") == 1  # nothing else changed: it reads as written
    shown = markdown.narrative("ask @octocat, not `@octocat` in code")
    assert shown.count(f"@{WORD_JOINER}octocat") == 1 and "`@octocat`" in shown

"""CI outputs (--summary-md, --junit, --export gab-json|bmf) and `gate import hyperfine`, against golden files.

The hyperfine input is a real `hyperfine --export-json` file recorded on the development machine
(hyperfine 1.15.0, Debian package): tests/fixtures/hyperfine_sleep.json came from
  hyperfine --runs 5 --warmup 1 --shell=none --export-json hyperfine_sleep.json -n off 'sleep 0.030' -n on 'sleep 0.025'
and tests/fixtures/hyperfine_three.json from
  hyperfine --runs 3 --shell=none -i --export-json hyperfine_three.json 'sleep 0.020' 'sleep 0.021' 'false'
Goldens: `GATEKIT_REGOLD=1 pytest tests` rewrites all of them (finding, report pages, exports); review the diff.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gatekit.exports import bmf_json, gab_json, junit_xml, summary_markdown
from gatekit.finding import Finding
from tests.conftest import FIXTURES, gate_invoke
from tests.findings_kit import GOLDEN, PAYLOAD, finding_of, golden_data, hostile_data, variant, write_json


def _golden(name: str, text: str) -> None:
    path = GOLDEN / "exports" / name
    if os.environ.get("GATEKIT_REGOLD"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file (GATEKIT_REGOLD=1 to accept)"


def _hyperfine_finding() -> Finding:
    return finding_of(json.loads((GOLDEN / "exports" / "hyperfine-finding.json").read_text()))


def test_hyperfine_import_matches_golden(tmp_path: Path) -> None:
    done = gate_invoke("import", "hyperfine", "hyperfine_sleep.json", "--date", "2026-11-30", "--out", str(tmp_path),
                    "--json", cwd=FIXTURES)
    assert done.returncode == 0, done.stderr
    _golden("hyperfine-finding.json", done.stdout)
    finding = json.loads(done.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hyperfine-sleep-2026-11-30.json",
                                                          "hyperfine-sleep-2026-11-30.toml"]
    # arms = the commands, runs = their times, analysed like a gate
    assert finding["gate"]["arms"] == {"off": "off", "on": "on"}
    assert finding["gate"]["primary"] == "process_wallclock_s" and finding["gate"]["order"] == "blocked"
    raw = json.loads((FIXTURES / "hyperfine_sleep.json").read_text())["results"]
    assert [r["process_wallclock_s"] for r in finding["runs"]] == raw[0]["times"] + raw[1]["times"]
    assert finding["stats"]["mean_off"] == pytest.approx(raw[0]["mean"])
    assert finding["stats"]["mean_on"] == pytest.approx(raw[1]["mean"])
    assert finding["stats"]["delta_pct"] == pytest.approx(100 * (raw[1]["mean"] - raw[0]["mean"]) / raw[0]["mean"])
    assert finding["verdict"]["decision"] == "adopted"
    assert any("not interleaved" in w for w in finding["verdict"]["warnings"])
    assert "VERDICT: ADOPTED" in done.stderr


def test_hyperfine_choosing_commands(tmp_path: Path) -> None:
    three = str(FIXTURES / "hyperfine_three.json")
    done = gate_invoke("import", "hyperfine", three, "--out", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    assert "holds 3 commands (1: 'sleep 0.020', 2: 'sleep 0.021', 3: 'false'); choose two with --off and --on" \
        in done.stderr
    done = gate_invoke("import", "hyperfine", three, "--off", "sleep 0.020", "--on", "2", "--out", str(tmp_path),
                    "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gate"]["arms"] == {"off": "sleep 0.020", "on": "sleep 0.021"}
    # every run of `false` exits 1: failed runs, never numbers, so the series is invalid (exit 3)
    done = gate_invoke("import", "hyperfine", three, "--off", "1", "--on", "false", "--out", str(tmp_path),
                    "--json", "--junit", str(tmp_path / "j.xml"), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    finding = json.loads(done.stdout)
    assert finding["verdict"]["decision"] == "invalid"
    assert {r["reason"] for r in finding["runs"] if r["arm"] == "false"} == {"failed: exit code 1"}
    assert ET.parse(tmp_path / "j.xml").getroot().find("testsuite/testcase/failure").get("type") == "invalid"
    done = gate_invoke("import", "hyperfine", three, "--off", "9", "--on", "1", cwd=tmp_path)
    assert done.returncode == 2 and "--off '9' is not one of the commands" in done.stderr


@pytest.mark.parametrize("content, key", [
    ('{"results": []}', "key 'results' is missing or empty"),
    ('{"results": [{"command": "a", "times": [0.1]}, {"command": "b"}]}', "key 'results[1].times'"),
    ('{"results": [{"command": "a", "times": [0.1], "exit_codes": [0, 0]}, {"command": "b", "times": [1]}]}',
     "key 'results[0].exit_codes'"),
    ('{"results": [{"times": [0.1]}]}', "key 'results[0].command' is missing"),
    ("not json", "not hyperfine --export-json output"),
])
def test_bad_hyperfine_file_is_one_line_naming_file_and_key(tmp_path: Path, content: str, key: str) -> None:
    (tmp_path / "h.json").write_text(content)
    done = gate_invoke("import", "hyperfine", "h.json", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gate: error: h.json: ") and key in line
    assert not (tmp_path / "findings").exists()


def test_export_formats_match_golden() -> None:
    findings = [finding_of(golden_data()), _hyperfine_finding()]
    _golden("summary.md", summary_markdown(findings))
    _golden("junit.xml", junit_xml(findings))
    _golden("gab.json", gab_json(findings))
    _golden("bmf.json", bmf_json(findings))


def test_gab_json_is_custom_smaller_is_better() -> None:
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
    bmf = json.loads(bmf_json([finding_of(data)]))["golden/delta"]["delta_pct"]
    assert bmf == {"value": pytest.approx(-5.3245, abs=1e-4), "lower_value": -7.5, "upper_value": -3.1}
    assert "90 % CI [-7.5000, -3.1000] %" in summary_markdown([finding_of(data)])
    assert "90 % CI [-7.5000, -3.1000] %" in junit_xml([finding_of(data)])
    for key in ("ci_low_pct", "ci_high_pct", "ci_level"):
        del data["stats"][key]
    assert set(json.loads(bmf_json([finding_of(data)]))["golden/delta"]["delta_pct"]) == {"value"}
    assert "CI [" not in summary_markdown([finding_of(data)]) + junit_xml([finding_of(data)])


def test_junit_fails_on_regression_guard_failed_and_invalid() -> None:
    findings = [finding_of(variant(f"g{i}-2026-11-30", "2026-11-30", decision=d, gate_id=f"g{i}"))
                for i, d in enumerate(["adopted", "rejected", "regression", "guard_failed", "invalid"])]
    root = ET.fromstring(junit_xml(findings))
    suite = root.find("testsuite")
    assert root.get("tests") == "5" and root.get("failures") == "3" and suite.get("failures") == "3"
    cases = suite.findall("testcase")
    assert [c.get("classname") for c in cases] == [f"gatekit.g{i}" for i in range(5)]
    assert [c.find("failure").get("type") if c.find("failure") is not None else None for c in cases] == \
        [None, None, "regression", "guard_failed", "invalid"]


def test_hostile_strings_stay_text_in_every_format() -> None:
    finding = finding_of(hostile_data())
    md = summary_markdown([finding])
    assert "<script" not in md and "<img" not in md
    root = ET.fromstring(junit_xml([finding]).encode())  # well-formed despite control characters
    case = root.find("testsuite/testcase")
    assert PAYLOAD.split("|")[0] in case.get("classname")
    for text in (gab_json([finding]), bmf_json([finding])):
        json.loads(text)


def test_gate_run_writes_every_ci_output(gate_dir, tmp_path: Path) -> None:
    g = gate_dir(off={"elapsed": {"off-r1": 10.0, "off-r2": 10.1, "off-r3": 9.9}},
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


def test_gab_json_refuses_a_higher_is_better_gate_before_running(gate_dir, tmp_path: Path) -> None:
    g = gate_dir(gate={"direction": "higher"})
    done = gate_invoke("run", "off", "on", "--export", "gab-json", str(tmp_path / "g.json"), cwd=g.root)
    assert done.returncode == 2
    assert "customSmallerIsBetter; use --export bmf instead" in done.stderr
    assert g.order() == [] and not (tmp_path / "g.json").exists()


def test_report_command_writes_ci_outputs_for_many_findings(tmp_path: Path) -> None:
    a = write_json(tmp_path / "a.json", variant("a-2026-11-30", "2026-11-30", gate_id="a"))
    b = write_json(tmp_path / "b.json", variant("b-2026-11-30", "2026-11-30", gate_id="b", decision="regression"))
    done = gate_invoke("report", str(a), str(b), "--summary-md", "s.md", "--junit", "j.xml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "s.md").read_text().startswith("## gatekit: 1 adopted, 1 regression")
    assert ET.parse(tmp_path / "j.xml").getroot().get("failures") == "1"

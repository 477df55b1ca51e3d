"""Findings and series written by gatekit before the typed finding (schema gatekit.finding/1) still load,
render and re-analyze. The fixture tests/fixtures/v1-series was written by the /1 gatekit (a fixture gate
with a crashed off-r2 re-run as round 4); the committed findings/ are /1 too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gatekit.finding import FINDING_SCHEMA, load_finding
from gatekit.findingset import finding_files
from gatekit.report.terminal import summary
from gatekit.verify import analyze_series
from gatekit.storage import LEGACY_JOURNAL_WARNING
from gatekit.verdict import without_retired_warnings
from tests.conftest import gate_invoke

ROOT = Path(__file__).resolve().parents[1]
V1 = Path(__file__).parent / "fixtures" / "v1-series"
# where the /1 series ran: paths in its journal are absolute, so these read differently here
MACHINE_PATHS = {("meta", "config_paths"), ("meta", "related_runs"), ("predecision", "path")}


def _without_machine_paths(document: dict) -> dict:
    data = json.loads(json.dumps(document))
    for section, key in MACHINE_PATHS:
        data[section].pop(key, None)
    return data


def _drop_additions(document: dict) -> dict:
    """The /1 document a /2 finding contains: without the `generated` flags and reason codes /2 adds, without the
    warning a re-analysis adds about a journal written before hash chains, and without the warnings later versions
    gave elsewhere (verdict.RETIRED_WARNINGS: rule (ii) is in the rules section now)."""
    data = json.loads(json.dumps(document))
    data["schema"] = "gatekit.finding/1"
    data["verdict"]["warnings"] = [w for w in without_retired_warnings(data["verdict"]["warnings"])
                                   if w != LEGACY_JOURNAL_WARNING]
    data["verdict"].pop("reason_codes", None)  # /2 adds a code beside each reason
    for run in data["runs"]:  # /2 adds each run's start-up overhead (a time primary), and its table column
        run.pop("startup_s", None)
    for section in data["sections"]:
        section.pop("generated", None)
        if section.get("type") == "table" and "start-up s" in section["columns"]:
            at = section["columns"].index("start-up s")
            for key in ("columns", "align"):
                section[key] = section[key][:at] + section[key][at + 1:]
            section["rows"] = [row[:at] + row[at + 1:] for row in section["rows"]]
        if section.get("type") == "list":
            section["items"] = [item for item in without_retired_warnings(section["items"])
                                if item != LEGACY_JOURNAL_WARNING]
        if section.get("type") == "kv":  # /2 prints small numbers with significant digits: /1 wrote 4 decimals
            for item in section["items"]:
                item["value"] = _as_four_decimals(item["value"])
    return data


def _as_four_decimals(text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        return text
    return f"{value:.4f}" if abs(value) < 1 else text


def test_a_v1_series_re_analyzes_to_the_same_finding() -> None:
    written_v1 = json.loads((V1 / "finding.json").read_text())
    assert written_v1["schema"] == "gatekit.finding/1"
    finding = analyze_series(V1 / "series")
    assert finding.to_dict()["schema"] == FINDING_SCHEMA
    assert finding.decision == "adopted" and finding.stats.pairs_consistent == "3/3"
    assert [r.label for r in finding.runs if not r.used] == ["off-r2", "on-r2"]
    assert LEGACY_JOURNAL_WARNING in finding.verdict.warnings and finding.predecision.chain_head is None
    # every key and value the /1 gatekit wrote, apart from where the series ran
    assert _without_machine_paths(_drop_additions(finding.to_dict())) == \
        _without_machine_paths(_drop_additions(written_v1))


@pytest.mark.parametrize("path", finding_files(ROOT / "findings") + [V1 / "finding.json"], ids=lambda p: p.name)
def test_committed_v1_findings_load_and_round_trip_without_loss(path: Path) -> None:
    finding = load_finding(path)
    assert finding.upgraded_from == "gatekit.finding/1"
    original = json.loads(path.read_text()) if path.suffix == ".json" else None
    document = finding.to_dict()
    if original is not None:  # each /1 key is kept with its value; /2 only adds
        # the upgrade marks the sections the /1 gatekit wrote: here all of them, none added by people
        assert all(section["generated"] for section in document["sections"])
        document["sections"] = [{k: v for k, v in s.items() if k != "generated"} for s in document["sections"]]
        for section, value in original.items():
            if section in ("schema", "rules", "gate"):
                continue
            assert document[section] == value, section
        assert {k: v for k, v in document["rules"].items() if k in original["rules"]} == original["rules"]
    assert f"VERDICT: {finding.decision.upper()}" in summary(finding)


def test_committed_v1_findings_render_as_pages(tmp_path: Path) -> None:
    files = [str(p) for p in finding_files(ROOT / "findings")]
    done = gate_invoke("report", *files, "--html", str(tmp_path / "html"), "--md", str(tmp_path / "all.md"),
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    pages = sorted((tmp_path / "html").glob("*/index.html"))
    assert len(pages) == len(files)
    for page in pages:
        assert "Verdict" in page.read_text() or "VERDICT" in page.read_text()


def test_a_v1_findings_own_narrative_is_marked_generated_by_its_shape_not_by_todays_narrative() -> None:
    """The /1 gatekit wrote its Diagnostics with 4 decimals, which today's narrative does not: the upgrade marks
    the /1 narrative by its headings, so the page shows only the sections people appended after it."""
    from gatekit.finding import Finding
    from gatekit.report.page import narrative_blocks

    data = json.loads((ROOT / "findings" / "demo-resident-adam-2026-11-30.json").read_text())
    added = [{"type": "heading", "text": "Warnings"}, {"type": "callout", "variant": "info", "text": "seen on CI"}]
    data["sections"] += added
    lead, blocks = narrative_blocks(Finding.from_document(data))
    assert lead.startswith("Interleaved abab gate of `on`")
    assert blocks == added  # a heading people reuse after the narrative is theirs

"""Series recorded by the real `gate` (tests/fixtures/recorded, see its README.md) re-analyse to the findings
they wrote and verify: a classic gate, a sequential v4 gate, a duet gate on two cpu slots, and a campaign of
two gates with its journal. Each test reads a copy in tmp_path, so nothing can write beside the fixtures.

These findings were written by the gatekit that recorded them; a change that makes today's code decide,
word or shape them differently fails here. Re-record (record.py) only when that change is intended.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gatekit.campaign import CAMPAIGN_COPY, CAMPAIGN_JOURNAL, latest_outcomes, load_campaign
from gatekit.engines import GateStatus
from gatekit.exports import summary_markdown
from gatekit.finding import load_finding
from gatekit.storage import line_sha256
from tests.conftest import gate_invoke

RECORDED = Path(__file__).parent / "fixtures" / "recorded"
MANIFEST: dict[str, Any] = json.loads((RECORDED / "recorded.json").read_text())
SERIES = MANIFEST["series"]
# The finding's paths: relative to the gate's folder where the series ran under it, else absolute. Where a
# series is read from another folder than it ran in (here: a copy), today's analysis writes them absolute,
# so they are compared by where they point inside the recorded folder (see the README).
PATH_FIELDS = (("meta", "related_runs"), ("meta", "config_paths"), ("predecision", "path"))


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The recorded folders, copied: the fixtures stay as committed whatever a test writes."""
    target = tmp_path / "recorded"
    shutil.copytree(RECORDED, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _inside(path: str, root: Path) -> str:
    """An absolute path under `root` as relative to it; a relative one (to the gate folder) as written."""
    return str(Path(path).relative_to(root)) if Path(path).is_absolute() else path


def _located(document: dict[str, Any], root: Path) -> dict[str, Any]:
    """The finding with its paths read inside `root`, the folder the series' gate (or campaign) lies in."""
    data = json.loads(json.dumps(document))
    for section, key in PATH_FIELDS:
        value = data[section][key]
        data[section][key] = [_inside(p, root) for p in value] if isinstance(value, list) else _inside(value, root)
    return data


def _journal(series: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (series / "journal.jsonl").read_text().splitlines()]


def test_the_fixtures_are_what_record_py_writes() -> None:
    """Each series is finished and lies where the manifest says; the four kinds are all there."""
    assert {s["name"].split("/")[0] for s in SERIES} == {"classic", "sequential", "duet", "campaign"}
    for entry in SERIES:
        series = RECORDED / entry["series"]
        assert (series / "DONE").is_file() and (series / "predecision.toml").is_file(), entry["name"]
        start = _journal(series)[0]
        # the gate ran in the recording folder, under this entry's root, not in a checkout
        assert Path(start["gate_path"]).is_relative_to(Path(MANIFEST["recorded_in"]) / entry["root"]), start
        for run in (p for p in series.iterdir() if p.is_dir()):
            assert {"record.json", "samples.csv", "stdout.log", "stderr.log"} <= {p.name for p in run.iterdir()}


@pytest.mark.parametrize("entry", SERIES, ids=lambda e: e["name"])
def test_a_recorded_series_re_analyses_to_its_finding(copy: Path, entry: dict[str, Any]) -> None:
    written = json.loads((copy / entry["finding"]).read_text())
    done = gate_invoke("analyze", str(copy / entry["series"]), "--json", cwd=copy)
    assert done.returncode == 0, done.stderr
    recomputed = json.loads(done.stdout)
    assert recomputed["verdict"]["decision"] == written["verdict"]["decision"] == entry["decision"]
    # today's analysis codes every reason (verdict.reason_codes); these were recorded before reasons had codes,
    # which is what they are kept for: a finding without them still verifies (below)
    codes = recomputed["verdict"]["reason_codes"]
    assert len(codes) == len(recomputed["verdict"]["reasons"]) and all(isinstance(c, str) and c for c in codes)
    if "reason_codes" not in written["verdict"]:
        del recomputed["verdict"]["reason_codes"]
    # every key and value, the paths read inside the folder the series ran in
    assert _located(recomputed, copy / entry["root"]) == \
        _located(written, Path(MANIFEST["recorded_in"]) / entry["root"])
    # the TOML beside the JSON is the same finding
    assert load_finding((copy / entry["finding"]).with_suffix(".toml")).to_dict() == \
        load_finding(copy / entry["finding"]).to_dict()


@pytest.mark.parametrize("entry", SERIES, ids=lambda e: e["name"])
def test_a_recorded_series_verifies_against_its_finding(copy: Path, entry: dict[str, Any]) -> None:
    series = copy / entry["series"]
    done = gate_invoke("verify", str(series), str(copy / entry["finding"]), cwd=copy)
    assert done.returncode == 0, done.stderr
    runs = sum(1 for p in series.iterdir() if p.is_dir())
    head = line_sha256((series / "journal.jsonl").read_bytes().splitlines()[-1])
    assert done.stdout.startswith(f"verified: {len(_journal(series))} events, chain head {head} ({runs} run "), \
        done.stdout


@pytest.mark.parametrize("entry", SERIES, ids=lambda e: e["name"])
def test_a_recorded_journal_changed_after_the_fact_fails_verify(copy: Path, entry: dict[str, Any]) -> None:
    series = copy / entry["series"]
    lines = (series / "journal.jsonl").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if json.loads(line)["event"] == "run_end")
    event = json.loads(lines[at])
    event["record"]["outcome"]["metrics"]["train_elapsed_s"] *= 0.9  # a run made to look 10 % faster
    lines[at] = json.dumps(event, sort_keys=True)
    (series / "journal.jsonl").write_text("\n".join(lines) + "\n")
    done = gate_invoke("verify", str(series), str(copy / entry["finding"]), cwd=copy)
    assert done.returncode == 3, done.stdout
    assert f"journal.jsonl: line {at + 2} (" in done.stderr and f"prev does not match line {at + 1}" in done.stderr


def test_a_recorded_finding_changed_after_the_fact_fails_verify(copy: Path) -> None:
    entry = next(e for e in SERIES if e["name"] == "classic")
    finding = copy / entry["finding"]
    document = json.loads(finding.read_text())
    document["stats"]["delta_pct"] -= 1.0
    finding.write_text(json.dumps(document))
    finding.with_suffix(".toml").unlink()  # (else its twin already differs)
    done = gate_invoke("verify", str(copy / entry["series"]), str(finding), cwd=copy)
    assert done.returncode == 3, done.stdout
    assert "differs from the finding recomputed" in done.stderr and "stats.delta_pct" in done.stderr


def test_the_recorded_campaign_journal_replays_to_its_gates(copy: Path) -> None:
    folder = copy / MANIFEST["campaign"]
    recorded_root = Path(MANIFEST["recorded_in"]) / "campaign"
    campaign = load_campaign(copy / "campaign" / CAMPAIGN_COPY)
    # the journal is chained: its first line on the campaign file as started, each next on the line before
    lines = (folder / CAMPAIGN_JOURNAL).read_bytes().splitlines()
    anchor = hashlib.sha256((folder / CAMPAIGN_COPY).read_bytes()).hexdigest()
    assert [json.loads(line)["prev"] for line in lines] == [anchor] + [line_sha256(line) for line in lines[:-1]]
    assert (folder / CAMPAIGN_COPY).read_bytes() == campaign.path.read_bytes()

    start, outcomes = latest_outcomes(folder)  # what `gate campaign --resume` reads
    assert start.campaign_sha256 == campaign.sha256
    assert list(outcomes) == [gate.key for gate in campaign.gates]
    members = {e["name"].removeprefix("campaign/"): e for e in SERIES if e["root"] == "campaign"}
    assert set(members) == set(outcomes)
    for key, outcome in outcomes.items():
        entry = members[key]
        assert outcome.status is GateStatus.FINISHED and outcome.exit_code == 0
        assert outcome.decision == entry["decision"] == load_finding(copy / entry["finding"]).decision
        # the outcome names the series and finding where they lie now (recorded as absolute paths, read
        # inside the folder the campaign ran in: two levels above its series)
        assert outcome.series_dir is not None and outcome.finding_path is not None
        assert outcome.series_dir == copy / entry["series"] and outcome.finding_path == copy / entry["finding"]
    # the campaign's summary is what today's code writes of these findings (the site is not recorded)
    findings = [load_finding(copy / members[gate.key]["finding"]) for gate in campaign.gates]
    site_index = recorded_root / MANIFEST["campaign"].removeprefix("campaign/") / "site" / "index.html"
    assert (folder / "summary.md").read_text() == summary_markdown(findings, full_report=str(site_index))


def test_the_recorded_campaign_resumes_from_another_folder(copy: Path) -> None:
    done = gate_invoke("campaign", "campaign.toml", "--resume", str(copy / MANIFEST["campaign"]),
                       cwd=copy / "campaign")
    assert done.returncode == 0, done.stderr

"""The finding document against reviewed golden files, and TOML ↔ JSON round trips.

Goldens: `GATEKIT_REGOLD=1 pytest tests` rewrites all of them (finding, report pages, exports); review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gatekit.config import GuardSpec, RulesSpec, ThresholdSpec
from gatekit.errors import FindingError
from gatekit.analysis import SeriesEvidence, analyze
from gatekit.finding import load_finding
from gatekit.prereg import DecisionSpec
from gatekit.records import RunOutcome, RunRecord, WindowSummary
from gatekit.rules import Replacement
from gatekit.verdict import Decision

GOLDEN = Path(__file__).parent / "golden"
SPEC = DecisionSpec(gate_id="golden", title="Golden finding", off_arm="off", on_arm="on", n=3, order="abab",
                    seed=0, primary="train_elapsed_s", direction="lower", expect_diff=("optimizer",),
                    threshold=ThresholdSpec(), guards=(GuardSpec("psnr_db", "higher", 0.05),),
                    rules=RulesSpec(sigma_ref="leave_one_out"))


def _run(order: int, arm: str, round_: int, elapsed: float | None, load_max: float, *, exit_code: int = 0,
         retry_of: int | None = None) -> RunRecord:
    metrics = {"train_elapsed_s": elapsed, "psnr_db": 30.0 + order / 100} if elapsed is not None else {}
    outcome = RunOutcome(exit_code=exit_code, process_wallclock_s=(elapsed or 0.5) + 0.25, metrics=metrics,
                         config={"optimizer": "host" if arm == "off" else "resident", "steps": 100},
                         error="" if exit_code == 0 else f"exit code {exit_code}")
    return RunRecord(order=order, arm=arm, label=f"{arm}-r{round_}", pair=round_, outcome=outcome,
                     window=WindowSummary(samples=5, load1_mean=load_max - 0.5, load1_max=load_max),
                     retry_of=retry_of, started_at=f"2026-11-30T10:0{order}:00+00:00")


RECORDS = (
    _run(1, "off", 1, 10.00, 1.0), _run(2, "on", 1, 9.50, 1.1),
    _run(3, "off", 2, None, 1.2, exit_code=1), _run(4, "on", 2, 9.45, 1.0),
    _run(5, "off", 3, 10.10, 1.3), _run(6, "on", 3, 9.55, 1.2),
    _run(7, "off", 4, 9.95, 1.1, retry_of=2), _run(8, "on", 4, 9.40, 1.0, retry_of=2),
)
EVIDENCE = SeriesEvidence(
    series_id="golden-20261130-100000", finding_id="golden-2026-11-30", spec=SPEC, records=RECORDS,
    replaced={2: Replacement("pair re-run as r4", {"off-r2": {"contaminated": False, "z": 0.0,
                                                             "detail": "failed: exit code 1"}})},
    date="2026-11-30", predecision_path="runs/golden-20261130-100000/predecision.toml",
    predecision_sha256="0" * 64,
    provenance={"artifacts": {"start": {"trainer.py": "a" * 64}, "end": {"trainer.py": "a" * 64}},
                "git": {"start": {"rev": "b" * 40, "dirty": False, "branch": "main"},
                        "end": {"rev": "b" * 40, "dirty": False, "branch": "main"}},
                "host": {"hostname": "golden-host", "cpu_count": 2}, "software": {"gatekit": "0.1.0"}},
    config_paths=("configs/off.toml", "configs/on.toml"),
    related_runs=tuple(f"runs/golden-20261130-100000/{r.label}" for r in RECORDS),
)


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_finding_matches_golden(suffix: str) -> None:
    finding = analyze(EVIDENCE)
    text = finding.to_toml() if suffix == ".toml" else finding.to_json()
    golden = GOLDEN / f"finding{suffix}"
    if os.environ.get("GATEKIT_REGOLD"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_golden_numbers_by_hand() -> None:
    finding = analyze(EVIDENCE)
    # used: off 10.00, 10.10, 9.95 (r1, r3, r4); on 9.50, 9.55, 9.40
    assert finding.stats.mean_off == pytest.approx(30.05 / 3)
    assert finding.stats.mean_on == pytest.approx(28.45 / 3)
    assert finding.stats.delta_pct == pytest.approx(100 * (28.45 - 30.05) / 30.05)
    assert finding.stats.pairs_consistent == "3/3"
    assert [r.used for r in finding.runs] == [True, True, False, False, True, True, True, True]
    assert finding.runs[2].reason == "failed: exit code 1; pair re-run as r4"
    assert finding.runs[3].reason == "pair partner failed or contaminated; pair re-run as r4"
    assert finding.decision is Decision.ADOPTED
    assert finding.to_dict()["verdict"]["decision"] == "adopted"


def test_toml_and_json_round_trip(tmp_path: Path) -> None:
    finding = analyze(EVIDENCE)
    (tmp_path / "f.toml").write_text(finding.to_toml())
    (tmp_path / "f.json").write_text(finding.to_json())
    from_toml, from_json = load_finding(tmp_path / "f.toml"), load_finding(tmp_path / "f.json")
    assert from_toml == from_json
    assert from_toml.to_dict() == from_json.to_dict() == json.loads(finding.to_json())
    # key order may differ (TOML puts a table's plain keys before its sub-tables); content may not
    assert from_toml.to_toml() == finding.to_toml()


def test_unknown_schema_says_what_to_do(tmp_path: Path) -> None:
    data = json.loads(analyze(EVIDENCE).to_json())
    data["schema"] = "gatekit.finding/9"
    (tmp_path / "f.json").write_text(json.dumps(data))
    with pytest.raises(FindingError, match="written by a newer gatekit; upgrade gatekit"):
        load_finding(tmp_path / "f.json")
    (tmp_path / "g.json").write_text('{"schema": "other"}')
    with pytest.raises(FindingError, match="not a gatekit finding"):
        load_finding(tmp_path / "g.json")

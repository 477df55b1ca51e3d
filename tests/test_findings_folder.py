"""A folder of findings as `gate site` and `gate history` read it: the committed findings/ folder also holds
documents that are not gate findings (a bisect finding and plan, gate configs, GPU probes' JSON); those are
left out with one note, while a file that claims to be a finding and is broken, or too large, stays an error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gatekit.finding import MAX_FINDING_BYTES
from gatekit.findingset import finding_files, sort_files
from tests.conftest import gate_invoke

REPO = Path(__file__).resolve().parents[1]
FINDINGS = REPO / "findings"
BISECT_FINDING = FINDINGS / "bisect-torch-2026-12-01" / "bisect-finding.json"
NVML_PROBE = FINDINGS / "h200-2026-12-01" / "clocks" / "nvml-idle.json"
REAL_FINDINGS = ("resident-mlp-2026-11-30", "resident-graph-2026-11-30")


def _mixed_folder(tmp_path: Path) -> Path:
    """Real findings (both twins) beside the real bisect finding and a real GPU probe's JSON."""
    folder = tmp_path / "findings"
    folder.mkdir()
    for stem in REAL_FINDINGS:
        for suffix in (".json", ".toml"):
            shutil.copy(FINDINGS / f"{stem}{suffix}", folder)
    shutil.copy(BISECT_FINDING, folder)
    shutil.copy(NVML_PROBE, folder)
    return folder


def test_site_and_history_leave_out_documents_that_are_not_findings(tmp_path: Path) -> None:
    folder = _mixed_folder(tmp_path)
    site = gate_invoke("site", str(folder), "--out", str(tmp_path / "site"), "--jobs", "1", cwd=tmp_path)
    assert site.returncode == 0, site.stderr
    note = [line for line in site.stderr.splitlines() if line.startswith("note: left out")]
    assert note == ["note: left out, not gate findings: 1 gatekit.bisect/1 (bisect-finding.json); "
                    "1 without a schema key (nvml-idle.json)"]
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert all(stem in index for stem in REAL_FINDINGS)
    history = gate_invoke("history", str(folder), "--metric", "delta_pct", cwd=tmp_path)
    assert history.returncode == 0, history.stderr
    assert note[0] in history.stderr.splitlines()


def test_a_broken_file_that_claims_to_be_a_finding_stays_an_error(tmp_path: Path) -> None:
    folder = _mixed_folder(tmp_path)
    document = json.loads((FINDINGS / "resident-mlp-2026-11-30.json").read_text(encoding="utf-8"))
    del document["verdict"]
    (folder / "broken.json").write_text(json.dumps(document), encoding="utf-8")
    for args in (("site", str(folder), "--out", str(tmp_path / "site")), ("history", str(folder), "--metric",
                                                                          "delta_pct")):
        result = gate_invoke(*args, cwd=tmp_path)
        assert result.returncode == 2
        assert f"{folder / 'broken.json'}: missing section(s) verdict" in result.stderr


def test_a_finding_file_larger_than_the_bound_is_refused_unread(tmp_path: Path) -> None:
    committed = sort_files(finding_files(FINDINGS, nested=True)).findings
    largest = max(path.stat().st_size for path in committed)
    assert largest * 100 < MAX_FINDING_BYTES  # the bound leaves the committed findings a wide margin
    folder = _mixed_folder(tmp_path)
    huge = folder / "huge.json"
    with huge.open("wb") as handle:  # sparse: the reader must refuse it by its size, not read 16 MiB of zeros
        handle.truncate(MAX_FINDING_BYTES + 1)
    result = gate_invoke("history", str(folder), "--metric", "delta_pct", cwd=tmp_path)
    assert result.returncode == 2
    assert f"{huge}: is larger than 16 MiB" in result.stderr

"""Code under test that writes into gatekit's own folder: a trainer appends to its series' journal
(`$GATEKIT_RUN_DIR/../journal.jsonl`), a real process as the trainer contract starts it.

A partial line (no newline) is dropped before gatekit's next event, as a line torn by a kill is: the series
runs on, verifies and resumes. A whole line breaks the chain: the gate verifies the journal it wrote before
it reports anything, so that is exit 3 naming the line, and no finding says "adopted" over it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gatekit.errors import VerificationError
from gatekit.storage import Journal, line_sha256
from gatekit.verify import check_written_journal, verify_chain
from tests.conftest import gate_invoke
from tests.faults.faultkit import assert_journal_consistent, fault_gate

SIX = ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]


def test_a_partial_line_a_trainer_appends_to_the_journal_is_dropped_and_the_series_verifies(
        tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", on={"journal_text": {"on-r2": '{"event": "run_end", "record": {"lab'}})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert g.finding()["verdict"]["decision"] == "adopted"
    journal = assert_journal_consistent(g.series())  # every line whole, the chain intact
    assert [e["record"]["label"] for e in journal if e["event"] == "run_end"] == SIX
    (finding,) = (g.root / "findings").glob("*.json")
    verified = gate_invoke("verify", str(g.series()), str(finding), cwd=g.root)
    assert verified.returncode == 0, verified.stderr


def test_a_whole_line_a_trainer_appends_to_the_journal_is_exit_3_naming_it(tmp_path: Path) -> None:
    g = fault_gate(tmp_path / "g", on={"journal_text": {"on-r2": '{"event": "note", "text": "from the trainer"}\n'}})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 3, done.stderr
    lines = (g.series() / "journal.jsonl").read_text().splitlines()
    foreign = lines.index('{"event": "note", "text": "from the trainer"}') + 1
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("gate: error: ")]
    assert f"journal.jsonl: line {foreign}" in error, error
    assert "VERDICT" not in done.stdout + done.stderr and "adopted" not in done.stdout.lower()
    assert not list((g.root / "findings").glob("*.json")) and not (g.series() / "DONE").exists()
    resumed = gate_invoke("run", "--resume", str(g.series()), cwd=g.root)
    assert resumed.returncode == 3 and f"line {foreign}" in resumed.stderr  # never reported as a success


def test_a_chained_line_after_the_gates_last_one_is_named(tmp_path: Path) -> None:
    """A line appended after the gate's last event, with a prev that chains it: the chain verifies, but the
    gate knows the line it wrote last, and names the one after it."""
    (tmp_path / "plan.toml").write_text("plan\n")
    journal = Journal(tmp_path / "journal.jsonl", genesis=tmp_path / "plan.toml")
    journal.append("start")
    journal.append("step", k=1)
    check_written_journal(journal, verify_chain(journal.path, tmp_path / "plan.toml")[1])
    last = journal.path.read_bytes().splitlines()[-1]
    with journal.path.open("a") as handle:
        handle.write(json.dumps({"event": "step", "k": 2, "prev": line_sha256(last)}) + "\n")
    _, head = verify_chain(journal.path, tmp_path / "plan.toml")
    with pytest.raises(VerificationError, match="line 3: not written by this gate"):
        check_written_journal(journal, head)


def test_a_trainer_that_edits_its_series_predecision_is_exit_3_naming_it(tmp_path: Path) -> None:
    """The preregistration is what `gate verify` anchors the chain on: a trainer that edits it (a rule
    appended to predecision.toml) gets no verdict and no finding, exit 3 naming the file, and a resume
    exits 3 too."""
    edit = ["predecision.toml", "\n# loosened by the trainer\n"]
    g = fault_gate(tmp_path / "g", on={"append_to": {"on-r2": edit}})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 3, done.stderr
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("gate: error: ")]
    assert "predecision.toml" in error, error
    assert "VERDICT" not in done.stdout + done.stderr and "adopted" not in done.stdout.lower()
    assert not list((g.root / "findings").glob("*.json")) and not (g.series() / "DONE").exists()
    resumed = gate_invoke("run", "--resume", str(g.series()), cwd=g.root)
    assert resumed.returncode == 3 and "predecision.toml" in resumed.stderr

"""A forger with write access to the series folder (issue 19): an edited journal resumed, an edited
campaign journal, a guard stated twice, a finding edited beside its journal, a copied series resumed over
the original's finding, and legacy journals. Each test is the issue's reproduction, with real files (and
real processes where the process is the subject: the SIGTERM'd series and its resume)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import gate_cli, gate_invoke
from tests.faults.faultkit import OFF_TIMES, fault_gate, finish, kill_quietly, start_gate


def _rewrite_journal(series: Path, edit: Any) -> None:
    """Apply `edit(event)` to every journal line (keys sorted, as gatekit writes them)."""
    path = series / "journal.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(edit(e) or e, sort_keys=True) + "\n" for e in events))


def _slower_off_runs(series: Path, factor: float) -> None:
    """The off runs' train_elapsed_s multiplied by `factor` in journal.jsonl and every record.json."""
    def edit(event: dict[str, Any]) -> None:
        if event["event"] == "run_end" and event["record"]["arm"] == "off":
            event["record"]["outcome"]["metrics"]["train_elapsed_s"] *= factor
            (series / event["record"]["label"] / "record.json").write_text(json.dumps(event["record"], indent=2))
    _rewrite_journal(series, edit)


def _keys(folder: Path) -> tuple[Path, Path]:
    from tests.test_integrity import _keys as keys
    return keys(folder)


# -- 1. resume trusts an edited journal ------------------------------------------------------------------

@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_resume_of_an_edited_journal_exits_3_naming_the_line_and_signs_nothing(tmp_path: Path,
                                                                               signed: bool) -> None:
    """An honest regression (on 3x slower), SIGTERM'd after 5 runs; the off runs made 6x slower in the
    journal and the record files. The resume refuses it before any run, and writes and signs nothing."""
    if signed:
        pytest.importorskip("cryptography")
    g = fault_gate(tmp_path / "g", on={"elapsed": {k.replace("off", "on"): 3 * v for k, v in OFF_TIMES.items()},
                                       "hold": ["on-r3"]})
    proc = start_gate("run", "off", "on", cwd=g.root)
    try:
        g.wait_holding("on-r3")
        proc.send_signal(signal.SIGTERM)
        code, _, err = finish(proc)
        assert code == 130, err
    finally:
        kill_quietly(g.pid("on-r3"))
    series = g.series()
    _slower_off_runs(series, 6.0)
    done = gate_invoke("verify", str(series), cwd=g.root)
    assert done.returncode == 3 and "line 4 (run_start): prev does not match line 3" in done.stderr, done.stderr
    key = ["--sign-key", str(_keys(tmp_path)[0])] if signed else []
    done = gate_cli("run", "--resume", str(series), *key, cwd=g.root)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"{series / 'journal.jsonl'}: line 4 (run_start): prev does not match line 3" in done.stderr
    assert "VERDICT" not in done.stdout + done.stderr
    assert not list((g.root / "findings").glob("*.json")) and not list((g.root / "findings").glob("*.sig"))
    assert g.order().count("on-r3") == 1  # nothing ran again


# -- 5. the same guard metric twice ---------------------------------------------------------------------

def test_a_guard_metric_stated_twice_is_refused_naming_file_and_key(gate_dir) -> None:
    """`max_drop = 0`, then `100`, of one metric: only the last applied, so an on arm 5 dB worse passed."""
    g = gate_dir(off={"default_elapsed": 10.0, "default_psnr": 30.0},
                 on={"default_elapsed": 9.0, "default_psnr": 25.0},
                 guards=[{"metric": "psnr_db", "direction": "higher", "max_drop": 0.0},
                         {"metric": "psnr_db", "direction": "higher", "max_drop": 100.0}])
    for command in (("check",), ("run", "off", "on")):
        done = gate_invoke(*command, cwd=g.root)
        assert done.returncode == 2, done.stdout
        (line,) = done.stderr.strip().splitlines()
        assert line.endswith(f"{g.gate}: guards[1].metric: 'psnr_db' is guarded already by guards[0]; "
                             "state each guard metric once"), line
    assert not g.series_dirs() and not g.order()  # nothing ran

"""Result files a trainer should never write: each is a failed run with a clear reason, never a number."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from gatekit_drivers.command import MAX_RESULT_BYTES, read_result
from tests.conftest import gate_invoke
from tests.faults.faultkit import events, fault_gate


def _write(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


def _huge(path: Path) -> None:
    with path.open("wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_RESULT_BYTES + 1)


RESULT_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "partial json": (_write('{"metrics": {"train_elapsed_s": 12.'), "is neither JSON nor TOML"),
    "partial toml": (_write('[metrics]\ntrain_elapsed_s = '), "is neither JSON nor TOML"),
    "garbage bytes": (lambda p: p.write_bytes(b"\x00\xff\xfe\x80garbage"), "is not UTF-8 text"),
    "huge": (_huge, "is larger than 64 MiB"),
    "fifo": (lambda p: os.mkfifo(p), "is not a regular file"),
    "directory": (lambda p: p.mkdir(), "is not a regular file"),
    "symlink to /dev/zero": (lambda p: p.symlink_to("/dev/zero"), "is not a regular file"),
    "json array": (_write('[{"metrics": {"train_elapsed_s": 1}}]'), "is neither JSON nor TOML"),
    "metrics not a table": (_write('{"metrics": [12.0]}'), "'metrics' must be a table/object"),
    "config not a table": (_write('{"metrics": {"train_elapsed_s": 1}, "config": "x"}'),
                           "'config' must be a table/object"),
    "nested too deep": (_write('{"trace": ' + "[" * 5000 + "]" * 5000 + "}"), "nests deeper than 64 levels"),
    "integer too long": (_write('{"metrics": {"train_elapsed_s": ' + "9" * 5000 + "}}"), "neither JSON nor TOML"),
}


@pytest.mark.parametrize("case", RESULT_CASES, ids=list(RESULT_CASES))
def test_a_defective_result_file_is_a_problem_not_a_crash(tmp_path: Path, case: str) -> None:
    make, expected = RESULT_CASES[case]
    path = tmp_path / "result"
    make(path)
    outcome: list[Any] = []

    def read() -> None:
        try:
            outcome.append(read_result(path))
        except BaseException as exc:  # reported below: read_result must never raise
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)  # a FIFO or /dev/zero must not block or flood the reader
    assert outcome, "read_result hung"
    assert not isinstance(outcome[0], BaseException), repr(outcome[0])
    metrics, config, trace, problem = outcome[0]
    assert expected in problem and str(path) in problem
    assert metrics == {} and config == {} and trace == {}


NUMBER_CASES = {
    "NaN": ('{"metrics": {"train_elapsed_s": NaN, "psnr_db": 30}}', None),
    "Infinity": ('{"metrics": {"train_elapsed_s": Infinity, "psnr_db": 30}}', None),
    "-Infinity": ('{"metrics": {"train_elapsed_s": -Infinity, "psnr_db": 30}}', None),
    "overflow to inf": ('{"metrics": {"train_elapsed_s": 1e999, "psnr_db": 30}}', None),
    "toml nan": ("[metrics]\ntrain_elapsed_s = nan\npsnr_db = 30\n", None),
    "toml inf": ("[metrics]\ntrain_elapsed_s = inf\npsnr_db = 30\n", None),
    "numeric string": ('{"metrics": {"train_elapsed_s": "12.5", "psnr_db": 30}}', None),
    "word": ('{"metrics": {"train_elapsed_s": "fast", "psnr_db": 30}}', None),
    "boolean": ('{"metrics": {"train_elapsed_s": true, "psnr_db": 30}}', None),
    "null": ('{"metrics": {"train_elapsed_s": null, "psnr_db": 30}}', None),
    "beyond float": ('{"metrics": {"train_elapsed_s": ' + "9" * 400 + ', "psnr_db": 30}}', None),
    "negative": ('{"metrics": {"train_elapsed_s": -3.5, "psnr_db": 30}}', -3.5),
    "zero": ('{"metrics": {"train_elapsed_s": 0, "psnr_db": 30}}', 0.0),
    "integer": ('{"metrics": {"train_elapsed_s": 12, "psnr_db": 30}}', 12.0),
}


@pytest.mark.parametrize("case", NUMBER_CASES, ids=list(NUMBER_CASES))
def test_only_finite_numbers_become_metrics(tmp_path: Path, case: str) -> None:
    text, expected = NUMBER_CASES[case]
    path = tmp_path / "result"
    path.write_text(text)
    metrics, _, trace, problem = read_result(path)
    assert problem == ""
    assert metrics.get("train_elapsed_s") == expected and metrics["psnr_db"] == 30.0
    if expected is None:  # dropped, and visibly so
        assert trace["gatekit_dropped_metrics"] == ["train_elapsed_s"]
        assert all(isinstance(v, float) for v in metrics.values())


def _series(root: Path, arm: str, defects: dict[str, str], recorded: tuple[str, ...] = ()) -> dict[str, Any]:
    text = {label: body for label, body in defects.items() if not body.startswith("kind:")}
    kinds = {label: body[5:] for label, body in defects.items() if body.startswith("kind:")}
    g = fault_gate(root, gate={"n": 4}, **{arm: {"result_text": text, "result_kind": kinds}})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    finding = g.finding()
    runs = {r["label"]: r for r in finding["runs"]}
    for label in defects:  # each defective run failed, is not used, and its pair was re-run once
        assert not runs[label]["used"] and runs[label]["reason"].startswith("failed: ")
        assert ("train_elapsed_s" in runs[label]["metrics"]) == (label in recorded)
    assert [r["label"] for r in finding["runs"] if r["used"]] == [
        "off-r5", "on-r5", "off-r6", "on-r6", "off-r7", "on-r7", "off-r8", "on-r8"]
    # the statistics hold exactly the clean runs: means 10.0 and 9.0
    assert finding["stats"]["mean_off"] == pytest.approx(10.0) and finding["stats"]["mean_on"] == pytest.approx(9.0)
    assert finding["verdict"]["decision"] == "adopted"
    for event in events(g.series()):  # and the journal stayed valid JSON throughout
        json.dumps(event, allow_nan=False)
    return runs


def test_defective_primary_metrics_fail_their_runs_end_to_end(tmp_path: Path) -> None:
    runs = _series(tmp_path / "g", "off", {
        "off-r1": '{"metrics": {"train_elapsed_s": 12.',
        "off-r2": '{"metrics": {"train_elapsed_s": NaN, "psnr_db": 30.0}, "config": {"optimizer": "host"}}',
        "off-r3": '{"metrics": {"train_elapsed_s": -3.0, "psnr_db": 30.0}, "config": {"optimizer": "host"}}',
        "off-r4": '{"metrics": {"train_elapsed_s": "fast", "psnr_db": 30.0}, "config": {"optimizer": "host"}}',
    }, recorded=("off-r3",))
    assert "is neither JSON nor TOML" in runs["off-r1"]["reason"]
    assert "primary metric 'train_elapsed_s' missing or not a finite number" in runs["off-r2"]["reason"]
    assert "primary metric 'train_elapsed_s' is -3, not a positive number" in runs["off-r3"]["reason"]
    assert runs["off-r3"]["metrics"]["train_elapsed_s"] == -3.0  # recorded as reported, never used
    assert "missing or not a finite number" in runs["off-r4"]["reason"]


def test_hostile_result_paths_fail_their_runs_end_to_end(tmp_path: Path) -> None:
    runs = _series(tmp_path / "g", "on", {
        "on-r1": "kind:huge",
        "on-r2": '{"metrics": {"psnr_db": 30.0}, "config": {"optimizer": "resident"}}',
        "on-r3": "kind:fifo",
        "on-r4": "\x00\x01garbage{[",
    })
    assert "is larger than 64 MiB" in runs["on-r1"]["reason"]
    assert "primary metric 'train_elapsed_s' missing" in runs["on-r2"]["reason"]
    assert "is not a regular file" in runs["on-r3"]["reason"]
    assert "is neither JSON nor TOML" in runs["on-r4"]["reason"]

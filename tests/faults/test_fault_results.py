"""Result files a trainer should never write: each is a failed run with a clear reason, never a number."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from gatekit.runfiles import MAX_RESULT_BYTES, MAX_VALUES
from gatekit_drivers.command import read_result
from tests.conftest import gate_cli, gate_invoke
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
    "symlink to /dev/zero": (lambda p: p.symlink_to("/dev/zero"),
                             "is a symbolic link to /dev/zero, outside its run folder"),
    "symlink in its folder to a FIFO": (lambda p: (os.mkfifo(p.with_name("fifo")), p.symlink_to("fifo")),
                                        "is not a regular file (a FIFO)"),
    "json array": (_write('[{"metrics": {"train_elapsed_s": 1}}]'), "is neither JSON nor TOML"),
    "metrics not a table": (_write('{"metrics": [12.0]}'), "'metrics' must be a table/object"),
    "config not a table": (_write('{"metrics": {"train_elapsed_s": 1}, "config": "x"}'),
                           "'config' must be a table/object"),
    "nested too deep": (_write('{"trace": ' + "[" * 5000 + "]" * 5000 + "}"), "nests deeper than 64 levels"),
    "100 000 deep": (_write('{"trace": ' + "[" * 100_000 + "]" * 100_000 + "}"), "nests deeper than 64 levels"),
    "too many values": (_write('{"trace": {"x": [' + "{}," * MAX_VALUES + "{}]}}"),
                        "holds more than 1 000 000 values"),
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


def test_a_result_linked_within_its_run_folder_is_read(tmp_path: Path) -> None:
    (tmp_path / "metrics.json").write_text('{"metrics": {"train_elapsed_s": 12.5}}')
    (tmp_path / "result").symlink_to("metrics.json")
    assert read_result(tmp_path / "result") == ({"train_elapsed_s": 12.5}, {}, {}, "")


PEAK_RSS = """
import json, resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # the code before this fix took 5.5 GB: fail, not swap
from gatekit_drivers.command import read_result
try:
    problem = read_result(Path(sys.argv[1]))[3]
except MemoryError:
    problem = "MemoryError"
# VmHWM is this process image's own peak (ru_maxrss would carry over the larger parent it was forked from)
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"problem": problem, "peak_mb": peak_kb / 1024}))
"""


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the peak RSS from /proc (Linux)")
@pytest.mark.parametrize("shape, megabytes, refused", [
    ("empty tables", 60, True), ("short strings", 60, True), ("empty arrays", 20, True), ("one string", 60, False)])
def test_a_huge_result_is_refused_or_parsed_in_memory_proportional_to_it(tmp_path: Path, shape: str,
                                                                         megabytes: int, refused: bool) -> None:
    """Issue 19, point 11: a 20 MB JSON result peaked at 2.7 GB RSS, and 60 MB died with MemoryError at 5.5 GB
    in the nesting check (it built a copy of the text in pieces). The document is now measured in its bytes
    before it is parsed: millions of values are refused at once, a few large ones parse in a few times the
    file's size. Peak RSS of a fresh process that reads it, under 1 GB."""
    size = megabytes * 1_000_000
    item = {"empty tables": b"{},", "short strings": b'"ab",', "empty arrays": b"[],", "one string": b"a"}[shape]
    body = item * (size // len(item))
    document = (b'{"metrics": {"train_elapsed_s": 1.5}, "trace": {"x": "' + body + b'"}}' if shape == "one string"
                else b'{"metrics": {"train_elapsed_s": 1.5}, "trace": {"x": [' + body + b'0]}}')
    path = tmp_path / "result"
    path.write_bytes(document)
    del body, document
    done = subprocess.run([sys.executable, "-c", PEAK_RSS, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    if refused:
        assert read["problem"] == f"result file {path}: holds more than 1 000 000 values"
    else:
        assert read["problem"] == ""
    assert read["peak_mb"] < 1024, read


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


def test_reports_sites_and_campaigns_read_hostile_run_files_within_bounds(tmp_path: Path) -> None:
    """Issue 19, point 9: a failed, retried run leaves a `result` that is 100 000-deep JSON (the report died with
    RecursionError), a link to /dev/zero (MemoryError) or a FIFO (a hang); in a campaign the deep result gave
    exit 1 (the 'fail-on met' code) for an adopted gate, and no site. Every re-read goes through the run-file
    reader: the campaign, `gate site` and `gate report` finish (real processes, each with a timeout), and the
    page names each file it left out and why."""
    deep = '{"trace": {"ms_per_iter": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    fault_gate(tmp_path / "g", gate={"n": 4},
               on={"result_text": {"on-r1": deep}, "result_kind": {"on-r2": "devzero", "on-r3": "fifo"}})
    (tmp_path / "campaign.toml").write_text('[campaign]\nid = "hostile"\nout = "findings"\nruns = "runs"\n'
                                            '[[gates]]\ngate = "g/gate.toml"\noff = "off"\non = "on"\n'
                                            'resources = { gpus = 0 }\n')
    done = gate_cli("campaign", "campaign.toml", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "01-fixture-off-on: adopted" in done.stdout
    site = Path(next(line for line in done.stdout.splitlines() if line.startswith("site: ")).split(": ", 1)[1])
    (finding,) = (tmp_path / "findings").glob("*.json")
    assert site.is_file()
    report = gate_cli("report", str(finding), "--html", str(tmp_path / "html"), "--md", str(tmp_path / "r.md"),
                      cwd=tmp_path, timeout=300)
    assert report.returncode == 0, report.stderr
    again = gate_cli("site", str(tmp_path / "findings"), "-o", str(tmp_path / "site"), cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    for page in (site.parent / finding.stem / "index.html", tmp_path / "html" / finding.stem / "index.html",
                 tmp_path / "site" / finding.stem / "index.html"):
        text = page.read_text()
        assert "on-r1/result: nests deeper than 64 levels; its ms_per_iter trace is left out" in text, page
        assert "on-r2/result: is a symbolic link to /dev/zero, outside its run folder" in text
        assert "on-r3/result: is not a regular file (a FIFO); its ms_per_iter trace is left out" in text

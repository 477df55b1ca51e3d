"""Tamper evidence (issue 11, point 1): the journal's hash chain, record.json cross-checks, the finding's
chain head, `gate verify` / `gate analyze` exiting 3 at the first disagreement, and Ed25519 signing.

Series run in-process with tests/fakes.py's FakeDriver; the CLI runs through `gate_invoke`; the signing
round trip runs the fixture trainer (real processes) through `gate run --sign-key`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from gatekit.config import load_gate
from gatekit.distribution import install_hint
from gatekit.errors import ConfigError, SeriesError, VerificationError
from gatekit.exports import summary_markdown
from gatekit.finding import load_finding
from gatekit.records import JOURNAL_SCHEMA, PREDECISION_SCHEMA
from gatekit.series.runner import SeriesRunner
from gatekit.verify import analyze_series
from gatekit.storage import EMPTY_SHA256, LEGACY_JOURNAL_WARNING, Journal, line_sha256
from gatekit.verify import load_signing_key, verify_series
from tests.conftest import gate_invoke, write_toml
from tests.fakes import FakeDriver, LoadScript, fake_gate

V1_SERIES = Path(__file__).parent / "fixtures" / "v1-series" / "series"
GATE: dict[str, Any] = fake_gate("integrity", "tamper evidence", ["optimizer"])
# on is 2 % slower than off: a regression, which a forged on arm could turn into an adoption
OFF = {"off-r1": 10.0, "off-r2": 10.02, "off-r3": 9.98}
ON = {"on-r1": 10.2, "on-r2": 10.21, "on-r3": 10.19}


def _series(root: Path) -> tuple[Path, Path]:
    """A finished series run in-process by the fake driver; returns (series dir, finding .json)."""
    root.mkdir(parents=True, exist_ok=True)
    write_toml(root / "gate.toml", GATE)
    for arm, times, flag in (("off", OFF, "host"), ("on", ON, "resident")):
        write_toml(root / f"{arm}.toml", {"config": {"optimizer": flag},
                                          "runs": {k: {"train_elapsed_s": v, "psnr_db": 30.0}
                                                   for k, v in times.items()}})
    config = load_gate(root / "gate.toml")
    result = SeriesRunner(config, config.arms["off"], config.arms["on"], driver=FakeDriver(),
                          load_reader_for=LoadScript()).start()
    assert result.finding.decision == "regression"
    return result.series_dir, next(p for p in result.finding_paths if p.suffix == ".json")


def _lines(series: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (series / "journal.jsonl").read_text().splitlines()]


def _line_of(series: Path, kind: str, label: str) -> int:
    """1-based line number of the event `kind` of run `label`."""
    for number, event in enumerate(_lines(series), 1):
        if event["event"] == kind and (event.get("label") or event.get("record", {}).get("label")) == label:
            return number
    raise AssertionError(f"no {kind} of {label}")


def test_every_journal_line_carries_the_sha256_of_the_line_before_it(tmp_path: Path) -> None:
    series, finding_path = _series(tmp_path)
    raw = (series / "journal.jsonl").read_bytes().split(b"\n")[:-1]
    events = [json.loads(line) for line in raw]
    # the first event is anchored on the predecision file as written before it
    assert events[0]["event"] == "series_start"
    assert events[0]["prev"] == hashlib.sha256((series / "predecision.toml").read_bytes()).hexdigest()
    assert events[0]["prev"] == events[0]["predecision_sha256"]
    for before, event in zip(raw, events[1:]):
        assert event["prev"] == hashlib.sha256(before).hexdigest()
    # the finding records the chain head: the sha256 of the last line
    head = hashlib.sha256(raw[-1]).hexdigest()
    assert load_finding(finding_path).predecision.chain_head == head
    assert analyze_series(series).predecision.chain_head == head


def test_an_untouched_series_verifies(tmp_path: Path) -> None:
    series, finding_path = _series(tmp_path)
    report = verify_series(series, finding_path)
    assert report.events == len(_lines(series)) and report.records == 6 and not report.warnings
    done = gate_invoke("verify", str(series), str(finding_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"verified: {report.events} events, chain head {report.chain_head}")
    done = gate_invoke("analyze", str(series), cwd=tmp_path)
    assert done.returncode == 0 and "VERDICT: REGRESSION" in done.stdout, done.stderr


def test_edited_journal_metrics_fail_analyze_naming_the_line(tmp_path: Path) -> None:
    """Issue 11's reproduction: every on run's train_elapsed_s edited in journal.jsonl (a faster on arm)."""
    series, _ = _series(tmp_path)
    path = series / "journal.jsonl"
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line)
        if event["event"] == "run_end" and event["record"]["arm"] == "on":
            event["record"]["outcome"]["metrics"]["train_elapsed_s"] -= 1.0
            lines[i] = json.dumps(event, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")
    edited = _line_of(series, "run_end", "on-r1")
    done = gate_invoke("analyze", str(series), cwd=tmp_path)
    assert done.returncode == 3, done.stdout
    assert (f"journal.jsonl: line {edited + 1} (run_start): prev does not match line {edited}"
            in done.stderr), done.stderr
    assert "VERDICT" not in done.stdout


def test_the_last_line_edited_is_caught_by_the_record_or_the_finding(tmp_path: Path) -> None:
    """The chain cannot see an edit of its last line; the record.json cross-check and the finding's chain
    head can."""
    series, finding_path = _series(tmp_path)
    path = series / "journal.jsonl"
    lines = path.read_text().splitlines()
    end = json.loads(lines[-1])
    end["finished"] = "2000-01-01T00:00:00+00:00"
    lines[-1] = json.dumps(end, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")
    verify_series(series)  # the chain alone is still consistent
    with pytest.raises(VerificationError, match=r"predecision\.chain_head .* != the journal's chain head"):
        verify_series(series, finding_path)


@pytest.mark.parametrize("every", [False, True], ids=["sed-first", "sed-global"])
def test_edited_floor_pct_with_its_sha256_replaced_breaks_the_chain(tmp_path: Path, every: bool) -> None:
    """Issue 11's reproduction: floor_pct edited in predecision.toml and its sha256 replaced in the journal
    (as `sed s/old/new/` and `sed s/old/new/g` would)."""
    series, _ = _series(tmp_path)
    predecision = series / "predecision.toml"
    old = hashlib.sha256(predecision.read_bytes()).hexdigest()
    text = predecision.read_text()
    assert "floor_pct = 1.0" in text
    predecision.write_text(text.replace("floor_pct = 1.0", "floor_pct = 5.0"))
    new = hashlib.sha256(predecision.read_bytes()).hexdigest()
    journal = series / "journal.jsonl"
    journal.write_text("\n".join(line.replace(old, new) if every else line.replace(old, new, 1)
                                 for line in journal.read_text().split("\n")))
    done = gate_invoke("analyze", str(series), cwd=tmp_path)
    assert done.returncode == 3, done.stdout
    expected = ("line 2 (run_start): prev does not match line 1" if every
                else "line 1 (series_start): prev does not match")
    assert expected in done.stderr, done.stderr


def test_an_edited_predecision_alone_fails_verification(tmp_path: Path) -> None:
    series, _ = _series(tmp_path)
    predecision = series / "predecision.toml"
    predecision.write_text(predecision.read_text().replace("floor_pct = 1.0", "floor_pct = 5.0"))
    done = gate_invoke("verify", str(series), cwd=tmp_path)
    assert done.returncode == 3
    assert "line 1 (series_start): prev does not match" in done.stderr and "predecision.toml" in done.stderr


def test_an_edited_record_json_fails_naming_it(tmp_path: Path) -> None:
    series, _ = _series(tmp_path)
    path = series / "on-r2" / "record.json"
    record = json.loads(path.read_text())
    record["outcome"]["metrics"]["train_elapsed_s"] = 9.5
    path.write_text(json.dumps(record, indent=2))
    number = _line_of(series, "run_end", "on-r2")
    done = gate_invoke("analyze", str(series), cwd=tmp_path)
    assert done.returncode == 3, done.stdout
    assert (f"on-r2/record.json: differs from journal.jsonl line {number}: "
            "outcome.metrics.train_elapsed_s 9.5 != 10.21") in done.stderr, done.stderr
    path.unlink()
    with pytest.raises(VerificationError, match=rf"on-r2/record.json: missing; journal line {number}"):
        verify_series(series)


def test_edited_run_files_fail_verify_naming_the_file_and_the_line(tmp_path: Path) -> None:
    """samples.csv (the report draws load timelines from it), the logs and the result file are hashed into the
    run's run_end event: one forged or planted afterwards fails `gate verify` (exit 3) naming it and the line."""
    series, _ = _series(tmp_path)
    number = _line_of(series, "run_end", "on-r2")
    assert gate_invoke("verify", str(series), cwd=tmp_path).returncode == 0
    samples = series / "on-r2" / "samples.csv"
    original = samples.read_text()
    samples.write_text(original + original.splitlines()[-1] + "\n")  # a forged extra row
    done = gate_invoke("verify", str(series), cwd=tmp_path)
    assert done.returncode == 3, done.stdout
    assert f"on-r2/samples.csv: differs from what journal.jsonl line {number} recorded" in done.stderr, done.stderr
    samples.write_text(original)
    assert gate_invoke("verify", str(series), cwd=tmp_path).returncode == 0
    planted = series / "off-r1" / "stderr.log"
    planted.write_text("forged log\n")
    done = gate_invoke("verify", str(series), cwd=tmp_path)
    assert done.returncode == 3 and "off-r1/stderr.log: differs from what journal.jsonl line" in done.stderr, \
        done.stderr


def test_a_line_without_prev_in_a_chained_journal_fails(tmp_path: Path) -> None:
    series, _ = _series(tmp_path)
    path = series / "journal.jsonl"
    lines = path.read_text().splitlines()
    event = json.loads(lines[3])
    del event["prev"]
    lines[3] = json.dumps(event, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(VerificationError, match=r"line 4 \(\w+\): has no prev"):
        verify_series(series)


def test_a_series_names_its_formats_and_its_first_line_cannot_shed_the_chain(tmp_path: Path) -> None:
    series, _ = _series(tmp_path)
    path = series / "journal.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert events[0]["schema"] == JOURNAL_SCHEMA and not any("schema" in e for e in events[1:])
    assert f'schema = "{PREDECISION_SCHEMA}"' in (series / "predecision.toml").read_text()
    # every prev removed: an unchained journal, but one that claims the chained format
    path.write_text("".join(json.dumps({k: v for k, v in e.items() if k != "prev"}, sort_keys=True) + "\n"
                            for e in events))
    with pytest.raises(VerificationError, match=rf"line 1 \(series_start\): has no prev, but the journal names "
                                                rf"{JOURNAL_SCHEMA}, which is hash-chained"):
        verify_series(series)


def test_a_journal_of_a_newer_format_is_refused(tmp_path: Path) -> None:
    series, _ = _series(tmp_path)
    path = series / "journal.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first["schema"] = "gatekit.journal/99"
    path.write_text("\n".join([json.dumps(first, sort_keys=True), *lines[1:]]) + "\n")
    with pytest.raises(VerificationError, match=r"'gatekit.journal/99' is not '.+' \(written by a newer gatekit"):
        verify_series(series)
    with pytest.raises(SeriesError, match="line 1: schema: 'gatekit.journal/99'"):
        list(Journal(path).events())


def test_a_finding_that_differs_from_its_recomputation_fails_verify(tmp_path: Path) -> None:
    series, finding_path = _series(tmp_path)
    document = json.loads(finding_path.read_text())
    document["verdict"]["decision"] = "adopted"
    finding_path.write_text(json.dumps(document, indent=2))
    finding_path.with_suffix(".toml").unlink()  # (else its twin already differs)
    done = gate_invoke("verify", str(series), str(finding_path), cwd=tmp_path)
    assert done.returncode == 3
    assert 'differs from the finding recomputed' in done.stderr and 'verdict.decision "adopted" != "regression"' \
        in done.stderr, done.stderr


@pytest.mark.parametrize("relative_change, verifies", [(4e-15, True), (1e-6, False)])
def test_verify_takes_another_machines_last_bits_and_refuses_an_edit_of_a_part_in_a_million(
        tmp_path: Path, relative_change: float, verifies: bool) -> None:
    # another numpy sums in another order: the recomputed float differs in its last bits (the committed H200
    # clock finding's gm Δ 0.27697991918825005 against 0.27697991918825077 here); an edit of 1e-6 is an edit
    series, finding_path = _series(tmp_path)
    document = json.loads(finding_path.read_text())
    written = document["stats"]["gm_delta_pct"]
    document["stats"]["gm_delta_pct"] = written * (1 + relative_change)
    assert document["stats"]["gm_delta_pct"] != written
    finding_path.write_text(json.dumps(document, indent=2))
    finding_path.with_suffix(".toml").unlink()  # (else its twin already differs)
    done = gate_invoke("verify", str(series), str(finding_path), cwd=tmp_path)
    if verifies:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 3 and "stats.gm_delta_pct" in done.stderr, done.stderr


def test_recomputed_floats_agree_within_the_stated_tolerance_and_nothing_else_does() -> None:
    from gatekit.records import RECOMPUTED_ABS_TOL, RECOMPUTED_REL_TOL, first_difference
    assert first_difference({"x": 0.27697991918825005}, {"x": 0.27697991918825077}, recomputed=True) is None
    assert first_difference({"x": 0.27697991918825005}, {"x": 0.27697991918825077}) is not None  # exact elsewhere
    assert first_difference({"x": 100.0}, {"x": 100.0 * (1 + 2 * RECOMPUTED_REL_TOL)}, recomputed=True) == \
        f"x 100.0 != {json.dumps(100.0 * (1 + 2 * RECOMPUTED_REL_TOL))}"
    assert first_difference([0.0], [RECOMPUTED_ABS_TOL / 2], recomputed=True) is None  # near zero: absolute
    assert first_difference([0.0], [RECOMPUTED_ABS_TOL * 2], recomputed=True) is not None
    # decisions, counts, strings and booleans stay exact
    assert first_difference({"n": 3}, {"n": 4}, recomputed=True) == "n 3 != 4"
    assert first_difference({"d": "adopted"}, {"d": "rejected"}, recomputed=True) is not None
    assert first_difference({"p": True}, {"p": 1}, recomputed=True) is not None


def test_a_difference_of_unicode_normal_forms_is_shown_escaped_and_named() -> None:
    # "é" as one code point (NFC) and as e + a combining accent (NFD) print alike: the message shows both escaped
    from gatekit.records import first_difference
    assert first_difference({"meta": {"title": "caf\u00e9"}}, {"meta": {"title": "cafe\u0301"}}) == (
        'meta.title "caf\\u00e9" != "cafe\\u0301" (the same text in another Unicode normal form: NFC and NFD '
        "spell one letter with other code points)")
    assert first_difference({"t": "caf\u00e9"}, {"t": "cafe"}) == 't "caf\u00e9" != "cafe"'  # unlike texts: as they are


def test_a_legacy_journal_still_analyzes_with_a_warning(tmp_path: Path) -> None:
    series = tmp_path / "series"
    shutil.copytree(V1_SERIES, series)
    report = verify_series(series)
    assert report.legacy and report.warnings == (LEGACY_JOURNAL_WARNING,)
    verify_series(series, V1_SERIES.parent / "finding.json")  # the /1 finding it wrote still matches
    finding = analyze_series(series)
    assert finding.predecision.chain_head is None and LEGACY_JOURNAL_WARNING in finding.verdict.warnings
    done = gate_invoke("verify", str(series), cwd=tmp_path)
    assert done.returncode == 0 and "chain head none" in done.stdout
    assert f"warning: {LEGACY_JOURNAL_WARNING}" in done.stderr
    # the record cross-check still applies to a legacy series
    record = series / "on-r3" / "record.json"
    record.write_text(record.read_text().replace('"exit_code": 0', '"exit_code": 7', 1))
    assert gate_invoke("analyze", str(series), cwd=tmp_path).returncode == 3


def test_the_journal_chain_continues_across_instances_and_torn_tails(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    first = Journal(path)
    first.append("calibration_start", arm="off")
    assert json.loads(path.read_text())["prev"] == EMPTY_SHA256  # no predecision: the empty anchor
    first.append("run_start", label="off-r1")
    with path.open("ab") as handle:
        handle.write(b'{"event": "run_end", "lab')  # a write killed mid-way
    later = Journal(path)  # a resumed gate
    later.append("interrupted", label="off-r1")
    raw = path.read_bytes().split(b"\n")[:-1]
    assert len(raw) == 3
    for before, line in zip(raw, raw[1:]):
        assert json.loads(line)["prev"] == line_sha256(before)
    assert later.head == line_sha256(raw[-1]) == Journal(path).head


def test_a_legacy_journal_is_continued_without_a_chain(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text(json.dumps({"event": "series_start"}) + "\n")
    journal = Journal(path)
    assert journal.append("run_start", label="off-r1") == {"event": "run_start", "label": "off-r1"}
    assert journal.legacy and journal.head is None


def test_the_step_summary_prints_the_chain_head(tmp_path: Path) -> None:
    _, finding_path = _series(tmp_path)
    finding = load_finding(finding_path)
    assert finding.predecision.chain_head and finding.predecision.chain_head in summary_markdown([finding])


def _keys(folder: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private, public = folder / "sign.pem", folder / "sign.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    private.chmod(0o600)  # a private key others can read is refused
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def test_signing_round_trip_and_a_tampered_signature_fails(fake_gate_dir, tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    g = fake_gate_dir(off={"elapsed": OFF, "default_psnr": 30.0}, on={"elapsed": ON, "default_psnr": 30.0})
    private, public = _keys(tmp_path)
    (tmp_path / "not-a-key.pem").write_text("hello\n")
    done = gate_invoke("run", "off", "on", "--sign-key", str(tmp_path / "not-a-key.pem"), cwd=g.root)
    assert done.returncode == 2 and "not-a-key.pem" in done.stderr and not g.series_dirs()  # nothing ran
    done = gate_invoke("run", "off", "on", "--sign-key", str(private), cwd=g.root)
    assert done.returncode == 0, done.stderr
    (series,) = g.series_dirs()
    (finding_path,) = g.findings()
    signature = finding_path.with_suffix(".sig")
    document = json.loads(signature.read_text())
    assert document["algorithm"] == "ed25519" and document["chain_head"] == json.loads(
        finding_path.read_text())["predecision"]["chain_head"]
    done = gate_invoke("verify", str(series), str(finding_path), "--pubkey", str(public), cwd=g.root)
    assert done.returncode == 0 and "signature" in done.stdout, done.stderr
    # another key's public half does not verify it
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    _, other = _keys(other_dir)
    done = gate_invoke("verify", str(series), str(finding_path), "--pubkey", str(other), cwd=g.root)
    assert done.returncode == 3 and "signed by public key" in done.stderr
    # a tampered signature fails
    forged = bytearray(bytes.fromhex(document["signature"]))
    forged[0] ^= 1
    signature.write_text(json.dumps({**document, "signature": forged.hex()}))
    done = gate_invoke("verify", str(series), str(finding_path), "--pubkey", str(public), cwd=g.root)
    assert done.returncode == 3 and "the signature does not match" in done.stderr, done.stderr
    # the signature covers the content, not the layout: whitespace added to both twins still verifies
    signature.write_text(json.dumps(document))
    toml_path = finding_path.with_suffix(".toml")
    for path in (finding_path, toml_path):
        path.write_text(path.read_text() + "\n")
    done = gate_invoke("verify", str(series), str(finding_path), "--pubkey", str(public), cwd=g.root)
    assert done.returncode == 0, done.stderr
    # but content changed after signing fails: here the narrative, which the recomputation does not compare,
    # edited the same in both twins
    edited = json.loads(finding_path.read_text())
    edited["sections"][0]["text"] = "a forged lead"
    finding_path.write_text(json.dumps(edited, indent=2))
    toml_path.write_text(tomlkit.dumps(edited))
    done = gate_invoke("verify", str(series), str(finding_path), "--pubkey", str(public), cwd=g.root)
    assert done.returncode == 3 and "the signature does not match" in done.stderr, done.stderr


def test_a_key_is_a_private_regular_file_read_within_a_bound(fake_gate_dir, tmp_path: Path) -> None:
    """`--sign-key` or `--pubkey` naming a FIFO hung; /dev/zero was read until MemoryError (2.7 GB); a private
    key anyone could read was used without a word. Each is one exit-2 line naming the file, before any run."""
    pytest.importorskip("cryptography")
    import os

    from gatekit.verify import MAX_KEY_BYTES

    g = fake_gate_dir(off={"elapsed": OFF, "default_psnr": 30.0}, on={"elapsed": ON, "default_psnr": 30.0})
    private, public = _keys(tmp_path)
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    large = tmp_path / "large.pem"
    large.write_bytes(b"-" * (MAX_KEY_BYTES + 1))
    large.chmod(0o600)
    refusals = {fifo: "is a FIFO, expected a {} key (PEM)", Path("/dev/zero"): "is a character device, expected "
                "a {} key (PEM)", large: "is larger than 16 KiB, expected a {} key (PEM)"}
    for path, problem in refusals.items():
        done = gate_invoke("run", "off", "on", "--sign-key", str(path), cwd=g.root)
        assert done.returncode == 2, done.stdout
        assert done.stderr.strip().endswith(f"{path}: {problem.format('signing')}"), done.stderr
    for mode in (0o644, 0o640, 0o604):
        private.chmod(mode)
        done = gate_invoke("run", "off", "on", "--sign-key", str(private), cwd=g.root)
        assert done.returncode == 2, done.stdout
        (line,) = [line for line in done.stderr.splitlines() if str(private) in line]
        assert f"mode {mode:04o}" in line and line.endswith(f"make it private: chmod 600 {private}"), line
    assert not g.series_dirs()  # nothing ran
    private.chmod(0o400)  # owner-only, read-only: used
    assert gate_invoke("run", "off", "on", "--sign-key", str(private), cwd=g.root).returncode == 0
    (series,) = g.series_dirs()
    (finding,) = g.findings()
    public.chmod(0o644)  # a public key may be read by anyone
    assert gate_invoke("verify", str(series), str(finding), "--pubkey", str(public), cwd=g.root).returncode == 0
    for path, problem in refusals.items():
        done = gate_invoke("verify", str(series), str(finding), "--pubkey", str(path), cwd=g.root)
        assert done.returncode == 2, done.stdout
        assert done.stderr.strip().endswith(f"{path}: {problem.format('public')}"), done.stderr


def test_a_signature_that_cannot_be_written_is_exit_4_and_resume_signs_the_finding(fake_gate_dir,
                                                                                    tmp_path: Path) -> None:
    """The finding is written, its `.sig` cannot be (a folder in its way): exit 4 naming the file and how to
    sign it; `gate run --resume SERIES --sign-key KEY` of the finished series then signs it, once."""
    pytest.importorskip("cryptography")
    g = fake_gate_dir(off={"elapsed": OFF, "default_psnr": 30.0}, on={"elapsed": ON, "default_psnr": 30.0})
    private, public = _keys(tmp_path)
    gate = load_gate(g.gate).gate
    today = dt.date.today()
    blocked = [gate.out / f"{gate.id}-{day:%Y-%m-%d}.sig" for day in (today, today + dt.timedelta(days=1))]
    for path in blocked:  # the next day's too: the series may start after midnight
        path.mkdir(parents=True)
    done = gate_invoke("run", "off", "on", "--sign-key", str(private), cwd=g.root)
    assert done.returncode == 4, done.stderr
    (series,) = g.series_dirs()
    (finding_path,) = g.findings()
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("gate: error: ")]
    assert str(finding_path.with_suffix(".sig")) in line and "cannot write the signature" in line
    assert f"gate run --resume {series} --sign-key {private}" in line
    for path in blocked:
        path.rmdir()
    written = finding_path.read_bytes()
    done = gate_invoke("run", "--resume", str(series), "--sign-key", str(private), cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert str(finding_path.with_suffix(".sig")) in done.stdout and finding_path.read_bytes() == written
    done = gate_invoke("verify", str(series), str(finding_path), "--pubkey", str(public), cwd=g.root)
    assert done.returncode == 0 and "signature" in done.stdout, done.stderr
    again = gate_invoke("run", "--resume", str(series), "--sign-key", str(private), cwd=g.root)
    assert again.returncode == 2 and "its finding signed" in again.stderr
    unsigned = gate_invoke("run", "--resume", str(series), cwd=g.root)
    assert unsigned.returncode == 2 and "this series is finished" in unsigned.stderr


def test_signing_without_cryptography_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "cryptography" or m.startswith("cryptography.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "cryptography", None)  # an import of it now fails
    with pytest.raises(ConfigError, match=re.escape(install_hint("sign"))):
        load_signing_key(tmp_path / "sign.pem")

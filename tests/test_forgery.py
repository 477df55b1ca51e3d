"""A forger with write access to the series folder (issue 19): an edited journal resumed, an edited
campaign journal, a guard stated twice, a finding edited beside its journal, a copied series resumed over
the original's finding, and legacy journals. Each test is the issue's reproduction, with real files (and
real processes where the process is the subject: the SIGTERM'd series and its resume)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import gate_cli, gate_invoke
from tests.faults.faultkit import OFF_TIMES, fault_gate, interrupted_series


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
    series = interrupted_series(g, "on-r3")
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


# -- 14. downgrade and false alarm on legacy journals ---------------------------------------------------

def _cut_series(gate_dir, on_elapsed: float) -> tuple[Any, Path]:
    """A finished series (real trainer processes) cut back to how it looked when killed after 2 runs."""
    from gatekit.config import load_gate
    from gatekit.series.runner import SeriesRunner
    from gatekit.storage import SeriesLayout

    g = gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": on_elapsed})
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    layout = SeriesLayout(result.series_dir)
    layout.done.unlink()
    for path in result.finding_paths:
        path.unlink()
    kept, run_ends = [], 0
    for line in layout.journal.read_text().splitlines(keepends=True):
        run_ends += json.loads(line)["event"] == "run_end"
        if run_ends > 2:
            break
        kept.append(line)
    layout.journal.write_text("".join(kept))
    return g, result.series_dir


def _unchain(series: Path, predecision_schema: str | None = None) -> None:
    """Every `prev` and the journal's `schema` stripped: what a journal written before hash chains holds.
    Given a predecision format, the predecision is rewritten in it (and its sha256 journaled anew)."""
    import hashlib

    predecision = series / "predecision.toml"
    if predecision_schema is not None:
        predecision.write_text(re.sub(r'(?m)^schema = ".*"$', f'schema = "{predecision_schema}"',
                                      predecision.read_text(), count=1))
    sha = hashlib.sha256(predecision.read_bytes()).hexdigest()

    def strip(event: dict[str, Any]) -> dict[str, Any]:
        event = {k: v for k, v in event.items() if k not in ("prev", "schema")}
        if event["event"] == "series_start":
            event["predecision_sha256"] = sha
        return event
    _rewrite_journal(series, strip)


def _faster_on_runs(series: Path, factor: float) -> None:
    def edit(event: dict[str, Any]) -> None:
        if event["event"] == "run_end" and event["record"]["arm"] == "on":
            event["record"]["outcome"]["metrics"]["train_elapsed_s"] *= factor
            (series / event["record"]["label"] / "record.json").write_text(json.dumps(event["record"], indent=2))
    _rewrite_journal(series, edit)


def test_a_journal_stripped_of_its_chain_is_refused_by_the_predecision_it_was_written_with(gate_dir) -> None:
    """Every prev (and the format's name) stripped, plus an on arm forged faster: the predecision says a
    chained gatekit wrote it (gatekit.predecision/2 comes only with gatekit.journal/3), so gate verify and
    the resume exit 3 naming the journal's first line, and nothing is written."""
    from gatekit.records import JOURNAL_SCHEMA, PREDECISION_SCHEMA

    g, series = _cut_series(gate_dir, on_elapsed=10.5)  # an honest regression
    _unchain(series)
    _faster_on_runs(series, 0.8)
    expected = (f"{series / 'journal.jsonl'}: line 1 (series_start): the predecision names {PREDECISION_SCHEMA}, "
                f"whose journal is {JOURNAL_SCHEMA} (hash-chained, naming its format)")
    done = gate_invoke("verify", str(series), cwd=g.root)
    assert done.returncode == 3 and expected in done.stderr, done.stderr
    done = gate_cli("run", "--resume", str(series), cwd=g.root)
    assert done.returncode == 3 and expected in done.stderr, done.stdout + done.stderr
    assert not g.findings() and "VERDICT" not in done.stdout


def test_an_honest_legacy_series_resumed_writes_a_finding_that_verifies(gate_dir) -> None:
    """A series of the chainless era (gatekit.predecision/1, gatekit.journal/1) resumed by today's gatekit:
    continued without a chain, and its finding verifies (with the legacy warning)."""
    from gatekit.storage import LEGACY_JOURNAL_WARNING
    from gatekit.verify import verify_series

    g, series = _cut_series(gate_dir, on_elapsed=9.0)
    _unchain(series, "gatekit.predecision/1")
    done = gate_cli("run", "--resume", str(series), cwd=g.root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert all("prev" not in json.loads(line) for line in (series / "journal.jsonl").read_text().splitlines())
    (finding,) = g.findings()
    assert LEGACY_JOURNAL_WARNING in g.finding()["verdict"]["warnings"]
    report = verify_series(series, finding)
    assert report.legacy and report.warnings == (LEGACY_JOURNAL_WARNING,)
    done = gate_invoke("verify", str(series), str(finding), cwd=g.root)
    assert done.returncode == 0, done.stderr


def test_verify_compares_the_reasons_codes_then_their_prose_and_reads_a_finding_without_codes(
        tmp_path: Path) -> None:
    """The verdict stores a stable code beside each reason's prose; verify compared normalised prose only. An
    edited code fails naming verdict.reason_codes; prose edited under an intact code fails naming the reason,
    its code and what that code renders to from the series; a finding written before codes (none stored)
    still verifies, by its prose, and verify says in one line that it compared prose."""
    from gatekit.verdict import ReasonCode
    from tests.test_integrity import _series

    series, finding = _series(tmp_path)
    honest = json.loads(finding.read_text())
    verdict = honest["verdict"]
    assert verdict["reason_codes"] == [ReasonCode.BEYOND_THRESHOLD_WORSE, ReasonCode.GUARD_HELD]
    assert len(verdict["reason_codes"]) == len(verdict["reasons"])
    finding.with_suffix(".toml").unlink()  # (else the twin already differs)

    def verify_with(edit: Any) -> Any:
        document = json.loads(json.dumps(honest))
        edit(document["verdict"])
        finding.write_text(json.dumps(document, indent=2))
        return gate_invoke("verify", str(series), str(finding), cwd=tmp_path)

    done = verify_with(lambda v: v["reason_codes"].__setitem__(0, ReasonCode.CLEARS_THRESHOLD.value))
    assert done.returncode == 3 and 'verdict.reason_codes[0] "clears_threshold" != "beyond_threshold_worse"' \
        in done.stderr, done.stderr
    forged = verdict["reasons"][0].replace("in the wrong direction", "in the right direction")
    done = verify_with(lambda v: v["reasons"].__setitem__(0, forged))
    assert done.returncode == 3, done.stdout
    assert (f"verdict.reasons[0] (beyond_threshold_worse) {json.dumps(forged, ensure_ascii=False)[:120]} is not "
            "what beyond_threshold_worse renders to from the series") in done.stderr, done.stderr
    done = verify_with(lambda v: v["reason_codes"].pop())
    assert done.returncode == 3 and "verdict.reason_codes" in done.stderr, done.stderr
    done = verify_with(lambda v: None)
    assert done.returncode == 0 and "note:" not in done.stderr, done.stderr
    done = verify_with(lambda v: v.pop("reason_codes"))  # as a gatekit before reason codes wrote it
    assert done.returncode == 0, done.stderr
    # it says so, in one line: such a finding's reasons were compared by their prose, with no code to check
    assert done.stderr.splitlines() == [f"note: {finding}: written before reason codes: its verdict reasons "
                                        "were compared by their prose"], done.stderr
    done = verify_with(lambda v: (v.pop("reason_codes"), v["reasons"].__setitem__(0, forged)))
    assert done.returncode == 3 and "verdict.reasons[0]" in done.stderr, done.stderr


def test_a_report_of_a_forged_toml_twin_refuses_it_naming_both_files(gate_dir) -> None:
    """`gate report X.toml` rendered a TOML twin whose title and rules were edited as if it were the finding;
    named either way, the report (and a CI export) now refuses the pair in one line, exit 2, writing nothing."""
    import tomlkit

    from tests.test_integrity import OFF, ON

    g = gate_dir(off={"elapsed": OFF, "default_psnr": 30.0}, on={"elapsed": ON, "default_psnr": 30.0})
    assert gate_invoke("run", "off", "on", cwd=g.root).returncode == 0
    (json_path,) = g.findings()
    toml_path = json_path.with_suffix(".toml")
    assert gate_invoke("report", str(toml_path), "--md", "honest.md", cwd=g.root).returncode == 0
    document = tomlkit.parse(toml_path.read_text())
    document["meta"]["title"] = "a forged title"
    document["rules"]["sigma_k"] = 99.0
    toml_path.write_text(tomlkit.dumps(document))
    for named, twin in ((toml_path, json_path), (json_path, toml_path)):
        for output in (["--md", "forged.md"], ["--summary-md", "summary.md"]):
            done = gate_invoke("report", str(named), *output, cwd=g.root)
            assert done.returncode == 2, (named, output, done.stdout)
            (line,) = done.stderr.strip().splitlines()
            assert line.startswith(f"gate: error: {named}: differs from its twin {twin.name}: meta.title"), line
            assert not (g.root / output[1]).exists()
    assert "a forged title" not in (g.root / "honest.md").read_text()


def _finding_pairs(folder: Path, days: int) -> list[tuple[Path, Path]]:
    """Findings of one gate, a night each, as `gate run` writes them: a TOML and a JSON twin each."""
    from gatekit.finding import write_finding
    from tests.findings_kit import finding_of, variant

    folder.mkdir(parents=True)
    return [write_finding(finding_of(variant(f"nightly-2026-11-{day:02d}", f"2026-11-{day:02d}",
                                             mean_on=10.0 + day)), folder) for day in range(1, days + 1)]


@pytest.mark.parametrize("edited", ["toml", "json"])
def test_history_and_site_refuse_one_forged_twin_among_honest_findings(tmp_path: Path, edited: str) -> None:
    """`gate history` and `gate site` read a folder of findings and took an edited twin silently (the site
    even kept the page of a JSON whose TOML twin was edited after it was built); one forged pair among honest
    ones now refuses the whole command as `gate report` does: exit 2, one line naming both files and the
    differing key, nothing printed or written."""
    import tomlkit

    folder, site = tmp_path / "findings", tmp_path / "site"
    pairs = _finding_pairs(folder, 4)
    history = ("history", str(folder), "--metric", "mean_on", "--json")
    build = ("site", str(folder), "-o", str(site), "--jobs", "2")  # the pairs are checked in worker processes
    done = gate_invoke(*history, cwd=tmp_path)
    assert done.returncode == 0 and [p["value"] for p in json.loads(done.stdout)["points"]] == [11.0, 12.0, 13.0, 14.0]
    assert gate_invoke(*build, cwd=tmp_path).returncode == 0
    built = (site / "index.html").read_bytes()
    toml_path, json_path = pairs[2]
    if edited == "toml":
        document = tomlkit.parse(toml_path.read_text())
        document["stats"]["mean_on"] = 99.0
        toml_path.write_text(tomlkit.dumps(document))
    else:
        document = json.loads(json_path.read_text())
        document["stats"]["mean_on"] = 99.0
        json_path.write_text(json.dumps(document, indent=2))
    for args in (history, build):
        done = gate_invoke(*args, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == "", (args, done.stdout)
        (line,) = done.stderr.strip().splitlines()  # the folder's JSON is the one read, the TOML its twin
        assert line.startswith(f"gate: error: {json_path}: differs from its twin {toml_path.name}: stats.mean_on"), line
    assert (site / "index.html").read_bytes() == built  # the old site stays whole


# -- 7. a resumed copy overwrites a finding -------------------------------------------------------------

def test_a_resumed_copy_of_a_series_cannot_rewrite_the_original_finding(tmp_path: Path) -> None:
    """`cp -r` of an interrupted series; the original resumed (it verifies), then the copy resumed: the
    copy shares the series id, but not the chain head the finding was written from, so its write is
    refused (exit 4, naming the finding) and the original's finding keeps its bytes and still verifies."""
    import shutil

    g = fault_gate(tmp_path / "g", on={"hold": ["on-r2"]})
    original = interrupted_series(g, "on-r2")
    copy = original.parent / f"{original.name}-copy"
    shutil.copytree(original, copy)
    done = gate_cli("run", "--resume", str(original), cwd=g.root)
    assert done.returncode == 0, done.stderr
    (finding,) = (g.root / "findings").glob("*.json")
    written = {p: p.read_bytes() for p in (finding, finding.with_suffix(".toml"))}
    assert gate_invoke("verify", str(original), str(finding), cwd=g.root).returncode == 0
    done = gate_cli("run", "--resume", str(copy), cwd=g.root)
    assert done.returncode == 4, done.stdout + done.stderr
    assert f"{finding}: finding id '{finding.stem}' was written from another journal" in done.stderr, done.stderr
    assert {p: p.read_bytes() for p in written} == written
    done = gate_invoke("verify", str(original), str(finding), cwd=g.root)
    assert done.returncode == 0, done.stderr


# -- 2. the campaign journal never verified -------------------------------------------------------------

def _campaign(tmp_path: Path) -> tuple[Path, Path]:
    """A campaign of an honest regression (alpha) and an adoption (beta); (campaign file, its folder)."""
    from tests.test_campaign import FAST, campaign_folder, make_campaign

    path = make_campaign(tmp_path, [("alpha", {"elapsed": 11.0}), ("beta", {"elapsed": FAST})])
    done = gate_invoke("campaign", str(path), "--fail-on", "regression", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # alpha regressed
    folder = campaign_folder(done.stdout)
    done = gate_invoke("verify", str(folder), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("verified campaign: "), done.stdout + done.stderr
    return path, folder


def _rechain(journal: Path, events: list[dict[str, Any]]) -> None:
    """Write `events` as a journal whose every `prev` is the sha256 of the line before it (as a forger would)."""
    from gatekit.storage import line_sha256

    previous = None
    lines = []
    for event in events:
        event["prev"] = event["prev"] if previous is None else line_sha256(previous)
        previous = json.dumps(event, sort_keys=True).encode()
        lines.append(previous.decode() + "\n")
    journal.write_text("".join(lines))


def test_another_gates_honest_series_cannot_stand_for_a_gate_in_a_campaign(tmp_path: Path) -> None:
    """beta's (adopted) series copied into alpha's runs folder and alpha's gate_end pointed at it and at beta's
    finding, the journal re-chained: every check passed (the series lies in alpha's folder and verifies with its
    finding), so `gate verify` said 2 finished gates and a resume '2 adopted' with no JUnit failure. A gate_end
    is now bound to its gate: its series ran that gate's file and arms, its finding names that gate's id."""
    import shutil

    from gatekit.campaign import CAMPAIGN_JOURNAL

    path, folder = _campaign(tmp_path)
    journal = folder / CAMPAIGN_JOURNAL
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    ends = {e["outcome"]["key"]: (n, e) for n, e in enumerate(events, 1) if e["event"] == "gate_end"}
    number, alpha = ends["01-alpha-off-on"]
    beta = ends["02-beta-off-on"][1]["outcome"]
    copied = folder / "01-alpha-off-on" / Path(beta["series_dir"]).name
    shutil.copytree(folder / beta["series_dir"], copied)
    alpha["outcome"].update(decision="adopted", finding=beta["finding"],
                            series_dir=str(copied.relative_to(folder)))
    _rechain(journal, events)
    for command in (("verify", str(folder)),
                    ("campaign", str(path), "--resume", str(folder), "--fail-on", "regression",
                     "--junit", "junit.xml")):
        done = gate_invoke(*command, cwd=tmp_path)
        assert done.returncode == 3, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"gate: error: {journal}: line {number} (gate_end): gate 01-alpha-off-on: its series "
                               f"{copied} ran {tmp_path / 'beta' / 'gate.toml'} off vs on, not this gate's "
                               f"{tmp_path / 'alpha' / 'gate.toml'} off vs on"), line
    assert not (tmp_path / "junit.xml").exists()


def test_an_edited_campaign_journal_fails_verify_and_resume(tmp_path: Path) -> None:
    """alpha's gate_end edited to adopted, pointing at beta's finding: resume --fail-on regression exited 0
    with '2 adopted'. Now gate verify DIR and the resume exit 3 naming the campaign journal's line."""
    from gatekit.campaign import CAMPAIGN_JOURNAL

    path, folder = _campaign(tmp_path)
    journal = folder / CAMPAIGN_JOURNAL
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    ends = {e["outcome"]["key"]: (n, e) for n, e in enumerate(events, 1) if e["event"] == "gate_end"}
    number, alpha = ends["01-alpha-off-on"]
    alpha["outcome"].update(decision="adopted", finding=ends["02-beta-off-on"][1]["outcome"]["finding"])
    journal.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events))
    where = (f"{journal}: line {number + 1}" if number < len(events) else f"{journal}: line {number}")
    for command in (("verify", str(folder)),
                    ("campaign", str(path), "--resume", str(folder), "--fail-on", "regression",
                     "--junit", "junit.xml")):
        done = gate_invoke(*command, cwd=tmp_path)
        assert done.returncode == 3, done.stdout + done.stderr
        assert where in done.stderr and "prev does not match" in done.stderr, done.stderr
        assert "adopted" not in done.stdout
    assert not (tmp_path / "junit.xml").exists()
    # re-chained from that line on, the edit is still caught: the gate_end names a finding that is not
    # the one its gate's series recomputes
    _rechain(journal, events)
    done = gate_invoke("verify", str(folder), cwd=tmp_path)
    assert done.returncode == 3 and f"{journal}: line {number} (gate_end)" in done.stderr, done.stderr


def test_an_edited_campaign_file_with_its_sha256_patched_is_not_resumed(tmp_path: Path) -> None:
    import hashlib

    from gatekit.campaign import CAMPAIGN_JOURNAL

    path, folder = _campaign(tmp_path)
    path.write_text(path.read_text().replace('id = "nightly"', 'id = "nightly"\n# edited'))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    journal = folder / CAMPAIGN_JOURNAL
    lines = journal.read_text().splitlines(keepends=True)
    start = json.loads(lines[0])
    start["campaign_sha256"] = sha  # (its prev, the sha256 of the campaign file as started, left alone)
    journal.write_text("".join([json.dumps(start, sort_keys=True) + "\n", *lines[1:]]))
    done = gate_invoke("campaign", str(path), "--resume", str(folder), cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"{journal}: line 2" in done.stderr and "prev does not match line 1" in done.stderr, done.stderr


# -- 6. gate verify checks little of the finding --------------------------------------------------------

@pytest.mark.parametrize("section, key, forged", [
    ("gate", "primary", "psnr_db"),
    ("meta", "title", "a forged title"),
    ("rules", "sigma_k", 99.0),
    ("provenance", "host", {"hostname": "elsewhere"}),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_finding_edited_in_any_typed_field_fails_verify(tmp_path: Path, section: str, key: str,
                                                          forged: Any) -> None:
    """Without a key: a JSON finding with an edited gate.primary (its report then tabulates another metric),
    meta, rules or provenance verified, since only the recomputed figures were compared."""
    from tests.test_integrity import _series

    series, finding = _series(tmp_path)
    document = json.loads(finding.read_text())
    document[section][key] = forged
    finding.write_text(json.dumps(document, indent=2))
    twin = finding.with_suffix(".toml")
    done = gate_invoke("verify", str(series), str(finding), cwd=tmp_path)
    assert done.returncode == 3 and f"differs from its twin {twin.name}: {section}.{key}" in done.stderr
    twin.unlink()  # the forger deletes the twin (or edits it the same): the recomputation still differs
    done = gate_invoke("verify", str(series), str(finding), cwd=tmp_path)
    assert done.returncode == 3, done.stdout
    assert f"differs from the finding recomputed from {series}: {section}.{key}" in done.stderr, done.stderr


def test_a_forged_toml_twin_fails_verify_with_and_without_the_key(gate_dir, tmp_path: Path) -> None:
    """The TOML twin's title, commit, rules and expect_diff edited: it passed `gate verify S X.toml --pubkey`
    (the signature covered the JSON bytes only) and `gate report X.toml` showed the forged values."""
    pytest.importorskip("cryptography")
    import tomlkit

    from tests.test_integrity import OFF, ON

    g = gate_dir(off={"elapsed": OFF, "default_psnr": 30.0}, on={"elapsed": ON, "default_psnr": 30.0})
    private, public = _keys(tmp_path)
    done = gate_invoke("run", "off", "on", "--sign-key", str(private), cwd=g.root)
    assert done.returncode == 0, done.stderr
    (series,) = g.series_dirs()
    (json_path,) = g.findings()
    toml_path = json_path.with_suffix(".toml")
    assert gate_invoke("verify", str(series), str(toml_path), "--pubkey", str(public), cwd=g.root).returncode == 0
    original = toml_path.read_text()
    for edit in (lambda d: d["meta"].__setitem__("title", "forged"),
                 lambda d: d["meta"].__setitem__("commit", "0" * 40),
                 lambda d: d["rules"].__setitem__("sigma_k", 99.0),
                 lambda d: d["gate"].__setitem__("expect_diff", ["everything"])):
        document = tomlkit.parse(original)
        edit(document)
        toml_path.write_text(tomlkit.dumps(document))
        for key in ([], ["--pubkey", str(public)]):
            done = gate_invoke("verify", str(series), str(toml_path), *key, cwd=g.root)
            assert done.returncode == 3, (edit, key, done.stdout)
            assert f"{toml_path}: differs from its twin {json_path.name}" in done.stderr, done.stderr
    # the signature covers the content, so the key alone also refuses a forged twin checked on its own
    toml_path.write_text(original)
    from gatekit.verify import check_signature
    document = tomlkit.parse(original)
    document["meta"]["title"] = "forged"
    json_path.unlink()
    toml_path.write_text(tomlkit.dumps(document))
    from gatekit.errors import VerificationError
    with pytest.raises(VerificationError, match="the signature does not match"):
        check_signature(toml_path, json.loads(json_path.with_suffix(".sig").read_text())["chain_head"], public)


# -- 7. a key stated twice (issue 27) -------------------------------------------------------------------

def _first_key_reader(text: str) -> Any:
    """JSON read as many other parsers read it: the first of a key stated twice wins."""
    return json.loads(text, object_pairs_hook=lambda pairs: {k: v for k, v in reversed(pairs)})


def test_a_signed_finding_with_a_first_duplicate_decision_fails_verify_naming_file_and_key(tmp_path: Path) -> None:
    """A signed regression; `"decision": "adopted"` put first in its JSON verdict. Python keeps the last key, so
    the content, its twin and its signature all matched and `gate verify --pubkey` passed, while a first-key
    reader saw the finding adopted. Any key stated twice is refused by every reader of gatekit's documents."""
    pytest.importorskip("cryptography")
    from gatekit.verify import load_signing_key, sign_finding
    from tests.test_integrity import _series

    series, finding = _series(tmp_path / "g")
    private, public = _keys(tmp_path)
    document = json.loads(finding.read_text())
    sign_finding(finding, document["predecision"]["chain_head"], load_signing_key(private))
    assert gate_invoke("verify", str(series), str(finding), "--pubkey", str(public), cwd=tmp_path).returncode == 0
    text = finding.read_text()
    forged = text.replace('"verdict": {', '"verdict": {"decision": "adopted", ', 1)
    assert forged != text
    finding.write_text(forged)
    assert _first_key_reader(forged)["verdict"]["decision"] == "adopted"
    assert json.loads(forged)["verdict"]["decision"] == "regression"
    for key in ([], ["--pubkey", str(public)]):
        done = gate_invoke("verify", str(series), str(finding), *key, cwd=tmp_path)
        assert done.returncode == 3, done.stdout
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"gate: error: {finding}: ") and "verdict.decision: is stated twice" in line, line
    for command in (("report", str(finding), "--md", str(tmp_path / "r.md")), ("history", str(finding.parent), "--metric", "train_elapsed_s"),
                    ("site", str(finding.parent), "--out", str(tmp_path / "site"))):
        done = gate_invoke(*command, cwd=tmp_path)
        assert done.returncode == 2, (command, done.stdout)
        assert f"{finding}: " in done.stderr and "verdict.decision: is stated twice" in done.stderr, done.stderr


def test_a_journal_line_or_record_with_a_key_stated_twice_fails_verify_naming_the_line_and_key(
        tmp_path: Path) -> None:
    """The off-r1 run_end line (and then its record.json) given a first `train_elapsed_s` of 1 s: a first-key
    reader would read a 10x faster run from the same bytes that hash-chain and verify."""
    from tests.test_integrity import _line_of, _series

    series, _ = _series(tmp_path)
    journal = series / "journal.jsonl"
    number = _line_of(series, "run_end", "off-r1")
    lines = journal.read_text().splitlines(keepends=True)
    lines[number - 1] = lines[number - 1].replace('"metrics": {', '"metrics": {"train_elapsed_s": 1.0, ', 1)
    journal.write_text("".join(lines))
    done = gate_invoke("verify", str(series), cwd=tmp_path)
    assert done.returncode == 3, done.stdout
    assert f"{journal}: line {number}: record.outcome.metrics.train_elapsed_s: is stated twice" in done.stderr, \
        done.stderr
    lines[number - 1] = lines[number - 1].replace('"metrics": {"train_elapsed_s": 1.0, ', '"metrics": {', 1)
    journal.write_text("".join(lines))
    record = series / "off-r1" / "record.json"
    record.write_text(record.read_text().replace('"metrics": {', '"metrics": {"train_elapsed_s": 1.0, ', 1))
    done = gate_invoke("verify", str(series), cwd=tmp_path)
    assert done.returncode == 3, done.stdout
    assert f"{record}: " in done.stderr and "outcome.metrics.train_elapsed_s: is stated twice" in done.stderr, \
        done.stderr


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-1e999"])
def test_a_finding_holding_a_number_that_is_not_finite_is_refused_naming_the_key(tmp_path: Path, token: str) -> None:
    """A forged finding with a nan or an infinite Δ was drawn into delta.svg as nan/inf; gatekit writes only finite
    numbers (JSON without NaN), so every reader refuses such a file in one line naming the key, writing nothing."""
    committed = Path(__file__).resolve().parents[1] / "findings" / "demo-resident-adam-2026-11-30.json"
    forged = tmp_path / committed.name  # the JSON alone: its twin would already differ
    forged.write_text(re.sub(r'"delta_pct": [^,\n]+', f'"delta_pct": {token}', committed.read_text(), count=1))
    assert token in forged.read_text()
    for command in (["report", str(forged), "--html", "page"], ["report", str(forged), "--md", "page.md"]):
        done = gate_invoke(*command, cwd=tmp_path)
        assert done.returncode == 2, done.stdout
        (line,) = done.stderr.strip().splitlines()
        assert line == f"gate: error: {forged}: stats.delta_pct: is not a finite number; a finding gatekit writes " \
                       "holds only finite numbers, so this one was edited", line
    assert not (tmp_path / "page").exists() and not (tmp_path / "page.md").exists()

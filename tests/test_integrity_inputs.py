"""Issue 11: findings never overwritten, arm configs watched around every run, bounded result parsing, ids
from every input validated, no secrets at rest, and the smaller items of its point 8. Series run the fixture
trainer's arm files in process (FakeDriver)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from gatekit.config import load_gate
from gatekit.errors import OutputError, SeriesInterrupted
from gatekit.provenance import sha256_file
from gatekit.series.runner import SeriesRunner
from gatekit.series_replay import open_series
from gatekit.storage import SeriesLayout
from tests.conftest import gate_invoke


def _interrupting_reader(label_to_stop: str):
    """A load reader factory that interrupts the series (like Ctrl-C) just before `label_to_stop` runs."""
    from gatekit.sampler import read_system_load

    def reader_for(label: str):
        if label == label_to_stop:
            raise KeyboardInterrupt
        return read_system_load
    return reader_for


def test_an_interrupted_series_keeps_its_finding_id_and_never_overwrites_another(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0})
    config = load_gate(g.gate)
    runner_a = SeriesRunner(config, config.arm("off"), config.arm("on"), load_reader_for=_interrupting_reader("off-r2"))
    with pytest.raises(SeriesInterrupted):
        runner_a.start()
    (series_a,) = g.series_dirs()
    reserved = sorted(p.name for p in (g.root / "findings").iterdir())
    assert len(reserved) == 1 and reserved[0].endswith(".reserved")
    assert (g.root / "findings" / reserved[0]).read_text().strip() == series_a.name

    result_b = SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    b_bytes = {p: p.read_bytes() for p in result_b.finding_paths}
    a_id = json.loads(SeriesLayout(series_a).journal.read_text().splitlines()[0])["finding_id"]
    assert result_b.finding.id != a_id and result_b.finding.meta.series_id == result_b.series_dir.name

    opened = open_series(series_a)
    result_a = SeriesRunner(opened.config, opened.off, opened.on).resume(opened)
    assert result_a.finding.id == a_id != result_b.finding.id
    assert {p: p.read_bytes() for p in result_b.finding_paths} == b_bytes  # B's finding untouched
    for result in (result_a, result_b):  # DONE and the finding agree
        decision, path = SeriesLayout(result.series_dir).done.read_text().splitlines()
        assert Path(path) == result.finding_paths[0]
        assert json.loads(result.finding_paths[1].read_text())["meta"]["series_id"] == result.series_dir.name
        assert decision == result.finding.decision.value
    assert not list((g.root / "findings").glob(".*.reserved"))  # markers go once their finding is written


def test_series_started_in_the_same_second_in_two_runs_folders_get_their_own_ids(
        fake_gate_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs folders, one findings folder, both series started at the same second: each series id is its
    own (it was `<gate>-<date>-<time>` alone, so both findings named one series), and each finding verifies."""
    import datetime as dt

    import gatekit.series.runner

    g = fake_gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0})
    (g.root / "gate-b.toml").write_text(g.gate.read_text().replace('runs = "runs"', 'runs = "runs-b"'))
    second = dt.datetime(2026, 12, 2, 10, 37, 0).astimezone()
    monkeypatch.setattr(gatekit.series.runner, "now", lambda: second)
    results = []
    for gate_file in (g.gate, g.root / "gate-b.toml"):
        config = load_gate(gate_file)
        results.append(SeriesRunner(config, config.arm("off"), config.arm("on")).start())
    a, b = results
    assert a.series_dir.parent.name == "runs" and b.series_dir.parent.name == "runs-b"
    assert a.finding.meta.series_id != b.finding.meta.series_id
    for result in results:
        assert result.finding.meta.series_id == result.series_dir.name
        assert result.series_dir.name.startswith("fixture-20261202-103700-")
        verified = gate_invoke("verify", str(result.series_dir), str(result.finding_paths[1]), cwd=g.root)
        assert verified.returncode == 0, verified.stderr


def test_a_finding_of_another_series_is_never_overwritten(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0})
    config = load_gate(g.gate)
    with pytest.raises(SeriesInterrupted):
        SeriesRunner(config, config.arm("off"), config.arm("on"),
                     load_reader_for=_interrupting_reader("off-r2")).start()
    (series_a,) = g.series_dirs()
    a_id = json.loads(SeriesLayout(series_a).journal.read_text().splitlines()[0])["finding_id"]
    # as an older gatekit (no reservation) would have left it: another series' finding at A's id
    (g.root / "findings" / f".{a_id}.reserved").unlink()
    other = {"meta": {"id": a_id, "series_id": "someone-else"}}
    (g.root / "findings" / f"{a_id}.json").write_text(json.dumps(other))
    opened = open_series(series_a)
    with pytest.raises(OutputError, match=f"belongs to series 'someone-else', not to this series '{series_a.name}'"):
        SeriesRunner(opened.config, opened.off, opened.on).resume(opened)
    assert json.loads((g.root / "findings" / f"{a_id}.json").read_text()) == other
    assert not SeriesLayout(series_a).done.exists()


def test_an_arm_config_changed_during_a_series_makes_it_invalid(fake_gate_dir, tmp_path: Path) -> None:
    from tests.conftest import gate_invoke

    off_toml = tmp_path / "gate" / "off.toml"  # a trainer that echoes no config edits its own arm file
    g = fake_gate_dir(off={"flags": {}, "default_elapsed": 10.0, "touch": {"label": "off-r1", "path": str(off_toml)}},
                      on={"flags": {}, "default_elapsed": 9.0})
    registered = sha256_file(off_toml)
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 3, done.stdout + done.stderr
    verdict = g.finding()["verdict"]
    assert verdict["decision"] == "invalid"
    assert any(f"{off_toml} changed: sha256 {registered} -> {sha256_file(off_toml)} (during off-r1)" in r
               for r in verdict["reasons"]), verdict["reasons"]
    assert g.order() == ["off-r1"]  # the series stopped at once


def test_a_dotted_key_bomb_is_refused_at_once_and_brackets_in_strings_do_not_count(tmp_path: Path) -> None:
    import time

    from gatekit.runfiles import MAX_TOML_BYTES
    from gatekit_drivers.command import read_result

    bomb = tmp_path / "bomb.toml"
    bomb.write_text("[trace]\n" + ".".join(["a"] * 40_000) + " = 1\n")  # 80 KB; tomllib needs ~9 s
    began = time.perf_counter()
    metrics, _, _, problem = read_result(bomb)
    assert time.perf_counter() - began < 0.5
    assert metrics == {} and f"{bomb}: has a dotted key or table name of more than 64 parts" in problem

    big = tmp_path / "big.toml"
    big.write_text("[trace]\n" + "x = 1\n" + "#" * MAX_TOML_BYTES)
    assert "is TOML larger than 1 MiB" in read_result(big)[3]

    brackets = "[" * 70 + "{" * 70
    toml = tmp_path / "strings.toml"
    toml.write_text(f'[metrics]\ntrain_elapsed_s = 1.5\n[trace]\nnote = "{brackets}"\nraw = \'{brackets}\'\n'
                    f'long = """\n{brackets}\n"""\n# {brackets}\n')
    metrics, _, trace, problem = read_result(toml)
    assert (metrics, problem, trace["note"]) == ({"train_elapsed_s": 1.5}, "", brackets)
    as_json = tmp_path / "strings.json"
    as_json.write_text(json.dumps({"metrics": {"train_elapsed_s": 2.0}, "trace": {"note": brackets + '"\\'}}))
    assert read_result(as_json)[0] == {"train_elapsed_s": 2.0} and read_result(as_json)[3] == ""
    deep = tmp_path / "deep.json"
    deep.write_text('{"trace": {"x": ' + "[" * 70 + "]" * 70 + "}}")
    assert "nests deeper than 64 levels" in read_result(deep)[3]


@pytest.mark.parametrize("option, value", [("--id", "../../x"), ("--id", "a/b"), ("--id", ".hidden"),
                                           ("--date", "../../2026-11-30"), ("--date", "2026-13-01")])
def test_import_ids_are_validated_like_gate_id(tmp_path: Path, option: str, value: str) -> None:
    from tests.conftest import FIXTURES, gate_invoke

    out = tmp_path / "deep" / "out"
    done = gate_invoke("import", "hyperfine", str(FIXTURES / "hyperfine_sleep.json"), "--out", str(out),
                       option, value, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{option} {value!r}" in done.stderr
    assert not any(p.is_file() for p in tmp_path.rglob("*")), list(tmp_path.rglob("*"))


def test_csv_ids_are_validated_like_gate_id(gate_dir) -> None:
    from gatekit.csvinput import evidence_from_csv
    from gatekit.errors import ConfigError

    g = gate_dir()
    config = load_gate(g.gate)
    rows = "arm,label,train_elapsed_s,load1_mean,load1_max\noff,off-r1,1.0,0.1,0.1\non,on-r1,0.9,0.1,0.1\n"
    good = g.root / "table.csv"
    good.write_text(rows)
    assert evidence_from_csv(good, config, "off", "on").finding_id == "fixture-table"
    odd = g.root / "my table;x.csv"
    odd.write_text(rows)
    with pytest.raises(ConfigError, match="the file name 'my table;x' names the finding and must be 1-64 letters"):
        evidence_from_csv(odd, config, "off", "on")
    good.write_text(rows.replace("on,on-r1", "on,../on-r1"))
    with pytest.raises(ConfigError, match=r"row 2, column 'label': '\.\./on-r1' must be 1-64 letters"):
        evidence_from_csv(good, config, "off", "on")


def test_a_finding_id_cannot_name_a_site_folder_outside_the_site() -> None:
    from gatekit.report.common import safe_name

    for hostile in ("../../x", "..", ".", "/etc/passwd", "a/../../b", "\\..\\x", "", "a\x00b"):
        name = safe_name(hostile)
        assert name and "/" not in name and "\\" not in name and not name.startswith(".") and "\x00" not in name


SECRET = "wandb-secret-7f3a9c1e5b"


def test_arm_env_values_are_redacted_at_rest_and_resume_still_works(fake_gate_dir, tmp_path: Path) -> None:
    from tests.conftest import write_toml

    g = fake_gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0})
    gate = __import__("tomllib").loads(g.gate.read_text())
    gate["gate"]["record_env"] = ["MY_FLAG"]
    gate["arms"]["on"]["env"] = {"WANDB_API_KEY": SECRET, "MY_FLAG": "1"}
    write_toml(g.gate, gate)
    config = load_gate(g.gate)
    assert config.arm("on").env["WANDB_API_KEY"] == SECRET  # the trainer still gets the value
    with pytest.raises(SeriesInterrupted):
        SeriesRunner(config, config.arm("off"), config.arm("on"),
                     load_reader_for=_interrupting_reader("off-r2")).start()
    (series_dir,) = g.series_dirs()
    start = json.loads(SeriesLayout(series_dir).journal.read_text().splitlines()[0])
    env = start["arms"]["on"]["env"]
    digest = __import__("hashlib").sha256(SECRET.encode()).hexdigest()[:12]
    assert env == {"WANDB_API_KEY": f"<redacted sha256:{digest}>", "MY_FLAG": "1"}
    opened = open_series(series_dir)
    assert opened.on.env["WANDB_API_KEY"] == SECRET  # resumed from the gate file, never from the journal
    result = SeriesRunner(opened.config, opened.off, opened.on).resume(opened)
    assert result.finding.decision.value == "adopted"
    for folder in (g.root / "runs", g.root / "findings"):
        for path in folder.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


def test_an_ad_hoc_arm_resumes_from_its_own_file(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0})
    config = load_gate(g.gate)
    (g.root / "fast.toml").write_text((g.root / "on.toml").read_text())
    on_file = config.arm(str(g.root / "fast.toml"))
    assert on_file.name not in config.arms
    with pytest.raises(SeriesInterrupted):
        SeriesRunner(config, config.arm("off"), on_file, load_reader_for=_interrupting_reader("off-r2")).start()
    (series_dir,) = g.series_dirs()
    opened = open_series(series_dir)
    assert opened.on == on_file
    assert SeriesRunner(opened.config, opened.off, opened.on).resume(opened).finding.decision.value == "adopted"


def test_record_env_names_are_validated(gate_dir) -> None:
    from gatekit.errors import ConfigError
    from tests.conftest import write_toml

    g = gate_dir()
    gate = __import__("tomllib").loads(g.gate.read_text())
    gate["gate"]["record_env"] = ["OK_NAME", "NOT-A-NAME"]
    write_toml(g.gate, gate)
    with pytest.raises(ConfigError, match=r"gate\.record_env\[1\].*'NOT-A-NAME' is not an environment variable"):
        load_gate(g.gate)


def test_gate_check_escapes_another_process_command_line(gate_dir) -> None:
    import subprocess
    import sys

    from tests.conftest import gate_invoke, write_toml

    g = gate_dir()
    gate = __import__("tomllib").loads(g.gate.read_text())
    gate["driver"]["busy_pattern"] = "busy-marker-5c1"
    write_toml(g.gate, gate)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "busy-marker-5c1\x1b[2J\rFAKE"])
    try:
        import time

        import psutil
        for _ in range(100):  # until it has exec'ed (before, its command line is still pytest's)
            if "busy-marker-5c1" in " ".join(psutil.Process(other.pid).cmdline()):
                break
            time.sleep(0.02)
        done = gate_invoke("check", "off", "on", cwd=g.root)
    finally:
        other.kill()
        other.wait()
    assert done.returncode == 2
    assert "busy-marker-5c1\\x1b[2J\\" in done.stdout  # (psutil reads a CR in a command line as LF)
    assert "\x1b" not in done.stdout and "\r" not in done.stdout


@pytest.mark.parametrize("target, words", [("folder", "a directory"), ("/dev/zero", "a character device"),
                                           ("gone.py", "not found")])
def test_a_hashed_path_that_is_no_file_says_what_it_is(gate_dir, target: str, words: str) -> None:
    from gatekit.preflight import check_artifacts
    from gatekit.provenance import hash_artifacts

    g = gate_dir()
    (g.root / "folder").mkdir()
    path = g.root / target
    (result,) = check_artifacts([path])
    assert not result.ok and f"{path}: {words}, not a file to hash (driver.hash)" == result.detail
    expected = "missing" if words == "not found" else words
    assert hash_artifacts([path]) == {str(path): expected}  # never read: /dev/zero would not end


def test_temp_files_of_a_killed_finding_write_are_removed(fake_gate_dir) -> None:
    import os
    import time

    g = fake_gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0})
    out = g.root / "findings"
    out.mkdir()
    stale = out / ".fixture-2026-11-29.json.k3j_x9q2.tmp"  # tempfile.mkstemp's name, as a SIGKILL left it
    fresh = out / ".fixture-2026-11-29.toml.ab12cd34.tmp"  # a live writer's (it is seconds old)
    other = out / ".notes.tmp"  # not our pattern
    for path in (stale, fresh, other):
        path.write_text("{")
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    os.utime(other, (hour_ago, hour_ago))
    config = load_gate(g.gate)
    SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    assert not stale.exists() and fresh.exists() and other.exists()


def test_a_subnormal_primary_fails_its_run(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0, "elapsed": {"on-r2": 5e-324}})
    config = load_gate(g.gate)
    result = SeriesRunner(config, config.arm("off"), config.arm("on")).start()
    (run,) = [r for r in result.finding.runs if r.label == "on-r2"]
    assert not run.used and "primary metric 'train_elapsed_s' is 4.94066e-324, below 1e-30" in run.reason


def test_primaries_at_the_edges_of_the_accepted_range_never_overflow(fake_gate_dir) -> None:
    """The primaries that crashed `gate run` and `gate analyze` (OverflowError in the gm Δ: off 1e-300, on 1e99)
    fail their runs naming the bound, and the series is invalid with reasons; primaries at the edges of the range
    (off 1e-30, on 1e30) decide, every statistic finite, in `gate run` and in `gate analyze`."""
    g = fake_gate_dir(off={"default_elapsed": 1e-300}, on={"default_elapsed": 1e99})
    done = gate_invoke("run", "off", "on", "--json", cwd=g.root)
    assert done.returncode == 3, done.stderr
    finding = json.loads(done.stdout)
    assert finding["verdict"]["decision"] == "invalid"
    reasons = {r["label"]: r["reason"] for r in finding["runs"]}
    assert "is 1e-300, below 1e-30: too small to be a measurement" in reasons["off-r1"]
    assert "is 1e+99, beyond ±1e+30: too large to be a measurement" in reasons["on-r1"]
    analyzed = gate_invoke("analyze", str(g.series_dirs()[0]), "--json", cwd=g.root)
    assert analyzed.returncode == 3 and json.loads(analyzed.stdout)["verdict"]["decision"] == "invalid"

    g = fake_gate_dir(off={"default_elapsed": 1e-30}, on={"default_elapsed": 1e30})
    shutil.rmtree(g.root / "runs")
    shutil.rmtree(g.root / "findings")
    done = gate_invoke("run", "off", "on", "--json", cwd=g.root)
    assert done.returncode == 0, done.stderr
    finding = json.loads(done.stdout)
    assert finding["verdict"]["decision"] == "regression" and all(r["used"] for r in finding["runs"])
    stats = finding["stats"]
    assert all(math.isfinite(stats[key]) for key in ("delta_pct", "mean_off", "mean_on", "threshold_pct"))
    assert math.isfinite(stats["gm_delta_pct"]) and stats["gm_delta_pct"] > 1e50
    analyzed = gate_invoke("analyze", str(g.series_dirs()[0]), "--json", cwd=g.root)
    assert analyzed.returncode == 0 and json.loads(analyzed.stdout)["stats"] == stats


def test_metric_keys_differing_only_in_lone_surrogates_stay_distinct() -> None:
    from gatekit.records import RunOutcome
    from gatekit.sanitize import safe_outcome

    outcome = safe_outcome(RunOutcome(exit_code=0, process_wallclock_s=1.0,
                                      metrics={"loss\ud800": 1.0, "loss\ud801": 2.0, "ok": 3.0},  # noqa: F601 (distinct lone surrogates)
                                      config={"k\udc80": 1, "k\udc81": 2}))  # noqa: F601 (distinct lone surrogates)
    assert outcome.metrics == {"loss\\ud800": 1.0, "loss\\ud801": 2.0, "ok": 3.0} and not outcome.error
    assert outcome.config == {"k\\udc80": 1, "k\\udc81": 2}
    json.dumps(outcome.metrics).encode("utf-8")
    clash = safe_outcome(RunOutcome(exit_code=0, process_wallclock_s=1.0,
                                    metrics={"loss\ud800": 1.0, "loss\\ud800": 2.0}))
    assert "metric keys clash once lone surrogates are escaped: loss\\ud800" in clash.error


def test_a_forged_process_wallclock_never_shows_in_the_progress_line() -> None:
    """A trainer that reports its own `process_wallclock_s` does not change what the progress line (or the
    verdict) uses: that name is gatekit's own measurement around the process (records.metric_value)."""
    from gatekit.records import RunOutcome, RunRecord, WindowSummary
    from gatekit.series.runloop import run_line

    record = RunRecord(order=1, arm="off", label="off-r1", pair=1,
                       outcome=RunOutcome(exit_code=0, process_wallclock_s=1.5,
                                          metrics={"process_wallclock_s": 999.0, "train_elapsed_s": 1.25}),
                       window=WindowSummary.of([]))
    assert "process_wallclock_s = 1.5000" in run_line(record, "process_wallclock_s")
    assert "999" not in run_line(record, "process_wallclock_s")
    assert record.value_of("process_wallclock_s") == 1.5
    missing = RunRecord(order=2, arm="on", label="on-r1", pair=1,
                        outcome=RunOutcome(exit_code=0, process_wallclock_s=1.5), window=WindowSummary.of([]))
    # never the wallclock instead: a run without its primary is a failed run, and its line says so
    assert run_line(missing, "train_elapsed_s").startswith(
        "      on-r1 FAILED: primary metric 'train_elapsed_s' missing or not a finite number (see ")


def test_an_artifact_swapped_and_restored_inside_a_run_fails_that_run(tmp_path: Path) -> None:
    """Hashing before and after a run cannot see an artifact replaced during it and put back: the restore
    leaves a new ctime (a rename, a write; no one can set it back), so the run fails and its pair is re-run."""
    import os

    from tests.faults.faultkit import fault_gate, finish, start_gate

    g = fault_gate(tmp_path / "g", on={"hold": ["on-r2"]})
    trainer = g.root / "fault_trainer.py"
    registered = sha256_file(trainer)
    proc = start_gate("run", "off", "on", cwd=g.root)
    g.wait_holding("on-r2")
    os.rename(trainer, g.root / "fault_trainer.py.bak")
    trainer.write_text("print('a faster trainer for a moment')\n")
    os.rename(g.root / "fault_trainer.py.bak", trainer)  # restored: the same bytes, the same inode and mtime
    assert sha256_file(trainer) == registered
    g.release()
    code, _, err = finish(proc)
    assert code == 0, err
    runs = {r["label"]: r for r in g.finding()["runs"]}
    assert not runs["on-r2"]["used"], runs["on-r2"]
    assert f"{trainer}: replaced, renamed or written during on-r2" in runs["on-r2"]["reason"]
    assert runs["on-r4"]["retry_of"] == 2 and runs["on-r4"]["used"] and runs["off-r4"]["used"]
    assert g.finding()["verdict"]["decision"] == "adopted"

"""`gate import hyperfine`: hyperfine 1.x and 2.x files, arms by command or parameter, guards, large n, zero times.

Inputs are real hyperfine output (hyperfine 1.15.0, Debian package) — tests/fixtures/imports/hyperfine/SOURCES.md
says how each was produced; the 2.x files are hyperfine 2.0's own export snapshots, and one measured here in
the shape of its new-metrics branch.
The two older fixtures came from
  hyperfine --runs 5 --warmup 1 --shell=none --export-json hyperfine_sleep.json -n off 'sleep 0.030' -n on 'sleep 0.025'
  hyperfine --runs 3 --shell=none -i --export-json hyperfine_three.json 'sleep 0.020' 'sleep 0.021' 'false'
Statistics are checked against values computed here from the file (statistics.fmean).
Large files are analysed in-process (`analyze`), as writing thousands of runs as TOML takes seconds.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gatekit.analysis import analyze
from gatekit.finding import Finding
from gatekit.importers.common import decided_by
from gatekit.importers.hyperfine import ZERO_TIMES_LIMIT_FRAC, evidence_from_hyperfine
from tests.conftest import FIXTURES, gate_invoke
from tests.findings_kit import GOLDEN

HYPERFINE = FIXTURES / "imports" / "hyperfine"
DATE = "2026-11-30"


def _raw(name: str) -> list[dict[str, Any]]:
    return json.loads((HYPERFINE / name).read_text())["results"]


def _analysed(path: Path, **options: Any) -> Finding:
    return analyze(evidence_from_hyperfine(path, date=DATE, **options))


def _error(done: Any) -> str:
    """The one line a bad input gives (exit 2), without the `gate: error: ` prefix."""
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gate: error: ")
    return line.removeprefix("gate: error: ")


# -- hyperfine 1.x, arms by command ------------------------------------------------------------------

def test_hyperfine_import_matches_golden(tmp_path: Path) -> None:
    done = gate_invoke("import", "hyperfine", "hyperfine_sleep.json", "--date", DATE, "--out", str(tmp_path),
                       "--json", "--policy", "classic", cwd=FIXTURES)
    assert done.returncode == 0, done.stderr
    golden = GOLDEN / "exports" / "hyperfine-finding.json"  # the exports' goldens are derived from it
    if os.environ.get("GATEKIT_REGOLD"):
        golden.write_text(done.stdout)
    assert done.stdout == golden.read_text(), "hyperfine-finding.json differs (GATEKIT_REGOLD=1 to accept)"
    finding = json.loads(done.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hyperfine-sleep-2026-11-30.json",
                                                          "hyperfine-sleep-2026-11-30.toml"]
    # arms = the commands, runs = their times, analysed like a gate
    assert finding["gate"]["arms"] == {"off": "off", "on": "on"}
    assert finding["gate"]["primary"] == "process_wallclock_s" and finding["gate"]["order"] == "blocked"
    raw = json.loads((FIXTURES / "hyperfine_sleep.json").read_text())["results"]
    assert [r["process_wallclock_s"] for r in finding["runs"]] == raw[0]["times"] + raw[1]["times"]
    assert finding["stats"]["mean_off"] == pytest.approx(raw[0]["mean"])
    assert finding["stats"]["mean_on"] == pytest.approx(raw[1]["mean"])
    assert finding["stats"]["delta_pct"] == pytest.approx(100 * (raw[1]["mean"] - raw[0]["mean"]) / raw[0]["mean"])
    assert finding["verdict"]["decision"] == "adopted"
    assert any("not interleaved" in w for w in finding["verdict"]["warnings"])
    assert "VERDICT: ADOPTED" in done.stderr
    # provenance: the file by hash, hyperfine's own summary per arm
    assert finding["provenance"]["imported_from"]["format"] == "hyperfine"
    hyperfine = finding["provenance"]["hyperfine"]
    assert hyperfine["version"] == "1.x"
    assert hyperfine["commands"]["off"] == {"command": "off", **{k: raw[0][k] for k in (
        "mean", "stddev", "median", "user", "system", "min", "max")}}


def test_hyperfine_choosing_commands(tmp_path: Path) -> None:
    three = str(FIXTURES / "hyperfine_three.json")
    done = gate_invoke("import", "hyperfine", three, "--out", str(tmp_path), cwd=tmp_path)
    assert "holds 3 commands (1: 'sleep 0.020', 2: 'sleep 0.021', 3: 'false'); choose two with --off and --on" \
        in _error(done)
    done = gate_invoke("import", "hyperfine", three, "--off", "sleep 0.020", "--on", "2", "--out", str(tmp_path),
                       "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["gate"]["arms"] == {"off": "sleep 0.020", "on": "sleep 0.021"}
    # another pair of the same file under the same (default) id would replace that finding: refused
    done = gate_invoke("import", "hyperfine", three, "--off", "1", "--on", "false", "--out", str(tmp_path),
                       cwd=tmp_path)
    assert "holds a finding of other evidence" in _error(done)
    # every run of `false` exits 1: failed runs, never numbers, so the series is invalid (exit 3)
    done = gate_invoke("import", "hyperfine", three, "--off", "1", "--on", "false", "--id", "three-false",
                       "--out", str(tmp_path), "--json", "--junit", str(tmp_path / "j.xml"), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    finding = json.loads(done.stdout)
    assert finding["verdict"]["decision"] == "invalid"
    assert {r["reason"] for r in finding["runs"] if r["arm"] == "false"} == {"failed: exit code 1"}
    assert ET.parse(tmp_path / "j.xml").getroot().find("testsuite/testcase/failure").get("type") == "invalid"
    done = gate_invoke("import", "hyperfine", three, "--off", "9", "--on", "1", cwd=tmp_path)
    assert "--off '9' is not one of the commands" in _error(done)
    done = gate_invoke("import", "hyperfine", three, "--off", "3", "--on", "false", cwd=tmp_path)
    assert "--off and --on name the same command" in _error(done)


@pytest.mark.parametrize("content, key", [
    ('{"results": []}', "key 'results' is missing or empty"),
    ('{"results": [{"command": "a", "times": [0.1]}, {"command": "b"}]}',
     "key 'results[1]' has neither 'times' nor 'measurements'; understood: hyperfine 1.x"),
    ('{"results": [{"command": "a", "times": []}]}', "key 'results[0].times' must be a non-empty list"),
    ('{"results": [{"command": "a", "times": [0.1], "exit_codes": [0, 0]}, {"command": "b", "times": [1]}]}',
     "key 'results[0].exit_codes'"),
    ('{"results": [{"times": [0.1]}]}', "key 'results[0].command' is missing"),
    ("not json", "not hyperfine --export-json output"),
    ('{"schema_version": 3, "results": []}', "key 'schema_version' is 3; understood: hyperfine 1.x"),
    ('{"schema_version": 2, "results": [{"command": "a", "times": [0.1]}]}',
     "key 'schema_version' is 2 but the commands are hyperfine 1.x's"),
    ('{"results": [{"command": "a", "times": [0.1]}, {"command": "b", "measurements": [{"time_wall_clock": 1}]}]}',
     "key 'results' mixes hyperfine 1.x and 2.x commands"),
    ('{"results": [{"command": "a", "measurements": [{"time_wall_clock": {"value": 1, "unit": "ms"}}]}]}',
     "key 'results[0].measurements[0].time_wall_clock.unit' is 'ms'; expected 'second'"),
    ('{"results": [{"command": "a", "measurements": [{"time_user": 1}]}]}',
     "key 'results[0].measurements[0].time_wall_clock' is missing"),
    ('{"results": [{"command": "a", "times": [0.1], "memory_usage_byte": [1, -2]}]}',
     "key 'results[0].memory_usage_byte' must list one byte count per entry of times"),
])
def test_bad_hyperfine_file_is_one_line_naming_file_and_key(tmp_path: Path, content: str, key: str) -> None:
    (tmp_path / "h.json").write_text(content)
    line = _error(gate_invoke("import", "hyperfine", "h.json", cwd=tmp_path))
    assert line.startswith("h.json: ") and key in line
    assert not (tmp_path / "findings").exists()


# -- arms by parameter value (-L) ---------------------------------------------------------------------

def test_arms_by_parameter_value(tmp_path: Path) -> None:
    done = gate_invoke("import", "hyperfine", str(HYPERFINE / "hyperfine_params.json"), "--param", "level",
                       "--off", "1", "--on", "9", "--date", DATE, "--out", str(tmp_path), "--json", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    finding = json.loads(done.stdout)
    raw = {r["parameters"]["level"]: r for r in _raw("hyperfine_params.json")}
    assert finding["gate"]["arms"] == {"off": "level=1", "on": "level=9"}
    off_runs = [r for r in finding["runs"] if r["arm"] == "level=1"]
    assert [r["process_wallclock_s"] for r in off_runs] == raw["1"]["times"]
    assert off_runs[0]["config"] == {"command": "gzip -1 -c /usr/bin/hyperfine", "level": "1"}
    assert finding["stats"]["mean_off"] == pytest.approx(raw["1"]["mean"])
    assert finding["stats"]["mean_on"] == pytest.approx(raw["9"]["mean"])
    # gzip -9 takes several times as long as gzip -1: a regression, whatever the noise
    assert finding["verdict"]["decision"] == "regression"


def test_parameter_choices_name_what_the_file_holds(tmp_path: Path) -> None:
    params = str(HYPERFINE / "hyperfine_params.json")
    line = _error(gate_invoke("import", "hyperfine", params, "--param", "level", "--off", "2", "--on", "9",
                              cwd=tmp_path))
    assert line.endswith("--off '2' is not a value of parameter 'level' (values: 1, 6, 9)")
    line = _error(gate_invoke("import", "hyperfine", params, "--param", "lvl", cwd=tmp_path))
    assert line.endswith("--param 'lvl' is not a parameter of every command (parameters: level)")
    line = _error(gate_invoke("import", "hyperfine", params, "--param", "level", cwd=tmp_path))
    assert line.endswith("parameter 'level' takes 3 values (1, 6, 9); choose two with --off and --on")
    line = _error(gate_invoke("import", "hyperfine", str(FIXTURES / "hyperfine_sleep.json"), "--param", "level",
                              cwd=tmp_path))
    assert line.endswith("--param 'level' is not a parameter of every command (it has no parameters (-P/-L))")


def test_two_parameters_make_one_value_ambiguous(tmp_path: Path) -> None:
    """-L a 1,2 -L b x,y gives four commands: a=1 alone names two of them."""
    results = _raw("hyperfine_params.json")[:2]
    grid = [dict(results[i], command=f"c{a}{b}", parameters={"a": a, "b": b})
            for i, (a, b) in enumerate([("1", "x"), ("1", "y")])]
    source = tmp_path / "grid.json"
    source.write_text(json.dumps({"results": grid}))
    line = _error(gate_invoke("import", "hyperfine", str(source), "--param", "a", "--off", "1", "--on", "1",
                              cwd=tmp_path))
    assert "--off a=1 matches 2 commands (1: 'c1x', 2: 'c1y')" in line


# -- hyperfine 2.x and guards -------------------------------------------------------------------------

def _v2_means(result: dict[str, Any], key: str) -> float:
    return statistics.fmean(m[key]["value"] for m in result["measurements"])


def test_hyperfine_2_measurements_and_guards(tmp_path: Path) -> None:
    source = HYPERFINE / "hyperfine2_params.json"
    off, on = _raw("hyperfine2_params.json")
    memory_delta = _v2_means(on, "peak_memory_usage") - _v2_means(off, "peak_memory_usage")
    user_delta = _v2_means(on, "time_user") - _v2_means(off, "time_user")
    assert user_delta > 0.01  # gzip -9 spends far more CPU than gzip -1
    done = gate_invoke("import", "hyperfine", str(source), "--param", "level", "--guard",
                       f"memory_usage_byte:{abs(memory_delta) + 4096}", "--guard", f"user:{user_delta / 2}",
                       "--guard", f"system:{1e6}", "--date", DATE, "--out", str(tmp_path), "--json",
                       "--policy", "classic", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    finding = json.loads(done.stdout)
    assert finding["provenance"]["hyperfine"]["version"] == "2.x"
    assert finding["gate"]["arms"] == {"off": "level=1", "on": "level=9"}
    walls = [m["time_wall_clock"]["value"] for r in (off, on) for m in r["measurements"]]
    assert [r["process_wallclock_s"] for r in finding["runs"]] == walls
    assert finding["stats"]["mean_off"] == pytest.approx(_v2_means(off, "time_wall_clock"))
    guards = finding["guards"]
    assert guards["memory_usage_byte"]["delta"] == pytest.approx(memory_delta)
    assert guards["memory_usage_byte"]["direction"] == "lower" and guards["memory_usage_byte"]["pass"]
    assert guards["user"]["delta"] == pytest.approx(user_delta) and not guards["user"]["pass"]
    assert guards["system"]["pass"]
    # a regression and a failed guard: the regression names the decision, both reasons are listed
    assert finding["verdict"]["decision"] == "regression"
    assert any("guard user failed" in reason for reason in finding["verdict"]["reasons"])


def test_hyperfine_2_with_schema_version_and_a_signal(tmp_path: Path) -> None:
    """The shape with a top-level schema_version, and a run ended by a signal (exit_code null): a failed run."""
    data = json.loads((HYPERFINE / "hyperfine2_params.json").read_text())
    data = {"schema_version": 2, **data}
    data["results"][1]["measurements"][3]["exit_code"] = None
    source = tmp_path / "v2.json"
    source.write_text(json.dumps(data))
    finding = _analysed(source)
    failed = [r for r in finding.runs if r.reason.startswith("failed")]
    assert [(r.arm, r.label, r.reason) for r in failed] == [("gzip -9 -c /usr/bin/hyperfine",
                                                             "gzip -9 -c /usr/bin/hyperfine-r4",
                                                             "failed: ended by a signal")]


def test_hyperfine_2_0_export_names_memory_peak_resident(tmp_path: Path) -> None:
    """hyperfine 2.0's JSON (its own export snapshot, SOURCES.md): `memory_peak_resident` per run is the
    memory guard, and a `--command-name` is the `name` beside the command, which either selects."""
    source = HYPERFINE / "hyperfine2_snapshot_basic.json"
    off, on = _raw("hyperfine2_snapshot_basic.json")
    finding = _analysed(source, guards=("memory_usage_byte:0",))
    assert (finding.off_arm, finding.on_arm) == (off["name"], on["command"]) == ("one second", "sleep 2")
    assert finding.guards["memory_usage_byte"].delta == _v2_means(on, "memory_peak_resident") - _v2_means(
        off, "memory_peak_resident")
    assert [r.value_of("memory_usage_byte") for r in finding.runs] == [
        m["memory_peak_resident"]["value"] for r in (off, on) for m in r["measurements"]]
    commands = finding.provenance.extra_keys["hyperfine"]["commands"]
    assert commands["one second"] == {"command": "sleep 1", "name": "one second"}
    by_command = _analysed(source, off="sleep 1", on="sleep 2")
    assert (by_command.off_arm, by_command.on_arm) == ("one second", "sleep 2")
    params = _analysed(HYPERFINE / "hyperfine2_snapshot_params.json", param="duration", guards=("memory_usage_byte",))
    assert (params.off_arm, params.on_arm) == ("duration=1", "duration=2") and params.guards["memory_usage_byte"].passed


def test_ignored_failures_take_out_only_the_failed_runs(tmp_path: Path) -> None:
    """`hyperfine -i`: failed runs are recorded and not used; hyperfine runs are not paired, so every run of
    the other command still counts. Its time budget gives the arms different run counts, which the header says."""
    off, on = _raw("hyperfine_ignore_failure.json")
    done = gate_invoke("import", "hyperfine", str(HYPERFINE / "hyperfine_ignore_failure.json"), "--date", DATE,
                       "--out", str(tmp_path), cwd=tmp_path)
    assert f"n={len(off['times'])} off + {len(on['times'])} on" in done.stdout.splitlines()[0]
    finding = _analysed(HYPERFINE / "hyperfine_ignore_failure.json")
    rows = {arm: [r for r in finding.runs if r.arm == arm] for arm in ("off", "on")}
    assert all(r.used for r in rows["off"]) and len(rows["off"]) == len(off["times"]) == 58
    assert [r.used for r in rows["on"]] == [code == 0 for code in on["exit_codes"]] and 0 in on["exit_codes"]
    assert not any("pair partner" in r.reason for r in finding.runs)
    assert finding.stats.mean_off == pytest.approx(statistics.fmean(off["times"]))
    assert finding.stats.mean_on == pytest.approx(statistics.fmean(
        t for t, code in zip(on["times"], on["exit_codes"]) if code == 0))


def test_one_failed_run_says_what_happened_in_hyperfines_terms(tmp_path: Path) -> None:
    """One failed run of an imported hyperfine benchmark read "its pair has no retry left": hyperfine runs are
    not paired and an import cannot run anything again; and the report's header read "· gate ·", a gate name
    an import does not have. Both now say what the finding is: imported from hyperfine."""
    document = json.loads((FIXTURES / "hyperfine_sleep.json").read_text())
    for result in document["results"]:
        result["exit_codes"] = [0] * len(result["times"])
    document["results"][1]["exit_codes"][2] = 1
    source = tmp_path / "one_failed.json"
    source.write_text(json.dumps(document))
    done = gate_invoke("import", "hyperfine", str(source), "--date", DATE, "--out", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    finding = _analysed(source)
    assert finding.verdict.reasons[0] == ("on-r3 failed: exit code 1; imported from hyperfine, it cannot be "
                                          "retried, so no run replaces it")
    assert not any("pair" in reason for reason in finding.verdict.reasons)
    assert "its pair has no retry left" not in done.stdout
    (toml_path,) = tmp_path.glob("*.toml")
    assert gate_invoke("report", str(toml_path), "--md", "report.md", cwd=tmp_path).returncode == 0
    eyebrow = (tmp_path / "report.md").read_text().splitlines()[2]
    assert eyebrow == f"*{DATE} · imported from hyperfine · invalid · {finding.id}*", eyebrow


@pytest.mark.parametrize("guard, message", [
    ("user:0.01", "key 'results[0].user' is one mean per command in hyperfine 1.x; --guard user needs per-run "
                  "values (hyperfine 2.x records them)"),
    ("memory_usage_byte:0", "key 'results[0].memory_usage_byte' is missing (hyperfine 1.20 or newer records it"),
])
def test_a_guard_needs_per_run_values(tmp_path: Path, guard: str, message: str) -> None:
    line = _error(gate_invoke("import", "hyperfine", str(FIXTURES / "hyperfine_sleep.json"), "--guard", guard,
                              cwd=tmp_path))
    assert line.endswith(message) or message in line


@pytest.mark.parametrize("guard", ["rss:10", "user:-1", "user:lots", "user:nan"])
def test_a_bad_guard_is_refused_before_reading(tmp_path: Path, guard: str) -> None:
    line = _error(gate_invoke("import", "hyperfine", "absent.json", "--guard", guard, cwd=tmp_path))
    if guard.startswith("rss"):
        assert line == ("absent.json: --guard 'rss' is not a per-run metric of this file "
                        "(metrics: memory_usage_byte, user, system)")
    else:
        assert line.startswith(f"--guard {guard!r}: MAX_WORSE must be a number ≥ 0")


def test_memory_usage_byte_of_hyperfine_1_20_is_a_guard(tmp_path: Path) -> None:
    """hyperfine 1.20 adds `memory_usage_byte`, one per run (its src/benchmark/benchmark_result.rs); the
    Debian 1.15 here does not write it, so this file is the real -L export with per-run counts added."""
    data = json.loads((HYPERFINE / "hyperfine_params.json").read_text())
    for k, result in enumerate(data["results"]):
        result["memory_usage_byte"] = [2_000_000 + 1000 * k + 10 * i for i in range(len(result["times"]))]
    source = tmp_path / "v120.json"
    source.write_text(json.dumps(data))
    finding = _analysed(source, param="level", off="1", on="6", guards=("memory_usage_byte:999",))
    guard = finding.guards["memory_usage_byte"]
    expected = statistics.fmean(data["results"][1]["memory_usage_byte"]) - statistics.fmean(
        data["results"][0]["memory_usage_byte"])
    assert guard.delta == pytest.approx(expected) == 1000
    assert not guard.passed and guard.limit == 999


# -- any number of runs -------------------------------------------------------------------------------

def test_thousands_of_runs_of_a_fast_command() -> None:
    """hyperfine -N --runs 2000 'true' '/bin/true': every run imported; the commands ran one after the other,
    so no run is paired with one of the other arm and there is no sign test over pairs."""
    off, on = _raw("hyperfine_true_n.json")
    finding = analyze(decided_by(evidence_from_hyperfine(HYPERFINE / "hyperfine_true_n.json", date=DATE),
                                 policy="classic"))
    assert finding.stats.n_off == len(off["times"]) == 2000 and finding.stats.n_on == 2000
    assert finding.stats.mean_off == pytest.approx(off["mean"])
    assert finding.stats.mean_on == pytest.approx(on["mean"])
    assert finding.stats.delta_pct == pytest.approx(100 * (on["mean"] - off["mean"]) / off["mean"])
    assert finding.stats.pairs_consistent == "0/0"
    assert finding.stats.pairs_sign_p is None or math.isnan(finding.stats.pairs_sign_p)
    # σ_off of a ~1 ms command is tens of %: the classic threshold says the series could not tell
    assert finding.stats.threshold_pct > 10
    assert finding.verdict.decision.value == "inconclusive"
    assert finding.verdict.reasons[0].startswith("too noisy to tell")
    # by default the ranks decide: the interval of the shift of 2 000 + 2 000 runs is a few percent wide, and
    # lies wholly beyond the 1 % floor (on, /bin/true, is the slower here)
    robust = _analysed(HYPERFINE / "hyperfine_true_n.json")
    assert robust.gate.policy == "robust" and robust.ranks is not None
    assert robust.ranks.low_pct is not None and robust.ranks.low_pct > 1.0
    assert robust.verdict.decision.value == "regression"


# -- times of 0.0 -------------------------------------------------------------------------------------

def test_zero_times_through_a_shell_make_the_finding_invalid_not_failed(tmp_path: Path) -> None:
    """hyperfine --runs 300 -n off 'true' -n on ':': 299 and 298 runs read 0.0 s."""
    off, on = _raw("hyperfine_shell_zero.json")
    zeros = [sum(t == 0.0 for t in r["times"]) for r in (off, on)]
    assert zeros == [299, 298]
    done = gate_invoke("import", "hyperfine", str(HYPERFINE / "hyperfine_shell_zero.json"), "--out",
                       str(tmp_path), "--json", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    finding = json.loads(done.stdout)
    assert finding["verdict"]["decision"] == "invalid"
    reasons = [r for r in finding["verdict"]["reasons"] if "timed 0.0 s" in r]
    assert reasons == [
        f"imported from hyperfine: {z} of 300 runs of {name!r} timed 0.0 s, below the timer's resolution: "
        "hyperfine subtracts the shell's start-up time and clamps at 0; above 1% of an arm, its mean is no "
        "measurement: rerun with -N/--shell=none, or give each run more work, e.g. a loop inside the command"
        for z, name in zip(zeros, ("off", "on"))]
    # none of them is a failed run; the runs that remain are the non-zero ones
    assert not any(r["reason"].startswith("failed") for r in finding["runs"])
    assert [r["process_wallclock_s"] for r in finding["runs"]] == [t for t in off["times"] + on["times"] if t]



def test_an_invalid_import_writes_no_metric_export_and_exits_3(tmp_path: Path) -> None:
    """Nothing to measure: the bmf file is not written (never an empty {}), a line says why, the exit is 3."""
    done = gate_invoke("import", "hyperfine", str(HYPERFINE / "hyperfine_shell_zero.json"), "--out",
                       str(tmp_path), "--export", "bmf", "b.json", "--junit", "j.xml", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert not (tmp_path / "b.json").exists() and (tmp_path / "j.xml").exists()
    assert "b.json: not written: no bmf entry to write: every finding is invalid" in done.stderr

def test_a_few_zero_times_are_left_out_with_their_bound(tmp_path: Path) -> None:
    """The -N export with some of off's times set to 0.0 (as a shell run clamps them): up to 1 % of an arm a
    warning with the bound k/(n − k) on how much leaving them out overstates the mean, beyond it invalid."""
    data = json.loads((HYPERFINE / "hyperfine_true_n.json").read_text())
    times = data["results"][0]["times"]
    limit = int(ZERO_TIMES_LIMIT_FRAC * len(times))
    for zeros, invalid in ((limit, False), (limit + 1, True)):
        changed = [0.0] * zeros + times[zeros:]
        data["results"][0]["times"] = changed
        source = tmp_path / f"zeros{zeros}.json"
        source.write_text(json.dumps(data))
        finding = _analysed(source)
        assert finding.stats.n_off == len(times) - zeros
        assert finding.stats.mean_off == pytest.approx(statistics.fmean(changed[zeros:]))
        lines = [w for w in (*finding.verdict.reasons, *finding.verdict.warnings) if "timed 0.0 s" in w]
        assert len(lines) == 1 and f"{zeros} of 2000 runs of 'true' timed 0.0 s" in lines[0]
        assert (finding.verdict.decision.value == "invalid") is invalid
        if not invalid:
            assert f"can overstate the arm's mean by at most {100 * zeros / (2000 - zeros):.2g} %" in lines[0]

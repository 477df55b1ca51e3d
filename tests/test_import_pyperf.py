"""`gate import pyperf OFF.json ON.json` on real pyperf files (tests/fixtures/imports/pyperf/SOURCES.md says how
they were recorded): each pyperf run with values is one run (its mean), warmups are not, `load_avg_1min`
reaches the run's window, and the decision equals the classic rule computed here from the raw values."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, gate_invoke
from tests.imports_kit import DATE, classic_by_hand, import_finding

PYPERF = FIXTURES / "imports" / "pyperf"


def _raw_runs(path: Path, benchmark: str | None = None) -> list[tuple[float, float | None]]:
    """(mean of values, load_avg_1min) of each run with values, metadata inherited as pyperf does."""
    data = json.loads(path.read_text())
    for bench in data["benchmarks"]:
        meta = {**data.get("metadata", {}), **bench.get("metadata", {})}
        if benchmark is None or meta["name"] == benchmark:
            return [(statistics.fmean(run["values"]), {**meta, **run.get("metadata", {})}.get("load_avg_1min"))
                    for run in bench["runs"] if run.get("values")]
    raise AssertionError(f"no benchmark {benchmark} in {path}")


def _import(*args: str, cwd: Path) -> tuple[Any, dict[str, Any]]:
    return import_finding("pyperf", *args, cwd=cwd)


def test_runs_are_run_means_and_decision_is_the_classic_rule(tmp_path: Path) -> None:
    done, finding = _import(str(PYPERF / "off.json"), str(PYPERF / "on.json"), cwd=tmp_path)
    off, on = _raw_runs(PYPERF / "off.json"), _raw_runs(PYPERF / "on.json")
    # the calibration run (warmups only) of each file is not a run
    assert len(json.loads((PYPERF / "off.json").read_text())["benchmarks"][0]["runs"]) == len(off) + 1
    rows = finding["runs"]
    assert [(r["arm"], r["label"]) for r in rows] == [("off", f"off-r{k}") for k in range(1, len(off) + 1)] + \
        [("on", f"on-r{k}") for k in range(1, len(on) + 1)]
    assert [r["metrics"]["time_s"] for r in rows] == pytest.approx([m for m, _ in off + on], rel=1e-12)
    assert finding["gate"]["primary"] == "time_s" and finding["gate"]["order"] == "blocked"
    delta_pct, threshold_pct, decision = classic_by_hand([m for m, _ in off], [m for m, _ in on])
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    assert finding["stats"]["threshold_pct"] == pytest.approx(threshold_pct, rel=1e-9)
    assert decision == "adopted" and finding["verdict"]["decision"] == decision  # sorted input is far faster
    assert "imported from pyperf: each arm's runs ran back to back, not interleaved" in \
        " ".join(finding["verdict"]["warnings"])
    # the gate id comes from the benchmark's name; the files name the finding
    assert finding["meta"]["id"] == f"sort-{DATE}"
    assert sorted(p.name for p in (tmp_path / "findings").iterdir()) == [f"sort-{DATE}.json", f"sort-{DATE}.toml"]
    assert "VERDICT: ADOPTED" in done.stderr


def test_pyperf_metadata_becomes_provenance(tmp_path: Path) -> None:
    _, finding = _import(str(PYPERF / "off.json"), str(PYPERF / "on.json"), cwd=tmp_path)
    suite_meta = json.loads((PYPERF / "on.json").read_text())["metadata"]
    provenance = finding["provenance"]
    assert provenance["pyperf"]["metadata"]["on"]["python_version"] == suite_meta["python_version"]
    assert provenance["pyperf"]["metadata"]["on"]["timeit_setup"] == suite_meta["timeit_setup"]
    assert provenance["host"]["hostname"] == suite_meta["hostname"]
    assert provenance["host"]["cpu_model_name"] == suite_meta["cpu_model_name"]
    assert provenance["software"]["perf_version"] == suite_meta["perf_version"]
    assert [f["path"] for f in provenance["imported_from"]["files"]] == [str(PYPERF / "off.json"),
                                                                          str(PYPERF / "on.json")]
    # what differs between the files (here the setup and pyperf's calibrated loops) is the arms' config
    off_meta = json.loads((PYPERF / "off.json").read_text())["metadata"]
    differing = finding["gate"]["expect_diff"]
    assert {"file", "timeit_setup"} <= set(differing) and "timeit_stmt" not in differing
    assert all(off_meta[key] != suite_meta[key] for key in differing if key != "file")
    assert finding["runs"][-1]["config"]["timeit_setup"] == suite_meta["timeit_setup"]


def test_load_avg_reaches_the_window_and_the_load_rule(tmp_path: Path) -> None:
    data = json.loads((PYPERF / "on.json").read_text())
    data["benchmarks"][0]["runs"][3]["metadata"]["load_avg_1min"] = 40.0  # a busy machine during on-r3
    (tmp_path / "on.json").write_text(json.dumps(data))
    _, finding = _import(str(PYPERF / "off.json"), "on.json", cwd=tmp_path)
    loads = [load for _, load in _raw_runs(PYPERF / "off.json") + _raw_runs(tmp_path / "on.json")]
    assert 40.0 in loads and None not in loads
    assert [r["window"]["load1_max"] for r in finding["runs"]] == loads
    assert [r["window"]["samples"] for r in finding["runs"]] == [1] * len(loads)
    # rule (i), defaults load_limit 6, load_rel_median 1.5: by hand
    median = statistics.median(loads)
    assert [r["load_evidence"] for r in finding["runs"]] == [x > 6.0 or x > 1.5 * median for x in loads]
    assert finding["runs"][len(_raw_runs(PYPERF / "off.json")) + 2]["load_evidence"] is True
    assert not any("no load was sampled" in w for w in finding["verdict"]["warnings"])


def test_a_run_without_load_cannot_be_audited_and_other_machines_are_named(tmp_path: Path) -> None:
    data = json.loads((PYPERF / "on.json").read_text())
    del data["benchmarks"][0]["runs"][2]["metadata"]["load_avg_1min"]  # the second run with values
    data["metadata"]["hostname"] = "elsewhere"
    (tmp_path / "on.json").write_text(json.dumps(data))
    done = gate_invoke("import", "pyperf", str(PYPERF / "off.json"), "on.json", "--json", cwd=tmp_path)
    assert done.returncode == 3, done.stderr  # invalid, as a gate's run without window samples
    finding = json.loads(done.stdout)
    assert finding["verdict"]["decision"] == "invalid"
    assert [(r["label"], r["reason"]) for r in finding["runs"] if not r["used"]] == [
        ("on-r2", "no in-window load samples")]
    warnings = " ".join(finding["verdict"]["warnings"])
    assert "some runs carry no load_avg_1min" in warnings
    assert "recorded on different machines (hostname 'vm' vs 'elsewhere')" in warnings
    assert "hostname" not in finding["provenance"]["host"]  # the host holds only what both files agree on


def test_benchmark_chosen_by_name_in_suites(tmp_path: Path) -> None:
    off_path, on_path = PYPERF / "suite-off.json", PYPERF / "suite-on.json"
    done = gate_invoke("import", "pyperf", str(off_path), str(on_path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"gate: error: {off_path}: key 'benchmarks' holds 2 benchmarks (sort, sum); "
                                   "choose one with --benchmark NAME")
    for name in ("sort", "sum"):
        _, finding = _import(str(off_path), str(on_path), "--benchmark", name, cwd=tmp_path)
        off, on = _raw_runs(off_path, name), _raw_runs(on_path, name)
        delta_pct, threshold_pct, decision = classic_by_hand([m for m, _ in off], [m for m, _ in on])
        assert finding["meta"]["id"] == f"{name}-{DATE}"
        assert finding["gate"]["arms"] == {"off": "suite-off", "on": "suite-on"}
        assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
        assert finding["stats"]["threshold_pct"] == pytest.approx(threshold_pct, rel=1e-9)
        assert finding["verdict"]["decision"] == decision
        # suite-off's sort benchmark holds load_avg_1min in its metadata, not in its runs': inherited
        assert [r["window"]["load1_max"] for r in finding["runs"]] == [load for _, load in off + on]
    done = gate_invoke("import", "pyperf", str(off_path), str(on_path), "--benchmark", "nope", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"gate: error: {off_path}: --benchmark 'nope' is not one of its benchmarks " \
                                  "(sort, sum)"


def test_gzipped_files_read_like_plain_ones(tmp_path: Path) -> None:
    for name in ("off", "on"):
        (tmp_path / f"{name}.json.gz").write_bytes(gzip.compress((PYPERF / f"{name}.json").read_bytes()))
    _, plain = _import(str(PYPERF / "off.json"), str(PYPERF / "on.json"), cwd=tmp_path)
    _, zipped = _import("off.json.gz", "on.json.gz", "--id", "zipped", cwd=tmp_path)
    assert zipped["stats"]["delta_pct"] == plain["stats"]["delta_pct"]
    assert zipped["gate"]["arms"] == {"off": "off.json", "on": "on.json"}  # the stems of off.json.gz, on.json.gz


def _bad(tmp_path: Path, mutate: Any) -> str:
    data = json.loads((PYPERF / "on.json").read_text())
    mutate(data)
    (tmp_path / "on.json").write_text(json.dumps(data))
    return "on.json"


@pytest.mark.parametrize("make, key", [
    (lambda tmp: "missing.json", "missing.json: file not found"),
    (lambda tmp: (tmp / "on.json").write_text("not json") and "on.json", "on.json: not pyperf JSON output"),
    (lambda tmp: (tmp / "on.json").write_text('{"results": [{"command": "a", "times": [1]}]}') and "on.json",
     "on.json: key 'benchmarks' is missing or empty"),
    (lambda tmp: _bad(tmp, lambda d: d.update(version="0.9.6")), "on.json: key 'version' is '0.9.6'"),
    (lambda tmp: _bad(tmp, lambda d: d["benchmarks"][0]["runs"][2].update(values="fast")),
     "on.json: key 'benchmarks[0].runs[2].values' must be a list of numbers"),
    (lambda tmp: _bad(tmp, lambda d: d["benchmarks"][0].update(runs=d["benchmarks"][0]["runs"][:1])),
     "on.json: key 'benchmarks[0].runs' holds no run with values (only warmups)"),
    (lambda tmp: _bad(tmp, lambda d: d["metadata"].pop("name")), "on.json: key 'benchmarks[0].metadata.name'"),
    (lambda tmp: _bad(tmp, lambda d: d["metadata"].update(unit="byte")),
     "on.json: key 'metadata.unit' is 'byte' but"),
])
def test_bad_file_is_one_line_naming_file_and_key(tmp_path: Path, make: Any, key: str) -> None:
    on = make(tmp_path)
    done = gate_invoke("import", "pyperf", str(PYPERF / "off.json"), on, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gate: error: ") and key in line
    assert not (tmp_path / "findings").exists()


def test_analyze_on_a_pyperf_file_names_the_import_command(tmp_path: Path) -> None:
    done = gate_invoke("analyze", str(PYPERF / "off.json"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"gate: error: {PYPERF / 'off.json'}: is pyperf JSON; import it with: " \
                                  "gate import pyperf OFF.json ON.json"
    (tmp_path / "off.json.gz").write_bytes(gzip.compress((PYPERF / "off.json").read_bytes()))
    done = gate_invoke("analyze", "off.json.gz", cwd=tmp_path)
    assert done.returncode == 2 and "gate import pyperf" in done.stderr


@pytest.mark.parametrize("pattern, command", [
    ("hyperfine_sleep.json", "gate import hyperfine FILE"),
    ("imports/gobench/*.txt", "gate import gobench OLD.txt NEW.txt"),
    ("imports/criterion/**/sample.json", "gate import criterion FOLDER --off ID --on ID"),
    ("imports/criterion/**/estimates.json", "gate import criterion FOLDER --off ID --on ID"),
])
def test_analyze_on_other_tools_output_names_their_import_command(tmp_path: Path, pattern: str,
                                                                   command: str) -> None:
    source = sorted(FIXTURES.glob(pattern))[0]  # the real outputs those importers' tests read
    done = gate_invoke("analyze", str(source), cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"gate: error: {source}: is ")
    assert line.endswith((f"import it with: {command}", f"import its folder with: {command}"))

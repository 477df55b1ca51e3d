"""`gate import pytest-benchmark FILE --off NAME --on NAME` on real pytest-benchmark files
(tests/fixtures/imports/pytest-benchmark/SOURCES.md says how they were recorded): the arms are two benchmarks,
the runs their rounds (`stats.data`), and the decision equals the classic rule computed here from those."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, gate_invoke
from tests.imports_kit import DATE, classic_by_hand, import_finding

FOLDER = FIXTURES / "imports" / "pytest-benchmark"
SORT = FOLDER / "sort.json"


def _bench(name: str, path: Path = SORT) -> dict[str, Any]:
    (bench,) = [b for b in json.loads(path.read_text())["benchmarks"] if name in (b["name"], b["fullname"])]
    return bench


def _import(*args: str, cwd: Path) -> tuple[Any, dict[str, Any]]:
    return import_finding("pytest-benchmark", *args, cwd=cwd)


@pytest.mark.parametrize("off_name, on_name", [
    ("test_sort[shuffled]", "test_sort[presorted]"),
    ("test_sort.py::test_sort[shuffled]", "test_sort.py::test_sort[presorted]"),  # by fullname
])
def test_rounds_are_runs_and_decision_is_the_classic_rule(tmp_path: Path, off_name: str, on_name: str) -> None:
    done, finding = _import(str(SORT), "--off", off_name, "--on", on_name, "--policy", "classic", cwd=tmp_path)
    off, on = _bench("test_sort[shuffled]")["stats"]["data"], _bench("test_sort[presorted]")["stats"]["data"]
    assert finding["gate"]["arms"] == {"off": "test_sort[shuffled]", "on": "test_sort[presorted]"}
    assert [r["metrics"]["time_s"] for r in finding["runs"]] == off + on
    assert [r["label"] for r in finding["runs"]][:2] == ["test_sort[shuffled]-r1", "test_sort[shuffled]-r2"]
    assert finding["gate"]["n"] == min(len(off), len(on)) and finding["gate"]["primary"] == "time_s"
    delta_pct, threshold_pct, decision = classic_by_hand(off, on)
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    assert finding["stats"]["threshold_pct"] == pytest.approx(threshold_pct, rel=1e-9)
    assert decision == "adopted" and finding["verdict"]["decision"] == decision  # sorted input is far faster
    warnings = " ".join(finding["verdict"]["warnings"])
    assert "imported from pytest-benchmark: each arm's runs ran back to back, not interleaved" in warnings
    assert "imported from pytest-benchmark: no load was sampled" in warnings
    assert {r["window"]["samples"] for r in finding["runs"]} == {0}
    assert finding["runs"][0]["config"] == {"benchmark": "test_sort.py::test_sort[shuffled]",
                                            "param.order": "shuffled"}
    assert finding["meta"]["id"] == f"sort-{DATE}"  # the gate id comes from the file name
    assert "VERDICT: ADOPTED" in done.stderr


def test_machine_and_commit_info_become_provenance(tmp_path: Path) -> None:
    _, finding = _import(str(SORT), "--off", "test_sort[presorted]", "--on", "test_sum", "--policy", "classic",
                         cwd=tmp_path)
    raw = json.loads(SORT.read_text())
    assert finding["meta"]["commit"] == raw["commit_info"]["id"]
    assert finding["meta"]["branch"] == raw["commit_info"]["branch"]
    recorded = finding["provenance"]["pytest_benchmark"]
    assert recorded["version"] == raw["version"] and recorded["commit_info"] == raw["commit_info"]
    assert recorded["machine_info"]["node"] == raw["machine_info"]["node"]
    assert recorded["machine_info"]["cpu"]["brand_raw"] == raw["machine_info"]["cpu"]["brand_raw"]
    assert "flags" not in recorded["machine_info"]["cpu"]
    # a benchmark without params: its config is its fullname alone
    assert finding["runs"][-1]["config"] == {"benchmark": "test_sort.py::test_sum"}
    delta_pct, _, decision = classic_by_hand(_bench("test_sort[presorted]")["stats"]["data"],
                                      _bench("test_sum")["stats"]["data"])
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    assert finding["verdict"]["decision"] == decision


def test_saved_file_without_raw_data_says_how_to_get_it(tmp_path: Path) -> None:
    saved = FOLDER / "saved-without-data.json"
    assert "data" not in _bench("test_sort[shuffled]", saved)["stats"]  # the real tool left it out
    done = gate_invoke("import", "pytest-benchmark", str(saved), "--off", "test_sort[shuffled]", "--on",
                       "test_sort[presorted]", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"gate: error: {saved}: key 'benchmarks[0].stats.data' is missing")
    assert "--benchmark-save-data" in line
    assert not (tmp_path / "findings").exists()


@pytest.mark.parametrize("make, args, key", [
    (lambda tmp: "missing.json", (), "missing.json: file not found"),
    (lambda tmp: (tmp / "b.json").write_text("[1, 2") and "b.json", (),
     "b.json: not pytest-benchmark --benchmark-json output"),
    (lambda tmp: str(FIXTURES / "imports" / "pyperf" / "off.json"), (), "off.json: key 'machine_info' is missing"),
    (lambda tmp: (tmp / "b.json").write_text('{"machine_info": {}, "benchmarks": []}') and "b.json", (),
     "b.json: key 'benchmarks' is missing or empty"),
    (lambda tmp: str(SORT), ("--on", "test_sorted"),
     "sort.json: --on 'test_sorted' is not one of the benchmarks (test_sort[shuffled], test_sort[presorted], "
     "test_sum)"),
    (lambda tmp: str(SORT), ("--on", "test_sort.py::test_sort[shuffled]"),
     "sort.json: --off and --on name the same benchmark 'test_sort.py::test_sort[shuffled]'"),
])
def test_bad_input_is_one_line_naming_file_and_key(tmp_path: Path, make: Any, args: tuple[str, ...],
                                                   key: str) -> None:
    options = {"--off": "test_sort[shuffled]", "--on": "test_sort[presorted]"}
    options.update(zip(args[::2], args[1::2]))
    done = gate_invoke("import", "pytest-benchmark", make(tmp_path), *[x for kv in options.items() for x in kv],
                       cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gate: error: ") and key in line
    assert not (tmp_path / "findings").exists()


def test_bad_round_times_name_the_key(tmp_path: Path) -> None:
    data = json.loads(SORT.read_text())
    data["benchmarks"][1]["stats"]["data"] = []
    (tmp_path / "b.json").write_text(json.dumps(data))
    done = gate_invoke("import", "pytest-benchmark", "b.json", "--off", "test_sort[shuffled]", "--on",
                       "test_sort[presorted]", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "gate: error: b.json: key 'benchmarks[1].stats.data' must be a non-empty list " \
                                  "of seconds"


def test_both_arms_are_required(tmp_path: Path) -> None:
    done = gate_invoke("import", "pytest-benchmark", str(SORT), "--off", "test_sum", cwd=tmp_path)
    assert done.returncode == 2 and "--on" in done.stderr


def test_analyze_on_a_pytest_benchmark_file_names_the_import_command(tmp_path: Path) -> None:
    done = gate_invoke("analyze", str(SORT), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"gate: error: {SORT}: is pytest-benchmark JSON; import it with: " \
                                  "gate import pytest-benchmark FILE --off NAME --on NAME"


def test_by_default_ranks_decide_what_the_classic_threshold_cannot(tmp_path: Path) -> None:
    """Issue 30: sorting already-sorted numbers is ~150× faster, but σ_off of a dozen rounds is 125 %, so the
    classic threshold 2σ_off = 250 % calls it inconclusive; the import's default, the robust policy, adopts it,
    and records its name, version, floor and α in the finding."""
    _, finding = _import(str(BEFORE), str(AFTER), "--benchmark", "test_sort_numbers", cwd=tmp_path)
    assert finding["gate"]["policy"] == "robust" and finding["verdict"]["decision"] == "adopted"
    ranks = finding["ranks"]
    assert (ranks["version"], ranks["alpha"], ranks["floor_pct"]) == (1, 0.05, 1.0)
    assert ranks["high_pct"] < -99 and ranks["p_better"] < 1e-4
    assert finding["verdict"]["reason_codes"][0] == "rank_estimate"
    assert "inconclusive" in finding["verdict"]["reasons"][-1]  # the classic rule, beside it
    _, floored = _import(str(BEFORE), str(AFTER), "--benchmark", "test_sort_numbers", "--floor-pct", "99.95",
                         "--out", "floored", cwd=tmp_path)
    assert floored["gate"]["threshold"]["floor_pct"] == 99.95 and floored["verdict"]["decision"] != "adopted"


STORAGE = FOLDER / "storage"  # .benchmarks of two saved runs, `--benchmark-save=before` and `=after`
BEFORE, AFTER = (STORAGE / "Linux-CPython-3.11-64bit" / name for name in ("0001_before.json", "0002_after.json"))


@pytest.mark.parametrize("runs", [("0001", "0002"), ("0001_before", "0002_after"), (str(BEFORE), str(AFTER))])
def test_two_saved_runs_compare_one_benchmark(tmp_path: Path, runs: tuple[str, str]) -> None:
    """`pytest-benchmark compare 0001 0002`, its main workflow: one benchmark, the run before a change against
    the run after it; runs named by id are found in the storage folder as `compare` finds them."""
    _, finding = _import(*runs, "--storage", str(STORAGE), "--benchmark", "test_sort_numbers", "--policy", "classic",
                         cwd=tmp_path)
    off, on = (_bench("test_sort_numbers", path)["stats"]["data"] for path in (BEFORE, AFTER))
    assert finding["gate"]["arms"] == {"off": "0001_before", "on": "0002_after"}
    assert [r["metrics"]["time_s"] for r in finding["runs"]] == off + on
    assert finding["gate"]["expect_diff"] == ["run"] and finding["runs"][0]["config"] == {"run": str(BEFORE)}
    delta_pct, threshold_pct, decision = classic_by_hand(off, on)
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    assert finding["stats"]["threshold_pct"] == pytest.approx(threshold_pct, rel=1e-9)
    assert finding["verdict"]["decision"] == decision
    files = [Path(f["path"]).name for f in finding["provenance"]["imported_from"]["files"]]
    assert files == ["0001_before.json", "0002_after.json"]
    assert set(finding["provenance"]["pytest_benchmark"]["runs"]) == {"0001_before", "0002_after"}


def test_two_saved_runs_need_the_benchmark_named_when_they_share_several(tmp_path: Path) -> None:
    done = gate_invoke("import", "pytest-benchmark", "0001", "0002", "--storage", str(STORAGE), cwd=tmp_path)
    assert done.returncode == 2 and "share 2 benchmarks (test_sort_numbers, test_sum); choose one with --benchmark" \
        in done.stderr
    done = gate_invoke("import", "pytest-benchmark", "0001", "0002", "--storage", str(STORAGE), "--off", "test_sum",
                       "--on", "test_sum", cwd=tmp_path)
    assert done.returncode == 2 and "choose the benchmark with --benchmark NAME, not --off/--on" in done.stderr
    done = gate_invoke("import", "pytest-benchmark", "0009", "0002", "--storage", str(STORAGE), cwd=tmp_path)
    assert done.returncode == 2 and f"0009: neither a file nor a run saved in {STORAGE}" in done.stderr


def test_an_unversioned_commit_is_not_a_revision(tmp_path: Path) -> None:
    """Outside a git or hg repository pytest-benchmark writes commit `unversioned` (utils.get_commit_info):
    kept in its commit_info, never recorded as the finding's git revision."""
    assert json.loads(BEFORE.read_text())["commit_info"]["id"] == "unversioned"
    _, finding = _import(str(BEFORE), "--off", "test_sum", "--on", "test_sort_numbers", cwd=tmp_path)
    assert not finding["meta"].get("commit") and "rev" not in finding["provenance"]["git"].get("start", {})
    assert finding["provenance"]["pytest_benchmark"]["commit_info"]["id"] == "unversioned"


@pytest.mark.parametrize("speedup", [15, 35])
def test_a_heavy_tailed_speed_up_is_adopted_by_ranks_not_by_the_classic_threshold(tmp_path: Path,
                                                                                   speedup: int) -> None:
    """Issue 30's pytest-benchmark cases: a 15× and a 35× speed-up over hundreds of rounds where 2 % of rounds are
    5–30× slower (a GC pause, a page fault): σ_off is hundreds of percent, so the classic rule, with its
    threshold 2σ_off, cannot tell (inconclusive); the default robust policy adopts, its interval near the truth."""
    import numpy as np

    rng = np.random.default_rng(speedup)

    def rounds(median: float, n: int) -> list[float]:
        times = median * np.exp(0.05 * rng.standard_normal(n))
        slow = rng.random(n) < 0.02
        times[slow] *= rng.uniform(5, 30, int(slow.sum()))
        return times.tolist()

    data = json.loads(SORT.read_text())
    off, on = (b for b in data["benchmarks"] if b["name"] in ("test_sort[shuffled]", "test_sort[presorted]"))
    off["stats"]["data"], on["stats"]["data"] = rounds(1e-3, 600), rounds(1e-3 / speedup, 600)
    source = tmp_path / "tail.json"
    source.write_text(json.dumps(data))
    names = ("--off", "test_sort[shuffled]", "--on", "test_sort[presorted]")
    _, classic = _import(str(source), *names, "--policy", "classic", "--out", "classic", cwd=tmp_path)
    assert classic["verdict"]["decision"] == "inconclusive" and classic["stats"]["threshold_pct"] > 100
    _, robust = _import(str(source), *names, cwd=tmp_path)
    assert robust["verdict"]["decision"] == "adopted"
    truth = 100 * (1 / speedup - 1)
    assert robust["ranks"]["low_pct"] < truth + 0.5 and truth - 0.5 < robust["ranks"]["high_pct"]

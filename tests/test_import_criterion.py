"""`gate import criterion DIR --off ID --on ID` on real Criterion.rs output committed to public repositories
(tests/fixtures/imports/criterion/SOURCES.md names them): each sample is one run, `times[i] / iters[i]`
nanoseconds per iteration in seconds, and the decision equals the classic rule computed here from the raw
sample.json values."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from tests.imports_kit import classic_by_hand, import_error, import_finding

CRITERION = FIXTURES / "imports" / "criterion"
FIB = CRITERION / "fib"  # bench_function("fib 20 - slow") and ("fib 20 - fast"), criterion 0.3
HASHTABLES = CRITERION / "hashtables"  # benchmark_group("HashMap compared get"), criterion 0.4


def _per_iteration_ns(folder: Path) -> list[float]:
    sample = json.loads((folder / "sample.json").read_text())
    return [t / i for t, i in zip(sample["times"], sample["iters"])]


def _import(root: Path, *args: str, cwd: Path) -> dict[str, Any]:
    return import_finding("criterion", str(root), *args, cwd=cwd)[1]


def _fails(root: Path, *args: str, cwd: Path) -> str:
    return import_error("criterion", str(root), *args, cwd=cwd)


def test_samples_are_runs_and_decision_is_the_classic_rule(tmp_path: Path) -> None:
    finding = _import(FIB, "--off", "fib 20 - slow", "--on", "fib 20 - fast", cwd=tmp_path)
    slow, fast = _per_iteration_ns(FIB / "fib 20 - slow" / "new"), _per_iteration_ns(FIB / "fib 20 - fast" / "new")
    rows = finding["runs"]
    assert len(rows) == len(slow) + len(fast) == 200
    assert [r["arm"] for r in rows] == ["fib 20 - slow"] * 100 + ["fib 20 - fast"] * 100
    assert [r["metrics"]["time_s"] for r in rows] == pytest.approx([ns / 1e9 for ns in slow + fast], rel=1e-12)
    delta_pct, threshold_pct, decision = classic_by_hand(slow, fast)
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    assert finding["stats"]["threshold_pct"] == pytest.approx(threshold_pct, rel=1e-9)
    assert finding["verdict"]["decision"] == decision == "adopted"
    assert finding["gate"]["primary"] == "time_s" and finding["gate"]["order"] == "blocked"
    assert finding["gate"]["expect_diff"] == ["benchmark"]
    assert "not interleaved" in " ".join(finding["verdict"]["warnings"])


def test_arm_means_agree_with_criterions_own_mean_estimate(tmp_path: Path) -> None:
    # Criterion's `mean` is the mean of the per-iteration averages: the same runs, computed by Criterion
    finding = _import(FIB, "--off", "fib 20 - slow", "--on", "fib 20 - fast", cwd=tmp_path)
    for arm, stat in (("fib 20 - slow", "mean_off"), ("fib 20 - fast", "mean_on")):
        estimates = json.loads((FIB / arm / "new" / "estimates.json").read_text())
        assert finding["stats"][stat] == pytest.approx(estimates["mean"]["point_estimate"] / 1e9, rel=1e-9)
        kept = finding["provenance"]["criterion"]["benchmarks"][arm]
        assert kept["estimates"]["mean"]["point_estimate_ns"] == estimates["mean"]["point_estimate"]
        assert kept["estimates"]["slope"]["upper_bound_ns"] == estimates["slope"]["confidence_interval"]["upper_bound"]
        assert (kept["sampling_mode"], kept["samples"], kept["baseline"]) == ("Linear", 100, "new")
    sources = [Path(f["path"]) for f in finding["provenance"]["imported_from"]["files"]]
    assert [(p.parent.parent.name, p.name) for p in sources] == [
        ("fib 20 - slow", "sample.json"), ("fib 20 - slow", "estimates.json"),
        ("fib 20 - fast", "sample.json"), ("fib 20 - fast", "estimates.json")]


def test_ids_are_criterions_full_ids_or_its_folder_names(tmp_path: Path) -> None:
    # the function id `std::collections::HashMap` is stored in the folder `std__collections__HashMap`
    by_id = _import(HASHTABLES, "--off", "HashMap compared get/std::collections::HashMap", "--on",
                    "HashMap compared get/OpenHashMap", cwd=tmp_path / "a")
    by_folder = _import(HASHTABLES / "HashMap compared get", "--off", "std__collections__HashMap", "--on",
                        "OpenHashMap", cwd=tmp_path / "b")
    assert by_id["gate"]["arms"] == by_folder["gate"]["arms"] == {
        "off": "HashMap compared get/std::collections::HashMap", "on": "HashMap compared get/OpenHashMap"}
    group = HASHTABLES / "HashMap compared get"
    std, open_map = _per_iteration_ns(group / "std__collections__HashMap" / "new"), \
        _per_iteration_ns(group / "OpenHashMap" / "new")
    delta_pct, _, decision = classic_by_hand(std, open_map)
    for finding in (by_id, by_folder):
        assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
        assert finding["verdict"]["decision"] == decision


def test_two_baselines_of_one_benchmark(tmp_path: Path) -> None:
    # `cargo bench -- --save-baseline main` keeps a baseline beside `new`; here main holds the slow samples
    bench = tmp_path / "criterion" / "fib 20"
    shutil.copytree(FIB / "fib 20 - fast" / "new", bench / "new")
    shutil.copytree(FIB / "fib 20 - slow" / "new", bench / "main")
    finding = _import(bench, "--off", "@main", "--on", "@new", cwd=tmp_path)
    assert finding["gate"]["arms"] == {"off": "fib 20 - fast@main", "on": "fib 20 - fast@new"}
    assert finding["gate"]["expect_diff"] == ["baseline"]
    delta_pct, _, _ = classic_by_hand(_per_iteration_ns(bench / "main"), _per_iteration_ns(bench / "new"))
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    again = _import(tmp_path / "criterion", "--off", "fib 20 - fast@main", "--on", "fib 20 - fast",
                    cwd=tmp_path / "again")
    assert again["stats"]["delta_pct"] == finding["stats"]["delta_pct"]
    line = _fails(bench, "--off", "@nightly", "--on", "@new", cwd=tmp_path / "bad")
    assert line.endswith(f"{bench / 'nightly' / 'sample.json'}: file not found (benchmark 'fib 20 - fast' has the "
                         "baselines main, new)")


def test_unknown_id_lists_the_ids_found(tmp_path: Path) -> None:
    line = _fails(FIB, "--off", "fib/20", "--on", "fib 20 - fast", cwd=tmp_path)
    assert line.endswith(f"{FIB}: --off 'fib/20' is not one of the benchmarks found ('fib 20 - fast', "
                         "'fib 20 - slow')")
    line = _fails(FIB, "--off", "@base", "--on", "fib 20 - fast", cwd=tmp_path)
    assert line.endswith(f"{FIB}: --off '@base' names no benchmark, and the folder holds 2 ('fib 20 - fast', "
                         "'fib 20 - slow'); write ID@BASELINE")
    line = _fails(FIB, "--off", "fib 20 - fast", "--on", "fib 20 - fast", cwd=tmp_path)
    assert "--off and --on name the same benchmark and baseline" in line


def test_missing_folder_or_samples(tmp_path: Path) -> None:
    line = _fails(tmp_path / "target" / "criterion", "--off", "a", "--on", "b", cwd=tmp_path)
    assert line.endswith(f"{tmp_path / 'target' / 'criterion'}: folder not found (expected Criterion's output, "
                         "e.g. target/criterion)")
    (tmp_path / "empty").mkdir()
    line = _fails(tmp_path / "empty", "--off", "a", "--on", "b", cwd=tmp_path)
    assert f"{tmp_path / 'empty'}: no Criterion benchmark found" in line


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda s: {**s, "times": s["times"][:-1]}, "keys 'iters' and 'times' must be as long as each other "
                                                "(100 and 99 entries)"),
    (lambda s: {**s, "iters": [0.0, *s["iters"][1:]]}, "key 'iters[0]' is 0.0; a sample runs at least one iteration"),
    (lambda s: {**s, "times": ["fast", *s["times"][1:]]}, "key 'times' must be a non-empty list of numbers"),
    (lambda s: {**s, "sampling_mode": "Auto"}, "key 'sampling_mode' is 'Auto', not one of Linear, Flat"),
])
def test_malformed_sample_names_file_and_key(tmp_path: Path, edit: Any, problem: str) -> None:
    root = tmp_path / "criterion"
    shutil.copytree(FIB, root)
    sample_path = root / "fib 20 - fast" / "new" / "sample.json"
    sample_path.write_text(json.dumps(edit(json.loads(sample_path.read_text()))))
    line = _fails(root, "--off", "fib 20 - slow", "--on", "fib 20 - fast", cwd=tmp_path)
    assert line.endswith(f"{sample_path}: {problem}")


def test_sample_that_is_not_json(tmp_path: Path) -> None:
    root = tmp_path / "criterion"
    shutil.copytree(FIB, root)
    sample_path = root / "fib 20 - slow" / "new" / "sample.json"
    sample_path.write_text('{"sampling_mode": "Linear", "iters": [1.0,')
    line = _fails(root, "--off", "fib 20 - slow", "--on", "fib 20 - fast", cwd=tmp_path)
    assert f"{sample_path}: not Criterion's sample.json:" in line


TRACK = CRITERION / "track"  # criterion 0.3.1: sample.json as the bare pair [[iters...], [times...]]
SORTBENCH = CRITERION / "sortbench"  # criterion 0.3.6 run here: --save-baseline before, then --baseline before


def test_base_right_after_a_default_run_is_new_and_is_refused(tmp_path: Path) -> None:
    """A plain `cargo bench` copies new/ into base/ after comparing, so @base vs @new is one sample twice:
    refused with the reason, Criterion's own comparison of that run, and the workflow that keeps two runs."""
    bench = FIB / "fib 20 - slow"
    assert (bench / "base" / "sample.json").read_bytes() == (bench / "new" / "sample.json").read_bytes()
    change = json.loads((bench / "change" / "estimates.json").read_text())
    line = _fails(bench, "--off", "@base", "--on", "@new", cwd=tmp_path)
    assert "hold the same sample (Criterion copies new/ into the baseline it saves" in line
    assert f"mean {100 * change['mean']['point_estimate']:+.2f} %" in line and "change/estimates.json" in line
    assert "--save-baseline before" in line and "--baseline before" in line and "ID@before against ID@new" in line
    old = TRACK / "Monitoring Change"  # the same copy in criterion 0.3.1
    assert "hold the same sample" in _fails(old, "--off", "@base", "--on", "@new", cwd=tmp_path / "old")


def test_criterions_own_comparison_is_shown_beside_the_delta(tmp_path: Path) -> None:
    """`--save-baseline before` on the old code, `--baseline before` on the new: before/ and new/ differ, and
    change/estimates.json is Criterion's comparison of the two, which the finding shows next to its Δ."""
    bench = SORTBENCH / "sort 10k"
    finding = _import(bench, "--off", "@before", "--on", "@new", cwd=tmp_path)
    delta_pct, threshold_pct, decision = classic_by_hand(_per_iteration_ns(bench / "before"),
                                                         _per_iteration_ns(bench / "new"))
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    change = json.loads((bench / "change" / "estimates.json").read_text())
    recorded = finding["provenance"]["criterion"]["change"]
    assert recorded["mean"]["change_frac"] == change["mean"]["point_estimate"]
    assert recorded["median"]["lower_bound_frac"] == change["median"]["confidence_interval"]["lower_bound"]
    (line,) = [w for w in finding["verdict"]["warnings"] if "Criterion's own comparison" in w]
    interval = change["mean"]["confidence_interval"]
    assert (f"mean {100 * change['mean']['point_estimate']:+.2f} % (95 % CI [{100 * interval['lower_bound']:+.2f}, "
            f"{100 * interval['upper_bound']:+.2f}] %)") in line
    files = [Path(f["path"]).parent.name for f in finding["provenance"]["imported_from"]["files"]]
    assert files.count("change") == 1
    # two different benchmarks: change/ is about neither comparison, so it is not shown
    other = _import(FIB, "--off", "fib 20 - slow", "--on", "fib 20 - fast", cwd=tmp_path / "two")
    assert "change" not in other["provenance"]["criterion"]


def test_criterion_0_2_to_0_3_2_samples_are_read(tmp_path: Path) -> None:
    """Before 0.3.3 sample.json was `[[iters...], [times...]]` (`fs::save(&(data.x(), data.y()))`) and
    estimates.json's keys were `Mean`, `Median`, ...: read, and the format recorded."""
    finding = _import(TRACK, "--off", "Serialisation with bincode", "--on", "Serialisation with rmp-serde",
                      cwd=tmp_path)
    off_iters, off_times = json.loads((TRACK / "Serialisation with bincode" / "new" / "sample.json").read_text())
    on_iters, on_times = json.loads((TRACK / "Serialisation with rmp-serde" / "new" / "sample.json").read_text())
    off = [t / i for t, i in zip(off_times, off_iters)]
    on = [t / i for t, i in zip(on_times, on_iters)]
    assert [r["metrics"]["time_s"] for r in finding["runs"]] == pytest.approx([v / 1e9 for v in off + on], rel=1e-12)
    delta_pct, _, decision = classic_by_hand(off, on)
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    assert finding["verdict"]["decision"] == decision
    described = finding["provenance"]["criterion"]["benchmarks"]["Serialisation with bincode"]
    assert described["format"] == "criterion 0.2 to 0.3.2" and described["sampling_mode"] == "Linear"
    estimates = json.loads((TRACK / "Serialisation with bincode" / "new" / "estimates.json").read_text())
    assert described["estimates"]["mean"]["point_estimate_ns"] == estimates["Mean"]["point_estimate"]
    assert described["estimates"]["median_abs_dev"]["point_estimate_ns"] == estimates["MedianAbsDev"]["point_estimate"]


def test_a_sample_in_neither_format_names_both(tmp_path: Path) -> None:
    root = tmp_path / "criterion"
    shutil.copytree(FIB, root)
    sample_path = root / "fib 20 - fast" / "new" / "sample.json"
    sample_path.write_text("[1, 2, 3]")
    line = _fails(root, "--off", "fib 20 - slow", "--on", "fib 20 - fast", cwd=tmp_path)
    assert line.endswith(f"{sample_path}: not a sample file Criterion writes (understood: criterion 0.3.3+ "
                         "{sampling_mode, iters, times}; criterion 0.2 to 0.3.2 [[iters...], [times...]])")

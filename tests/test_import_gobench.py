"""`gate import gobench OLD.txt NEW.txt` on real `go test -bench -count 6 -benchmem` output (tests/fixtures/
imports/gobench/SOURCES.md says how it was recorded): each result line of the benchmark is one run, ns/op the
primary in seconds, B/op, allocs/op and MB/s metrics usable as guards, and the decision equals the classic rule
computed here from the file's text."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, gate_invoke
from tests.imports_kit import classic_by_hand, import_error, import_finding

GOBENCH = FIXTURES / "imports" / "gobench"
OLD, NEW = GOBENCH / "old.txt", GOBENCH / "new.txt"


def _raw(path: Path, bench: str) -> list[dict[str, float]]:
    """unit → value of each `Benchmark<bench>-2` line, read straight off the text."""
    rows = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == f"Benchmark{bench}-2":
            rows.append({unit: float(value) for value, unit in zip(fields[2::2], fields[3::2])})
    assert len(rows) == 6, f"{path} should hold -count 6 lines of {bench}"
    return rows


def _import(*args: str, cwd: Path) -> tuple[Any, dict[str, Any]]:
    return import_finding("gobench", *args, cwd=cwd)


def _fails(*args: str, cwd: Path) -> str:
    return import_error("gobench", *args, cwd=cwd)


def test_each_line_is_a_run_and_decision_is_the_classic_rule(tmp_path: Path) -> None:
    _, finding = _import(str(OLD), str(NEW), "--bench", "Parse", cwd=tmp_path)
    old, new = _raw(OLD, "Parse"), _raw(NEW, "Parse")
    rows = finding["runs"]
    assert [(r["arm"], r["label"]) for r in rows] == [("old", f"old-r{k}") for k in range(1, 7)] + \
        [("new", f"new-r{k}") for k in range(1, 7)]
    assert [r["metrics"]["time_s"] for r in rows] == pytest.approx([r["ns/op"] / 1e9 for r in old + new], rel=1e-12)
    assert [r["metrics"]["B/op"] for r in rows] == [r["B/op"] for r in old + new]
    assert [r["metrics"]["allocs/op"] for r in rows] == [r["allocs/op"] for r in old + new]
    delta_pct, threshold_pct, decision = classic_by_hand([r["ns/op"] for r in old], [r["ns/op"] for r in new])
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    assert finding["stats"]["threshold_pct"] == pytest.approx(threshold_pct, rel=1e-9)
    assert finding["verdict"]["decision"] == decision
    assert finding["gate"]["primary"] == "time_s" and finding["gate"]["order"] == "blocked"
    assert finding["gate"]["arms"] == {"off": "old", "on": "new"}
    warnings = " ".join(finding["verdict"]["warnings"])
    assert "not interleaved" in warnings and "no load was sampled" in warnings


def test_configuration_lines_reach_the_provenance(tmp_path: Path) -> None:
    _, finding = _import(str(OLD), str(NEW), "--bench", "BenchmarkJoin", cwd=tmp_path)
    arms = finding["provenance"]["gobench"]["arms"]
    config = {line.split(":", 1)[0]: line.split(":", 1)[1].strip()
              for line in OLD.read_text().splitlines()[:4]}
    assert arms["old"]["config"] == config and set(config) == {"goos", "goarch", "pkg", "cpu"}
    assert arms["new"]["benchmark"] == "BenchmarkJoin-2" and arms["new"]["gomaxprocs"] == 2
    assert arms["old"]["iterations"] == [int(line.split()[1]) for line in OLD.read_text().splitlines()
                                         if line.startswith("BenchmarkJoin-2")]
    files = finding["provenance"]["imported_from"]["files"]
    assert [Path(f["path"]).name for f in files] == ["old.txt", "new.txt"]


def test_bytes_per_op_guard_fails_a_faster_benchmark_that_allocates_more(tmp_path: Path) -> None:
    # Dedupe's new version (a map) is ~3x faster but allocates 29981 B/op instead of 8192
    done, finding = _import(str(OLD), str(NEW), "--bench", "Dedupe", "--guard", "B/op:1000", "--guard",
                            "allocs/op:2", cwd=tmp_path)
    old, new = _raw(OLD, "Dedupe"), _raw(NEW, "Dedupe")
    b_delta = statistics.fmean(r["B/op"] for r in new) - statistics.fmean(r["B/op"] for r in old)
    alloc_delta = statistics.fmean(r["allocs/op"] for r in new) - statistics.fmean(r["allocs/op"] for r in old)
    guards = finding["guards"]
    assert guards["B/op"]["delta"] == pytest.approx(b_delta) and b_delta > 1000
    assert (guards["B/op"]["direction"], guards["B/op"]["limit"], guards["B/op"]["pass"]) == ("lower", 1000, False)
    assert guards["allocs/op"]["delta"] == pytest.approx(alloc_delta) and guards["allocs/op"]["pass"] is True
    delta_pct, _, decision = classic_by_hand([r["ns/op"] for r in old], [r["ns/op"] for r in new])
    assert decision == "adopted" and finding["stats"]["delta_pct"] == pytest.approx(delta_pct, rel=1e-9)
    assert finding["verdict"]["decision"] == "guard_failed"
    failed = gate_invoke("import", "gobench", str(OLD), str(NEW), "--bench", "Dedupe", "--guard", "B/op",
                         "--fail-on", "regression", "--out", str(tmp_path / "again"), cwd=tmp_path)
    assert failed.returncode == 1


def test_throughput_guard_is_higher_is_better(tmp_path: Path) -> None:
    # Join reports MB/s (b.SetBytes): new is faster, so MB/s rises and a higher-is-better guard holds
    _, finding = _import(str(OLD), str(NEW), "--bench", "Join", "--guard", "MB/s", "--guard", "B/op", cwd=tmp_path)
    old, new = _raw(OLD, "Join"), _raw(NEW, "Join")
    mbps = finding["guards"]["MB/s"]
    assert mbps["direction"] == "higher" and mbps["pass"] is True
    mbps_delta = statistics.fmean(r["MB/s"] for r in new) - statistics.fmean(r["MB/s"] for r in old)
    assert mbps["delta"] == pytest.approx(mbps_delta) and mbps_delta > 0
    assert finding["verdict"]["decision"] == "adopted"


def test_the_benchmark_must_be_chosen_when_the_files_hold_several(tmp_path: Path) -> None:
    line = _fails(str(OLD), str(NEW), cwd=tmp_path)
    assert str(OLD) in line and "3 benchmarks (Dedupe, Join, Parse)" in line and "--bench" in line
    line = _fails(str(OLD), str(NEW), "--bench", "Sort", cwd=tmp_path)
    assert str(OLD) in line and "'Sort' is not one of its benchmarks (Dedupe, Join, Parse)" in line


def test_only_benchmark_is_the_default(tmp_path: Path) -> None:
    for name in ("old.txt", "new.txt"):
        kept = [line for line in (GOBENCH / name).read_text().splitlines() if not line.startswith("Benchmark")
                or line.startswith("BenchmarkParse-2")]
        (tmp_path / name).write_text("\n".join(kept) + "\n")
    _, finding = _import(str(tmp_path / "old.txt"), str(tmp_path / "new.txt"), cwd=tmp_path)
    assert finding["gate"]["id"] == "parse" and len(finding["runs"]) == 12


def test_missing_file_and_bad_guards(tmp_path: Path) -> None:
    line = _fails(str(tmp_path / "absent.txt"), str(NEW), cwd=tmp_path)
    assert line.endswith(f"{tmp_path / 'absent.txt'}: file not found")
    line = _fails(str(OLD), str(NEW), "--bench", "Parse", "--guard", "MB/s", cwd=tmp_path)
    assert "--guard 'MB/s' is not a per-run metric of this file (metrics: B/op, allocs/op)" in line
    line = _fails(str(OLD), str(NEW), "--bench", "Parse", "--guard", "B/op:lots", cwd=tmp_path)
    assert "--guard 'B/op:lots': MAX_WORSE must be a number ≥ 0" in line
    line = _fails(str(OLD), str(NEW), "--bench", "Parse", "--guard", "ns/op", cwd=tmp_path)
    assert "primary metric" in line


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda f: f[:1] + ["many"] + f[2:], "the iteration count 'many' is not a whole number"),
    (lambda f: f[:-1], "'398' is a value without a unit"),
    (lambda f: f[:2] + ["fast"] + f[3:], "'fast' (before 'ns/op') is not a number"),
    (lambda f: f[:2] + f[4:], "no ns/op value"),
])
def test_malformed_result_line_names_file_and_line(tmp_path: Path, edit: Any, problem: str) -> None:
    lines = OLD.read_text().splitlines()
    number = next(k for k, line in enumerate(lines, 1) if line.startswith("BenchmarkJoin-2"))
    lines[number - 1] = "\t".join(edit(lines[number - 1].split()))
    broken = tmp_path / "old.txt"
    broken.write_text("\n".join(lines) + "\n")
    line = _fails(str(broken), str(NEW), "--bench", "Join", cwd=tmp_path)
    assert f"{broken}:{number}: benchmark line: {problem}" in line


def test_text_without_results_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("goos: linux\nPASS\nok  \texample.com/x\t0.01s\n")
    line = _fails(str(empty), str(NEW), cwd=tmp_path)
    assert f"{empty}: no benchmark result line found" in line


def test_gomaxprocs_variants_are_separate_benchmarks(tmp_path: Path) -> None:
    # cpu.txt: -cpu 1,2 gives `BenchmarkParse` (GOMAXPROCS 1) and `BenchmarkParse-2`, as benchstat names them
    cpu = GOBENCH / "cpu.txt"
    line = _fails(str(cpu), str(NEW), cwd=tmp_path)
    assert "4 benchmarks (Dedupe, Dedupe-2, Parse, Parse-2)" in line
    _, finding = _import(str(cpu), str(NEW), "--bench", "Parse-2", cwd=tmp_path)
    parse_2 = [float(line.split()[2]) / 1e9 for line in cpu.read_text().splitlines()
               if line.startswith("BenchmarkParse-2 ")]
    off_rows = [r["metrics"]["time_s"] for r in finding["runs"] if r["arm"] == "cpu"]
    assert len(parse_2) == 2 and off_rows == pytest.approx(parse_2, rel=1e-12)
    assert finding["provenance"]["gobench"]["arms"]["cpu"]["gomaxprocs"] == 2
    _, finding = _import(str(cpu), str(NEW), "--bench", "Parse", cwd=tmp_path / "one")
    assert finding["provenance"]["gobench"]["arms"]["cpu"]["benchmark"] == "BenchmarkParse"
    assert any("different GOMAXPROCS (1 vs 2)" in w for w in finding["verdict"]["warnings"])


def test_a_benchmark_that_prints_to_stdout_is_refused_at_its_line(tmp_path: Path) -> None:
    prints = GOBENCH / "prints.txt"
    number = next(k for k, line in enumerate(prints.read_text().splitlines(), 1) if line.startswith("Benchmark"))
    line = _fails(str(prints), str(NEW), cwd=tmp_path)
    assert f"{prints}:{number}: benchmark line: the iteration count 'hello' is not a whole number" in line
    assert "b.Log" in line


def _lines(path: Path, head: str, pkg: str = "") -> list[float]:
    """ns/op of each result line whose first field is `head` (in the `pkg:` section `pkg`, if given)."""
    values, section = [], ""
    for line in path.read_text().splitlines():
        if line.startswith("pkg: "):
            section = line.split(": ", 1)[1]
        fields = line.split()
        if fields and fields[0] == head and (not pkg or section == pkg):
            values.append(float(fields[2]))
    return values


def test_gomaxprocs_variants_are_two_findings_never_one(tmp_path: Path) -> None:
    """`-cpu 1,2`: `Join` and `Join-2` are two benchmarks, so two gate ids; the second import no longer
    replaces the first, and the provenance names the benchmark that was imported."""
    old, new = GOBENCH / "cpu-join-old.txt", GOBENCH / "cpu-join-new.txt"
    _, join = _import(str(old), str(new), "--bench", "Join", cwd=tmp_path)
    _, join_2 = _import(str(old), str(new), "--bench", "Join-2", cwd=tmp_path)
    assert (join["gate"]["id"], join_2["gate"]["id"]) == ("join", "join-2")
    assert sorted(p.name for p in (tmp_path / "findings").glob("*.json")) == ["join-2-2026-11-30.json",
                                                                               "join-2026-11-30.json"]
    assert join_2["provenance"]["gobench"]["benchmark"] == "Join-2"
    assert join_2["provenance"]["gobench"]["arms"]["cpu-join-old"]["benchmark"] == "BenchmarkJoin-2"
    for finding, head in ((join, "BenchmarkJoin"), (join_2, "BenchmarkJoin-2")):
        off = [r["metrics"]["time_s"] for r in finding["runs"] if r["arm"] == "cpu-join-old"]
        assert off == pytest.approx([v / 1e9 for v in _lines(old, head)], rel=1e-12) and len(off) == 3


def test_a_benchmark_name_in_two_packages_is_two_benchmarks(tmp_path: Path) -> None:
    """`go test -bench . ./...` prints one `pkg:` section per package; benchstat groups by package, so
    `BenchmarkJoin` of strjoin and of bufjoin are two benchmarks, chosen with --pkg."""
    old, new = GOBENCH / "two-old.txt", GOBENCH / "two-new.txt"
    line = _fails(str(old), str(new), "--bench", "Join", cwd=tmp_path)
    assert "several packages; choose one with --pkg (example.com/twojoins/bufjoin, example.com/twojoins/strjoin)" in line
    _, strjoin = _import(str(old), str(new), "--bench", "Join", "--pkg", "strjoin", cwd=tmp_path)
    _, bufjoin = _import(str(old), str(new), "--pkg", "example.com/twojoins/bufjoin", cwd=tmp_path)
    assert (strjoin["gate"]["id"], bufjoin["gate"]["id"]) == ("strjoin-join", "bufjoin-join")
    for finding, pkg in ((strjoin, "example.com/twojoins/strjoin"), (bufjoin, "example.com/twojoins/bufjoin")):
        runs = {arm: [r["metrics"]["time_s"] for r in finding["runs"] if r["arm"] == arm] for arm in ("two-old", "two-new")}
        assert runs["two-old"] == pytest.approx([v / 1e9 for v in _lines(old, "BenchmarkJoin-2", pkg)], rel=1e-12)
        assert runs["two-new"] == pytest.approx([v / 1e9 for v in _lines(new, "BenchmarkJoin-2", pkg)], rel=1e-12)
        assert finding["provenance"]["gobench"]["arms"]["two-old"]["package"] == pkg
    assert strjoin["verdict"]["decision"] == "adopted"  # strings.Builder with Grow against +=
    line = _fails(str(old), str(new), "--bench", "Join", "--pkg", "nojoin", cwd=tmp_path / "none")
    assert "--pkg 'nojoin' is not one of its packages" in line


def test_an_import_never_replaces_a_finding_of_other_evidence(tmp_path: Path) -> None:
    """The same id for another benchmark of the same files is refused and the finding there is kept; the same
    evidence again (another guard) is written over it."""
    _, join = _import(str(OLD), str(NEW), "--bench", "Join", "--id", "strings", cwd=tmp_path)
    written = (tmp_path / "findings" / "strings-2026-11-30.json").read_text()
    done = gate_invoke("import", "gobench", str(OLD), str(NEW), "--bench", "Parse", "--id", "strings", "--date",
                       "2026-11-30", "--out", str(tmp_path / "findings"), cwd=tmp_path)
    assert done.returncode == 2 and "holds a finding of other evidence ('Join (go test -bench)')" in done.stderr
    assert "--id" in done.stderr and (tmp_path / "findings" / "strings-2026-11-30.json").read_text() == written
    _, again = _import(str(OLD), str(NEW), "--bench", "Join", "--id", "strings", "--guard", "B/op", cwd=tmp_path)
    assert "B/op" in again["guards"] and again["runs"] == join["runs"]

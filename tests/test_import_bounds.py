"""Another tool's output is read within bounds: its size (before reading), a gzip's inflated size, its JSON
nesting, and every value finite and plausible. Each attack is refused with exit 2 and one line naming the
file and the problem, never a traceback or a MemoryError."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gatekit import storage
from tests.conftest import FIXTURES
from tests.imports_kit import import_error

IMPORTS = FIXTURES / "imports"
SORT = IMPORTS / "pytest-benchmark" / "sort.json"
GOBENCH = IMPORTS / "gobench"


def _hyperfine(tmp_path: Path, off_times: list[float]) -> Path:
    results = [{"command": "off", "times": off_times}, {"command": "on", "times": [0.02, 0.021, 0.022]}]
    path = tmp_path / "h.json"
    path.write_text(json.dumps({"results": results}))
    return path


def test_hyperfine_times_too_large_to_sum_are_refused_naming_benchmark_and_field(tmp_path: Path) -> None:
    path = _hyperfine(tmp_path, [1e308, 1e308, 1e308])
    line = import_error("hyperfine", str(path), cwd=tmp_path)
    assert str(path) in line and "'off'" in line and "process_wallclock_s is 1e+308" in line, line


def test_pytest_benchmark_infinite_round_is_refused(tmp_path: Path) -> None:
    data = json.loads(SORT.read_text())
    data["benchmarks"][0]["stats"]["data"][3] = float("inf")
    path = tmp_path / "inf.json"
    path.write_text(json.dumps(data))  # writes Infinity, which Python's JSON parser reads back as inf
    line = import_error("pytest-benchmark", str(path), "--off", "test_sort[shuffled]", "--on",
                        "test_sort[presorted]", cwd=tmp_path)
    assert str(path) in line and "test_sort[shuffled]" in line and "time_s is inf" in line, line


def test_gobench_implausible_ns_per_op_is_refused_not_a_regression(tmp_path: Path) -> None:
    new = tmp_path / "new.txt"
    new.write_text((GOBENCH / "new.txt").read_text().replace(" ns/op", "e303 ns/op"))
    line = import_error("gobench", str(GOBENCH / "old.txt"), str(new), "--bench", "Dedupe", cwd=tmp_path)
    assert str(new) in line and "arm 'new', run 1: time_s is 3.6" in line and "below 1e+09 s" in line, line


def test_deeply_nested_hyperfine_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"results": ' + "[" * 100_000 + "]" * 100_000 + "}")
    line = import_error("hyperfine", str(path), cwd=tmp_path)
    assert str(path) in line and "nests deeper than 64 levels" in line, line


def test_a_file_over_the_size_cap_is_refused_before_it_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _hyperfine(tmp_path, [0.03, 0.031, 0.032])
    monkeypatch.setattr(storage, "MAX_INPUT_BYTES", path.stat().st_size - 1)
    monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail(f"{self} was read"))
    line = import_error("hyperfine", str(path), cwd=tmp_path)
    assert str(path) in line and "is larger than" in line, line


def test_a_file_of_many_values_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "wide.json"
    path.write_text('{"results": [' + ",".join(["{}"] * 1_000_001) + "]}")
    line = import_error("hyperfine", str(path), cwd=tmp_path)
    assert str(path) in line and "holds more than 1 000 000 values" in line, line


def test_a_pyperf_gzip_bomb_is_refused_once_it_inflates_past_the_cap(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (storage.MAX_INPUT_BYTES + (1 << 20)), compresslevel=9))
    assert bomb.stat().st_size < 1 << 20
    line = import_error("pyperf", str(bomb), str(IMPORTS / "pyperf" / "on.json"), cwd=tmp_path)
    assert str(bomb) in line and "inflates to more than 64 MiB" in line, line

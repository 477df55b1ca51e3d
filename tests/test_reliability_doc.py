"""docs/reliability.md stays true: every guarantee names a test that exists, every fault test is named."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_guarantee_points_to_a_test_that_exists() -> None:
    guarantees = [line for line in DOC.read_text().splitlines() if line.startswith("- ")]
    assert len(guarantees) >= 30
    for line in guarantees:
        references = REFERENCE.findall(line)
        assert references, f"guarantee without a test: {line}"
        for file, name in references:
            assert (ROOT / file).is_file(), f"{file} does not exist ({line})"
            assert name in _tests_in(ROOT / file), f"{file} has no {name} ({line})"


def test_every_fault_and_security_test_is_a_documented_guarantee() -> None:
    named = {(file, name) for file, name in REFERENCE.findall(DOC.read_text())}
    files = [*sorted((ROOT / "tests" / "faults").glob("test_*.py")), ROOT / "tests" / "test_security.py",
             ROOT / "tests" / "test_forgery.py",
             *sorted((ROOT / "tests").glob("test_fuzz_*.py"))]
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        for name in _tests_in(path):
            assert (relative, name) in named, f"{relative}::{name} is not in docs/reliability.md"

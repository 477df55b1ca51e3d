"""The finding's TOML writer (`records.dumps_toml`) writes exactly what tomlkit writes for the same plain document,
and what it writes reads back as the same data."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import NASTY_TEXT, fuzz, no_surrogates
from gatekit.finding import Finding, load_finding, plain
from gatekit.records import dumps_toml

ROOT = Path(__file__).resolve().parents[1]
KEYS = st.one_of(st.sampled_from(["a", "b", "runs", "x-y_1", "metrics", "window"]), NASTY_TEXT)
SCALARS = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.booleans(), NASTY_TEXT,
                    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -0.0, 1e300, 5e-324]))


def documents(scalars: st.SearchStrategy[Any] = SCALARS, keys: st.SearchStrategy[str] = KEYS,
              max_leaves: int = 25) -> st.SearchStrategy[dict[str, Any]]:
    """Plain documents shaped like findings: tables, arrays of tables (non-empty lists of tables), arrays of
    anything (inline tables and nested arrays among them), scalars."""
    values = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(keys, inner, max_size=4),
        st.lists(st.dictionaries(keys, inner, max_size=4), min_size=1, max_size=3)), max_leaves=max_leaves)
    return st.dictionaries(keys, values, max_size=6)


@fuzz(400)
@given(documents())
def test_the_writer_writes_what_tomlkit_writes(document: dict[str, Any]) -> None:
    assert dumps_toml(document) == tomlkit.dumps(document)


@fuzz(200)
@given(documents(scalars=st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.booleans(),
                                   st.floats(allow_nan=False, allow_infinity=False),
                                   st.text(max_size=12).filter(no_surrogates)),
                 keys=st.text(max_size=6).filter(no_surrogates)))
def test_what_the_writer_writes_reads_back_as_the_same_data(document: dict[str, Any]) -> None:
    assert tomllib.loads(dumps_toml(document)) == document


def committed_findings() -> list[Path]:
    found = [*ROOT.glob("findings/*.json"), *ROOT.glob("findings/*/*.json"), ROOT / "tests/golden/finding.json"]
    return sorted(p for p in found if json.loads(p.read_text()).get("schema", "").startswith("gatekit.finding/"))


@pytest.mark.parametrize("path", committed_findings(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_finding_is_written_as_tomlkit_writes_it(path: Path) -> None:
    finding = load_finding(path)
    assert isinstance(finding, Finding)
    assert finding.to_toml() == tomlkit.dumps(plain(finding.to_dict()))


def test_anything_but_plain_data_is_refused() -> None:
    with pytest.raises(TypeError, match="not plain data"):
        dumps_toml({"when": object()})
    with pytest.raises(TypeError, match="key must be a string"):
        dumps_toml({"t": {1: "x"}})  # type: ignore[dict-item]

"""Fuzzing the finding loader: a damaged or hand-edited finding loads into something every reader can use,
or fails with a FindingError that names the file and the key — never a traceback later on."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
from hypothesis import event, given
from hypothesis import strategies as st

from gatekit.errors import GatekitError
from gatekit.finding import SECTIONS, load_finding
from gatekit.report.terminal import summary
from tests.fuzzing import SCALARS, fuzz, nested, no_surrogates

GOLDEN = json.loads((Path(__file__).parent / "golden" / "finding.json").read_text())
VALUES = st.one_of(SCALARS, nested(max_leaves=5), st.sampled_from([[], {}, "adopted", "x", 0, -1.5, True]))


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _toml_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _toml_safe(v) for k, v in value.items() if v is not None and no_surrogates(k)}
    if isinstance(value, list):
        return [_toml_safe(v) for v in value if v is not None]
    return value if not isinstance(value, str) or no_surrogates(value) else "x"


def _json_safe(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))  # dates become strings; NaN stays (JSON extension)


@st.composite
def finding_files(draw: st.DrawFn) -> tuple[str, bytes]:
    suffix = draw(st.sampled_from([".json", ".toml"]))
    if draw(st.integers(0, 9)) == 5:
        return suffix, draw(st.binary(max_size=300))
    doc = copy.deepcopy(GOLDEN)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        if draw(st.integers(0, 4)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(VALUES)
    text = json.dumps(_json_safe(doc)) if suffix == ".json" else tomlkit.dumps(_toml_safe(doc))
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 5:
        data = data[:draw(st.integers(0, len(data)))]
    return suffix, data


@fuzz(max_examples=400)
@given(case=finding_files())
def test_any_finding_file_loads_usably_or_names_file_and_key(tmp_path_factory, case: tuple[str, bytes]) -> None:
    suffix, data = case
    path = tmp_path_factory.mktemp("fuzz") / f"finding{suffix}"
    path.write_bytes(data)
    try:
        finding = load_finding(path)
    except GatekitError as error:
        message = str(error)
        assert message.startswith(f"{path}: "), message
        place = message[len(str(path)) + 2:]
        named = ("schema", "missing section", "not a readable finding", "cannot read", *SECTIONS)
        assert place.startswith(named), message
        event(f"refused: {place.split(':')[0][:30]}")
        return
    event("loaded")
    # everything readers do with a loaded finding works
    text = summary(finding)
    assert f"VERDICT: {finding.decision.value.upper()}" in text
    assert tomllib.loads(finding.to_toml()) == json.loads(finding.to_json())

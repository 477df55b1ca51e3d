"""Fuzzing the gate-file loader: any edit of a valid gate file loads, or fails with a ConfigError that
names the file and the key — never a traceback, and never a value that breaks a later step."""

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
from hypothesis import event, given
from hypothesis import strategies as st

from gatekit.config import MAX_RUNS_PER_ARM, NAME_PATTERN, load_gate
from gatekit.driver import make_driver
from gatekit.errors import GatekitError
from gatekit.prereg import DecisionSpec, stated_rules
from gatekit.schedule import plan
from tests.conftest import GATE_TEMPLATE
from tests.fuzzing import NASTY_TEXT, SCALARS, first_segment, fuzz, nested, no_surrogates

SECTIONS = {"gate", "threshold", "guards", "rules", "driver", "arms"}
# TOML cannot hold None or lone surrogates; everything else (NaN, inf, dates, huge ints, NUL) it can.
_TOML_SCALARS = SCALARS.filter(lambda v: v is not None and not (isinstance(v, str) and not no_surrogates(v)))
# Mostly values of a plausible kind but a hostile size (the bugs live there), sometimes anything at all.
TOML_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, -1, 0.0, 1e-300, 2**40, 10**6, "", "\x00", "a\x00b", "../x", "x/y", ".hidden", "a b"]),
    _TOML_SCALARS,
    nested(_TOML_SCALARS, max_leaves=6, keys=NASTY_TEXT.filter(no_surrogates)),
)
TOML_KEYS = st.one_of(st.sampled_from(["on", "off", "x", "a b", "../up", ".", "a\x00", "9lives", "é"]),
                      st.text(max_size=12).filter(no_surrogates))


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


def _at(doc: Any, path: tuple) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _parent(doc: Any, path: tuple) -> Any:
    return _at(doc, path[:-1])


@st.composite
def edited_gate_files(draw: st.DrawFn) -> str:
    """A valid gate file with 1-4 random edits: a value replaced, a key deleted, a key added."""
    doc = copy.deepcopy(GATE_TEMPLATE)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        op = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if op == "add" or not paths:
            tables = [(), *[p for p in paths if isinstance(_at(doc, p), dict)]]
            _at(doc, draw(st.sampled_from(tables)))[draw(TOML_KEYS)] = draw(TOML_VALUES)
            continue
        leaves = [p for p in paths if not isinstance(_at(doc, p), (dict, list))]
        path = draw(st.sampled_from(leaves if leaves and draw(st.integers(0, 3)) else paths))
        parent = _parent(doc, path)
        if op == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(TOML_VALUES)
    return tomlkit.dumps(doc)


@st.composite
def damaged_gate_texts(draw: st.DrawFn) -> bytes:
    """A valid gate file cut short, with bytes spliced in, or replaced by noise."""
    text = tomlkit.dumps(GATE_TEMPLATE).encode()
    kind = draw(st.sampled_from(["truncate", "splice", "noise"]))
    if kind == "truncate":
        return text[:draw(st.integers(0, len(text)))]
    if kind == "splice":
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.binary(max_size=8)) + text[at:]
    return draw(st.binary(max_size=200))


def _load_and_use(path: Path) -> None:
    """Load, then everything a series does with the config before the first run."""
    config = load_gate(path)
    driver = make_driver(config.driver.name, config.driver.options, source=config.path, base_dir=config.base_dir)
    assert driver.name == "command"
    if len(config.arms) < 2:  # a one-arm gate file is `gate compare`'s (its arm at two commits): nothing to plan
        return
    off, on = list(config.arms)[:2]
    spec = DecisionSpec.from_gate(config, off, on)
    assert tomllib.loads(tomlkit.dumps({"decision": spec.to_dict(), "rules": stated_rules(spec)}))
    assert len(plan(off, on, config.gate.n, config.gate.order, config.gate.seed)) == 2 * config.gate.n
    # what loaded is sane: finite numbers, bounded n, file-safe names
    numbers = [config.threshold.sigma_k, config.threshold.floor_pct, config.rules.load_limit,
               config.rules.sigma_k, config.rules.sample_interval_s, config.driver.timeout_s,
               *[g.max_drop for g in config.guards]]
    assert all(math.isfinite(x) for x in numbers)
    assert 1 <= config.gate.n <= MAX_RUNS_PER_ARM and NAME_PATTERN.fullmatch(config.gate.id)
    assert all(NAME_PATTERN.fullmatch(name) for name in config.arms)


def _check(path: Path, extra_segments: set[str]) -> None:
    try:
        _load_and_use(path)
        event("loaded")
    except GatekitError as error:
        message = str(error)
        event(f"refused: {first_segment(message, path)}")
        assert message.startswith(f"{path}: "), message
        assert first_segment(message, path) in SECTIONS | extra_segments, message
        assert error.exit_code == 2


@fuzz(max_examples=600)
@given(text=edited_gate_files())
def test_edited_gate_files_load_or_name_file_and_key(tmp_path_factory, text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "gate.toml"
    path.write_text(text, encoding="utf-8")
    top_level = set(tomllib.loads(text))  # an unknown top-level key is named as itself
    _check(path, top_level)


@fuzz(max_examples=300)
@given(data=damaged_gate_texts())
def test_damaged_gate_files_are_one_clear_error(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "gate.toml"
    path.write_bytes(data)
    try:
        top_level = set(tomllib.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        top_level = set()
    _check(path, top_level | {"malformed", "not"})  # "malformed TOML: ...", "not UTF-8 text"

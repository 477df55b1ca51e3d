"""Shared pieces of the property-based tests: bounded, deterministic settings and hostile values.

`derandomize=True` makes every run draw the same examples (the seed is derived from the test), and
`database=None` keeps runs independent of earlier ones, so `make test` is reproducible and bounded.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st


def fuzz(max_examples: int) -> settings:
    return settings(max_examples=max_examples, derandomize=True, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])


# Strings a trainer or a careless edit may produce: markup, quotes, escapes, controls, bidi, TOML syntax.
NASTY_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(['<script>alert("x")</script>', "'", '"', '"""', "'''", "\\", "\\u0000", "\x00", "\x1b[2J",
                     "\u202e", "\ud800", "a.b", "[x]", "=", "# c", "\n", "\r\n", "nan", "inf", "1e999", "", " ",
                     "é", "😀", "${HOME}", "$(id)", "../../etc/passwd", "{arm_config}"]),
)
NUMBERS = st.one_of(st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, -1, 1e308, -0.0, 5e-324]))
SCALARS = st.one_of(NUMBERS, NASTY_TEXT, st.booleans(), st.none(),
                    st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)),
                    st.dates(min_value=dt.date(1900, 1, 1), max_value=dt.date(2200, 1, 1)))


def nested(scalars: st.SearchStrategy[Any] = SCALARS, max_leaves: int = 12,
           keys: st.SearchStrategy[str] = NASTY_TEXT) -> st.SearchStrategy[Any]:
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(keys, inner, max_size=4)),
                        max_leaves=max_leaves)


def no_surrogates(text: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def names_file_and_key(message: str, path: Path, keys: set[str]) -> bool:
    """The message starts with the file and then names one of `keys` (a dotted key, a column, a row)."""
    if not message.startswith(f"{path}: "):
        return False
    rest = message[len(str(path)) + 2:]
    return any(rest.startswith(key) for key in keys)


def first_segment(message: str, path: Path) -> str:
    rest = message[len(str(path)) + 2:]
    if rest.startswith('"'):  # a quoted key (not a bare TOML key), as the loader shows it
        return json.JSONDecoder().raw_decode(rest)[0]
    return re.split(r"[.:\[ ]", rest, maxsplit=1)[0]

"""A tomlkit array of scalars built in time linear in its length, for documents tomlkit writes (they keep their
comments: the predecision).

tomlkit re-indexes an array at every element it appends, so a list of n scalars costs n² — a gate of 10,000
guards states 10,000 rules in its predecision, and writing them took minutes. `scalar_array` builds the array
whole, once; its text is byte for byte what tomlkit writes. Plain documents (findings) are written by the records
codec's own writer (`records.dumps_toml`); reading TOML back is tomllib's (linear).
"""

from __future__ import annotations

from typing import Sequence

import tomlkit
from tomlkit.items import Array, Item, Trivia, Whitespace

_SCALARS = (str, int, float, bool)


def scalar_array(values: Sequence[str | int | float | bool]) -> Array:
    """The inline array `[a, b, c]` of scalars, as tomlkit writes one, built with one index instead of one per
    element."""
    items: list[Item] = []
    for index, value in enumerate(values):
        if index:
            items.append(Whitespace(", "))
        items.append(tomlkit.item(value))
    return Array(items, Trivia())

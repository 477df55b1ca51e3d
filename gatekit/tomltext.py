"""TOML text of plain data (dicts, lists, scalars) in time linear in its size, as tomlkit writes it.

tomlkit re-indexes an array at every element it appends, so a list of n scalars costs n² — a gate of 10,000
guards states 10,000 rules in its predecision and finding, and writing them took minutes. Arrays of scalars are
therefore built whole, once (`scalar_array`); everything else is tomlkit's own, so the text is byte for byte
what `tomlkit.dumps` writes. Reading TOML back is tomllib's (linear); tomlkit stays where a document keeps its
comments.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import tomlkit
from tomlkit.items import Array, Item, Trivia, Whitespace

_SCALARS = (str, int, float, bool)


def dumps(document: Mapping[str, Any]) -> str:
    """`tomlkit.dumps(document)`, in linear time."""
    return tomlkit.dumps(prebuilt(document))


def prebuilt(value: Any) -> Any:
    """`value` with each non-empty list of scalars replaced by its tomlkit array, built once."""
    if isinstance(value, Mapping) and not isinstance(value, Item):
        return {key: prebuilt(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not isinstance(value, Item):
        if value and all(isinstance(item, _SCALARS) for item in value):
            return scalar_array(value)
        return [prebuilt(item) for item in value]
    return value


def scalar_array(values: Sequence[str | int | float | bool]) -> Array:
    """The inline array `[a, b, c]` of scalars, as tomlkit writes one, built with one index instead of one per
    element."""
    items: list[Item] = []
    for index, value in enumerate(values):
        if index:
            items.append(Whitespace(", "))
        items.append(tomlkit.item(value))
    return Array(items, Trivia())

"""Validation of a backend's own [backend.<name>] table, shared by the bundled backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from gatekit.errors import ConfigError


_KIND = {bool: "true or false", int: "an integer", str: "a string", float: "a number"}


def take_options(options: Mapping[str, Any], known: Mapping[str, tuple[type, Any]], *, source: Path,
                 backend: str) -> dict[str, Any]:
    """{key: value} with defaults filled in; an unknown key or a wrong type names the file and the key."""
    for key in options:
        if key not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise ConfigError(f"{source}: backend.{backend}.{key}: unknown key for the {backend} backend "
                              f"(known: {listed})")
    values = {}
    for key, (kind, default) in known.items():
        value = options.get(key, default)
        # booleans are ints in Python; a TOML `true` is never a device index
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{source}: backend.{backend}.{key}: must be {_KIND.get(kind, kind.__name__)}, "
                              f"got {value!r}")
        values[key] = value
    return values

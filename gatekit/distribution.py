"""The distribution gatekit is installed as: its name on a package index, its version, and the one pip
command that adds an optional extra (every install hint gatekit prints is built here)."""

from __future__ import annotations

# The name pip knows this project by. PyPI's "gatekit" is another project (an MCP gateway, whose wheel also
# installs a top-level `gatekit` package), so the distribution has its own name; the import package stays
# `gatekit` and the console script `gate` (docs/install.md says why).
DISTRIBUTION = "gatekit-ab"
# The optional extras of pyproject.toml (tests/test_distribution.py keeps the two in step).
EXTRAS = ("torch", "cuda", "ray", "sign", "test")


def installed_version() -> str:
    """The installed distribution's version; "0+unknown" in a source tree that was never installed."""
    from importlib.metadata import PackageNotFoundError, version  # here: slow to import, and rarely needed

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


def install_hint(extra: str) -> str:
    """The pip command that adds `extra`'s packages beside an installed gatekit (a wheel, a path or an
    editable install alike: pip keeps the installed distribution and adds only what the extra needs)."""
    if extra not in EXTRAS:
        raise ValueError(f"{extra!r} is not an extra of {DISTRIBUTION}; extras: {', '.join(EXTRAS)}")
    return f"pip install '{DISTRIBUTION}[{extra}]'"

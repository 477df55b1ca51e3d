"""gatekit: a preregistered, interleaved A/B gate for ML training code."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gatekit")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

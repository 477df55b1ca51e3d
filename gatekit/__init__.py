"""gatekit: a preregistered, interleaved A/B gate for ML training code."""

from __future__ import annotations

from gatekit.distribution import installed_version

__version__ = installed_version()

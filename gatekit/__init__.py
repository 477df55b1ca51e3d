"""gatekit: a preregistered, interleaved A/B gate for ML training code.

The Python API (docs/api.md): `gatekit.analyze`, `gatekit.run`, `gatekit.compare`, `gatekit.verify` — the library
calls the `gate` commands make, imported on first use (gatekit.api) so that `import gatekit` stays cheap.
"""

from __future__ import annotations

import sys
import types
from typing import Any

API = ("analyze", "run", "compare", "verify")
__all__ = [*API, "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read on use: importlib.metadata is slow to import, and `gate --help` needs it not
        from gatekit.distribution import installed_version

        return installed_version()
    if name in API:
        from gatekit import api

        return getattr(api, name)
    raise AttributeError(f"module 'gatekit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API, "__version__"})


class _Package(types.ModuleType):
    """The package keeps `gatekit.compare` and `gatekit.verify` the API functions: importing the submodules of the
    same name (gatekit/compare.py, gatekit/verify.py) would otherwise set them on the package, and `gatekit.verify`
    would be a module after the first `from gatekit.verify import …`. Import from those modules by name
    (`from gatekit.verify import verify_series`), never as attributes of the package."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in API and isinstance(value, types.ModuleType):
            return  # a submodule of an API function's name: reachable as sys.modules["gatekit.<name>"]
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

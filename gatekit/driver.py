"""The Driver protocol and the entry-point registry (group `gatekit.drivers`).

A driver starts one trainer run and reports a RunOutcome. Plugins import only this module,
`gatekit.records`, `gatekit.errors` and `gatekit.processes` (stopping a trainer and what it spawned);
built-ins register through entry points like third-party ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from gatekit.errors import ConfigError, DriverError
from gatekit.records import CheckResult, RunOutcome

DRIVER_GROUP = "gatekit.drivers"
BACKEND_GROUP = "gatekit.backends"

# Environment variables of the trainer contract (DESIGN "Trainer contract").
ENV_ARM, ENV_RUN, ENV_RUN_DIR, ENV_RESULT = "GATEKIT_ARM", "GATEKIT_RUN", "GATEKIT_RUN_DIR", "GATEKIT_RESULT"


@dataclass(frozen=True, slots=True)
class ArmInput:
    """What a driver needs of one arm (a plain view of config.ArmSpec, so plugins need not import it)."""

    name: str
    config: Path | None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run to execute: which arm, its label, where to put its files, how long it may take."""

    arm: ArmInput
    label: str
    run_dir: Path
    result_path: Path
    timeout_s: float
    stdout_path: Path
    stderr_path: Path


@runtime_checkable
class Driver(Protocol):
    """Runs trainer processes. Built from the gate file's [driver] options."""

    name: str

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: Path, base_dir: Path) -> Driver:
        """Validate the plugin's own [driver] keys; raise ConfigError naming `source` and the key."""
        ...

    def preflight(self, arms: Sequence[ArmInput]) -> list[CheckResult]:
        """Checks that need no trainer run (argv[0] resolvable, arm files present)."""
        ...

    def run(self, request: RunRequest) -> RunOutcome:
        """Run once; never raise for a trainer failure: report it in RunOutcome.error."""
        ...


_REQUIRED = ("from_options", "preflight", "run")


def installed_drivers() -> dict[str, str]:
    """{name: 'module:object'} of every registered driver, loaded or not."""
    return {ep.name: ep.value for ep in entry_points(group=DRIVER_GROUP)}


def load_driver_class(name: str, *, source: Path) -> type:
    """The driver class registered as `name`, checked when loaded (not when first called)."""
    matches = [ep for ep in entry_points(group=DRIVER_GROUP) if ep.name == name]
    if not matches:
        known = ", ".join(sorted(installed_drivers())) or "none"
        raise ConfigError(f"{source}: driver.name: no driver named '{name}' is installed (installed: {known})")
    entry = matches[0]
    try:
        cls = entry.load()
    except (ImportError, AttributeError) as exc:
        raise DriverError(f"driver plugin '{name}' ({entry.value}) cannot be loaded: {exc}") from None
    missing = [attr for attr in _REQUIRED if not callable(getattr(cls, attr, None))]
    if missing:
        raise DriverError(f"driver plugin '{name}' ({entry.value}) lacks {', '.join(missing)}; "
                          f"a driver must implement {', '.join(_REQUIRED)}")
    return cls


def make_driver(name: str, options: Mapping[str, Any], *, source: Path, base_dir: Path) -> Driver:
    cls = load_driver_class(name, source=source)
    return cls.from_options(options, source=source, base_dir=base_dir)

"""The Driver and Backend protocols and their entry-point registries (`gatekit.drivers`, `gatekit.backends`).

A driver starts one trainer run and reports a RunOutcome. A backend watches the machine the trainer runs
on (GPU, Mac, CPU): preflight, provenance, telemetry in every run window, and contamination evidence.
Plugins import only this module, `gatekit.records` and `gatekit.errors`; built-ins register through entry
points like third-party ones. This module therefore re-exports what a driver needs beyond the protocols: the
trainer contract's environment variable names (`gatekit.contract`), the means to stop a trainer and the
processes that escaped its group (`processes_in_run_dirs`, `stop_pids`, `stop_run_processes`,
`signals_deferred`, `default_handlers_in_child`), reading back what a trainer left in its run folder within
bounds (`read_run_file`, `read_document`), and the pip command that installs an extra a plugin needs
(`install_hint`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from gatekit.errors import ConfigError, DriverError
from gatekit.records import CheckResult, RunOutcome

# Part of the driver API, re-exported so plugins import them from here: the trainer contract's environment
# variables, and stopping a trainer together with the processes that left its process group.
from gatekit.contract import ENV_ARM, ENV_RESULT, ENV_RUN, ENV_RUN_DIR, TRACE_WARM_PARENT  # noqa: F401
from gatekit.distribution import install_hint  # noqa: F401  (the pip command naming an extra a plugin needs)
from gatekit.processes import (processes_in_run_dirs, reap_group_zombies, register_helper, stop_pids,  # noqa: F401
                               stop_run_processes, unregister_helper)
from gatekit.signals import default_handlers_in_child, signals_deferred  # noqa: F401
# and reading back what a trainer left in its run folder, within bounds (a FIFO, a link out, a huge or deep file)
from gatekit.runfiles import MAX_RESULT_BYTES, read_document, read_run_file  # noqa: F401

DRIVER_GROUP = "gatekit.drivers"
BACKEND_GROUP = "gatekit.backends"


@dataclass(frozen=True, slots=True)
class ArmInput:
    """What a driver needs of one arm (a plain view of config.ArmSpec, so plugins need not import it)."""

    name: str
    config: Path | None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    # The arm's own git checkout (`gate bisect`): its commit and worktree ({commit}, {worktree}) and the folder
    # the gate file's relative paths resolve in there (driver.cwd). None: the gate file's folder, as always.
    commit: str = ""
    worktree: Path | None = None
    base_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class RunRequest:
    """One run to execute: which arm, its label, where to put its files, how long it may take; in a duet,
    the slot's environment (GATEKIT_SLOT, CUDA_VISIBLE_DEVICES) and the cores the run is pinned to."""

    arm: ArmInput
    label: str
    run_dir: Path
    result_path: Path
    timeout_s: float
    stdout_path: Path
    stderr_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    cpus: tuple[int, ...] = ()  # empty: wherever the gate itself may run


@runtime_checkable
class Driver(Protocol):
    """Runs trainer processes. Built from the gate file's [driver] options.

    Optional, looked up by name: `prepare(arms, timeout_s)`, called once before a series' first run (the
    command driver starts its warm parents there), and `close()`, after the series (they stop)."""

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


def _load_plugin(group: str, kind: str, name: str, required: tuple[str, ...], *, source: Path, key: str) -> type[Any]:
    """The plugin class registered as `name` in `group`, checked when it loads (not when first called)."""
    matches = [ep for ep in entry_points(group=group) if ep.name == name]
    if not matches:
        known = ", ".join(sorted(ep.name for ep in entry_points(group=group))) or "none"
        raise ConfigError(f"{source}: {key}: no {kind} named '{name}' is installed (installed: {known})")
    entry = matches[0]
    try:
        cls = entry.load()
    except (ImportError, AttributeError) as exc:
        raise DriverError(f"{kind} plugin '{name}' ({entry.value}) cannot be loaded: {exc}") from None
    missing = [attr for attr in required if not callable(getattr(cls, attr, None))]
    if not isinstance(getattr(cls, "name", None), str):
        missing.insert(0, "name")
    if missing:
        raise DriverError(f"{kind} plugin '{name}' ({entry.value}) lacks {', '.join(missing)}; "
                          f"a {kind} must implement name, {', '.join(required)}")
    return cls


def load_driver_class(name: str, *, source: Path) -> type[Any]:
    """The driver class registered as `name`, checked when loaded."""
    return _load_plugin(DRIVER_GROUP, "driver", name, _REQUIRED, source=source, key="driver.name")


def make_driver(name: str, options: Mapping[str, Any], *, source: Path, base_dir: Path) -> Driver:
    cls = load_driver_class(name, source=source)
    return cls.from_options(options, source=source, base_dir=base_dir)


# -- backends ----------------------------------------------------------------------------------------

# One telemetry value: a number, a short text, or None when the machine does not report it.
Telemetry = float | int | str | None
TelemetrySample = Mapping[str, Telemetry]
# Auto-detection tries these installed backends in this order; the first that detects its machine wins.
AUTO = "auto"
AUTO_ORDER = ("cuda", "metal", "cpu")


@runtime_checkable
class Backend(Protocol):
    """Watches the machine a trainer runs on. Built from the gate file's [backend.<name>] options."""

    name: str

    @classmethod
    def detect(cls) -> CheckResult:
        """Whether this machine has what the backend needs (ok), and what it found or lacks (detail).

        Must be cheap and never raise; auto-detection calls it on every installed backend.
        """
        ...

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: Path) -> Backend:
        """Validate the plugin's own [backend.<name>] keys; raise ConfigError naming `source` and the key."""
        ...

    def preflight(self) -> list[CheckResult]:
        """Checks before any run (e.g. no other process on the GPU, AC power, thermal state)."""
        ...

    def provenance(self) -> dict[str, Any]:
        """What the series ran on (GPU name, driver and CUDA versions; chip; CPU model)."""
        ...

    def sample(self) -> dict[str, Telemetry]:
        """Telemetry at one instant, merged into each sampler row (samples.csv columns)."""
        ...

    def summarize(self, samples: Sequence[TelemetrySample]) -> dict[str, Telemetry | bool]:
        """A few window statistics of this backend's samples (e.g. gpu_util_mean, sm_clock_min_mhz)."""
        ...

    def window_evidence(self, samples: Sequence[TelemetrySample]) -> list[str]:
        """Contamination evidence in one run window, one line each (e.g. another process on the GPU)."""
        ...

    def evidence_rules(self) -> list[str]:
        """What counts as evidence, in words, for the predecision file (written before the first run)."""
        ...


_BACKEND_REQUIRED = ("detect", "from_options", "preflight", "provenance", "sample", "summarize",
                     "window_evidence", "evidence_rules")


def installed_backends() -> dict[str, str]:
    """{name: 'module:object'} of every registered backend, loaded or not."""
    return {ep.name: ep.value for ep in entry_points(group=BACKEND_GROUP)}


def load_backend(name: str, *, source: Path, key: str = "backend.name") -> type[Backend]:
    """The backend class registered as `name`, checked when loaded."""
    return _load_plugin(BACKEND_GROUP, "backend", name, _BACKEND_REQUIRED, source=source, key=key)


def detect_backend(*, source: Path) -> tuple[str, list[CheckResult]]:
    """The backend `auto` picks on this machine, and what each candidate found on the way."""
    installed = installed_backends()
    tried = []
    for name in AUTO_ORDER:
        if name not in installed:
            continue
        found = load_backend(name, source=source).detect()
        tried.append(found)
        if found.ok:
            return name, tried
    known = ", ".join(sorted(installed)) or "none"
    raise ConfigError(f"{source}: backend.name: 'auto' found no usable backend among {', '.join(AUTO_ORDER)} "
                      f"(installed: {known}); name one in [backend]")


@dataclass(frozen=True, slots=True)
class ChosenBackend:
    """The backend a gate uses: its instance, the name the gate file asked for, and why it was chosen."""

    backend: Backend
    requested: str
    detail: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.backend.name


def make_backend(name: str, options: Mapping[str, Mapping[str, Any]], *, source: Path) -> ChosenBackend:
    """Resolve `auto`, validate every [backend.<name>] table (each by its own plugin), build the backend."""
    validated: dict[str, Backend] = {}
    for table, values in options.items():
        cls = load_backend(table, source=source, key=f"backend.{table}")
        validated[table] = cls.from_options(values, source=source)
    if name == AUTO:
        chosen, tried = detect_backend(source=source)
        detail = "auto-detected: " + "; ".join(f"{c.name}: {c.detail}" for c in tried)
    else:
        chosen, detail = name, "named in the gate file"
    backend = validated[chosen] if chosen in validated else load_backend(chosen, source=source).from_options(
        {}, source=source)
    return ChosenBackend(backend=backend, requested=name, detail=detail, options=dict(options.get(chosen, {})))

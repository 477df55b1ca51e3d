"""Preflight: everything that can be checked before any GPU time is spent."""

from __future__ import annotations

import json
import os
import platform
import re
from pathlib import Path
from typing import Mapping, Sequence

import psutil

from gatekit.contract import ENV_BISECT
from gatekit.config import ArmSpec, GateConfig, calibration_path, load_toml
from gatekit.driver import ArmInput, ChosenBackend, Driver
from gatekit.errors import ConfigError, GatekitError, MachineNotReady, PreflightError
from gatekit.provenance import not_a_file
from gatekit.records import CheckResult, DuplicateKeyError, loads_json
from gatekit.sampler import LoadReader, load_average, read_system_load
from gatekit.slots import unequal_cpu_slots, unequal_gpus


def arm_input(arm: ArmSpec) -> ArmInput:
    checkout = arm.checkout
    if checkout is None:
        return ArmInput(name=arm.name, config=arm.config, args=arm.args, env=dict(arm.env))
    return ArmInput(name=arm.name, config=arm.config, args=arm.args, env=dict(arm.env), commit=checkout.commit,
                    worktree=checkout.worktree, base_dir=checkout.base or checkout.worktree)


def check_arm_config(arm: ArmSpec) -> CheckResult:
    """The arm's config exists and, for TOML/JSON, parses."""
    name = f"arm config {arm.name}"
    if arm.config is None:
        return CheckResult(name, True, "none (the arm passes args/env only)")
    what = not_a_file(arm.config)
    if what is not None:
        what = "file not found" if what == "not found" else f"{what}, not a file"
        return CheckResult(name, False, f"{arm.config}: {what} (arms.{arm.name}.config)")
    try:
        if arm.config.suffix == ".toml":
            load_toml(arm.config)
        elif arm.config.suffix == ".json":
            loads_json(arm.config.read_text(encoding="utf-8"))
    except ConfigError as exc:
        return CheckResult(name, False, str(exc))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return CheckResult(name, False, f"{arm.config}: malformed JSON: {exc}")
    except DuplicateKeyError as exc:
        return CheckResult(name, False, f"{arm.config}: {exc}")
    return CheckResult(name, True, str(arm.config))


def _config_document(arm: ArmSpec) -> Mapping[str, object] | None:
    """The arm's TOML/JSON config as data; None for another kind or one that does not parse (which
    `check_arm_config` reports)."""
    if arm.config is None or not_a_file(arm.config) is not None:
        return None
    try:
        if arm.config.suffix == ".toml":
            return load_toml(arm.config)
        if arm.config.suffix == ".json":
            data = loads_json(arm.config.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else None
    except (ConfigError, json.JSONDecodeError, UnicodeDecodeError, DuplicateKeyError):
        return None
    return None


def _lookup(document: Mapping[str, object], key: str) -> object:
    """A key of a config document, dotted for a nested table (`optim.kind`); MISSING_VALUE where absent."""
    if key in document:
        return document[key]
    value: object = document
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return MISSING_VALUE
        value = value[part]
    return value


MISSING_VALUE = object()


def check_expect_diff(config: GateConfig, arms: Sequence[ArmSpec]) -> list[CheckResult]:
    """Arm config files that already agree on a declared `gate.expect_diff` key: the arms would not differ in
    it, so every run would be spent and the series end invalid. Said only where both files state the key (a
    trainer may derive it from something else; the echoed effective config decides then)."""
    if len(arms) != 2 or not config.gate.expect_diff or any(arm.checkout is not None for arm in arms):
        return []  # arms at two commits (compare, bisect) may share a config and differ in code
    off, on = (_config_document(arm) for arm in arms)
    if off is None or on is None:
        return []
    stated = [key for key in config.gate.expect_diff
              if _lookup(off, key) is not MISSING_VALUE and _lookup(on, key) is not MISSING_VALUE]
    if not stated:
        return []
    same = [key for key in stated if _lookup(off, key) == _lookup(on, key)]
    if not same:
        return [CheckResult("arms differ", True, f"in {', '.join(stated)} (gate.expect_diff), as their configs say")]
    shown = ", ".join(f"{key} = {json.dumps(_lookup(off, key), ensure_ascii=False)}" for key in same)
    return [CheckResult("arms differ", False,
                        f"{arms[0].config} and {arms[1].config} both set {shown}, a key gate.expect_diff says the arms "
                        "differ in; change one arm's config (or gate.expect_diff): as they are, every run would be "
                        "spent and the series end invalid")]


def check_artifacts(paths: Sequence[Path]) -> list[CheckResult]:
    """Each hashed artifact is a regular file; otherwise the check says what it is (not found, a directory,
    a character device like /dev/zero, …)."""
    results = []
    for path in paths:
        what = not_a_file(path)
        results.append(CheckResult(f"artifact {path.name}", what is None,
                                   str(path) if what is None else f"{path}: {what}, not a file to hash (driver.hash)"))
    return results


def _own_lineage() -> set[int]:
    """This process and its ancestors: the shell that started `gate` may mention the trainer's name."""
    pids = set()
    process: psutil.Process | None = psutil.Process()
    while process is not None:
        pids.add(process.pid)
        try:
            process = process.parent()
        except psutil.Error:
            break
    return pids


def _same_bisect(process: psutil.Process, bisect: str) -> bool:
    """The process belongs to the bisect this gate is a probe of (a sibling probe's trainer): its environment
    carries the same ENV_BISECT. A process whose environment cannot be read is not."""
    try:
        return bool(bisect) and process.environ().get(ENV_BISECT) == bisect
    except (psutil.Error, OSError):
        return False


def busy_processes(pattern: str) -> list[str]:
    """Running processes whose command line matches `pattern` (a regex), excluding gate's own lineage and,
    in a probe of `gate bisect`, the other probes of the same bisect (they run side by side by design)."""
    regex = re.compile(pattern)
    mine = _own_lineage()
    bisect = os.environ.get(ENV_BISECT, "")
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        cmdline = process.info.get("cmdline") or []
        if process.info["pid"] in mine or not cmdline:
            continue
        text = " ".join(cmdline)
        if regex.search(text) and not _same_bisect(process, bisect):
            found.append(f"pid {process.info['pid']}: {text[:120]}")
    return found


def check_busy(config: GateConfig) -> CheckResult:
    pattern = config.driver.busy_pattern
    if not pattern:
        return CheckResult("no trainer already running", True, "no driver.busy_pattern set; not checked")
    try:
        busy = busy_processes(pattern)
    except re.error as exc:
        return CheckResult("no trainer already running", False,
                           f"{config.path}: driver.busy_pattern: invalid regex: {exc}")
    if busy:
        return CheckResult("no trainer already running", False,
                           f"{len(busy)} process(es) match busy_pattern {pattern!r}: {'; '.join(busy[:3])}",
                           machine=True)
    return CheckResult("no trainer already running", True, f"nothing matches {pattern!r}")


def check_power() -> CheckResult:
    battery = psutil.sensors_battery() if hasattr(psutil, "sensors_battery") else None
    if battery is None:
        return CheckResult("AC power", True, "no battery")
    if battery.power_plugged:
        return CheckResult("AC power", True, f"plugged in, battery {battery.percent:.0f} %")
    return CheckResult("AC power", False, f"on battery ({battery.percent:.0f} %): plug in before a series",
                       machine=True)


def check_load(config: GateConfig, load1: float) -> CheckResult:
    limit = config.rules.load_limit
    ok = load1 <= limit
    return CheckResult("load calm", ok, f"load1 {load1:.2f} {'≤' if ok else '>'} rules.load_limit {limit:g}"
                       + ("" if ok else "; wait for the machine to calm down, or state the limit this machine can "
                                        "keep: rules.load_limit in the gate file, or --load-limit N on gate run "
                                        "(preregistered like the key)"), machine=not ok)


def check_pressure(config: GateConfig, reading: Mapping[str, object]) -> list[CheckResult]:
    """The CPU's pressure stall over the last 10 s (Linux /proc/pressure/cpu `some avg10`), where the OS has it,
    so a calm load1 does not hide a machine whose runs the pressure evidence would flag. Reported, never a
    refusal: a 10 s average is not the run window the preregistered rule judges."""
    stall = reading.get("psi_cpu_avg10")
    if not isinstance(stall, (int, float)) or isinstance(stall, bool):
        return []  # no pressure-stall information on this OS: nothing to show
    limit, evidence = config.rules.psi_limit_pct, config.rules.evidence
    over = stall > limit
    detail = (f"cpu stall {stall:.1f} % of the last 10 s {'>' if over else '≤'} rules.psi_limit_pct {limit:g} %")
    if evidence not in ("psi", "any"):
        detail += f" (not evidence here: rules.evidence = \"{evidence}\")"
    elif over:
        detail += (f"; runs started now would be flagged (rules.evidence = \"{evidence}\"): wait for the machine "
                   "to calm down")
    return [CheckResult("CPU pressure", True, detail, flags_runs=over and evidence in ("psi", "any"))]


def check_history(config: GateConfig) -> list[CheckResult]:
    """sigma_ref = "history" without an explicit σ needs a calibration of this machine."""
    rules = config.rules
    if rules.sigma_ref != "history" or rules.sigma_history_pct > 0:
        return []
    path = calibration_path(config)
    if not path.is_file():
        return [CheckResult("calibration", False, f"{path}: not found (rules.sigma_ref = \"history\"); run "
                            "`gate calibrate ARM --n 10` first")]
    try:
        host = load_toml(path).get("host", {}).get("hostname")
    except ConfigError as exc:
        return [CheckResult("calibration", False, str(exc))]
    if host != platform.node():
        return [CheckResult("calibration", False, f"{path} was measured on {host!r}, this is {platform.node()!r}; "
                            "calibrate this machine")]
    return [CheckResult("calibration", True, str(path))]


def refuse_failed(checks: Sequence[CheckResult], nothing_ran: str = "nothing ran") -> None:
    """Raise what a failed preflight is: MachineNotReady (exit 4) when every failed check is the machine's
    state now, else PreflightError (exit 2); the message lists each failed check. Nothing when all passed."""
    failed = [c for c in checks if not c.ok]
    if not failed:
        return
    error = MachineNotReady if all(c.machine for c in failed) else PreflightError
    raise error(f"preflight failed, {nothing_ran}: " + "; ".join(f"{c.name}: {c.detail}" for c in failed))


def run_checks(config: GateConfig, arms: Sequence[ArmSpec], driver: Driver, backend: ChosenBackend | None = None,
               *, read_load: LoadReader = read_system_load) -> list[CheckResult]:
    """All preflight checks, in the order a person would fix them. `read_load` reads the machine's load (the
    sampler's reader), so a test decides what load the preflight sees."""
    checks = [CheckResult("gate file", True, str(config.path))]
    checks += check_history(config)
    checks += [check_arm_config(arm) for arm in arms]
    checks += check_expect_diff(config, arms)
    checks += check_artifacts(config.driver.hash)
    checks += driver.preflight([arm_input(arm) for arm in arms])
    reading = read_load()
    checks += [check_busy(config), check_power(), check_load(config, load_average(reading))]
    checks += check_pressure(config, reading)
    if backend is not None:
        checks.append(CheckResult("backend", True, f"{backend.name} ({backend.detail})"))
        checks += backend.backend.preflight() if config.duet is None else check_slots(config, backend)
    if config.gate.require_locked_clocks:
        checks.append(check_locked_clocks(backend))
    return checks


def check_locked_clocks(backend: ChosenBackend | None) -> CheckResult:
    """`[gate] require_locked_clocks`: the backend must report the GPU's clocks locked (its provenance's
    `locked_sm_clock_mhz`); a backend that cannot tell refuses too, and says so. gatekit never locks them."""
    name = "locked clocks (gate.require_locked_clocks)"
    fix = "; lock them before the series (e.g. nvidia-smi -lgc, as root): gatekit never changes clocks itself"
    if backend is None:
        return CheckResult(name, False, "no backend watches this machine, so whether clocks are locked cannot be "
                                        "told" + fix)
    try:
        provenance = backend.backend.provenance()
    except GatekitError as exc:
        return CheckResult(name, False, f"the {backend.name} backend cannot tell ({exc})" + fix)
    words = provenance.get("locked_clocks")
    if isinstance(provenance.get("locked_sm_clock_mhz"), (int, float)):
        return CheckResult(name, True, f"{backend.name}: {words}")
    if words is None:
        return CheckResult(name, False, f"the {backend.name} backend does not report whether clocks are locked, "
                                        "so it cannot be told" + fix)
    return CheckResult(name, False, f"{backend.name}: {words}" + fix, machine=True)


def check_slots(config: GateConfig, backend: ChosenBackend) -> list[CheckResult]:
    """A duet's slots: each GPU slot's own backend checks, and the two slots twins (same GPU model, memory
    and max clock; cpu slots of one size) unless the gate allows unequal slots."""
    duet = config.duet
    assert duet is not None
    kind = duet.slots[0].kind
    checks: list[CheckResult] = []
    if kind == "cuda":
        if not hasattr(backend.backend, "for_device"):
            return [CheckResult("duet slots", False, f"cuda slots need the cuda backend, and this machine gives "
                                f"{backend.name} ({backend.detail}); install 'gatekit[cuda]' or use cpu slots")]
        statics: dict[str, dict[str, object]] = {}
        for slot in duet.slots:
            slot_backend = backend.backend.for_device(slot.gpu)
            found = slot_backend.preflight()
            checks += found
            if all(c.ok for c in found):
                statics[slot.text] = slot_backend.reader.static()
        problem = unequal_gpus(statics) if len(statics) == 2 else ""
    else:
        checks += backend.backend.preflight()
        problem = unequal_cpu_slots(duet.slots)
    if problem and duet.allow_unequal_slots and "not available" not in problem:
        checks.append(CheckResult("duet slots", True, f"{problem} (allowed: duet.allow_unequal_slots = true)"))
    else:
        detail = problem + ("; set duet.allow_unequal_slots = true to run anyway" if problem and
                            "not available" not in problem else "")
        checks.append(CheckResult("duet slots", not problem,
                                  detail or f"{duet.slots[0].text} and {duet.slots[1].text} are twins"))
    return checks

"""hyperfine's `--export-json` files as series evidence, analysed exactly like a gate's own.

Two shapes are understood, told apart per command by their keys:

- 1.x (1.12 to 1.20, today's releases): `results: [{command, mean, stddev, median, user, system, min, max,
  times: [...], exit_codes: [...], memory_usage_byte: [...], parameters: {NAME: VALUE}}]`. `times` and
  `exit_codes` (1.12+) and `memory_usage_byte` (1.20+) hold one entry per run; `user` and `system` only
  each command's mean.
- 2.x (`schema_version: 2`, hyperfine 2.0): `results: [{command, name?, measurements: [{time_wall_clock,
  time_user, time_system, memory_peak_resident, exit_code}], parameters: {NAME: {value}}, summary}]`, each
  quantity written `{"value": …, "unit": "second" | "byte"}` (hyperfine's `src/benchmark/measurement.rs`,
  `src/quantity/mod.rs` and its JSON-export snapshots); `name` is the `--command-name`, which 1.x wrote into
  `command` itself. The development branch new-metrics named the memory `peak_memory_usage`; both are read.
  A top-level `schema_version`, where a file has one, must be 1 or 2.

Two commands become the arms, chosen by name (the `--command-name`, or the command) or position, or by the
value of one parameter (`-P`/`-L`).
Each run is one run measured as `process_wallclock_s`; a non-zero exit code (null: ended by a signal) makes it
a failed run. Per-run `memory_usage_byte`, `user` and `system` ride along as metrics a guard can use.

hyperfine runs all of one command's runs, then the next command's (not interleaved), and samples no load:
the finding says both, and the window rule is off. Through a shell, hyperfine subtracts the shell's mean
start-up time from each run and clamps at 0 (`src/benchmark/executor.rs`), so a command faster than the
shell's start-up reads 0.0 s: below what the timer resolves, neither a failure nor a measurement. Such runs
are left out of the arm. Each one's true time is at least 0 and below every kept run's (it was under the
shell's start-up, the kept ones above), so leaving k of n out overstates the arm's mean, by at most k/(n − k).
Up to ZERO_TIMES_LIMIT_FRAC of an arm's runs this is said in a warning; beyond it the finding is invalid, as
its Δ could be an artefact of the clamp.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.analysis import SeriesEvidence
from gatekit.config import GuardSpec, ThresholdSpec
from gatekit.errors import ConfigError
from gatekit.importers.common import (NO_LOAD, Identity, ImportedArm, ImportedRun, imported_evidence, is_number,
                                      parse_guard, read_json)
from gatekit.verdict import Reason, ReasonCode

VERSIONS = "hyperfine 1.x (`times` per command) and 2.x (`measurements` per command, schema_version 2)"
SCHEMA_VERSIONS = (1, 2)
NOT_INTERLEAVED = ("each command's runs ran back to back, not interleaved, so drift during the benchmark is "
                   "confounded with the arm")
ZERO_TIMES_LIMIT_FRAC = 0.01  # above this share of an arm's runs reading 0.0 s, the finding is invalid
ZERO_TIMES_HINT = "rerun with -N/--shell=none, or give each run more work, e.g. a loop inside the command"
# Metrics a guard can use, all lower-is-better: more memory or CPU time is worse.
GUARD_METRICS = {
    "memory_usage_byte": "peak resident memory of the run, in bytes",
    "user": "CPU time in user mode, in seconds",
    "system": "CPU time in kernel mode, in seconds",
}
_V2_KEYS = {"time_wall_clock": "second", "time_user": "second", "time_system": "second",
            "memory_peak_resident": "byte", "peak_memory_usage": "byte"}
_V2_METRIC = {"time_user": "user", "time_system": "system", "memory_peak_resident": "memory_usage_byte",
              "peak_memory_usage": "memory_usage_byte"}
_SUMMARY_KEYS = ("mean", "stddev", "median", "user", "system", "min", "max")


@dataclass(frozen=True, slots=True)
class CommandResult:
    """One command of a hyperfine file: its runs, parameters, and the summary hyperfine wrote (1.x)."""

    command: str  # the name it is shown and chosen by: 2.x's `name` (`--command-name`) where given
    parameters: Mapping[str, str]
    runs: tuple[ImportedRun, ...]
    summary: Mapping[str, float]
    per_run_metrics: frozenset[str]  # GUARD_METRICS recorded for every run
    command_line: str = ""  # 2.x: the command run, when `name` differs from it


@dataclass(frozen=True, slots=True)
class HyperfineFile:
    path: Path
    raw: bytes
    version: str  # "1.x" or "2.x"
    results: tuple[CommandResult, ...]


def read_hyperfine(path: Path) -> HyperfineFile:
    """A hyperfine export, checked key by key; every error names the file and the key."""
    data, raw = read_json(path, "hyperfine --export-json output")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not hyperfine --export-json output: the top level must be a table")
    schema = data.get("schema_version")
    if "schema_version" in data and schema not in SCHEMA_VERSIONS:
        raise ConfigError(f"{path}: key 'schema_version' is {schema!r}; understood: {VERSIONS}")
    results = data.get("results")
    if not isinstance(results, list) or not results:
        raise ConfigError(f"{path}: key 'results' is missing or empty (expected hyperfine --export-json output)")
    parsed, versions = [], set()
    for index, result in enumerate(results):
        where = f"{path}: key 'results[{index}]"
        if not isinstance(result, dict):
            raise ConfigError(f"{where}' must be a table")
        if not isinstance(result.get("command"), str):
            raise ConfigError(f"{where}.command' is missing")
        if "measurements" in result:
            parsed.append(_v2_result(result, where))
            versions.add("2.x")
        elif "times" in result:
            parsed.append(_v1_result(result, where))
            versions.add("1.x")
        else:
            raise ConfigError(f"{where}' has neither 'times' nor 'measurements'; understood: {VERSIONS}")
    if len(versions) > 1:
        raise ConfigError(f"{path}: key 'results' mixes hyperfine 1.x and 2.x commands")
    (version,) = versions
    if schema is not None and {1: "1.x", 2: "2.x"}[schema] != version:
        raise ConfigError(f"{path}: key 'schema_version' is {schema} but the commands are hyperfine {version}'s")
    return HyperfineFile(path=path, raw=raw, version=version, results=tuple(parsed))


def _run_error(code: Any) -> str:
    # hyperfine writes null for a run ended by a signal: a failed run too
    return "" if code == 0 else "ended by a signal" if code is None else f"exit code {code}"


def _v1_result(result: Mapping[str, Any], where: str) -> CommandResult:
    times = result["times"]
    if not isinstance(times, list) or not times or not all(is_number(t) and math.isfinite(t) for t in times):
        raise ConfigError(f"{where}.times' must be a non-empty list of seconds (hyperfine 1.12 or newer writes it)")
    codes = result.get("exit_codes")
    if codes is None:
        codes = [0] * len(times)
    elif (not isinstance(codes, list) or len(codes) != len(times)
          or not all(c is None or (isinstance(c, int) and not isinstance(c, bool)) for c in codes)):
        raise ConfigError(f"{where}.exit_codes' must list one exit code per entry of times")
    memory = result.get("memory_usage_byte")
    if memory is not None and (not isinstance(memory, list) or len(memory) != len(times)
                               or not all(is_number(m) and m >= 0 for m in memory)):
        raise ConfigError(f"{where}.memory_usage_byte' must list one byte count per entry of times")
    parameters = result.get("parameters", {})
    if not isinstance(parameters, dict) or not all(isinstance(v, str) for v in parameters.values()):
        raise ConfigError(f"{where}.parameters' must map each parameter name to its value")
    runs = tuple(ImportedRun(value=float(seconds), exit_code=code, error=_run_error(code),
                             metrics={} if memory is None else {"memory_usage_byte": float(memory[k])})
                 for k, (seconds, code) in enumerate(zip(times, codes)))
    return CommandResult(command=result["command"], parameters=dict(parameters), runs=runs,
                         summary={k: result[k] for k in _SUMMARY_KEYS if is_number(result.get(k))},
                         per_run_metrics=frozenset() if memory is None else frozenset({"memory_usage_byte"}))


def _quantity(value: Any, unit: str, where: str) -> float:
    """A 2.x quantity, `{"value": …, "unit": …}` (a bare number, as earlier development builds wrote it)."""
    if isinstance(value, dict):
        if value.get("unit") != unit:
            raise ConfigError(f"{where}.unit' is {value.get('unit')!r}; expected {unit!r}")
        value = value.get("value")
    if not is_number(value) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}' must be a non-negative number of {unit}s")
    return float(value)


def _v2_result(result: Mapping[str, Any], where: str) -> CommandResult:
    measurements = result["measurements"]
    if not isinstance(measurements, list) or not measurements:
        raise ConfigError(f"{where}.measurements' must be a non-empty list, one entry per run")
    runs = []
    for k, measurement in enumerate(measurements):
        at = f"{where}.measurements[{k}]"
        if not isinstance(measurement, dict) or "time_wall_clock" not in measurement:
            raise ConfigError(f"{at}.time_wall_clock' is missing")
        code = measurement.get("exit_code", 0)
        if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
            raise ConfigError(f"{at}.exit_code' must be an integer or null")
        metrics = {_V2_METRIC[key]: _quantity(measurement[key], unit, f"{at}.{key}")
                   for key, unit in _V2_KEYS.items() if key in _V2_METRIC and key in measurement}
        seconds = _quantity(measurement["time_wall_clock"], "second", f"{at}.time_wall_clock")
        runs.append(ImportedRun(value=seconds, metrics=metrics, exit_code=code, error=_run_error(code)))
    parameters = result.get("parameters", {})
    if not isinstance(parameters, dict) or not all(
            isinstance(p, dict) and isinstance(p.get("value"), str) for p in parameters.values()):
        raise ConfigError(f"{where}.parameters' must map each parameter name to {{value}}")
    name = result.get("name")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"{where}.name' must be a string (the --command-name)")
    per_run = frozenset.intersection(*(frozenset(run.metrics) for run in runs))
    return CommandResult(command=name or result["command"],
                         parameters={n: p["value"] for n, p in parameters.items()}, runs=tuple(runs), summary={},
                         per_run_metrics=per_run, command_line=result["command"] if name else "")


def _listed(results: Sequence[CommandResult]) -> str:
    return ", ".join(f"{i}: {r.command!r}" for i, r in enumerate(results, 1))


def _by_command(results: Sequence[CommandResult], wanted: str | None, default: int, path: Path,
                option: str) -> int:
    if wanted is None:
        return default
    names = [r.command for r in results]
    if wanted not in names and [r.command_line for r in results].count(wanted) == 1:
        return [r.command_line for r in results].index(wanted)  # 2.x: the command line of a named command
    if wanted in names:
        if names.count(wanted) > 1:
            raise ConfigError(f"{path}: {option} {wanted!r} names {names.count(wanted)} commands; pick one by "
                              "its 1-based position")
        return names.index(wanted)
    if wanted.isdigit() and 1 <= int(wanted) <= len(results):
        return int(wanted) - 1
    raise ConfigError(f"{path}: {option} {wanted!r} is not one of the commands ({_listed(results)})")


def _by_parameter(results: Sequence[CommandResult], name: str, wanted: str | None, default: int, path: Path,
                  option: str) -> int:
    values = list(dict.fromkeys(r.parameters[name] for r in results))
    if wanted is None:
        if len(values) != 2:
            raise ConfigError(f"{path}: parameter {name!r} takes {len(values)} values ({', '.join(values)}); "
                              "choose two with --off and --on")
        wanted = values[default]
    matches = [i for i, r in enumerate(results) if r.parameters[name] == wanted]
    if not matches:
        raise ConfigError(f"{path}: {option} {wanted!r} is not a value of parameter {name!r} "
                          f"(values: {', '.join(values)})")
    if len(matches) > 1:
        listed = ", ".join(f"{i + 1}: {results[i].command!r}" for i in matches)
        raise ConfigError(f"{path}: {option} {name}={wanted} matches {len(matches)} commands ({listed}); the "
                          "other parameters differ too, so pick the two commands by --off/--on without --param")
    return matches[0]


def _choose(data: HyperfineFile, off: str | None, on: str | None,
            param: str | None) -> tuple[CommandResult, CommandResult]:
    results, path = data.results, data.path
    if param is not None:
        missing = [r.command for r in results if param not in r.parameters]
        if missing:
            names = sorted({n for r in results for n in r.parameters})
            present = f"parameters: {', '.join(names)}" if names else "it has no parameters (-P/-L)"
            raise ConfigError(f"{path}: --param {param!r} is not a parameter of every command ({present})")
        return (results[_by_parameter(results, param, off, 0, path, "--off")],
                results[_by_parameter(results, param, on, 1, path, "--on")])
    if len(results) < 2:
        raise ConfigError(f"{path}: key 'results' holds one command; a gate compares two")
    if len(results) > 2 and (off is None or on is None):
        raise ConfigError(f"{path}: key 'results' holds {len(results)} commands ({_listed(results)}); choose two "
                          "with --off and --on")
    off_index = _by_command(results, off, 0, path, "--off")
    on_index = _by_command(results, on, 1, path, "--on")
    if off_index == on_index:
        raise ConfigError(f"{path}: --off and --on name the same command")
    return results[off_index], results[on_index]


def _check_guards(data: HyperfineFile, guards: Sequence[GuardSpec], chosen: Sequence[CommandResult]) -> None:
    for guard in guards:
        for result in chosen:
            if guard.metric in result.per_run_metrics:
                continue
            index = data.results.index(result)
            if data.version == "2.x":
                raise ConfigError(f"{data.path}: key 'results[{index}].measurements' lacks "
                                  f"{guard.metric!r} in some runs; --guard {guard.metric} needs it in every run")
            if guard.metric == "memory_usage_byte":
                raise ConfigError(f"{data.path}: key 'results[{index}].memory_usage_byte' is missing "
                                  "(hyperfine 1.20 or newer records it per run); --guard needs per-run values")
            raise ConfigError(f"{data.path}: key 'results[{index}].{guard.metric}' is one mean per command in "
                              f"hyperfine {data.version}; --guard {guard.metric} needs per-run values "
                              "(hyperfine 2.x records them)")


def _without_zero_times(name: str, result: CommandResult) -> tuple[tuple[ImportedRun, ...], str, bool]:
    """The runs with a 0.0 s time left out, the line that says so ('' if none), and whether too many were."""
    kept = tuple(run for run in result.runs if run.error or run.value != 0.0)
    zeros, n = len(result.runs) - len(kept), len(result.runs)
    if not zeros:
        return kept, "", False
    line = (f"{zeros} of {n} runs of {name!r} timed 0.0 s, below the timer's resolution: hyperfine subtracts "
            "the shell's start-up time and clamps at 0")
    if zeros > ZERO_TIMES_LIMIT_FRAC * n:
        return kept, (f"{line}; above {ZERO_TIMES_LIMIT_FRAC:.0%} of an arm, its mean is no measurement: "
                      f"{ZERO_TIMES_HINT}"), True
    overstated_pct = 100 * zeros / (n - zeros)
    return kept, (f"{line}; they are left out, which can overstate the arm's mean by at most "
                  f"{overstated_pct:.2g} %: {ZERO_TIMES_HINT}"), False


def _arm(name: str, result: CommandResult, param: str | None, runs: tuple[ImportedRun, ...]) -> ImportedArm:
    config: dict[str, Any] = {"command": result.command_line or result.command}
    if param is not None:
        config.update(result.parameters)
    return ImportedArm(name=name, config=config, runs=runs)


def evidence_from_hyperfine(path: Path, *, off: str | None = None, on: str | None = None,
                            param: str | None = None, guards: Sequence[str] = (), gate_id: str | None = None,
                            title: str | None = None, date: str | None = None,
                            threshold: ThresholdSpec = ThresholdSpec()) -> SeriesEvidence:
    """Series evidence of two hyperfine commands: chosen by command (off default the first, on the second)
    or, with `param`, by that parameter's value; `guards` are `METRIC:MAX_DROP` texts (common.parse_guard)."""
    guard_specs = [parse_guard(text, dict.fromkeys(GUARD_METRICS, "lower"), path) for text in guards]
    data = read_hyperfine(path)
    off_result, on_result = _choose(data, off, on, param)
    _check_guards(data, guard_specs, (off_result, on_result))
    if param is None:
        names = off_result.command, on_result.command
    else:
        names = f"{param}={off_result.parameters[param]}", f"{param}={on_result.parameters[param]}"
    warnings, invalid = [NOT_INTERLEAVED, NO_LOAD], []
    arms = []
    for name, result in zip(names, (off_result, on_result)):
        runs, line, too_many = _without_zero_times(name, result)
        if too_many:
            invalid.append(Reason(ReasonCode.IMPORTED_ZERO_TIMES, f"imported from hyperfine: {line}"))
        elif line:
            warnings.append(line)
        arms.append(_arm(name, result, param, runs))
    identity = Identity.of(path, gate_id=gate_id, title=title, date=date,
                           tool="hyperfine")
    commands = {name: {"command": r.command_line or r.command,
                       **({"name": r.command} if r.command_line else {}),
                       **({"parameters": dict(r.parameters)} if r.parameters else {}),
                       **dict(r.summary)} for name, r in zip(names, (off_result, on_result))}
    evidence = imported_evidence(
        tool="hyperfine", sources=((path, data.raw),), off=arms[0], on=arms[1], identity=identity,
        guards=guard_specs, threshold=threshold, warnings=warnings,
        provenance={"hyperfine": {"version": data.version, "commands": commands}})
    return dataclasses.replace(evidence, invalid_reasons=evidence.invalid_reasons + tuple(invalid))

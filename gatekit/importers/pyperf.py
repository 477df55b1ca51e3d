"""pyperf's JSON as series evidence: one file per arm, as `pyperf compare_to OFF.json ON.json` reads them.

pyperf (format "1.0", `pyperf timeit|run -o FILE`, also gzipped): `{version, metadata, benchmarks: [{metadata,
runs: [{metadata, warmups, values}]}]}`. Metadata is inherited: the suite's, then the benchmark's, then the
run's own (pyperf hoists what all runs share, so `load_avg_1min` may sit at any level). Each run is one worker
process; the mean of its `values` becomes one run, and a run with only warmups (pyperf's calibration run) is
not a run. A run's `load_avg_1min` becomes its load evidence. The two files ran one after the other, never
interleaved, so the finding says so.
"""

from __future__ import annotations

import gzip
import io
import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.analysis import SeriesEvidence
from gatekit.config import ThresholdSpec
from gatekit.errors import ConfigError
from gatekit.importers.common import (NO_LOAD, NOT_INTERLEAVED, Identity, ImportedArm, ImportedRun, imported_evidence,
                                      is_number, parse_json, read_bytes, slug)
from gatekit.sanitize import MAX_METRIC_MAGNITUDE, usable_metric
from gatekit.storage import MAX_INPUT_BYTES

FORMAT_VERSION = "1.0"  # pyperf 1.0 and newer; older files are rewritten by `pyperf convert`
# pyperf's unit metadata → the primary metric's name in the finding (values are per loop, not per process)
PRIMARY_BY_UNIT = {"second": "time_s", "byte": "memory_bytes", "integer": "value"}
# metadata that describes one run's moment, not the benchmark: kept out of the arm's config and provenance
_RUN_STATE = frozenset({"date", "duration", "uptime", "boot_time", "load_avg_1min", "mem_max_rss",
                        "runnable_threads", "calibrate_loops", "cpu_temp", "cpu_freq", "command_max_rss",
                        "tracemalloc_peak"})
# metadata that, when it differs between the files, says the arms ran on different machines
_MACHINE_KEYS = ("hostname", "cpu_model_name")
# the finding's provenance host and software, where both files agree
_HOST_KEYS = ("hostname", "cpu_model_name", "cpu_count", "cpu_config", "platform", "aslr")
_SOFTWARE_KEYS = ("python_version", "python_implementation", "python_compiler", "perf_version")


def _meta(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}' must be a table")
    return value


def read_pyperf(path: Path) -> tuple[dict[str, Any], bytes]:
    """A pyperf JSON suite (plain or gzipped), its format version checked; errors name the file and key."""
    raw = read_bytes(path)
    data = parse_json(_gunzipped(raw, path) if raw[:2] == b"\x1f\x8b" else raw, path, "pyperf JSON output")
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list) or not data["benchmarks"]:
        raise ConfigError(f"{path}: key 'benchmarks' is missing or empty (expected pyperf JSON, as "
                          "`pyperf timeit -o FILE` writes it)")
    if data.get("version") != FORMAT_VERSION:
        raise ConfigError(f"{path}: key 'version' is {data.get('version')!r}, not {FORMAT_VERSION!r}; rewrite "
                          "the file with a current pyperf: python -m pyperf convert FILE -o NEW.json")
    return data, raw


def _gunzipped(raw: bytes, path: Path) -> bytes:
    """A gzipped file's contents, inflated in chunks and refused once past MAX_INPUT_BYTES (a few KB of gzip
    can inflate to gigabytes)."""
    chunks, size = [], 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
            while chunk := stream.read(1 << 20):
                size += len(chunk)
                if size > MAX_INPUT_BYTES:
                    raise ConfigError(f"{path}: inflates to more than {MAX_INPUT_BYTES >> 20} MiB, "
                                      "expected gzipped pyperf JSON")
                chunks.append(chunk)
    except (OSError, EOFError) as exc:
        raise ConfigError(f"{path}: not pyperf JSON output: {exc}") from None
    return b"".join(chunks)


def _benchmarks(data: Mapping[str, Any], path: Path) -> list[tuple[str, dict[str, Any], list[Any]]]:
    """(name, inherited metadata, runs) of each benchmark in the file."""
    suite_meta = _meta(data.get("metadata"), f"{path}: key 'metadata")
    found = []
    for index, bench in enumerate(data["benchmarks"]):
        where = f"{path}: key 'benchmarks[{index}]"
        if not isinstance(bench, dict):
            raise ConfigError(f"{where}' must be a table")
        meta = {**suite_meta, **_meta(bench.get("metadata"), f"{where}.metadata")}
        if not isinstance(meta.get("name"), str):
            raise ConfigError(f"{where}.metadata.name' is missing (pyperf names every benchmark)")
        if not isinstance(bench.get("runs"), list):
            raise ConfigError(f"{where}.runs' must be a list of runs")
        found.append((meta["name"], meta, bench["runs"]))
    return found


def _pick(path: Path, data: Mapping[str, Any], wanted: str | None) -> tuple[str, dict[str, Any], list[Any], int]:
    benchmarks = _benchmarks(data, path)
    names = [name for name, _, _ in benchmarks]
    if wanted is None:
        if len(benchmarks) > 1:
            raise ConfigError(f"{path}: key 'benchmarks' holds {len(names)} benchmarks ({', '.join(names)}); "
                              "choose one with --benchmark NAME")
        return (*benchmarks[0], 0)
    if wanted not in names:
        raise ConfigError(f"{path}: --benchmark {wanted!r} is not one of its benchmarks ({', '.join(names)})")
    index = names.index(wanted)
    return (*benchmarks[index], index)


def _runs(path: Path, index: int, meta: Mapping[str, Any], runs: Sequence[Any]) -> tuple[ImportedRun, ...]:
    """One run per pyperf run with values: their mean, and the run's load_avg_1min as its load."""
    imported = []
    for k, run in enumerate(runs):
        where = f"{path}: key 'benchmarks[{index}].runs[{k}]"
        if not isinstance(run, dict):
            raise ConfigError(f"{where}' must be a table")
        values = run.get("values", [])
        if not isinstance(values, list) or not all(is_number(v) for v in values):
            raise ConfigError(f"{where}.values' must be a list of numbers")
        if not all(usable_metric(v) for v in values):  # their mean must not overflow
            raise ConfigError(f"{where}.values' must be finite numbers within ±{MAX_METRIC_MAGNITUDE:g}")
        if not values:  # warmups only: pyperf's calibration run
            continue
        run_meta = {**meta, **_meta(run.get("metadata"), f"{where}.metadata")}
        load = run_meta.get("load_avg_1min")
        if load is not None and not is_number(load):
            raise ConfigError(f"{where}.metadata.load_avg_1min' must be a number")
        imported.append(ImportedRun(value=statistics.fmean(values), load1=None if load is None else float(load)))
    if not imported:
        raise ConfigError(f"{path}: key 'benchmarks[{index}].runs' holds no run with values (only warmups)")
    return tuple(imported)


def _describing(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in sorted(meta.items()) if key not in _RUN_STATE}


def _agreed(described: Mapping[str, Mapping[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    return {key: described["off"][key] for key in keys
            if key in described["off"] and described["off"][key] == described["on"].get(key)}


def evidence_from_pyperf(off_path: Path, on_path: Path, *, benchmark: str | None = None,
                         gate_id: str | None = None, title: str | None = None, date: str | None = None,
                         threshold: ThresholdSpec = ThresholdSpec()) -> SeriesEvidence:
    """Series evidence of one pyperf benchmark in two files: off's runs against on's."""
    (off_data, off_raw), (on_data, on_raw) = read_pyperf(off_path), read_pyperf(on_path)
    off_name, off_meta, off_runs, off_index = _pick(off_path, off_data, benchmark)
    on_name, on_meta, on_runs, on_index = _pick(on_path, on_data, benchmark)
    units = {path: meta.get("unit", "second") for path, meta in ((off_path, off_meta), (on_path, on_meta))}
    for path, unit in units.items():
        if unit not in PRIMARY_BY_UNIT:
            raise ConfigError(f"{path}: key 'metadata.unit' is {unit!r}, not one of {', '.join(PRIMARY_BY_UNIT)}")
    if units[off_path] != units[on_path]:
        raise ConfigError(f"{on_path}: key 'metadata.unit' is {units[on_path]!r} but {off_path} measures "
                          f"{units[off_path]!r}; the arms must measure the same thing")
    # arms are named by their files, as pyperf compare_to names them
    off_arm, on_arm = off_path.stem, on_path.stem
    if off_arm == on_arm:
        off_arm, on_arm = "off", "on"
    described = {"off": _describing(off_meta), "on": _describing(on_meta)}
    differing = sorted(key for key in described["off"].keys() | described["on"].keys()
                       if described["off"].get(key) != described["on"].get(key))
    off = ImportedArm(off_arm, {"file": str(off_path), **{k: described["off"].get(k) for k in differing}},
                      _runs(off_path, off_index, off_meta, off_runs))
    on = ImportedArm(on_arm, {"file": str(on_path), **{k: described["on"].get(k) for k in differing}},
                     _runs(on_path, on_index, on_meta, on_runs))
    name = off_name if off_name == on_name else f"{off_name}-{on_name}"
    identity = Identity.of(off_path, gate_id=gate_id or slug(name, "pyperf"), title=title, date=date,
                           tool="pyperf", subject=name)
    warnings = [NOT_INTERLEAVED]
    loads = [run.load1 is not None for arm in (off, on) for run in arm.runs]
    if not any(loads):
        warnings.append(NO_LOAD)
    elif not all(loads):
        warnings.append("some runs carry no load_avg_1min (pyperf records it where the OS reports a load "
                        "average), so their windows cannot be audited")
    warnings += [f"the files were recorded on different machines ({key} {described['off'].get(key)!r} vs "
                 f"{described['on'].get(key)!r}), so the machine is confounded with the arm"
                 for key in _MACHINE_KEYS if key in differing]
    return imported_evidence(
        tool="pyperf", sources=((off_path, off_raw), (on_path, on_raw)), off=off, on=on, identity=identity,
        primary=PRIMARY_BY_UNIT[units[off_path]], threshold=threshold, warnings=warnings,
        provenance={"host": _agreed(described, _HOST_KEYS), "software": _agreed(described, _SOFTWARE_KEYS),
                    "pyperf": {"benchmark": name, "metadata": {off_arm: described["off"],
                                                                on_arm: described["on"]}}})

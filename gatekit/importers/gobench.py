"""`go test -bench` output as series evidence: OLD is off, NEW is on, as `benchstat OLD NEW` reads them.

The Go benchmark format (golang.org/design/14313-benchmark-format, what benchstat parses): a configuration line
`key: value` (key starting with a lower-case letter, no spaces or upper case: `goos: linux`, `pkg: ...`,
`cpu: ...`) applies to the results below it; a result line is `BenchmarkName-PROCS  N  value unit  value unit
...` (`-PROCS` is GOMAXPROCS, left out when it is 1); every other line (PASS, ok, test logs) is not part of it.
With `-count N` a benchmark has N result lines: each is one run. `ns/op` becomes the primary `time_s` (seconds
per op); every other unit (`B/op`, `allocs/op` from -benchmem, `MB/s` from SetBytes, ReportMetric's own) is a
metric of the run, usable as a guard. The two files ran one after the other, never interleaved, and Go samples
no load; the finding says both.

A benchmark is its package (the `pkg:` line above it: `go test -bench . ./...` prints one section per
package), its name and its GOMAXPROCS, as benchstat groups them: `BenchmarkJoin` of two packages are two
benchmarks (`--pkg` picks one), and `Join` and `Join-2` of `-cpu 1,2` are two as well. The gate id names all
that tells it apart (`join-2`, `strjoin-join`), so two imports of one pair of files never share a finding.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from gatekit.analysis import SeriesEvidence
from gatekit.config import ThresholdSpec
from gatekit.errors import ConfigError
from gatekit.importers.common import (NO_LOAD, NOT_INTERLEAVED, Identity, ImportedArm, ImportedRun, imported_evidence,
                                      parse_guard, read_bytes, slug)

PRIMARY = "time_s"  # seconds per op, from ns/op
PRIMARY_UNIT = "ns/op"
NS_PER_S = 1e9
# the format's key rule: starts lower case, then anything but space, upper case and the colon
_CONFIG_LINE = re.compile(r"([a-z][^\sA-Z:]*):(?:\s+(.*))?")
_PROCS = re.compile(r"(.+)-(\d+)")
# configuration that, when it differs between the files, says the arms ran on different machines
_MACHINE_KEYS = ("cpu", "goos", "goarch")


@dataclass(frozen=True, slots=True)
class GoResult:
    """One result line: one run of a benchmark."""

    line: int
    iterations: int
    values: Mapping[str, float]  # unit → value, in the line's order


@dataclass(frozen=True, slots=True)
class GoBenchmark:
    """A benchmark's result lines in one file and the configuration they ran under."""

    name: str  # as benchstat shows it: without `Benchmark`, with `-PROCS` only where one file has several
    base: str  # without `Benchmark` and `-PROCS`
    procs: int
    pkg: str  # the `pkg:` configuration it ran under ('' where the file has none)
    pkg_shared: bool  # another package of the file has a benchmark of the same name
    config: Mapping[str, str]
    results: tuple[GoResult, ...]


def _result_fields(path: Path, number: int, fields: Sequence[str]) -> GoResult:
    where = f"{path}:{number}: benchmark line"
    try:
        iterations = int(fields[1])
    except ValueError:
        raise ConfigError(f"{where}: the iteration count {fields[1]!r} is not a whole number (a benchmark that "
                          "prints to stdout splits its result line; log with b.Log instead)") from None
    if len(fields) % 2:
        raise ConfigError(f"{where}: {fields[-1]!r} is a value without a unit (expected value-unit pairs after "
                          "the iteration count)")
    values: dict[str, float] = {}
    for value, unit in zip(fields[2::2], fields[3::2]):
        try:
            number_value = float(value)
        except ValueError:
            raise ConfigError(f"{where}: {value!r} (before {unit!r}) is not a number") from None
        if not math.isfinite(number_value):
            raise ConfigError(f"{where}: {value} {unit} is not a finite number")
        if unit in values:
            raise ConfigError(f"{where}: unit {unit!r} appears twice")
        values[unit] = number_value
    return GoResult(line=number, iterations=iterations, values=values)


Key = tuple[str, str, int]  # (package, name without -PROCS, GOMAXPROCS)


def read_gobench(path: Path) -> tuple[dict[Key, GoBenchmark], bytes]:
    """The benchmarks of a `go test -bench` output file, by (package, name, GOMAXPROCS), in the file's order."""
    raw = read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not `go test -bench` text output: {exc}") from None
    config: dict[str, str] = {}
    configs: dict[Key, dict[str, str]] = {}  # the config of each benchmark's first line
    results: dict[Key, list[GoResult]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        head = fields[0]
        # a result line: `Benchmark` then nothing or a character that is not a lower-case letter
        if head.startswith("Benchmark") and not head[len("Benchmark"):][:1].islower():
            if len(fields) == 1:  # the name alone: `go test -v` prints it before the benchmark's result line
                continue
            result = _result_fields(path, number, fields)
            if PRIMARY_UNIT not in result.values:
                raise ConfigError(f"{path}:{number}: benchmark line: no {PRIMARY_UNIT} value (units: "
                                  f"{', '.join(result.values) or 'none'})")
            name = head[len("Benchmark"):]
            matched = _PROCS.fullmatch(name)
            base, procs = (matched.group(1), int(matched.group(2))) if matched else (name, 1)
            key = (config.get("pkg", ""), base, procs)
            first = configs.setdefault(key, dict(config))
            if first != config:
                changed = sorted(k for k in set(config) | set(first) if config.get(k) != first.get(k))
                raise ConfigError(f"{path}:{number}: benchmark {head} appears again under another configuration "
                                  f"({', '.join(f'{k}: {config.get(k)}' for k in changed)}); split the file")
            results.setdefault(key, []).append(result)
            continue
        matched = _CONFIG_LINE.fullmatch(line.rstrip())
        if matched:
            config[matched.group(1)] = (matched.group(2) or "").strip()
    if not results:
        raise ConfigError(f"{path}: no benchmark result line found (expected `go test -bench` output, lines "
                          "like `BenchmarkName-8  1000  1234 ns/op`)")
    procs_by_base = Counter((pkg, base) for pkg, base, _ in results)
    pkgs_by_base: dict[str, set[str]] = {}
    for pkg, base, _ in results:
        pkgs_by_base.setdefault(base, set()).add(pkg)
    benchmarks = {}
    for (pkg, base, procs), lines in results.items():
        # run with -cpu 1,2, one name has several GOMAXPROCS: the suffix tells them apart, as benchstat shows it
        name = f"{base}-{procs}" if procs_by_base[(pkg, base)] > 1 and procs > 1 else base
        benchmarks[(pkg, base, procs)] = GoBenchmark(
            name=name, base=base, procs=procs, pkg=pkg, pkg_shared=len(pkgs_by_base[base]) > 1,
            config=configs[(pkg, base, procs)], results=tuple(lines))
    return benchmarks, raw


def _shown(benchmark: GoBenchmark) -> str:
    """The benchmark as a listing names it: with its package where another package has the same name."""
    return f"{benchmark.name} ({benchmark.pkg})" if benchmark.pkg_shared else benchmark.name


def _in_pkg(benchmark: GoBenchmark, pkg: str) -> bool:
    """`--pkg` names the package in full (example.com/m/strjoin) or by its last elements (strjoin)."""
    return benchmark.pkg == pkg or benchmark.pkg.endswith(f"/{pkg}")


def _pick(path: Path, benchmarks: Mapping[Key, GoBenchmark], wanted: str | None,
          pkg: str | None = None) -> GoBenchmark:
    found = list(benchmarks.values())
    names = ", ".join(_shown(b) for b in found)
    if pkg is not None:
        found = [b for b in found if _in_pkg(b, pkg)]
        if not found:
            pkgs = ", ".join(dict.fromkeys(b.pkg for b in benchmarks.values()))
            raise ConfigError(f"{path}: --pkg {pkg!r} is not one of its packages ({pkgs})")
    if wanted is None:
        if len(found) > 1:
            raise ConfigError(f"{path}: holds {len(found)} benchmarks ({names}); choose one with --bench NAME")
        return found[0]
    wanted = wanted.removeprefix("Benchmark")
    matches = [b for b in found if wanted == b.name] or [b for b in found if wanted == b.base]
    if not matches:
        matches = [b for b in found if wanted == f"{b.base}-{b.procs}"]
    if len({b.pkg for b in matches}) > 1:
        raise ConfigError(f"{path}: --bench {wanted!r} is a benchmark of several packages; choose one with --pkg "
                          f"({', '.join(dict.fromkeys(b.pkg for b in matches))})")
    if len(matches) > 1:
        raise ConfigError(f"{path}: --bench {wanted!r} ran with several GOMAXPROCS values; name one "
                          f"({', '.join(b.name for b in matches)})")
    if not matches:
        raise ConfigError(f"{path}: --bench {wanted!r} is not one of its benchmarks ({names})")
    return matches[0]


def _runs(benchmark: GoBenchmark) -> tuple[ImportedRun, ...]:
    return tuple(ImportedRun(value=result.values[PRIMARY_UNIT] / NS_PER_S,
                             metrics={unit: value for unit, value in result.values.items() if unit != PRIMARY_UNIT})
                 for result in benchmark.results)


def guard_direction(unit: str) -> str:
    """Rates (`MB/s`, anything per second) are higher-is-better; costs per op (`B/op`, `allocs/op`) lower."""
    return "higher" if unit.endswith("/s") else "lower"


def _subject(old: GoBenchmark, new: GoBenchmark) -> tuple[str, str]:
    """What the finding is about, and the gate id naming it: the name as either file tells it apart (with
    `-PROCS` where a file ran several GOMAXPROCS, with the package where a file has it in several)."""
    procs = old.procs if old.procs == new.procs else None
    qualified = procs is not None and procs > 1 and (old.name != old.base or new.name != new.base)
    name = f"{old.base}-{procs}" if qualified else old.name if old.name == new.name else f"{old.name} vs {new.name}"
    pkg = old.pkg if old.pkg_shared or new.pkg_shared else ""
    return (f"{pkg}.{name}" if pkg else name), slug(f"{pkg.rsplit('/', 1)[-1]}-{name}" if pkg else name, "gobench")


def evidence_from_gobench(old_path: Path, new_path: Path, *, bench: str | None = None, pkg: str | None = None,
                          guards: Sequence[str] = (), gate_id: str | None = None, title: str | None = None,
                          date: str | None = None, threshold: ThresholdSpec = ThresholdSpec()) -> SeriesEvidence:
    """Series evidence of one Go benchmark in two files: OLD's runs (off) against NEW's (on)."""
    (old_benchmarks, old_raw), (new_benchmarks, new_raw) = read_gobench(old_path), read_gobench(new_path)
    old = _pick(old_path, old_benchmarks, bench, pkg)
    # NEW's benchmark: the same name, in the same package where NEW has that package
    same_pkg = pkg if pkg is not None else old.pkg if any(b.pkg == old.pkg for b in new_benchmarks.values()) else None
    new = _pick(new_path, new_benchmarks, bench if bench is not None else old.name, same_pkg)
    # arms are named by their files, as benchstat names its columns
    off_name, on_name = old_path.stem, new_path.stem
    if off_name == on_name:
        off_name, on_name = "old", "new"
    keys = sorted(set(old.config) | set(new.config))
    differing = [k for k in keys if old.config.get(k) != new.config.get(k)]
    off = ImportedArm(off_name, {"file": str(old_path), **{k: old.config.get(k) for k in differing}}, _runs(old))
    on = ImportedArm(on_name, {"file": str(new_path), **{k: new.config.get(k) for k in differing}}, _runs(new))
    units = [u for u in dict.fromkeys(u for b in (old, new) for r in b.results for u in r.values) if u != PRIMARY_UNIT]
    if PRIMARY_UNIT in guards or PRIMARY in guards:
        raise ConfigError(f"--guard {PRIMARY_UNIT}: it is the primary metric, not a guard")
    specs = tuple(parse_guard(text, {unit: guard_direction(unit) for unit in units}, new_path) for text in guards)
    name, default_id = _subject(old, new)
    identity = Identity.of(old_path, gate_id=gate_id or default_id, title=title, date=date,
                           tool="go test -bench", subject=name)
    warnings = [NOT_INTERLEAVED, NO_LOAD]
    warnings += [f"the files were recorded on different machines ({key}: {old.config.get(key)!r} vs "
                 f"{new.config.get(key)!r}), so the machine is confounded with the arm"
                 for key in _MACHINE_KEYS if key in differing]
    if old.procs != new.procs:
        warnings.append(f"the arms ran with different GOMAXPROCS ({old.procs} vs {new.procs})")
    described = {arm.name: {"benchmark": f"Benchmark{b.base}" + (f"-{b.procs}" if b.procs > 1 else ""),
                            "package": b.pkg, "gomaxprocs": b.procs, "config": b.config,
                            "iterations": [r.iterations for r in b.results], "lines": [r.line for r in b.results]}
                 for arm, b in ((off, old), (on, new))}
    return imported_evidence(
        tool="gobench", sources=((old_path, old_raw), (new_path, new_raw)), off=off, on=on, identity=identity,
        primary=PRIMARY, guards=specs, threshold=threshold, warnings=warnings,
        provenance={"gobench": {"benchmark": name, "unit": "seconds per op (ns/op / 1e9)", "arms": described}})

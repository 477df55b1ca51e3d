"""pytest-benchmark's JSON as series evidence: two of its benchmarks are the arms, their rounds the runs.

pytest-benchmark (`--benchmark-json FILE`, or a file saved by `--benchmark-save`/`--benchmark-autosave`):
`{machine_info, commit_info, benchmarks: [{name, fullname, params, stats: {data: [...], iterations, ...}}],
datetime, version}`. `stats.data` holds each round's time per iteration in seconds; it is present in
`--benchmark-json` output and in saved files only with `--benchmark-save-data`. Each round becomes one run.
pytest-benchmark runs all rounds of one test before the next and samples no load, so the finding says both.

Two ways to compare, as pytest-benchmark does: two benchmarks of one file (`--off NAME --on NAME`), or one
benchmark in two saved runs (`pytest-benchmark compare 0001 0002`, its main workflow: the run before a change
and the run after it), the runs named by file or by the run id pytest-benchmark gives them, found in its
storage folder (`.benchmarks/<machine>/NNNN_<name>.json`) as its `compare` finds them. `commit_info.id` is a
revision only when it looks like one: outside a repository pytest-benchmark writes `unversioned`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.analysis import SeriesEvidence
from gatekit.config import ThresholdSpec
from gatekit.errors import ConfigError
from gatekit.importers.common import Identity, ImportedArm, ImportedRun, imported_evidence, is_number, read_json, slug

PRIMARY = "time_s"  # seconds per iteration of the benchmarked code, not the process' wallclock
WHAT = "pytest-benchmark --benchmark-json output"
STORAGE = Path(".benchmarks")  # pytest-benchmark's default --benchmark-storage (file://./.benchmarks)
# git describe / hg id: hex digits; pytest-benchmark writes `unversioned` outside a repository, `unknown` on error
_REVISION = re.compile(r"[0-9a-f]{7,64}")


def read_pytest_benchmark(path: Path) -> tuple[list[Mapping[str, Any]], Mapping[str, Any], bytes]:
    """The `benchmarks` list and the whole document, names checked; errors name the file and key."""
    data, raw = read_json(path, WHAT)
    benchmarks = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks:
        raise ConfigError(f"{path}: key 'benchmarks' is missing or empty (expected {WHAT})")
    if "machine_info" not in data:  # pyperf's JSON has benchmarks too
        raise ConfigError(f"{path}: key 'machine_info' is missing (expected {WHAT})")
    for index, bench in enumerate(benchmarks):
        where = f"{path}: key 'benchmarks[{index}]"
        if not isinstance(bench, dict):
            raise ConfigError(f"{where}' must be a table")
        for key in ("name", "fullname"):
            if not isinstance(bench.get(key), str):
                raise ConfigError(f"{where}.{key}' is missing")
        if not isinstance(bench.get("stats"), dict):
            raise ConfigError(f"{where}.stats' must be a table")
    return benchmarks, data, raw


def _pick(benchmarks: Sequence[Mapping[str, Any]], wanted: str, path: Path, option: str) -> int:
    """The benchmark whose fullname is `wanted`, or else the only one whose name is."""
    fullnames = [b["fullname"] for b in benchmarks]
    if wanted in fullnames:
        return fullnames.index(wanted)
    named = [i for i, b in enumerate(benchmarks) if b["name"] == wanted]
    if len(named) == 1:
        return named[0]
    if named:
        raise ConfigError(f"{path}: {option} {wanted!r} names {len(named)} benchmarks "
                          f"({', '.join(fullnames[i] for i in named)}); give its fullname")
    raise ConfigError(f"{path}: {option} {wanted!r} is not one of the benchmarks "
                      f"({', '.join(b['name'] for b in benchmarks)})")


def _arm(bench: Mapping[str, Any], index: int, path: Path) -> ImportedArm:
    where = f"{path}: key 'benchmarks[{index}].stats.data'"
    rounds = bench["stats"].get("data")
    if rounds is None:
        raise ConfigError(f"{where} is missing: the file holds no per-round times; rerun pytest with "
                          "--benchmark-json FILE, or add --benchmark-save-data to --benchmark-save/-autosave")
    if not isinstance(rounds, list) or not rounds or not all(is_number(t) for t in rounds):
        raise ConfigError(f"{where} must be a non-empty list of seconds")
    config = {"benchmark": bench["fullname"]}
    if isinstance(bench.get("params"), dict):
        config.update({f"param.{key}": value for key, value in bench["params"].items()})
    return ImportedArm(bench["name"], config, tuple(ImportedRun(value=float(t)) for t in rounds))


def _provenance(data: Mapping[str, Any], benches: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    machine = dict(data.get("machine_info") or {})
    if isinstance(machine.get("cpu"), dict):  # hundreds of CPU feature names: not evidence, only bulk
        machine["cpu"] = {k: v for k, v in machine["cpu"].items() if k != "flags"}
    commit = data.get("commit_info") or {}
    provenance: dict[str, Any] = {"pytest_benchmark": {
        "version": data.get("version"), "datetime": data.get("datetime"), "machine_info": machine,
        "commit_info": commit,
        "options": {b["name"]: b.get("options") for b in benches},
        "iterations": {b["name"]: b["stats"].get("iterations") for b in benches}}}
    if isinstance(commit, dict) and isinstance(commit.get("id"), str) and _REVISION.fullmatch(commit["id"]):
        provenance["git"] = {"start": {"rev": commit["id"], "branch": commit.get("branch"),
                                       "dirty": commit.get("dirty")}}
    return provenance


def saved_run(text: str, storage: Path = STORAGE) -> Path:
    """A file, or a saved run named as `pytest-benchmark compare` names it (`0001`, `0001_before`): the one
    `<storage>/<machine>/<name>*.json`."""
    path = Path(text)
    if path.is_file() or path.suffix == ".json" or len(path.parts) > 2:
        return path
    found = sorted(storage.glob(f"*/{text}*.json")) if storage.is_dir() else []
    if len(found) == 1:
        return found[0]
    if not found:
        raise ConfigError(f"{text}: neither a file nor a run saved in {storage} (pytest-benchmark --benchmark-save "
                          f"writes {storage}/<machine>/NNNN_<name>.json)")
    raise ConfigError(f"{text}: names {len(found)} saved runs ({', '.join(str(f) for f in found)}); give the file")


def _common_benchmark(off_path: Path, off: Sequence[Mapping[str, Any]], on_path: Path,
                      on: Sequence[Mapping[str, Any]], wanted: str | None) -> tuple[int, int]:
    """The benchmark both runs hold: `wanted` (name or fullname), or the only one they share."""
    if wanted is not None:
        return _pick(off, wanted, off_path, "--benchmark"), _pick(on, wanted, on_path, "--benchmark")
    shared = [b["fullname"] for b in off if b["fullname"] in {o["fullname"] for o in on}]
    if len(shared) != 1:
        names = ", ".join(b["name"] for b in off if b["fullname"] in shared) or "none"
        raise ConfigError(f"{on_path}: the two runs share {len(shared)} benchmarks ({names}); choose one with "
                          "--benchmark NAME")
    return _pick(off, shared[0], off_path, "--benchmark"), _pick(on, shared[0], on_path, "--benchmark")



def evidence_from_saved_runs(off_path: Path, on_path: Path, *, benchmark: str | None = None,
                             gate_id: str | None = None, title: str | None = None, date: str | None = None,
                             threshold: ThresholdSpec = ThresholdSpec()) -> SeriesEvidence:
    """Series evidence of one benchmark in two pytest-benchmark runs (`compare 0001 0002`): OFF's rounds
    against ON's, the arms named by the runs' files."""
    (off_benchmarks, off_data, off_raw), (on_benchmarks, on_data, on_raw) = (read_pytest_benchmark(off_path),
                                                                            read_pytest_benchmark(on_path))
    off_index, on_index = _common_benchmark(off_path, off_benchmarks, on_path, on_benchmarks, benchmark)
    off_bench, on_bench = off_benchmarks[off_index], on_benchmarks[on_index]
    off_name, on_name = off_path.stem, on_path.stem
    if off_name == on_name:
        off_name, on_name = "off", "on"
    # the arms differ in the run (the code it measured), nothing else: the benchmark is the same
    off_arm = ImportedArm(off_name, {"run": str(off_path)}, _arm(off_bench, off_index, off_path).runs)
    on_arm = ImportedArm(on_name, {"run": str(on_path)}, _arm(on_bench, on_index, on_path).runs)
    identity = Identity.of(off_path, gate_id=gate_id or slug(off_bench["name"], "pytest-benchmark"), title=title,
                           date=date, tool="pytest-benchmark", subject=off_bench["name"])
    provenance = {"pytest_benchmark": {"benchmark": off_bench["fullname"], "runs": {
        name: _provenance(data, (bench,))["pytest_benchmark"]
        for name, data, bench in ((off_name, off_data, off_bench), (on_name, on_data, on_bench))}}}
    commits = [_provenance(data, ())["git"]["start"] for data in (off_data, on_data)
               if "git" in _provenance(data, ())]
    if len(commits) == 2:
        provenance["git"] = {"start": commits[0], "end": commits[1]}
    return imported_evidence(tool="pytest-benchmark", sources=((off_path, off_raw), (on_path, on_raw)),
                             off=off_arm, on=on_arm, identity=identity, primary=PRIMARY, threshold=threshold,
                             provenance=provenance)


def evidence_from_pytest_benchmark(path: Path, *, off: str, on: str, gate_id: str | None = None,
                                   title: str | None = None, date: str | None = None,
                                   threshold: ThresholdSpec = ThresholdSpec()) -> SeriesEvidence:
    """Series evidence of two benchmarks of one pytest-benchmark file, named by name or fullname."""
    benchmarks, data, raw = read_pytest_benchmark(path)
    off_index, on_index = _pick(benchmarks, off, path, "--off"), _pick(benchmarks, on, path, "--on")
    if off_index == on_index:
        raise ConfigError(f"{path}: --off and --on name the same benchmark {benchmarks[off_index]['fullname']!r}")
    off_bench, on_bench = benchmarks[off_index], benchmarks[on_index]
    off_arm, on_arm = _arm(off_bench, off_index, path), _arm(on_bench, on_index, path)
    if off_arm.name == on_arm.name:  # one test name in two files: the fullnames tell them apart
        off_arm = ImportedArm(off_bench["fullname"], off_arm.config, off_arm.runs)
        on_arm = ImportedArm(on_bench["fullname"], on_arm.config, on_arm.runs)
    identity = Identity.of(path, gate_id=gate_id, title=title, date=date,
                           tool="pytest-benchmark")
    return imported_evidence(tool="pytest-benchmark", sources=((path, raw),), off=off_arm, on=on_arm,
                             identity=identity, primary=PRIMARY, threshold=threshold,
                             provenance=_provenance(data, (off_bench, on_bench)))

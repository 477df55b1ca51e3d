"""Criterion.rs output as series evidence: two benchmarks (or two baselines of one) as the arms.

Criterion writes each benchmark's last measurement to `target/criterion/<directory>/new/`: `sample.json` holds
`{sampling_mode, iters: [...], times: [...]}` (criterion 0.3.3 and later; 0.2 to 0.3.2 wrote the bare pair
`[[iters...], [times...]]`, and sampled linearly only), the total nanoseconds of each sample over `iters[i]`
iterations (criterion.rs `SavedSample` in `src/lib.rs`, written by `src/analysis/mod.rs`), `benchmark.json` the
benchmark's id (`full_id`, and `directory_name`, the id made file-name safe: `::` becomes `__`),
`estimates.json` Criterion's own bootstrap estimates (`Mean`, `Median`, … before 0.3.3). Each sample is one
run: `times[i] / iters[i]` nanoseconds per iteration, recorded as `time_s` in seconds. Criterion takes all of
one benchmark's samples, then the next benchmark's — not interleaved — and samples no load; the finding says both.

Baselines: after comparing a run with the baseline it names (`base`, or `--baseline NAME` / `--save-baseline
NAME`), Criterion writes its comparison to `<directory>/change/estimates.json` and, while saving (every run
but `--baseline`), copies `new/` into that baseline (`copy_new_dir_to_base`, `src/analysis/mod.rs`). Right
after a plain `cargo bench`, `base/` therefore holds the very sample `new/` holds: two arms with one sample are
refused, naming the workflow that keeps two runs apart. Criterion's own comparison is shown beside gatekit's
Δ when one benchmark's `new` is an arm.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from gatekit.analysis import SeriesEvidence
from gatekit.config import ThresholdSpec
from gatekit.errors import ConfigError
from gatekit.importers.common import (NO_LOAD, NOT_INTERLEAVED, Identity, ImportedArm, ImportedRun, imported_evidence,
                                      is_number, read_json, slug)

PRIMARY = "time_s"  # seconds per iteration
NS_PER_S = 1e9
DEFAULT_BASELINE = "new"  # the latest measurement; `base` is the one before it, other names are saved baselines
SAMPLING_MODES = ("Linear", "Flat")  # criterion's ActualSamplingMode, as serde writes it
ESTIMATE_KEYS = ("mean", "median", "median_abs_dev", "slope", "std_dev")
# criterion 0.2 to 0.3.2 wrote the keys as the enum's names
_OLD_ESTIMATE_KEYS = {"Mean": "mean", "Median": "median", "MedianAbsDev": "median_abs_dev", "Slope": "slope",
                      "StdDev": "std_dev"}
FORMATS = ("criterion 0.3.3+ {sampling_mode, iters, times}", "criterion 0.2 to 0.3.2 [[iters...], [times...]]")
OLD_FORMAT = "criterion 0.2 to 0.3.2"
SAVE_HINT = ("save the run before the change with `cargo bench -- --save-baseline before`, run the change with "
             "`cargo bench -- --baseline before` (which compares without saving), and import ID@before against "
             "ID@new")
_LISTED = 20  # an unknown id lists at most this many of the ids found


@dataclass(frozen=True, slots=True)
class CriterionBenchmark:
    """One benchmark folder: its id as Criterion prints it and the folder holding its baselines."""

    bench_id: str
    folder: Path
    names: frozenset[str]  # every spelling that selects it: full_id, directory_name, title, the folder's path


def find_benchmarks(root: Path) -> list[CriterionBenchmark]:
    """Every benchmark under `root` (a criterion folder, a group's folder or one benchmark's folder)."""
    if not root.exists():
        raise ConfigError(f"{root}: folder not found (expected Criterion's output, e.g. target/criterion)")
    if not root.is_dir():
        raise ConfigError(f"{root}: is a file; give the folder Criterion writes to (e.g. target/criterion)")
    folders = sorted({sample.parent.parent for sample in root.rglob("sample.json")})
    found = []
    for folder in folders:
        described: Mapping[str, Any] = {}
        for baseline in (DEFAULT_BASELINE, *sorted(p.name for p in folder.iterdir() if p.is_dir())):
            path = folder / baseline / "benchmark.json"
            if path.is_file():
                data, _ = read_json(path, "Criterion's benchmark.json")
                if not isinstance(data, dict):
                    raise ConfigError(f"{path}: must be a table with key 'full_id'")
                described = data
                break
        relative = folder.relative_to(root).as_posix() if root in folder.parents else folder.name
        names = {relative, *(str(described[k]) for k in ("full_id", "directory_name", "title")
                             if isinstance(described.get(k), str))}
        found.append(CriterionBenchmark(str(described.get("full_id", relative)), folder, frozenset(names)))
    if not found:
        raise ConfigError(f"{root}: no Criterion benchmark found (no <benchmark>/new/sample.json below it; "
                          "run `cargo bench` first, or give the folder it writes to, target/criterion)")
    return found


def _pick(root: Path, benchmarks: list[CriterionBenchmark], wanted: str, option: str) -> tuple[CriterionBenchmark, str]:
    """The benchmark and baseline that `ID[@BASELINE]` names; the id may be left out when there is one."""
    bench_id, _, baseline = wanted.rpartition("@") if "@" in wanted else (wanted, "", DEFAULT_BASELINE)
    baseline = baseline or DEFAULT_BASELINE
    if not bench_id and len(benchmarks) == 1:
        return benchmarks[0], baseline
    matches = [b for b in benchmarks if bench_id in b.names]
    if len(matches) == 1:
        return matches[0], baseline
    ids = [b.bench_id for b in benchmarks]
    listed = ", ".join(repr(i) for i in ids[:_LISTED])
    if len(ids) > _LISTED:
        listed += f" and {len(ids) - _LISTED} more"
    if not bench_id:
        raise ConfigError(f"{root}: {option} {wanted!r} names no benchmark, and the folder holds {len(ids)} "
                          f"({listed}); write ID@BASELINE")
    if matches:
        raise ConfigError(f"{root}: {option} {bench_id!r} names {len(matches)} benchmarks; give a longer id "
                          f"({', '.join(b.bench_id for b in matches)})")
    raise ConfigError(f"{root}: {option} {bench_id!r} is not one of the benchmarks found ({listed})")


@dataclass(frozen=True, slots=True)
class Sample:
    """One baseline's sample.json: its runs, sampling mode, format and the numbers as written."""

    runs: tuple[ImportedRun, ...]
    mode: str
    format: str  # "" for today's format, OLD_FORMAT for the bare pair
    raw: bytes
    pairs: tuple[tuple[float, float], ...]  # (iters, times) of each sample: what two baselines share or not


def read_sample(path: Path) -> Sample:
    """One run per sample: its mean time per iteration in seconds; errors name the file and key."""
    data, raw = read_json(path, "Criterion's sample.json")
    form = ""
    if isinstance(data, list) and len(data) == 2 and all(isinstance(v, list) for v in data):
        (iters, times), mode, form = data, "Linear", OLD_FORMAT  # before 0.3.3 every sample was linear
    elif isinstance(data, dict):
        sampling_mode = data.get("sampling_mode")
        if sampling_mode not in SAMPLING_MODES:
            raise ConfigError(f"{path}: key 'sampling_mode' is {sampling_mode!r}, not one of "
                              f"{', '.join(SAMPLING_MODES)}")
        mode = str(sampling_mode)
        iters, times = data.get("iters"), data.get("times")
    else:
        raise ConfigError(f"{path}: not a sample file Criterion writes (understood: {'; '.join(FORMATS)})")
    for key, values in (("iters", iters), ("times", times)):
        if not isinstance(values, list) or not values or not all(is_number(v) for v in values):
            raise ConfigError(f"{path}: key '{key}' must be a non-empty list of numbers")
    assert isinstance(iters, list) and isinstance(times, list)
    if len(iters) != len(times):
        raise ConfigError(f"{path}: keys 'iters' and 'times' must be as long as each other "
                          f"({len(iters)} and {len(times)} entries)")
    for index, (count, total) in enumerate(zip(iters, times)):
        if count <= 0:
            raise ConfigError(f"{path}: key 'iters[{index}]' is {count}; a sample runs at least one iteration")
        if total < 0:
            raise ConfigError(f"{path}: key 'times[{index}]' is {total}; a time cannot be negative")
    runs = tuple(ImportedRun(value=total / count / NS_PER_S) for count, total in zip(iters, times))
    return Sample(runs, str(mode), form, raw, tuple(zip(map(float, iters), map(float, times))))


def _estimates(path: Path) -> tuple[dict[str, Any], tuple[Path, bytes] | None]:
    """Criterion's own point estimates and 95 % intervals in nanoseconds, when estimates.json is there."""
    if not path.is_file():
        return {}, None
    data, raw = read_json(path, "Criterion's estimates.json")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a table of estimates (mean, median, ...)")
    data = {_OLD_ESTIMATE_KEYS.get(key, key): value for key, value in data.items()}
    kept: dict[str, Any] = {}
    for key in ESTIMATE_KEYS:
        estimate = data.get(key)
        if not isinstance(estimate, dict) or not is_number(estimate.get("point_estimate")):
            continue
        interval = estimate.get("confidence_interval") or {}
        kept[key] = {"point_estimate_ns": estimate["point_estimate"],
                     **{f"{bound}_ns": interval[bound] for bound in ("lower_bound", "upper_bound")
                        if isinstance(interval, dict) and is_number(interval.get(bound))}}
    return kept, (path, raw)


def _change(benchmark: CriterionBenchmark) -> tuple[dict[str, Any], tuple[Path, bytes] | None]:
    """Criterion's comparison of its last run (new) with the baseline it ran against: the relative change of
    the mean and the median as fractions, with their intervals (`change/estimates.json`)."""
    path = benchmark.folder / "change" / "estimates.json"
    if not path.is_file():
        return {}, None
    data, raw = read_json(path, "Criterion's change/estimates.json")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a table of estimates (mean, median)")
    kept: dict[str, Any] = {}
    for key, estimate in data.items():
        key = _OLD_ESTIMATE_KEYS.get(key, key)
        if key in ("mean", "median") and isinstance(estimate, dict) and is_number(estimate.get("point_estimate")):
            interval = estimate.get("confidence_interval") or {}
            kept[key] = {"change_frac": estimate["point_estimate"],
                         **{f"{bound}_frac": interval[bound] for bound in ("lower_bound", "upper_bound")
                            if isinstance(interval, dict) and is_number(interval.get(bound))},
                         **({"confidence_level": interval["confidence_level"]}
                            if isinstance(interval, dict) and is_number(interval.get("confidence_level")) else {})}
    return kept, (path, raw)


def change_words(change: Mapping[str, Any]) -> str:
    """Criterion's change estimates as a line: `mean −0.25 % [−1.00, +0.57] %, median …`."""
    parts = []
    for key in ("mean", "median"):
        estimate = change.get(key)
        if not estimate:
            continue
        text = f"{key} {100 * estimate['change_frac']:+.2f} %"
        if "lower_bound_frac" in estimate and "upper_bound_frac" in estimate:
            level = estimate.get("confidence_level")
            text += (f" ({f'{100 * level:g} % CI ' if level else ''}[{100 * estimate['lower_bound_frac']:+.2f}, "
                     f"{100 * estimate['upper_bound_frac']:+.2f}] %)")
        parts.append(text)
    return ", ".join(parts)


def _arm(benchmark: CriterionBenchmark, baseline: str) -> tuple[Sample, dict[str, Any], list[tuple[Path, bytes]]]:
    folder = benchmark.folder / baseline
    sample_path = folder / "sample.json"
    if not sample_path.is_file():
        saved = sorted(p.name for p in benchmark.folder.iterdir() if (p / "sample.json").is_file())
        raise ConfigError(f"{sample_path}: file not found (benchmark {benchmark.bench_id!r} has the baselines "
                          f"{', '.join(saved) or 'none'})")
    sample = read_sample(sample_path)
    estimates, estimates_source = _estimates(folder / "estimates.json")
    described = {"id": benchmark.bench_id, "baseline": baseline, "folder": str(benchmark.folder),
                 "sampling_mode": sample.mode, "samples": len(sample.runs),
                 **({"format": sample.format} if sample.format else {}),
                 **({"estimates": estimates} if estimates else {})}
    sources = [(sample_path, sample.raw), *([estimates_source] if estimates_source else [])]
    return sample, described, sources


def evidence_from_criterion(root: Path, *, off: str, on: str, gate_id: str | None = None, title: str | None = None,
                            date: str | None = None, threshold: ThresholdSpec = ThresholdSpec()) -> SeriesEvidence:
    """Series evidence of two Criterion benchmarks, each `ID[@BASELINE]` (baseline default: new)."""
    benchmarks = find_benchmarks(root)
    (off_bench, off_base), (on_bench, on_base) = (_pick(root, benchmarks, off, "--off"),
                                                  _pick(root, benchmarks, on, "--on"))
    if (off_bench, off_base) == (on_bench, on_base):
        raise ConfigError(f"{root}: --off and --on name the same benchmark and baseline "
                          f"({off_bench.bench_id}@{off_base}); name two benchmarks or two baselines")
    off_sample, off_described, off_sources = _arm(off_bench, off_base)
    on_sample, on_described, on_sources = _arm(on_bench, on_base)
    same_bench = off_bench == on_bench
    change, change_source = _change(on_bench) if same_bench and DEFAULT_BASELINE in (off_base, on_base) else ({}, None)
    if off_sample.pairs == on_sample.pairs:
        criterion_says = (f"; Criterion's own comparison of that run with the one before it "
                          f"(change/estimates.json): {change_words(change)}" if change else "")
        raise ConfigError(
            f"{root}: --off {off_bench.bench_id}@{off_base} and --on {on_bench.bench_id}@{on_base} hold the same "
            f"sample (Criterion copies new/ into the baseline it saves, base by default, after every run), so "
            f"this would compare a sample with itself{criterion_says}. To compare two runs, {SAVE_HINT}")
    names = ((f"{off_bench.bench_id}@{off_base}", f"{on_bench.bench_id}@{on_base}") if same_bench
             else (off_bench.bench_id, on_bench.bench_id))
    configs: list[dict[str, str]] = [{}, {}]
    for key, values in (("benchmark", (off_bench.bench_id, on_bench.bench_id)), ("baseline", (off_base, on_base))):
        if values[0] != values[1]:
            configs[0][key], configs[1][key] = values
    off_arm = ImportedArm(names[0], configs[0], off_sample.runs)
    on_arm = ImportedArm(names[1], configs[1], on_sample.runs)
    # the finding's id: a shared group named once (fib/20 vs fib/30 → fib 20 vs 30)
    off_parts, on_parts = off_bench.bench_id.split("/"), on_bench.bench_id.split("/")
    shared = 0
    while shared < min(len(off_parts), len(on_parts)) - 1 and off_parts[shared] == on_parts[shared]:
        shared += 1
    subject = off_bench.bench_id if same_bench else " ".join(
        [*off_parts[:shared], "/".join(off_parts[shared:]), "vs", "/".join(on_parts[shared:])])
    identity = Identity.of(root, gate_id=gate_id or slug(subject, "criterion"), title=title, date=date,
                           tool="Criterion")
    warnings = [NOT_INTERLEAVED, NO_LOAD]
    if off_described["sampling_mode"] != on_described["sampling_mode"]:
        warnings.append(f"the arms were sampled differently ({off_described['sampling_mode']} vs "
                        f"{on_described['sampling_mode']} sampling_mode)")
    if change:
        warnings.append(f"Criterion's own comparison of {on_bench.bench_id}'s last run (new) with the baseline it "
                        f"ran against (base, unless it ran with --baseline NAME), change/estimates.json: "
                        f"{change_words(change)}")
    return imported_evidence(
        tool="criterion", sources=(*off_sources, *on_sources, *([change_source] if change_source else [])),
        off=off_arm, on=on_arm, identity=identity, primary=PRIMARY, threshold=threshold, warnings=warnings,
        provenance={"criterion": {"unit": "seconds per iteration (times[i] / iters[i] / 1e9)",
                                  "benchmarks": {names[0]: off_described, names[1]: on_described},
                                  **({"change": change} if change else {})}})

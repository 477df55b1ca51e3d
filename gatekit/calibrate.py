"""`gate calibrate`: A/A runs of one arm on this machine — how noisy it is, how long it takes to warm up,
whether it drifts or shifts, and how many runs a gate needs to see a stated effect.

The result is stored as `<runs>/calibration.toml`, where a later gate with `sigma_ref = "history"` reads
its σ (frozen into that gate's predecision file). Kalibera & Jones (ISMM 2013) ask for exactly this before
any comparison: measure the noise and the warm-up of the system first, then plan the repetitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tomlkit

from gatekit import __version__, stats
from gatekit.config import CALIBRATION_FILE, ArmSpec, GateConfig
from gatekit.diagnostics import MDE_ALPHA, MDE_POWER, mde_log, n_for_effect, ols_slope, pct
from gatekit.driver import ChosenBackend, Driver, make_backend, make_driver
from gatekit.errors import CalibrationError, ConfigError, GatekitError, OutputError, PreflightError, ProvenanceError
from gatekit.finding import plain
from gatekit.preflight import run_checks
from gatekit.provenance import hash_artifacts, host_fingerprint, software_versions
from gatekit.records import RunRecord
from gatekit.sampler import LoadReader, read_system_load
from gatekit.schedule import Slot
from gatekit.series import JOURNAL_FILE, JournalState, RunLoop, new_series_dir, now, runs_lock
from gatekit.storage import Journal, write_output

CALIBRATION_SCHEMA = "gatekit.calibration/1"
WARMUP_Z = 3.5  # Iglewicz & Hoaglin (1993): a modified z-score above 3.5 marks an outlier
CHANGE_POINT_PERMUTATIONS = 2000
CHANGE_POINT_ALPHA = 0.05
MDE_AT_N = (3, 4, 8)


# -- pure statistics ---------------------------------------------------------------------------------

def warmup_length(values: Sequence[float]) -> int:
    """Leading runs that are outliers against the runs after them, at most half the series.

    Run k counts as warm-up while |x_k − median(rest)| > 3.5 robust σ of the rest, robust σ = 1.4826·MAD
    (Iglewicz & Hoaglin's modified z-score); with MAD = 0 the sample SD stands in, and with that 0 too any
    difference counts (the rest agree exactly and x_k does not).
    """
    w = 0
    while w < len(values) // 2:
        rest = list(values[w + 1:])
        med = stats.median(rest)
        scale = 1.4826 * stats.median([abs(v - med) for v in rest])
        if scale == 0:
            scale = stats.sample_sd(rest) if len(rest) >= 2 else 0.0
        deviation = abs(values[w] - med)
        if (scale > 0 and deviation > WARMUP_Z * scale) or (scale == 0 and deviation > 0):
            w += 1
        else:
            break
    return w


@dataclass(frozen=True, slots=True)
class ChangePoint:
    """At most one change in mean: the split with the largest |pooled two-sample t| and its permutation p."""

    index: int  # position (0-based, within the analysed values) of the first value after the change
    shift_pct: float  # mean after / mean before − 1
    t: float
    p: float

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "shift_pct": self.shift_pct, "t": self.t, "p": self.p,
                "permutations": CHANGE_POINT_PERMUTATIONS}


def _max_split_t(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max over splits k = 2 … n−2 of |Student t| between rows[:, :k] and rows[:, k:]; (max |t|, argmax k)."""
    n = rows.shape[1]
    best_t = np.zeros(rows.shape[0])
    best_k = np.full(rows.shape[0], 2)
    for k in range(2, n - 1):
        a, b = rows[:, :k], rows[:, k:]
        pooled = ((k - 1) * a.var(axis=1, ddof=1) + (n - k - 1) * b.var(axis=1, ddof=1)) / (n - 2)
        se = np.sqrt(pooled * (1 / k + 1 / (n - k)))
        diff = b.mean(axis=1) - a.mean(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(se > 0, np.abs(diff) / np.where(se > 0, se, 1.0), np.where(diff != 0, np.inf, 0.0))
        better = t > best_t
        best_t, best_k = np.where(better, t, best_t), np.where(better, k, best_k)
    return best_t, best_k


def change_point(values: Sequence[float], seed: int = 0) -> ChangePoint | None:
    """The single most likely shift in mean (AMOC, Hinkley 1970) with a permutation p-value: how often a
    random reordering of the same values shows a split at least as strong. None below 4 values."""
    x = np.asarray(values, float)
    if x.size < 4:
        return None
    observed, split = _max_split_t(x[None, :])
    rng = np.random.default_rng(seed)
    shuffled = rng.permuted(np.broadcast_to(x, (CHANGE_POINT_PERMUTATIONS, x.size)).copy(), axis=1)
    null, _ = _max_split_t(shuffled)
    p = (1 + int(np.sum(null >= observed[0] - 1e-12))) / (1 + CHANGE_POINT_PERMUTATIONS)
    k = int(split[0])
    before, after = float(x[:k].mean()), float(x[k:].mean())
    return ChangePoint(k, 100 * (after / before - 1) if before else math.nan, float(observed[0]), p)


@dataclass(frozen=True, slots=True)
class CalibrationStats:
    n: int
    warmup_runs: int
    cv_pct: float  # after the warm-up: the σ a gate on this machine can expect
    cv_all_pct: float
    drift_pct_per_run: float
    change_point: ChangePoint | None
    min_effect_pct: float
    n_needed: int | None  # runs per arm for min_effect at MDE_POWER, one-sided MDE_ALPHA
    mde_pct: Mapping[int, float]  # minimum detectable effect at n runs per arm
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "warmup_runs": self.warmup_runs, "cv_pct": self.cv_pct, "cv_all_pct": self.cv_all_pct,
                "drift_pct_per_run": self.drift_pct_per_run,
                "change_point": self.change_point.to_dict() if self.change_point else None,
                "min_effect_pct": self.min_effect_pct, "n_needed": self.n_needed,
                "alpha": MDE_ALPHA, "power": MDE_POWER,
                "mde_pct": {str(n): v for n, v in self.mde_pct.items()}, "warnings": list(self.warnings)}


def analyze_calibration(values: Sequence[float], min_effect_pct: float) -> CalibrationStats:
    """Everything a calibration reports, from the A/A values in execution order."""
    w = warmup_length(values)
    steady = list(values[w:])
    cv = stats.relative_sd_pct(steady)
    mean = stats.mean(steady)
    drift = 100 * ols_slope(list(range(w, len(values))), steady) / mean if mean else math.nan
    cp = change_point(steady)
    sigma = math.sqrt(math.log1p((cv / 100) ** 2)) if math.isfinite(cv) else math.nan
    mde = {n: -pct(-mde_log(sigma * math.sqrt(2 / n), 2 * n - 2)) for n in MDE_AT_N}
    needed = n_for_effect(cv, min_effect_pct) if math.isfinite(cv) else None
    warnings = []
    if w:
        warnings.append(f"the first {w} run(s) are warm-up outliers: set `warmup = {min(w, 2)}` in the gate")
    if cp is not None and cp.p < CHANGE_POINT_ALPHA:
        warnings.append(f"the A/A series shifts by {cp.shift_pct:+.3f} % at run {w + cp.index + 1} "
                        f"(permutation p {cp.p:.4f}): this machine is not stationary; find the cause "
                        "(thermal or frequency limits, background jobs) and calibrate again")
    if needed is None:
        warnings.append("no n up to 10 000 runs per arm reaches the stated effect: lower the noise first")
    return CalibrationStats(len(values), w, cv, stats.relative_sd_pct(list(values)), drift, cp, min_effect_pct,
                            needed, mde, tuple(warnings))


# -- the runs ------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Calibration:
    """A finished calibration: where it is stored and what it found."""

    path: Path
    latest: Path
    arm: str
    primary: str
    values: tuple[float, ...]
    stats: CalibrationStats
    document: Mapping[str, Any] = field(default_factory=dict)


def calibration_document(*, arm: str, primary: str, gate_path: Path, series_dir: Path, records: Sequence[RunRecord],
                         values: Sequence[float], result: CalibrationStats, started: str,
                         artifacts: Mapping[str, str]) -> dict[str, Any]:
    data = {"schema": CALIBRATION_SCHEMA, "created": started, "gatekit_version": __version__,
            "gate_file": str(gate_path), "series_dir": str(series_dir), "arm": arm, "primary": primary,
            "host": host_fingerprint(), "software": software_versions(), "artifacts": dict(artifacts),
            "labels": [r.label for r in records], "values": list(values), **result.to_dict()}
    return plain(data)


def run_calibration(config: GateConfig, arm: ArmSpec, n: int, *, min_effect_pct: float | None = None,
                    driver: Driver | None = None, backend: ChosenBackend | None = None,
                    report: Callable[[str], None] = lambda text: None,
                    load_reader: LoadReader = read_system_load) -> Calibration:
    """Preflight, then n runs of one arm through the series' run loop (driver, sampler, backend telemetry,
    artifact hashing, journal); store and return the result."""
    if n < 4:
        raise ConfigError(f"--n: a calibration needs at least 4 runs, got {n}")
    driver = driver or make_driver(config.driver.name, config.driver.options, source=config.path,
                                   base_dir=config.base_dir)
    backend = backend or make_backend(config.backend.name, config.backend.options, source=config.path)
    # a missing calibration is what this command makes, so that check does not apply here
    failed = [c for c in run_checks(config, [arm], driver, backend) if not c.ok and c.name != "calibration"]
    if failed:
        raise PreflightError("preflight failed, nothing ran: " + "; ".join(f"{c.name}: {c.detail}" for c in failed))
    runs_dir = config.gate.runs
    primary = config.gate.primary
    effect = config.threshold.floor_pct if min_effect_pct is None else min_effect_pct
    with runs_lock(runs_dir):
        started = now()
        series_dir = new_series_dir(runs_dir, f"calibrate-{arm.name}-{started:%Y%m%d-%H%M%S}")
        journal = Journal(series_dir / JOURNAL_FILE)
        artifacts = hash_artifacts(config.driver.hash)
        start = {"event": "calibration_start", "arm": arm.name, "n": n,
                 "started": started.isoformat(timespec="seconds"), "artifacts": artifacts}
        journal.append(**start)

        def every_run_counts(record: RunRecord) -> None:
            if record.failed or record.value_of(primary) is None:
                why = record.outcome.error or f"primary metric '{primary}' missing"
                raise CalibrationError(f"{record.label} failed: {why} (see {series_dir / record.label / 'stderr.log'}); "
                                       "a calibration needs every run")

        state = JournalState(start=start)
        loop = RunLoop(config, {arm.name: arm}, driver, backend, report, lambda label: load_reader)
        changed = loop.run(series_dir, journal, state, [Slot(arm.name, k) for k in range(1, n + 1)],
                           primary=primary, start_artifacts=artifacts, check=every_run_counts,
                           resume_hint="a calibration cannot be resumed: run it again")
        if changed:
            raise ProvenanceError(f"{series_dir}: " + "; ".join(changed) + "; the calibration is not usable")
        records = sorted(state.records.values(), key=lambda r: r.order)
        values = [float(r.value_of(primary)) for r in records]  # type: ignore[arg-type]
        result = analyze_calibration(values, effect)
        document = calibration_document(arm=arm.name, primary=primary, gate_path=config.path,
                                        series_dir=series_dir, records=records, values=values, result=result,
                                        started=started.isoformat(timespec="seconds"), artifacts=artifacts)
        text = tomlkit.dumps(document)
        path, latest = series_dir / CALIBRATION_FILE, runs_dir / CALIBRATION_FILE
        try:
            write_output(path, text, "calibration")
            write_output(latest, text, "calibration")
        except GatekitError as exc:  # the runs happened: say so, and how to get a usable calibration
            raise OutputError(f"{exc}; the {n} runs are journaled in {series_dir}, but a calibration cannot be "
                              "resumed: fix the folder and run `gate calibrate` again") from None
        journal.append("calibration_end", cv_pct=document.get("cv_pct"), path=str(path))
    return Calibration(path, latest, arm.name, primary, tuple(values), result, document)


def summary(calibration: Calibration) -> str:
    """The terminal summary of a calibration."""
    s = calibration.stats
    lines = [f"calibration of arm {calibration.arm} on {calibration.primary}, {s.n} A/A runs",
             "values: " + ", ".join(f"{v:.4f}" for v in calibration.values),
             f"warm-up runs: {s.warmup_runs}   CV after warm-up: {s.cv_pct:.4f} % (all runs {s.cv_all_pct:.4f} %)   "
             f"drift: {s.drift_pct_per_run:+.4f} %/run"]
    if s.change_point is not None:
        cp = s.change_point
        lines.append(f"change point: largest shift {cp.shift_pct:+.4f} % at run {s.warmup_runs + cp.index + 1}, "
                     f"permutation p {cp.p:.4f}" + (" — NOT stationary" if cp.p < CHANGE_POINT_ALPHA else ""))
    needed = s.n_needed if s.n_needed is not None else "more than 10 000"
    lines.append(f"runs per arm to find a {s.min_effect_pct:g} % effect with {100 * MDE_POWER:g} % power "
                 f"(one-sided α {MDE_ALPHA:g}): {needed}")
    lines.append("minimum detectable effect: " + ", ".join(f"n={n}: {v:.3f} %" for n, v in s.mde_pct.items()))
    lines += [f"  ! {w}" for w in s.warnings]
    lines += ["", f"stored: {calibration.path}", f"latest: {calibration.latest} (used by sigma_ref = \"history\")"]
    return "\n".join(lines)

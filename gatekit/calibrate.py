"""`gate calibrate`: A/A runs of one arm on this machine — how noisy it is, how long it takes to warm up,
whether it drifts or shifts, and how many runs a gate needs to see a stated effect.

The result is stored as `<runs>/calibration.toml`, where a later gate with `sigma_ref = "history"` reads
its σ (frozen into that gate's predecision file). Kalibera & Jones (ISMM 2013) ask for exactly this before
any comparison: measure the noise and the warm-up of the system first, then plan the repetitions.

The plan is made by simulating the gate's own policy at the measured CV (gatekit.simulate, the code behind
`gate simulate`), so its threshold, floor and looks count: a t-test's sample size would promise power the
floor takes away. `gate plan` makes the same plan from a CV and an effect without any runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np
import tomlkit

from gatekit import __version__, stats
from gatekit.config import CALIBRATION_FILE, DEFAULT_MAX_THRESHOLD_PCT, ArmSpec, GateConfig, ThresholdSpec
from gatekit.diagnostics import MDE_POWER, ols_slope
from gatekit.driver import ChosenBackend, Driver, make_backend, make_driver
from gatekit.errors import CalibrationError, ConfigError, GatekitError, OutputError, ProvenanceError
from gatekit.finding import plain
from gatekit.policy_descriptors import DEFAULT_POLICY, describe, gate_policies, policy_for
from gatekit.preflight import refuse_failed, run_checks
from gatekit.provenance import hash_artifacts, host_fingerprint, software_versions
from gatekit.records import CALIBRATION_SCHEMA, Event, RunRecord
from gatekit.sampler import LoadReader, read_system_load
from gatekit.schedule import Slot
from gatekit.series.runloop import RunLoop, new_series_dir, now, runs_lock, stamped_name
from gatekit.series_replay import RunLog
from gatekit.simulate import Scenario, SimulationResult, simulate
from gatekit.storage import Journal, SeriesLayout, write_output

WARMUP_Z = 3.5  # Iglewicz & Hoaglin (1993): a modified z-score above 3.5 marks an outlier
CHANGE_POINT_PERMUTATIONS = 2000
CHANGE_POINT_ALPHA = 0.05


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


# -- planning by simulation ------------------------------------------------------------------------------

PLAN_POWER = MDE_POWER
PLAN_DRAWS = 20_000  # simulated gates per candidate n: the power's MC standard error is ≤ 0.35 points
PLAN_SEED = 20261130
# the sizes a plan tries are each policy's (descriptor.plan_sizes, then bisection at its plan_step)
MDE_TOLERANCE_PCT = 0.01  # the simulated MDE is bisected to this many percentage points
MDE_DRAWS = 10_000  # simulated gates per bisection step


@dataclass(frozen=True, slots=True)
class Plan:
    """Runs per arm for a target power at a true effect, found by simulating the policy itself (its floor,
    threshold and looks included), as `gate simulate` does."""

    policy: str
    cv_pct: float
    effect_pct: float  # negative: on is faster
    thresholds: ThresholdSpec
    power_target_pct: float
    n: int | None  # the fewest runs per arm reaching the target (None: none up to the policy's largest size);
    #                a policy that fixes its stages: their most, 12 (None when its design misses the target)
    power_pct: float  # at n; unreachable: at the largest size; a fixed design: its own
    runs_per_arm: float  # mean runs per arm at that power (the sequential policy may stop at 4)
    tried: tuple[tuple[int, float], ...]  # (runs per arm, simulated power %) of the sizes tried
    draws: int
    seed: int
    reason: str = ""  # why the target is out of reach, when it is
    max_threshold_pct: float = DEFAULT_MAX_THRESHOLD_PCT  # rules.max_threshold_pct the classic rule applied
    rejected_pct: float = 0.0  # at n (or the largest size): gates that end rejected …
    inconclusive_pct: float = 0.0  # … and inconclusive (classic: a threshold above max_threshold_pct)

    @property
    def reached(self) -> bool:
        return self.power_pct >= self.power_target_pct

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "cv_pct": self.cv_pct, "effect_pct": self.effect_pct,
                "sigma_k": self.thresholds.sigma_k, "floor_pct": self.thresholds.floor_pct,
                "max_threshold_pct": self.max_threshold_pct,
                "power_target_pct": self.power_target_pct, "n": self.n, "power_pct": self.power_pct,
                "reached": self.reached, "runs_per_arm": self.runs_per_arm,
                "rejected_pct": self.rejected_pct, "inconclusive_pct": self.inconclusive_pct,
                "tried": [{"n": n, "power_pct": pw} for n, pw in self.tried], "draws": self.draws,
                "seed": self.seed, "reason": self.reason}

    def describe(self) -> str:
        head = (f"{self.policy} policy, CV {self.cv_pct:g} %, true effect {self.effect_pct:+g} %, floor "
                f"{self.thresholds.floor_pct:g} %, target power {self.power_target_pct:g} % "
                f"({self.draws} simulated gates per n, seed {self.seed})")
        described = describe(self.policy)
        if described.fixes_schedule:
            verdict = "reaches" if self.reached else "does NOT reach"
            body = (f"the {self.policy} policy runs {described.stages_words}: power {self.power_pct:.1f} % "
                    f"({verdict} {self.power_target_pct:g} %), {self.runs_per_arm:.2f} runs per arm on average")
        elif self.n is not None:
            body = f"runs per arm: {self.n} (simulated power {self.power_pct:.1f} %)"
        else:
            most = described.plan_sizes[-1]
            body = f"runs per arm: none up to {most} (power {self.power_pct:.1f} % at {most})"
        lines = [head, body]
        if self.tried:
            lines.append("power by runs per arm: " + ", ".join(f"n={n}: {pw:.1f} %" for n, pw in self.tried))
        if self.inconclusive_pct >= 0.05:
            why = (f": a threshold above rules.max_threshold_pct = {self.max_threshold_pct:g} %"
                   if policy_for(self.policy).applies_max_threshold else "")
            lines.append(f"at {self.runs_per_arm:.4g} runs per arm {self.rejected_pct:.1f} % of the gates end rejected "
                         f"and {self.inconclusive_pct:.1f} % inconclusive (too noisy to tell{why})")
        if self.reason:
            lines.append(f"  ! {self.reason}")
        return "\n".join(lines)


def _plan_scenario(cv_pct: float, effect_pct: float, n: int) -> Scenario:
    return Scenario(cv_off_pct=cv_pct, effect_pct=effect_pct, n=n)


def _check_plan_input(policy: str, cv_pct: float, effect_pct: float, power: float) -> None:
    if policy not in gate_policies():
        raise ConfigError(f"--policy: must be one of {', '.join(gate_policies())}, got {policy!r}")
    if not (math.isfinite(cv_pct) and cv_pct > 0):
        raise ConfigError(f"--cv: must be a positive percentage, got {cv_pct}")
    if not (math.isfinite(effect_pct) and -100 < effect_pct < 0):
        raise ConfigError(f"--effect: must be an improvement between −100 and 0 % (negative: on is faster), "
                          f"got {effect_pct}")
    if not 0 < power < 1:
        raise ConfigError(f"--power: must be between 0 and 1, got {power}")


def plan_runs(policy: str, cv_pct: float, effect_pct: float, *, thresholds: ThresholdSpec = ThresholdSpec(),
              power: float = PLAN_POWER, draws: int = PLAN_DRAWS, seed: int = PLAN_SEED,
              max_threshold_pct: float = DEFAULT_MAX_THRESHOLD_PCT) -> Plan:
    """Runs per arm for `power` at a true `effect_pct` under `policy`, by simulation (gatekit.simulate).

    A policy that takes the gate's n (classic, duet): the power at each of its plan sizes (3, 4, 6, 8, … 64
    runs per arm; a duet's even numbers of pairs) until one reaches the target, then bisection between it and
    the size before; the classic rule adopts only beyond max(k·σ_off, floor), which more runs do not lower, so
    an effect inside it is out of reach at any n (the policy says why: `Policy.unreachable`). A policy that
    fixes its stages (sequential: 4, 8, then 12 runs per arm when look 2 is close): the plan is its power at
    the effect and whether that reaches the target. `max_threshold_pct` is the gate's rules.max_threshold_pct:
    it never changes an adoption, only whether the classic rule's other gates end rejected or inconclusive.
    """
    _check_plan_input(policy, cv_pct, effect_pct, power)
    target_pct = 100 * power
    described, planned = describe(policy), policy_for(policy)
    if described.fixes_schedule:
        result = simulate(policy, _plan_scenario(cv_pct, effect_pct, described.first_stage), draws=draws, seed=seed,
                          thresholds=thresholds, max_threshold_pct=max_threshold_pct)
        reached = result.adopted.pct >= target_pct
        most = planned.max_rounds(described.first_stage)
        reason = "" if reached else planned.unreachable(effect_pct, cv_pct, thresholds, most)
        return Plan(policy, cv_pct, effect_pct, thresholds, target_pct, most if reached else None,
                    result.adopted.pct, result.runs_per_arm, (), draws, seed, reason, max_threshold_pct,
                    result.rates["rejected"].pct, result.rates["inconclusive"].pct)
    results: dict[int, SimulationResult] = {}

    def power_at(n: int) -> float:
        if n not in results:
            results[n] = simulate(policy, _plan_scenario(cv_pct, effect_pct, n), draws=draws, seed=seed,
                                  thresholds=thresholds, max_threshold_pct=max_threshold_pct)
        return results[n].adopted.pct

    floor_pct = thresholds.floor_pct
    step, candidates = described.plan_step, described.plan_sizes  # a duet: an even number of pairs, its min_n up
    # Δ must pass the floor whatever n is, and Δ̂ centres on the true effect: inside the floor the power stays
    # near or below 50 % at every n, so the first and the last n of the scan show it and the rest are skipped
    scan = (candidates[0], candidates[-1]) if -effect_pct <= floor_pct and power >= 0.5 else candidates
    below, found = candidates[0] - step, None
    for n in scan:
        if power_at(n) >= target_pct:
            found = n
            break
        below = n
    if found is not None:
        while found - below > step:
            middle = below + (found - below) // (2 * step) * step
            if power_at(middle) >= target_pct:
                found = middle
            else:
                below = middle
    tried = tuple((n, result.adopted.pct) for n, result in sorted(results.items()))
    shown = found if found is not None else candidates[-1]
    rates = results[shown].rates
    reason = "" if found is not None else planned.unreachable(effect_pct, cv_pct, thresholds, candidates[-1])
    return Plan(policy, cv_pct, effect_pct, thresholds, target_pct, found, rates["adopted"].pct, float(shown), tried,
                draws, seed, reason, max_threshold_pct, rates["rejected"].pct, rates["inconclusive"].pct)


def policy_mde(policy: str, cv_pct: float, n: int, *, thresholds: ThresholdSpec = ThresholdSpec(),
               power: float = PLAN_POWER, draws: int = MDE_DRAWS, seed: int = PLAN_SEED) -> float:
    """The smallest improvement (in %, positive) the policy adopts with `power` at n runs per arm (a policy
    that fixes its stages: its own design), by bisection on simulated power; the same seed for every effect
    makes the power monotone in it. NaN when even −90 % is not found."""
    target_pct = 100 * power

    def power_at(size_pct: float) -> float:
        return simulate(policy, _plan_scenario(cv_pct, -size_pct, n), draws=draws, seed=seed,
                        thresholds=thresholds).adopted.pct

    low, high = 0.0, max(2 * max(thresholds.sigma_k * cv_pct, thresholds.floor_pct), 0.5)
    while power_at(high) < target_pct:
        if high >= 90:
            return math.nan
        low, high = high, min(2 * high, 90.0)
    while high - low > MDE_TOLERANCE_PCT:
        middle = (low + high) / 2
        low, high = (low, middle) if power_at(middle) >= target_pct else (middle, high)
    return high


@dataclass(frozen=True, slots=True)
class CalibrationStats:
    n: int
    warmup_runs: int
    cv_pct: float  # after the warm-up: the σ a gate on this machine can expect
    cv_all_pct: float
    drift_pct_per_run: float
    change_point: ChangePoint | None
    min_effect_pct: float
    n_needed: int | None  # runs per arm for min_effect at PLAN_POWER under the policy (see plan)
    mde_pct: Mapping[int, float]  # smallest effect the policy adopts with PLAN_POWER at n runs per arm
    warnings: tuple[str, ...] = ()
    policy: str = DEFAULT_POLICY
    plan: Plan | None = None  # None when the CV is 0 or undefined

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n, "warmup_runs": self.warmup_runs, "cv_pct": self.cv_pct, "cv_all_pct": self.cv_all_pct,
                "drift_pct_per_run": self.drift_pct_per_run,
                "change_point": self.change_point.to_dict() if self.change_point else None,
                "min_effect_pct": self.min_effect_pct, "n_needed": self.n_needed, "policy": self.policy,
                "power": PLAN_POWER, "planning": "simulated under the policy, floor and threshold included",
                "plan": self.plan.to_dict() if self.plan else None,
                "mde_pct": {str(n): v for n, v in self.mde_pct.items()}, "warnings": list(self.warnings)}


def analyze_calibration(values: Sequence[float], min_effect_pct: float, *, policy: str = DEFAULT_POLICY,
                        thresholds: ThresholdSpec = ThresholdSpec(),
                        max_threshold_pct: float = DEFAULT_MAX_THRESHOLD_PCT) -> CalibrationStats:
    """Everything a calibration reports, from the A/A values in execution order; the runs needed and the
    minimum detectable effects are simulated under `policy` with its thresholds (plan_runs, policy_mde)."""
    if not (math.isfinite(min_effect_pct) and 0 < min_effect_pct < 100):
        raise ConfigError(f"--min-effect: must be a percentage between 0 and 100, got {min_effect_pct}")
    w = warmup_length(values)
    steady = list(values[w:])
    cv = stats.relative_sd_pct(steady)
    mean = stats.mean(steady)
    drift = 100 * ols_slope(list(range(w, len(values))), steady) / mean if mean else math.nan
    cp = change_point(steady)
    warnings = []
    if w:
        warnings.append(f"the first {w} run(s) are warm-up outliers: set `warmup = {min(w, 2)}` in the gate")
    if cp is not None and cp.p < CHANGE_POINT_ALPHA:
        warnings.append(f"the A/A series shifts by {cp.shift_pct:+.3f} % at run {w + cp.index + 1} "
                        f"(permutation p {cp.p:.4f}): this machine is not stationary; find the cause "
                        "(thermal or frequency limits, background jobs) and calibrate again")
    plan: Plan | None = None
    mde: dict[int, float] = {}
    if math.isfinite(cv) and cv > 0:
        plan = plan_runs(policy, cv, -min_effect_pct, thresholds=thresholds, max_threshold_pct=max_threshold_pct)
        mde = {n: policy_mde(policy, cv, n, thresholds=thresholds) for n in describe(policy).mde_sizes}
        if plan.reason:
            warnings.append(plan.reason)
    else:
        warnings.append("the runs do not vary (CV 0 or undefined): nothing to plan from")
    return CalibrationStats(len(values), w, cv, stats.relative_sd_pct(list(values)), drift, cp, min_effect_pct,
                            plan.n if plan else None, mde, tuple(warnings), policy, plan)


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


@dataclass(frozen=True, slots=True)
class CalibrationStart(Event):
    """A calibration journal's first event (the runs' events are a series'; its chain is anchored on no file)."""

    KIND: ClassVar[str] = "calibration_start"
    arm: str
    n: int
    started: str
    artifacts: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class CalibrationEnd(Event):
    KIND: ClassVar[str] = "calibration_end"
    cv_pct: float | None
    path: Path


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
    refuse_failed([c for c in run_checks(config, [arm], driver, backend, read_load=load_reader)
                   if c.name != "calibration"])
    runs_dir = config.gate.runs
    primary = config.gate.primary
    effect = config.threshold.floor_pct if min_effect_pct is None else min_effect_pct
    with runs_lock(runs_dir):
        started = now()
        series_dir = new_series_dir(runs_dir, stamped_name(f"calibrate-{arm.name}", started))
        journal = Journal(SeriesLayout(series_dir).journal)
        artifacts = hash_artifacts(config.driver.hash)
        journal.record(CalibrationStart(arm.name, n, started.isoformat(timespec="seconds"), artifacts))

        def every_run_counts(record: RunRecord) -> None:
            if record.failed or record.value_of(primary) is None:
                why = record.outcome.error or f"primary metric '{primary}' missing"
                raise CalibrationError(f"{record.label} failed: {why} (see {SeriesLayout(series_dir).run(record.label).stderr}); "
                                       "a calibration needs every run")

        state = RunLog()
        loop = RunLoop(config, {arm.name: arm}, driver, backend, report, lambda label: load_reader)
        changed = loop.run(series_dir, journal, state, [Slot(arm.name, k) for k in range(1, n + 1)],
                           primary=primary, start_artifacts=artifacts, check=every_run_counts,
                           resume_hint="a calibration cannot be resumed: run it again")
        if changed:
            raise ProvenanceError(f"{series_dir}: " + "; ".join(changed) + "; the calibration is not usable")
        records = sorted(state.records.values(), key=lambda r: r.order)
        values = [value for r in records if (value := r.value_of(primary)) is not None]  # every run has one (checked)
        result = analyze_calibration(values, effect, policy=config.gate.policy, thresholds=config.threshold,
                                     max_threshold_pct=config.rules.max_threshold_pct)
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
        journal.record(CalibrationEnd(document.get("cv_pct"), path))
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
    described = describe(s.policy)
    if s.plan is not None and described.fixes_schedule:
        lines.append(f"the {s.policy} policy ({described.stages_words}) finds a {s.min_effect_pct:g} % "
                     "effect with "
                     f"{s.plan.power_pct:.1f} % power (simulated; {100 * PLAN_POWER:g} % "
                     f"{'reached' if s.plan.reached else 'NOT reached'})")
    elif s.plan is not None:
        needed = (s.n_needed if s.n_needed is not None
                  else f"more than {described.plan_sizes[-1]} (power {s.plan.power_pct:.1f} % there)")
        lines.append(f"runs per arm to find a {s.min_effect_pct:g} % effect with {100 * PLAN_POWER:g} % power under "
                     f"the {s.policy} policy (simulated, threshold and floor {s.plan.thresholds.floor_pct:g} % "
                     f"included): {needed}")
    if s.mde_pct:
        sizes = {n: described.stages_words if described.fixes_schedule else f"n={n}" for n in s.mde_pct}
        lines.append(f"minimum detectable effect under the {s.policy} policy ({100 * PLAN_POWER:g} % power, "
                     "simulated): " + ", ".join(f"{sizes[n]}: {v:.2f} %" for n, v in s.mde_pct.items()))
    lines += [f"  ! {w}" for w in s.warnings]
    lines += ["", f"stored: {calibration.path}", f"latest: {calibration.latest} (used by sigma_ref = \"history\")"]
    return "\n".join(lines)

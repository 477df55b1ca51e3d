"""The predecision file: every decision rule, written and hashed before the first run.

It states each ambiguity up front (e.g. which window statistic is the load evidence), so nobody has to
guess after the fact. Analysis reads the rules back from this file, never from a gate file edited later.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import tomlkit
import tomllib

from gatekit import __version__, rules, stats, tomltext
from gatekit.config import (SEEDED_ORDERS, CommitsSpec, GateConfig, GuardSpec, RulesSpec, ThresholdSpec,
                            resolve_history_sigma)
from gatekit.errors import ConfigError, SeriesError
from gatekit.policy_descriptors import DEFAULT_POLICY, INTERLEAVED, describe, policy_for
from gatekit.quality import TargetSpec, stated_target
from gatekit.provenance import sha256_bytes, sha256_file
from gatekit.records import PREDECISION_SCHEMA, SCHEMA_KEY, Record, schema_problem, upgrade
from gatekit.sampler import STOPPED_GAP_INTERVALS, STOPPED_GAP_MIN_S, stopped_gap_limit_s
from gatekit.schedule import Slot
from gatekit.storage import SeriesLayout, atomic_write_bytes


CLOCK_RULE_KEYS = ("min_clock_share", "confirm_cycles")


@dataclass(frozen=True, slots=True)
class DecisionSpec(Record):
    """What the analysis needs, exactly as preregistered (the predecision's `decision` table)."""

    gate_id: str
    title: str
    off_arm: str
    on_arm: str
    n: int
    order: str
    seed: int | None = field(metadata={"omit": None})  # TOML has no null: none = "derived from this file's sha256"
    primary: str = field(kw_only=True)
    direction: str = field(kw_only=True)
    expect_diff: tuple[str, ...] = field(kw_only=True)
    policy: str = field(default=DEFAULT_POLICY, kw_only=True)
    warmup: int = field(default=0, kw_only=True)
    threshold: ThresholdSpec = field(kw_only=True)
    guards: tuple[GuardSpec, ...] = field(kw_only=True)
    # every limit stated, those at their defaults too (a clock rule only where it is on: `stated_limits`)
    rules: RulesSpec = field(kw_only=True, metadata={"encode": lambda limits: stated_limits(limits)})
    # an interleaved series reads exactly as before duets existed
    mode: str = field(default=INTERLEAVED, kw_only=True, metadata={"omit": INTERLEAVED})
    slots: tuple[str, ...] = field(default=(), kw_only=True, metadata={"omit": ()})  # a duet's two, slot 0 first
    # a `gate bisect` probe (gate.bisect_probe): one run per arm is a measurement for the bisect, not a decision
    bisect_probe: bool = field(default=False, kw_only=True, metadata={"omit": False})
    # the arms are one arm at two commits (gate compare, gate bisect): config differences between them are recorded
    commits: CommitsSpec | None = field(default=None, kw_only=True, metadata={"omit": None})
    # a derived primary's quality target (time_to_target_s, steps_to_target); absent for every other primary
    time_to_target: TargetSpec | None = field(default=None, kw_only=True, metadata={"omit": None})
    # A versioned policy's design, each under the key its descriptor names (`version_key`), stated for every
    # spec of that policy; an older predecision that lacks it is upgraded when read (records.UPGRADES).
    sequential_version: int | None = field(default=None, kw_only=True, metadata={"omit": None})
    duet_version: int | None = field(default=None, kw_only=True, metadata={"omit": None})
    robust_version: int | None = field(default=None, kw_only=True, metadata={"omit": None})

    @property
    def design_version(self) -> int | None:
        """The design the series is decided by: the recorded version, else the policy's current one."""
        descriptor = describe(self.policy)
        if descriptor.version_key is None:
            return descriptor.version
        if descriptor.version_key not in VERSION_KEYS:
            raise ConfigError(f"policy {self.policy}: its version_key {descriptor.version_key!r} is no key of the "
                              f"predecision (one of {', '.join(VERSION_KEYS)})")
        recorded = getattr(self, descriptor.version_key)
        return recorded if recorded is not None else descriptor.version

    @classmethod
    def from_gate(cls, config: GateConfig, off_arm: str, on_arm: str) -> DecisionSpec:
        """The rules as they will be frozen; a `sigma_ref = "history"` σ is read from the calibration now."""
        g = config.gate
        # an order that draws nothing keeps the seed 0 it always reported; one that draws and was given
        # no seed gets it from the predecision's sha256 (seed None here)
        seed = g.seed if g.seed is not None or g.order in SEEDED_ORDERS else 0
        return cls(g.id, g.title, off_arm, on_arm, g.n, g.order, seed, primary=g.primary, direction=g.direction,
                   expect_diff=g.expect_diff, threshold=config.threshold, guards=config.guards,
                   rules=resolve_history_sigma(config), policy=g.policy, warmup=g.warmup, mode=g.mode,
                   slots=tuple(s.text for s in config.duet.slots) if config.duet else (),
                   bisect_probe=g.bisect_probe, commits=config.commits, time_to_target=config.time_to_target,
                   **_recorded_version(g.policy))


VERSION_KEYS = ("sequential_version", "duet_version", "robust_version")  # DecisionSpec's fields a descriptor's version_key may name


def _recorded_version(policy: str) -> dict[str, int]:
    """The design a new series of `policy` preregisters, under its descriptor's key (none: one design)."""
    descriptor = describe(policy)
    return {descriptor.version_key: descriptor.version} if descriptor.version_key and descriptor.version else {}


def stated_limits(rules: RulesSpec) -> dict[str, Any]:
    """The rules as the predecision states them: every limit, those at their defaults too, except a clock rule
    that is off (a spec without the clock rules reads exactly as before they existed)."""
    data = dataclasses.asdict(rules)
    for key in CLOCK_RULE_KEYS:
        if data[key] == getattr(RulesSpec(), key):
            data.pop(key)
    return data


def stated_rules(spec: DecisionSpec) -> list[str]:
    """The rules in words, each ambiguity resolved before any data exists."""
    r, t = spec.rules, spec.threshold
    better = "lower" if spec.direction == "lower" else "higher"
    if spec.seed is not None:
        seed = f", seed {spec.seed}"
    elif spec.order in SEEDED_ORDERS:
        seed = (", seed = the first 16 hex digits of this file's sha256 read as an integer (so the order is "
                "drawn only after these rules are fixed)")
    else:
        seed = ""
    lines = [
        f"Primary metric: {spec.primary}, {better} is better; arms: off = {spec.off_arm}, on = {spec.on_arm}.",
        f"Order: {spec.order}, {spec.n} runs per arm{seed}.",
        "Delta = (mean_on - mean_off) / mean_off over used runs, arithmetic means.",
        f"Threshold = max({t.sigma_k:g} x sigma_off, {t.floor_pct:g} %), sigma_off = sample SD (ddof=1) "
        "of the used off runs relative to their mean.",
        f"Adopt iff Delta clears the threshold in the {better} direction AND every guard holds; "
        "beyond it the other way is a regression.",
        f"Load evidence (i) uses the run window's {r.load_stat} of load1 (samples at window open, every "
        f"{r.sample_interval_s:g} s, and at close): evidence if > {r.load_limit:g} or > "
        f"{r.load_rel_median:g} x the median of that statistic over all runs of the series.",
        f"Deviation (ii): |x - arm mean| > {r.sigma_k:g} sigma, sigma from "
        + {"arm": "the same arm's used runs (classic).",
           "leave_one_out": "the arm's other runs (leave-one-out), mean also without the run.",
           "history": f"history: {r.sigma_history_pct:g} % of the mean of the arm's other runs (calibrated "
                      "before the series, so a run cannot inflate its own sigma), times sqrt(1 + 1/(n - 1)) for "
                      "the noise of that mean (n: the arm's used runs)."}[r.sigma_ref],
        *filter(None, [rules.stated_evidence(r)]),
        *rules.stated_clock_rules(r),
        "A run is contaminated only if (i) AND (ii); (ii) alone never triggers a retry.",
        f"A contaminated or failed pair is re-run at the end of the series, at most {r.max_retries} "
        "time(s) per pair; no retry chains; discarded runs stay in the record.",
        "A failed run (non-zero exit, timeout, missing primary metric) is never used as a number.",
        "A run during which the gate itself was stopped or starved (SIGSTOP, a terminal's Ctrl-Z, while the "
        "trainer goes on) is a failed run, retried like a crash: more than "
        f"{stopped_gap_limit_s(r.sample_interval_s):g} s (max({STOPPED_GAP_INTERVALS} x the sample interval, "
        f"{STOPPED_GAP_MIN_S:g} s)) between two consecutive load samples of its window, on the monotonic clock.",
        "Stop rule: when the first run of each arm fails the same way (the same reason), the trainer fails "
        "whatever the arm; the series stops there as invalid. A failed run that no retry is left for stops it "
        "as invalid too.",
        "Whatever the policy, an arm left with fewer than two used runs (its runs flagged or failed and no "
        "replacement left) makes the series invalid, not inconclusive: there is nothing to decide on.",
        "Pair consistency counts rounds where on is better than off; ties count as not better.",
    ]
    if r.sigma_ref == "arm":
        z = stats.max_attainable_z(spec.n)
        if z < r.sigma_k:
            lines.append(f"Known: at n={spec.n} no run can exceed {z:.3f} sigma of its own arm (Samuelson), "
                         f"so rule (ii) at {r.sigma_k:g} sigma cannot fire.")
    if r.require_window_samples:
        lines.append("A run without in-window load samples is not used.")
    if spec.warmup:
        lines.append(f"Warm-up: {spec.warmup} run(s) in round 0 (label <arm>-r0) before round 1; discarded, "
                     "never used as a number or for contamination.")
    if spec.time_to_target is not None:
        lines.append(stated_target(spec.primary, spec.time_to_target))
    lines += policy_for(spec.policy, spec.design_version).stated_rules(spec.primary, spec.rules, spec.threshold)
    for g in spec.guards:
        lines.append(f"Guard {g.metric}: on - off must be "
                     + (f">= -{g.max_drop:g}" if g.direction == "higher" else f"<= +{g.max_drop:g}")
                     + " on the arm means.")
    return lines


def predecision_document(spec: DecisionSpec, *, series_id: str, created: str, gate_path: Path,
                         gate_sha256: str, schedule: list[Slot] | None, arm_configs: Mapping[str, Path | None],
                         artifacts: Mapping[str, str], driver: Mapping[str, Any],
                         backend: Mapping[str, Any] | None = None) -> str:
    """The predecision file's text. `backend` (name, requested, options, evidence_rules) freezes which
    backend watches the runs and what of its telemetry counts as evidence (i)."""
    doc = tomlkit.document()
    doc.add(tomlkit.comment("Written before the first run; its sha256 is in the journal and the finding."))
    doc[SCHEMA_KEY] = PREDECISION_SCHEMA
    doc["series_id"] = series_id
    doc["created"] = created
    doc["gatekit_version"] = __version__
    doc["gate_file"] = {"path": str(gate_path), "sha256": gate_sha256}
    doc["decision"] = spec.to_dict()
    if schedule is not None:
        doc["schedule"] = [s.label for s in schedule]
    else:
        doc["schedule_rule"] = (f"{spec.order} order drawn from seed = int(sha256 of this file)[:16 hex digits]; "
                                "the schedule is journaled in series_start")
    rules_in_words = stated_rules(spec)
    if backend is not None:
        rules_in_words += [f"Evidence (i) also includes: {line}"
                           for line in backend.get("evidence_rules", [])]
    doc["stated_rules"] = tomltext.scalar_array(rules_in_words)  # one line per guard: built in linear time
    doc["arm_configs"] = {arm: {"path": str(p), "sha256": sha256_file(p)} if p else {"path": ""}
                          for arm, p in arm_configs.items()}
    doc["artifacts"] = dict(artifacts)
    doc["driver"] = dict(driver)
    if backend is not None:
        doc["backend"] = dict(backend)
    return tomlkit.dumps(doc)


def write_predecision(series_dir: Path, text: str) -> str:
    """Write the predecision file atomically and return its sha256."""
    data = text.encode("utf-8")
    atomic_write_bytes(SeriesLayout(series_dir).predecision, data)
    return sha256_bytes(data)


def read_predecision(series_dir: Path, expected_sha256: str) -> dict[str, Any]:
    """Read the predecision file back after verifying it is byte-for-byte what was registered; an older
    format is upgraded after the check (the file itself is never rewritten)."""
    path = SeriesLayout(series_dir).predecision
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SeriesError(f"{path}: missing; the series cannot be analysed without its predecision") from None
    actual = sha256_bytes(data)
    if actual != expected_sha256:
        raise SeriesError(f"{path}: sha256 {actual} does not match the registered {expected_sha256}; "
                          "the rules were changed after the series started")
    document = tomllib.loads(data.decode("utf-8"))  # linear in its size (tomlkit's parse is not)
    problem = schema_problem(document.get(SCHEMA_KEY), PREDECISION_SCHEMA)
    if problem:
        raise SeriesError(f"{path}: {problem}")
    return upgrade(document, document[SCHEMA_KEY])

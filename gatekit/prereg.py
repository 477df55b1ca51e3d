"""The predecision file: every decision rule, written and hashed before the first run.

It states each ambiguity up front (e.g. which window statistic is the load evidence), so nobody has to
guess after the fact. Analysis reads the rules back from this file, never from a gate file edited later.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import tomlkit

from gatekit import PREDECISION_SCHEMA, __version__, rules, stats
from gatekit.config import SEEDED_ORDERS, GateConfig, GuardSpec, RulesSpec, ThresholdSpec, resolve_history_sigma
from gatekit.errors import SeriesError
from gatekit.policies.descriptors import DEFAULT_POLICY, INTERLEAVED, describe
from gatekit.policy import policy_for
from gatekit.provenance import sha256_bytes, sha256_file
from gatekit.schedule import Slot
from gatekit.storage import atomic_write_bytes

PREDECISION_FILE = "predecision.toml"


@dataclass(frozen=True, slots=True)
class DecisionSpec:
    """What the analysis needs, exactly as preregistered."""

    gate_id: str
    title: str
    off_arm: str
    on_arm: str
    n: int
    order: str
    seed: int | None
    primary: str
    direction: str
    expect_diff: tuple[str, ...]
    threshold: ThresholdSpec
    guards: tuple[GuardSpec, ...]
    rules: RulesSpec
    policy: str = DEFAULT_POLICY
    warmup: int = 0
    mode: str = INTERLEAVED
    slots: tuple[str, ...] = ()  # a duet's two slots, slot 0 first
    # The policy's design version, under its descriptor's version_key (the key is named for the one policy
    # that has versions today); None: the policy's current design, or a policy with one design.
    sequential_version: int | None = None

    @property
    def design_version(self) -> int | None:
        """The design the series is decided by: the recorded version, else the policy's current one."""
        return self.sequential_version if self.sequential_version is not None else describe(self.policy).version

    def to_dict(self) -> dict[str, Any]:
        data = {
            "gate_id": self.gate_id, "title": self.title, "off_arm": self.off_arm, "on_arm": self.on_arm,
            "n": self.n, "order": self.order, "seed": self.seed, "primary": self.primary,
            "direction": self.direction, "expect_diff": list(self.expect_diff), "policy": self.policy,
            "warmup": self.warmup,
            "threshold": dataclasses.asdict(self.threshold),
            "guards": [dataclasses.asdict(g) for g in self.guards],
            "rules": dataclasses.asdict(self.rules),
        }
        if self.seed is None:  # TOML has no null: no seed means "derived from this file's sha256"
            del data["seed"]
        if self.mode != INTERLEAVED:  # an interleaved series reads exactly as before duets existed
            data |= {"mode": self.mode, "slots": list(self.slots)}
        described = describe(self.policy)
        if described.version_key and self.design_version != described.unrecorded_version:
            data[described.version_key] = self.design_version  # a spec of the unrecorded version reads as written
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecisionSpec:
        described = describe(data["policy"])
        return cls(
            gate_id=data["gate_id"], title=data["title"], off_arm=data["off_arm"], on_arm=data["on_arm"],
            n=data["n"], order=data["order"], seed=data.get("seed"), primary=data["primary"],
            direction=data["direction"], expect_diff=tuple(data["expect_diff"]), policy=data["policy"],
            warmup=data.get("warmup", 0), mode=data.get("mode", INTERLEAVED), slots=tuple(data.get("slots", ())),
            # a predecision written before its policy recorded a version preregistered the unrecorded one
            sequential_version=(data.get(described.version_key, described.unrecorded_version)
                                if described.version_key else None),
            threshold=ThresholdSpec(**data["threshold"]),
            guards=tuple(GuardSpec(**g) for g in data["guards"]),
            rules=RulesSpec(**data["rules"]),
        )

    @classmethod
    def from_gate(cls, config: GateConfig, off_arm: str, on_arm: str) -> DecisionSpec:
        """The rules as they will be frozen; a `sigma_ref = "history"` σ is read from the calibration now."""
        g = config.gate
        # an order that draws nothing keeps the seed 0 it always reported; one that draws and was given
        # no seed gets it from the predecision's sha256 (seed None here)
        seed = g.seed if g.seed is not None or g.order in SEEDED_ORDERS else 0
        return cls(g.id, g.title, off_arm, on_arm, g.n, g.order, seed, g.primary, g.direction,
                   g.expect_diff, config.threshold, config.guards, resolve_history_sigma(config),
                   policy=g.policy, warmup=g.warmup, mode=g.mode,
                   slots=tuple(s.text for s in config.duet.slots) if config.duet else (),
                   sequential_version=describe(g.policy).version)


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
        "A run is contaminated only if (i) AND (ii); (ii) alone never triggers a retry.",
        f"A contaminated or failed pair is re-run at the end of the series, at most {r.max_retries} "
        "time(s) per pair; no retry chains; discarded runs stay in the record.",
        "A failed run (non-zero exit, timeout, missing primary metric) is never used as a number.",
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
    doc["schema"] = PREDECISION_SCHEMA
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
    doc["stated_rules"] = rules_in_words
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
    atomic_write_bytes(series_dir / PREDECISION_FILE, data)
    return sha256_bytes(data)


def read_predecision(series_dir: Path, expected_sha256: str) -> dict[str, Any]:
    """Read the predecision file back after verifying it is byte-for-byte what was registered."""
    path = series_dir / PREDECISION_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SeriesError(f"{path}: missing; the series cannot be analysed without its predecision") from None
    actual = sha256_bytes(data)
    if actual != expected_sha256:
        raise SeriesError(f"{path}: sha256 {actual} does not match the registered {expected_sha256}; "
                          "the rules were changed after the series started")
    document = tomlkit.parse(data.decode("utf-8")).unwrap()
    if document.get("schema") != PREDECISION_SCHEMA:
        raise SeriesError(f"{path}: schema {document.get('schema')!r} is not {PREDECISION_SCHEMA!r}")
    return document

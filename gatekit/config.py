"""The gate file: its schema declared once as frozen records, decoded by the records codec, and the checks
that span keys (policy and mode, duet slots, arms).

Every error names the file and the dotted key (an unknown one with the closest known key), so a mistyped
path is caught before any GPU time.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from gatekit.commits import Commit
from gatekit.errors import ConfigError
from gatekit.policy_descriptors import (DEFAULT_POLICY, DUET, DUET_MODE, INTERLEAVED, describe, gate_policies,
                                          policies_of_mode)
from gatekit.quality import DERIVED_PRIMARIES, TargetSpec
from gatekit.records import PROCESS_WALLCLOCK, Record, RecordError
from gatekit.slots import DeviceSlot, parse_slots
from gatekit.storage import read_input

ORDERS = ("abab", "abba", "random", "thue-morse", "abba-baab", "block-shuffle", "block-shuffle-spread")
# interleaved: one run at a time, the arms taking turns; duet: both arms of a pair at once, on twin slots
MODES = (INTERLEAVED, DUET_MODE)
SEEDED_ORDERS = ("random", "thue-morse", "abba-baab", "block-shuffle", "block-shuffle-spread")  # orders that draw from the seed
# Names the command line offers, here so `gate --help` need not import the modules that implement them
# (the policies' names are gatekit.policy_descriptors').
EXPORT_FORMATS = ("gab-json", "bmf")  # --export FORMAT: gatekit.exports.EXPORTERS
# --fail-on NAME: the decisions (verdict.Decision values) that exit 1 — an invalid finding exits 3 whatever is asked.
# unproven: anything that does not rule out a slowdown beyond the gate's tolerance (docs/ci.md says which to use).
FAIL_ON = {"regression": ("regression", "guard_failed"),
           "not-adopted": ("rejected", "regression", "guard_failed", "equivalent", "inconclusive"),
           "unproven": ("regression", "guard_failed", "inconclusive", "invalid")}
DIRECTIONS = ("lower", "higher")
LOAD_STATS = ("max", "mean")
SIGMA_REFS = ("arm", "leave_one_out", "history")
MAX_WARMUP = 2
# gate.warmup of an interleaved gate file that states none: one discarded run before round 1. A cold first run
# (autotune, caches, JIT: +5 to +15 % on a GPU) otherwise inflates σ_off and decides the classic gate — power
# 0.5 % for a true −2 % at CV 0.5 %, and 43–50 % false regressions in A/A under random or Thue–Morse order
# (docs/statistics.md, "A cold first run"). A duet (its pairs run at once) and a bisect probe take none.
DEFAULT_WARMUP = 1
ALWAYS_MEASURED = PROCESS_WALLCLOCK
CALIBRATION_FILE = "calibration.toml"  # in the runs folder: the latest `gate calibrate` of this machine
MAX_RUNS_PER_ARM = 1000  # a bound, so a typo (n = 30000) cannot schedule days of runs
MIN_SAMPLE_INTERVAL_S = 0.01  # below this the sampler would busy-loop and load the machine it measures
# Gate ids and arm names become file and folder names (series, runs, findings): no separators, no dots first.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAME_RULE = "1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _positive(value: float) -> str | None:
    return None if value > 0 else f"must be positive, got {value}"


def _non_negative(value: float) -> str | None:
    return None if value >= 0 else f"must be non-negative, got {value}"


def _share_pct(value: float) -> str | None:
    """A share of a run window in %: positive and below 100."""
    return _positive(value) or (None if value < 100 else
                                f"must be below 100 (a share of the run window, in %), got {value:g}")


def _clock_share(value: float) -> str | None:
    """rules.min_clock_share: a share of a clock, 0 (no clock rule) up to 1."""
    return None if 0 <= value <= 1 else f"must be from 0 (no clock rule) to 1 (a share of the series' median SM clock), got {value:g}"


def _sample_interval(value: float) -> str | None:
    return _positive(value) or (None if value >= MIN_SAMPLE_INTERVAL_S else
                                f"must be at least {MIN_SAMPLE_INTERVAL_S:g} s, got {value:g}")


# One run per arm has no σ_off: no threshold beyond the floor, no rule (ii), no CI — a gate that can never decide.
MIN_RUNS_PER_ARM = 2
FEWEST_RUNS = (f"must be at least {MIN_RUNS_PER_ARM}: one run per arm has no σ_off, so neither the threshold nor "
               "the contamination rule can be computed and the gate could never decide")


def _runs_per_arm(value: int) -> str | None:
    if value < 1:  # one run per arm only for a bisect probe (gate.bisect_probe, checked by load_gate)
        return f"{FEWEST_RUNS}, got {value}"
    return None if value <= MAX_RUNS_PER_ARM else f"must be at most {MAX_RUNS_PER_ARM}, got {value}"


def _warmup(value: int) -> str | None:
    return None if 0 <= value <= MAX_WARMUP else f"must be 0 (none), 1 (the first arm) or 2 (both arms), got {value}"


def name_problem(value: str) -> str | None:
    """Why a gate id, arm or campaign id cannot name files and folders (None: it can)."""
    return None if NAME_PATTERN.fullmatch(value) else f"must be {NAME_RULE}, got {value!r}"


POSITIVE = {"check": _positive}
NON_NEGATIVE = {"check": _non_negative}

# The gate file's schema: the records below, read by the records codec (`Record.from_input`). Each key's
# default is its field's default; `choices` and `check` say what a value may be.


@dataclass(frozen=True, slots=True)
class ThresholdSpec(Record):
    """threshold_pct = max(sigma_k * sigma_off_pct, floor_pct)."""

    sigma_k: float = field(default=2.0, metadata=NON_NEGATIVE)
    floor_pct: float = field(default=1.0, metadata=NON_NEGATIVE)


@dataclass(frozen=True, slots=True)
class GuardSpec(Record):
    """A quality guard: on may not be worse than off by more than max_drop (absolute units)."""

    metric: str
    direction: str = field(default="higher", metadata={"choices": DIRECTIONS})
    max_drop: float = field(default=0.0, metadata=NON_NEGATIVE)


# Load evidence limits for rules.evidence = "psi" / "steal": a window whose pressure stall (the `some` total's
# growth over the window) exceeds this share of its wall time, or whose CPU steal exceeds this share of its CPU
# time. An idle machine shows well under 1 % of either; one busy loop per core beside a run gives ~50 % CPU stall.
DEFAULT_PSI_LIMIT_PCT = 20.0
# rules.load_limit when the gate file states none: load1 per CPU core, so a 2-core machine is judged busy at 3
# and a 32-core one at 48 (the old fixed 6 was right for 4 cores only). Frozen into the predecision as a number:
# a series re-analyses with the value it was preregistered with, on any machine.
LOAD_LIMIT_PER_CORE = 1.5
FALLBACK_CORES = 4  # where the OS does not say how many cores it has: the old default, 6


def default_load_limit(cores: int | None) -> float:
    """rules.load_limit for a machine of `cores` CPU cores: LOAD_LIMIT_PER_CORE each."""
    return LOAD_LIMIT_PER_CORE * (cores or FALLBACK_CORES)

DEFAULT_STEAL_LIMIT_PCT = 10.0
DEFAULT_MAX_THRESHOLD_PCT = 10.0
# rules.evidence: load1 (the classic load rule, or load per core under the sequential policy), psi (pressure
# stall), steal (hypervisor CPU steal), any (the three together). psi and steal fall back to load1 for a
# window that did not record them (a warning says so).
EVIDENCE_KINDS = ("load1", "psi", "steal", "any")


@dataclass(frozen=True, slots=True)
class RulesSpec(Record):
    """Preregistered contamination rules: (i) load evidence AND (ii) deviation beyond sigma_k."""

    load_stat: str = field(default="max", metadata={"choices": LOAD_STATS})
    load_limit: float = field(default=6.0, metadata=POSITIVE)
    load_rel_median: float = field(default=1.5, metadata=POSITIVE)
    sigma_k: float = field(default=3.0, metadata=POSITIVE)
    sigma_ref: str = field(default="arm", metadata={"choices": SIGMA_REFS})
    max_retries: int = field(default=1, metadata={"check": lambda v: None if v >= 0 else "must be 0 or more"})
    require_window_samples: bool = True
    sample_interval_s: float = field(default=1.0, metadata={"check": _sample_interval})
    # σ for sigma_ref = "history"; 0: from the latest `gate calibrate`
    sigma_history_pct: float = field(default=0.0, metadata=NON_NEGATIVE)
    # sequential policy: a run is flagged above this load1 per core
    load_per_core_limit: float = field(default=1.5, metadata=POSITIVE)
    # A threshold above this means the series could not have seen an effect that size: `inconclusive`, not
    # `rejected`. 0: no limit, as for a series preregistered before the rule; a gate file that leaves it out
    # gets DEFAULT_MAX_THRESHOLD_PCT.
    max_threshold_pct: float = field(default=0.0, metadata={
        "omit": 0.0, "input_default": DEFAULT_MAX_THRESHOLD_PCT, **NON_NEGATIVE})
    # Which window telemetry is load evidence (EVIDENCE_KINDS). "load1" is the rule as it was before the others
    # existed (a series preregistered then reads as "load1"); a gate file that leaves it out gets its policy's
    # default_evidence (load_gate). The limits are stated in the document only when another kind is in use.
    evidence: str = field(default="load1", metadata={"omit": "load1", "choices": EVIDENCE_KINDS})
    psi_limit_pct: float = field(default=DEFAULT_PSI_LIMIT_PCT, metadata={"check": _share_pct})
    steal_limit_pct: float = field(default=DEFAULT_STEAL_LIMIT_PCT, metadata={"check": _share_pct})
    # The clock rule: a run whose time-weighted mean SM clock (the backend's `sm_clock_mean_mhz`) is below this
    # share of the series' median of it (of the locked clock where the GPU's clocks are locked) is flagged,
    # like load evidence. 0: no clock rule, as for a series preregistered before it existed.
    min_clock_share: float = field(default=0.0, metadata={"omit": 0.0, "check": _clock_share})
    # The cycle check: for a time primary whose runs recorded their SM clock, a decision that Δ in cycles
    # (time × mean SM clock) does not support is `inconclusive`. False: Δ in cycles is reported, never decides.
    confirm_cycles: bool = field(default=False, metadata={"omit": False})

    def to_dict(self) -> dict[str, Any]:
        data = Record.to_dict(self)
        if self.evidence == "load1":  # a load1 rule set reads exactly as before the other evidence existed
            data.pop("psi_limit_pct", None)
            data.pop("steal_limit_pct", None)
        return data


@dataclass(frozen=True, slots=True)
class DriverSpec(Record):
    """Which driver runs the trainer; generic keys here, the rest is the plugin's `options` (it checks them)."""

    name: str = "command"
    timeout_s: float = field(default=600.0, metadata=POSITIVE)
    hash: tuple[Path, ...] = ()  # artifacts whose sha256 must not change during the series
    busy_pattern: str = ""
    options: Mapping[str, Any] = field(default_factory=dict, metadata={"rest": True})


@dataclass(frozen=True, slots=True)
class BackendSpec(Record):
    """Which backend watches the machine ("auto" detects it); `options` holds each [backend.<name>] table."""

    name: str = field(default="auto", metadata={
        "check": lambda v: None if v.strip() else "must name a backend or be \"auto\""})
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, metadata={"rest": True})


@dataclass(frozen=True, slots=True)
class ArmCheckout(Record):
    """The git checkout an arm runs from (`gate bisect` writes it for each probe's two arms): the arm's runs
    start in it, and the gate file's relative paths (driver.cwd, driver.hash, the arm's config) resolve in
    `base`, the gate file's folder inside the checkout (default: the checkout itself)."""

    commit: str  # filled in for {commit}
    worktree: Path  # filled in for {worktree}
    base: Path | None = field(default=None, metadata={"omit": None})


@dataclass(frozen=True, slots=True)
class ArmSpec(Record):
    """One arm: its config file (substituted for {arm_config}), extra args and env. Its name is its key."""

    name: str = field(default="", metadata={"internal": True})
    config: Path | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    checkout: ArmCheckout | None = field(default=None, metadata={"omit": None})

    def base_dir(self, gate_dir: Path) -> Path:
        """Where this arm's relative paths resolve: its checkout's base, else the gate file's folder."""
        if self.checkout is None:
            return gate_dir
        return self.checkout.base or self.checkout.worktree


@dataclass(frozen=True, slots=True)
class GateSpec(Record):
    """The [gate] table."""

    id: str = field(metadata={"check": name_problem})
    title: str = ""
    n: int = field(default=3, metadata={"check": _runs_per_arm})
    order: str = field(default="abab", metadata={"choices": ORDERS})
    seed: int | None = None  # None: an order that needs one derives it from the predecision's sha256
    primary: str = "train_elapsed_s"
    direction: str = field(default="lower", metadata={"choices": DIRECTIONS})
    expect_diff: tuple[str, ...] = ()
    out: Path = Path("findings")
    runs: Path = Path("runs")
    policy: str = field(default=DEFAULT_POLICY, metadata={"choices": gate_policies})
    # discarded warm-up runs before round 1 (1: the first arm, 2: both arms); a gate file that states none gets
    # DEFAULT_WARMUP (load_gate), a gate built in code states its own
    warmup: int = field(default=0, metadata={"check": _warmup})
    record_env: tuple[str, ...] = ()  # arm env variables written down verbatim; all others only as a hash
    mode: str = field(default=INTERLEAVED, metadata={"choices": MODES})
    # refuse to start unless the backend reports the GPU's clocks locked (gatekit never changes clocks itself)
    require_locked_clocks: bool = field(default=False, metadata={"omit": False})
    # a probe's gate file, written by `gate bisect`: it may run one run per arm, and then leaves the decision to
    # the bisect's posterior (which estimates the noise from every pair of the bisect)
    bisect_probe: bool = field(default=False, metadata={"omit": False})


@dataclass(frozen=True, slots=True)
class DuetSpec(Record):
    """The [duet] table: the two twin slots (slot 0 first) and whether slots that differ are allowed."""

    slots: tuple[DeviceSlot, DeviceSlot] = field(metadata={"document": tuple[str, ...], "parse": parse_slots})
    allow_unequal_slots: bool = False


@dataclass(frozen=True, slots=True)
class CommitsSpec(Record):
    """The [commits] table `gate compare` and `gate bisect` write: the gate's two arms are one arm at two commits,
    off at `base` and on at `head`. Their effective configs may differ then (a commit may change a default):
    what differs is recorded in the finding, never an error; each arm's must still be the same in all its runs."""

    base: Commit
    head: Commit
    requested_base: str = field(default="", metadata={"omit": ""})  # BASE as given, when its merge-base replaced it
    merge_base: bool = field(default=False, metadata={"omit": False})  # base is `git merge-base BASE HEAD`


@dataclass(frozen=True, slots=True)
class GateConfig(Record):
    """A whole gate file, paths resolved relative to the file (`path`)."""

    gate: GateSpec
    threshold: ThresholdSpec = field(default_factory=ThresholdSpec)
    guards: tuple[GuardSpec, ...] = ()
    rules: RulesSpec = field(default_factory=RulesSpec)
    driver: DriverSpec = field(kw_only=True)
    arms: Mapping[str, ArmSpec] = field(kw_only=True)
    backend: BackendSpec = field(default_factory=BackendSpec)
    duet: DuetSpec | None = None  # gate.mode = "duet" only
    commits: CommitsSpec | None = None  # written by gate compare and gate bisect: the arms are two commits
    # primary = "time_to_target_s" / "steps_to_target": the quality target a run's trace must reach
    time_to_target: TargetSpec | None = None
    path: Path = field(default=Path(), kw_only=True, metadata={"internal": True})
    # rules.evidence is in the file; otherwise it follows the policy (--policy too)
    evidence_stated: bool = field(default=False, kw_only=True, metadata={"internal": True})

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def arm(self, name_or_path: str) -> ArmSpec:
        """An arm by name, or an ad-hoc arm from a path to an arm config file."""
        if name_or_path in self.arms:
            return self.arms[name_or_path]
        candidate = Path(name_or_path)
        if candidate.suffix == ".toml" and candidate.is_file():
            _check(bool(NAME_PATTERN.fullmatch(candidate.stem)), candidate, "arm name",
                   f"the file name '{candidate.stem}' names the arm and must be {NAME_RULE}")
            return ArmSpec(name=candidate.stem, config=candidate.resolve())
        known = ", ".join(self.arms) or "none"
        raise ConfigError(
            f"{self.path}: arms: no arm named '{name_or_path}' (the gate file defines: {known}); "
            "pass an arm name or a path to an existing arm .toml file"
        )

    def two_arms(self, off: str | None, on: str | None) -> tuple[ArmSpec, ArmSpec]:
        """The off and on arms a command compares: those named (arm names or arm file paths), else the gate file's
        first two; a gate file of one arm names the commands that compare it at two commits."""
        names = list(self.arms)
        if len(names) < 2 and not (off and on):
            raise ConfigError(f"{self.path}: arms: defines one arm ({names[0]}), and this command compares two: "
                              "add a second arm, name both as OFF ON, or compare the arm at two commits with "
                              "gate compare BASE [HEAD]")
        return self.arm(off or names[0]), self.arm(on or names[1])

    def with_overrides(self, *, n: int | None = None, order: str | None = None, seed: int | None = None,
                       out: Path | None = None, runs: Path | None = None, policy: str | None = None,
                       warmup: int | None = None, load_limit: float | None = None) -> GateConfig:
        """Command-line overrides, validated like the file's own values (and preregistered like them: the
        predecision is written from the result)."""
        gate = self.gate
        if gate.mode == DUET_MODE:
            allowed = (None, *policies_of_mode(DUET_MODE))
            _check(policy in allowed and order is None and not warmup, self.path,
                   "--policy" if policy not in allowed else "--order" if order is not None else "--warmup",
                   "does not apply to a duet gate (gate.mode = \"duet\"); drop it")
            _check(n is None or duet_pairs_ok(n), self.path, "--n", f"{duet_pairs_rule()}, got {n}")
            policy = None
        if policy is not None:
            _check(policy in gate_policies(), self.path, "--policy", f"must be one of {', '.join(gate_policies())}")
            chosen = describe(policy)
            _check(chosen.mode == gate.mode, self.path, "--policy",  # a duet policy cannot decide interleaved runs
                   f"\"{policy}\" needs gate.mode = \"{chosen.mode}\" and a [duet] table of two slots")
            if chosen.fixes_schedule:
                _check(n is None and order in (None, chosen.order), self.path, "--policy",
                       f"{policy} runs {chosen.stages_words} in {chosen.order} order; drop --n and --order")
                gate = replace(gate, n=chosen.first_stage, order=chosen.order)
            problem = censoring_policy_problem(gate.primary, policy)
            _check(problem is None, self.path, "--policy", problem or "")
            gate = replace(gate, policy=policy)
        elif describe(gate.policy).fixes_schedule:
            _check(n is None and order in (None, describe(gate.policy).order), self.path, "gate.policy",
                   f"is {gate.policy}, which fixes n and order; drop --n and --order")
        if warmup is not None:
            _check(0 <= warmup <= MAX_WARMUP, self.path, "--warmup", f"must be 0, 1 or 2, got {warmup}")
            gate = replace(gate, warmup=warmup)
        if n is not None:
            _check(n >= MIN_RUNS_PER_ARM, self.path, "--n", f"{FEWEST_RUNS}, got {n}")
            _check(n <= MAX_RUNS_PER_ARM, self.path, "--n", f"must be at most {MAX_RUNS_PER_ARM}, got {n}")
            gate = replace(gate, n=n)
        if order is not None:
            _check(order in ORDERS, self.path, "--order", f"must be one of {', '.join(ORDERS)}")
            gate = replace(gate, order=order)
        if seed is not None:
            gate = replace(gate, seed=seed)
        if out is not None:
            gate = replace(gate, out=out.resolve())
        if runs is not None:
            gate = replace(gate, runs=runs.resolve())
        rules = self.rules
        if policy is not None and not self.evidence_stated:
            rules = replace(rules, evidence=describe(policy).default_evidence)
        if load_limit is not None:
            _check(math.isfinite(load_limit) and load_limit > 0, self.path, "--load-limit",
                   f"must be a positive number, got {load_limit}")
            rules = replace(rules, load_limit=float(load_limit))
        return replace(self, gate=gate, rules=rules)


def duet_pairs_ok(n: int, fewest: int | None = None) -> bool:
    """duet_pairs_rule: both slot orders equally often, and at least the fewest pairs the design decides from
    (None: the current duet design's, its descriptor's min_n)."""
    return n >= (DUET.min_n if fewest is None else fewest) and n % 2 == 0


def duet_pairs_rule(fewest: int | None = None) -> str:
    """What a duet's n must be, as a message says it."""
    least = DUET.min_n if fewest is None else fewest
    return f"a duet runs n pairs, an even number of at least {least} (both slot orders equally often)"


def _check(condition: bool, path: Path, key: str, problem: str) -> None:
    if not condition:
        raise ConfigError(f"{path}: {key}: {problem}")


def resolve_path(base: Path, value: str | Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file, turning every failure into one ConfigError line."""
    raw = read_input(path, "a TOML file")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: malformed TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None


GATE_FILE = "gate.toml"  # the gate file's name where a repository keeps it


def find_gate_file(here: Path, note: Callable[[str], None] = lambda line: None) -> Path:
    """The gate file a command uses when none is given: gate.toml in `here` or the nearest folder above it, up to
    the git repository's root (the folder holding .git; outside a repository, `here` only). One found above `here`
    is said through `note` ("using gate file ../gate.toml") and returned relative to `here`; none found: the
    plain name, which load_gate then says is missing."""
    here = here.absolute()
    folder, up = here, 0
    while True:
        if (folder / GATE_FILE).is_file():
            found = Path(*[".."] * up, GATE_FILE)
            if up:
                note(f"using gate file {found}")
            return found
        if (folder / ".git").exists() or folder.parent == folder or not _in_repository(folder):
            return Path(GATE_FILE)
        folder, up = folder.parent, up + 1


def _in_repository(folder: Path) -> bool:
    """Whether a folder above `folder` holds .git (only then is a gate file above the working directory looked for)."""
    return any((parent / ".git").exists() for parent in folder.parents)


def load_gate(path: Path | str) -> GateConfig:
    """Load and validate a gate file; paths inside it resolve relative to the file."""
    path = Path(path).resolve()
    data = load_toml(path)
    try:
        config = GateConfig.from_input(data)
    except RecordError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    base = path.parent
    gate, rules, driver = config.gate, config.rules, config.driver
    explicit = {key for key in ("n", "order") if key in data["gate"]}
    mode_policies = policies_of_mode(gate.mode)
    if gate.mode == DUET_MODE:
        # the default policy, stated or not, means "the mode's own": a duet has one policy that pairs its runs
        allowed = (DEFAULT_POLICY, *mode_policies)
        _check(gate.policy in allowed and "order" not in explicit, path,
               "gate.policy" if gate.policy not in allowed else "gate.order",
               f"does not apply to mode = \"duet\" (both arms of a pair run at once; the {mode_policies[0]} policy "
               "decides); remove it")
        _check(gate.warmup == 0, path, "gate.warmup", "does not apply to mode = \"duet\"; remove it")
        gate = replace(gate, policy=gate.policy if gate.policy in mode_policies else mode_policies[0])
        default_pairs = describe(gate.policy).default_n
        if "n" not in explicit and default_pairs is not None:  # a duet's own default, not the gate's n = 3
            gate = replace(gate, n=default_pairs)
        _check(duet_pairs_ok(gate.n), path, "gate.n", f"{duet_pairs_rule()}, got {gate.n}")
        _check(config.duet is not None, path, "duet", "gate.mode = \"duet\" needs a [duet] table with slots = "
               "[\"cuda:0\", \"cuda:1\"] (or cpu core sets such as [\"cpu:0-3\", \"cpu:4-7\"])")
    else:
        _check(gate.policy in mode_policies, path, "gate.policy",
               f"\"{gate.policy}\" needs gate.mode = \"{describe(gate.policy).mode}\" and a [duet] table of two "
               "slots")
        _check(config.duet is None, path, "duet", "applies only to gate.mode = \"duet\"; set it or remove [duet]")
    for index, var in enumerate(gate.record_env):
        _check(bool(ENV_NAME_PATTERN.fullmatch(var)), path, f"gate.record_env[{index}]",
               f"{var!r} is not an environment variable name (letters, digits and '_', not starting with a digit)")
    if "warmup" not in data["gate"] and gate.mode != DUET_MODE and not gate.bisect_probe:
        gate = replace(gate, warmup=DEFAULT_WARMUP)
    chosen = describe(gate.policy)
    if chosen.fixes_schedule:  # a gate file that sets n or order for it is refused, never silently overridden
        _check("n" not in explicit, path, "gate.n", f"does not apply to policy = \"{gate.policy}\" (it runs "
               f"{chosen.stages_words}); remove it")
        _check(gate.order == chosen.order or "order" not in explicit, path, "gate.order",
               f"policy = \"{gate.policy}\" runs in {chosen.order} order; remove it or set it to {chosen.order}")
        gate = replace(gate, n=chosen.first_stage, order=chosen.order)
    _check(gate.n >= MIN_RUNS_PER_ARM or gate.bisect_probe, path, "gate.n", f"{FEWEST_RUNS}, got {gate.n}")
    gate = replace(gate, out=resolve_path(base, gate.out), runs=resolve_path(base, gate.runs))

    if "load_limit" not in data.get("rules", {}):
        rules = replace(rules, load_limit=default_load_limit(os.cpu_count()))
    evidence_stated = "evidence" in data.get("rules", {})
    if not evidence_stated:
        rules = replace(rules, evidence=chosen.default_evidence)
    arms: dict[str, ArmSpec] = {}
    for name, arm in config.arms.items():
        _check(bool(NAME_PATTERN.fullmatch(name)), path, f"arms.{name}", f"an arm name must be {NAME_RULE}")
        for var in arm.env:
            _check(bool(ENV_NAME_PATTERN.fullmatch(var)), path, f"arms.{name}.env.{var}",
                   "a variable name is letters, digits and '_', not starting with a digit")
        if arm.checkout is not None:
            worktree = resolve_path(base, arm.checkout.worktree)
            checkout_base = resolve_path(worktree, arm.checkout.base) if arm.checkout.base else None
            arm = replace(arm, checkout=replace(arm.checkout, worktree=worktree, base=checkout_base))
        arm_base = arm.base_dir(base)
        arms[name] = replace(arm, name=name, config=resolve_path(arm_base, arm.config) if arm.config else None)
    # an arm in a checkout of its own hashes the artifacts there: each path once per distinct base
    bases = dict.fromkeys(arm.base_dir(base) for arm in arms.values())
    driver = replace(driver, hash=tuple(dict.fromkeys(resolve_path(b, p) for b in bases for p in driver.hash)))
    for key, value in config.backend.options.items():
        # Plugin options live in [backend.<name>] tables, validated by that plugin when it loads.
        _check(isinstance(value, dict), path, f"backend.{key}",
               "unknown key (backend options go in a [backend.<name>] table, e.g. [backend.cuda])")

    # one arm is a gate of `gate compare` and `gate bisect` (the arm at two commits); `gate run` names two
    _check(len(arms) >= 1, path, "arms", "needs at least one arm (e.g. [arms.off]; `gate run` compares two)")
    if driver.name == "command":
        _check_shell_args(path, driver.options.get("argv"), arms)

    first_of: dict[str, int] = {}  # metric -> its first guard's index: one pass, not one scan per guard
    for index, guard in enumerate(config.guards):
        # a second guard of one metric would silently replace the first in the analysis (one result a metric)
        first = first_of.setdefault(guard.metric, index)
        _check(first == index, path, f"guards[{index}].metric",
               f"'{guard.metric}' is guarded already by guards[{first}]; state each guard metric once")
    _check_time_to_target(path, gate.primary, config.time_to_target, gate.policy)
    primary_needed = {gate.primary} - {ALWAYS_MEASURED}
    _check(not ({g.metric for g in config.guards} & primary_needed), path, "guards",
           f"the primary metric '{gate.primary}' cannot also be a guard")
    return replace(config, path=path, gate=gate, rules=rules, driver=driver, arms=arms,
                   evidence_stated=evidence_stated)


def censoring_policy_problem(primary: str, policy: str) -> str | None:
    """Why `policy` cannot decide `primary` (None: it can): a time to target has right-censored runs, which only a
    policy that decides censored times may read — any other would take "longer than t" for t."""
    if primary not in DERIVED_PRIMARIES or describe(policy).censoring:
        return None
    censoring = " or ".join(name for name in gate_policies() if describe(name).censoring)
    return (f"\"{policy}\" cannot decide primary = \"{primary}\": a run that never reaches the target is censored "
            f"(\"longer than its last time\"), which only policy = \"{censoring}\" reads as such")


def _check_time_to_target(path: Path, primary: str, target: TargetSpec | None, policy: str) -> None:
    """A derived primary needs its [time_to_target] table and a policy that decides censored times; the table
    applies to a derived primary only."""
    derived = " or ".join(f'"{name}"' for name in DERIVED_PRIMARIES)
    if primary in DERIVED_PRIMARIES:
        _check(target is not None, path, "time_to_target",
               f"primary = \"{primary}\" needs a [time_to_target] table: metric (a trace series), target, direction")
        problem = censoring_policy_problem(primary, policy)
        _check(problem is None, path, "gate.policy", problem or "")
    else:
        _check(target is None, path, "time_to_target", f"applies only to primary = {derived}; set one or remove the table")
    if target is not None:
        _check(math.isfinite(target.target), path, "time_to_target.target", f"must be a finite number, got {target.target}")


SHELLS = ("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash")


def _check_shell_args(path: Path, argv: Any, arms: Mapping[str, ArmSpec]) -> None:
    """Refuse arm `args` that a `sh -c SCRIPT` argv would swallow: the command driver appends them to argv,
    and the shell makes the first argument after the script `$0`, not `$1` — `-9` would silently vanish."""
    if not (isinstance(argv, list) and len(argv) == 3 and all(isinstance(a, str) for a in argv)):
        return
    shell, flag = Path(argv[0]).name, argv[1]
    if shell not in SHELLS or not (flag.startswith("-") and flag.endswith("c")):
        return
    for arm in arms.values():
        if arm.args:
            fixed = json.dumps([argv[0], flag, "SCRIPT", shell])
            raise ConfigError(f"{path}: arms.{arm.name}.args: driver.argv runs `{shell} {flag} SCRIPT`, which makes "
                              f"the first appended argument ({arm.args[0]!r}) $0, not $1, so the script never sees "
                              f"it; name $0 after the script (argv = {fixed}) and use \"$@\" in it")


def calibration_path(config: GateConfig) -> Path:
    return config.gate.runs / CALIBRATION_FILE


def resolve_history_sigma(config: GateConfig) -> RulesSpec:
    """The rules with `sigma_history_pct` filled in from the latest calibration when the gate asks for it.

    A gate with `sigma_ref = "history"` and no explicit `sigma_history_pct` needs `gate calibrate` first.
    """
    rules = config.rules
    if rules.sigma_ref != "history" or rules.sigma_history_pct > 0:
        return rules
    path = calibration_path(config)
    if not path.is_file():
        raise ConfigError(f"{config.path}: rules.sigma_ref: is \"history\" but there is no calibration at {path}; "
                          "run `gate calibrate ARM --n 10` first, or set rules.sigma_history_pct")
    data = load_toml(path)
    cv = data.get("cv_pct")
    if not (isinstance(cv, (int, float)) and not isinstance(cv, bool) and cv > 0):
        raise ConfigError(f"{path}: cv_pct: must be a positive number; run `gate calibrate` again")
    return replace(rules, sigma_history_pct=float(cv))


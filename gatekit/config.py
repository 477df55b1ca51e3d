"""The gate file: frozen config records, TOML loading and validation with precise errors.

Every error names the file and the dotted key, so a mistyped path is caught before any GPU time.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.errors import ConfigError
from gatekit.policies.descriptors import (DEFAULT_POLICY, DUET_MODE, INTERLEAVED, describe, gate_policies,
                                          policies_of_mode)
from gatekit.records import PROCESS_WALLCLOCK, Record
from gatekit.slots import DeviceSlot, SlotError, parse_slots
from gatekit.storage import read_input

ORDERS = ("abab", "abba", "random", "thue-morse")
# interleaved: one run at a time, the arms taking turns; duet: both arms of a pair at once, on twin slots
MODES = (INTERLEAVED, DUET_MODE)
DUET_PAIRS_RULE = "a duet runs n pairs, an even number of at least 4 (the slots swap every pair)"
SEEDED_ORDERS = ("random", "thue-morse")  # orders that draw from the seed
# Names the command line offers, here so `gate --help` need not import the modules that implement them
# (the policies' names are gatekit.policies.descriptors').
EXPORT_FORMATS = ("gab-json", "bmf")  # --export FORMAT: gatekit.exports.EXPORTERS
DIRECTIONS = ("lower", "higher")
LOAD_STATS = ("max", "mean")
SIGMA_REFS = ("arm", "leave_one_out", "history")
MAX_WARMUP = 2
ALWAYS_MEASURED = PROCESS_WALLCLOCK
CALIBRATION_FILE = "calibration.toml"  # in the runs folder: the latest `gate calibrate` of this machine
MAX_RUNS_PER_ARM = 1000  # a bound, so a typo (n = 30000) cannot schedule days of runs
MIN_SAMPLE_INTERVAL_S = 0.01  # below this the sampler would busy-loop and load the machine it measures
# Gate ids and arm names become file and folder names (series, runs, findings): no separators, no dots first.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAME_RULE = "1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"
ENV_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class ThresholdSpec(Record):
    """threshold_pct = max(sigma_k * sigma_off_pct, floor_pct)."""

    sigma_k: float = 2.0
    floor_pct: float = 1.0


@dataclass(frozen=True, slots=True)
class GuardSpec(Record):
    """A quality guard: on may not be worse than off by more than max_drop (absolute units)."""

    metric: str
    direction: str = "higher"
    max_drop: float = 0.0


# Load evidence limits for rules.evidence = "psi" / "steal": a window whose pressure stall (the `some` total's
# growth over the window) exceeds this share of its wall time, or whose CPU steal exceeds this share of its CPU
# time. An idle machine shows well under 1 % of either; one busy loop per core beside a run gives ~50 % CPU stall.
DEFAULT_PSI_LIMIT_PCT = 20.0
DEFAULT_STEAL_LIMIT_PCT = 10.0


@dataclass(frozen=True, slots=True)
class RulesSpec(Record):
    """Preregistered contamination rules: (i) load evidence AND (ii) deviation beyond sigma_k."""

    load_stat: str = "max"
    load_limit: float = 6.0
    load_rel_median: float = 1.5
    sigma_k: float = 3.0
    sigma_ref: str = "arm"
    max_retries: int = 1
    require_window_samples: bool = True
    sample_interval_s: float = 1.0
    sigma_history_pct: float = 0.0  # σ for sigma_ref = "history"; 0: from the latest `gate calibrate`
    load_per_core_limit: float = 1.5  # sequential policy: a run is flagged above this load1 per core
    # A threshold above this means the series could not have seen an effect that size: `inconclusive`, not
    # `rejected`. 0: no limit, as for a series preregistered before the rule (gate files default to
    # DEFAULT_MAX_THRESHOLD_PCT).
    max_threshold_pct: float = field(default=0.0, metadata={"omit": 0.0})
    # Which window telemetry is load evidence (EVIDENCE_KINDS). "load1" is the rule as it was before the others
    # existed (a series preregistered then reads as "load1"); gate files default to the policy's
    # default_evidence (its descriptor). The limits are stated in the document only when another kind is in use.
    evidence: str = field(default="load1", metadata={"omit": "load1"})
    psi_limit_pct: float = DEFAULT_PSI_LIMIT_PCT
    steal_limit_pct: float = DEFAULT_STEAL_LIMIT_PCT

    def to_dict(self) -> dict[str, Any]:
        data = Record.to_dict(self)
        if self.evidence == "load1":  # a load1 rule set reads exactly as before the other evidence existed
            data.pop("psi_limit_pct", None)
            data.pop("steal_limit_pct", None)
        return data


DEFAULT_MAX_THRESHOLD_PCT = 10.0
# rules.evidence: load1 (the classic load rule, or load per core under the sequential policy), psi (pressure
# stall), steal (hypervisor CPU steal), any (the three together). psi and steal fall back to load1 for a
# window that did not record them (a warning says so).
EVIDENCE_KINDS = ("load1", "psi", "steal", "any")


@dataclass(frozen=True, slots=True)
class DriverSpec:
    """Which driver runs the trainer; generic keys here, the rest is the plugin's `options`."""

    name: str = "command"
    timeout_s: float = 600.0
    hash: tuple[Path, ...] = ()
    busy_pattern: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """Which backend watches the machine ("auto" detects it); `options` holds each [backend.<name>] table."""

    name: str = "auto"
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ArmSpec:
    """One arm: its config file (substituted for {arm_config}), extra args and env."""

    name: str
    config: Path | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GateSpec:
    """The [gate] table."""

    id: str
    title: str = ""
    n: int = 3
    order: str = "abab"
    seed: int | None = None  # None: an order that needs one derives it from the predecision's sha256
    primary: str = "train_elapsed_s"
    direction: str = "lower"
    expect_diff: tuple[str, ...] = ()
    out: Path = Path("findings")
    runs: Path = Path("runs")
    policy: str = DEFAULT_POLICY
    warmup: int = 0  # discarded warm-up runs before round 1 (1: the first arm, 2: both arms)
    record_env: tuple[str, ...] = ()  # arm env variables written down verbatim; all others only as a hash
    mode: str = INTERLEAVED


@dataclass(frozen=True, slots=True)
class DuetSpec:
    """The [duet] table: the two twin slots (slot 0 first) and whether slots that differ are allowed."""

    slots: tuple[DeviceSlot, DeviceSlot]
    allow_unequal_slots: bool = False


@dataclass(frozen=True, slots=True)
class GateConfig:
    """A whole gate file, paths resolved relative to the file."""

    path: Path
    gate: GateSpec
    threshold: ThresholdSpec
    guards: tuple[GuardSpec, ...]
    rules: RulesSpec
    driver: DriverSpec
    arms: Mapping[str, ArmSpec]
    backend: BackendSpec = field(default_factory=BackendSpec)
    evidence_stated: bool = False  # rules.evidence is in the file; otherwise it follows the policy (--policy too)
    duet: DuetSpec | None = None  # gate.mode = "duet" only

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

    def with_overrides(self, *, n: int | None = None, order: str | None = None, seed: int | None = None,
                       out: Path | None = None, runs: Path | None = None, policy: str | None = None,
                       warmup: int | None = None) -> GateConfig:
        """Command-line overrides, validated like the file's own values."""
        gate = self.gate
        if gate.mode == DUET_MODE:
            allowed = (None, *policies_of_mode(DUET_MODE))
            _check(policy in allowed and order is None and not warmup, self.path,
                   "--policy" if policy not in allowed else "--order" if order is not None else "--warmup",
                   "does not apply to a duet gate (gate.mode = \"duet\"); drop it")
            _check(n is None or duet_pairs_ok(n), self.path, "--n", f"{DUET_PAIRS_RULE}, got {n}")
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
            gate = replace(gate, policy=policy)
        elif describe(gate.policy).fixes_schedule:
            _check(n is None and order in (None, describe(gate.policy).order), self.path, "gate.policy",
                   f"is {gate.policy}, which fixes n and order; drop --n and --order")
        if warmup is not None:
            _check(0 <= warmup <= MAX_WARMUP, self.path, "--warmup", f"must be 0, 1 or 2, got {warmup}")
            gate = replace(gate, warmup=warmup)
        if n is not None:
            _check(n >= 1, self.path, "--n", f"must be at least 1, got {n}")
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
        return replace(self, gate=gate, rules=rules)


def duet_pairs_ok(n: int) -> bool:
    """DUET_PAIRS_RULE: both slot orders equally often, and n − 2 ≥ 2 degrees of freedom for the noise."""
    return n >= 4 and n % 2 == 0


def _check(condition: bool, path: Path, key: str, problem: str) -> None:
    if not condition:
        raise ConfigError(f"{path}: {key}: {problem}")


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


# how a key's expected type reads in an error ("must be an integer", never "must be a int")
_KIND_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", list: "a list",
               dict: "a table"}


class TomlTable:
    """Reads typed keys from one TOML table and rejects the keys nobody read."""

    def __init__(self, path: Path, prefix: str, data: Any) -> None:
        _check(isinstance(data, dict), path, prefix, "must be a table")
        self.path, self.prefix, self.data = path, prefix, dict(data)
        self.known: list[str] = []  # every key asked for, so a misspelt one can be matched against them

    def key(self, name: str) -> str:
        # a key that is not a bare TOML key (spaces, dots, quotes) is shown quoted, as TOML writes it
        shown = name if _BARE_KEY.fullmatch(name) else json.dumps(name, ensure_ascii=False)
        return f"{self.prefix}.{shown}" if self.prefix else shown

    def take(self, name: str, kind: type | tuple[type, ...], default: Any = ..., choices: tuple = ()) -> Any:
        self.known.append(name)
        if name not in self.data:
            _check(default is not ..., self.path, self.key(name), "is required")
            return default
        value = self.data.pop(name)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # TOML integers are fine where floats are expected; booleans are never numbers.
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        names = " or ".join(_KIND_WORDS.get(k, f"a {k.__name__}") for k in kinds)
        _check(ok, self.path, self.key(name), f"must be {names}, got {value!r}")
        if isinstance(value, float):
            _check(math.isfinite(value), self.path, self.key(name), f"must be a finite number, got {value!r}")
        if isinstance(value, str):
            _check("\0" not in value, self.path, self.key(name), "cannot contain a NUL character")
        if choices:
            _check(value in choices, self.path, self.key(name),
                   f"must be one of {', '.join(map(str, choices))}, got {value!r}")
        return value

    def take_str_list(self, name: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = self.take(name, list, list(default))
        _check(all(isinstance(v, str) for v in value), self.path, self.key(name), "must be a list of strings")
        _check(all("\0" not in v for v in value), self.path, self.key(name), "cannot contain NUL characters")
        return tuple(value)

    def take_positive(self, name: str, default: float, *, allow_zero: bool = False) -> float:
        value = self.take(name, float, default)
        ok = value >= 0 if allow_zero else value > 0
        _check(ok, self.path, self.key(name), f"must be {'non-negative' if allow_zero else 'positive'}, got {value}")
        return value

    def done(self) -> None:
        for unknown in self.data:
            hint = unknown_key_hint(unknown, self.known)
            raise ConfigError(f"{self.path}: {self.key(unknown)}: unknown key ({hint})")


def unknown_key_hint(unknown: str, known: Sequence[str]) -> str:
    """'did you mean 'X'?' when a known key is close to the unknown one, else a pointer to the docs."""
    close = difflib.get_close_matches(unknown, known, n=1)
    return f"did you mean '{close[0]}'?" if close else "check its spelling against the docs"


def resolve_path(base: Path, value: str) -> Path:
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


def load_gate(path: Path | str) -> GateConfig:
    """Load and validate a gate file; paths inside it resolve relative to the file."""
    path = Path(path).resolve()
    data = load_toml(path)
    base = path.parent
    root = TomlTable(path, "", data)

    gate_t = TomlTable(path, "gate", root.take("gate", dict))
    explicit = {key for key in ("n", "order") if key in gate_t.data}
    gate = GateSpec(
        id=gate_t.take("id", str),
        title=gate_t.take("title", str, ""),
        n=gate_t.take("n", int, 3),
        order=gate_t.take("order", str, "abab", ORDERS),
        seed=gate_t.take("seed", int, None),
        primary=gate_t.take("primary", str, "train_elapsed_s"),
        direction=gate_t.take("direction", str, "lower", DIRECTIONS),
        expect_diff=gate_t.take_str_list("expect_diff"),
        out=resolve_path(base, gate_t.take("out", str, "findings")),
        runs=resolve_path(base, gate_t.take("runs", str, "runs")),
        policy=gate_t.take("policy", str, DEFAULT_POLICY, gate_policies()),
        warmup=gate_t.take("warmup", int, 0),
        record_env=gate_t.take_str_list("record_env"),
        mode=gate_t.take("mode", str, INTERLEAVED, MODES),
    )
    gate_t.done()
    mode_policies = policies_of_mode(gate.mode)
    if gate.mode == DUET_MODE:
        # the default policy, stated or not, means "the mode's own": a duet has one policy that pairs its runs
        allowed = (DEFAULT_POLICY, *mode_policies)
        _check(gate.policy in allowed and "order" not in explicit, path,
               "gate.policy" if gate.policy not in allowed else "gate.order",
               f"does not apply to mode = \"duet\" (both arms of a pair run at once; the {mode_policies[0]} policy "
               "decides); remove it")
        _check(gate.warmup == 0, path, "gate.warmup", "does not apply to mode = \"duet\"; remove it")
        _check(duet_pairs_ok(gate.n), path, "gate.n", f"{DUET_PAIRS_RULE}, got {gate.n}")
        gate = replace(gate, policy=gate.policy if gate.policy in mode_policies else mode_policies[0])
    else:
        _check(gate.policy in mode_policies, path, "gate.policy",
               f"\"{gate.policy}\" needs gate.mode = \"{describe(gate.policy).mode}\" and a [duet] table of two "
               "slots")
    for index, var in enumerate(gate.record_env):
        _check(bool(ENV_NAME_PATTERN.fullmatch(var)), path, f"gate.record_env[{index}]",
               f"{var!r} is not an environment variable name (letters, digits and '_', not starting with a digit)")
    _check(gate.n >= 1, path, "gate.n", f"must be at least 1, got {gate.n}")
    _check(0 <= gate.warmup <= MAX_WARMUP, path, "gate.warmup",
           f"must be 0 (none), 1 (the first arm) or 2 (both arms), got {gate.warmup}")
    chosen = describe(gate.policy)
    if chosen.fixes_schedule:  # a gate file that sets n or order for it is refused, never silently overridden
        _check("n" not in explicit, path, "gate.n", f"does not apply to policy = \"{gate.policy}\" (it runs "
               f"{chosen.stages_words}); remove it")
        _check(gate.order == chosen.order or "order" not in explicit, path, "gate.order",
               f"policy = \"{gate.policy}\" runs in {chosen.order} order; remove it or set it to {chosen.order}")
        gate = replace(gate, n=chosen.first_stage, order=chosen.order)
    _check(gate.n <= MAX_RUNS_PER_ARM, path, "gate.n", f"must be at most {MAX_RUNS_PER_ARM}, got {gate.n}")
    _check(bool(NAME_PATTERN.fullmatch(gate.id)), path, "gate.id", f"must be {NAME_RULE}, got {gate.id!r}")

    threshold_t = TomlTable(path, "threshold", root.take("threshold", dict, {}))
    threshold = ThresholdSpec(
        sigma_k=threshold_t.take_positive("sigma_k", 2.0, allow_zero=True),
        floor_pct=threshold_t.take_positive("floor_pct", 1.0, allow_zero=True),
    )
    threshold_t.done()

    guards = []
    raw_guards = root.take("guards", list, [])
    for index, raw in enumerate(raw_guards):
        guard_t = TomlTable(path, f"guards[{index}]", raw)
        guards.append(GuardSpec(
            metric=guard_t.take("metric", str),
            direction=guard_t.take("direction", str, "higher", DIRECTIONS),
            max_drop=guard_t.take_positive("max_drop", 0.0, allow_zero=True),
        ))
        guard_t.done()

    rules_t = TomlTable(path, "rules", root.take("rules", dict, {}))
    evidence_stated = "evidence" in rules_t.data
    rules = RulesSpec(
        load_stat=rules_t.take("load_stat", str, "max", LOAD_STATS),
        load_limit=rules_t.take_positive("load_limit", 6.0),
        load_rel_median=rules_t.take_positive("load_rel_median", 1.5),
        sigma_k=rules_t.take_positive("sigma_k", 3.0),
        sigma_ref=rules_t.take("sigma_ref", str, "arm", SIGMA_REFS),
        max_retries=rules_t.take("max_retries", int, 1),
        require_window_samples=rules_t.take("require_window_samples", bool, True),
        sample_interval_s=rules_t.take_positive("sample_interval_s", 1.0),
        sigma_history_pct=rules_t.take_positive("sigma_history_pct", 0.0, allow_zero=True),
        load_per_core_limit=rules_t.take_positive("load_per_core_limit", 1.5),
        max_threshold_pct=rules_t.take_positive("max_threshold_pct", DEFAULT_MAX_THRESHOLD_PCT, allow_zero=True),
        evidence=rules_t.take("evidence", str, describe(gate.policy).default_evidence, EVIDENCE_KINDS),
        psi_limit_pct=rules_t.take_positive("psi_limit_pct", DEFAULT_PSI_LIMIT_PCT),
        steal_limit_pct=rules_t.take_positive("steal_limit_pct", DEFAULT_STEAL_LIMIT_PCT),
    )
    rules_t.done()
    _check(rules.max_retries >= 0, path, "rules.max_retries", "must be 0 or more")
    for key in ("psi_limit_pct", "steal_limit_pct"):
        _check(getattr(rules, key) < 100, path, f"rules.{key}", f"must be below 100 (a share of the run window, "
               f"in %), got {getattr(rules, key):g}")
    _check(rules.sample_interval_s >= MIN_SAMPLE_INTERVAL_S, path, "rules.sample_interval_s",
           f"must be at least {MIN_SAMPLE_INTERVAL_S:g} s, got {rules.sample_interval_s:g}")

    driver_t = TomlTable(path, "driver", root.take("driver", dict))
    driver = DriverSpec(
        name=driver_t.take("name", str, "command"),
        timeout_s=driver_t.take_positive("timeout_s", 600.0),
        hash=tuple(resolve_path(base, p) for p in driver_t.take_str_list("hash")),
        busy_pattern=driver_t.take("busy_pattern", str, ""),
        options=driver_t.data,  # the plugin validates its own keys
    )

    backend_t = TomlTable(path, "backend", root.take("backend", dict, {}))
    backend_name = backend_t.take("name", str, "auto")
    _check(bool(backend_name.strip()), path, "backend.name", "must name a backend or be \"auto\"")
    for key, value in backend_t.data.items():
        # Plugin options live in [backend.<name>] tables, validated by that plugin when it loads.
        _check(isinstance(value, dict), path, f"backend.{key}",
               "unknown key (backend options go in a [backend.<name>] table, e.g. [backend.cuda])")
    backend = BackendSpec(name=backend_name, options=dict(backend_t.data))

    arms_t = TomlTable(path, "arms", root.take("arms", dict))
    arms: dict[str, ArmSpec] = {}
    for name in list(arms_t.data):
        _check(bool(NAME_PATTERN.fullmatch(name)), path, f"arms.{name}", f"an arm name must be {NAME_RULE}")
        arm_t = TomlTable(path, f"arms.{name}", arms_t.data.pop(name))
        config = arm_t.take("config", str, "")
        env = arm_t.take("env", dict, {})
        for var, value in env.items():
            _check(bool(ENV_NAME_PATTERN.fullmatch(var)), path, f"arms.{name}.env.{var}",
                   "a variable name is letters, digits and '_', not starting with a digit")
            _check(isinstance(value, str) and "\0" not in value, path, f"arms.{name}.env.{var}",
                   "must be a string without NUL characters")
        arms[name] = ArmSpec(
            name=name,
            config=resolve_path(base, config) if config else None,
            args=arm_t.take_str_list("args"),
            env=env,
        )
        arm_t.done()
    _check(len(arms) >= 2, path, "arms", "needs at least two arms (e.g. [arms.off] and [arms.on])")
    duet = _duet_table(path, root.take("duet", dict, None), gate.mode)
    root.done()
    if driver.name == "command":
        _check_shell_args(path, driver.options.get("argv"), arms)

    primary_needed = {gate.primary} - {ALWAYS_MEASURED}
    _check(not ({g.metric for g in guards} & primary_needed), path, "guards",
           f"the primary metric '{gate.primary}' cannot also be a guard")
    return GateConfig(path=path, gate=gate, threshold=threshold, guards=tuple(guards), rules=rules,
                      driver=driver, arms=arms, backend=backend, evidence_stated=evidence_stated, duet=duet)


def _duet_table(path: Path, data: Any, mode: str) -> DuetSpec | None:
    """The [duet] table: required by mode = "duet", refused without it."""
    if mode != DUET_MODE:
        _check(data is None, path, "duet", "applies only to gate.mode = \"duet\"; set it or remove [duet]")
        return None
    _check(data is not None, path, "duet", "gate.mode = \"duet\" needs a [duet] table with slots = [\"cuda:0\", "
           "\"cuda:1\"] (or cpu core sets such as [\"cpu:0-3\", \"cpu:4-7\"])")
    duet_t = TomlTable(path, "duet", data)
    texts = duet_t.take_str_list("slots")
    allow = duet_t.take("allow_unequal_slots", bool, False)
    duet_t.done()
    try:
        slots = parse_slots(texts)
    except SlotError as exc:
        raise ConfigError(f"{path}: duet.slots: {exc}") from None
    return DuetSpec(slots=slots, allow_unequal_slots=allow)


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
    _check(isinstance(cv, (int, float)) and not isinstance(cv, bool) and cv > 0, path, "cv_pct",
           "must be a positive number; run `gate calibrate` again")
    return replace(rules, sigma_history_pct=float(cv))


def read_arm_config(arm: ArmSpec) -> dict[str, Any] | None:
    """Parse an arm's config file to prove it is valid TOML; None when the arm has none."""
    if arm.config is None:
        return None
    return load_toml(arm.config)

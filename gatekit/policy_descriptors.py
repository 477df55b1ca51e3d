"""What the gate file, the command line and the planners know of each policy, without importing it.

One `PolicyDescriptor` per policy: its name, the gate mode it decides, its run order, the stages it fixes (if
any), the load evidence it defaults to, the sizes `gate plan` tries, and where its Policy object lives. This
module imports only the standard library and sits below `gatekit.config`, so the gate file's checks and
`gate --help` read it without pandas and nothing cycles; `policy_for` imports a policy's module only when its
object is asked for.

A policy is registered once, through the `gatekit.policies` entry-point group: the built-ins below are
named there by gatekit's own pyproject.toml exactly as a plugin distribution names its own (docs/plugins.md),
or, in a test, by `register`; nothing else keeps a list of policy names.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gatekit.errors import ConfigError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

POLICY_GROUP = "gatekit.policies"  # entry point: the policy's name = "module:DESCRIPTOR" (a light module)

INTERLEAVED, DUET_MODE = "interleaved", "duet"  # the gate modes (config.MODES): one run at a time, or pairs at once
PLAN_SIZES = (3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # `gate plan`'s runs per arm to try (3: the gate's default)


@dataclass(frozen=True, slots=True)
class PolicyDescriptor:
    """A policy as data: enough for config, the CLI and the planners, with no statistics imported."""

    name: str
    implementation: str  # "module:function": the function takes a design version (None: current), gives the Policy
    mode: str = INTERLEAVED  # the gate mode whose series it decides
    order: str = "abab"  # its run order when the gate states none ("duet": pairs run together, not interleaved)
    stages: tuple[int, ...] | None = None  # runs per arm at each look when the policy fixes them; None: the gate's n
    version: int | None = None  # the design a new series preregisters (None: the policy has one design)
    # the predecision key (a field of prereg.DecisionSpec) that records the version; a predecision written before
    # the key existed is upgraded when read (records.UPGRADES says which version it preregistered)
    version_key: str | None = None
    default_n: int | None = None  # runs per arm (pairs) when the gate file states no n (None: the gate's default)
    default_evidence: str = "load1"  # rules.evidence when the gate file states none
    plan_sizes: tuple[int, ...] = PLAN_SIZES  # runs per arm (pairs) `gate plan` tries, in order
    plan_step: int = 1  # the spacing of those sizes when the plan bisects between two of them
    min_n: int = 1  # the fewest runs per arm (pairs) a gate file may state
    mde_sizes: tuple[int, ...] = (3, 4, 8)  # runs per arm at which `gate calibrate` reports the MDE
    gate: bool = True  # False: a comparison rule only `gate simulate` runs
    in_suite: bool = False  # `gate simulate --suite` runs it when no --policy is given
    suite_targets: bool = False  # the suite's targets (its `met` column) are this policy's
    censoring: bool = False  # it decides right-censored times (a time-to-target primary's runs that never got there)
    large_n: bool = False  # made for thousands of runs per arm (imports): the suite runs it on its large-n rows only

    @property
    def fixes_schedule(self) -> bool:
        """Whether it runs its own stages in its own order (a gate's n and order are refused)."""
        return self.stages is not None

    def recorded_order(self, gate_order: str) -> str:
        """The run order a finding records (`gate.order`): the gate's, or this policy's own where its runs are
        not interleaved ("duet": both runs of a pair at once) — the gate's default "abab" never ran there."""
        return gate_order if self.mode == INTERLEAVED else self.order

    @property
    def first_stage(self) -> int:
        """Runs per arm at the first look of a policy that fixes its stages: the n its series preregisters."""
        if not self.stages:
            raise ValueError(f"the {self.name} policy takes the gate's n; it fixes no stages")
        return self.stages[0]

    @property
    def stages_words(self) -> str:
        """The stages as messages say them: "4, then 8, then 12 runs per arm"."""
        return stages_words(self.stages or ())


def stages_words(stages: tuple[int, ...]) -> str:
    """Runs per arm at each look as messages say them: "4, then 8, then 12 runs per arm"."""
    return ", then ".join(str(n) for n in stages) + " runs per arm"


DUET_MIN_PAIRS = 10  # duet v3: below, the studentized Huber fit has no bounded quantile under two speed states
_PLAN_PAIRS = tuple(n for n in PLAN_SIZES if n >= DUET_MIN_PAIRS and n % 2 == 0)  # a duet: an even number of pairs

CLASSIC = PolicyDescriptor("classic", "gatekit.policies.classic:policy")
SEQUENTIAL = PolicyDescriptor("sequential", "gatekit.policies.sequential:policy",
                              order="block-shuffle-spread", stages=(4, 8, 12), version=8, version_key="sequential_version",
                              default_evidence="psi", plan_sizes=(), mde_sizes=(12,),
                              in_suite=True, suite_targets=True)
# duet v3 (v2's slots and Huber fit, critical values calibrated over normal and two-speed-state noise) from issue
# 30; v2 (Thue–Morse slots, Huber fit) from issue 18; a duet predecision without duet_version is v1
DUET = PolicyDescriptor("duet", "gatekit.policies.duet:policy",
                        mode=DUET_MODE, order="duet", default_evidence="psi", plan_sizes=_PLAN_PAIRS, plan_step=2,
                        mde_sizes=(12,), version=3, version_key="duet_version", default_n=12,
                        min_n=DUET_MIN_PAIRS, in_suite=True)
# a time to target with right-censored runs (issue 32): the lognormal AFT time ratio
CENSORED = PolicyDescriptor("censored", "gatekit.policies.censored:policy", in_suite=True, censoring=True)
# thousands of heavy-tailed values (imports, issue 30): the Hodges–Lehmann shift and its Mann–Whitney interval
ROBUST = PolicyDescriptor("robust", "gatekit.policies.robust:policy", version=1, version_key="robust_version",
                          in_suite=True, large_n=True)
WELCH = PolicyDescriptor("welch", "gatekit.policies.comparison:welch", gate=False)
BOOTSTRAP = PolicyDescriptor("bootstrap", "gatekit.policies.comparison:bootstrap", gate=False)
# the duet's version 1, simulated beside the current design (`gate simulate --policy duet-v1`)
DUET_V1 = PolicyDescriptor("duet-v1", "gatekit.policies.duet:version_1", mode=DUET_MODE, order="duet", gate=False,
                           plan_sizes=(), default_n=8, min_n=4, in_suite=True)
# its version 2 likewise (`gate simulate --policy duet-v2`)
DUET_V2 = PolicyDescriptor("duet-v2", "gatekit.policies.duet:version_2", mode=DUET_MODE, order="duet", gate=False,
                           plan_sizes=(), default_n=12, min_n=4, in_suite=True)
# gatekit's own policies, in the order lists show them (plugins' follow, by name); each is registered in
# pyproject.toml's `gatekit.policies` entry points, as a plugin's would be (tests/test_policies.py checks both)
BUILTIN = (CLASSIC, SEQUENTIAL, DUET, CENSORED, ROBUST, WELCH, BOOTSTRAP, DUET_V1, DUET_V2)
DEFAULT_POLICY = CLASSIC.name  # a gate file without gate.policy
IMPORT_POLICY = ROBUST.name  # what `gate import` decides by without --policy (docs/importers.md says why)

_registry: dict[str, PolicyDescriptor] | None = None  # loaded from the entry points once; register() adds


def _checked(entry: EntryPoint) -> PolicyDescriptor:
    """A policy entry point's descriptor, checked when it loads (not when first used), naming what is wrong."""
    where = f"policy plugin '{entry.name}' ({entry.value}"
    where += f", from {entry.dist.name})" if entry.dist is not None else ")"
    try:
        descriptor = entry.load()
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{where} cannot be loaded: {exc}") from None
    if not isinstance(descriptor, PolicyDescriptor):
        raise ConfigError(f"{where} is a {type(descriptor).__name__}; it must name a "
                          "gatekit.policy_descriptors.PolicyDescriptor")
    if descriptor.name != entry.name:
        raise ConfigError(f"{where} describes a policy named '{descriptor.name}'; the entry point's name and the "
                          "descriptor's must be the same")
    module, colon, function = descriptor.implementation.partition(":")
    if not (module and colon and function):
        raise ConfigError(f"{where}: implementation '{descriptor.implementation}' must be 'module:function'")
    return descriptor


def installed_policies() -> dict[str, PolicyDescriptor]:
    """{name: descriptor} of every policy the `gatekit.policies` entry points register, gatekit's own first."""
    from importlib.metadata import entry_points  # here: slow to import, and `gate --help` reads no policy

    found: dict[str, PolicyDescriptor] = {}
    values: dict[str, str] = {}
    for entry in entry_points(group=POLICY_GROUP):
        if values.get(entry.name) == entry.value:
            continue  # one distribution seen twice on the path (an editable install beside its source)
        if entry.name in found:
            raise ConfigError(f"two installed distributions register a policy named '{entry.name}' "
                              f"({values[entry.name]} and {entry.value}); uninstall one")
        found[entry.name], values[entry.name] = _checked(entry), entry.value
    missing = [d.name for d in BUILTIN if d.name not in found]
    if missing:
        raise ConfigError(f"gatekit's own policies are not registered ({', '.join(missing)}): its install is "
                          "stale; install it again (pip install -e . in a checkout)")
    builtin = [d.name for d in BUILTIN]
    return {name: found[name] for name in [*builtin, *sorted(set(found) - set(builtin))]}


def _policies() -> dict[str, PolicyDescriptor]:
    global _registry
    if _registry is None:
        _registry = installed_policies()
    return _registry


def reload_policies() -> None:
    """Read the entry points again on next use (a plugin installed while this process runs; tests)."""
    global _registry
    _registry = None


def register(descriptor: PolicyDescriptor) -> PolicyDescriptor:
    """Add a policy in this process only (a test's; a plugin registers through the entry points); its name
    must be new."""
    if descriptor.name in _policies():
        raise ValueError(f"a policy named {descriptor.name!r} is already registered")
    _policies()[descriptor.name] = descriptor
    return descriptor


def unregister(name: str) -> None:
    """Remove a policy `register` added (the built-ins stay)."""
    if any(d.name == name for d in BUILTIN):
        raise ValueError(f"{name!r} is a built-in policy")
    _policies().pop(name, None)


def describe(name: str) -> PolicyDescriptor:
    """The descriptor of a registered policy (KeyError for an unknown name: validate against the names first)."""
    return _policies()[name]


def gate_policies() -> tuple[str, ...]:
    """The policies a gate can preregister, built-ins first."""
    return tuple(d.name for d in _policies().values() if d.gate)


def simulation_policies() -> tuple[str, ...]:
    """The policies `gate simulate` runs: every gate policy and the comparison rules."""
    return tuple(_policies())


def policies_of_mode(mode: str) -> tuple[str, ...]:
    """The gate policies that decide a series of this mode."""
    return tuple(d.name for d in _policies().values() if d.gate and d.mode == mode)


def suite_policies() -> tuple[str, ...]:
    """What `gate simulate --suite` runs without --policy: the default policy beside those marked for it."""
    return (DEFAULT_POLICY, *(d.name for d in _policies().values() if d.in_suite and d.name != DEFAULT_POLICY))


def policy_for(name: str, version: int | None = None) -> Any:
    """The Policy object of a registered name (a gatekit.policies.base.Policy; a comparison rule's is a
    base.SimulatedPolicy) in the design version a predecision records (None: the current one). Its module is
    imported now, not before."""
    module, _, function = describe(name).implementation.partition(":")
    return getattr(importlib.import_module(module), function)(version)

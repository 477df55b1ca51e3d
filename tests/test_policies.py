"""A policy is one home: nothing outside gatekit/policies/ compares policy names, and a policy registered from
outside (here: a tiny module written by the test, registered in-process or installed as a distribution with
a `gatekit.policies` entry point) is usable by the gate file, `--policy`, `gate run`,
`gate simulate` and `gate plan` without any other file knowing it.

The name check parses every module with `ast` (nothing is imported) and reports file, line and the code.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gatekit import policy_descriptors as descriptors
from gatekit.config import load_gate
from gatekit.errors import ConfigError
from gatekit.policy_descriptors import PolicyDescriptor, describe, policy_for, simulation_policies
from tests.conftest import gate_invoke, make_gate

ROOT = Path(__file__).resolve().parents[1]
POLICIES_PACKAGE = ROOT / "gatekit" / "policies"
DESCRIPTORS = ROOT / "gatekit" / "policy_descriptors.py"  # the registry: below config, so outside the package
# the names as written in code; the registry's own list, so a new built-in is checked as soon as it exists
NAMES = frozenset(simulation_policies())
# The name uses outside the package, with their reason. The upgrades of a predecision/1 and /2 state what those
# frozen formats meant (a sequential spec without `sequential_version` preregistered v3, a duet spec without
# `duet_version` v1); they live with the other
# upgrades in records.py, the foundation, which imports nothing above it and so cannot ask a descriptor.
HISTORICAL = {("gatekit/records.py", 'decision.get("policy") == "sequential"'),
              ("gatekit/records.py", 'decision.get("policy") == "duet"')}


@dataclass(frozen=True)
class NameUse:
    """A policy name used as policy knowledge at one line of a source file."""

    path: str
    line: int
    code: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.code}  ({self.why})"


def _policy_ish(node: ast.AST) -> bool:
    """An expression about policies: it names one (`policy`, `spec.policy`, `POLICIES`, `policy_for(...)`,
    a `"--policy"` option) or looks one up by name (`describe(...)`)."""
    text = ast.unparse(node).lower()
    return "polic" in text or "describe(" in text or text.rsplit(".", 1)[-1] == "describe"


def _names_in(node: ast.AST) -> list[str]:
    """Policy-name string constants in an expression (a name alone, or inside a tuple, list or set)."""
    if isinstance(node, ast.Constant) and node.value in NAMES:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [n for element in node.elts for n in _names_in(element)]
    return []


def _nested_names(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in NAMES]


def name_uses(source: str, path: str = "<source>") -> list[NameUse]:
    """Where `source` compares, keys, assigns or passes a policy name as policy knowledge."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: dict[tuple[int, str], NameUse] = {}

    def add(node: ast.AST, why: str) -> None:
        line = getattr(node, "lineno", 0)
        found.setdefault((line, why), NameUse(path, line, lines[line - 1].strip() if line else "", why))

    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):  # policy == "sequential", name in ("classic", "duet"), ...
            operands = [node.left, *node.comparators]
            if any(_names_in(o) for o in operands) and any(_policy_ish(o) for o in operands if not _names_in(o)):
                add(node, "compared with a policy")
        elif isinstance(node, ast.Dict):  # {"classic": ..., "sequential": ...}, {"sequential": ...}, {...}[policy]
            keys = [n for key in node.keys if key is not None for n in _names_in(key)]
            if not keys:
                continue
            parent = parents.get(node)
            looked_up = (isinstance(parent, ast.Subscript) and parent.value is node and _policy_ish(parent.slice)) or (
                isinstance(parent, ast.Attribute) and parent.attr == "get" and isinstance(parents.get(parent), ast.Call)
                and any(_policy_ish(a) for a in parents[parent].args))  # type: ignore[attr-defined]
            targets = _targets(parent)
            only_names = len(keys) == len(node.keys)  # every key a policy name: a table of policies
            if only_names or looked_up or any(_policy_ish(t) for t in targets):
                add(node, "a table keyed by policy names")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:  # POLICIES = (...), policy = "x"
            if _names_in(node.value) and any(_policy_ish(t) for t in _targets(node)):
                add(node, "assigned to a policy")
        elif isinstance(node, ast.arguments):  # def f(policy="classic")
            positional = [*node.posonlyargs, *node.args]
            pairs = list(zip(positional[len(positional) - len(node.defaults):], node.defaults))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
            for arg, default in pairs:
                if _names_in(default) and "polic" in arg.arg.lower():
                    add(default, "a policy parameter's default")
        elif isinstance(node, ast.keyword):  # f(policy="classic")
            if node.arg and "polic" in node.arg.lower() and _names_in(node.value):
                add(node.value, "passed as a policy")
        elif isinstance(node, ast.Call):  # click.option("--policy", default="classic"), describe("sequential")
            about_policy = _policy_ish(node.func) or any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                                         and "polic" in a.value.lower() for a in node.args)
            if about_policy and any(_nested_names(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                add(node, "a policy looked up or offered by name")
        elif isinstance(node, ast.BoolOp):  # policies or ("classic", "sequential")
            if any(_policy_ish(v) for v in node.values) and any(_names_in(v) for v in node.values):
                add(node, "a default for policies")
    return sorted(found.values(), key=lambda use: (use.line, use.why))


def _targets(node: ast.AST | None) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign):
        return [node.target]
    return []


def _sources(folder: Path) -> Iterator[Path]:
    return (p for p in sorted(folder.rglob("*.py")) if "__pycache__" not in p.parts)


def uses_in(folder: Path, *, outside: Path | None = None) -> list[NameUse]:
    """Policy names used in the sources of `folder` (a file: that one), leaving out `outside` and the registry
    that `outside` (the policies package) owns."""
    paths = [folder] if folder.is_file() else list(_sources(folder))
    return [use for path in paths if outside is None or (outside not in path.parents and path != DESCRIPTORS)
            for use in name_uses(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]


# -- the checker itself: each rule catches what it is for, and leaves other uses of the same words alone --

@pytest.mark.parametrize("code", [
    'if gate.policy == "duet":\n    pass',
    'if policy != "sequential":\n    pass',
    'ok = spec.policy in ("classic", "sequential")',
    'x = "bootstrap" == r.policy',
    'DEFAULT_EVIDENCE = {"classic": "load1", "sequential": "psi", "duet": "psi"}',
    'FIXED_SCHEDULES = {"sequential": (4, "thue-morse")}',
    'codes = {"welch": welch_codes, "bootstrap": bootstrap_codes}[policy](off, on)',
    'per_gate = {"bootstrap": 4}.get(policy, 1)',
    'POLICIES = ("classic", "sequential", "duet")',
    'DUET_POLICY = "duet"',
    'class GateSpec:\n    policy: str = "classic"',
    'def analyze(values, *, policy: str = "classic"):\n    pass',
    'simulate(policy="sequential")',
    '@click.option("--policy", type=click.Choice(NAMES), default="classic")\ndef cmd():\n    pass',
    'words = describe("sequential").stages_words',
    'runs = policy_for("sequential", 3).max_rounds(0)',
    'run_suite(policies or ("classic", "sequential"))',
])
def test_the_checker_finds_a_policy_name_used_as_policy_knowledge(code: str) -> None:
    assert name_uses(code), code


@pytest.mark.parametrize("code", [
    'if gate.mode == "duet":\n    pass',  # the gate's mode, not its policy
    'MODES = ("interleaved", "duet")',
    'figures = {"duet": duet_figure(f), "load": load_figure(f)}',  # a figure of the duet record
    'for kind in ("duet", "load", "pressure"):\n    pass',
    'RECOMPUTED_SECTIONS = ("runs", "stats", "sequential", "duet")',  # the finding's document keys
    'text = "the classic rule adopts only when"',
    'def f():\n    """The sequential policy\'s looks."""',
    'if policy == DEFAULT_POLICY:\n    pass',  # no name written
])
def test_the_checker_leaves_other_uses_of_the_words_alone(code: str) -> None:
    assert not name_uses(code), name_uses(code)


def test_the_checker_sees_the_policies_package_name_its_policies() -> None:
    # not vacuous on real code: inside gatekit/policies/ the names are registered and looked up, and found
    found = uses_in(POLICIES_PACKAGE) + uses_in(DESCRIPTORS)
    assert {use.path for use in found} >= {"gatekit/policy_descriptors.py"}, found
    assert len(found) >= len(NAMES), found


def _historical(use: NameUse) -> bool:
    return any(use.path == path and code in use.code for path, code in HISTORICAL)


def test_no_module_outside_the_policies_package_compares_policy_names() -> None:
    uses = uses_in(ROOT / "gatekit", outside=POLICIES_PACKAGE)
    assert all(any(_historical(u) and code in u.code for u in uses) for _, code in HISTORICAL), \
        "an exception in HISTORICAL no longer exists: remove it"
    found = [use for use in uses if not _historical(use)]
    assert not found, ("policy knowledge belongs to the policy's module in gatekit/policies/ (its descriptor, its "
                       "Policy object); ask them instead of comparing names:\n" + "\n".join(map(str, found)))


def test_every_registered_policy_object_is_the_one_its_descriptor_names() -> None:
    for name in simulation_policies():
        assert policy_for(name).name == name
    for name in descriptors.gate_policies():
        rule = policy_for(name)
        assert rule.stages(3)[-1] == rule.max_rounds(3)
    assert describe("sequential").stages == policy_for("sequential").stages(3)


# -- a fourth policy, from outside ----------------------------------------------------------------------

FOURTH = '''
"""A fourth policy for the test: the classic rule, except that `gate simulate` adopts every gate (so a
simulation shows it ran this object, not the classic one)."""

import numpy as np

from gatekit.policies.classic import ClassicPolicy
from gatekit.verdict import ADOPTED


class AlwaysAdopts(ClassicPolicy):
    name = "fourth"

    def simulate(self, off_log, on_log, thresholds, max_threshold_pct=0.0):
        return np.full(off_log.shape[0], ADOPTED), np.full(off_log.shape[0], off_log.shape[-1])


def policy(version=None):
    return AlwaysAdopts()
'''


@pytest.fixture
def fourth_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The policy "fourth": one module and one registration, nothing else."""
    package = tmp_path / "plugin"
    package.mkdir()
    (package / "fourth_policy.py").write_text(FOURTH, encoding="utf-8")
    monkeypatch.syspath_prepend(str(package))
    descriptors.register(PolicyDescriptor("fourth", "fourth_policy:policy", default_evidence="steal"))
    try:
        yield "fourth"
    finally:
        descriptors.unregister("fourth")


def test_a_registered_policy_is_a_gate_policy_everywhere(tmp_path: Path, fourth_policy: str) -> None:
    g = make_gate(tmp_path / "gate", gate={"policy": fourth_policy})
    config = load_gate(g.gate)
    assert config.gate.policy == "fourth" and config.rules.evidence == "steal"  # its descriptor's default
    assert load_gate(make_gate(tmp_path / "other").gate).with_overrides(policy="fourth").gate.policy == "fourth"

    done = gate_invoke("run", "off", "on", "--policy", "fourth", "--json", cwd=g.root)
    assert done.returncode in (0, 1), done.stderr
    assert json.loads(done.stdout)["gate"]["policy"] == "fourth"

    simulated = gate_invoke("simulate", "--policy", "fourth", "--policy", "classic", "--draws", "200", "--json",
                            cwd=g.root)
    assert simulated.returncode == 0, simulated.stderr
    rates = {r["policy"]: r["rates_pct"]["adopted"]["value"] for r in json.loads(simulated.stdout)["simulations"]}
    assert rates["fourth"] == 100.0 and rates["classic"] < 100.0  # its own object ran

    planned = gate_invoke("plan", "--cv", "1", "--effect", "-3", "--policy", "fourth", "--draws", "200", "--json",
                          cwd=g.root)
    assert planned.returncode == 0 and json.loads(planned.stdout)["n"] == 3, planned.stderr  # adopts at once


def test_an_unregistered_policy_is_refused_by_name(tmp_path: Path) -> None:
    g = make_gate(tmp_path / "gate", gate={"policy": "fourth"})
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 2 and "gate.policy: must be one of classic, sequential, duet" in done.stderr
    assert gate_invoke("simulate", "--policy", "fourth", cwd=g.root).returncode == 2
    with pytest.raises(ValueError, match="built-in"):
        descriptors.unregister("classic")
    with pytest.raises(ValueError, match="already registered"):
        descriptors.register(describe("classic"))


# -- policies through entry points, the built-ins as a plugin's -------------------------------------------

def test_the_builtin_policies_register_through_entry_points() -> None:
    entries = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][descriptors.POLICY_GROUP]
    assert entries == {d.name: f"gatekit.policy_descriptors:{attr}" for d in descriptors.BUILTIN
                       for attr, value in vars(descriptors).items() if value is d}
    assert list(descriptors.installed_policies().values()) == list(descriptors.BUILTIN)


def install_distribution(site: Path, module: str, source: str, entry_points: str) -> None:
    """A distribution as pip leaves it in site-packages: its module and a dist-info naming its entry points."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[{descriptors.POLICY_GROUP}]\n{entry_points}\n", encoding="utf-8")


FOURTH_DISTRIBUTION = FOURTH + '''

from gatekit.policy_descriptors import PolicyDescriptor

DESCRIPTOR = PolicyDescriptor("fourth", "fourth_plugin:policy", default_evidence="steal")
'''


def test_a_policy_distribution_is_found_by_its_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    # a module name of its own: the in-process fixture's fourth_policy may be imported already
    install_distribution(site, "fourth_plugin", FOURTH_DISTRIBUTION, "fourth = fourth_plugin:DESCRIPTOR")
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(site))
        descriptors.reload_policies()
        try:
            assert descriptors.gate_policies()[-1] == "fourth"  # after gatekit's own
            assert describe("fourth").default_evidence == "steal"
            assert type(policy_for("fourth")).__name__ == "AlwaysAdopts"
        finally:
            descriptors.reload_policies()
    # and in a process of its own, as a user who installed it runs gate
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "gatekit", "simulate", "--policy", "fourth", "--draws", "200",
                           "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    rates = {r["policy"]: r["rates_pct"]["adopted"]["value"] for r in json.loads(done.stdout)["simulations"]}
    assert rates == {"fourth": 100.0}


@pytest.mark.parametrize(("entry", "message"), [
    ("fifth = broken_policy:NOTHING", r"policy plugin 'fifth' \(broken_policy:NOTHING, from broken_policy\) cannot "
                                      r"be loaded: .*NOTHING"),
    ("fifth = broken_policy:NOT_A_DESCRIPTOR", r"'fifth' .* is a dict; it must name a .*PolicyDescriptor"),
    ("fifth = broken_policy:MISNAMED", r"'fifth' .* describes a policy named 'sixth'"),
    ("classic = broken_policy:CLASSIC", r"two installed distributions register a policy named 'classic'"),
])
def test_a_broken_policy_distribution_is_refused_when_it_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              entry: str, message: str) -> None:
    install_distribution(tmp_path, "broken_policy", "from gatekit.policy_descriptors import PolicyDescriptor\n"
                         "NOT_A_DESCRIPTOR = {}\n"
                         "MISNAMED = PolicyDescriptor('sixth', 'broken_policy:policy')\n"
                         "CLASSIC = PolicyDescriptor('classic', 'broken_policy:policy')\n", entry)
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(tmp_path))
        with pytest.raises(ConfigError, match=message):
            descriptors.installed_policies()

"""The README stays in step with the code: every gate key, placeholder, command and exit code."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import click
import pytest

from gatekit.cli import main
from gatekit.config import (ArmSpec, BackendSpec, DriverSpec, GateSpec, GuardSpec, RulesSpec, ThresholdSpec,
                            load_gate)
from gatekit.driver import load_backend, make_backend
from gatekit_drivers.command import PLACEHOLDERS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _fields(cls: type, skip: tuple[str, ...] = ()) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name not in skip]


@pytest.mark.parametrize("section, keys", [
    ("gate", _fields(GateSpec)),
    ("threshold", _fields(ThresholdSpec)),
    ("guards", _fields(GuardSpec)),
    ("rules", _fields(RulesSpec)),
    ("driver", _fields(DriverSpec, skip=("options",)) + ["argv", "metrics", "cwd", "env"]),
    ("arms", _fields(ArmSpec, skip=("name",))),
    ("backend", _fields(BackendSpec, skip=("options",))),
])
def test_every_gate_key_is_in_the_readme_example(section: str, keys: list[str]) -> None:
    example = re.search(r"### The gate file.*?```toml\n(.*?)```", README, re.S).group(1)  # type: ignore[union-attr]
    for key in keys:
        assert re.search(rf"^{key} =|^\[{section}\.{key}\]", example, re.M), f"{section}.{key} missing from README"


def test_readme_gate_example_is_a_valid_gate_file(tmp_path: Path) -> None:
    example = re.search(r"### The gate file.*?```toml\n(.*?)```", README, re.S).group(1)  # type: ignore[union-attr]
    tomllib.loads(example)
    (tmp_path / "gate.toml").write_text(example)
    config = load_gate(tmp_path / "gate.toml")
    assert config.gate.id == "resident-optimizer" and set(config.arms) == {"off", "on"}
    # every backend's options table is accepted by its own plugin
    make_backend(config.backend.name, config.backend.options, source=config.path)


@pytest.mark.parametrize("backend", ["cpu", "cuda", "metal"])
def test_every_bundled_backend_and_its_options_are_documented(backend: str) -> None:
    example = re.search(r"### The gate file.*?```toml\n(.*?)```", README, re.S).group(1)  # type: ignore[union-attr]
    table = re.search(rf"^\[backend\.{backend}\]\s*(?:#[^\n]*)?\n(.*?)(?=^\[|\Z)", example, re.M | re.S)
    assert table, f"[backend.{backend}] missing from the README gate file example"
    for key in load_backend(backend, source=Path("README.md")).OPTIONS:
        assert re.search(rf"^{key} =", table.group(1), re.M), f"backend.{backend}.{key} missing from README"
    assert f"| `{backend}` |" in README, f"backend {backend} missing from the README's Backends table"


def test_every_command_and_option_is_documented() -> None:
    ctx = click.Context(main)
    for name, command in main.commands.items():
        assert f"`gate {name}" in README, f"gate {name} missing from README"
        for param in command.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--") and opt != "--help":
                    assert opt in README, f"gate {name} {opt} missing from README"
    assert ctx  # the group itself builds


def test_placeholders_and_exit_codes_are_documented() -> None:
    for placeholder in PLACEHOLDERS:
        assert f"{{{placeholder}}}" in README
    for code in ("0 ran and decided", "1 a `--fail-on`", "2 usage or config error", "3 series invalid",
                 "130 interrupted"):
        assert code in README


STATISTICS = (ROOT / "docs" / "statistics.md").read_text()


def test_every_policy_order_and_sigma_ref_value_is_in_the_readme() -> None:
    from gatekit.config import ORDERS, SIGMA_REFS
    from gatekit.policies.descriptors import simulation_policies
    for value in (*ORDERS, *SIGMA_REFS, *simulation_policies()):
        assert value in README, f"{value} missing from README"


def test_every_diagnostic_and_sequential_key_is_documented() -> None:
    import math
    from gatekit.diagnostics import Diagnostics
    from gatekit.sequential import SequentialOutcome
    diagnostics = Diagnostics(*[math.nan] * len(dataclasses.fields(Diagnostics))).to_dict()
    for key in diagnostics:
        assert f"`{key}`" in README and key in STATISTICS, f"stats.{key} missing from README or docs/statistics.md"
    for key in SequentialOutcome("adopted", ()).info(1.0).to_dict():
        assert key in README and f"`{key}`" in STATISTICS, f"sequential.{key} missing from the docs"


def test_every_module_is_on_the_architecture_map() -> None:
    architecture = (ROOT / "docs" / "architecture.md").read_text()
    modules = sorted(p.relative_to(ROOT / "gatekit") for p in (ROOT / "gatekit").rglob("*.py")
                     if p.name != "__init__.py")
    for module in modules:  # listed as `name.py`, or `report/name.py` where the folder is not obvious
        assert f"`{module.name}`" in architecture or f"`{module.as_posix()}`" in architecture, \
            f"gatekit/{module} is missing from docs/architecture.md"


def test_statistics_doc_has_every_scenario_its_tables_and_sources() -> None:
    from gatekit.simulate import SUITE
    for scenario in SUITE:
        assert f"| {scenario.name} |" in STATISTICS, f"scenario {scenario.name!r} has no row in docs/statistics.md"
    for name in ("suite", "targets", "orders", "df", "timing"):
        block = re.search(rf"<!-- simulate:{name}:begin -->\n(.*?)<!-- simulate:{name}:end -->", STATISTICS, re.S)
        assert block and block.group(1).count("\n") >= 3, f"table {name} is empty: run `make statistics`"
    assert "| NO |" not in STATISTICS  # every target row says it is met
    for source in ("Kalibera & Jones", "ISMM 2013", "Criterion", "Pinpoint", "SAME", "UNKNOWN", "Daly",
                   "ICPE 2020", "Abedi & Brecht", "Samuelson"):
        assert source in STATISTICS, f"{source} not cited in docs/statistics.md"

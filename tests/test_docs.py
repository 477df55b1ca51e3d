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

"""Bad input: exit 2, one line naming the file and the key, and no trainer started."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from gatekit.config import load_gate
from gatekit.errors import ConfigError
from tests.conftest import gate_cli, gate_invoke, write_toml


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("gate: error: ")
    return lines[0]


@pytest.mark.parametrize("command", ["run", "check"])
def test_missing_arm_config_exits_2_before_any_trainer(gate_dir, command: str) -> None:
    g = gate_dir()
    (g.root / "on.toml").unlink()
    done = gate_invoke(command, "off", "on", cwd=g.root)
    assert done.returncode == 2
    if command == "check":
        assert "FAIL  arm config on" in done.stdout and "on.toml: file not found" in done.stdout
    else:
        line = one_error_line(done.stderr)
        assert "on.toml: file not found (arms.on.config)" in line
    assert g.order() == [] and g.series_dirs() == []


def test_malformed_gate_toml_names_file_and_line(gate_dir) -> None:
    g = gate_dir()
    g.gate.write_text(g.gate.read_text().replace('n = 3', 'n = = 3'))
    done = gate_cli("run", "off", "on", cwd=g.root)
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert str(g.gate) in line and "malformed TOML" in line and "line" in line
    assert g.order() == []


def test_unknown_key_is_named(gate_dir) -> None:
    g = gate_dir()
    g.gate.write_text(g.gate.read_text().replace("[rules]", "[rules]\nload_stats = \"max\""))
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert f"{g.gate}: rules.load_stats: unknown key" in line
    assert g.order() == []


def test_malformed_arm_config_fails_preflight(gate_dir) -> None:
    g = gate_dir()
    (g.root / "off.toml").write_text("flags = {optimizer = \n")
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert "off.toml: malformed TOML" in line
    assert g.order() == []


def test_unknown_arm_name_lists_the_known_ones(gate_dir) -> None:
    g = gate_dir()
    done = gate_invoke("run", "off", "of", cwd=g.root)
    assert done.returncode == 2
    assert "no arm named 'of' (the gate file defines: off, on)" in one_error_line(done.stderr)


def test_missing_gate_file(tmp_path: Path) -> None:
    done = gate_invoke("check", cwd=tmp_path)
    assert done.returncode == 2
    assert f"{tmp_path / 'gate.toml'}: file not found" in one_error_line(done.stderr)


def test_unknown_driver_lists_installed(gate_dir) -> None:
    g = gate_dir(driver={"name": "nope"})
    done = gate_invoke("check", cwd=g.root)
    assert done.returncode == 2
    assert "driver.name: no driver named 'nope' is installed (installed: command" in one_error_line(done.stderr)


@pytest.mark.parametrize("section, key, value, problem", [
    ("gate", "order", "zigzag", "must be one of abab, abba, random"),
    ("gate", "n", 0, "must be at least 2"),
    ("gate", "direction", "up", "must be one of lower, higher"),
    ("rules", "load_stat", "median", "must be one of max, mean"),
    ("rules", "sigma_ref", "pooled", "must be one of arm, leave_one_out"),
    ("rules", "sample_interval_s", -1.0, "must be positive"),
    ("threshold", "floor_pct", "1%", "must be a number"),
    ("rules", "require_window_samples", 1, "must be a boolean"),
    ("gate", "n", "3", "must be an integer"),
])
def test_bad_values_name_the_key(gate_dir, section: str, key: str, value: object, problem: str) -> None:
    g = gate_dir(**{section: {key: value}})
    with pytest.raises(ConfigError) as caught:
        load_gate(g.gate)
    assert f"{g.gate}: {section}.{key}: {problem}" in str(caught.value)


def test_unknown_placeholder_and_driver_key(gate_dir) -> None:
    g = gate_dir(driver={"argv": ["{python}", "fake_trainer.py", "{arm_cfg}"]})
    done = gate_invoke("check", cwd=g.root)
    assert done.returncode == 2 and "unknown placeholder '{arm_cfg}'" in one_error_line(done.stderr)
    g = gate_dir(driver={"argvs": ["x"]})
    done = gate_invoke("check", cwd=g.root)
    assert done.returncode == 2 and "driver.argvs: unknown key" in one_error_line(done.stderr)


def test_paths_resolve_relative_to_the_gate_file(gate_dir, tmp_path: Path) -> None:
    g = gate_dir()
    config = load_gate(g.gate)
    assert config.arms["off"].config == g.root / "off.toml"
    assert config.driver.hash == (g.root / "fake_trainer.py",)
    done = gate_cli("check", "--gate", str(g.gate), cwd=tmp_path)  # run from elsewhere
    assert done.returncode == 0, done.stdout + done.stderr


def test_analyze_names_a_missing_source_not_the_gate_file(tmp_path: Path) -> None:
    done = gate_invoke("analyze", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"gate: error: {tmp_path / 'nowhere'}: no such series directory or CSV file"


def test_run_defaults_to_the_gate_files_first_two_arms_like_check(fake_gate_dir) -> None:
    g = fake_gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0})
    done = gate_invoke("run", cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert g.order() == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]
    one = gate_invoke("run", "off", cwd=g.root)
    assert one.returncode == 2 and "name both arms or neither" in one.stderr


def test_a_misspelt_table_name_suggests_the_table(gate_dir) -> None:
    g = gate_dir()
    g.gate.write_text(g.gate.read_text().replace("[driver]", "[drivr]"))
    with pytest.raises(ConfigError) as caught:
        load_gate(g.gate)
    assert str(caught.value) == f"{g.gate}: drivr: unknown key (did you mean 'driver'?)"


def test_a_table_left_out_reads_as_its_defaults_and_integers_as_numbers(gate_dir) -> None:
    g = gate_dir(threshold={"sigma_k": 2, "floor_pct": 1})
    g.gate.write_text(g.gate.read_text().split("[rules]")[0] + "[driver]" + g.gate.read_text().split("[driver]")[1])
    config = load_gate(g.gate)
    assert isinstance(config.threshold.sigma_k, float) and config.threshold.floor_pct == 1.0
    # a gate file that leaves [rules] out gets the gate-file defaults, the 10 % noise limit among them
    # (load_limit: per core on this machine, see the test below)
    from gatekit.config import default_load_limit
    assert config.rules.max_threshold_pct == 10.0 and config.rules.load_limit == default_load_limit(os.cpu_count())


def test_one_run_per_arm_is_refused_before_anything_runs(gate_dir) -> None:
    g = gate_dir()
    done = gate_invoke("run", "off", "on", "--n", "1", cwd=g.root)
    assert done.returncode == 2 and g.order() == []  # a usage error: nothing ran
    assert done.stderr.strip() == (f"gate: error: {g.gate}: --n: must be at least 2: one run per arm has no σ_off, "
                                   "so neither the threshold nor the contamination rule can be computed and the gate "
                                   "could never decide, got 1")
    g.gate.write_text(g.gate.read_text().replace("n = 3", "n = 1"))
    with pytest.raises(ConfigError, match=r"gate.n: must be at least 2: one run per arm has no σ_off.*, got 1$"):
        load_gate(g.gate)
    # a bisect probe's gate file (gate.bisect_probe, written by gate bisect) may say n = 1; --n 1 stays refused
    g.gate.write_text(g.gate.read_text().replace("\nn = 1\n", "\nn = 1\nbisect_probe = true\n", 1))
    assert load_gate(g.gate).gate.n == 1
    with pytest.raises(ConfigError, match=r"--n: must be at least 2: one run per arm has no σ_off.*, got 1$"):
        load_gate(g.gate).with_overrides(n=1)


def test_load_limit_left_out_scales_with_the_core_count_and_a_stated_one_is_kept(gate_dir) -> None:
    from gatekit.config import LOAD_LIMIT_PER_CORE, default_load_limit
    assert (default_load_limit(2), default_load_limit(4), default_load_limit(64)) == (3.0, 6.0, 96.0)
    assert default_load_limit(None) == 6.0  # the OS does not say: the old fixed default
    g = gate_dir()
    gate = tomllib.loads(g.gate.read_text())
    gate["rules"].pop("load_limit", None)
    write_toml(g.gate, gate)
    assert load_gate(g.gate).rules.load_limit == LOAD_LIMIT_PER_CORE * (os.cpu_count() or 4)
    gate["rules"]["load_limit"] = 6.0
    write_toml(g.gate, gate)
    assert load_gate(g.gate).rules.load_limit == 6.0


def test_a_gate_file_of_one_arm_loads_and_gate_run_says_it_compares_two(fake_gate_dir) -> None:
    """One arm is a gate of `gate compare` and `gate bisect` (the arm at two commits); `gate run` and `gate check`
    need two and say so in one line, before anything runs."""
    g = fake_gate_dir()
    document = tomllib.loads(g.gate.read_text())
    del document["arms"]["on"]
    write_toml(g.gate, document)
    assert list(load_gate(g.gate).arms) == ["off"]
    for command in ("run", "check"):
        done = gate_invoke(command, cwd=g.root)
        assert done.returncode == 2, done.stderr
        line = one_error_line(done.stderr)
        assert f"{g.gate}: arms: defines one arm (off)" in line and "gate compare BASE [HEAD]" in line
    assert not (g.root / "order.log").exists()  # no trainer started
    del document["arms"]["off"]
    write_toml(g.gate, document)
    with pytest.raises(ConfigError, match=r"arms: needs at least one arm"):
        load_gate(g.gate)

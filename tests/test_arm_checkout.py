"""An arm that runs from a git checkout of its own (`[arms.X] checkout`, what `gate bisect` writes for each probe):
the gate file's relative paths resolve in the checkout, the command driver starts the arm there with {commit}
and {worktree} filled in, and the preflight's busy check does not wait for the other probes of the same bisect."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from gatekit.config import load_gate
from gatekit.contract import ENV_BISECT
from gatekit.preflight import arm_input, busy_processes
from gatekit_drivers.command import CommandDriver
from tests.conftest import write_toml


def _gate(tmp_path: Path) -> Path:
    gate = tmp_path / "probe" / "gate.toml"
    gate.parent.mkdir(parents=True)
    write_toml(gate, {
        "gate": {"id": "g"},
        "driver": {"argv": ["./bin/trainer", "--at", "{commit}", "{worktree}/data", "{arm_config}"],
                   "hash": ["bin/trainer"], "cwd": "work", "env": {"AT": "{commit}", "KEEP": "{run}"}},
        "arms": {"old": {"config": "configs/a.toml", "checkout": {"commit": "a" * 40, "worktree": "../wt/old"}},
                 "new": {"config": "configs/a.toml", "env": {"WHERE": "{worktree}"},
                         "checkout": {"commit": "b" * 40, "worktree": str(tmp_path / "wt" / "new"), "base": "sub"}}},
    })
    return gate


def test_relative_paths_resolve_in_each_arms_checkout(tmp_path: Path) -> None:
    config = load_gate(_gate(tmp_path))
    old, new = tmp_path / "wt" / "old", tmp_path / "wt" / "new"
    assert config.arms["old"].checkout.worktree == old  # relative to the gate file, like every path in it
    assert config.arms["old"].config == old / "configs" / "a.toml"
    assert config.arms["new"].config == new / "sub" / "configs" / "a.toml"
    assert config.driver.hash == (old / "bin" / "trainer", new / "sub" / "bin" / "trainer")


def test_the_command_driver_starts_each_arm_in_its_checkout(tmp_path: Path) -> None:
    config = load_gate(_gate(tmp_path))
    driver = CommandDriver.from_options(config.driver.options, source=config.path, base_dir=config.base_dir)
    old, new = (arm_input(config.arms[name]) for name in ("old", "new"))
    assert driver.cwd_for(old) == tmp_path / "wt" / "old" / "work"
    assert driver.cwd_for(new) == tmp_path / "wt" / "new" / "sub" / "work"
    assert driver.command_for(new)[2:] == ["b" * 40, f"{tmp_path / 'wt' / 'new'}/data",
                                           str(tmp_path / "wt" / "new" / "sub" / "configs" / "a.toml")]
    # env values get {commit} and {worktree}; another placeholder-like text is left as written
    assert driver.env_for(new) == {"AT": "b" * 40, "KEEP": "{run}", "WHERE": str(tmp_path / "wt" / "new")}
    (tmp_path / "wt" / "old" / "work").mkdir(parents=True)
    failed = [c.detail for c in driver.preflight([old, new]) if c.name == "driver cwd" and not c.ok]
    assert failed == [f"{tmp_path / 'wt' / 'new' / 'sub' / 'work'} is not a directory"]
    # an arm without a checkout: driver.cwd in the gate file's folder, {commit} empty
    plain = arm_input(config.arms["old"].__class__(name="plain", config=tmp_path / "a.toml"))
    assert driver.cwd_for(plain) == config.base_dir / "work"
    assert driver.command_for(plain)[2:4] == ["", f"{config.base_dir}/data"]


def test_the_busy_check_does_not_wait_for_the_same_bisects_probes(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"sibling-probe-{uuid.uuid4().hex}"  # its own: a second suite on the machine has another
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker],
                               env={ENV_BISECT: str(tmp_path / "bisect")})
    try:
        deadline = time.monotonic() + 10
        while not busy_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.05)  # the process shows its command line once it runs
        monkeypatch.setenv(ENV_BISECT, str(tmp_path / "another-bisect"))
        assert busy_processes(marker), "a trainer of another bisect is a busy machine"
        monkeypatch.setenv(ENV_BISECT, str(tmp_path / "bisect"))
        assert busy_processes(marker) == []
        monkeypatch.delenv(ENV_BISECT)
        assert busy_processes(marker)
    finally:
        sleeper.kill()
        sleeper.wait()

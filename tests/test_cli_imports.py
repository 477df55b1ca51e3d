"""`gate --help` and `gate check` start without the statistics and plotting stack (pandas, scipy, matplotlib),
and `gate --help` without the machinery of running (psutil, the drivers, the preflight, the engines) or
importlib.metadata (the policies' entry points and the version are read when a command or --version asks).

Importing the statistics costs 1-2 s per `gate` call, the running machinery tens of ms of a `gate --help`
that should answer in < 0.3 s (docs/benchmarks.md); cli.py imports them in the commands that need them. What a
process has imported is a property of the process, so this runs in a fresh one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import make_gate

HEAVY = ("pandas", "scipy", "matplotlib")
RUNNING = ("psutil", "gatekit.processes", "gatekit.driver", "gatekit.preflight", "gatekit.engines", "tarfile",
           "importlib.metadata")
PROBE = f"""
import json, sys
from gatekit.cli import main
codes, running = [], []
for args in (["--help"], ["check", "off", "on"]):
    try:
        main(args, prog_name="gate")
    except SystemExit as exit:
        codes.append(exit.code)
    if args == ["--help"]:
        running = sorted(name for name in {RUNNING!r} if name in sys.modules)
heavy = sorted(name for name in {HEAVY!r} if name in sys.modules)
print(json.dumps({{"codes": codes, "heavy": heavy, "running_at_help": running}}), file=sys.stderr)
"""


def test_help_imports_no_running_machinery_and_check_no_statistics_or_plotting(tmp_path: Path) -> None:
    g = make_gate(tmp_path / "gate")
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=g.root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Usage: gate" in done.stdout and "ok    gate file:" in done.stdout, done.stdout
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    assert seen == {"codes": [0, 0], "heavy": [], "running_at_help": []}, done.stderr


def test_option_choices_name_what_the_library_implements() -> None:
    # the choices live in gatekit.config and the policies' descriptors, so the command line can offer them
    # without importing the modules that implement them
    from gatekit import config
    from gatekit.exports import EXPORTERS
    from gatekit.policy_descriptors import gate_policies, simulation_policies
    from gatekit.policy_descriptors import policy_for
    from gatekit.simulate import Scenario, simulate

    assert tuple(EXPORTERS) == config.EXPORT_FORMATS
    assert all(policy_for(name).name == name for name in gate_policies())
    from gatekit.simulate import runs_at_once

    for name in simulation_policies():  # each runs in `gate simulate` (a duet v3 needs an even n ≥ 10)
        assert simulate(name, Scenario(n=10 if runs_at_once(name) else 4), draws=2).policy == name


def test_version_is_read_when_asked_for() -> None:
    # --version reads the installed distribution itself (cli.py no longer imports it with the package)
    from importlib.metadata import version

    from click.testing import CliRunner

    from gatekit.cli import main
    from gatekit.distribution import DISTRIBUTION

    done = CliRunner().invoke(main, ["--version"], prog_name="gate")
    assert (done.exit_code, done.output) == (0, f"gate, version {version(DISTRIBUTION)}\n")

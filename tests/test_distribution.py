"""The distribution's name and every install hint come from one place (`gatekit.distribution`) and are right.

PyPI's `gatekit` is another project, so a hint that says `pip install gatekit` or `'gatekit[sign]'` installs
someone else's code; these tests keep such a hint from coming back in the code or the docs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

import gatekit
from gatekit.distribution import DISTRIBUTION, EXTRAS, install_hint
from gatekit.provenance import software_versions

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CODE = sorted(p for folder in ("gatekit", "drivers", "benchmarks") for p in (ROOT / folder).rglob("*")
              if p.suffix in {".py", ".sh"} and "__pycache__" not in p.parts)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# `pip install … gatekit` or `… 'gatekit[x]'`: PyPI's project of that name, never this one
OTHER_PROJECT = re.compile(r"pip install\b[^\n`]*?(?<![\w./-])'?gatekit(?![\w-])")
# the README's warning names that command on purpose
WARNING = "**`pip install gatekit` installs someone else's project**"


def test_the_distribution_and_its_extras_are_the_ones_pyproject_declares() -> None:
    assert PYPROJECT["project"]["name"] == DISTRIBUTION
    assert set(PYPROJECT["project"]["optional-dependencies"]) == set(EXTRAS)


def test_the_version_is_the_installed_distributions() -> None:
    assert gatekit.__version__ == version(DISTRIBUTION) == PYPROJECT["project"]["version"]
    assert software_versions()["gatekit"] == gatekit.__version__  # provenance reads the same distribution


def test_a_hint_names_this_distribution_and_a_real_extra() -> None:
    assert install_hint("sign") == f"pip install '{DISTRIBUTION}[sign]'"
    with pytest.raises(ValueError, match="not an extra"):
        install_hint("signing")


def test_no_install_hint_is_written_out_in_the_code() -> None:
    """Code builds its hints with install_hint; a literal `pip install` elsewhere is a second home."""
    literal = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
               for path in CODE if path.name != "distribution.py"
               for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
               if re.search(r"pip install\b[^\n]*\[", line) and "install_hint" not in line]
    assert not literal, "build these hints with gatekit.distribution.install_hint:\n" + "\n".join(literal)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_doc_sends_a_reader_to_the_other_projects_package(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    if doc.name == "README.md":
        assert WARNING in text, "the README's install section warns about PyPI's gatekit"
        text = text.replace(WARNING, "")
    wrong = [match.group(0) for match in OTHER_PROJECT.finditer(text)]
    assert not wrong, f"{doc.name}: these install PyPI's 'gatekit' (an MCP gateway): {wrong}"
    for extra in re.findall(rf"{re.escape(DISTRIBUTION)}\[(\w+)\]", text):
        assert extra in EXTRAS, f"{doc.name} names an extra {extra!r} that pyproject.toml does not declare"


def test_the_check_itself_finds_the_other_projects_name() -> None:
    found = [bool(OTHER_PROJECT.search(text)) for text in (
        "pip install gatekit", "pip install 'gatekit[sign]'", "`pip install -U gatekit`",
        f"pip install '{DISTRIBUTION}[sign]'", "pip install -e '.[cuda]'", "pip install dist/gatekit_ab-0.1.whl")]
    assert found == [True, True, True, False, False, False]


def test_the_torch_trainer_without_torch_says_how_to_install_it() -> None:
    script = ("import runpy, sys; sys.modules['torch'] = None; "
              "runpy.run_module('gatekit_drivers.torch_trainer', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and install_hint("torch") in done.stderr, done.stderr
    assert "Traceback" not in done.stderr

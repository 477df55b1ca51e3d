"""The wheel carries everything an install outside this checkout needs: every module and data file of
gatekit and gatekit_drivers, the `gate` script, the plugin entry points and the extras.

The wheel is built from a copy of the sources (so the checkout gets no build/ or egg-info) with the venv's
own setuptools and no network, ~5 s; `make dist` runs these checks on the wheel it wrote ($GATEKIT_WHEEL).
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from gatekit.distribution import DISTRIBUTION, EXTRAS

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# import package -> source folder, as pyproject maps them
SOURCE_FOLDERS = {"gatekit": ROOT / "gatekit", "gatekit_drivers": ROOT / "drivers"}
BUILD_INPUTS = ("pyproject.toml", "README.md", "gatekit", "drivers")


def _source_files() -> set[str]:
    """Every file the wheel must hold, as its path inside the wheel."""
    return {f"{package}/{path.relative_to(folder).as_posix()}"
            for package, folder in SOURCE_FOLDERS.items() for path in folder.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}


def test_pyproject_lists_every_source_package() -> None:
    """A package folder missing from [tool.setuptools] packages would be left out of the wheel."""
    found = {".".join([package, *init.parent.relative_to(folder).parts])
             for package, folder in SOURCE_FOLDERS.items() for init in folder.rglob("__init__.py")}
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("GATEKIT_WHEEL")
    if given:
        return Path(given)
    source = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(origin, source / name)
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
                           str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (built,) = out.glob("*.whl")
    return built


def _dist_info(archive: zipfile.ZipFile, name: str) -> str:
    (path,) = [n for n in archive.namelist() if n.endswith(f".dist-info/{name}") and n.count("/") == 1]
    return archive.read(path).decode("utf-8")


def test_the_wheel_holds_every_source_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    missing = _source_files() - names
    assert not missing, f"{wheel.name} lacks {sorted(missing)}"
    top_level = {name.split("/")[0] for name in names}
    assert {t for t in top_level if not t.endswith(".dist-info")} == set(SOURCE_FOLDERS)  # nothing else installed


def test_the_wheel_declares_the_script_the_plugins_and_the_extras(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        metadata = Parser().parsestr(_dist_info(archive, "METADATA"))
        entry_points = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        entry_points.optionxform = str  # type: ignore[assignment,method-assign]  (names are case-sensitive)
        entry_points.read_string(_dist_info(archive, "entry_points.txt"))
    assert metadata["Name"] == DISTRIBUTION and metadata["Version"] == PYPROJECT["project"]["version"]
    assert set(metadata.get_all("Provides-Extra") or ()) == set(EXTRAS)
    assert dict(entry_points["console_scripts"]) == PYPROJECT["project"]["scripts"]
    for group, entries in PYPROJECT["project"]["entry-points"].items():
        assert dict(entry_points[group]) == entries, group

"""Imports only go downward (DESIGN "Architecture", STYLE "Layout that shows the architecture").

Every module of gatekit/ and drivers/ is parsed with `ast` — nothing is imported, so a lazy import inside a
function counts as much as one at the top — and each rule lists the file, line and import that break it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# source folder -> import package (pyproject maps drivers/ to gatekit_drivers)
PACKAGES = {ROOT / "gatekit": "gatekit", ROOT / "drivers": "gatekit_drivers"}

# Plugins see the plugin API, the records and the errors; nothing else of the core.
DRIVER_MAY_IMPORT = {"gatekit.driver", "gatekit.records", "gatekit.errors"}
# The bottom of the house: the disk writer and the pure records, errors and statistics depend on nothing above.
FOUNDATION = {"gatekit.errors", "gatekit.records", "gatekit.signals", "gatekit.contract"}
FOUNDATION_MODULES = ("storage", "signals", "contract", "records", "errors", "stats")


@dataclass(frozen=True)
class Import:
    """One imported module (and, for `from m import name`, the name) at a line of a source file."""

    path: Path
    line: int
    module: str  # absolute, e.g. "gatekit.processes"
    name: str | None  # the imported name of a `from` import, None for `import m`
    text: str  # the statement as written

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT) if ROOT in self.path.parents else self.path
        return f"{where}:{self.line}: {self.text}" + (f"  [{self.name}]" if self.name else "")


def module_name(path: Path) -> str:
    for folder, package in PACKAGES.items():
        if folder in path.parents:
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise AssertionError(f"{path} lies in no package")


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _source_file(module: str) -> Path | None:
    """The file of a gatekit or gatekit_drivers module, if it is one."""
    for folder, package in PACKAGES.items():
        if module == package or module.startswith(package + "."):
            base = folder.joinpath(*module.split(".")[1:])
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    return candidate
    return None


def imports_of(path: Path, here: str | None = None) -> list[Import]:
    """Every gatekit / gatekit_drivers import of one source file (module `here`), relative ones resolved."""
    source = path.read_text(encoding="utf-8")
    here = here or module_name(path)
    package = here if _is_package(path) else here.rpartition(".")[0]
    found = []
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        text = " ".join(line.strip() for line in lines[node.lineno - 1:node.end_lineno])
        if isinstance(node, ast.Import):
            found += [Import(path, node.lineno, alias.name, None, text) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            for alias in node.names:
                # `from gatekit import stats` imports the module gatekit.stats; `from gatekit import x` a name
                submodule = f"{origin}.{alias.name}"
                if _source_file(submodule) is not None:
                    found.append(Import(path, node.lineno, submodule, None, text))
                else:
                    found.append(Import(path, node.lineno, origin, alias.name, text))
    return [i for i in found if i.module.split(".")[0] in {"gatekit", "gatekit_drivers"}]


def _sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


ALL_SOURCES = _sources(ROOT / "gatekit") + _sources(ROOT / "drivers")


def _broken(rule_holds, paths: list[Path]) -> list[str]:  # type: ignore[no-untyped-def]
    return [str(i) for path in paths for i in imports_of(path) if not rule_holds(i)]


def test_the_sources_are_found() -> None:
    names = {module_name(p) for p in ALL_SOURCES}
    assert {"gatekit.cli", "gatekit.storage", "gatekit_drivers.command", "gatekit_drivers.backends.cpu"} <= names
    for module in FOUNDATION_MODULES:
        assert (ROOT / "gatekit" / f"{module}.py").is_file(), module


def test_drivers_import_only_the_plugin_api_records_and_errors() -> None:
    def allowed(i: Import) -> bool:
        return i.module in DRIVER_MAY_IMPORT or i.module.split(".")[0] == "gatekit_drivers"

    broken = _broken(allowed, _sources(ROOT / "drivers"))
    assert not broken, ("drivers/ may import from gatekit only " + ", ".join(sorted(DRIVER_MAY_IMPORT))
                        + " (gatekit.driver re-exports what a plugin needs):\n" + "\n".join(broken))


@pytest.mark.parametrize("module", FOUNDATION_MODULES)
def test_the_foundation_imports_nothing_above_it(module: str) -> None:
    path = ROOT / "gatekit" / f"{module}.py"
    broken = _broken(lambda i: i.module in FOUNDATION - {f"gatekit.{module}"}, [path])
    assert not broken, (f"gatekit/{module}.py may import from gatekit only "
                        + ", ".join(sorted(FOUNDATION)) + ":\n" + "\n".join(broken))


def test_nothing_imports_the_cli() -> None:
    # `python -m gatekit` (gatekit/__main__.py) is the edge too: it runs the cli's click group
    sources = [p for p in ALL_SOURCES if module_name(p) not in ("gatekit.cli", "gatekit.__main__")]
    broken = _broken(lambda i: i.module != "gatekit.cli" and not i.module.startswith("gatekit.cli."), sources)
    assert not broken, "the CLI is the edge; nothing imports it:\n" + "\n".join(broken)


def test_no_private_name_is_imported_from_another_module() -> None:
    def public(i: Import) -> bool:
        if i.name is None or not i.name.startswith("_") or (i.name.startswith("__") and i.name.endswith("__")):
            return True  # a module, a public name, or a dunder such as __version__
        return i.module == module_name(i.path)

    broken = _broken(public, ALL_SOURCES)
    assert not broken, ("a name starting with '_' is private to its module; make it public (and documented) "
                        "or move the code that needs it:\n" + "\n".join(broken))


def test_the_checker_sees_lazy_relative_and_submodule_imports(tmp_path: Path) -> None:
    """The rules are only as good as the parser: lazy, relative and `from gatekit import m` imports count."""
    path = tmp_path / "plugin.py"
    path.write_text("import json\n"
                    "from gatekit import stats, __version__\n"
                    "from .backends import cpu\n"
                    "from ._private import helper\n"
                    "def later():\n"
                    "    import gatekit.processes\n"
                    "    from gatekit.series import _now\n", encoding="utf-8")
    found = {(i.module, i.name, i.line) for i in imports_of(path, "gatekit_drivers.plugin")}
    assert found == {("gatekit.stats", None, 2), ("gatekit", "__version__", 2),
                     ("gatekit_drivers.backends.cpu", None, 3), ("gatekit_drivers._private", "helper", 4),
                     ("gatekit.processes", None, 6), ("gatekit.series", "_now", 7)}


def import_graph(paths: list[Path]) -> dict[str, dict[str, Import]]:
    """{module: {module it imports: the first import statement that does}} over gatekit and gatekit_drivers.

    Importing `a.b.c` runs the `__init__` of `a` and `a.b` first, so a module depends on the packages above
    what it imports, too (never on its own package: Python has already started that one)."""
    graph: dict[str, dict[str, Import]] = {module_name(p): {} for p in paths}
    for path in paths:
        here = module_name(path)
        for i in imports_of(path, here):
            parts = i.module.split(".")
            for target in (".".join(parts[:k]) for k in range(len(parts), 0, -1)):
                if target != here and not here.startswith(target + ".") and target in graph:
                    graph[here].setdefault(target, i)
    return graph


def import_cycles(graph: dict[str, dict[str, Import]]) -> list[list[Import]]:
    """One cycle (the imports along it) for every group of modules that import each other, found by
    Tarjan's strongly connected components; a module that imports itself is a cycle of one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(module: str) -> None:  # the graph has ~100 nodes: recursion depth is no concern
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1 or module in graph[module]:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_within(graph, set(group), group[0]) for group in sorted(groups)]


def _cycle_within(graph: dict[str, dict[str, Import]], group: set[str], start: str) -> list[Import]:
    """The shortest path of imports from `start` back to itself inside one strongly connected group."""
    paths: dict[str, list[Import]] = {start: []}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target, statement in sorted(graph[module].items()):
                if target == start:
                    return paths[module] + [statement]
                if target in group and target not in paths:
                    paths[target] = paths[module] + [statement]
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start}: no cycle in its group")  # Tarjan's groups are strongly connected


def test_no_import_cycle() -> None:
    cycles = import_cycles(import_graph(ALL_SOURCES))
    shown = ["\n".join(f"  {statement}" for statement in cycle) for cycle in cycles]
    assert not cycles, ("modules import each other; move what both need below both (a lazy import inside a "
                        "function is still a cycle):\n" + "\n\n".join(shown))


def _write_tree(root: Path, files: dict[str, str]) -> None:
    """A small source tree for the checks' own tests: each path's text, folders made as needed."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")


def test_the_cycle_check_finds_lazy_and_package_cycles(tmp_path: Path) -> None:
    """The check is only as good as its graph: a lazy import and a package's `__init__` close a cycle too."""
    files = {"gatekit/a.py": "from gatekit.pkg.b import thing\n",
             "gatekit/pkg/__init__.py": "",
             "gatekit/pkg/b.py": "def thing():\n    from gatekit import c\n",
             "gatekit/c.py": "import gatekit.a\n",
             "gatekit/d.py": "from gatekit.pkg import b\n",
             "gatekit/e.py": "import gatekit.d\n"}
    _write_tree(tmp_path, files)
    packages = {tmp_path / "gatekit": "gatekit"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(f"{__name__}.PACKAGES", packages)
        graph = import_graph(_sources(tmp_path / "gatekit"))
        cycles = import_cycles(graph)
    assert graph["gatekit.d"].keys() == {"gatekit.pkg.b", "gatekit.pkg"}
    assert [[(i.path.name, i.line, i.module) for i in cycle] for cycle in cycles] == [
        [("a.py", 1, "gatekit.pkg.b"), ("b.py", 2, "gatekit.c"), ("c.py", 1, "gatekit.a")]]


def folder_of(module: str) -> str:
    """The node a module is in the folder graph: a subpackage of gatekit (`gatekit.report`) stands for every
    module in it; a module directly in gatekit/ (`gatekit.config`), or a plugin module, stands for itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "gatekit" else module


def folder_graph(paths: list[Path]) -> dict[str, dict[str, Import]]:
    """{folder: {folder it imports: the first import statement that does}}. The package `gatekit` itself is
    left out: its `__init__` imports nothing eagerly, and every module is inside it."""
    graph: dict[str, dict[str, Import]] = {}
    for module, targets in import_graph(paths).items():
        here = folder_of(module)
        if here == "gatekit":
            continue
        edges = graph.setdefault(here, {})
        for target, statement in targets.items():
            there = folder_of(target)
            if there not in (here, "gatekit"):
                edges.setdefault(there, statement)
    for edges in list(graph.values()):
        for there in edges:
            graph.setdefault(there, {})
    return graph


def test_no_folder_import_cycle() -> None:
    """Files may be free of cycles while their folders tangle (series/ -> report/ -> bisect/ -> series/ once
    did): a helper that both need lives in the lowest layer that needs it."""
    cycles = import_cycles(folder_graph(ALL_SOURCES))
    shown = ["\n".join(f"  {statement}" for statement in cycle) for cycle in cycles]
    assert not cycles, ("folders import each other (a subpackage counts as one node; each module of gatekit/ "
                        "as its own); move what both need below both:\n" + "\n\n".join(shown))


def test_the_folder_check_finds_a_cycle_no_file_has(tmp_path: Path) -> None:
    files = {"gatekit/pkg/__init__.py": "",
             "gatekit/pkg/low.py": "",
             "gatekit/pkg/high.py": "from gatekit.mid import thing\n",
             "gatekit/mid.py": "from gatekit.pkg.low import x\n",
             "gatekit/top.py": "import gatekit.mid\n"}
    _write_tree(tmp_path, files)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(f"{__name__}.PACKAGES", {tmp_path / "gatekit": "gatekit"})
        sources = _sources(tmp_path / "gatekit")
        assert import_cycles(import_graph(sources)) == []
        cycles = import_cycles(folder_graph(sources))
    assert [[(i.path.name, i.module) for i in cycle] for cycle in cycles] == [
        [("mid.py", "gatekit.pkg.low"), ("high.py", "gatekit.mid")]]


# The file names of a series folder (DESIGN "Series directory"); their one home is storage.SeriesLayout.
SERIES_FOLDER_NAMES = ("predecision.toml", "journal.jsonl", "DONE", ".gatekit.lock", "record.json", "samples.csv",
                       "stdout.log", "stderr.log", ".cut-")


def spelled_series_names(path: Path) -> list[tuple[str, str]]:
    """(`file:line: 'text'`, the name) of every string in a module, docstrings aside, that spells a series
    folder's file name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    spelled = "|".join(re.escape(name) for name in SERIES_FOLDER_NAMES)
    where = path.relative_to(ROOT) if ROOT in path.parents else path
    return [(f"{where}:{node.lineno}: {node.value!r}", match.group(1))
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            for match in re.finditer(rf"(?<![\w.])({spelled})(?!\w)", node.value)]


def test_series_folder_names_have_one_home() -> None:
    layout = ROOT / "gatekit" / "storage.py"
    assert {name for _, name in spelled_series_names(layout)} == set(SERIES_FOLDER_NAMES)
    found = [line for path in ALL_SOURCES if path != layout for line, _ in spelled_series_names(path)]
    assert not found, ("a series folder's file names live in storage.SeriesLayout (and RunFolder); use them:\n"
                       + "\n".join(found))


def test_the_name_check_sees_f_strings_and_skips_docstrings(tmp_path: Path) -> None:
    path = tmp_path / "module.py"
    path.write_text('"""Writes journal.jsonl."""\n'
                    'def done(folder):\n'
                    '    """Reads DONE."""\n'
                    '    return folder / "DONE", f"{folder}/stderr.log", "DONE_FILE", "undone", "x.jsonl"\n',
                    encoding="utf-8")
    assert [(line.split(": ", 1)[1], name) for line, name in spelled_series_names(path)] == [
        ("'DONE'", "DONE"), ("'/stderr.log'", "stderr.log")]

"""The docs stay in step with the code: every gate key in docs/gate-file.md, every command in the README's one-line
table, placeholders, exit codes, policies and record keys on the docs pages that own them; docs/cli.md generated
from the command tree; docs/architecture.md naming what exists."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import tomllib
import typing
from pathlib import Path

import click
import pytest

from gatekit.cli import main
from gatekit.config import GateConfig, load_gate
from gatekit.driver import load_backend, make_backend
from gatekit.records import Record
from gatekit_drivers.command import PLACEHOLDERS
from tests.test_layering import ALL_SOURCES, imports_of, module_name

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
GATE_FILE = (DOCS / "gate-file.md").read_text()
# the command driver's own [driver] keys (its plugin checks them, so they are no field of DriverSpec)
COMMAND_DRIVER_KEYS = ["argv", "metrics", "cwd", "env"]


def _table_record(hint: object) -> type[Record]:
    """The record a gate-file table decodes into: GuardSpec of tuple[GuardSpec, ...], ArmSpec of
    Mapping[str, ArmSpec], DuetSpec of DuetSpec | None."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and issubclass(candidate, Record):
            return candidate
    inner = typing.get_args(hint)
    if typing.get_origin(hint) is not None and inner:
        return _table_record(inner[-1])
    raise AssertionError(f"no record in {hint!r}")


def _schema() -> list[tuple[str, list[str]]]:
    """Every table of the gate file with its keys, read from config.py's records (the schema the codec decodes):
    internal fields and a plugin's rest (`options`) are no keys of the file."""
    hints = typing.get_type_hints(GateConfig)
    tables = []
    for table in dataclasses.fields(GateConfig):
        if table.metadata.get("internal"):
            continue
        record = _table_record(hints[table.name])
        keys = [f.name for f in dataclasses.fields(record)
                if not f.metadata.get("internal") and not f.metadata.get("rest")]
        tables.append((table.name, keys + (COMMAND_DRIVER_KEYS if table.name == "driver" else [])))
    return tables


def _gate_file_reference() -> str:
    """The TOML blocks of docs/gate-file.md's "The gate file" section: every key, with its default."""
    section = GATE_FILE.split("\n## The gate file\n", 1)[1].split("\n## ", 1)[0]
    return "\n".join(re.findall(r"```toml\n(.*?)```", section, re.S))


def _gate_file_example() -> str:
    """The reference's first block: a whole gate file."""
    section = GATE_FILE.split("\n## The gate file\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```toml\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_the_schema_walk_sees_every_table() -> None:
    tables = dict(_schema())
    assert set(tables) == {"gate", "threshold", "guards", "rules", "driver", "arms", "backend", "duet", "commits",
                           "time_to_target"}
    assert "max_drop" in tables["guards"] and "slots" in tables["duet"] and "name" not in tables["arms"]
    assert "options" not in tables["driver"] and "argv" in tables["driver"]


@pytest.mark.parametrize("section, keys", _schema(), ids=[name for name, _ in _schema()])
def test_every_gate_key_is_in_the_gate_file_reference(section: str, keys: list[str]) -> None:
    reference = _gate_file_reference()
    for key in keys:
        assert re.search(rf"^{key} =|^\[{section}\.{key}\]", reference, re.M), \
            f"{section}.{key} missing from docs/gate-file.md"


def test_the_gate_file_reference_example_is_a_valid_gate_file(tmp_path: Path) -> None:
    example = _gate_file_example()
    tomllib.loads(example)
    (tmp_path / "gate.toml").write_text(example)
    config = load_gate(tmp_path / "gate.toml")
    assert config.gate.id == "resident-optimizer" and set(config.arms) == {"off", "on"}
    # every backend's options table is accepted by its own plugin
    make_backend(config.backend.name, config.backend.options, source=config.path)


@pytest.mark.parametrize("backend", ["cpu", "cuda", "metal"])
def test_every_bundled_backend_and_its_options_are_documented(backend: str) -> None:
    example = _gate_file_example()
    table = re.search(rf"^\[backend\.{backend}\]\s*(?:#[^\n]*)?\n(.*?)(?=^\[|\Z)", example, re.M | re.S)
    assert table, f"[backend.{backend}] missing from the docs/gate-file.md example"
    for key in load_backend(backend, source=Path("docs/gate-file.md")).OPTIONS:
        assert re.search(rf"^{key} =", table.group(1), re.M), f"backend.{backend}.{key} missing from docs/gate-file.md"
    assert f"| `{backend}` |" in (DOCS / "backends.md").read_text(), \
        f"backend {backend} missing from docs/backends.md's table"


def _script(name: str):  # type: ignore[no-untyped-def]
    """benchmarks/NAME.py, a generator of a docs page (a script, not a package: loaded by path)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


CLI_REFERENCE = _script("cli_reference")
COMMANDS = CLI_REFERENCE.commands(main, "gate")  # every command and subcommand, `gate import …` included


def test_the_cli_reference_is_generated_from_the_code() -> None:
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert written == CLI_REFERENCE.reference(main), "docs/cli.md is stale: run `make docs` and commit it"


def test_the_cli_reference_has_every_command_option_choice_and_default() -> None:
    text = CLI_REFERENCE.reference(main)
    assert {"gate run", "gate import hyperfine", "gate import gobench"} <= {path for path, _ in COMMANDS}
    for path, command in COMMANDS:
        section = text.split(f"\n## {path}\n", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            row = next((line for line in section.splitlines() if line.startswith(f"| `{param.opts[0]}`")), None)
            assert row, f"{path} {param.opts[0]} missing from docs/cli.md"
            assert " ".join((param.help or "").split())[:40].replace("<", "&lt;") in row, row
            for kind in (param.type.types if isinstance(param.type, click.Tuple) else [param.type]):
                for choice in getattr(kind, "choices", ()):
                    assert f"`{choice}`" in row, f"{path} {param.opts[0]}: choice {choice} missing from docs/cli.md"
            if param.show_default and not param.is_flag:
                assert f"`{param.default}`" in row, f"{path} {param.opts[0]}: default missing from docs/cli.md"


def test_the_readme_links_every_command_to_the_reference() -> None:
    commands = README.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    in_depth = (DOCS / "commands.md").read_text()
    for path, command in COMMANDS:
        if isinstance(command, click.Group):
            continue  # its subcommands have the rows
        assert f"](docs/cli.md#{CLI_REFERENCE.anchor(path)})" in commands, \
            f"{path} has no row linking to docs/cli.md in the README's Commands section"
        assert f"](cli.md#{CLI_REFERENCE.anchor(path)})" in in_depth, f"{path} has no row in docs/commands.md"
    for row in (line for line in commands.splitlines() if line.startswith("| [`gate")):
        what = row.split(") | ", 1)[1]
        assert len(what) <= 130, f"a paragraph, not a line (its depth goes to docs/commands.md): {row}"


def _stale_option_values(text: str) -> list[str]:
    """Option values quoted in prose (`--policy sequential`, `--engine local|ray`) that the option does not
    take: each must be one of its choices, and a list of them all the choices of a command's option."""
    offered: dict[str, list[set[str]]] = {}
    for _, command in COMMANDS:
        for param in command.params:
            kinds = param.type.types if isinstance(param.type, click.Tuple) else [param.type]
            for kind in kinds:
                if isinstance(kind, click.Choice):
                    for opt in getattr(param, "opts", []):
                        offered.setdefault(opt, []).append(set(kind.choices))
    stale = []
    for span in re.findall(r"`([^`\n]+)`", text):
        for opt, listed in re.findall(r"(--[a-z][a-z-]*)[ =]([a-z][a-z0-9-]*(?:\\?\|[a-z][a-z0-9-]*)*)", span):
            values = set(re.split(r"\\?\|", listed))
            if opt in offered and not (values <= set().union(*offered[opt])
                                       and ("|" not in listed or values in offered[opt])):
                stale.append(f"{opt} {listed}")
    return stale


def test_option_values_quoted_in_the_docs_are_ones_the_options_take() -> None:
    assert _stale_option_values("`gate run [--policy classic\\|sequential]` and `--engine lokal`") == [
        "--policy classic\\|sequential", "--engine lokal"]  # the check can fail
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if doc.name != "cli.md":  # generated from the options themselves
            assert not _stale_option_values(doc.read_text()), f"{doc.name}: {_stale_option_values(doc.read_text())}"


def test_placeholders_and_exit_codes_are_documented() -> None:
    for placeholder in PLACEHOLDERS:
        assert f"{{{placeholder}}}" in GATE_FILE, f"{{{placeholder}}} missing from docs/gate-file.md"
    commands = (DOCS / "commands.md").read_text()
    for code in ("0 ran and decided", "1 a `--fail-on`", "2 usage or config error", "3 series invalid",
                 "130 interrupted"):
        assert code in commands, f"exit code {code!r} missing from docs/commands.md"


STATISTICS = (ROOT / "docs" / "statistics.md").read_text()


def test_every_policy_order_and_sigma_ref_value_is_documented() -> None:
    from gatekit.config import ORDERS, SIGMA_REFS
    from gatekit.policy_descriptors import simulation_policies
    for value in (*ORDERS, *SIGMA_REFS):
        assert value in GATE_FILE, f"{value} missing from docs/gate-file.md"
    policies = (DOCS / "policies.md").read_text()
    for value in simulation_policies():
        assert value in policies, f"policy {value} missing from docs/policies.md"


def test_every_diagnostic_and_sequential_key_is_documented() -> None:
    import math
    from gatekit.diagnostics import Diagnostics
    from gatekit.policies.sequential import SequentialOutcome
    diagnostics = Diagnostics(*[math.nan] * len(dataclasses.fields(Diagnostics))).to_dict()
    gate_run = (DOCS / "gate-run.md").read_text()  # the finding's sections, its diagnostics among them
    for key in diagnostics:
        assert f"`{key}`" in gate_run and key in STATISTICS, \
            f"stats.{key} missing from docs/gate-run.md or docs/statistics.md"
    for key in SequentialOutcome("adopted", ()).info(1.0).to_dict():
        assert key in gate_run and f"`{key}`" in STATISTICS, f"sequential.{key} missing from the docs"


ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
GATEKIT_MODULES = sorted(p.relative_to(ROOT / "gatekit") for p in (ROOT / "gatekit").rglob("*.py")
                         if p.name != "__init__.py" and "__pycache__" not in p.parts)


def test_every_module_is_on_the_architecture_map() -> None:
    for module in GATEKIT_MODULES:  # listed as `name.py`, or `report/name.py` where the folder is not obvious
        assert f"`{module.name}`" in ARCHITECTURE or f"`{module.as_posix()}`" in ARCHITECTURE, \
            f"gatekit/{module} is missing from docs/architecture.md"


def test_every_module_file_and_folder_the_architecture_map_names_exists() -> None:
    names = {m.name for m in GATEKIT_MODULES} | {m.as_posix() for m in GATEKIT_MODULES}
    for token in set(re.findall(r"`([\w./-]+\.py|[\w./-]+/)`", ARCHITECTURE)):
        assert (token in names or (ROOT / "gatekit" / token).is_dir() or (ROOT / token).exists()), \
            f"docs/architecture.md names `{token}`, which is no module or folder of gatekit"


def test_every_gate_policy_object_is_on_the_architecture_map() -> None:
    from gatekit.policy_descriptors import gate_policies, policy_for

    for name in gate_policies():
        assert f"`{type(policy_for(name)).__name__}`" in ARCHITECTURE, f"policy {name}'s object is not on the map"


def architecture_layers(text: str) -> dict[str, tuple[int, str]]:
    """{module: (its layer's index, the layer)} from the module map's rows. A row names its modules in
    backticks: `report/page.py` (a folder, which the names after it in the row are in where such a file
    exists), `stats.py`, or `importers/` (every module in that folder); a row with no layer is in the one
    above it."""
    placed: dict[str, tuple[int, str]] = {}
    layers: list[str] = []
    for line in text.split("\n## One gate")[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("| ") or cells[0] in ("layer", "---") or len(cells) < 3:
            continue
        if cells[0]:
            layers.append(cells[0])
        folder, row = "", set()
        for token in re.findall(r"`([\w./-]+\.py|[\w./-]+/)`", cells[1]):
            if token.endswith("/"):
                folder, files = token, sorted((ROOT / "gatekit" / token).glob("*.py"))
            else:
                folder = token.rpartition("/")[0] + "/" if "/" in token else folder
                inside = ROOT / "gatekit" / folder / token.rpartition("/")[2]
                files = [inside if folder and inside.is_file() else ROOT / "gatekit" / token]
            for path in files:
                module = module_name(path)
                if path.name != "__init__.py" and module not in row:  # a row may name its folder's modules again
                    assert module not in placed, f"docs/architecture.md places {module} in two rows"
                    placed[module] = (len(layers) - 1, layers[-1])
                    row.add(module)
    return placed


def upward_imports(text: str) -> set[tuple[str, str]]:
    """The (importer, imported) modules the map allows to import upward: its `- `a.py` → `b.py`` list."""
    allowed = text.split("Upward imports, each on purpose")[1].split("\n## ")[0]
    return {(module_name(ROOT / "gatekit" / a), module_name(ROOT / "gatekit" / b))
            for a, b in re.findall(r"^- `([\w/]+\.py)` → `([\w/]+\.py)`", allowed, re.M)}


def test_imports_only_go_down_the_architecture_layers() -> None:
    placed = architecture_layers(ARCHITECTURE)
    sources = [p for p in ALL_SOURCES if ROOT / "gatekit" in p.parents and p.name != "__init__.py"]
    assert {module_name(p) for p in sources} <= placed.keys(), "a module has no layer on docs/architecture.md"
    allowed, upward, used = upward_imports(ARCHITECTURE), [], set()
    for path in sources:
        here = module_name(path)
        for i in imports_of(path, here):
            if i.module in placed and placed[i.module][0] < placed[here][0]:
                if (here, i.module) in allowed:
                    used.add((here, i.module))
                else:
                    upward.append(f"{i}  ({placed[here][1]} imports {placed[i.module][1]})")
    assert not upward, ("docs/architecture.md: these imports go up its layers; move the module (or its row), or "
                        "list the import under its upward imports with the reason:\n" + "\n".join(upward))
    assert used == allowed, f"docs/architecture.md allows upward imports that no longer exist: {allowed - used}"


def test_the_layer_check_reads_folders_rows_and_exceptions() -> None:
    text = ("| layer | module | idea |\n| --- | --- | --- |\n| top | `cli.py` | x |\n"
            "| low | `report/terminal.py`, `page.py`, `csvinput.py` | y |\n|  | `importers/` | z |\n"
            "Upward imports, each on purpose (...):\n\n- `stats.py` → `cli.py`: why.\n\n## One gate\n")
    placed = architecture_layers(text)
    assert placed["gatekit.cli"] == (0, "top")
    assert placed["gatekit.report.page"] == placed["gatekit.csvinput"] == placed["gatekit.importers.pyperf"] == (
        1, "low")
    assert upward_imports(text) == {("gatekit.stats", "gatekit.cli")}


def _resolves(token: str, modules: dict[str, object]) -> bool | None:
    """Whether `series_replay.read_state` or `RunLoop.run_slot` names something in gatekit; None when the
    token is not such a name (a key, a file, an event)."""
    parts = token.split(".")
    if parts[0] in modules:
        cut = max(i for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules)
        found, rest = modules[".".join(parts[:cut])], parts[cut:]
    elif parts[0][0].isupper() and not parts[0].isupper():  # a class, defined in some module
        owners = [m for m in modules.values() if isinstance(getattr(m, parts[0], None), type)]
        if not owners:
            return False
        found, rest = getattr(owners[0], parts[0]), parts[1:]
    else:
        return None
    for attr in rest:
        if not hasattr(found, attr):
            return False
        found = getattr(found, attr)
    return True


def test_every_function_and_class_the_architecture_names_exists() -> None:
    import importlib
    import pkgutil

    import gatekit

    modules = {info.name.removeprefix("gatekit."): importlib.import_module(info.name)
               for info in pkgutil.walk_packages(gatekit.__path__, "gatekit.")}
    assert _resolves("series_replay.read_state", modules) and _resolves("RunLoop.run_slot", modules)
    assert _resolves("series_replay.no_such_reader", modules) is False  # the check can fail
    files = (".py", ".json", ".jsonl", ".toml", ".csv", ".md", ".html")  # campaign.jsonl is a file, not a name
    tokens = {t for t in re.findall(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)`", ARCHITECTURE) if not t.endswith(files)}
    missing = sorted(t for t in tokens if _resolves(t, modules) is False)
    assert not missing, f"docs/architecture.md names what gatekit no longer has: {', '.join(missing)}"


def test_statistics_doc_has_every_scenario_its_tables_and_sources() -> None:
    from gatekit.simulate import SUITE
    for scenario in SUITE:
        assert f"| {scenario.name} |" in STATISTICS, f"scenario {scenario.name!r} has no row in docs/statistics.md"
    for name in _script("statistics_tables").BLOCKS:
        block = re.search(rf"<!-- simulate:{name}:begin -->\n(.*?)<!-- simulate:{name}:end -->", STATISTICS, re.S)
        assert block and block.group(1).count("\n") >= 3, f"table {name} is empty: run `make statistics`"
    assert "| NO |" not in STATISTICS  # every target row says it is met
    for source in ("Kalibera & Jones", "ISMM 2013", "Criterion", "Pinpoint", "SAME", "UNKNOWN", "Daly",
                   "ICPE 2020", "Abedi & Brecht", "Samuelson"):
        assert source in STATISTICS, f"{source} not cited in docs/statistics.md"


# Blocks of docs/statistics.md that no generator writes: printed by a script and pasted with its command beside.
PASTED_BLOCKS = {"change-points"}  # benchmarks/change_points.py --series 2000


def test_every_block_of_the_statistics_page_has_its_generator_and_every_generator_its_block() -> None:
    generated = set(_script("statistics_tables").BLOCKS)
    markers = re.findall(r"<!-- ([\w:-]+):(begin|end) -->", STATISTICS)
    names = [name for name, part in markers if part == "begin"]
    assert markers == [(name, part) for name in names for part in ("begin", "end")], \
        "docs/statistics.md: a block's begin and end markers do not pair up"
    assert len(set(names)) == len(names), "docs/statistics.md names a block twice"
    on_page = {name.removeprefix("simulate:") for name in names if name.startswith("simulate:")}
    assert on_page - generated == set(), f"no generator in benchmarks/statistics_tables.py for {on_page - generated}"
    assert generated - on_page == set(), f"benchmarks/statistics_tables.py writes blocks the page lacks: " \
                                         f"{generated - on_page}"
    pasted = {name for name in names if not name.startswith("simulate:")}
    assert pasted <= PASTED_BLOCKS, f"blocks of docs/statistics.md that `make statistics` does not write: " \
                                    f"{pasted - PASTED_BLOCKS} (make them simulate: blocks with a generator)"


def test_the_readme_is_a_short_read_that_links_every_docs_page() -> None:
    assert len(README.splitlines()) <= 300, "the README is the ten-minute read; depth goes to docs/"
    assert "\n## Contents\n" in README
    for page in sorted(DOCS.glob("*.md")):
        assert f"](docs/{page.name})" in README, f"docs/{page.name} is not linked from the README"


# The first hour: the README, then the PR gate, then CI. Depth goes to the pages they link, not into these.
FIRST_HOUR = (ROOT / "README.md", DOCS / "compare.md", DOCS / "ci.md")
FIRST_HOUR_WORDS = 3000


def test_the_first_hour_path_is_a_read_a_newcomer_finishes() -> None:
    contents = README.split("\n## Contents\n", 1)[1].split("\n## ", 1)[0]
    assert "](#a-first-gate)" in contents and "](#the-pr-gate)" in contents and "](docs/ci.md)" in contents
    words = sum(len(page.read_text().split()) for page in FIRST_HOUR)  # what `wc -w` counts
    assert words < FIRST_HOUR_WORDS, f"the first-hour path is {words} words: move depth to the reference pages"
    assert f"under {FIRST_HOUR_WORDS:,} words" in contents


def test_troubleshooting_quotes_the_verdicts_own_words() -> None:
    from gatekit.verdict import MORE_RUNS, NEXT_STEP, QUIETER_MACHINE, TOO_FEW_USED, too_noisy_reason
    text = " ".join((DOCS / "troubleshooting.md").read_text().split())
    too_noisy = too_noisy_reason(1.0).split(" 1 %")[0]  # the words before the figure
    for words in (MORE_RUNS, QUIETER_MACHINE, TOO_FEW_USED, NEXT_STEP.strip(), too_noisy, "stopped at look 1"):
        assert words in text, f"docs/troubleshooting.md does not quote {words!r}"

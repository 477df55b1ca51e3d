"""Generate docs/cli.md, the command-line reference, from click's own command tree (`gatekit.cli.main`).

    python benchmarks/cli_reference.py --write docs/cli.md     (or: make docs)
    python benchmarks/cli_reference.py --check docs/cli.md     exit 1 when the file is stale

Every command and subcommand, its usage, its help, and every option with its values (choices, ranges),
default and help, in the order `gate --help` lists them. The text is built from the parameters themselves,
never from click's terminal formatter, so it does not depend on the terminal's width or click's version;
tests/test_docs.py regenerates it and fails when docs/cli.md differs.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path, PurePath

import click

TITLE = "# The `gate` command line"
NOTE = ("<!-- Generated from the code by `make docs` (benchmarks/cli_reference.py); edit the help in "
        "gatekit/cli.py, not this file. -->")


def _escaped(text: str) -> str:
    """Text safe in a Markdown table cell: `|` and the characters GitHub reads as HTML or emphasis escaped,
    except inside `code spans`, which show their text as it is."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # even parts lie outside code spans
        parts[i] = (parts[i].replace("\\", "\\\\").replace("&", "&amp;").replace("<", "&lt;")
                    .replace(">", "&gt;").replace("*", "\\*").replace("|", "\\|"))
    for i in range(1, len(parts), 2):
        parts[i] = parts[i].replace("|", "\\|")
    return "`".join(parts)


def _paragraphs(help_text: str) -> list[str]:
    """A command's help as Markdown: each paragraph on one line; a click `\\b` paragraph (kept as written)
    as a code block."""
    blocks = []
    for paragraph in re.split(r"\n\s*\n", inspect.cleandoc(help_text).split("\f")[0]):
        lines = paragraph.splitlines()
        if lines and lines[0].strip() == "\b":
            blocks.append("```text\n" + "\n".join(lines[1:]) + "\n```")
        elif lines:
            blocks.append(_escaped(" ".join(line.strip() for line in lines)))
    return blocks


def _argument_usage(argument: click.Argument) -> str:
    name = (argument.metavar or argument.name or "").upper()
    if argument.nargs == -1:
        name += "..."
    return name if argument.required else f"[{name}]"


def usage(path: str, command: click.Command) -> str:
    pieces = [path, "[OPTIONS]"] if any(isinstance(p, click.Option) for p in command.params) else [path]
    pieces += [_argument_usage(p) for p in command.params if isinstance(p, click.Argument)]
    if isinstance(command, click.Group):
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def _range(kind: click.IntRange | click.FloatRange) -> str:
    low = f"{kind.min} {'<' if kind.min_open else '≤'} " if kind.min is not None else ""
    high = f" {'<' if kind.max_open else '≤'} {kind.max}" if kind.max is not None else ""
    return f"{low}{kind.name.split()[0]}{high}"


def _kind(kind: click.ParamType) -> str:
    if isinstance(kind, click.Choice):
        return " \\| ".join(f"`{choice}`" for choice in kind.choices)
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        return _escaped(_range(kind))
    return kind.name.upper()


def _values(option: click.Option) -> str:
    """What the option takes: a flag, its choices or range, or its kind (metavar), and whether it repeats."""
    if option.is_flag:
        values = "flag"
    elif isinstance(option.type, click.Tuple):
        names = (option.metavar or "").split() or [t.name.upper() for t in option.type.types]
        values = " ".join(_escaped(n) for n in names)
        values += "".join(f"; {_escaped(name)}: {_kind(t)}" for name, t in zip(names, option.type.types)
                          if isinstance(t, click.Choice))
    elif isinstance(option.type, click.Choice):
        values = _kind(option.type)
    elif option.metavar:
        values = _escaped(option.metavar)
    else:
        values = _kind(option.type)
    if option.multiple:
        values += ", repeatable"
    if option.required:
        values += ", required"
    return values


def _default(option: click.Option) -> str:
    """The default as given (a number, a string, a path, or several); none shown for a flag, for no default
    (click's marker for it differs between versions) or for one computed when the command runs."""
    values = option.default if isinstance(option.default, (tuple, list)) else (option.default,)
    if option.is_flag or not values or not all(isinstance(v, (str, int, float, PurePath)) for v in values):
        return ""
    return ", ".join(f"`{value}`" for value in values)


def _names(option: click.Option) -> str:
    return ", ".join(f"`{name}`" for name in [*option.opts, *option.secondary_opts])


def command_section(path: str, command: click.Command) -> list[str]:
    lines = [f"## {path}", "", f"`{usage(path, command)}`", ""]
    for block in _paragraphs(command.help or ""):
        lines += [block, ""]
    options = [p for p in command.params if isinstance(p, click.Option) and not p.hidden]
    if options:
        lines += ["| option | takes | default | what it does |", "| --- | --- | --- | --- |"]
        for option in options:
            lines.append(f"| {_names(option)} | {_values(option)} | {_default(option)} | "
                         f"{_escaped(' '.join((option.help or '').split()))} |")
        lines.append("")
    return lines


def commands(group: click.Group, path: str) -> list[tuple[str, click.Command]]:
    """Every visible command under `group`, depth first, in the order `--help` lists them."""
    found: list[tuple[str, click.Command]] = []
    context = click.Context(group, info_name=path)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if command is None or command.hidden:
            continue
        found.append((f"{path} {name}", command))
        if isinstance(command, click.Group):
            found += commands(command, f"{path} {name}")
    return found


def anchor(path: str) -> str:
    """The anchor GitHub gives the heading `## <path>`: `gate import pytest-benchmark` → `gate-import-pytest-benchmark`."""
    return re.sub(r"[^a-z0-9 _-]", "", path.lower()).replace(" ", "-")


def reference(main: click.Group, prog: str = "gate") -> str:
    """docs/cli.md: an index of every command, then one section per command."""
    everything = commands(main, prog)
    lines = [TITLE, "", NOTE, ""]
    lines += [f"`{usage(prog, main)}`; `{prog} COMMAND --help` prints a command's own help. Global options: "
              + ", ".join(_names(o) for o in main.params if isinstance(o, click.Option)) + ", `--help`.", ""]
    for block in _paragraphs(main.help or ""):
        lines += [block, ""]
    lines += ["| command | what it does |", "| --- | --- |"]
    for path, command in everything:
        lines.append(f"| [`{path}`](#{anchor(path)}) | {_escaped(command.get_short_help_str(limit=200))} |")
    lines.append("")
    for path, command in everything:
        lines += command_section(path, command)
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, metavar="FILE", help="write the reference to FILE")
    action.add_argument("--check", type=Path, metavar="FILE", help="exit 1 when FILE is not the reference")
    args = parser.parse_args()
    from gatekit.cli import main as gate

    text = reference(gate)
    if args.write:
        args.write.write_text(text, encoding="utf-8")
        return 0
    if args.check.read_text(encoding="utf-8") != text:
        print(f"{args.check} is stale: run `make docs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What gate prints on a real terminal: click strips escape sequences only when output is redirected, so these
tests run `gate` on a pseudo-terminal, where a trainer's or a finding's string would reach the screen as is."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.findings_kit import golden_data, write_json

CLEAR = "\x1b[2J\x1b[H"  # clear the screen, cursor home: what follows looks like the only output
FORGED = f"{CLEAR}VERDICT: ADOPTED"

pytestmark = pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal (POSIX)")


def gate_on_a_terminal(*args: str, cwd: Path) -> tuple[int, bytes]:
    """`gate ARGS` with stdin, stdout and stderr on a pseudo-terminal: its exit code and every byte it wrote."""
    master, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gatekit.cli", *args], cwd=cwd, stdin=terminal, stdout=terminal,
                            stderr=terminal, env={**os.environ, "COLUMNS": "200"})
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: every writer of the terminal is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks)


def hostile_finding(tmp_path: Path, decision: str, name: str) -> Path:
    """The golden finding with an escape sequence in its id, its run folders and its first reason (a trainer's
    config key, as an undeclared difference of the arms names it)."""
    data = golden_data()
    data["meta"]["id"] = f"{name}{FORGED}"
    data["meta"]["related_runs"] = [f"runs/{FORGED}/off-r1"]
    data["verdict"]["decision"] = decision
    data["verdict"]["reasons"] = [f"the arms differ in undeclared config key '{FORGED}'"]
    return write_json(tmp_path / "findings" / f"{name}.json", data)


def assert_shown_escaped(output: bytes) -> None:
    assert b"\x1b" not in output, output
    assert b"\\x1b[2J\\x1b[HVERDICT: ADOPTED" in output, output  # the reader still sees what was there


def test_gate_report_escapes_ids_run_folders_and_skipped_findings_on_a_terminal(tmp_path: Path) -> None:
    finding = hostile_finding(tmp_path, "invalid", "evil")
    code, output = gate_on_a_terminal("report", str(finding), "--export", "bmf", str(tmp_path / "bmf.json"),
                                      "--md", str(tmp_path / "report.md"), cwd=tmp_path)
    assert b"skipped finding" in output and b"runs/" in output, output  # the lines that carried them raw
    assert_shown_escaped(output)


def test_gate_history_escapes_finding_ids_on_a_terminal(tmp_path: Path) -> None:
    for index in range(2):
        hostile_finding(tmp_path, "adopted", f"evil{index}")
    code, output = gate_on_a_terminal("history", str(tmp_path / "findings"), "--metric", "delta_pct", cwd=tmp_path)
    assert code == 0, output
    assert_shown_escaped(output)


def test_gate_prints_text_for_people_only_through_the_one_escaping_helper() -> None:
    """Every click.echo of gatekit/cli.py outside `_echo` prints a JSON document (for programs, exact); the rest
    goes through `_echo`, which escapes each line with sanitize.show_controls."""
    import ast

    import gatekit.cli

    source = Path(gatekit.cli.__file__).read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    helper = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "_echo")
    inside = set(range(helper.lineno, (helper.end_lineno or helper.lineno) + 1))
    raw = [f"cli.py:{node.lineno}: {lines[node.lineno - 1].strip()}" for node in ast.walk(tree)
           if isinstance(node, ast.Call) and ast.unparse(node.func) in {"click.echo", "click.secho", "print"}
           and node.lineno not in inside and "json" not in lines[node.lineno - 1]]
    assert raw == []

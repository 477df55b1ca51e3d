"""Reading back what a trainer left in its run folder — its result file, its logs, the samples — within bounds.

A trainer (or a process it left behind) controls what its run folder holds, and several readers come back
to it: the command driver reads the result and the logs, the report and the findings site (so also a
campaign) read each result's `trace.ms_per_iter` and each `samples.csv`. What a broken or hostile trainer
can leave there is refused before it can hang, flood or crash a reader: a FIFO or a device (a read blocks,
or never ends), a symbolic link that leads out of its folder, a file larger than the reader's limit, a JSON
or TOML document nested deeper than MAX_NESTING (a parser recurses until RecursionError) or holding more
than MAX_VALUES values (a parser builds up to 25 times the file's size in objects: 20 MB of `{}` took
2.7 GB). The document is measured in one pass over its bytes that builds nothing, before a parser sees it.
Every refusal is a RunFileError naming the file; the one function each reader calls is `read_run_file`
(and `read_document` for a JSON or TOML document).
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any, Callable

from gatekit.errors import RunFileError
from gatekit.records import DuplicateKeyError, loads_json
from gatekit.storage import O_CLOEXEC, O_NOFOLLOW, O_NONBLOCK, file_kind, size_text

MAX_RESULT_BYTES = 64 << 20  # a result file is a few KB; anything this large is not one
MAX_NESTING = 64  # deeper documents are refused before a parser can recurse that far
# A JSON value costs a parser up to ~80 bytes (an empty table in a list); a million of them is 10^6 steps of
# a training trace, and stays under 100 MB however they are spelled.
MAX_VALUES = 1_000_000
# TOML parsers take time quadratic in the parts of one dotted key (40 000 parts: 9 s); results in TOML are
# small, so they are capped in size and counted (keys, parts of a key) before parsing.
MAX_TOML_BYTES = 1 << 20
MAX_KEY_PARTS = MAX_NESTING
MAX_TOML_KEYS = 100_000


def read_run_file(path: Path, limit: int, *, tail: bool = False) -> bytes | None:
    """The bytes of a file in a run folder, None when there is none; with `tail`, its last `limit` bytes.

    Only a regular file is read, opened without blocking (a FIFO or a device cannot hang or flood the
    reader, and is checked after opening, so nothing can be swapped in between), and never through a
    symbolic link that leads out of the file's folder. A file larger than `limit` is refused (unless `tail`),
    also one that grows while it is read.
    """
    target = _inside_target(path)
    try:
        if not O_NOFOLLOW and target.is_symlink():  # no flag to refuse it with (Windows): refused by lstat
            raise OSError(errno.ELOOP, "is a symbolic link", str(target))
        fd = os.open(target, os.O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "became a symbolic link while it was read" if exc.errno == errno.ELOOP else exc.strerror or str(exc)
        raise RunFileError(f"{path}: cannot be opened: {why}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise RunFileError(f"{path}: is not a regular file ({file_kind(info.st_mode)})")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > limit and not tail:
            raise RunFileError(f"{path}: is larger than {size_text(limit)}")
        if tail and info.st_size > limit:
            handle.seek(info.st_size - limit)
        data = handle.read(limit + 1)
    if len(data) > limit:
        if not tail:
            raise RunFileError(f"{path}: is larger than {size_text(limit)}")
        data = data[-limit:]
    return data


def _inside_target(path: Path) -> Path:
    """`path`, or where its symbolic link leads when that is inside the same folder."""
    if not path.is_symlink():
        return path
    folder, target = path.parent.resolve(), path.resolve()
    if folder != target.parent and folder not in target.parents:
        raise RunFileError(f"{path}: is a symbolic link to {target}, outside its run folder {folder}")
    return target


def read_document(path: Path, limit: int = MAX_RESULT_BYTES) -> dict[str, Any] | None:
    """A JSON or TOML document (a trainer's result file) as a table, None when there is no such file."""
    raw = read_run_file(path, limit)
    return None if raw is None else parse_document(raw, path)


def parse_document(raw: bytes, path: Path) -> dict[str, Any]:
    """`raw` parsed as JSON (it starts with `{`) or TOML, once it is known to be within every bound.

    Raises RunFileError naming `path` for a document that is not UTF-8, too deep, has too many values,
    keys or key parts, does not parse, or is not a table at its top level.
    """
    if raw.lstrip().startswith(b"{"):
        problem = json_problem(raw)
        if problem:
            raise RunFileError(f"{path}: {problem}")
        parse: Callable[[str], Any] = loads_json
    else:
        if len(raw) > MAX_TOML_BYTES:
            raise RunFileError(f"{path}: is TOML larger than {size_text(MAX_TOML_BYTES)}; write a large result as JSON")
        parse = tomllib.loads
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunFileError(f"{path}: is not UTF-8 text: {exc}") from None
    if parse is tomllib.loads:
        problem = _toml_problem(text)
        if problem:
            raise RunFileError(f"{path}: {problem}")
    try:
        data = parse(text)
    except DuplicateKeyError as exc:
        raise RunFileError(f"{path}: {exc}") from None
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, RecursionError, ValueError) as exc:
        raise RunFileError(f"{path}: is neither JSON nor TOML: {exc}") from None
    if not isinstance(data, dict):
        raise RunFileError(f"{path}: top level must be a table/object")
    return data


# A JSON string (an unterminated one runs to the end: it always matches, so the pass stays linear), or one
# of the characters that open, close or separate values.
_JSON_STRUCTURE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{},]', re.DOTALL)
_QUOTE, _OPENS, _CLOSES = ord('"'), (ord("["), ord("{")), (ord("]"), ord("}"))


def json_problem(raw: bytes) -> str:
    """Why a JSON document is beyond the bounds ('' when it is not): nesting deeper than MAX_NESTING, or more
    than MAX_VALUES values. Counted in its bytes, strings skipped, without building anything; stops at the
    first bound passed. Its values: the top one, and one more for each comma and each non-empty array or
    table (whose first element no comma announces)."""
    opens = raw.count(b"[") + raw.count(b"{")
    if opens <= MAX_NESTING and 1 + raw.count(b",") + opens <= MAX_VALUES:
        return ""  # even counting the brackets and commas inside strings, no bound can be reached
    depth, values, opened_at = 0, 1, -1  # opened_at: where the last "[" or "{" ended, while nothing followed it
    for match in _JSON_STRUCTURE.finditer(raw):
        start = match.start()
        char = raw[start]
        if opened_at >= 0 and not (char in _CLOSES and not raw[opened_at:start].strip()):
            values += 1  # the container just opened has a first element
        opened_at = -1
        if char in _CLOSES:
            depth = max(depth - 1, 0)
        elif char in _OPENS:
            depth += 1
            opened_at = match.end()
            if depth > MAX_NESTING:
                return f"nests deeper than {MAX_NESTING} levels"
        elif char != _QUOTE:  # a comma
            values += 1
        if values > MAX_VALUES:
            return f"holds more than {MAX_VALUES:,} values".replace(",", " ")
    return ""


def _toml_problem(text: str) -> str:
    """Why a TOML document is beyond the bounds ('' when it is not)."""
    deepest, key_parts, keys = _toml_shape(text)
    if deepest > MAX_NESTING:
        return f"nests deeper than {MAX_NESTING} levels"
    if key_parts > MAX_KEY_PARTS:
        return f"has a dotted key or table name of more than {MAX_KEY_PARTS} parts"
    if keys > MAX_TOML_KEYS:
        return f"has more than {MAX_TOML_KEYS} keys"
    return ""


def _toml_shape(text: str) -> tuple[int, int, int]:
    """(deepest bracket nesting, most parts in one dotted key or table header, number of keys) of a TOML
    document, in one linear pass that skips strings and comments, so brackets inside a string value
    count for nothing. Checked before parsing: no parser recurses or goes quadratic on what passes."""
    depth = deepest = parts = most_parts = keys = 0
    stack: list[str] = []  # open "[" (arrays) and "{" (tables) of values
    in_key = True  # a TOML line begins with a key (or a table header)
    header = False
    i, size = 0, len(text)
    while i < size:
        char = text[i]
        if char in "\"'":
            triple = text.startswith(char * 3, i)
            end = char * 3 if triple else char
            i += len(end)
            while i < size and not text.startswith(end, i):
                if char == '"' and text[i] == "\\":
                    i += 1
                elif not triple and text[i] == "\n":
                    break
                i += 1
            i += len(end)
            continue
        if char == "#":
            newline = text.find("\n", i)
            i = size if newline < 0 else newline
            continue
        if char == "\n" and not stack:
            in_key, header, parts = True, False, 0
        elif (in_key or header) and char == ".":
            parts += 1
            most_parts = max(most_parts, parts + 1)
        elif in_key and not stack and char == "[" and not header:
            header, in_key, parts = True, False, 0  # [table] or [[array of tables]]: not a value bracket
        elif header and char == "]":
            header = False
        elif header:
            pass
        elif char in "[{":
            stack.append(char)
            depth = len(stack)
            deepest = max(deepest, depth)
            in_key, parts = char == "{", 0
        elif char in "]}":
            if stack:
                stack.pop()
            in_key = False
        elif char == "," and stack and stack[-1] == "{":
            in_key, parts = True, 0
        elif char == "=" and in_key:
            in_key, keys = False, keys + 1
        i += 1
    return deepest, most_parts, keys

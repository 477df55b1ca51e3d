"""Finding ids, reserved for one series at its start and never overwritten: `<out>/.<id>.reserved`."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Callable

from gatekit.errors import OutputError
from gatekit.records import loads_json
from gatekit.storage import remove_stale_temp_files

RESERVED_SUFFIX = ".reserved"  # <out>/.<finding id>.reserved: the id is held by a series


def _reservation(out_dir: Path, finding_id: str) -> Path:
    """The marker `<out>/.<id>.reserved` that holds a finding id for one series (its series id inside)."""
    return out_dir / f".{finding_id}{RESERVED_SUFFIX}"


def reserve_finding_id(out_dir: Path, base: str, series_id: str) -> str:
    """The first id of `base`, `base-2`, … that no finding and no other series holds, reserved for this
    series at its start by an exclusive create of its marker (O_CREAT|O_EXCL: of two series starting at
    once, one gets it). An interrupted series keeps its id until its finding is written, so a series that
    starts and finishes meanwhile takes the next one. An out folder that cannot be written now gives the id
    unreserved; `check_finding_id` still refuses to overwrite another series' finding."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # a file in its way or no permission: the finding write names the problem later
    remove_stale_temp_files(out_dir)
    candidate, k = base, 1
    while True:
        if not any((out_dir / f"{candidate}{suffix}").exists() for suffix in (".toml", ".json")):
            marker = _reservation(out_dir, candidate)
            try:
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                pass  # another series holds it
            except OSError:
                return candidate
            else:
                try:
                    with os.fdopen(fd, "w") as handle:
                        handle.write(f"{series_id}\n")
                except OSError:  # a full disk: no half marker left behind
                    marker.unlink(missing_ok=True)
                return candidate
        k += 1
        candidate = f"{base}-{k}"


def _finding_owner(path: Path) -> tuple[str, str | None]:
    """(meta.series_id, predecision.chain_head) of the finding file at `path` ('' / None where it names none
    or cannot be read)."""
    try:
        data = loads_json(path.read_text()) if path.suffix == ".json" else tomllib.loads(path.read_text())
        owner, head = data.get("meta", {}).get("series_id"), data.get("predecision", {}).get("chain_head")
    except (OSError, ValueError, AttributeError):
        return "", None
    return (owner if isinstance(owner, str) else ""), (head if isinstance(head, str) else None)


def check_finding_id(out_dir: Path, finding_id: str, series_id: str,
                     written_from: Callable[[str], bool] = lambda head: True) -> None:
    """Refuse to write this series' finding over one another series wrote or reserved, or over one this
    series' id wrote from another journal: a copy of the series folder shares the series id, never the
    chain head its finding was written from (`written_from(head)`: whether a line of this journal hashes to
    it; a legacy finding has no head, and its series id is all there is to go by)."""
    marker = _reservation(out_dir, finding_id)
    try:
        holder = marker.read_text().strip() if marker.is_file() else series_id
    except OSError:
        holder = series_id
    owners = [(marker, holder, None)] + [(path, *_finding_owner(path)) for suffix in (".json", ".toml")
                                         if (path := out_dir / f"{finding_id}{suffix}").is_file()]
    for path, owner, head in owners:
        if owner != series_id:
            raise OutputError(f"{path}: finding id '{finding_id}' belongs to series '{owner or 'unknown'}', not "
                              f"to this series '{series_id}'; refusing to overwrite it (move it away to write "
                              "this one)")
        if head is not None and not written_from(head):
            raise OutputError(f"{path}: finding id '{finding_id}' was written from another journal of series "
                              f"'{series_id}' (chain head {head}, which no line of this journal has: a copy of "
                              "the series folder); refusing to overwrite it (move it away to write this one)")


def release_finding_id(out_dir: Path, finding_id: str) -> None:
    """Drop the marker once the finding holds its id (its meta.series_id names the series)."""
    _reservation(out_dir, finding_id).unlink(missing_ok=True)


"""Other tools' results as series evidence, analysed exactly like a gate's own (`analysis.analyze`).

hyperfine (`--export-json`): `results: [{command, mean, stddev, median, user, system, min, max, times: [...],
exit_codes: [...]}]`. Two of its commands become the arms (the command names, as `-n/--command-name`
sets them), each entry of `times` one run measured as `process_wallclock_s`, a non-zero exit code a failed
run. hyperfine runs all of one command's runs, then the next command's — not interleaved — and samples
no load, so the finding says both, and the window rule is off (there are no windows to audit).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.config import ALWAYS_MEASURED, NAME_PATTERN, NAME_RULE, RulesSpec, ThresholdSpec
from gatekit.errors import ConfigError
from gatekit.analysis import SeriesEvidence
from gatekit.prereg import DecisionSpec
from gatekit.records import RunOutcome, RunRecord, WindowSummary

HYPERFINE_WARNINGS = (
    "imported from hyperfine: each command's runs ran back to back, not interleaved, so drift during the "
    "benchmark is confounded with the arm",
    "imported from hyperfine: no load was sampled during the runs, so contamination cannot be judged",
)
_SLUG = re.compile(r"[^a-z0-9]+")


def _slug(text: str) -> str:
    return _SLUG.sub("-", text.lower()).strip("-") or "hyperfine"


def _is_iso_date(text: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return False
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_hyperfine(path: Path) -> tuple[list[Mapping[str, Any]], bytes]:
    """The `results` list of a hyperfine export, checked key by key; errors name the file and key."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not hyperfine --export-json output: {exc}") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or not results:
        raise ConfigError(f"{path}: key 'results' is missing or empty (expected hyperfine --export-json output)")
    for index, result in enumerate(results):
        where = f"{path}: key 'results[{index}]"
        if not isinstance(result, dict):
            raise ConfigError(f"{where}' must be a table")
        if not isinstance(result.get("command"), str):
            raise ConfigError(f"{where}.command' is missing")
        times = result.get("times")
        if not isinstance(times, list) or not times or not all(_number(t) for t in times):
            raise ConfigError(f"{where}.times' must be a non-empty list of seconds "
                              "(hyperfine 1.12 or newer writes it)")
        codes = result.get("exit_codes")
        if codes is not None and (not isinstance(codes, list) or len(codes) != len(times)
                                  or not all(c is None or isinstance(c, int) for c in codes)):
            raise ConfigError(f"{where}.exit_codes' must list one exit code per entry of times")
    return results, raw


def _pick(results: Sequence[Mapping[str, Any]], wanted: str | None, default: int, path: Path, option: str) -> int:
    names = [str(r["command"]) for r in results]
    if wanted is None:
        return default
    if wanted in names:
        if names.count(wanted) > 1:
            raise ConfigError(f"{path}: {option} {wanted!r} names {names.count(wanted)} commands; pick one by "
                              "its 1-based position")
        return names.index(wanted)
    if wanted.isdigit() and 1 <= int(wanted) <= len(results):
        return int(wanted) - 1
    listed = ", ".join(f"{i}: {n!r}" for i, n in enumerate(names, 1))
    raise ConfigError(f"{path}: {option} {wanted!r} is not one of the commands ({listed})")


def evidence_from_hyperfine(path: Path, *, off: str | None = None, on: str | None = None,
                            gate_id: str | None = None, title: str | None = None, date: str | None = None,
                            threshold: ThresholdSpec = ThresholdSpec()) -> SeriesEvidence:
    """Series evidence of two hyperfine commands: off (default the first) against on (default the second)."""
    results, raw = read_hyperfine(path)
    if len(results) < 2:
        raise ConfigError(f"{path}: key 'results' holds one command; a gate compares two")
    if len(results) > 2 and (off is None or on is None):
        names = ", ".join(f"{i}: {r['command']!r}" for i, r in enumerate(results, 1))
        raise ConfigError(f"{path}: key 'results' holds {len(results)} commands ({names}); choose two with "
                          "--off and --on")
    off_index = _pick(results, off, 0, path, "--off")
    on_index = _pick(results, on, 1, path, "--on")
    if off_index == on_index:
        raise ConfigError(f"{path}: --off and --on name the same command")
    off_result, on_result = results[off_index], results[on_index]
    off_arm, on_arm = str(off_result["command"]), str(on_result["command"])
    # Both name the finding's files: validated like gate.id, so no id can write outside --out.
    if gate_id is not None and not NAME_PATTERN.fullmatch(gate_id):
        raise ConfigError(f"--id {gate_id!r}: must be {NAME_RULE} (it names the finding's files)")
    if date is not None and not _is_iso_date(date):
        raise ConfigError(f"--date {date!r}: must be a date written YYYY-MM-DD (it names the finding's files)")
    date = date or dt.date.today().isoformat()
    gate_id = gate_id or _slug(path.stem)[:64].strip("-") or "hyperfine"
    n = min(len(off_result["times"]), len(on_result["times"]))
    spec = DecisionSpec(
        gate_id=gate_id, title=title or f"{on_arm} vs {off_arm} (hyperfine)", off_arm=off_arm, on_arm=on_arm,
        n=n, order="blocked", seed=0, primary=ALWAYS_MEASURED, direction="lower", expect_diff=("command",),
        threshold=threshold, guards=(), rules=RulesSpec(require_window_samples=False))
    records: list[RunRecord] = []
    order = 0
    for result in (off_result, on_result):
        arm = str(result["command"])
        codes = result.get("exit_codes") or [0] * len(result["times"])
        for k, (seconds, code) in enumerate(zip(result["times"], codes), 1):
            order += 1
            # hyperfine writes null for a run ended by a signal: a failed run too
            error = "" if code == 0 else "ended by a signal" if code is None else f"exit code {code}"
            outcome = RunOutcome(exit_code=code, process_wallclock_s=float(seconds), config={"command": arm},
                                 error=error)
            records.append(RunRecord(order=order, arm=arm, label=f"{arm}-r{k}", pair=k, outcome=outcome,
                                     window=WindowSummary(samples=0, load1_mean=None, load1_max=None)))
    summary_keys = ("mean", "stddev", "median", "user", "system", "min", "max")
    provenance = {"imported_from": {
        "format": "hyperfine", "path": str(path), "sha256": hashlib.sha256(raw).hexdigest(),
        "commands": {str(r["command"]): {k: r[k] for k in summary_keys if _number(r.get(k))}
                     for r in (off_result, on_result)}}}
    return SeriesEvidence(
        series_id=f"hyperfine:{path.name}", finding_id=f"{gate_id}-{date}", spec=spec, records=tuple(records),
        date=date, provenance=provenance, warnings=HYPERFINE_WARNINGS, related_runs=(str(path),))

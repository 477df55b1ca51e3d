"""Offline input: a CSV run table (`arm,label,<metric columns>,load1_mean,load1_max`) as series evidence.

Every cell is read as text and parsed here, so a bad cell is an error naming the file, the row and the
column — never a silently missing number and never a traceback.
"""

from __future__ import annotations

import csv
import io
import datetime as dt
import re
from pathlib import Path

from gatekit.config import ALWAYS_MEASURED, NAME_PATTERN, NAME_RULE, GateConfig
from gatekit.errors import ConfigError
from gatekit.analysis import SeriesEvidence
from gatekit.prereg import DecisionSpec
from gatekit.records import RunOutcome, RunRecord, WindowSummary
from gatekit.sanitize import MAX_METRIC_MAGNITUDE, usable_metric
from gatekit.storage import read_input

REQUIRED = ("arm", "label")
WINDOW_COLUMNS = ("load1_mean", "load1_max", "samples")
_ROUND = re.compile(r"-r(\d{1,9})$")
_MAX_EXIT_CODE = 1 << 31


def _read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    raw = read_input(path, "a CSV file")
    try:
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8-sig"), newline="")))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc}") from None
    except csv.Error as exc:
        raise ConfigError(f"{path}: not a readable CSV: {exc}") from None
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        raise ConfigError(f"{path}: empty; need a header arm,label,<metrics>,load1_mean,load1_max and one row a run")
    header = [name.strip() for name in rows[0]]
    seen: set[str] = set()
    for name in header:
        if not name:
            raise ConfigError(f"{path}: header: a column has no name")
        if name in seen:
            raise ConfigError(f"{path}: header: column '{name}' appears twice")
        seen.add(name)
    for index, row in enumerate(rows[1:], 1):
        if len(row) != len(header):
            raise ConfigError(f"{path}: row {index}: has {len(row)} fields, the header has {len(header)}")
    return header, rows[1:]


def _number(path: Path, index: int, column: str, text: str) -> float | None:
    """A finite number, None for an empty cell; anything else is an error naming row and column."""
    text = text.strip()
    if not text or text.lower() in ("nan", "na", "n/a"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{path}: row {index}, column '{column}': {text[:40]!r} is not a number") from None
    if not usable_metric(value):
        raise ConfigError(f"{path}: row {index}, column '{column}': {text[:40]!r} is not a finite number "
                          f"within ±{MAX_METRIC_MAGNITUDE:g}")
    return value


def _integer(path: Path, index: int, column: str, text: str, *, low: int, high: int) -> int | None:
    value = _number(path, index, column, text)
    if value is None:
        return None
    if value != int(value) or not low <= value <= high:
        raise ConfigError(f"{path}: row {index}, column '{column}': {text.strip()[:40]!r} must be a whole "
                          f"number from {low} to {high}")
    return int(value)


def evidence_from_csv(path: Path, config: GateConfig, off_arm: str, on_arm: str) -> SeriesEvidence:
    """Rows in execution order; the round comes from the label's `-r<k>` suffix."""
    if not NAME_PATTERN.fullmatch(path.stem):  # it names the finding: <gate.id>-<file name>
        raise ConfigError(f"{path}: the file name '{path.stem}' names the finding and must be {NAME_RULE}")
    header, rows = _read_rows(path)
    for column in REQUIRED:
        if column not in header:
            raise ConfigError(f"{path}: column '{column}' is missing (need arm,label,<metrics>,load1_mean,load1_max)")
    metric_columns = [c for c in header if c not in (*REQUIRED, *WINDOW_COLUMNS, "exit_code")]
    spec = DecisionSpec.from_gate(config, off_arm, on_arm)
    if spec.primary not in metric_columns:
        raise ConfigError(f"{path}: no column for the primary metric '{spec.primary}' (gate.primary in {config.path})")
    records = []
    labels: set[str] = set()
    for index, cells in enumerate(rows, 1):
        values = dict(zip(header, cells))
        arm, label = values["arm"].strip(), values["label"].strip()
        if not arm:
            raise ConfigError(f"{path}: row {index}, column 'arm': empty")
        for column, name in (("arm", arm), ("label", label)):
            if not NAME_PATTERN.fullmatch(name):
                raise ConfigError(f"{path}: row {index}, column '{column}': {name[:40]!r} must be {NAME_RULE}")
        match = _ROUND.search(label)
        if not match:
            raise ConfigError(f"{path}: row {index}, column 'label': {label[:40]!r} must end in -r<round>, "
                              "e.g. off-r1")
        if label in labels:
            raise ConfigError(f"{path}: row {index}, column 'label': {label!r} appears twice")
        labels.add(label)
        metrics = {}
        for column in metric_columns:
            value = _number(path, index, column, values[column])
            if value is not None:
                metrics[column] = value
        load_mean = _number(path, index, "load1_mean", values.get("load1_mean", ""))
        load_max = _number(path, index, "load1_max", values.get("load1_max", ""))
        for column, load in (("load1_mean", load_mean), ("load1_max", load_max)):
            if load is not None and load < 0:
                raise ConfigError(f"{path}: row {index}, column '{column}': a load cannot be negative")
        has_window = load_mean is not None or load_max is not None
        samples = _integer(path, index, "samples", values.get("samples", ""), low=0, high=_MAX_EXIT_CODE)
        window = WindowSummary(samples=samples if samples is not None else int(has_window),
                               load1_mean=load_mean, load1_max=load_max)
        exit_code = _integer(path, index, "exit_code", values.get("exit_code", ""),
                             low=-_MAX_EXIT_CODE, high=_MAX_EXIT_CODE) or 0
        outcome = RunOutcome(exit_code=exit_code, process_wallclock_s=metrics.pop(ALWAYS_MEASURED, 0.0),
                             metrics=metrics, error="" if exit_code == 0 else f"exit code {exit_code}")
        records.append(RunRecord(order=index, arm=arm, label=label, pair=int(match.group(1)),
                                 outcome=outcome, window=window))
    arms = {r.arm for r in records}
    for arm in (off_arm, on_arm):
        if arm not in arms:
            raise ConfigError(f"{path}: column 'arm': no rows for arm '{arm}' (found: {', '.join(sorted(arms))})")
    return SeriesEvidence(
        series_id=f"csv:{path.name}", finding_id=f"{config.gate.id}-{path.stem}", spec=spec,
        records=tuple(records), date=dt.date.today().isoformat(),
        warnings=("analysed offline from a CSV: no predecision file, provenance or effective configs",),
        config_paths=(), related_runs=(str(path),),
    )

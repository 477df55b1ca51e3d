"""Offline input: a CSV run table (`arm,label,<metric columns>,load1_mean,load1_max`) as series evidence."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pandas as pd

from gatekit.config import ALWAYS_MEASURED, GateConfig
from gatekit.errors import ConfigError
from gatekit.finding import SeriesEvidence
from gatekit.prereg import DecisionSpec
from gatekit.records import RunOutcome, RunRecord, WindowSummary

REQUIRED = ("arm", "label")
WINDOW_COLUMNS = ("load1_mean", "load1_max", "samples")
_ROUND = re.compile(r"-r(\d+)$")


def evidence_from_csv(path: Path, config: GateConfig, off_arm: str, on_arm: str) -> SeriesEvidence:
    """Rows in execution order; the round comes from the label's `-r<k>` suffix."""
    try:
        table = pd.read_csv(path, dtype={"arm": str, "label": str})
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable CSV: {exc}") from None
    for column in REQUIRED:
        if column not in table.columns:
            raise ConfigError(f"{path}: column '{column}' is missing (need arm,label,<metrics>,load1_mean,load1_max)")
    arms = set(table["arm"])
    for arm in (off_arm, on_arm):
        if arm not in arms:
            raise ConfigError(f"{path}: column 'arm': no rows for arm '{arm}' (found: {', '.join(sorted(arms))})")
    metric_columns = [c for c in table.columns if c not in (*REQUIRED, *WINDOW_COLUMNS, "exit_code")]
    spec = DecisionSpec.from_gate(config, off_arm, on_arm)
    if spec.primary not in metric_columns:
        raise ConfigError(f"{path}: no column for the primary metric '{spec.primary}' (gate.primary in {config.path})")
    records = []
    for index, row in enumerate(table.itertuples(index=False), 1):
        values = row._asdict()
        label = str(values["label"])
        match = _ROUND.search(label)
        if not match:
            raise ConfigError(f"{path}: row {index}: label {label!r} must end in -r<round>, e.g. off-r1")
        metrics = {}
        for column in metric_columns:
            value = pd.to_numeric(values[column], errors="coerce")
            if pd.notna(value):
                metrics[column] = float(value)
        load_mean, load_max = values.get("load1_mean"), values.get("load1_max")
        has_window = pd.notna(load_mean) or pd.notna(load_max)
        samples = values.get("samples")
        window = WindowSummary(
            samples=int(samples) if pd.notna(samples) and samples is not None else int(bool(has_window)),
            load1_mean=float(load_mean) if pd.notna(load_mean) else None,
            load1_max=float(load_max) if pd.notna(load_max) else None)
        exit_code = values.get("exit_code")
        exit_code = int(exit_code) if exit_code is not None and pd.notna(exit_code) else 0
        outcome = RunOutcome(exit_code=exit_code, process_wallclock_s=metrics.pop(ALWAYS_MEASURED, 0.0),
                             metrics=metrics, error="" if exit_code == 0 else f"exit code {exit_code}")
        records.append(RunRecord(order=index, arm=str(values["arm"]), label=label, pair=int(match.group(1)),
                                 outcome=outcome, window=window))
    return SeriesEvidence(
        series_id=f"csv:{path.name}", finding_id=f"{config.gate.id}-{path.stem}", spec=spec,
        records=tuple(records), date=dt.date.today().isoformat(),
        warnings=("analysed offline from a CSV: no predecision file, provenance or effective configs",),
        config_paths=(), related_runs=(str(path),),
    )

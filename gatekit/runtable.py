"""The run table every policy reads: one frozen row per executed run (warm-ups aside), its columns as fields.

A table is built once from the typed `RunRecord`s (`records_table`; CSV and other tools' input arrive as
records too). A policy's classification (`Policy.classify`) returns a new table whose rows carry what it
decided — `replaced, missing_window, load_evidence, window_detail, z, contaminated, reason, used` — made with
`dataclasses.replace`: nothing changes a table in place. Columns a rule computes over the whole table come out
as numpy arrays aligned with the rows (`floats`, `flags`), so the rules read as the vectorised rules they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from gatekit.quality import TargetSpec, target_of
from gatekit.records import PSI_RESOURCES, RunRecord, WindowSummary
from gatekit.schedule import WARMUP_ROUND

PRESSURE_COLUMNS = (*(f"psi_{resource}_pct" for resource in PSI_RESOURCES), "steal_pct")
# the run's clock state from the backend's window summary (cuda: time-weighted over non-idle samples)
CLOCK_COLUMNS = ("sm_clock_mean_mhz", "sm_clock_locked_mhz")


@dataclass(frozen=True, slots=True)
class TableRow:
    """One run as the rules see it; a number the window did not record is NaN."""

    order: int
    arm: str
    label: str
    pair: int
    value: float  # the primary metric; NaN where the run has none
    failed: bool
    error: str = ""
    samples: int = 0
    load1_mean: float = math.nan
    load1_max: float = math.nan
    backend_evidence: str = ""  # the backend's evidence lines for the window joined with "; "; "" when none
    on_ac: bool | None = None  # None: no battery
    retry_of: int | None = None
    slot: str | None = None
    psi_cpu_pct: float = math.nan
    psi_io_pct: float = math.nan
    psi_memory_pct: float = math.nan
    steal_pct: float = math.nan
    sm_clock_mean_mhz: float = math.nan
    sm_clock_locked_mhz: float = math.nan
    censored: bool = False  # a time to target: the run never reached it, `value` is its last trace time
    # the policy's classification; a table fresh from records has these defaults
    replaced: bool = False  # its pair was re-run: it stays in the record, unused
    missing_window: bool = False  # no in-window samples where the rules require them
    load_evidence: bool = False
    window_detail: str = ""  # the window's evidence in words
    z: float = 0.0
    contaminated: bool = False
    reason: str = ""
    used: bool = False

    def load1(self, stat: str) -> float:
        """The window's `stat` (mean or max) of load1."""
        return self.load1_max if stat == "max" else self.load1_mean

    def psi_pct(self, resource: str) -> float:
        """The window's pressure stall of a PSI resource (cpu, io, memory), % of its wall time."""
        return {"cpu": self.psi_cpu_pct, "io": self.psi_io_pct, "memory": self.psi_memory_pct}[resource]

    @property
    def on_battery(self) -> bool:
        return self.on_ac is False

    @property
    def problem(self) -> bool:
        """Failed or contaminated (flagged) and not already replaced: its pair must be re-run."""
        return not self.replaced and (self.failed or self.contaminated)


def window_columns(window: WindowSummary) -> dict[str, Any]:  # float values, passed as TableRow keywords
    """The pressure-stall, steal and clock columns of one run window (NaN where it recorded none)."""
    clock = {column: float(value) if isinstance(value := window.telemetry.get(column), (int, float))
             and not isinstance(value, bool) else math.nan for column in CLOCK_COLUMNS}
    return {**{column: _number(getattr(window, column)) for column in PRESSURE_COLUMNS}, **clock}


def _number(value: object) -> float:
    """A float column's value: None (or anything not a number) is NaN."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _absent(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _int(value: object) -> int:
    if not isinstance(value, (int, float, str)):
        raise ValueError(f"run table: {value!r} is not a whole number")
    return int(value)


def _optional_int(value: object) -> int | None:
    return None if _absent(value) else _int(value)


def row_of(record: RunRecord, primary: str, target: TargetSpec | None = None) -> TableRow:
    """A run's row; a run without its primary metric counts as failed. `target`: a derived primary's quality
    target, which says whether the run is censored."""
    error = record.failure(primary)
    reached = target_of(record.outcome, primary, target)
    window = record.window
    return TableRow(order=record.order, arm=record.arm, label=record.label, pair=record.pair,
                    value=_number(record.value_of(primary)), failed=bool(error), error=error,
                    samples=window.samples, load1_mean=_number(window.load1_mean),
                    load1_max=_number(window.load1_max), backend_evidence="; ".join(window.evidence),
                    on_ac=window.on_ac, retry_of=record.retry_of, slot=record.slot,
                    censored=reached is not None and not reached.reached, **window_columns(window))


COLUMNS = tuple(f.name for f in fields(TableRow))


def _numbers(values: Mapping[str, object], columns: Sequence[str]) -> dict[str, Any]:
    """The float columns of plain values (NaN where absent), as TableRow keywords."""
    return {column: _number(values.get(column)) for column in columns}


def row_from(values: Mapping[str, object]) -> TableRow:
    """A row from plain values keyed by column (a test's or another tool's rows, classified or not); absent
    columns are empty."""
    unknown = set(values) - set(COLUMNS)
    if unknown:
        raise ValueError(f"run table: unknown column(s) {', '.join(sorted(unknown))}")
    evidence = values.get("backend_evidence")
    measured = TableRow(
        order=_int(values["order"]), arm=str(values["arm"]), label=str(values["label"]),
        pair=_int(values["pair"]), value=_number(values.get("value")),
        failed=bool(values.get("failed", False)), error=str(values.get("error") or ""),
        samples=_optional_int(values.get("samples")) or 0,
        load1_mean=_number(values.get("load1_mean")), load1_max=_number(values.get("load1_max")),
        backend_evidence="" if _absent(evidence) else str(evidence),
        on_ac=None if _absent(on_ac := values.get("on_ac")) else bool(on_ac),
        retry_of=_optional_int(values.get("retry_of")), slot=None if _absent(slot := values.get("slot")) else str(slot),
        censored=bool(values.get("censored", False)),
        **_numbers(values, (*PRESSURE_COLUMNS, *CLOCK_COLUMNS)))
    return replace(measured, replaced=bool(values.get("replaced", False)),
                   missing_window=bool(values.get("missing_window", False)),
                   load_evidence=bool(values.get("load_evidence", False)),
                   window_detail=str(values.get("window_detail") or ""), z=_number(values.get("z", 0.0)),
                   contaminated=bool(values.get("contaminated", False)), reason=str(values.get("reason") or ""),
                   used=bool(values.get("used", False)))


@dataclass(frozen=True, slots=True)
class RunTable:
    """The runs of a series in execution order (the order they were recorded), as frozen rows."""

    rows: tuple[TableRow, ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, rows: Sequence[Mapping[str, object]]) -> RunTable:
        """A table from plain rows keyed by column (see `row_from`)."""
        return cls(tuple(row_from(row) for row in rows))

    def __iter__(self) -> Iterator[TableRow]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def where(self, keep: Sequence[bool] | np.ndarray) -> RunTable:
        """The rows where `keep` (aligned with the rows) is true."""
        return RunTable(tuple(row for row, kept in zip(self.rows, keep, strict=True) if kept))

    def filter(self, test: Callable[[TableRow], bool]) -> RunTable:
        return RunTable(tuple(row for row in self.rows if test(row)))

    def map(self, change: Callable[[TableRow], TableRow]) -> RunTable:
        """A new table of each row changed (dataclasses.replace in `change`)."""
        return RunTable(tuple(change(row) for row in self.rows))

    def floats(self, column: Callable[[TableRow], float]) -> np.ndarray:
        """A float column aligned with the rows (NaN where a row has no value)."""
        return np.array([column(row) for row in self.rows], dtype=float)

    def flags(self, column: Callable[[TableRow], bool]) -> np.ndarray:
        """A boolean column aligned with the rows."""
        return np.array([bool(column(row)) for row in self.rows], dtype=bool)

    @property
    def used(self) -> RunTable:
        return self.filter(lambda row: row.used)

    def arm(self, name: str) -> RunTable:
        return self.filter(lambda row: row.arm == name)

    def values(self) -> list[float]:
        """The primary values, in row order."""
        return [row.value for row in self.rows]

    def labels(self) -> list[str]:
        return [row.label for row in self.rows]

    def by_arm(self) -> dict[str, RunTable]:
        """The rows of each arm, arms in the order they first appear."""
        groups: dict[str, list[TableRow]] = {}
        for row in self.rows:
            groups.setdefault(row.arm, []).append(row)
        return {arm: RunTable(tuple(rows)) for arm, rows in groups.items()}

    def by_pair(self) -> dict[int, RunTable]:
        """The rows of each round, rounds ascending, rows in table order within one."""
        groups: dict[int, list[TableRow]] = {}
        for row in self.rows:
            groups.setdefault(row.pair, []).append(row)
        return {pair: RunTable(tuple(groups[pair])) for pair in sorted(groups)}

    def in_order(self) -> RunTable:
        """The rows sorted by execution order (stable)."""
        return RunTable(tuple(sorted(self.rows, key=lambda row: row.order)))

    def retry_of(self) -> dict[int, int]:
        """Each replacement round and the round it replaces."""
        return {row.pair: row.retry_of for row in self.rows if row.retry_of is not None}


def records_table(records: Sequence[RunRecord], primary: str, target: TargetSpec | None = None) -> RunTable:
    """The run table rules work on. Warm-up runs (round 0) are not in it: they are discarded by
    preregistration."""
    return RunTable(tuple(row_of(record, primary, target) for record in records if record.pair != WARMUP_ROUND))

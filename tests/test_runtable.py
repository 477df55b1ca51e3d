"""The run table: frozen rows straight from the typed records, derived (never mutated) by classification, and
the decision core reading it without pandas."""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gatekit import rules, stats
from gatekit.analysis import classify
from gatekit.config import RulesSpec
from gatekit.policies import sequential
from gatekit.records import RunOutcome, RunRecord, WindowSummary
from gatekit.runtable import RunTable, TableRow, records_table
from gatekit.schedule import WARMUP_ROUND

ROOT = Path(__file__).resolve().parents[1]
PRIMARY = "train_wallclock_s"


def _record(order: int, arm: str, pair: int, value: float | None, **window: object) -> RunRecord:
    metrics = {} if value is None else {PRIMARY: value}
    return RunRecord(order, arm, f"{arm}-r{pair}", pair, RunOutcome(0, 1.0, metrics=metrics),
                     WindowSummary(**{"samples": 3, "load1_mean": 0.5, "load1_max": 0.7, **window}))  # type: ignore[arg-type]


def test_rows_come_straight_from_the_records() -> None:
    records = [_record(1, "off", WARMUP_ROUND, 5.0),
               _record(2, "off", 1, 10.0, psi_cpu_pct=12.5, evidence=("other GPU process", "throttled"),
                       telemetry={"sm_clock_mean_mhz": 1410, "sm_clock_locked_mhz": "n/a"}, on_ac=False),
               _record(3, "on", 1, None, load1_max=None)]
    table = records_table(records, PRIMARY)
    assert [row.label for row in table] == ["off-r1", "on-r1"]  # the warm-up run is not in it
    off, on = table.rows
    assert (off.value, off.failed, off.error, off.samples) == (10.0, False, "", 3)
    assert off.psi_cpu_pct == 12.5 and math.isnan(off.psi_io_pct) and math.isnan(off.steal_pct)
    assert off.backend_evidence == "other GPU process; throttled" and off.on_battery
    assert off.sm_clock_mean_mhz == 1410.0 and math.isnan(off.sm_clock_locked_mhz)  # a word is no clock
    # a run without its primary is failed, its value NaN; a window without load1 max reads NaN
    assert on.failed and "missing" in on.error and math.isnan(on.value) and math.isnan(on.load1("max"))
    assert on.load1("mean") == 0.5 and not on.on_battery


def test_plain_rows_build_the_same_row_and_refuse_an_unknown_column() -> None:
    [record_row] = records_table([_record(1, "off", 1, 10.0)], PRIMARY).rows
    plain = RunTable.of([{"order": 1, "arm": "off", "label": "off-r1", "pair": 1, "value": 10.0, "failed": False,
                          "samples": 3, "load1_mean": 0.5, "load1_max": 0.7, "retry_of": math.nan}])
    assert repr(plain.rows[0]) == repr(record_row)  # repr: NaN != NaN, its text is equal
    assert RunTable.of([{"order": 1, "arm": "off", "label": "off-r1", "pair": 1, "used": True}]).rows[0].used
    with pytest.raises(ValueError, match="unknown column.*deviant"):
        RunTable.of([{"order": 1, "arm": "off", "label": "off-r1", "pair": 1, "deviant": True}])


def test_classification_returns_a_new_table_and_leaves_the_given_one_as_it_was() -> None:
    records = [_record(k + 1, arm, pair, value, load1_max=load)
               for k, (arm, pair, value, load) in enumerate([("off", 1, 10.0, 0.1), ("on", 1, 9.0, 0.1),
                                                             ("off", 2, 10.1, 0.1), ("on", 2, 9.1, 9.0),
                                                             ("off", 3, 9.9, 0.1), ("on", 3, 30.0, 0.1)])]
    table = records_table(records, PRIMARY)
    before = repr(table)
    classified = rules.classify(table, RulesSpec(sigma_ref="leave_one_out"), {})
    assert repr(table) == before and not any(row.used or row.reason for row in table)
    assert classified is not table and [row.used for row in classified] == [True] * 6
    # the flagged sequential run takes its pair out; the input table is untouched again
    flagged = sequential.classify(table, RulesSpec(load_per_core_limit=1.5), {}, cores=2)
    assert [row.label for row in flagged if not row.used] == ["off-r2", "on-r2"]
    assert flagged.rows[3].reason == "flagged: load1 max per core 4.50 > 1.5"
    assert flagged.rows[2].reason == "pair partner failed or flagged" and repr(table) == before
    with pytest.raises(dataclasses.FrozenInstanceError):
        table.rows[0].used = True  # type: ignore[misc]


def test_groups_keep_the_orders_the_rules_rely_on() -> None:
    table = RunTable(tuple(TableRow(order=k, arm=arm, label=f"{arm}-r{pair}", pair=pair, value=float(k),
                                    failed=False) for k, (arm, pair) in
                           enumerate([("on", 2), ("off", 2), ("off", 1), ("on", 1)], 1)))
    assert list(table.by_pair()) == [1, 2]  # rounds ascending
    assert [row.label for row in table.by_pair()[2]] == ["on-r2", "off-r2"]  # table order within a round
    assert list(table.by_arm()) == ["on", "off"]  # arms as they first appear
    assert [row.order for row in table.in_order()] == [1, 2, 3, 4]
    assert table.where(np.array([True, False, False, True])).labels() == ["on-r2", "on-r1"]


def test_classify_from_records_gives_every_policy_a_run_table() -> None:
    from gatekit.config import ThresholdSpec
    from gatekit.prereg import DecisionSpec
    records = [_record(k + 1, arm, pair, 10.0 + k) for k, (arm, pair) in
               enumerate([("off", 1), ("on", 1), ("off", 2), ("on", 2)])]
    for policy in ("classic", "sequential", "duet"):
        spec = DecisionSpec("g", "", "off", "on", 2, "abab", None, primary=PRIMARY, direction="lower",
                            expect_diff=(), policy=policy, threshold=ThresholdSpec(), guards=(), rules=RulesSpec())
        classified = classify(records, spec, {}, 4)
        assert isinstance(classified, RunTable) and [row.used for row in classified] == [True] * 4, policy


@pytest.mark.parametrize("seed", range(5))
def test_compensated_mean_and_nan_median_keep_pandas_bits(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.normal(1400.0, 300.0, 7) * rng.choice([1e-3, 1.0, 1e3], 7)
    values[rng.integers(0, 7)] = math.nan
    frame = pd.DataFrame({"arm": ["a"] * 7, "v": values})
    assert stats.compensated_mean(values.tolist()) == float(frame.groupby("arm")["v"].mean()["a"])
    assert rules.nan_median(values) == float(pd.Series(values).median())
    assert rules.nan_median(values[:-1]) == float(pd.Series(values[:-1]).median())
    assert math.isnan(stats.compensated_mean([math.nan])) and math.isnan(rules.nan_median(np.array([math.nan])))


DECISION_CORE = ["runtable.py", "rules.py", "analysis.py", "verdict.py", "diagnostics.py", "stats.py",
                 *(f"policies/{path.name}" for path in (ROOT / "gatekit" / "policies").glob("*.py"))]


@pytest.mark.parametrize("path", DECISION_CORE)
def test_the_decision_core_reads_no_pandas(path: str) -> None:
    tree = ast.parse((ROOT / "gatekit" / path).read_text(encoding="utf-8"))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name.split(".")[0] == "pandas"], path

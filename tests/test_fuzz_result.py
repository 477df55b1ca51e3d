"""Fuzzing the result parser and what follows it: whatever a trainer writes, gatekit reads it without a
traceback, keeps only finite numbers as metrics, journals it as valid JSON, and writes a finding whose
JSON and TOML hold exactly the same data (trainer strings included, escaped by each format)."""

from __future__ import annotations

import json
import math
import tomllib
from typing import Any

import tomlkit
from hypothesis import event, given
from hypothesis import strategies as st

from gatekit.config import GuardSpec, RulesSpec, ThresholdSpec
from gatekit.analysis import SeriesEvidence, analyze
from gatekit.prereg import DecisionSpec
from gatekit.records import RunOutcome, RunRecord, WindowSummary
from gatekit.report.terminal import summary
from gatekit.sanitize import safe_outcome
from gatekit_drivers.command import read_result
from tests.fuzzing import NASTY_TEXT, NUMBERS, SCALARS, fuzz, nested, no_surrogates

GOOD_NUMBERS = st.floats(min_value=1e-3, max_value=1e6)
METRIC_VALUES = st.one_of(GOOD_NUMBERS, GOOD_NUMBERS, NUMBERS, NASTY_TEXT, st.booleans(), st.none(),
                          nested(max_leaves=3))
METRIC_TABLES = st.dictionaries(st.sampled_from(["train_elapsed_s", "psnr_db"]) | NASTY_TEXT, METRIC_VALUES,
                                max_size=4)
CONFIG_TABLES = st.dictionaries(NASTY_TEXT, nested(max_leaves=8), max_size=5)


@st.composite
def results(draw: st.DrawFn) -> dict[str, Any]:
    """Result documents: each section usually a table (the contract), now and then a scalar or absent."""
    document: dict[str, Any] = {}
    for section, tables in (("metrics", METRIC_TABLES), ("config", CONFIG_TABLES), ("trace", CONFIG_TABLES)):
        roll = draw(st.integers(0, 9))  # hypothesis favours 0 and the ends: the rare cases sit mid-range
        if roll == 5:
            document[section] = draw(SCALARS)
        elif roll != 6:
            document[section] = draw(tables)
    return document

def _json_text(document: Any) -> str:
    return json.dumps(document, default=str)  # NaN/Infinity literals stay in: trainers write them


def _toml_text(document: Any) -> str | None:
    def clean(value: Any) -> Any:  # TOML has no null and cannot encode lone surrogates
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if v is not None and no_surrogates(k)}
        if isinstance(value, list):
            return [clean(v) for v in value if v is not None]
        return value if not isinstance(value, str) or no_surrogates(value) else "x"
    try:
        return tomlkit.dumps(clean(document))
    except (TypeError, ValueError):  # e.g. a scalar top level: not every draw is a TOML document
        return None


@st.composite
def result_files(draw: st.DrawFn) -> bytes:
    roll = draw(st.integers(0, 9))
    kind = "bytes" if roll == 5 else "truncated" if roll == 6 else "toml" if roll in (1, 2, 3) else "json"
    document = draw(results())
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    text = _json_text(document) if kind == "json" else (_toml_text(document) or _json_text(document))
    data = text.encode("utf-8", "surrogatepass")
    if kind == "truncated":
        data = data[:draw(st.integers(0, len(data)))]
    return data


SPEC = DecisionSpec(gate_id="fuzz", title="", off_arm="off", on_arm="on", n=2, order="abab", seed=0,
                    primary="train_elapsed_s", direction="lower", expect_diff=(), threshold=ThresholdSpec(),
                    guards=(GuardSpec("psnr_db", "higher", 0.05),), rules=RulesSpec())


@fuzz(max_examples=400)
@given(data=result_files())
def test_any_result_file_is_read_safely(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "result"
    path.write_bytes(data)
    metrics, config, trace, problem = read_result(path)  # must not raise
    event("problem" if problem else f"{len(metrics)} metric(s)")
    assert isinstance(problem, str) and (not problem or str(path) in problem)
    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    if problem:
        assert metrics == {} and config == {}
        return
    # every number that became a metric was a real number in the file, never a string or a boolean
    parsed = json.loads(data) if data.decode().lstrip().startswith("{") else tomllib.loads(data.decode())
    for name, value in metrics.items():
        raw = parsed["metrics"][name]
        assert isinstance(raw, (int, float)) and not isinstance(raw, bool) and float(raw) == value

    outcome = safe_outcome(RunOutcome(exit_code=0, process_wallclock_s=1.0, metrics=metrics, config=config,
                                      trace=trace))
    json.dumps(outcome.to_dict(), allow_nan=False)  # journaled as is
    records = tuple(
        RunRecord(order=i + 1, arm=arm, label=f"{arm}-r{round_}", pair=round_, outcome=outcome,
                  window=WindowSummary(samples=3, load1_mean=1.0, load1_max=1.5))
        for i, (arm, round_) in enumerate([("off", 1), ("on", 1), ("off", 2), ("on", 2)]))
    finding = analyze(SeriesEvidence(series_id="fuzz", finding_id="fuzz-1", spec=SPEC, records=records))
    as_json = json.loads(finding.to_json())
    assert tomllib.loads(finding.to_toml()) == as_json  # TOML and JSON hold exactly the same strings
    assert as_json["runs"][0]["config"] == json.loads(json.dumps(outcome.config))
    text = summary(finding)  # and the terminal summary shows them without control characters
    assert all(ch.isprintable() or ch == "\n" for ch in text)

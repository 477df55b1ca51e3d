"""Fuzzing CSV import (`gate analyze table.csv`): any table is analysed, or refused with a ConfigError that
names the file and the row, column or header — never a traceback."""

from __future__ import annotations

import csv
import io
import json
import tomllib
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from gatekit.config import load_gate
from gatekit.csvinput import evidence_from_csv
from gatekit.errors import GatekitError
from gatekit.analysis import analyze
from gatekit.report.terminal import summary
from tests.fuzzing import fuzz

FIXTURES = Path(__file__).parent / "fixtures"
CONFIG = load_gate(FIXTURES / "seed_gate.toml")
COLUMNS = ["arm", "label", "train_elapsed_s", "psnr_db", "load1_mean", "load1_max", "samples", "exit_code",
           "process_wallclock_s", "final_loss"]
CELLS = st.one_of(
    st.floats(min_value=0.5, max_value=200).map(lambda x: f"{x:.4f}"),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["", "nan", "NA", "inf", "-1", "0", "1e999", "1e-320", " 12.5 ", "1_000", "١٢", "true",
                     "off", "on", "off-r1", "on-r2", "x-r99999999999", "\x00", '"', "a,b", "\n"]),
    st.text(max_size=8),
)


GOOD = st.floats(min_value=0.5, max_value=200).map(lambda x: f"{x:.4f}")
EXTRA = ["psnr_db", "load1_mean", "load1_max", "samples", "exit_code", "process_wallclock_s", "final_loss"]


@st.composite
def tables(draw: st.DrawFn) -> bytes:
    """Mostly well-formed run tables with a few hostile cells, headers or rows; now and then noise."""
    if draw(st.integers(0, 19)) == 5:
        return draw(st.binary(max_size=300))
    header = ["arm", "label", "train_elapsed_s", *draw(st.lists(st.sampled_from(EXTRA), unique=True, max_size=7))]
    if draw(st.integers(0, 9)) == 5:  # a hostile header: a column dropped, renamed or repeated
        header[draw(st.integers(0, len(header) - 1))] = draw(st.sampled_from(COLUMNS) | st.text(max_size=6))
    rows = []
    for index in range(draw(st.integers(0, 10))):
        arm = ("off", "on")[index % 2] if draw(st.integers(0, 9)) != 5 else draw(CELLS)
        label = f"{arm}-r{index // 2 + 1}" if draw(st.integers(0, 9)) != 5 else draw(CELLS)
        cells = [draw(GOOD) if draw(st.integers(0, 39)) != 5 else draw(CELLS) for _ in header[2:]]
        row = [arm, label, *cells]
        if draw(st.integers(0, 19)) == 5:  # a ragged row
            row = row[:-1] if draw(st.booleans()) else [*row, draw(CELLS)]
        rows.append(row)
    buffer = io.StringIO()
    csv.writer(buffer).writerows([header, *rows])
    return buffer.getvalue().encode("utf-8", "surrogatepass")


@fuzz(max_examples=500)
@given(data=tables())
def test_any_csv_is_analysed_or_refused_naming_file_and_place(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "runs.csv"
    path.write_bytes(data)
    try:
        evidence = evidence_from_csv(path, CONFIG, "off", "on")
    except GatekitError as error:
        message = str(error)
        assert message.startswith(f"{path}: "), message
        place = message[len(str(path)) + 2:]
        assert place.startswith(("row ", "column ", "header", "no column", "not UTF-8", "not a readable", "empty")), message
        event(f"refused: {place.split(':')[0].split(',')[0][:24]}")
        return
    event("analysed")
    finding = analyze(evidence)  # every accepted table can be decided (possibly as invalid)
    as_json = json.loads(finding.to_json())
    assert tomllib.loads(finding.to_toml()) == as_json
    summary(finding)
    for run in as_json["runs"]:  # a failed or non-positive primary never becomes a used number
        value = run["metrics"].get("train_elapsed_s")
        assert not run["used"] or (value is not None and value > 0)

"""A new user's first hour, from the README and docs/gate-file.md: the minimal gate file runs, errors point at
the fix, the help and the reports read like prose, and a series that cannot succeed stops early and says where to look.

Series whose outcomes are what is tested run in-process with tests/fakes.py's FakeDriver; the documented
gate files run for real (their trainer and `sh`/`gzip` are real processes) through `gate_invoke`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gatekit.config import load_gate
from gatekit.errors import ConfigError
from gatekit.finding import Stats
from gatekit.formatting import MISSING, fmt, fmt_signed, number_text
from gatekit.report.page import _SHOWN_STATS, STAT_LABELS, stats_blocks
from gatekit.report.terminal import summary
from gatekit.sanitize import show_controls
from gatekit.series.runloop import LAST_LINE_CHARS
from gatekit.series.runner import SeriesRunner
from gatekit.storage import SeriesLayout
from tests.conftest import gate_invoke, write_toml
from tests.fakes import FakeDriver, LoadScript, fake_gate

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
GATE_FILE_DOC = (ROOT / "docs" / "gate-file.md").read_text()
INSTALL_DOC = (ROOT / "docs" / "install.md").read_text()
GOLDEN_FINDING = ROOT / "tests" / "golden" / "finding.json"


def _first_gate_section() -> str:
    """The README's "A first gate": the minimal gate file and trainer."""
    return README.split("\n## A first gate\n", 1)[1].split("\n## ", 1)[0]


def _own_trainer_section() -> str:
    """docs/gate-file.md's "Gate a trainer of your own": the command-only gate."""
    return GATE_FILE_DOC.split("\n## Gate a trainer of your own\n", 1)[1].split("\n## ", 1)[0]


def _block(section: str, language: str, first_line: str, index: int = 0) -> str:
    """The `index`-th fenced block of that language in `section` that starts with `first_line`."""
    blocks = [b for b in re.findall(rf"```{language}\n(.*?)```", section, re.S)
              if b.startswith(first_line + "\n")]
    return blocks[index]


@pytest.fixture
def calm_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """load1 0.5 for the preflight and the sampler: the README's gate files keep the default load_limit, and
    what they prove must not depend on what else this machine is running."""
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5))


# -- 1. unknown keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize("table, key, meant", [
    ("gate", "ordr", "order"),
    ("rules", "max_retry", "max_retries"),
    ("threshold", "floor", "floor_pct"),
])
def test_an_unknown_key_names_the_closest_known_one(tmp_path: Path, table: str, key: str, meant: str) -> None:
    gate = fake_gate("g", "", [])
    gate[table] = {**gate[table], key: 1}
    write_toml(tmp_path / "gate.toml", gate)
    done = gate_invoke("check", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"gate: error: {tmp_path / 'gate.toml'}: {table}.{key}: unknown key "
                                   f"(did you mean '{meant}'?)")


def test_an_unknown_key_like_no_known_one_points_at_the_docs(tmp_path: Path) -> None:
    gate = fake_gate("g", "", [])
    gate["gate"]["colour"] = "blue"
    write_toml(tmp_path / "gate.toml", gate)
    with pytest.raises(ConfigError, match=r"gate\.colour: unknown key \(check its spelling against the docs\)$"):
        load_gate(tmp_path / "gate.toml")


# -- 2. gate run --help ---------------------------------------------------------------------------------


def test_run_help_says_what_off_and_on_are_and_their_default(tmp_path: Path) -> None:
    done = gate_invoke("run", "--help", cwd=tmp_path)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())  # click wraps the help text
    assert "Usage: gate run [OPTIONS] [OFF] [ON]" in done.stdout
    assert "OFF is the baseline arm and ON the arm with the change" in text
    assert "default: the gate file's first two arms, OFF then ON" in text


# -- 3. the gate files of the README and docs/gate-file.md -------------------------------------------


def _minimal_gate(folder: Path) -> Path:
    """The README's minimal gate file and trainer, exactly as printed, with the arm configs its comments give."""
    folder.mkdir()
    gate = _block(_first_gate_section(), "toml", "# gate.toml")
    (folder / "gate.toml").write_text(gate)
    (folder / "trainer.py").write_text(_block(_first_gate_section(), "python", "# trainer.py"))
    for arm, holds in re.findall(r'config = "(\w+)\.toml"\s+# holds: (.*)', gate):
        (folder / f"{arm}.toml").write_text(holds + "\n")
    return folder / "gate.toml"


def test_the_readme_minimal_gate_file_is_about_ten_lines_and_runs(tmp_path: Path, calm_machine: None) -> None:
    gate_path = _minimal_gate(tmp_path / "mine")
    keys = [line for line in gate_path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert len(keys) <= 12
    assert (tmp_path / "mine" / "off.toml").read_text() == 'optimizer = "host"\n'

    checked = gate_invoke("check", cwd=gate_path.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "FAIL" not in checked.stdout

    done = gate_invoke("run", cwd=gate_path.parent)  # no arms named: the gate file's first two, off then on
    assert done.returncode == 0, done.stderr
    (finding_line,) = [line for line in done.stdout.splitlines() if line.startswith("finding: ")]
    paths = [Path(p) for p in finding_line.removeprefix("finding: ").split(", ")]
    assert all(p.is_absolute() and p.is_file() for p in paths)
    finding = json.loads(next(p for p in paths if p.suffix == ".json").read_text())
    # a gate file that states no warm-up discards one run before round 1 (a cold first run decides nothing)
    assert [run["label"] for run in sorted(finding["runs"], key=lambda r: r["order"])] == [
        "off-r0", "off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]
    assert [run["used"] for run in finding["runs"] if run["label"] == "off-r0"] == [False]
    assert all(run["used"] for run in finding["runs"] if run["label"] != "off-r0")
    assert finding["gate"]["warmup"] == 1
    assert finding["verdict"]["decision"] != "invalid"
    assert finding["meta"]["title"] == "my-change"  # no title: the gate id, never "on vs off" twice


def _gzip_gate(folder: Path) -> Path:
    folder.mkdir()
    (folder / "gate.toml").write_text(_block(_own_trainer_section(), "toml", "# gate.toml"))
    (folder / "data.bin").write_bytes(bytes(range(256)) * 64)
    return folder / "gate.toml"


@pytest.mark.skipif(shutil.which("gzip") is None or shutil.which("sh") is None, reason="needs sh and gzip")
def test_the_readme_command_only_gate_runs_its_arms_args(tmp_path: Path, calm_machine: None) -> None:
    gate_path = _gzip_gate(tmp_path / "gz")
    config = load_gate(gate_path)
    assert config.gate.primary == "process_wallclock_s" and config.arms["on"].args == ("-9",)
    assert config.arms["off"].config is None  # an arm needs no config file

    # what the shell really runs for each arm, traced by `sh -x` with the documented exact argv and args
    argv = config.driver.options["argv"]
    for arm, level in (("off", "-1"), ("on", "-9")):
        traced = subprocess.run([argv[0], "-xc", *argv[2:], *config.arms[arm].args], cwd=gate_path.parent,
                                capture_output=True, text=True, timeout=30, check=True)
        assert f"+ gzip {level}" in traced.stderr.splitlines()

    done = gate_invoke("run", "--n", "2", cwd=gate_path.parent)
    assert done.returncode == 0, done.stderr
    (series,) = [p for p in (gate_path.parent / "runs").iterdir() if p.is_dir()]
    start = json.loads(SeriesLayout(series).journal.read_text().splitlines()[0])
    assert start["arms"]["off"]["args"] == ["-1"] and start["arms"]["on"]["args"] == ["-9"]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs sh")
def test_args_under_sh_c_without_a_name_for_dollar_zero_are_refused(tmp_path: Path) -> None:
    # what docs/gate-file.md warns about, shown by the shell itself: the first argument after the script is $0
    swallowed = subprocess.run(["sh", "-c", 'echo "[$@]"', "-9"], capture_output=True, text=True, timeout=30)
    assert swallowed.stdout == "[]\n"
    named = subprocess.run(["sh", "-c", 'echo "[$@]"', "sh", "-9"], capture_output=True, text=True, timeout=30)
    assert named.stdout == "[-9]\n"

    gate_path = _gzip_gate(tmp_path / "gz")
    text = gate_path.read_text().replace('> /dev/null\', "sh"]', "> /dev/null']")
    assert text != gate_path.read_text()
    gate_path.write_text(text)
    done = gate_invoke("check", cwd=gate_path.parent)
    assert done.returncode == 2
    assert done.stderr.startswith(f"gate: error: {gate_path}: arms.off.args: driver.argv runs `sh -c SCRIPT`")
    assert "name $0 after the script" in done.stderr


def test_the_first_gate_does_not_ask_for_every_key() -> None:
    assert "every key below" not in README and "every key below" not in GATE_FILE_DOC
    assert "Only `gate.id`, `driver.argv` and two `[arms.*]` tables are" in " ".join(GATE_FILE_DOC.split("\n"))


def test_shell_completion_is_documented_and_produced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for shell, marker in (("bash", "complete -o nosort -F _gate_completion gate"), ("zsh", "#compdef gate"),
                          ("fish", "complete --no-files --command gate")):
        assert f"_GATE_COMPLETE={shell}_source gate" in INSTALL_DOC
        monkeypatch.setenv("_GATE_COMPLETE", f"{shell}_source")
        done = gate_invoke(cwd=tmp_path)
        assert done.returncode == 0 and marker in done.stdout, done.stdout


# -- 4. the demo gate's comment -------------------------------------------------------------------------


def test_the_demo_gates_suggested_commands_do_not_write_into_tracked_findings() -> None:
    comments = [line for line in (ROOT / "configs/demo/gate.toml").read_text().splitlines() if line.startswith("#")]
    commands = [m for line in comments for m in re.findall(r"gate run[^()`]*", line)]
    assert commands
    for command in commands:
        out = re.search(r"--out (\S+)", command)
        assert out, f"{command!r} would write into gate.out, the tracked findings/"
        assert not (ROOT / out.group(1)).resolve().is_relative_to(ROOT / "findings")


def test_the_demo_starts_on_a_busy_two_core_box_and_says_why_in_its_gate_file() -> None:
    """The first `make demo` on a shared 2-core box at load 6.89 exited 2 (load_limit 6): the demo states a
    limit fitted to it, preregistered like any key, with its reason beside it."""
    from gatekit.preflight import check_load
    config = load_gate(ROOT / "configs/demo/gate.toml")
    assert all(check_load(config, load1).ok for load1 in (6.89, 10.0, 15.0))
    assert not check_load(config, 16.5).ok
    lines = (ROOT / "configs/demo/gate.toml").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("load_limit"))
    assert lines[at - 1].startswith("#") and "2-core" in " ".join(lines[at - 4:at])


# -- 5, 6. the Decision block and numbers ---------------------------------------------------------------


def test_every_diagnostic_of_the_decision_block_has_a_label() -> None:
    typed = {f.name for f in dataclasses.fields(Stats)} - _SHOWN_STATS - {"extra_keys"}
    assert typed == set(STAT_LABELS)


def test_the_html_decision_block_shows_labels_not_keys(tmp_path: Path) -> None:
    done = gate_invoke("report", str(GOLDEN_FINDING), "--html", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "golden-2026-11-30" / "index.html").read_text()
    decision = page.split(">Decision</h2>", 1)[1].split("<h2", 1)[0]
    terms = re.findall(r"<dt>(.*?)</dt>", decision)
    assert "Δ as a ratio of geometric means" in terms and "one-sided p (on better)" in terms
    keys = {f.name for f in dataclasses.fields(Stats)}
    assert not [t for t in terms if t in keys]


@pytest.mark.parametrize("value, digits, text, signed", [
    (12.3456789, 4, "12.3457", "+12.3457"),
    (0.0005224, 4, "0.0005224", "+0.0005224"),
    (-0.000012345, 4, "-1.234e-05", "-1.234e-05"),
    (0.0, 4, "0.0000", "+0.0000"),
    (0.0099999, 3, "0.010", "+0.010"),  # rounds to two significant decimals: fixed stays
    (0.004, 2, "0.004", "+0.004"),
    (0.0012345, 4, "0.0012", "+0.0012"),
])
def test_small_numbers_keep_their_significant_digits(value: float, digits: int, text: str, signed: str) -> None:
    assert number_text(value, digits) == fmt(value, digits) == text
    assert fmt_signed(value, digits) == signed
    assert float(text) == pytest.approx(value, rel=1e-3, abs=10 ** -digits / 2)


@pytest.mark.parametrize("value", [None, math.nan, math.inf, -math.inf])
def test_a_missing_value_reads_the_same_everywhere_and_takes_no_unit(value: Any) -> None:
    # the terminal summary, the narrative, the pages and the exports all write numbers through fmt/fmt_signed
    assert fmt(value, unit=" %") == fmt_signed(value, 2, unit=" %") == MISSING


def test_a_unit_follows_numbers_only() -> None:
    assert (fmt(1.5, 2, unit=" %"), fmt(3, unit=" s"), fmt_signed(-0.5, 1, unit=" %")) == ("1.50 %", "3 s", "-0.5 %")
    assert (fmt("n/a", unit=" %"), fmt(True, unit=" %"), fmt_signed("1", unit=" %")) == ("n/a", "yes", MISSING)


def _series(root: Path, off: dict[str, Any], on: dict[str, Any], *, title: str = "Small metrics",
            **sections: dict[str, Any]) -> tuple[Any, FakeDriver, list[str]]:
    """A fake-driver series in `root`: the SeriesResult, the driver (its log) and the progress lines."""
    root.mkdir(parents=True, exist_ok=True)
    write_toml(root / "gate.toml", fake_gate("small", title, ["mode"], **sections))
    write_toml(root / "off.toml", off)
    write_toml(root / "on.toml", on)
    config = load_gate(root / "gate.toml")
    driver, lines = FakeDriver(), []
    runner = SeriesRunner(config, config.arms["off"], config.arms["on"], driver=driver, report=lines.append,
                          load_reader_for=LoadScript())
    return runner.start(), driver, lines


def _runs(arm: str, values: list[float], psnr: float = 30.0) -> dict[str, dict[str, float]]:
    return {f"{arm}-r{k}": {"train_elapsed_s": v, "psnr_db": psnr} for k, v in enumerate(values, 1)}


def test_small_metrics_are_not_printed_as_zero(tmp_path: Path) -> None:
    off = {"config": {"mode": "a"}, "runs": _runs("off", [1.2e-4, 1.21e-4, 1.19e-4])}
    result, _, lines = _series(tmp_path / "g", off, {"config": {"mode": "b"},
                                                     "runs": _runs("on", [1.0e-4, 1.01e-4, 0.99e-4])})
    assert any(line.startswith("      on-r3 train_elapsed_s = 9.9e-05, wallclock") for line in lines)
    text = summary(result.finding)
    rows = {line.split()[2]: line.split()[3] for line in text.splitlines() if re.match(r"\s*\d+\s+o", line)}
    assert rows == {"off-r1": "0.00012", "off-r2": "0.000121", "off-r3": "0.000119",
                    "on-r1": "0.0001", "on-r2": "0.000101", "on-r3": "9.9e-05"}
    assert "mean off 0.00012  mean on 0.0001  " in text  # (1.2 + 1.21 + 1.19) / 3 = 1.2; (1 + 1.01 + 0.99) / 3 = 1
    table = stats_blocks(result.finding)[0]
    assert table["rows"][1] == ["mean", "0.00012", "0.0001"]  # fmt: 4 significant digits, trailing zeros dropped


# -- 7, 8. paths and titles -----------------------------------------------------------------------------


def test_report_and_site_paths_are_printed_absolute(tmp_path: Path) -> None:
    done = gate_invoke("report", str(GOLDEN_FINDING), "--html", "out", "--md", "md/report.md", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    printed = [Path(line.removeprefix("report: ")) for line in done.stdout.splitlines()]
    assert printed == [tmp_path / "out" / "golden-2026-11-30" / "index.html", tmp_path / "md" / "report.md"]
    (tmp_path / "findings").mkdir()
    shutil.copy(GOLDEN_FINDING, tmp_path / "findings")
    site = gate_invoke("site", "findings", "-o", "site", cwd=tmp_path)
    assert site.returncode == 0, site.stderr
    assert site.stdout.strip() == f"site: {tmp_path / 'site' / 'index.html'}"


def test_an_imported_findings_paths_are_printed_absolute(tmp_path: Path) -> None:
    shutil.copy(ROOT / "tests" / "fixtures" / "hyperfine_sleep.json", tmp_path)
    done = gate_invoke("import", "hyperfine", "hyperfine_sleep.json", "--out", "rel", cwd=tmp_path)
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("finding: ")]
    paths = [Path(p) for p in line.removeprefix("finding: ").split(", ")]
    assert paths and all(p.is_absolute() and p.is_file() and p.parent == tmp_path / "rel" for p in paths)


def test_an_imported_findings_page_names_its_source_files(tmp_path: Path) -> None:
    golden = ROOT / "tests" / "golden" / "exports" / "hyperfine-finding.json"
    imported = json.loads(golden.read_text())["provenance"]["imported_from"]
    sources = imported.get("files") or [imported]
    done = gate_invoke("report", str(golden), "--md", "report.md", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "report.md").read_text().replace("\\", "")
    for source in sources:
        assert f"file {source['path']} sha256 {source['sha256']}" in text


def test_a_gate_without_a_title_does_not_repeat_its_arms(tmp_path: Path) -> None:
    from gatekit.exports import summary_markdown

    result, _, _ = _series(tmp_path / "g", {"config": {"mode": "a"}, "runs": _runs("off", [10.0, 10.1, 9.9])},
                           {"config": {"mode": "b"}, "runs": _runs("on", [9.0, 9.1, 8.9])}, title="")
    finding = result.finding
    assert finding.meta.title == "small"
    assert "small — on vs off" in summary_markdown([finding])
    gate_invoke("report", str(result.finding_paths[1]), "--html", "out", cwd=tmp_path)
    page = (tmp_path / "out" / finding.id / "index.html").read_text()
    assert "<h1>small</h1>" in page and page.count("on vs off") == 1


# -- 9. a failure that cannot be retried stops the series ------------------------------------------------


def _crashing_off(root: Path, **rules: Any) -> tuple[Any, FakeDriver, list[str]]:
    fail = {f"off-r{k}": "exit code 1" for k in range(1, 10)}
    return _series(root, {"config": {"mode": "a"}, "fail": fail},
                   {"config": {"mode": "b"}, "runs": _runs("on", [9.0, 9.1, 8.9, 9.0, 9.0, 9.0])},
                   rules=rules)


def _journal(series_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in SeriesLayout(series_dir).journal.read_text().splitlines()]


def test_a_failure_without_a_retry_left_stops_the_series_there(tmp_path: Path) -> None:
    result, driver, lines = _crashing_off(tmp_path / "g")
    # each failure of r1..r3 can still be retried; off-r4, the re-run of r1, cannot (max_retries = 1)
    assert driver.log == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3", "off-r4"]
    finding = result.finding
    assert finding.decision.value == "invalid"
    stop = ("stopped after off-r4: its failure (exit code 1) cannot be retried (rules.max_retries = 1), so the series is "
            "invalid whatever runs next; 5 scheduled run(s) not run")
    assert stop in finding.verdict.reasons
    assert "off-r4 failed: exit code 1 and its pair has no retry left" in " ".join(finding.verdict.reasons)
    invalid = [e for e in _journal(result.series_dir) if e["event"] == "invalid"]
    assert [e["reason"] for e in invalid] == [stop]
    log = (result.series_dir / "off-r4" / "stderr.log").absolute()
    assert f"INVALID: {stop}; its log: {log}" in lines and log.is_absolute() and log.is_file()
    assert f"      off-r4 FAILED: exit code 1 (see {log})" in lines
    # the stopped series is evidence like any other: its journal and run records verify
    verified = gate_invoke("verify", str(result.series_dir), cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
    # the echo warning is not given for an arm whose runs all failed before echoing anything
    assert not [w for w in finding.verdict.warnings if "echoed no effective config" in w]


def test_a_trainer_that_fails_the_same_way_in_both_arms_stops_after_their_first_runs(tmp_path: Path) -> None:
    # it writes no result: every run misses its primary, whatever the arm (the schedule had 6 runs + 6 retries)
    no_result = {f"{arm}-r{k}": {"psnr_db": 30.0} for arm in ("off", "on") for k in range(1, 7)}
    result, driver, lines = _series(tmp_path / "g", {"config": {"mode": "a"}, "runs": no_result},
                                    {"config": {"mode": "b"}, "runs": no_result})
    assert driver.log == ["off-r1", "on-r1"]
    missing = "primary metric 'train_elapsed_s' missing or not a finite number"
    for label in driver.log:  # the progress line says FAILED, why, and where its log is
        log = (result.series_dir / label / "stderr.log").absolute()
        assert f"      {label} FAILED: {missing} (see {log})" in lines
    stop = (f"stopped after on-r1: the first run of each arm (off-r1 and on-r1) failed the same way ({missing}), "
            "so the trainer fails whatever the arm and the series is invalid; fix the trainer (run its command by "
            "hand) and start again; 4 scheduled run(s) not run")
    assert result.finding.decision.value == "invalid" and stop in result.finding.verdict.reasons
    predecision = SeriesLayout(result.series_dir).predecision.read_text()
    assert "Stop rule: when the first run of each arm fails the same way" in predecision  # preregistered


def test_a_crash_quotes_the_trainers_last_stderr_line_bounded_and_escaped(tmp_path: Path) -> None:
    said = "ValueError: no such optimizer \x1b[2J" + "x" * 400  # a screen-clearing escape, and far too long
    crash = {f"{arm}-r1": "exit code 1" for arm in ("off", "on")}
    stderr = {label: f"Traceback (most recent call last):\n{said}\n\n" for label in crash}
    result, driver, lines = _series(tmp_path / "g", {"config": {"mode": "a"}, "fail": crash, "stderr": stderr},
                                    {"config": {"mode": "b"}, "fail": crash, "stderr": stderr})
    assert driver.log == ["off-r1", "on-r1"]
    quoted = show_controls(said)[:LAST_LINE_CHARS - 1] + "…"
    assert len(quoted) == LAST_LINE_CHARS and "\x1b" not in quoted and quoted.startswith("ValueError: no such")
    assert any(line.startswith(f'      off-r1 FAILED: exit code 1; its last stderr line: "{quoted}" (see ')
               for line in lines)
    assert any(f'failed the same way (exit code 1; its last stderr line: "{quoted}")' in reason
               for reason in result.finding.verdict.reasons)


def test_failures_that_differ_between_the_arms_do_not_stop_the_series_early(tmp_path: Path) -> None:
    result, driver, _ = _series(tmp_path / "g", {"config": {"mode": "a"}, "fail": {"off-r1": "exit code 1"},
                                                 "runs": _runs("off", [10.0, 10.1, 9.9, 10.0])},
                                {"config": {"mode": "b"}, "fail": {"on-r1": "exit code 2"},
                                 "runs": _runs("on", [9.0, 9.1, 8.9, 9.0])})
    assert driver.log == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3", "off-r4", "on-r4"]
    assert result.finding.decision.value == "adopted"


def test_with_no_retries_the_first_failure_stops_the_series(tmp_path: Path) -> None:
    result, driver, lines = _crashing_off(tmp_path / "g", max_retries=0)
    assert driver.log == ["off-r1"]
    assert result.finding.decision.value == "invalid"
    assert any(line.startswith("INVALID: stopped after off-r1:") for line in lines)


def test_a_series_cut_off_before_its_stop_stops_on_resume(tmp_path: Path) -> None:
    result, _, _ = _crashing_off(tmp_path / "g", max_retries=0)
    series = result.series_dir
    # as if the gate had been killed right after off-r1's run_end: the stop, the end and DONE never written
    lines = SeriesLayout(series).journal.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if json.loads(line)["event"] == "run_end") + 1
    SeriesLayout(series).journal.write_text("".join(lines[:cut]))
    (series / "DONE").unlink()
    for path in result.finding_paths:
        path.unlink()
    config = load_gate(tmp_path / "g" / "gate.toml")
    driver, progress = FakeDriver(), []
    resumed = SeriesRunner(config, config.arms["off"], config.arms["on"], driver=driver, report=progress.append,
                           load_reader_for=LoadScript()).resume(series)
    log = (series / "off-r1" / "stderr.log").absolute()
    assert [line for line in progress if line.startswith("INVALID: ")] == [
        f"INVALID: {resumed.finding.verdict.reasons[0]}; its log: {log}"]
    assert driver.log == []  # on-r1 does not run: the series is invalid whatever it measures
    assert resumed.finding.decision.value == "invalid"
    assert any(r.startswith("stopped after off-r1:") for r in resumed.finding.verdict.reasons)


# -- 10. the echo warning, per arm -----------------------------------------------------------------------


def test_the_echo_warning_names_the_one_arm_that_echoed_nothing(tmp_path: Path) -> None:
    result, _, _ = _series(tmp_path / "g", {"config": {"mode": "a"}, "runs": _runs("off", [10.0, 10.1, 9.9])},
                           {"runs": _runs("on", [9.0, 9.1, 8.9])})
    echo = [w for w in result.finding.verdict.warnings if "echoed no effective config" in w]
    assert echo == ["the trainer echoed no effective config for arm on, so the arms' difference is unchecked "
                    "(expect_diff = ['mode'])"]


def test_the_echo_warning_for_both_arms_is_one_line(tmp_path: Path) -> None:
    result, _, _ = _series(tmp_path / "g", {"runs": _runs("off", [10.0, 10.1, 9.9])},
                           {"runs": _runs("on", [9.0, 9.1, 8.9])})
    echo = [w for w in result.finding.verdict.warnings if "echoed no effective config" in w]
    assert echo == ["the trainer echoed no effective config, so the arms' difference is unchecked "
                    "(expect_diff = ['mode'])"]


def test_the_run_counter_shows_the_most_runs_the_policy_may_take(tmp_path: Path) -> None:
    """A sequential series printed [8/8] … about 0 s left, then went on to 16 and 24 runs: the counter says the
    most runs its policy may take from the start, and a classic series, which takes what it scheduled, says that."""
    from gatekit.series.runloop import progress_counter
    assert (progress_counter(8, 8, 24), progress_counter(3, 6, 6), progress_counter(7, 8)) == ("[8/≤24]", "[3/6]",
                                                                                                 "[7/8]")
    values = [10.0 + 0.5 * (k % 3) for k in range(12)]
    sequential = {"policy": "sequential"}
    off = {"config": {"mode": "a"}, "runs": _runs("off", values)}
    on = {"config": {"mode": "b"}, "runs": _runs("on", values)}
    root = tmp_path / "s"
    root.mkdir()
    gate = fake_gate("small", "Sequential", ["mode"], gate=sequential)
    del gate["gate"]["n"], gate["gate"]["order"]
    write_toml(root / "gate.toml", gate)
    write_toml(root / "off.toml", off)
    write_toml(root / "on.toml", on)
    config = load_gate(root / "gate.toml")
    driver, lines = FakeDriver(), []
    SeriesRunner(config, config.arms["off"], config.arms["on"], driver=driver, report=lines.append,
                 load_reader_for=LoadScript()).start()
    counters = [line.split()[0] for line in lines if line.startswith("[")]
    assert counters[0] == "[1/≤24]" and len(counters) == len(driver.log)
    _, driver, lines = _series(tmp_path / "c", off, on)
    assert [line.split()[0] for line in lines if line.startswith("[")] == [f"[{k}/6]" for k in range(1, 7)]


def test_a_long_run_prints_a_heartbeat_with_its_elapsed_time_and_window_load() -> None:
    """Nothing was printed during a run (a real trainer's run takes minutes): a line every 30 s, told by an
    injected clock, with the run's window load so far; a late call prints one line, not the ones it missed."""
    from gatekit.records import LoadSample
    from gatekit.series.runloop import Heartbeat
    now = [100.0]
    samples: list[LoadSample] = []
    beat = Heartbeat("off-r2", lambda: samples, lambda line: None, 30.0, clock=lambda: now[0])
    beat.start()
    now[0] = 129.0
    assert beat.beat() is None
    now[0] = 130.0
    assert beat.beat() == "      off-r2 running: elapsed 30 s, no window sample yet"
    samples += [LoadSample(t_s=0.0, load1=6.5, load5=6.0, load15=5.0), LoadSample(t_s=1.0, load1=4.25, load5=6.0,
                                                                                  load15=5.0)]
    assert beat.beat() is None  # once per interval
    now[0] = 245.0  # called late: one line, and the next one is due at the next multiple of 30 s
    assert beat.beat() == "      off-r2 running: elapsed 145 s, window load1 max 6.50, last 4.25"
    now[0] = 249.0
    assert beat.beat() is None
    now[0] = 250.0
    assert beat.beat() is not None


def test_the_heartbeat_is_silent_when_off() -> None:
    from gatekit.series.runloop import Heartbeat
    lines: list[str] = []
    with Heartbeat("off-r1", lambda: (), lines.append, 0.0) as beat:
        assert beat._thread is None
    assert lines == []

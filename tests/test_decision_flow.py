"""The decision flow of a series, in-process: SeriesRunner with tests/fakes.py's FakeDriver (no process).

What gatekit decides from run outcomes — adoption, a contaminated pair retried once, the interleaved order, a
failed run's pair re-run — does not need a trainer process; tests/test_gate_run.py covers the same flow
through `gate run` (the fixture trainer's arm files, played in process) and the process contract with real
trainer processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Collection

import pytest

from gatekit.config import load_gate
from gatekit.driver import Driver
from gatekit.errors import ConfigError, PreflightError
from gatekit.series.runner import SeriesRunner
from tests.conftest import write_toml
from tests.fakes import FakeDriver, LoadScript, fake_gate

# The seed finding's §6 gate (tests/fixtures/seed_gate.toml), run by the fake driver.
SEED_GATE: dict[str, Any] = fake_gate("s4b-12500", "S4b ssim_reduce = gpu vs host", ["ssim_reduce"])
# seed_s6.csv: the unrounded runs behind the seed's printed table (its means 124.5549 / 122.7680)
SEED_OFF = {"off-r1": (125.0938, 36.125), "off-r2": (124.6050, 36.154), "off-r3": (123.9659, 36.099)}
SEED_ON = {"on-r1": (123.9873, 36.209), "on-r2": (122.0621, 36.183), "on-r3": (122.25446, 36.145)}


def _runs(values: dict[str, tuple[float, float]]) -> dict[str, dict[str, float]]:
    return {label: {"train_elapsed_s": t, "psnr_db": psnr} for label, (t, psnr) in values.items()}


def _series(root: Path, off: dict[str, Any], on: dict[str, Any], *, loaded: Collection[str] = (),
            **sections: dict[str, Any]) -> tuple[Any, FakeDriver]:
    """Run a series in `root` with the fake driver; returns the SeriesResult and the driver (its log)."""
    root.mkdir(parents=True, exist_ok=True)
    gate = {k: (dict(v) if isinstance(v, dict) else list(v)) for k, v in SEED_GATE.items()}
    for name, values in sections.items():
        gate[name] = {**gate[name], **values}
    write_toml(root / "gate.toml", gate)
    write_toml(root / "off.toml", {"config": {"ssim_reduce": "host"}, **off})
    write_toml(root / "on.toml", {"config": {"ssim_reduce": "gpu"}, **on})
    config = load_gate(root / "gate.toml")
    driver = FakeDriver()
    runner = SeriesRunner(config, config.arms["off"], config.arms["on"], driver=driver,
                          load_reader_for=LoadScript(set(loaded)))
    return runner.start(), driver


def test_the_fake_driver_is_a_driver(tmp_path: Path) -> None:
    driver = FakeDriver.from_options({"argv": ["ignored"]}, source=tmp_path / "gate.toml", base_dir=tmp_path)
    assert isinstance(driver, Driver)
    with pytest.raises(ConfigError, match="driver.argvs: unknown key"):
        FakeDriver.from_options({"argvs": []}, source=tmp_path / "gate.toml", base_dir=tmp_path)


def test_seed_example_is_adopted_with_the_published_delta(tmp_path: Path) -> None:
    result, _ = _series(tmp_path / "g", {"runs": _runs(SEED_OFF)}, {"runs": _runs(SEED_ON)})
    finding = result.finding.to_dict()
    # by hand: off 373.6647 / 3 = 124.5549, on 368.30386 / 3 = 122.767953; Δ = 122.767953 / 124.5549 − 1
    delta_by_hand = (368.30386 / 3) / (373.6647 / 3) * 100 - 100
    assert delta_by_hand == pytest.approx(-1.43467, abs=1e-5)
    assert finding["stats"]["delta_pct"] == pytest.approx(delta_by_hand, rel=1e-9)
    assert round(finding["stats"]["delta_pct"], 4) == -1.4347  # the seed's printed Δ
    assert finding["stats"]["mean_off"] == pytest.approx(124.5549) and finding["stats"]["mean_on"] == pytest.approx(
        122.767953, abs=1e-6)
    # σ_off 0.454 % × 2 = 0.908 % < floor 1 %: the threshold is the floor
    assert finding["stats"]["threshold_pct"] == pytest.approx(1.0)
    # PSNR Δ by hand: (36.209 + 36.183 + 36.145 − 36.125 − 36.154 − 36.099) / 3 = 0.159 / 3 = +0.053 dB
    assert finding["guards"]["psnr_db"]["delta"] == pytest.approx(0.053, abs=1e-9)
    assert finding["guards"]["psnr_db"]["pass"] is True
    assert finding["verdict"]["decision"] == "adopted"
    assert all(run["used"] for run in finding["runs"])


def test_execution_order_is_abab(tmp_path: Path) -> None:
    result, driver = _series(tmp_path / "g", {"runs": _runs(SEED_OFF)}, {"runs": _runs(SEED_ON)})
    assert driver.log == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]
    finding = result.finding.to_dict()
    assert [run["label"] for run in sorted(finding["runs"], key=lambda r: r["order"])] == driver.log
    for label in driver.log:  # the driver left each run's result file where the request said
        assert (result.series_dir / label / "result").is_file()


def test_a_contaminated_pair_is_retried_once_and_the_retry_used(tmp_path: Path) -> None:
    # leave-one-out σ so rule (ii) can fire at n = 3: off-r2 is 20 % slow AND loaded (9.0 > 1.5 × median 1.0)
    off = {"off-r1": (10.0, 30.0), "off-r2": (12.0, 30.0), "off-r3": (10.02, 30.0), "off-r4": (10.01, 30.0)}
    on = {"on-r1": (9.0, 30.0), "on-r2": (9.1, 30.0), "on-r3": (8.9, 30.0), "on-r4": (9.0, 30.0)}
    result, driver = _series(tmp_path / "g", {"runs": _runs(off)}, {"runs": _runs(on)}, loaded={"off-r2"},
                             rules={"sigma_ref": "leave_one_out"})
    assert driver.log == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3", "off-r4", "on-r4"]  # once
    finding = result.finding.to_dict()
    runs = {run["label"]: run for run in finding["runs"]}
    assert runs["off-r2"]["load_evidence"] and runs["off-r2"]["contaminated"] and not runs["off-r2"]["used"]
    assert "contaminated" in runs["off-r2"]["reason"] and not runs["on-r2"]["used"]
    assert runs["off-r4"]["retry_of"] == 2 and runs["on-r4"]["retry_of"] == 2
    assert runs["off-r4"]["used"] and runs["on-r4"]["used"]
    assert not any(run["contaminated"] for label, run in runs.items() if label != "off-r2")
    # the statistics use the retry: off (10.0 + 10.02 + 10.01) / 3 = 10.01, on (9.0 + 8.9 + 9.0) / 3
    assert finding["stats"]["mean_off"] == pytest.approx(10.01)
    assert finding["stats"]["mean_on"] == pytest.approx(26.9 / 3)
    assert finding["stats"]["delta_pct"] == pytest.approx((26.9 / 3 / 10.01 - 1) * 100)
    assert finding["verdict"]["decision"] == "adopted"


def test_a_failed_run_makes_its_pair_run_again(tmp_path: Path) -> None:
    off = {"off-r1": (10.0, 30.0), "off-r3": (9.9, 30.0), "off-r4": (10.1, 30.0)}
    on = {"on-r1": (9.0, 30.0), "on-r2": (9.1, 30.0), "on-r3": (8.9, 30.0), "on-r4": (9.1, 30.0)}
    result, driver = _series(tmp_path / "g", {"runs": _runs(off), "fail": {"off-r2": "exit code 1"}},
                             {"runs": _runs(on)})
    assert driver.log == ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3", "off-r4", "on-r4"]
    finding = result.finding.to_dict()
    runs = {run["label"]: run for run in finding["runs"]}
    assert runs["off-r2"]["exit_code"] == 1 and not runs["off-r2"]["used"]
    assert runs["off-r2"]["reason"].startswith("failed: exit code 1") and "re-run as r4" in runs["off-r2"]["reason"]
    assert "train_elapsed_s" not in runs["off-r2"]["metrics"]
    assert not runs["on-r2"]["used"] and runs["on-r2"]["reason"].startswith("pair partner")
    assert runs["off-r4"]["retry_of"] == 2 and runs["off-r4"]["used"] and runs["on-r4"]["used"]
    # by hand: off (10.0 + 9.9 + 10.1) / 3 = 10.0, on (9.0 + 8.9 + 9.1) / 3 = 9.0 → −10 %
    assert finding["stats"]["n_off"] == 3 and finding["stats"]["delta_pct"] == pytest.approx(-10.0)
    assert finding["verdict"]["decision"] == "adopted"


def test_a_loaded_machine_stops_the_series_before_anything_runs(tmp_path: Path) -> None:
    # the preflight reads the load through the same injected reader as the run windows (label "preflight")
    with pytest.raises(PreflightError) as refused:
        _series(tmp_path / "g", {"runs": _runs(SEED_OFF)}, {"runs": _runs(SEED_ON)}, loaded={"preflight"},
                rules={"load_limit": 6.0})
    assert str(refused.value) == ("preflight failed, nothing ran: load calm: load1 9.00 > rules.load_limit 6; "
                                  "wait for the machine to calm down, or state the limit this machine can keep: "
                                  "rules.load_limit in the gate file, or --load-limit N on gate run "
                                  "(preregistered like the key)")
    assert not (tmp_path / "g" / "runs").exists()  # no series folder, no predecision: nothing was registered
    calm, driver = _series(tmp_path / "calm", {"runs": _runs(SEED_OFF)}, {"runs": _runs(SEED_ON)},
                           rules={"load_limit": 6.0})
    assert len(driver.log) == 6 and calm.finding.decision == "adopted"


def test_a_machine_not_ready_at_preflight_is_exit_4_and_a_gate_that_cannot_run_exit_2(tmp_path: Path) -> None:
    """A refusal for the machine's state alone (the load here) is the machine's fault, exit 4, as a full disk:
    a bisect probe or campaign gate refused so runs again on resume instead of being recorded as the commit's or
    the gate's. A refusal the gate itself causes (an arm config that is not there), alone or beside the load,
    stays exit 2: running again cannot fix it."""
    from gatekit.errors import MachineNotReady
    from gatekit.preflight import refuse_failed
    from gatekit.records import CheckResult

    with pytest.raises(MachineNotReady) as loaded:
        _series(tmp_path / "g", {"runs": _runs(SEED_OFF)}, {"runs": _runs(SEED_ON)}, loaded={"preflight"},
                rules={"load_limit": 6.0})
    assert loaded.value.exit_code == 4
    load = CheckResult("load calm", False, "load1 9.00 > rules.load_limit 6", machine=True)
    missing = CheckResult("arm config off", False, "off.toml: not found (arms.off.config)")
    for checks, error, code in (([load, CheckResult("gate file", True, "")], MachineNotReady, 4),
                                ([load, missing], PreflightError, 2), ([missing], PreflightError, 2)):
        with pytest.raises(error) as refused:
            refuse_failed(checks)
        assert type(refused.value) is error and refused.value.exit_code == code
    refuse_failed([CheckResult("gate file", True, "")])  # nothing failed: nothing raised


def test_gate_run_on_a_machine_not_ready_exits_4_and_runs_once_it_is(fake_gate_dir, monkeypatch) -> None:
    """The exit code crosses the process boundary a bisect or campaign reads: `gate run` on a machine whose
    load is over the limit exits 4 with one line, runs nothing, and the same command runs once the load falls."""
    import os

    from tests.conftest import gate_invoke

    g = fake_gate_dir(off={"default_elapsed": 10.0}, on={"default_elapsed": 9.0}, rules={"load_limit": 6.0})
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    refused = gate_invoke("run", "off", "on", cwd=g.root)
    assert refused.returncode == 4, refused.stderr
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("gate: error: ")]
    assert line.startswith("gate: error: preflight failed, nothing ran: load calm: load1 9.00 > rules.load_limit 6")
    assert g.series_dirs() == []
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5, 0.5, 0.5))
    assert gate_invoke("run", "off", "on", cwd=g.root).returncode == 0


class _BusyMachine:
    """A load reader for a machine loaded in every run window (1000 per core) but calm at the preflight."""

    def __call__(self, label: str) -> Any:
        load = 1.0 if label == "preflight" else 1000.0
        return lambda: {"load1": load, "load5": load, "load15": load}


def test_a_busy_machine_that_flags_every_run_is_invalid_and_says_why_and_what_next(tmp_path: Path) -> None:
    from gatekit.report.terminal import summary
    from gatekit.verdict import MORE_RUNS, QUIETER_MACHINE
    gate = fake_gate("busy", "Busy machine", ["ssim_reduce"], rules={"load_per_core_limit": 1.0, "evidence": "load1"})
    del gate["gate"]["n"], gate["gate"]["order"]
    gate["gate"]["policy"] = "sequential"
    write_toml(tmp_path / "gate.toml", gate)
    for arm, value in (("off", 10.0), ("on", 9.0)):
        write_toml(tmp_path / f"{arm}.toml", {"config": {"ssim_reduce": arm}, "runs": {
            f"{arm}-r{k}": {"train_elapsed_s": value + 0.01 * (k % 3), "psnr_db": 30.0} for k in range(1, 13)}})
    config = load_gate(tmp_path / "gate.toml")
    driver = FakeDriver()
    finding = SeriesRunner(config, config.arms["off"], config.arms["on"], driver=driver,
                           load_reader_for=_BusyMachine()).start().finding
    assert len(driver.log) == 16  # look 1's 8 runs and their 8 replacements, all flagged
    assert finding.decision == "invalid"
    assert finding.verdict.reasons == (
        "fewer than two used runs in an arm (off 0, on 0): the machine was busy: 16 of 16 runs flagged by load1 "
        "mean per core on 16, and no replacement left",
        f"next step: {QUIETER_MACHINE}; {MORE_RUNS}")
    shown = summary(finding)
    assert "guard psnr_db: not evaluated (metric missing from the used runs" in shown and "FAIL" not in shown


def test_next_steps_follow_a_verdict_that_could_not_decide() -> None:
    from gatekit.verdict import MORE_RUNS, QUIETER_MACHINE, Decision, next_step
    assert next_step(Decision.INCONCLUSIVE, busy=False) == f"next step: {MORE_RUNS}"
    assert next_step(Decision.INCONCLUSIVE, busy=True) == f"next step: {MORE_RUNS}; or {QUIETER_MACHINE}"
    assert next_step(Decision.INVALID, busy=True) == f"next step: {QUIETER_MACHINE}; {MORE_RUNS}"
    # an invalid series the machine did not cause says what to fix in its own reasons; a decided one needs none
    assert next_step(Decision.INVALID, busy=False) is None
    assert all(next_step(d, busy=True) is None for d in Decision if d not in (Decision.INVALID, Decision.INCONCLUSIVE))


def test_gate_check_reports_cpu_pressure_where_the_os_has_it(tmp_path: Path) -> None:
    from gatekit.preflight import check_pressure
    gate = dict(SEED_GATE)
    write_toml(tmp_path / "gate.toml", {**gate, "rules": {**gate["rules"], "evidence": "psi", "psi_limit_pct": 20.0}})
    write_toml(tmp_path / "off.toml", {})
    write_toml(tmp_path / "on.toml", {})
    psi = load_gate(tmp_path / "gate.toml")
    assert check_pressure(psi, {"load1": 0.5}) == []  # no pressure-stall information: nothing to show
    busy = check_pressure(psi, {"load1": 0.5, "psi_cpu_avg10": 42.0})
    assert [c.name for c in busy] == ["CPU pressure"] and busy[0].detail == (
        "cpu stall 42.0 % of the last 10 s > rules.psi_limit_pct 20 %; runs started now would be flagged "
        "(rules.evidence = \"psi\"): wait for the machine to calm down")
    assert busy[0].ok and busy[0].flags_runs  # gate run starts; gate check warns and exits non-zero
    calm = check_pressure(psi, {"psi_cpu_avg10": 3.0})[0]
    assert calm.detail == "cpu stall 3.0 % of the last 10 s ≤ rules.psi_limit_pct 20 %" and not calm.flags_runs
    write_toml(tmp_path / "load1.toml", {**gate, "rules": {**gate["rules"], "evidence": "load1"}})
    shown_only = check_pressure(load_gate(tmp_path / "load1.toml"), {"psi_cpu_avg10": 42.0})[0]
    assert shown_only.ok and not shown_only.flags_runs and shown_only.detail == ("cpu stall 42.0 % of the last 10 s > rules.psi_limit_pct 20 % "
                                                   "(not evidence here: rules.evidence = \"load1\")")


def test_a_finding_written_before_verdicts_explained_themselves_still_verifies(tmp_path: Path) -> None:
    import json

    from gatekit.verdict import without_explanations
    from gatekit.verify import verify_series
    now = ("fewer than two used runs in an arm (off 0, on 0): the machine was busy: 16 of 16 runs flagged by load1",
           "look 1: …", "next step: run the gate again when the machine is quieter")
    assert without_explanations(now) == ("fewer than two used runs in an arm (off 0, on 0)", "look 1: …")
    assert without_explanations(without_explanations(now)) == without_explanations(now)
    gate = fake_gate("busy", "Busy machine", ["ssim_reduce"], rules={"load_per_core_limit": 1.0, "evidence": "load1"})
    del gate["gate"]["n"], gate["gate"]["order"]
    gate["gate"]["policy"] = "sequential"
    write_toml(tmp_path / "gate.toml", gate)
    for arm in ("off", "on"):
        write_toml(tmp_path / f"{arm}.toml", {"config": {"ssim_reduce": arm}, "runs": {
            f"{arm}-r{k}": {"train_elapsed_s": 10.0 + k / 100, "psnr_db": 30.0} for k in range(1, 13)}})
    config = load_gate(tmp_path / "gate.toml")
    result = SeriesRunner(config, config.arms["off"], config.arms["on"], driver=FakeDriver(),
                          load_reader_for=_BusyMachine()).start()
    from gatekit.finding import load_finding
    written = next(p for p in result.finding_paths if p.suffix == ".json")
    document = json.loads(written.read_text())

    def write_twins(reasons: list[str]) -> None:  # the JSON and its TOML twin, as a gatekit of then wrote them
        document["verdict"]["reasons"] = reasons
        document["verdict"].pop("reason_codes", None)  # (reasons had no codes then either)
        written.write_text(json.dumps(document))
        written.with_suffix(".toml").write_text(load_finding(written).to_toml())

    write_twins(list(without_explanations(document["verdict"]["reasons"])))  # as written then
    verify_series(result.series_dir, written)  # the same decision, in the words of then
    write_twins(["fewer than two used runs in an arm (off 1, on 0)"])  # a different one
    with pytest.raises(Exception, match="differs from the finding recomputed"):
        verify_series(result.series_dir, written)


def test_load_limit_on_the_command_line_is_checked_and_preregistered_like_the_key(tmp_path: Path) -> None:
    """The fix a refused preflight names: --load-limit overrides rules.load_limit, is validated like it, and is
    what the predecision states (so the series is judged by the limit it ran under)."""
    from gatekit.errors import ConfigError
    from gatekit.preflight import check_load
    from gatekit.prereg import DecisionSpec
    write_toml(tmp_path / "gate.toml", fake_gate("busy", "Busy", ["mode"], rules={"load_limit": 6.0}))
    config = load_gate(tmp_path / "gate.toml")
    assert not check_load(config, 9.0).ok
    fitted = config.with_overrides(load_limit=12.0)
    assert fitted.rules.load_limit == 12.0 and check_load(fitted, 9.0).ok
    frozen = DecisionSpec.from_gate(fitted, "off", "on").to_dict()["rules"]  # what the predecision states
    assert frozen["load_limit"] == 12.0 and DecisionSpec.from_gate(config, "off", "on").to_dict()["rules"][
        "load_limit"] == 6.0
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ConfigError, match="--load-limit: must be a positive number"):
            config.with_overrides(load_limit=bad)


def test_arm_configs_that_already_agree_on_the_expected_difference_fail_preflight(tmp_path: Path) -> None:
    """Both arm files setting the declared expect_diff key to one value would spend every run and end invalid:
    the preflight (gate check and gate run) says so first; a key only one file states is left to the trainer's
    echo."""
    from gatekit.preflight import check_expect_diff
    write_toml(tmp_path / "gate.toml", fake_gate("same", "Same", ["optimizer", "optim.lr"]))
    config = load_gate(tmp_path / "gate.toml")
    arms = [config.arms["off"], config.arms["on"]]
    write_toml(tmp_path / "off.toml", {"optimizer": "host", "optim": {"lr": 0.1}})
    write_toml(tmp_path / "on.toml", {"optimizer": "resident", "optim": {"lr": 0.1}})
    (failed,) = check_expect_diff(config, arms)
    assert not failed.ok and "both set optim.lr = 0.1, a key gate.expect_diff says the arms differ in" in failed.detail
    write_toml(tmp_path / "on.toml", {"optimizer": "host", "optim": {"lr": 0.2}})
    (failed,) = check_expect_diff(config, arms)
    assert not failed.ok and 'both set optimizer = "host"' in failed.detail
    write_toml(tmp_path / "on.toml", {"optimizer": "resident", "optim": {"lr": 0.2}})
    assert [c.ok for c in check_expect_diff(config, arms)] == [True]
    write_toml(tmp_path / "on.toml", {"optim": {"lr": 0.1}})  # on states no optimizer: the trainer's echo decides
    assert not check_expect_diff(config, arms)[0].ok  # optim.lr is stated by both, and agrees
    write_toml(tmp_path / "on.toml", {"layers": 3})
    assert check_expect_diff(config, arms) == []  # nothing both state: nothing to say

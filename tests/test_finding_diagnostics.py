"""Diagnostics and their warnings in the finding (classic policy), on hand-made evidence."""

from __future__ import annotations

import math

import pytest
from scipy import stats as sps

from gatekit.config import GuardSpec, RulesSpec, ThresholdSpec
from gatekit.analysis import SeriesEvidence, analyze
from gatekit.prereg import DecisionSpec
from gatekit.records import RunOutcome, RunRecord, WindowSummary
from tests.test_seed_s6 import analyze as analyze_csv


def spec(**changes: object) -> DecisionSpec:
    base = dict(gate_id="diag", title="", off_arm="off", on_arm="on", n=3, order="abab", seed=0,
                primary="train_elapsed_s", direction="lower", expect_diff=(), threshold=ThresholdSpec(),
                guards=(GuardSpec("psnr_db", "higher", 0.05),), rules=RulesSpec())
    return DecisionSpec(**{**base, **changes})  # type: ignore[arg-type]


def evidence(off: list[float], on: list[float], *, order: str = "abab", psnr: tuple[list[float], list[float]]
             | None = None, **changes: object) -> SeriesEvidence:
    """Runs in `order` (abab: off first every round; abba: alternating)."""
    records = []
    for k, (t_off, t_on) in enumerate(zip(off, on), 1):
        pair = [("off", t_off), ("on", t_on)]
        if order == "abba" and k % 2 == 0:
            pair.reverse()
        for arm, value in pair:
            index = k - 1
            psnr_value = (psnr[0] if arm == "off" else psnr[1])[index] if psnr else 30.0
            outcome = RunOutcome(exit_code=0, process_wallclock_s=value + 0.1,
                                 metrics={"train_elapsed_s": value, "psnr_db": psnr_value})
            records.append(RunRecord(order=len(records) + 1, arm=arm, label=f"{arm}-r{k}", pair=k,
                                     outcome=outcome, window=WindowSummary(3, 1.0, 1.0)))
    return SeriesEvidence(series_id="s", finding_id="f", spec=spec(order=order, **changes), records=tuple(records))


def test_seed_finding_carries_the_diagnostics() -> None:
    finding = analyze_csv("seed_s6.csv")
    s = finding["stats"]
    off = [125.0938, 124.6050, 123.9659]
    on = [123.9873, 122.0621, 122.25446]
    assert s["gm_delta_pct"] == pytest.approx(100 * (sps.gmean(on) / sps.gmean(off) - 1), rel=1e-9)
    ref = sps.ttest_ind([math.log(v) for v in on], [math.log(v) for v in off], equal_var=False, alternative="less")
    assert s["p_one_sided"] == pytest.approx(ref.pvalue, rel=1e-9)
    assert s["welch_df"] == pytest.approx(ref.df, rel=1e-9)
    assert s["ci_low_pct"] < 0 < s["ci_high_pct"] and s["ci_level"] == 0.95
    assert s["mde_pct"] == pytest.approx(1.83, abs=0.01)  # larger than the Δ it adopted
    assert s["pairs_sign_p"] == 0.125 and "hl_shift_pct" not in s  # n = 3: no Hodges–Lehmann
    assert s["order_gap_runs"] == 1.0
    warnings = " ".join(finding["verdict"]["warnings"])
    assert "contains 0 %: no change is not ruled out" in warnings  # adopted on a CI that includes 0
    assert "σ_on" not in warnings  # 0.8637 % is less than twice 0.4541 %
    assert "inside its own noise" not in warnings  # PSNR +0.053, CI clear of −0.05
    assert finding["guards"]["psnr_db"]["within_noise"] is False
    assert finding["stats"]["delta_pct"] == pytest.approx(-1.4347, abs=5e-5)  # the classic Δ is unchanged
    assert finding["verdict"]["decision"] == "adopted"
    kv = [s for s in finding["sections"] if s["type"] == "kv"][-1]
    assert kv["items"][0]["key"] == "Δ as a ratio of geometric means"


def test_noisy_on_arm_is_warned_about() -> None:
    data = analyze(evidence([10.0, 10.1, 9.9], [9.0, 9.5, 8.5])).to_dict()
    assert data["stats"]["sigma_on_pct"] > 2 * data["stats"]["sigma_off_pct"]
    assert any("more than twice σ_off" in w for w in data["verdict"]["warnings"])


def test_abab_drift_that_decides_is_warned_about() -> None:
    # a pure drift of −0.1 s per run plus a true −3.5 % effect: abab puts every on run one run later,
    # so Δ picks up one run of drift (≈ −1 %) and clears a 4.08 % threshold only because of it
    off = [10.0, 9.8, 9.6]
    on = [9.559, 9.359, 9.159]
    data = analyze(evidence(off, on)).to_dict()
    s = data["stats"]
    assert data["verdict"]["decision"] == "adopted"
    assert s["drift_pct_per_run"] == pytest.approx(100 * -0.1 / ((sum(off) + sum(on)) / 6), rel=1e-9)
    assert s["order_bias_pct"] == pytest.approx(s["drift_pct_per_run"])
    assert any("biases Δ by" in w and "(rejected)" in w for w in data["verdict"]["warnings"])
    # the same runs in abba order: no position gap, no bias, no warning
    balanced = analyze(evidence(off, on, order="abba")).to_dict()
    assert balanced["stats"]["order_gap_runs"] == pytest.approx(1 / 3)  # 3 rounds cannot balance fully
    assert not any("biases Δ by" in w for w in analyze(evidence(off + [9.4], on + [8.959], order="abba", n=4))
                   .to_dict()["verdict"]["warnings"])


def test_guard_inside_its_noise_is_warned_about() -> None:
    data = analyze(evidence([10.0, 10.1, 9.9], [9.0, 9.1, 8.9],
                            psnr=([30.01, 30.05, 30.07], [30.02, 30.06, 30.08]))).to_dict()
    guard = data["guards"]["psnr_db"]
    assert guard["pass"] is True and guard["within_noise"] is True
    assert guard["ci_low"] < -0.05 < guard["ci_high"]
    assert any("guard psnr_db is decided by a point estimate inside its own noise" in w
               for w in data["verdict"]["warnings"])


def test_hodges_lehmann_from_four_runs_per_arm() -> None:
    data = analyze(evidence([10.0, 10.1, 9.9, 10.0], [9.0, 9.1, 8.9, 9.0], n=4)).to_dict()
    assert data["stats"]["hl_shift_pct"] == pytest.approx(-10.0, abs=1e-9)  # median of the 16 log ratios

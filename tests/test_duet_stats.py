"""The duet policy's version 1 statistics (a v1 series re-analyses with them): the OLS fit against hand values
and numpy, the slot effect recovered, the rule against scipy's t, the decision through the policy object, and
A/A rates in a small simulation. Version 2 is tests/test_duet_v2.py."""

from __future__ import annotations

import json
import math
import os
import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats as sps

from gatekit.policies import duet
from gatekit.analysis import records_table
from gatekit.cli import main
from gatekit.config import GuardSpec, RulesSpec, ThresholdSpec
from gatekit.finding import DuetInfo
from gatekit.policy_descriptors import policy_for
from gatekit.records import RunOutcome, RunRecord, WindowSummary
from gatekit.runtable import RunTable
from gatekit.simulate import Scenario, simulate
from gatekit.verdict import CODE_NAMES, Decision, Verdict
from tests.conftest import gate_invoke, make_gate, write_toml

PRIMARY = "train_elapsed_s"


def test_fit_by_hand_and_against_lstsq() -> None:
    # balanced: Δ̂ = mean d = 0.01, ŝ = (mean d_odd − mean d_even)/2 = (0.025 − (−0.005))/2 = 0.015;
    # residuals ±0.005 → RSS 1e-4, σ̂² = 1e-4/(4 − 2) = 5e-5, SE = sqrt(5e-5/4) for both
    d, sigma = [0.03, -0.01, 0.02, 0.00], [1.0, -1.0, 1.0, -1.0]
    fit = duet.fit(d, sigma)
    assert fit.delta == pytest.approx(0.01, abs=1e-15)
    assert fit.slot == pytest.approx(0.015, abs=1e-15)
    assert fit.delta_se == pytest.approx(math.sqrt(5e-5 / 4), rel=1e-12)
    assert fit.slot_se == pytest.approx(math.sqrt(5e-5 / 4), rel=1e-12)
    assert fit.df == 2 and fit.critical == pytest.approx(sps.t.ppf(1 - duet.TEST_ALPHA, 2), rel=1e-12)
    # unbalanced, with a pair that shared a slot (σ = 0): the textbook OLS, coefficients and covariance
    d2 = np.array([0.012, -0.004, 0.018, 0.001, 0.009, 0.015, -0.002])
    s2 = np.array([1.0, -1.0, 1.0, -1.0, 1.0, 1.0, 0.0])
    x = np.column_stack([np.ones_like(s2), s2])
    coef, rss, _, _ = np.linalg.lstsq(x, d2, rcond=None)
    cov = float(rss[0]) / (len(d2) - 2) * np.linalg.inv(x.T @ x)
    fit2 = duet.fit(d2.tolist(), s2.tolist())
    assert (fit2.delta, fit2.slot) == pytest.approx(tuple(coef), rel=1e-10)
    assert (fit2.delta_se, fit2.slot_se) == pytest.approx((math.sqrt(cov[0, 0]), math.sqrt(cov[1, 1])), rel=1e-10)


def test_not_separable_without_both_slot_orders() -> None:
    fit = duet.fit([0.01, 0.02, 0.0, 0.01], [1.0, 1.0, 1.0, 1.0])
    assert math.isnan(fit.delta) and math.isnan(fit.delta_se)
    code = duet.pair_codes(np.array([[0.01, 0.02, 0.0, 0.01]]), np.ones(4), floor_pct=1.0, direction="lower")
    assert CODE_NAMES[int(code[0])] == "inconclusive"


def test_the_rule_is_the_t_test_with_n_minus_2_df_and_the_floor() -> None:
    rng = np.random.default_rng(7)
    n = 6
    sigma = duet.parity_signs(np.arange(1, n + 1))
    d = rng.normal(-0.02, 0.01, (400, n)) + 0.01 * sigma  # a 2 % gain, a 1 % slot effect
    codes = duet.pair_codes(d, sigma, floor_pct=1.0, direction="lower")
    c = sps.t.ppf(1 - duet.TEST_ALPHA, n - 2)
    for row, code in zip(d, codes):
        res = sps.linregress(sigma, row)  # slope = ŝ, intercept = Δ̂ (balanced: uncorrelated)
        t = res.intercept / res.intercept_stderr
        lo, hi = res.intercept - c * res.intercept_stderr, res.intercept + c * res.intercept_stderr
        if t < -c and -res.intercept >= -math.log1p(-0.01):
            expected = "adopted"
        elif lo > math.log1p(-0.01) and hi < math.log1p(0.01):
            expected = "equivalent"
        elif -lo < -math.log1p(-0.01):
            expected = "rejected"
        else:
            expected = "inconclusive"
        assert CODE_NAMES[int(code)] == expected
    assert {CODE_NAMES[int(c)] for c in codes} >= {"adopted", "inconclusive"}


def test_the_slot_effect_is_recovered_and_shared_noise_cancels() -> None:
    rng = np.random.default_rng(11)
    n, draws = 8, 4000
    sigma = duet.parity_signs(np.arange(1, n + 1))
    slot, effect = math.log1p(0.01), math.log1p(-0.02)
    shared = rng.normal(0, 0.10, (draws, n))  # 10 % host noise both runs see
    on_slot1 = sigma > 0
    off = shared + slot * ~on_slot1 + rng.normal(0, 0.005, (draws, n))
    on = shared + effect + slot * on_slot1 + rng.normal(0, 0.005, (draws, n))
    delta, delta_se, s_hat, s_se = duet.fit_arrays(on - off, sigma)
    assert float(np.mean(s_hat)) == pytest.approx(slot, abs=3 * float(np.std(s_hat)) / math.sqrt(draws))
    assert float(np.mean(delta)) == pytest.approx(effect, abs=3 * float(np.std(delta)) / math.sqrt(draws))
    # the spread is the non-shared noise's: sqrt(2)·0.5 % / sqrt(n), not the 10 % the host adds
    assert float(np.std(delta)) == pytest.approx(math.sqrt(2) * 0.005 / math.sqrt(n), rel=0.05)
    # the interval covers the slot effect at its level
    c = sps.t.ppf(1 - duet.TEST_ALPHA, n - 2)
    covered = np.mean(np.abs(s_hat - slot) <= c * s_se)
    assert covered == pytest.approx(duet.INTERVAL_LEVEL, abs=0.02)


@pytest.mark.parametrize("slot_effect", [1.0, -1.0])
def test_false_adoption_at_most_5_pct_with_slot_effect_and_shared_noise(slot_effect: float) -> None:
    # CV 5 % of non-shared noise: large enough that the floor does not hide the test's own error rate
    # the test is not vacuous: it spends much of its α (version 3 less under normal noise, its critical values
    # the largest over normal and two-speed-state noise: 3.2 % at 10 pairs, 0.89 % at 12, where c is 3.16)
    for policy, n, least in (("duet-v2", 4, 3.0), ("duet-v2", 8, 3.0), ("duet", 10, 2.0), ("duet", 12, 0.5)):
        result = simulate(policy, Scenario(cv_off_pct=5.0, shared_cv_pct=10.0, slot_effect_pct=slot_effect, n=n),
                          draws=40_000, seed=3)
        assert least <= result.adopted.pct <= 5.0 + 3 * result.adopted.se_pct
        assert result.runs_per_arm == n
    quiet = simulate("duet", Scenario(cv_off_pct=0.5, shared_cv_pct=10.0, slot_effect_pct=slot_effect, n=10),
                     draws=20_000, seed=3)
    assert quiet.adopted.pct <= 0.1 and quiet.rates["equivalent"].pct > 80  # the floor, shared noise gone
    power = simulate("duet", Scenario(cv_off_pct=0.5, shared_cv_pct=10.0, slot_effect_pct=slot_effect, n=10,
                                      effect_pct=-2.0), draws=20_000, seed=3)
    assert power.adopted.pct >= 99.0


def test_simulation_matches_the_scalar_decision() -> None:
    rng = np.random.default_rng(5)
    n = 6
    off_log = rng.normal(0, 0.01, (30, n))
    on_log = off_log + rng.normal(-0.012, 0.006, (30, n))
    codes, runs = policy_for("duet", 1).simulate(off_log, on_log, ThresholdSpec())
    assert (runs == n).all()
    for k in range(30):
        records = _records(np.exp(off_log[k]).tolist(), np.exp(on_log[k]).tolist())
        decided = _decide(records)
        assert decided.verdict.decision.value == CODE_NAMES[int(codes[k])]


# -- through the policy object ------------------------------------------------------------------------------

def _records(off: list[float], on: list[float], slots: tuple[str, str] | None = ("cuda:0", "cuda:1"),
             guard: tuple[list[float], list[float]] | None = None) -> list[RunRecord]:
    records, order = [], 0
    for k, (off_value, on_value) in enumerate(zip(off, on), start=1):
        off_slot, on_slot = (slots if k % 2 == 1 else slots[::-1]) if slots else (None, None)
        for arm, value, slot, index in (("off", off_value, off_slot, 0), ("on", on_value, on_slot, 1)):
            order += 1
            metrics = {PRIMARY: value, **({"psnr": guard[index][k - 1]} if guard else {})}
            records.append(RunRecord(order, arm, f"{arm}-r{k}", k, RunOutcome(0, value, metrics=metrics),
                                     WindowSummary(samples=3, load1_mean=0.1, load1_max=0.2), slot=slot))
    return records


def _decide(records: list[RunRecord], guards: tuple[GuardSpec, ...] = (),  # type: ignore[no-untyped-def]
            version: int = 1):
    policy = policy_for("duet", version)
    table = policy.classify(records_table(records, PRIMARY), RulesSpec(), {}, 8)
    classic = Verdict(Decision.REJECTED, ("classic reason",), ())
    return policy.decide(classic, table, records, off_arm="off", on_arm="on", primary=PRIMARY, direction="lower",
                         guards=guards, floor_pct=1.0, warnings=())


def test_policy_reads_slots_reports_the_slot_effect_and_round_trips() -> None:
    # on is 3 % faster; slot 1 is 1 % slower: on on slot 1 in odd pairs
    off = [100.0 * (1.01 if k % 2 == 0 else 1.0) * (1 + 0.001 * (-1) ** (k // 2)) for k in range(1, 9)]
    on = [100.0 * 0.97 * (1.01 if k % 2 == 1 else 1.0) for k in range(1, 9)]
    decided = _decide(_records(off, on))
    info = decided.duet
    assert decided.verdict.decision is Decision.ADOPTED
    assert info is not None and info.slots == ("cuda:0", "cuda:1") and info.n_pairs == 8
    assert info.delta_pct == pytest.approx(-3.0, abs=0.1)
    assert info.slot_effect_pct == pytest.approx(1.0, abs=0.1)
    assert info.slot_ci_low_pct < info.slot_effect_pct < info.slot_ci_high_pct
    assert any(r.startswith("slot effect (cuda:1 minus cuda:0): +1.0") for r in decided.verdict.reasons)
    assert "classic rule beside it" in decided.verdict.reasons[-1]
    assert DuetInfo.from_dict(info.to_dict()) == info
    # the slots named the other way round: slot 0 is where off ran in pair 1, whatever its name
    renamed = _decide(_records(off, on, slots=("cuda:1", "cuda:0"))).duet
    assert renamed.slots == ("cuda:1", "cuda:0") and renamed.slot_effect_pct == pytest.approx(info.slot_effect_pct)
    # no slot recorded: the swap rule's parity gives the same signs
    assert _decide(_records(off, on, slots=None)).duet.delta_pct == pytest.approx(info.delta_pct, rel=1e-12)


def test_policy_guard_and_too_noisy() -> None:
    rng = np.random.default_rng(2)
    off = (100 * np.exp(rng.normal(0, 0.001, 8))).tolist()
    on = (97 * np.exp(rng.normal(0, 0.001, 8))).tolist()
    psnr_off = [30.0] * 8
    spec = GuardSpec("psnr", "higher", 0.05)
    failed = _decide(_records(off, on, guard=(psnr_off, [29.5 + 0.01 * k for k in range(8)])), (spec,))
    assert failed.verdict.decision is Decision.GUARD_FAILED and failed.duet.guards["psnr"].status == "fail"
    passed = _decide(_records(off, on, guard=(psnr_off, [30.0 + 0.001 * k for k in range(8)])), (spec,))
    assert passed.verdict.decision is Decision.ADOPTED
    noisy = _decide(_records(off, (97 * np.exp(rng.normal(0, 0.2, 8))).tolist()))
    assert noisy.verdict.decision is Decision.INCONCLUSIVE
    assert noisy.verdict.reasons[0].startswith("too noisy to tell")


def test_simulate_cli_options_and_errors() -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["simulate", "--policy", "duet", "--n", "10", "--cv", "2", "--shared-cv", "10",
                              "--slot-effect", "1", "--draws", "2000", "--json"])
    assert ok.exit_code == 0, ok.output
    assert '"shared_cv_pct": 10.0' in ok.output and '"slot_effect_pct": 1.0' in ok.output
    odd = runner.invoke(main, ["simulate", "--policy", "duet", "--n", "5", "--draws", "100"])
    assert odd.exit_code == 2 and "--n: a duet runs n pairs, an even number of at least 10" in odd.output
    few = runner.invoke(main, ["simulate", "--policy", "duet", "--n", "8", "--draws", "100"])
    assert few.exit_code == 2 and "at least 10" in few.output and "duet version 3" in few.output
    v2 = runner.invoke(main, ["simulate", "--policy", "duet-v2", "--n", "6", "--draws", "100"])
    assert v2.exit_code == 0, v2.output  # version 2 decides from 4 pairs
    slot = runner.invoke(main, ["simulate", "--policy", "classic", "--slot-effect", "1", "--draws", "100"])
    assert slot.exit_code == 2 and "--slot-effect: needs --policy duet" in slot.output


# -- end to end: a cpu duet of the fixture trainer, played in process by FakeDriver ------------------------

CORES = sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(CORES) < 2, reason="a cpu duet needs two cores")
def test_a_duet_gate_reports_its_slot_effect(tmp_path: Path, fake_machine: None) -> None:
    # on is 3 % faster; a run on the second slot takes 1 % longer, wherever the drawn slot order puts it
    jitter = [1.0, 1.001, 0.999, 1.0005, 0.9995, 1.0015, 0.9985, 1.002, 0.998, 1.0]
    elapsed = {f"off-r{k}": 100.0 * jitter[k - 1] for k in range(1, 11)}
    elapsed |= {f"on-r{k}": 97.0 * jitter[::-1][k - 1] for k in range(1, 11)}
    slower = {f"cpu:{CORES[1]}": 1.01}
    g = make_gate(tmp_path / "g", gate={"mode": "duet", "n": 10},
                  duet={"slots": [f"cpu:{CORES[0]}", f"cpu:{CORES[1]}"]},
                  rules={"evidence": "load1", "load_per_core_limit": 1000.0},
                  off={"sleep_s": 0.05, "elapsed": elapsed, "slot_factor": slower},
                  on={"sleep_s": 0.05, "elapsed": elapsed, "slot_factor": slower}, driver={"name": "fake"})
    gate = tomllib.loads(g.gate.read_text())
    gate["gate"].pop("order", None)  # a duet has no order
    write_toml(g.gate, gate)
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 0, done.stderr
    finding = json.loads(next((g.root / "findings").glob("*.json")).read_text())
    info = finding["duet"]
    assert finding["verdict"]["decision"] == "adopted" and info["n_pairs"] == 10
    assert info["slots"] == [f"cpu:{CORES[0]}", f"cpu:{CORES[1]}"]
    assert info["pairs_on_slot1"] == info["pairs_on_slot0"] == 5
    assert info["version"] == 3 and info["critical"] == duet.TWO_STATE_CRITICAL[10][0]
    assert info["delta_pct"] == pytest.approx(-3.0, abs=0.2)
    assert info["slot_effect_pct"] == pytest.approx(1.0, abs=0.2)
    assert "n=10 pairs, duet" in done.stdout and "slot effect" in done.stdout
    assert "Duet gate of `on` against `off`" in finding["sections"][0]["text"]
    estimate = next(i for i, sec in enumerate(finding["sections"]) if sec.get("text") == "Duet estimate")
    keys = [item["key"] for item in finding["sections"][estimate + 1]["items"]]
    assert f"slot effect (cpu:{CORES[1]} against cpu:{CORES[0]})" in keys
    # the duet table is recomputed from the journal like every other decided section
    series = next(p for p in (g.root / "runs").iterdir() if p.is_dir())
    finding_path = next((g.root / "findings").glob("*.json"))
    verified = gate_invoke("verify", str(series), str(finding_path), cwd=g.root)
    assert verified.returncode == 0, verified.stderr
    tampered = {**finding, "duet": {**info, "slot_effect_pct": 0.0}}
    finding_path.write_text(json.dumps(tampered))
    refused = gate_invoke("verify", str(series), str(finding_path), cwd=g.root)
    assert refused.returncode == 3 and "duet" in refused.stderr


def test_a_replacement_pair_takes_its_sign_from_its_slots_else_from_the_round_it_replaces() -> None:
    rows = []
    for order, (pair, arm, slot, used, retry_of) in enumerate([
            (1, "off", "cuda:0", True, None), (1, "on", "cuda:1", True, None),
            (2, "off", "cuda:1", False, None), (2, "on", "cuda:0", False, None),  # flagged, replaced by 5
            (3, "off", "cuda:0", True, None), (3, "on", "cuda:1", True, None),
            (4, "off", "cuda:1", True, None), (4, "on", "cuda:0", True, None),
            (5, "off", "cuda:0", True, 2), (5, "on", "cuda:1", True, 2)], start=1):
        rows.append({"order": order, "pair": pair, "arm": arm, "label": f"{arm}-r{pair}", "value": 1.0,
                     "used": used, "slot": slot, "retry_of": retry_of})
    table = RunTable.of(rows)
    pairs, slots = duet.pairs_of(table, "off", "on")
    assert slots == ("cuda:0", "cuda:1")
    assert [(p.round, p.sigma) for p in pairs] == [(1, 1.0), (3, 1.0), (4, -1.0), (5, 1.0)]  # as it ran
    unrecorded = RunTable.of([{**row, "slot": None} for row in rows])
    assert [(p.round, p.sigma) for p in duet.pairs_of(unrecorded, "off", "on")[0]] == [
        (1, 1.0), (3, 1.0), (4, -1.0), (5, -1.0)]  # round 2's parity: on on slot 0


def test_the_95_percent_ci_of_delta_is_t_0975_times_the_ols_standard_error() -> None:
    """Beside the rule's interval, the finding keeps the two-sided 95 % CI of Δ (for comparing gates),
    checked against scipy's t quantile and numpy's least squares."""
    import numpy as np
    import scipy.stats as sps

    from gatekit.policies.duet import _info, fit

    d = np.log(np.array([0.95, 0.97, 0.94, 0.98, 0.96, 0.95]))
    sign = np.array([1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    estimate = fit(d, sign)
    X = np.column_stack([np.ones(6), sign])
    beta, residual, *_ = np.linalg.lstsq(X, d, rcond=None)
    se = np.sqrt(residual[0] / 4 * np.linalg.inv(X.T @ X)[0, 0])
    info = _info(estimate, floor_pct=1.0, primary="adopted", decision="adopted", guards={}, slots=None,
                 balance=(3, 3), design=duet.DESIGNS[1])
    half = sps.t.ppf(0.975, 4) * se
    assert info.ci95_low_pct == pytest.approx(100 * (np.exp(beta[0] - half) - 1), rel=1e-9)
    assert info.ci95_high_pct == pytest.approx(100 * (np.exp(beta[0] + half) - 1), rel=1e-9)
    assert info.ci95_low_pct < info.ci_low_pct < info.ci_high_pct < info.ci95_high_pct  # 95 % is wider than 91 %

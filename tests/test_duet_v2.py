"""The duet policy's version 2: the Huber M-estimate against a hand-computed case, scipy's optimizer on the
Huber loss and statsmodels' RLM; the Thue–Morse slot order and its drawn mirror; the calibrated critical
values; a v1 predecision still decided by v1; `gate simulate`'s slot-step and slot-drift options."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import optimize

from gatekit.analysis import records_table
from gatekit.cli import main
from gatekit.config import RulesSpec, ThresholdSpec
from gatekit.policies import duet
from gatekit.policy_descriptors import describe, policy_for
from gatekit.prereg import DecisionSpec
from gatekit.records import RunOutcome, RunRecord, WindowSummary, upgrade
from gatekit.simulate import Scenario, simulate
from gatekit.verdict import CODE_NAMES, Decision, Verdict

PRIMARY = "train_elapsed_s"
# one pair far off (pair 7, +6.5 %): the case where Huber's ψ clips
OUTLIER_D = np.array([-0.021, -0.015, -0.024, -0.018, -0.012, -0.022, 0.065, -0.019])
TM8 = np.array([1, -1, -1, 1, -1, 1, 1, -1], float)


def test_huber_equals_ols_by_hand_when_no_residual_is_clipped() -> None:
    # 4 pairs + − − +: d = 0.03, −0.01, 0.00, 0.02. Each sign's two pairs sit ±0.005 about their mean, so every
    # weight is equal and the fixed point is the OLS fit: Δ̂ = (0.025 − 0.005)/2 = 0.01, ŝ = (0.025 + 0.005)/2
    # = 0.015. s = MAD/0.6745 = 0.005/0.6745, every |u| = 0.6745 < k: ψ(u) = u, m = 1, K = 1, so
    # Var = Σr²/(n − 2)·(XᵀX)⁻¹ = (4·0.005²/2)/4 = 1.25e-5 for both.
    delta, delta_se, slot, slot_se = (float(x) for x in duet.huber_arrays(np.array([0.03, -0.01, 0.0, 0.02]),
                                                                          TM8[:4]))
    assert delta == pytest.approx(0.01, abs=1e-15) and slot == pytest.approx(0.015, abs=1e-15)
    assert delta_se == pytest.approx(math.sqrt(1.25e-5), rel=1e-12)
    assert slot_se == pytest.approx(math.sqrt(1.25e-5), rel=1e-12)


def test_huber_fit_against_scipy_on_the_huber_loss_and_its_own_equations() -> None:
    delta, delta_se, slot, slot_se = (float(x) for x in duet.huber_arrays(OUTLIER_D, TM8))
    residual = OUTLIER_D - delta - slot * TM8
    scale = float(np.median(np.abs(residual))) / duet.MAD_NORMAL  # the scale is the MAD of its own residuals
    k = duet.HUBER_K

    def huber_loss(beta: np.ndarray) -> float:
        u = np.abs(OUTLIER_D - beta[0] - beta[1] * TM8) / scale
        return float(np.sum(np.where(u <= k, u ** 2 / 2, k * u - k ** 2 / 2)))

    found = optimize.minimize(huber_loss, x0=np.zeros(2), method="Nelder-Mead",
                              options={"xatol": 1e-12, "fatol": 1e-16, "maxiter": 20_000})
    assert found.x == pytest.approx([delta, slot], abs=1e-9)
    # the outlier is clipped (|u| > k), the others not, and ψ sums to zero against both columns
    u = residual / scale
    assert abs(u[6]) > k and np.all(np.abs(np.delete(u, 6)) <= k)
    psi = np.clip(u, -k, k)
    assert abs(psi.sum()) < 1e-9 and abs((psi * TM8).sum()) < 1e-9
    # the sandwich (H1): K²·Σψ²/(n − 2)·s²/m²·(XᵀX)⁻¹, m = 7/8 inside, K = 1 + (2/8)·Var ψ'/m²
    m = 7 / 8
    k_h1 = 1 + 2 / 8 * (m * (1 - m)) / m ** 2
    variance = k_h1 ** 2 * float(np.sum(psi ** 2)) / 6 * scale ** 2 / m ** 2
    assert delta_se == pytest.approx(math.sqrt(variance / 8), rel=1e-9)
    assert slot_se == pytest.approx(math.sqrt(variance / 8), rel=1e-9)
    # far less pulled by the outlier than least squares (mean d), which it moves by 0.084/8
    assert abs(delta - np.delete(OUTLIER_D, 6).mean()) < abs(OUTLIER_D.mean() - np.delete(OUTLIER_D, 6).mean()) / 4


def test_huber_fit_against_statsmodels_rlm() -> None:
    # statsmodels 0.15.0 (not a dependency), computed once:
    #   X = np.column_stack([np.ones(8), TM8]); r = sm.RLM(OUTLIER_D, X, M=sm.robust.norms.HuberT(t=1.345))
    #   r = r.fit(scale_est="mad", cov="H1", conv="coefs", tol=1e-14, maxiter=1000); r.params, r.bse, r.scale
    params = (-0.017760264467650496, -0.0002602644676504965)
    bse = (0.002119179375961317, 0.002119179375961317)
    delta, delta_se, slot, slot_se = (float(x) for x in duet.huber_arrays(OUTLIER_D, TM8))
    assert (delta, slot) == pytest.approx(params, rel=1e-9)
    assert (delta_se, slot_se) == pytest.approx(bse, rel=1e-9)


def test_huber_many_gates_at_once_equal_one_at_a_time_and_degenerate_cases() -> None:
    rng = np.random.default_rng(4)
    d = rng.standard_t(3, (50, 12)) * 0.01
    signs = duet.thue_morse_signs(np.arange(1, 13))
    many = duet.huber_arrays(d, signs)
    for g in (0, 17, 49):
        one = duet.huber_arrays(d[g], signs)
        assert [float(a[g]) for a in many] == pytest.approx([float(x) for x in one], rel=1e-10)
    # one slot order only: not separable, nan, inconclusive
    assert all(math.isnan(float(x)) for x in duet.huber_arrays(np.array([0.01, 0.02, 0.0, 0.01]), np.ones(4)))
    # a perfect fit: the OLS fit, SE 0
    exact = 0.02 + 0.01 * signs
    delta, delta_se, slot, _ = (float(x) for x in duet.huber_arrays(exact, signs))
    assert (delta, slot, delta_se) == pytest.approx((0.02, 0.01, 0.0), abs=1e-15)
    # half the pairs fit exactly (a coarse timer): MAD 0, the OLS residual SD stands in for the scale
    coarse = exact.copy()
    coarse[[1, 4, 6, 9, 10, 11]] += [0.003, -0.002, 0.004, -0.001, 0.002, -0.003]
    delta, delta_se, _, _ = (float(x) for x in duet.huber_arrays(coarse, signs))
    assert math.isfinite(delta) and delta_se > 0


def test_the_slot_order_is_balanced_and_cancels_a_linear_drift() -> None:
    signs = duet.thue_morse_signs(np.arange(1, 65))
    assert signs[:8].tolist() == TM8.tolist()
    for n in range(2, 65, 2):
        assert signs[:n].sum() == 0  # both slot orders equally often after every even number of pairs
        if n % 4 == 0:  # and a slot whose speed changes linearly with the pair cancels from Δ̂
            assert float(np.dot(np.arange(1, n + 1), signs[:n])) == 0
    # version 1's swap leaves it: Σ k·σ_k = −n/2
    assert float(np.dot(np.arange(1, 9), duet.parity_signs(np.arange(1, 9)))) == -4


def test_the_mirror_is_drawn_so_the_last_pair_puts_on_on_either_slot() -> None:
    design = duet.DESIGNS[2]
    shas = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(2000)]
    on_slot1_last = [design.slot_index(False, 12, sha) for sha in shas]
    assert 0.45 < np.mean(on_slot1_last) < 0.55  # a late change of slot 1 lands on on as often as on off
    for sha in shas[:50]:
        taken = [(design.slot_index(True, k, sha), design.slot_index(False, k, sha)) for k in range(1, 13)]
        assert all(off != on for off, on in taken)  # the two runs of a pair never share a slot
        assert sum(on for _, on in taken) == 6  # each arm on each slot in half the pairs
        # relative to pair 1, the order is Thue–Morse whichever slot pair 1 gave off
        relative = [1.0 if off == taken[0][0] else -1.0 for off, _ in taken]
        assert relative == duet.thue_morse_signs(np.arange(1, 13)).tolist()
    # version 1 ignores the predecision: odd pairs off on slot 0
    assert [duet.DESIGNS[1].slot_index(True, k, shas[0]) for k in (1, 2, 3, 4)] == [0, 1, 0, 1]


def test_critical_values_hold_the_test_level_under_the_normal_null() -> None:
    rng = np.random.default_rng(8)
    for n in (4, 12):
        d = rng.standard_normal((40_000, n))
        delta, se, _, _ = duet.huber_arrays(d, duet.thue_morse_signs(np.arange(1, n + 1)))
        t = delta / se
        below = float(np.mean(t < -duet.huber_critical(n)))
        assert below == pytest.approx(duet.TEST_ALPHA, abs=4 * math.sqrt(0.045 * 0.955 / 40_000))
        assert float(np.mean(np.abs(t) > duet.huber_critical(n, 0.025))) == pytest.approx(0.05, abs=0.005)
    # beyond the table: the t quantile with the effective df, between the table's last value and the normal's
    largest = max(duet.HUBER_CRITICAL)
    assert 1.6954 < duet.huber_critical(largest + 30) < duet.HUBER_CRITICAL[largest][0]
    assert math.isnan(duet.huber_critical(5)) and math.isnan(duet.huber_critical(2))


def _records(off: list[float], on: list[float], sha: str, design: duet.DuetDesign) -> list[RunRecord]:
    slots = ("cuda:0", "cuda:1")
    records, order = [], 0
    for k, (off_value, on_value) in enumerate(zip(off, on), start=1):
        for arm, value, is_off in (("off", off_value, True), ("on", on_value, False)):
            order += 1
            records.append(RunRecord(order, arm, f"{arm}-r{k}", k, RunOutcome(0, value, metrics={PRIMARY: value}),
                                     WindowSummary(samples=3, load1_mean=0.1, load1_max=0.2),
                                     slot=slots[design.slot_index(is_off, k, sha)]))
    return records


def _decide(records: list[RunRecord], version: int):  # type: ignore[no-untyped-def]
    policy = policy_for("duet", version)
    table = policy.classify(records_table(records, PRIMARY), RulesSpec(), {}, 8)
    classic = Verdict(Decision.REJECTED, ("classic reason",), ())
    return policy.decide(classic, table, records, off_arm="off", on_arm="on", primary=PRIMARY, direction="lower",
                         guards=(), floor_pct=1.0, warnings=())


def test_simulation_matches_the_scalar_decision_and_the_slots_as_they_ran() -> None:
    rng = np.random.default_rng(5)
    n = 8
    off_log = rng.normal(0, 0.01, (30, n))
    on_log = off_log + rng.normal(-0.012, 0.006, (30, n))
    codes, runs = policy_for("duet", 2).simulate(off_log, on_log, ThresholdSpec())
    assert (runs == n).all()
    for k in range(30):
        sha = hashlib.sha256(str(k).encode()).hexdigest()  # either mirror: Δ̂ is the same
        decided = _decide(_records(np.exp(off_log[k]).tolist(), np.exp(on_log[k]).tolist(), sha, duet.DESIGNS[2]),
                          2)
        assert decided.verdict.decision.value == CODE_NAMES[int(codes[k])]
        assert decided.duet.version == 2 and decided.duet.slots == ("cuda:0", "cuda:1")
    # a slot 1 that is 1 % slower is removed and reported as slot 1 (cuda:1) minus slot 0, whatever the mirror
    for sha in (hashlib.sha256(b"a").hexdigest(), hashlib.sha256(b"b").hexdigest()):
        design = duet.DESIGNS[2]
        on_slot1 = [design.slot_index(False, k, sha) == 1 for k in range(1, n + 1)]
        off = [100.0 * (1.0 if s else 1.01) * (1 + 0.001 * (-1) ** (k // 2)) for k, s in enumerate(on_slot1, 1)]
        on = [97.0 * (1.01 if s else 1.0) for s in on_slot1]
        info = _decide(_records(off, on, sha, design), 2).duet
        assert info.delta_pct == pytest.approx(-3.0, abs=0.1) and info.slot_effect_pct == pytest.approx(1.0, abs=0.1)


def test_a_v1_predecision_is_decided_by_v1_and_reads_as_written() -> None:
    spec = dict(gate_id="g", title="t", off_arm="off", on_arm="on", n=4, order="abab", seed=0, primary=PRIMARY,
                direction="lower", expect_diff=[], policy="duet", mode="duet", slots=["cpu:0", "cpu:1"],
                threshold={"sigma_k": 2.0, "floor_pct": 1.0}, guards=[], rules=RulesSpec().to_dict())
    # a predecision/2 written before duet_version existed: its reader upgrades it (records.UPGRADES)
    old = DecisionSpec.from_dict(upgrade({"decision": spec}, "gatekit.predecision/2")["decision"])
    assert old.design_version == 1 and policy_for("duet", old.design_version).design is duet.DESIGNS[1]
    assert old.to_dict()["duet_version"] == 1 and "sequential_version" not in old.to_dict()
    assert old.sequential_version is None  # the duet's version has a key of its own
    new = DecisionSpec.from_dict({**spec, "duet_version": 2})
    assert new.design_version == 2 and new.to_dict()["duet_version"] == 2
    assert DecisionSpec.from_dict(spec).design_version == 3  # in memory, no version is the current one
    assert describe("duet").version == 3 and policy_for("duet").design is duet.CURRENT
    assert policy_for("duet", 2).design is duet.DESIGNS[2]  # a v2 series is still decided by v2
    # v1's rule itself (OLS, Student t) is checked against scipy in tests/test_duet_stats.py, and a recorded v1
    # series re-analyses to its finding in tests/test_recorded_series.py


def test_v2_meets_the_late_slot_change_target_where_v1_does_not() -> None:
    step = Scenario(cv_off_pct=2.0, shared_cv_pct=10.0, slot_step_pct=5.0, slot_step_from=-1, n=8)
    v1 = simulate("duet-v1", step, draws=20_000, seed=3)
    v2 = simulate("duet-v2", step, draws=20_000, seed=3)
    assert v1.adopted.pct > 5.0 + 3 * v1.adopted.se_pct  # v1's last pair always puts on on slot 0
    assert v2.adopted.pct < 5.0 - 2 * v2.adopted.se_pct
    drift = Scenario(cv_off_pct=2.0, shared_cv_pct=10.0, slot_drift_pct=1.0, n=12)
    assert simulate("duet-v2", drift, draws=20_000, seed=3).adopted.pct < 5.0


def test_simulate_slot_options_are_validated() -> None:
    runner = CliRunner()
    base = ["simulate", "--policy", "duet-v2", "--n", "8", "--draws", "200"]
    ok = runner.invoke(main, [*base, "--slot-step-pct", "5", "--slot-step-from", "-1", "--slot-drift-pct", "0.5",
                              "--json"])
    assert ok.exit_code == 0, ok.output
    assert '"slot_step_pct": 5.0' in ok.output and '"slot_step_from": -1' in ok.output
    for args, message in (
            (["--slot-step-pct", "5"], "--slot-step-pct and --slot-step-from go together"),
            (["--slot-step-from", "3"], "--slot-step-pct and --slot-step-from go together"),
            (["--slot-step-pct", "5", "--slot-step-from", "0"], "--slot-step-from: must name one of the 8 pairs"),
            (["--slot-step-pct", "5", "--slot-step-from", "9"], "--slot-step-from: must name one of the 8 pairs"),
            (["--slot-step-pct", "-100", "--slot-step-from", "2"], "--slot-step-pct: must be above −100 %"),
            (["--slot-drift-pct", "-150"], "--slot-drift-pct: must be above −100 %")):
        bad = runner.invoke(main, [*base, *args])
        assert bad.exit_code == 2 and f"gate: error: {message}" in bad.output, (args, bad.output)
        assert len(bad.output.strip().splitlines()) == 1  # one clear line, no traceback
    interleaved = runner.invoke(main, ["simulate", "--policy", "sequential", "--slot-drift-pct", "1"])
    assert interleaved.exit_code == 2 and "--slot-drift-pct: needs --policy duet or duet-v1" in interleaved.output


def test_a_duet_gate_without_n_runs_the_default_pairs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from gatekit.config import load_gate
    from tests.conftest import write_toml
    from tests.fakes import fake_gate
    gate = fake_gate("duo", "Duet", ["mode"])
    del gate["gate"]["order"], gate["gate"]["n"]
    gate["gate"]["mode"] = "duet"
    gate["duet"] = {"slots": ["cpu:0", "cpu:1"]}
    write_toml(tmp_path / "gate.toml", gate)
    for arm in ("off", "on"):
        write_toml(tmp_path / f"{arm}.toml", {"config": {"mode": arm}})
    assert load_gate(tmp_path / "gate.toml").gate.n == describe("duet").default_n == 12
    gate["gate"]["n"] = 10
    write_toml(tmp_path / "gate.toml", gate)
    assert load_gate(tmp_path / "gate.toml").gate.n == 10  # a stated n is kept

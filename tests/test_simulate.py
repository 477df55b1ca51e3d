"""`gate simulate`: the issue's figures within their Monte-Carlo error, the sequential targets, and the
vectorised rules against the scalar code the gate runs.

Each figure is checked as |simulated − stated| ≤ the stated figure's rounding + 4 Monte-Carlo SE.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from gatekit import stats
from gatekit.analysis import SeriesEvidence, assess
from gatekit.config import DEFAULT_MAX_THRESHOLD_PCT, load_gate
from gatekit.policies import sequential
from gatekit.policies.classic import CLASSIC
from gatekit.policies.comparison import bootstrap_codes
from gatekit.policy_descriptors import policy_for
from gatekit.prereg import DecisionSpec
from gatekit.records import RunOutcome, RunRecord, WindowSummary
from gatekit.simulate import LARGE_N_TARGET_OF, OUTCOMES, SUITE, TARGETS, Scenario, ThresholdSpec, meets, run_suite, simulate, simulate_runs
from gatekit.verdict import CODE_NAMES, INCONCLUSIVE, classic_decision
from tests.conftest import FIXTURES, gate_invoke

DRAWS = 200_000


def near(result_rate, stated: float, rounding: float) -> bool:
    return abs(result_rate.pct - stated) <= rounding + 4 * result_rate.se_pct


# -- the classic rule: the study's figures (lognormal, 3 runs per arm, ABABAB) ------------------------

def test_classic_false_adoption_at_cv_05_and_2() -> None:
    assert near(simulate("classic", Scenario(cv_off_pct=0.5), draws=DRAWS).adopted, 0.5, 0.05)
    assert near(simulate("classic", Scenario(cv_off_pct=2.0), draws=DRAWS).adopted, 6.0, 0.5)  # "~6 %"


def test_classic_ignores_a_noisier_on_arm() -> None:
    # "9–17 % when the on arm is 4× noisier": 17 % at CV 0.5 → 2 %, about 10 % at 0.35 → 1.4 %
    high = simulate("classic", Scenario(cv_off_pct=0.5, cv_on_pct=2.0), draws=DRAWS).adopted
    low = simulate("classic", Scenario(cv_off_pct=0.35, cv_on_pct=1.4), draws=DRAWS).adopted
    assert near(high, 17.0, 0.5)
    assert 9.0 <= low.pct <= 12.0


def test_classic_power_and_the_cold_first_run() -> None:
    assert near(simulate("classic", Scenario(cv_off_pct=0.5, effect_pct=-2.0), draws=DRAWS).adopted, 95.0, 0.5)
    cold = simulate("classic", Scenario(cv_off_pct=0.5, effect_pct=-2.0, cold_first_pct=3.0), draws=DRAWS)
    assert near(cold.adopted, 24.0, 1.5)  # "~24 %" (we measure 25.4 %): the cold run inflates σ_off
    warm = simulate("classic", Scenario(cv_off_pct=0.5, effect_pct=-2.0, cold_first_pct=3.0, warmup=1),
                    draws=DRAWS)
    assert near(warm.adopted, 95.0, 0.5)  # a discarded warm-up run takes the cold hit


def test_percentile_bootstrap_at_n3_declares_do_nothing_changes_different() -> None:
    result = simulate("bootstrap", Scenario(cv_off_pct=0.5), draws=50_000)
    different = result.rates["adopted"].pct + result.rates["regression"].pct
    assert abs(different - 20.0) < 1.5  # "~20 %" (19.2 % with the exact bootstrap)
    assert near(result.adopted, 9.6, 0.5)  # half of them in on's favour


# -- the sequential policy: the targets ------------------------------------------------------

SMALL = 20_000  # a few fast checks with loose Monte-Carlo bounds; docs/statistics.md has the 200 000-draw suite
NULL_CHECKS = ["A/A, σ_on = 10σ_off (2 → 20 %)", "A/A, CV 0.5 %, drift +0.5 %/run, +3 % cold",
               "A/A, CV 2 %, t tails df 3", "A/A, CV 2 %, outliers 5 % × +10 %"]
POWER_CHECKS = ["−5 %, CV 2 %", "−2 %, CV 0.5 %, drift −0.5 %/run", "−2 %, CV 0.5 %, outliers 5 % × +10 %"]
BY_NAME = {s.name: s for s in SUITE}


@pytest.mark.parametrize("name", NULL_CHECKS)
def test_sequential_false_adoption_at_most_5_percent(name: str) -> None:
    result = simulate("sequential", BY_NAME[name], draws=SMALL, seed=1)
    assert result.adopted.pct - 3 * result.adopted.se_pct <= 5.0
    assert result.runs_per_arm <= 8.0


@pytest.mark.parametrize("name", POWER_CHECKS)
def test_sequential_power_at_least_95_percent(name: str) -> None:
    result = simulate("sequential", BY_NAME[name], draws=SMALL, seed=2)
    assert result.adopted.pct + 3 * result.adopted.se_pct >= 95.0
    assert result.rates["regression"].pct < 1.0


TWO_STATE_CHECKS = ["A/A, CV 0.5 %, two states 50 % × +20 %", "A/A, CV 2 %, two states 50 % × +20 %",
                    "A/A, CV 0.5 %, two states 30 % × +10 %"]


@pytest.mark.parametrize("name", TWO_STATE_CHECKS)
def test_v5_holds_both_errors_under_two_speed_states_where_v4_did_not(name: str) -> None:
    result = simulate("sequential", BY_NAME[name], draws=SMALL, seed=1)
    for outcome in ("adopted", "regression"):
        assert result.rates[outcome].pct - 3 * result.rates[outcome].se_pct <= 5.0
    assert meets(result) is (result.adopted.pct <= 5.0 and result.rates["regression"].pct <= 5.0)
    if name.startswith("A/A, CV 0.5 %, two states 50 %"):  # the measurement: v4 adopts about 10 %
        v4 = simulate("sequential", BY_NAME[name], draws=SMALL, seed=1, version=4)
        assert v4.version == 4 and v4.label == "sequential v4" and v4.adopted.pct - 3 * v4.adopted.se_pct > 8.0
        assert meets(v4) is False


def test_v5_power_under_two_speed_states() -> None:
    result = simulate("sequential", BY_NAME["−2 %, CV 0.5 %, two states 20 % × +5 %"], draws=SMALL, seed=2)
    assert result.adopted.pct + 3 * result.adopted.se_pct >= 95.0 and result.rates["regression"].pct < 1.0


def test_gate_simulate_runs_versions_side_by_side(tmp_path) -> None:
    done = gate_invoke("simulate", "--policy", "sequential", "--sequential-version", "5", "--sequential-version",
                       "4", "--outlier-rate", "0.5", "--outlier-pct", "20", "--draws", "4000", "--json",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    v5, v4 = json.loads(done.stdout)["simulations"]
    assert (v5["version"], v4["version"]) == (5, 4)
    again = simulate("sequential", Scenario(outlier_rate=0.5, outlier_pct=20.0), draws=4000, version=4)
    assert v4["rates_pct"]["adopted"]["value"] == again.adopted.pct  # the same seed, the same gates
    table = gate_invoke("simulate", "--policy", "sequential", "--sequential-version", "3", "--draws", "2000",
                        cwd=tmp_path)
    assert "| sequential v3 | thue-morse |" in table.stdout
    bad = gate_invoke("simulate", "--policy", "sequential", "--sequential-version", "9", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "gate: error: --sequential-version: no design version 9 of the sequential policy"
    suite = run_suite(("sequential",), draws=500, seed=0, versions={"sequential": (5, 4)})
    assert [r.version for r in suite[:2]] == [5, 4] and len(suite) == 2 * len(TARGETS)  # not the duet's rows


def test_guard_scenario_false_pass_and_its_monte_carlo_bound() -> None:
    result = simulate("sequential", BY_NAME["guard drop at the limit 0.05 dB, pair SD 0.02 dB"], draws=SMALL, seed=3)
    assert result.guard_pass is not None
    assert abs(result.guard_pass.pct - 100 * sequential.CALIBRATION_ALPHA) <= 4 * result.guard_pass.se_pct
    # a drop well inside the limit passes nearly always; one well beyond it almost never
    easy = simulate("sequential", Scenario(guard_drop=0.0, guard_limit=0.05, guard_sd=0.02), draws=2000, seed=3)
    hard = simulate("sequential", Scenario(guard_drop=0.1, guard_limit=0.05, guard_sd=0.02), draws=2000, seed=3)
    assert easy.guard_pass.pct > 99 and hard.guard_pass.pct < 1


def test_outliers_and_tails_are_drawn_as_stated() -> None:
    rng = np.random.default_rng(5)
    off, on, _, _ = simulate_runs(Scenario(cv_off_pct=0.0, outlier_rate=0.05, outlier_pct=10.0), "abab", 8,
                                  50_000, rng)
    values = np.concatenate([off, on]).ravel()
    assert set(np.round(values, 12)) == {0.0, round(math.log(1.1), 12)}
    assert np.mean(values > 0) == pytest.approx(0.05, abs=0.002)
    off, _, _, _ = simulate_runs(Scenario(cv_off_pct=2.0, tails=3.0), "abab", 8, 50_000, rng)
    sigma = math.sqrt(math.log1p(0.02 ** 2))
    # the same CV (log-scale SD) as the lognormal; Student t(3) tails: kurtosis far above the normal's 3
    assert off.std() == pytest.approx(sigma, rel=0.1)
    assert sps.kurtosis(off.ravel(), fisher=False) > 6


def test_every_target_row_is_in_the_suite() -> None:
    names = [s.name for s in SUITE]
    assert len(names) == len(set(names))
    for name in ("A/A, σ_on = 10σ_off (1 → 10 %)", "A/A, σ_on = 10σ_off (3 → 30 %)",
                 "A/A, CV 0.5 %, drift −0.25 %/run", "A/A, CV 0.5 %, drift +0.5 %/run",
                 "A/A, CV 0.5 %, t tails df 3", "A/A, CV 0.5 %, outliers 5 % × +10 %",
                 "guard drop at the limit 0.05 dB, pair SD 0.05 dB", "−2 %, CV 0.5 %, +3 % cold first run",
                 "−5 %, CV 2 %, outliers 5 % × +10 %", "−2 %, CV 0.5 %, t tails df 3", "−5 %, CV 0.5 %"):
        assert name in names


def test_monte_carlo_error_bars_are_binomial() -> None:
    result = simulate("classic", Scenario(cv_off_pct=2.0), draws=40_000)
    p = result.adopted.pct / 100
    assert result.adopted.se_pct == pytest.approx(100 * math.sqrt(p * (1 - p) / 40_000))
    # two seeds agree within their error bars
    other = simulate("classic", Scenario(cv_off_pct=2.0), draws=40_000, seed=9)
    assert abs(result.adopted.pct - other.adopted.pct) < 4 * math.hypot(result.adopted.se_pct, other.adopted.se_pct)


# -- the vectorised rules are the gate's rules ------------------------------------------------------

@pytest.mark.parametrize("max_threshold_pct", [0.0, DEFAULT_MAX_THRESHOLD_PCT])
def test_vectorised_classic_equals_the_scalar_rule(max_threshold_pct: float) -> None:
    rng = np.random.default_rng(4)
    off, on, _, _ = simulate_runs(Scenario(cv_off_pct=4.0, effect_pct=-4.0), "abab", 3, 2000, rng)
    codes, runs = CLASSIC.simulate(off, on, ThresholdSpec(), max_threshold_pct)
    assert (runs == 3).all()
    for row in range(2000):
        off_v, on_v = np.exp(off[row]).tolist(), np.exp(on[row]).tolist()
        delta = stats.delta_pct(stats.mean(off_v), stats.mean(on_v))
        threshold = stats.threshold_pct(stats.relative_sd_pct(off_v), 2.0, 1.0)
        assert CODE_NAMES[int(codes[row])] == classic_decision(delta, threshold, "lower", max_threshold_pct).value
    # at CV 4 % the threshold 2·σ̂_off passes 10 % in some gates: those are the inconclusive ones
    inconclusive = (codes == INCONCLUSIVE).mean()
    assert (inconclusive > 0.05) if max_threshold_pct else inconclusive == 0


def _gate_decisions(off_log: np.ndarray, on_log: np.ndarray) -> list[str]:
    """Each simulated series decided by the analysis a real gate runs (gatekit.analysis.assess), under the seed
    gate file, which states no rules.max_threshold_pct and so gets the default every gate file gets; abab
    order, calm windows, an equal guard."""
    spec = DecisionSpec.from_gate(load_gate(FIXTURES / "seed_gate.toml"), "off", "on")
    assert spec.rules.max_threshold_pct == DEFAULT_MAX_THRESHOLD_PCT
    decisions = []
    for off_row, on_row in zip(np.exp(off_log).tolist(), np.exp(on_log).tolist()):
        records: list[RunRecord] = []
        for k, (t_off, t_on) in enumerate(zip(off_row, on_row), 1):
            for arm, value in (("off", t_off), ("on", t_on)):
                outcome = RunOutcome(exit_code=0, process_wallclock_s=value,
                                     metrics={"train_elapsed_s": value, "psnr_db": 30.0})
                records.append(RunRecord(order=len(records) + 1, arm=arm, label=f"{arm}-r{k}", pair=k,
                                         outcome=outcome, window=WindowSummary(3, 1.0, 1.0)))
        evidence = SeriesEvidence(series_id="s", finding_id="f", spec=spec, records=tuple(records))
        decisions.append(assess(evidence).decided.verdict.decision.value)
    return decisions


def test_gate_simulate_counts_are_what_real_gates_decide_on_the_same_draws() -> None:
    # `gate simulate` draws its gates from default_rng(seed) in one chunk: the same series, decided here by
    # the analysis a gate runs, must give the same count of every outcome (the CV 5 %: about half of
    # them rejected and a third inconclusive, where simulate once said 87 % rejected and none inconclusive)
    scenario, draws, seed = Scenario(cv_off_pct=5.0), 80, 3
    simulated = simulate("classic", scenario, draws=draws, seed=seed)
    off, on, _, _ = simulate_runs(scenario, "abab", 3, draws, np.random.default_rng(seed))
    decisions = _gate_decisions(off, on)
    for outcome in OUTCOMES:
        assert round(simulated.rates[outcome].pct * draws / 100) == decisions.count(outcome), outcome
    assert {"adopted", "regression", "rejected", "inconclusive"} <= set(decisions)
    # with no limit (a series preregistered before the rule) nothing is inconclusive, as before
    unlimited = simulate("classic", scenario, draws=draws, seed=seed, max_threshold_pct=0.0)
    assert unlimited.rates["inconclusive"].pct == 0
    assert unlimited.rates["rejected"].pct == simulated.rates["rejected"].pct + simulated.rates["inconclusive"].pct
    assert unlimited.adopted.pct == simulated.adopted.pct  # the limit never changes an adoption


@pytest.mark.parametrize("version,scenario", [
    (5, Scenario(cv_off_pct=2.0, effect_pct=-2.0, outlier_rate=0.05, outlier_pct=10.0)),
    (5, Scenario(cv_off_pct=0.5, effect_pct=-2.0, outlier_rate=0.3, outlier_pct=5.0)),  # two speed states
    (4, Scenario(cv_off_pct=2.0, effect_pct=-2.0, outlier_rate=0.05, outlier_pct=10.0)),
    (3, Scenario(cv_off_pct=2.0, effect_pct=-2.0, outlier_rate=0.05, outlier_pct=10.0))],
    ids=["v5", "v5-two-states", "v4", "v3"])
def test_vectorised_sequential_equals_the_scalar_looks(version: int, scenario: Scenario) -> None:
    design = sequential.DESIGNS[version]
    rng = np.random.default_rng(6)
    off, on, _, _ = simulate_runs(scenario, "thue-morse", design.runs[-1], 600, rng)
    codes, runs = policy_for("sequential", version).simulate(off, on, ThresholdSpec())
    seen, held = set(), set()
    for row in range(600):
        pairs = list(zip(np.exp(off[row]).tolist(), np.exp(on[row]).tolist()))
        for number, n in enumerate(design.runs, start=1):  # the scalar looks, one at a time, as `gate run`
            look, _, stopped, states = sequential._look(number, pairs[:n], {}, (), floor_pct=1.0,
                                                        direction="lower", design=design)
            if states:
                held.add((number, "cannot decide" in states or "inconclusive" in states))
            if look.decision != "continue":
                break
        assert CODE_NAMES[int(codes[row])] == look.decision and runs[row] == n
        seen.add((n, stopped))
    # every path is exercised: decided at each look, and (v4, v5) stopped early at look 1 and without a look 3
    assert {n for n, _ in seen} == set(design.runs)
    if version >= 4:
        assert (4, True) in seen and (8, True) in seen
    if scenario.outlier_rate > 0.1:  # v5 under two states: looks held back, and states taken out that decide
        assert (1, True) in held and (2, False) in held and (3, True) in held


def test_exact_bootstrap_by_hand() -> None:
    # off 1,1,1 and on 2,2,2: every resample gives Δ = +100 % → a regression
    assert int(bootstrap_codes(np.log([[1.0, 1.0, 1.0]]), np.log([[2.0, 2.0, 2.0]]), ThresholdSpec())[0]) \
        == sequential.REGRESSION
    # off 1,1,4: resample means range over 1 … 4; on constant 2 → the 95 % interval straddles 0
    assert int(bootstrap_codes(np.log([[1.0, 1.0, 4.0]]), np.log([[2.0, 2.0, 2.0]]), ThresholdSpec())[0]) \
        == sequential.REJECTED


def test_orders_place_the_cold_run_where_the_gate_would() -> None:
    rng = np.random.default_rng(0)
    _, _, pos_off, pos_on = simulate_runs(Scenario(), "abab", 3, 2, rng)
    assert pos_off[0].tolist() == [0, 2, 4] and pos_on[0].tolist() == [1, 3, 5]
    _, _, pos_off, _ = simulate_runs(Scenario(warmup=1), "abba", 2, 1, rng)
    assert pos_off[0].tolist() == [1, 4]  # warm-up at 0, then off on / on off


# -- the command ------------------------------------------------------------------------------------

def test_gate_simulate_gives_each_policy_its_own_default_size(tmp_path) -> None:
    # without --n a duet runs its own default pairs (versions 3 and 2: 12, version 1: 8), the others the gate's 3
    done = gate_invoke("simulate", "--policy", "duet", "--policy", "duet-v2", "--policy", "duet-v1", "--policy",
                       "classic", "--draws", "500", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    sizes = {r["policy"]: r["scenario"]["n"] for r in json.loads(done.stdout)["simulations"]}
    assert sizes == {"duet": 12, "duet-v2": 12, "duet-v1": 8, "classic": 3}
    done = gate_invoke("simulate", "--policy", "duet", "--n", "10", "--draws", "500", "--json", cwd=tmp_path)
    assert [r["scenario"]["n"] for r in json.loads(done.stdout)["simulations"]] == [10]


def test_gate_simulate_table_and_json(tmp_path) -> None:
    done = gate_invoke("simulate", "--policy", "classic", "--policy", "sequential", "--cv", "2", "--draws", "20000",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| Δ +0 %, CV 2 % | classic | abab |" in done.stdout and "| sequential | block-shuffle-spread |" in done.stdout
    assert "false adoption" in done.stdout and "Monte-Carlo standard error" in done.stderr
    header = done.stdout.splitlines()[0]
    assert "| regression % | rejected % | equivalent % | inconclusive % |" in header
    done = gate_invoke("simulate", "--effect", "-2", "--draws", "20000", "--json", cwd=tmp_path)
    (result,) = json.loads(done.stdout)["simulations"]
    assert result["adopted_means"] == "power" and result["draws"] == 20000
    assert set(result["rates_pct"]) == {"adopted", "regression", "rejected", "equivalent", "inconclusive"}
    assert result["max_threshold_pct"] == DEFAULT_MAX_THRESHOLD_PCT
    noisy = gate_invoke("simulate", "--policy", "classic", "--cv", "5", "--draws", "20000", "--json", cwd=tmp_path)
    unlimited = gate_invoke("simulate", "--policy", "classic", "--cv", "5", "--draws", "20000", "--json",
                            "--max-threshold-pct", "0", cwd=tmp_path)
    (noisy_result,), (unlimited_result,) = (json.loads(d.stdout)["simulations"] for d in (noisy, unlimited))
    assert noisy_result["rates_pct"]["inconclusive"]["value"] > 30  # P(σ̂_off > 5 %) ≈ e⁻¹ at n = 3
    assert unlimited_result["rates_pct"]["inconclusive"]["value"] == 0
    assert unlimited_result["max_threshold_pct"] == 0
    bad = gate_invoke("simulate", "--policy", "bootstrap", "--n", "9", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip() == "gate: error: --n: the exact bootstrap needs n ≤ 5, got 9"
    done = gate_invoke("simulate", "--policy", "sequential", "--guard-drop", "0.05", "--guard-sd", "0.02",
                       "--outlier-rate", "0.05", "--outlier-pct", "10", "--tails", "3", "--draws", "5000", "--json",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)["simulations"]
    assert result["scenario"]["outlier_rate"] == 0.05 and result["scenario"]["tails"] == 3.0
    assert 0 < result["guard_pass_pct"]["value"] < 10
    for args, message in ((["--tails", "2"], "--tails: must be above 2 degrees of freedom (finite variance), got 2.0"),
                          (["--outlier-rate", "1.5"], "--outlier-rate: must be a fraction from 0 to 1, got 1.5"),
                          (["--guard-drop", "0.05"], "--guard-drop: guard scenarios need --policy sequential, "
                                                     "got 'classic'")):
        bad = gate_invoke("simulate", *args, cwd=tmp_path)
        assert bad.returncode == 2 and bad.stderr.strip() == f"gate: error: {message}"
    suite = gate_invoke("simulate", "--suite", "--policy", "sequential", "--draws", "2000", cwd=tmp_path)
    assert suite.returncode == 0, suite.stderr
    rows = [line for line in suite.stdout.splitlines() if line.startswith("| ") and "sequential" in line]
    # the duet rows are a duet's, the time-to-target rows (censored runs) the censored policy's, the large-n rows
    # the robust policy's
    interleaved = [s for s in SUITE if not s.changes_slots and not s.shared_cv_pct and s.censored_pct is None
                   and s.name not in LARGE_N_TARGET_OF]
    assert len(rows) == len(interleaved) and all(row.rstrip(" |").endswith(("yes", "**NO**")) for row in rows)


def test_a_parallel_suite_gives_the_same_numbers() -> None:
    one = run_suite(("sequential",), draws=300, seed=4)
    two = run_suite(("sequential",), draws=300, seed=4, workers=2)
    assert [(r.scenario, r.rates, r.runs_per_arm) for r in one] == [(r.scenario, r.rates, r.runs_per_arm) for r in two]
    names = [r.scenario.name for r in one]
    for row in ("A/A, CV 0.5 %, every 3rd run +8 % (phase 0)", "on arm only: 50 % of runs +10 %, CV 0.5 %",
                "−0.8 %, CV 0.2 % (below the 1 % floor)"):
        assert row in names  # issue 30's rows are in the suite

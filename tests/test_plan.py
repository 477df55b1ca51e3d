"""`gate plan` and calibration's planning: runs per arm for 80 % power by simulating the policy, checked
against `gate simulate` run with another seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gatekit.calibrate import plan_runs, policy_mde
from gatekit.config import ThresholdSpec
from gatekit.policy_descriptors import describe
from gatekit.simulate import Scenario, simulate
from tests.conftest import gate_invoke

OTHER_SEED = "7"


def simulated_power(tmp_path: Path, policy: str, cv: float, effect: float, n: int, *, floor: float = 1.0,
                    draws: int = 20_000) -> float:
    """Adoption rate in % from `gate simulate --json`, a seed other than the plan's."""
    done = gate_invoke("simulate", "--policy", policy, "--cv", str(cv), "--effect", str(effect), "--n", str(n),
                       "--floor-pct", str(floor), "--draws", str(draws), "--seed", OTHER_SEED, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)["simulations"]
    return result["rates_pct"]["adopted"]["value"]


def test_classic_plan_reaches_80_pct_in_gate_simulate(tmp_path: Path) -> None:
    done = gate_invoke("plan", "--cv", "2", "--effect", "-5", "--policy", "classic", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    n = plan["n"]
    assert plan["reached"] and plan["power_pct"] >= 80 and n > describe("classic").plan_sizes[0]  # CV 2 %: threshold 4 %, n > 3
    assert simulated_power(tmp_path, "classic", 2, -5, n) >= 80 - 3
    # and n is the fewest: one run fewer stays below the target (within the same 3 points)
    assert simulated_power(tmp_path, "classic", 2, -5, n - 1) < 80 + 3
    assert {row["n"]: row["power_pct"] for row in plan["tried"]}[n] == plan["power_pct"]


def test_the_floor_is_counted(tmp_path: Path) -> None:
    # CV 0.1 %: a t test would find −0.5 % at n = 3, but the classic rule adopts only beyond the 1 % floor
    plan = plan_runs("classic", 0.1, -0.5)
    assert plan.n is None and not plan.reached and "floor 1 %" in plan.reason
    assert simulated_power(tmp_path, "classic", 0.1, -0.5, 8, draws=5000) == pytest.approx(plan.power_pct, abs=3)
    # CV 0.5 %, −1 %: the effect sits at the floor, so no n gives 80 % (about 40 % at every n)
    at_floor = plan_runs("classic", 0.5, -1.0, draws=5000)
    assert at_floor.n is None and all(power < 50 for _, power in at_floor.tried)
    # a lower floor makes the same effect reachable
    lowered = plan_runs("classic", 0.1, -0.5, thresholds=ThresholdSpec(floor_pct=0.2), draws=5000)
    assert lowered.n is not None and lowered.reached


def test_sequential_reports_its_fixed_design(tmp_path: Path) -> None:
    strong = plan_runs("sequential", 0.5, -2.0)
    assert strong.reached and strong.n == 12 and strong.runs_per_arm <= 8  # at most 12, 5.4 on average
    weak = plan_runs("sequential", 0.5, -1.0)
    assert not weak.reached and weak.n is None and "fixed" in weak.reason
    assert simulated_power(tmp_path, "sequential", 0.5, -1.0, 3) == pytest.approx(weak.power_pct, abs=3)
    done = gate_invoke("plan", "--cv", "0.5", "--effect", "-1", "--policy", "sequential", cwd=tmp_path)
    assert done.returncode == 0 and "does NOT reach 80 %" in done.stdout


def test_classic_plan_applies_max_threshold_as_a_gate_does(tmp_path: Path) -> None:
    # CV 5 %: the threshold 2·σ̂_off is above rules.max_threshold_pct = 10 % in about a third of the gates; those
    # the classic rule does not adopt are inconclusive, as a real gate says; the limit never changes the power
    plan = plan_runs("classic", 5.0, -10.0, draws=5000)
    unlimited = plan_runs("classic", 5.0, -10.0, draws=5000, max_threshold_pct=0.0)
    assert plan.max_threshold_pct == 10.0 and plan.inconclusive_pct > 25 and unlimited.inconclusive_pct == 0
    assert plan.tried == unlimited.tried and plan.power_pct == unlimited.power_pct
    assert plan.rejected_pct + plan.inconclusive_pct == pytest.approx(unlimited.rejected_pct)
    shown = int(plan.runs_per_arm)
    same = simulate("classic", Scenario(cv_off_pct=5.0, effect_pct=-10.0, n=shown), draws=5000, seed=plan.seed)
    assert (plan.rejected_pct, plan.inconclusive_pct) == (same.rates["rejected"].pct, same.rates["inconclusive"].pct)
    assert f"{plan.inconclusive_pct:.1f} % inconclusive (too noisy to tell: a threshold above " \
           "rules.max_threshold_pct = 10 %)" in plan.describe()
    done = gate_invoke("plan", "--cv", "5", "--effect", "-10", "--policy", "classic", "--draws", "5000",
                       "--max-threshold-pct", "0", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["max_threshold_pct"] == 0 and document["inconclusive_pct"] == 0
    assert document["rejected_pct"] == pytest.approx(unlimited.rejected_pct)


def test_policy_mde_is_where_the_power_crosses_80(tmp_path: Path) -> None:
    mde = policy_mde("classic", 2.0, 4, draws=5000)
    assert mde > 4.0  # beyond the classic threshold 2·σ_off
    assert simulated_power(tmp_path, "classic", 2, -mde, 4, draws=5000) == pytest.approx(80, abs=3)


@pytest.mark.parametrize(("args", "message"), [
    (("--cv", "0.5", "--effect", "2"), "--effect: must be an improvement"),
    (("--cv", "0", "--effect", "-2"), "--cv: must be a positive percentage, got 0.0"),
    (("--cv", "0.5", "--effect", "-2", "--power", "1.5"), "--power: must be between 0 and 1, got 1.5"),
])
def test_bad_plan_input_is_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = gate_invoke("plan", *args, cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert message in line

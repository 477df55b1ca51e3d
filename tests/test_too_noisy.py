"""Too noisy to tell is its own outcome: where the classic rule would reject with a threshold above the
preregistered rules.max_threshold_pct, the series is inconclusive and says why; adopted, regression and
guard_failed are unchanged; a series preregistered before the rule keeps its decision."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from gatekit.config import DEFAULT_MAX_THRESHOLD_PCT, RulesSpec, load_gate
from gatekit.errors import ConfigError
from gatekit.exports import summary_markdown
from gatekit.prereg import DecisionSpec
from gatekit.report.terminal import summary
from gatekit.verdict import ADOPTED, INCONCLUSIVE, REGRESSION, REJECTED, Decision, classic_codes
from tests.conftest import gate_invoke, write_toml
from tests.test_decision_flow import SEED_GATE, _series


def _runs(arm: str, seconds: list[float]) -> dict[str, dict[str, dict[str, float]]]:
    return {"runs": {f"{arm}-r{k}": {"train_elapsed_s": t, "psnr_db": 36.1} for k, t in enumerate(seconds, 1)}}


def _threshold_by_hand(off: list[float]) -> float:
    return max(2 * 100 * statistics.stdev(off) / statistics.fmean(off), 1.0)


def test_the_vectorised_rule_by_hand() -> None:
    delta = np.array([-30.0, 30.0, -5.0, -5.0, -5.0])
    threshold = np.array([20.0, 20.0, 20.0, 8.0, 4.0])
    assert classic_codes(delta, threshold, "lower", 10.0).tolist() == [ADOPTED, REGRESSION, INCONCLUSIVE,
                                                                       REJECTED, ADOPTED]
    # no limit (0): today's rule
    assert classic_codes(delta, threshold, "lower").tolist() == [ADOPTED, REGRESSION, REJECTED, REJECTED, ADOPTED]


def test_a_noisy_series_is_inconclusive_with_the_reason_first(tmp_path: Path) -> None:
    off, on = [100.0, 180.0, 60.0], [50.0, 95.0, 30.0]  # Δ −46 %, but σ_off ≈ 53 %: threshold ≈ 106 %
    result, _ = _series(tmp_path / "g", _runs("off", off), _runs("on", on))
    finding = result.finding
    threshold = _threshold_by_hand(off)
    assert threshold > DEFAULT_MAX_THRESHOLD_PCT
    assert finding.stats.threshold_pct == pytest.approx(threshold)
    assert finding.decision is Decision.INCONCLUSIVE
    first = finding.verdict.reasons[0]
    assert first.startswith(f"too noisy to tell: this series could not have detected an effect smaller than "
                            f"{threshold:.4g} % (the threshold); its minimum detectable effect was ")
    assert finding.rules.spec.max_threshold_pct == DEFAULT_MAX_THRESHOLD_PCT  # preregistered
    # the terminal summary and the CI summary lead with it
    lines = summary(finding).splitlines()
    verdict_line = lines.index("VERDICT: INCONCLUSIVE")
    assert lines[verdict_line + 1] == f"  - {first}"
    assert f"> {first}" in summary_markdown([finding])
    # the sensitivity rows apply the same rule: no spurious "sensitive to single runs" warning
    assert all(row.decision in (Decision.INCONCLUSIVE, Decision.ADOPTED) for row in finding.sensitivity)


def test_clear_outcomes_are_unchanged_however_noisy(tmp_path: Path) -> None:
    off = [100.0, 130.0, 70.0]  # σ_off 30 %: threshold 60 % > 10 %
    adopted, _ = _series(tmp_path / "a", _runs("off", off), _runs("on", [20.0, 21.0, 22.0]))
    regression, _ = _series(tmp_path / "r", _runs("off", off), _runs("on", [300.0, 310.0, 320.0]))
    assert adopted.finding.decision is Decision.ADOPTED
    assert regression.finding.decision is Decision.REGRESSION


def test_the_limit_is_preregistered_and_zero_turns_it_off(tmp_path: Path) -> None:
    off, on = [100.0, 180.0, 60.0], [50.0, 95.0, 30.0]
    result, _ = _series(tmp_path / "g", _runs("off", off), _runs("on", on), rules={"max_threshold_pct": 0})
    assert result.finding.decision is Decision.REJECTED
    result, _ = _series(tmp_path / "h", _runs("off", off), _runs("on", on), rules={"max_threshold_pct": 200})
    assert result.finding.decision is Decision.REJECTED  # 106 % < 200 %: a threshold this series could clear


def test_a_series_preregistered_before_the_rule_keeps_its_decision() -> None:
    """A predecision file without the key reads as no limit: a rule is never applied after the fact."""
    spec = DecisionSpec.from_dict({**_spec_document(), "rules": {"sigma_k": 3.0}})
    assert spec.rules.max_threshold_pct == 0.0 == RulesSpec().max_threshold_pct


def _spec_document() -> dict:
    return {"gate_id": "g", "title": "t", "off_arm": "off", "on_arm": "on", "n": 3, "order": "abab", "seed": 1,
            "primary": "train_elapsed_s", "direction": "lower", "expect_diff": [], "policy": "classic",
            "warmup": 0, "threshold": {"sigma_k": 2.0, "floor_pct": 1.0}, "guards": []}


@pytest.mark.parametrize("value", [-1, "ten"])
def test_a_bad_limit_is_a_config_error(tmp_path: Path, value: object) -> None:
    gate = {k: (dict(v) if isinstance(v, dict) else list(v)) for k, v in SEED_GATE.items()}
    gate["rules"] = {**gate.get("rules", {}), "max_threshold_pct": value}
    write_toml(tmp_path / "gate.toml", gate)
    with pytest.raises(ConfigError, match="max_threshold_pct"):
        load_gate(tmp_path / "gate.toml")


def test_fail_on_not_adopted_fails_on_it(tmp_path: Path) -> None:
    result, _ = _series(tmp_path / "g", _runs("off", [100.0, 180.0, 60.0]), _runs("on", [50.0, 95.0, 30.0]))
    done = gate_invoke("analyze", str(result.series_dir), "--fail-on", "not-adopted", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "VERDICT: INCONCLUSIVE\n  - too noisy to tell" in done.stdout
    assert gate_invoke("analyze", str(result.series_dir), "--fail-on", "regression", cwd=tmp_path).returncode == 0

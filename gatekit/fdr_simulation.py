"""`gate simulate --campaign`: many simulated campaigns of null and real gates, each decided by its policy and then
by the campaign's Benjamini–Hochberg control (gatekit.fdr), to show the false discovery rate it keeps and the
power it costs.

Each gate is one `gatekit.simulate` gate (the same runs, the same vectorised policy). Its one-sided p-values are
the ones `fdr.one_sided_p` reads from a finding: the policy's own vectorised form where it has one
(`one_sided_p_arrays`), else the Welch test on log values of the runs the gate decided on (a gate of a
sequential design: its first `runs` rounds), times the looks that design plans.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from gatekit.config import DEFAULT_MAX_THRESHOLD_PCT, ThresholdSpec
from gatekit.diagnostics import p_better_arrays, welch_arrays
from gatekit.errors import ConfigError
from gatekit.policy_descriptors import describe
from gatekit.simulate import Rate, Scenario, runs_at_once, simulate_runs, validate
from gatekit.verdict import ADOPTED, REGRESSION


@dataclass(frozen=True, slots=True)
class CampaignScenario:
    """A campaign: `nulls` gates of no change and `reals` gates of a true `scenario.effect_pct`, at level `fdr`."""

    scenario: Scenario
    nulls: int = 90
    reals: int = 10
    fdr: float = 0.05


@dataclass(frozen=True, slots=True)
class CampaignResult:
    policy: str
    campaign: CampaignScenario
    campaigns: int
    seed: int
    fdr_own: Rate  # mean false-discovery proportion, each gate's own decision
    fdr_controlled: Rate  # under the campaign's BH
    power_own: Rate  # real gates adopted by their own rule
    power_controlled: Rate  # and kept by the campaign's BH
    false_own: float  # null gates adopted or called a regression per campaign, own rule
    false_controlled: float

    def to_dict(self) -> dict[str, Any]:
        def rate(r: Rate) -> dict[str, float]:
            return {"value": r.pct, "se": r.se_pct}

        return {"policy": self.policy, "scenario": asdict(self.campaign.scenario), "nulls": self.campaign.nulls,
                "reals": self.campaign.reals, "fdr": self.campaign.fdr, "campaigns": self.campaigns,
                "seed": self.seed, "fdr_own_pct": rate(self.fdr_own), "fdr_controlled_pct": rate(self.fdr_controlled),
                "power_own_pct": rate(self.power_own), "power_controlled_pct": rate(self.power_controlled),
                "false_discoveries_per_campaign": {"own": self.false_own, "controlled": self.false_controlled}}


def _mean_rate(values: np.ndarray) -> Rate:
    """A mean of per-campaign proportions in percent with its standard error."""
    return Rate(100 * float(values.mean()), 100 * float(values.std(ddof=1) / math.sqrt(values.size)))


def gate_p(rule: Any, policy: str, off: np.ndarray, on: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(p on better, p on worse) of each simulated gate, as `fdr.one_sided_p` reads them from its finding."""
    own = getattr(rule, "one_sided_p_arrays", None)
    if own is not None:
        return own(off, on)
    better = np.ones(off.shape[0])
    for size in np.unique(runs.astype(int)):
        mine = runs.astype(int) == size
        diff, se, df = welch_arrays(off[mine, :size], on[mine, :size])
        better[mine] = p_better_arrays(diff, se, df, "lower")
    stages = describe(policy).stages
    looks = len(stages) if stages else 1
    return np.minimum(1.0, looks * better), np.minimum(1.0, looks * (1 - better))


def _bh_rows(p: np.ndarray, q: float) -> np.ndarray:
    """Benjamini–Hochberg at level q along the last axis (gatekit.fdr.benjamini_hochberg, row by row)."""
    m = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=-1)
    passing = sorted_p <= q * np.arange(1, m + 1) / m
    last = np.where(passing.any(axis=-1), m - 1 - np.argmax(passing[:, ::-1], axis=-1), -1)
    cutoff = np.where(last >= 0, np.take_along_axis(sorted_p, np.maximum(last, 0)[:, None], axis=-1)[:, 0], -1.0)
    return p <= cutoff[:, None]


def simulate_campaigns(policy: str, campaign: CampaignScenario, *, campaigns: int = 2_000, seed: int = 0,
                       thresholds: ThresholdSpec = ThresholdSpec(),
                       max_threshold_pct: float = DEFAULT_MAX_THRESHOLD_PCT) -> CampaignResult:
    """Simulate `campaigns` campaigns of null and real gates under one policy, with and without BH at the level."""
    if not 0 < campaign.fdr < 1:
        raise ConfigError(f"--fdr: must be a level between 0 and 1, got {campaign.fdr}")
    if campaign.nulls < 0 or campaign.reals < 0 or campaign.nulls + campaign.reals < 1:
        raise ConfigError("--campaign-gates: a campaign needs at least one gate (NULLS,REALS, each ≥ 0)")
    if runs_at_once(policy):
        raise ConfigError(f"--campaign: simulates interleaved gates, not a duet's pairs ({policy!r})")
    real = campaign.scenario
    null = replace(real, effect_pct=0.0)
    rule = validate(policy, real, max(campaigns, 2), max_threshold_pct)
    order = real.order or getattr(rule, "order", None) or describe(policy).order
    rounds = rule.max_rounds(real.n)
    rng = np.random.default_rng(seed)
    parts = []
    for scenario, gates in ((null, campaign.nulls), (real, campaign.reals)):
        draws = campaigns * gates
        if not draws:
            parts.append((np.zeros((campaigns, 0), int), np.zeros((campaigns, 0))))
            continue
        off, on, _, _ = simulate_runs(scenario, order, rounds, draws, rng)
        codes, runs = rule.simulate(off, on, thresholds, max_threshold_pct)
        better, worse = gate_p(rule, policy, off, on, np.asarray(runs))
        p = np.minimum(1.0, 2 * np.minimum(better, worse))
        parts.append((codes.reshape(campaigns, gates), p.reshape(campaigns, gates)))
    codes = np.concatenate([parts[0][0], parts[1][0]], axis=1)
    p = np.concatenate([parts[0][1], parts[1][1]], axis=1)
    is_null = np.arange(codes.shape[1]) < campaign.nulls
    own = (codes == ADOPTED) | (codes == REGRESSION)
    controlled = own & _bh_rows(p, campaign.fdr)

    def fdp(discoveries: np.ndarray) -> np.ndarray:
        return (discoveries & is_null).sum(axis=1) / np.maximum(discoveries.sum(axis=1), 1)

    def power(adopted: np.ndarray) -> Rate:
        hits = adopted[:, ~is_null].ravel()
        return Rate.of(hits) if hits.size else Rate(math.nan, math.nan)

    adopted = codes == ADOPTED
    return CampaignResult(policy, campaign, campaigns, seed, _mean_rate(fdp(own)), _mean_rate(fdp(controlled)),
                          power(adopted), power(adopted & controlled),
                          float((own & is_null).sum(axis=1).mean()), float((controlled & is_null).sum(axis=1).mean()))


def table(results: list[CampaignResult]) -> str:
    """A Markdown table: FDR and power of each policy, its own rule beside the campaign's control."""
    header = ["policy", "gates (null + real)", "real gates", "FDR level", "FDR own rule %", "FDR controlled %",
              "power own rule %", "power controlled %", "false discoveries / campaign (own → controlled)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for r in results:
        c = r.campaign
        lines.append("| " + " | ".join([
            r.policy, f"{c.nulls} + {c.reals}", c.scenario.describe(), f"{100 * c.fdr:g} %",
            f"{r.fdr_own.pct:.2f} ± {r.fdr_own.se_pct:.2f}", f"{r.fdr_controlled.pct:.2f} ± {r.fdr_controlled.se_pct:.2f}",
            f"{r.power_own.pct:.2f} ± {r.power_own.se_pct:.2f}",
            f"{r.power_controlled.pct:.2f} ± {r.power_controlled.se_pct:.2f}",
            f"{r.false_own:.3f} → {r.false_controlled:.3f}"]) + " |")
    return "\n".join(lines)

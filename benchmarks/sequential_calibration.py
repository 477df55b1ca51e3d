"""The sequential policy's constants, calibrated by simulation (gatekit/policies/sequential.py holds the results).

Under the null every round's pair difference d = log on − log off is normal with mean 0 (the statistic HL/S
and the guard's t statistic are scale-free, so σ = 1 serves every noise level). Rounds 1–4 make look 1,
rounds 1–8 look 2, rounds 1–12 look 3 (v4). The statistic is taken on the improvement side of a
lower-is-better metric, −HL/S.

Version 4 (`--version 4`, 1 000 000 draws):
- c1, c2: P(HL/S > c1 at look 1) = P(HL/S > c2 at look 2) with P(either) = EARLY_ALPHA = 3 % (Pocock's equal
  spending over looks 1–2, ignoring the early stop: the stop only removes gates, so this is conservative).
- c3: among the gates that reach look 3 — look 1 neither beyond c1 nor stopped (−2 ≤ HL/S < 0), look 2 not
  beyond c2 but within 3 of it — the value that brings P(beyond the boundary at any look) to
  CALIBRATION_ALPHA = 4.5 %.
- GUARD_LOOK_LEVEL: the per-look one-sided level L of the paired guard's t bound (df 3, 7, 11) with
  P(the bound clears the limit at any of the three looks) = CALIBRATION_ALPHA when the true drop equals the
  limit (the worst case: every look counted).

Version 5 (the current design; `--version 5`, 1 000 000 draws): v4's procedure on what v5's state check
leaves — each run of a normal null gate drawn on its own (off and on normal with variance 1/2, so d is
standard normal), the check run at every look (`state_adjusted`: under this null it rarely sees two states),
a look it leaves undecided counted as neither beyond the boundary nor stopped (it goes on, or ends
inconclusive). Two-state noise itself is not in the calibration: `gate simulate --suite` measures it.

Version 3 (`--version 3`, 2 000 000 draws): two looks, c1 and c2 Pocock at CALIBRATION_ALPHA, the guard over
two looks. A series preregistered under v3 keeps these.

Run: .venv/bin/python benchmarks/sequential_calibration.py [--version 5] [--draws N] [--seed S]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats as sps

from gatekit.policies.sequential import (CALIBRATION_ALPHA, CALIBRATION_SEED, DESIGNS, Design, look_arrays,
                                        pair_arrays, statistic)

CHUNK = 200_000


def null_statistics(draws: int, seed: int, looks: tuple[int, ...], sign: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """[draws, looks]: sign·HL/S and the paired t statistic at every look, from the same normal pair
    differences."""
    rng = np.random.default_rng(seed)
    robust, paired = [], []
    for start in range(0, draws, CHUNK):
        d = rng.standard_normal((min(CHUNK, draws - start), looks[-1]))
        robust.append(np.stack([sign * statistic(*pair_arrays(np.zeros_like(d[:, :n]), d[:, :n])) for n in looks],
                               1))
        paired.append(np.stack([d[:, :n].mean(1) / (d[:, :n].std(1, ddof=1) / math.sqrt(n)) for n in looks], 1))
    return np.concatenate(robust), np.concatenate(paired)


def state_null_statistics(draws: int, seed: int, design: Design) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[draws, looks]: −HL/S after v5's state check, whether the check left the look undecided, and the paired t
    statistic, from normal runs (off and on each with variance 1/2)."""
    rng = np.random.default_rng(seed)
    robust, undecided, paired = [], [], []
    looks = design.runs
    for start in range(0, draws, CHUNK):
        size = min(CHUNK, draws - start)
        off = rng.standard_normal((size, looks[-1])) / math.sqrt(2)
        on = rng.standard_normal((size, looks[-1])) / math.sqrt(2)
        parts = [look_arrays(off[:, :n], on[:, :n], look=k, design=design, direction="lower", floor_pct=1.0)
                 for k, n in enumerate(looks, start=1)]
        robust.append(np.stack([-statistic(part.diff, part.scale) for part in parts], 1))
        undecided.append(np.stack([part.held for part in parts], 1))
        d = on - off
        paired.append(np.stack([d[:, :n].mean(1) / (d[:, :n].std(1, ddof=1) / math.sqrt(n)) for n in looks], 1))
    return np.concatenate(robust), np.concatenate(undecided), np.concatenate(paired)


def pocock(robust: np.ndarray, alpha: float) -> tuple[np.ndarray, float, float]:
    """Per-look critical values with equal null shares and P(beyond at any look) = alpha, by bisection on
    the share (it lies between Bonferroni and alpha)."""
    low, high = alpha / robust.shape[1], alpha
    for _ in range(50):
        share = (low + high) / 2
        critical = np.quantile(robust, 1 - share, axis=0)
        either = float(np.mean((robust > critical).any(axis=1)))
        low, high = (share, high) if either < alpha else (low, share)
    return critical, share, either


def guard_level(paired: np.ndarray, looks: tuple[int, ...], alpha: float) -> tuple[float, float]:
    """The per-look level whose bound clears the limit at some look with probability alpha (a pass at a
    look: the t upper-tail p-value below 1 − L)."""
    p = np.stack([sps.t.sf(paired[:, k], n - 1) for k, n in enumerate(looks)], 1)
    guard_alpha = float(np.quantile(p.min(axis=1), alpha))
    return 1 - guard_alpha, float(np.mean(p.min(axis=1) < guard_alpha))


def calibrate(design: Design, draws: int, seed: int, alpha: float = CALIBRATION_ALPHA) -> dict[str, object]:
    if design.looks == 2:  # v3: Pocock at alpha over both looks (the statistic on the +HL/S side, as then)
        robust, paired = null_statistics(draws, seed, design.runs, 1.0)
        critical, share, either = pocock(robust, alpha)
        level, guard_rate = guard_level(paired, design.runs, alpha)
        return {"critical": [float(c) for c in critical], "share": share, "either_rate": either,
                "guard_look_level": level, "guard_either_rate": guard_rate}
    assert design.stop_band is not None and design.extend_window is not None
    if design.states is None:
        robust, paired = null_statistics(draws, seed, design.runs, -1.0)
        held = np.zeros(robust.shape, bool)
    else:  # v5: a look the state check leaves undecided is never beyond the boundary, never stopped
        statistics, held, paired = state_null_statistics(draws, seed, design)
        robust = np.where(held, -np.inf, statistics)
    (c1, c2), share, _ = pocock(robust[:, :2], design.early_alpha)
    low, high = design.stop_band
    alive = held[:, 0] | (robust[:, 0] >= high) | (robust[:, 0] < low)  # not stopped at look 1
    early = (robust[:, 0] > c1) | (alive & (robust[:, 0] <= c1) & (robust[:, 1] > c2))
    near = held[:, 1] | (robust[:, 1] > c2 - design.extend_window)
    reach3 = alive & (robust[:, 0] <= c1) & (robust[:, 1] <= c2) & near
    third = np.sort(robust[reach3, 2])[::-1]
    c3 = float(third[int((alpha - early.mean()) * len(robust))])
    total = float(np.mean(early | (reach3 & (robust[:, 2] > c3))))
    level, guard_rate = guard_level(paired, design.runs, alpha)
    return {"critical": [float(c1), float(c2), c3], "share": share, "either_rate": total,
            "early_rate": float(early.mean()), "reach_look3": float(reach3.mean()),
            "guard_look_level": level, "guard_either_rate": guard_rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", type=int, choices=sorted(DESIGNS), default=max(DESIGNS))
    parser.add_argument("--draws", type=int, help="default: the draws the version was calibrated with")
    parser.add_argument("--seed", type=int, default=CALIBRATION_SEED)
    args = parser.parse_args()
    design = DESIGNS[args.version]
    draws = args.draws or design.calibration_draws
    result = calibrate(design, draws, args.seed)
    print(f"# version {design.version}, seed {args.seed}, {draws} draws, CALIBRATION_ALPHA {CALIBRATION_ALPHA}")
    print("CRITICAL = (" + ", ".join(f"{c:.4f}" for c in result["critical"]) + ")")  # type: ignore[union-attr]
    print(f"GUARD_LOOK_LEVEL = {result['guard_look_level']:.5f}")
    extra = (f", looks 1–2 {result['early_rate']:.5f}, reach look 3 {result['reach_look3']:.4f}"
             if "early_rate" in result else "")
    print(f"# per-look null share {result['share']:.5f}, any look {result['either_rate']:.5f}{extra}; "
          f"guard any look {result['guard_either_rate']:.5f}")


if __name__ == "__main__":
    main()

"""The sequential policy's constants, calibrated by simulation (gatekit/sequential.py holds the results).

Under the null every round's pair difference d = log on − log off is normal with mean 0 (the statistic HL/S
and the guard's t statistic are scale-free, so σ = 1 serves every noise level). Rounds 1–4 make look 1,
rounds 1–8 look 2.

- CRITICAL: per-look values (c1, c2) with P(HL/S > c1) = P(HL/S > c2) = a at look 1 and look 2 and
  P(HL/S > c1 at look 1 or > c2 at look 2) = CALIBRATION_ALPHA (Pocock's equal spending, on the probability
  scale: HL/S has a heavier tail at 4 pairs than at 8).
- GUARD_LOOK_LEVEL: the per-look one-sided level L of the paired guard's t bound (df 3, then 7) with
  P(the bound clears the limit at look 1 or at look 2) = CALIBRATION_ALPHA when the true drop equals the limit.

Run: .venv/bin/python benchmarks/sequential_calibration.py [--draws N] [--seed S]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats as sps

from gatekit.config import SEQUENTIAL_RUNS
from gatekit.sequential import CALIBRATION_ALPHA, CALIBRATION_DRAWS, CALIBRATION_SEED, pair_arrays, statistic

CHUNK = 250_000


def null_statistics(draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """[draws, 2]: HL/S and the paired t statistic at both looks, from the same normal pair differences."""
    rng = np.random.default_rng(seed)
    looks = SEQUENTIAL_RUNS
    robust, paired = [], []
    for start in range(0, draws, CHUNK):
        d = rng.standard_normal((min(CHUNK, draws - start), looks[-1]))
        robust.append(np.stack([statistic(*pair_arrays(np.zeros_like(d[:, :n]), d[:, :n])) for n in looks], 1))
        paired.append(np.stack([d[:, :n].mean(1) / (d[:, :n].std(1, ddof=1) / math.sqrt(n)) for n in looks], 1))
    return np.concatenate(robust), np.concatenate(paired)


def calibrate(draws: int, seed: int, alpha: float = CALIBRATION_ALPHA) -> dict[str, object]:
    robust, paired = null_statistics(draws, seed)
    low, high = alpha / len(SEQUENTIAL_RUNS), alpha  # the per-look share lies between Bonferroni and alpha
    for _ in range(50):
        share = (low + high) / 2
        critical = np.quantile(robust, 1 - share, axis=0)
        either = float(np.mean((robust > critical).any(axis=1)))
        low, high = (share, high) if either < alpha else (low, share)
    # the guard passes at a look when its p-value (t upper tail) is below 1 − L
    p = np.stack([sps.t.sf(paired[:, k], n - 1) for k, n in enumerate(SEQUENTIAL_RUNS)], 1)
    guard_alpha = float(np.quantile(p.min(axis=1), alpha))
    return {"critical": [float(c) for c in critical], "share": share, "either_rate": either,
            "guard_look_level": 1 - guard_alpha, "guard_either_rate": float(np.mean(p.min(axis=1) < guard_alpha))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=CALIBRATION_DRAWS)
    parser.add_argument("--seed", type=int, default=CALIBRATION_SEED)
    args = parser.parse_args()
    result = calibrate(args.draws, args.seed)
    print(f"# seed {args.seed}, {args.draws} draws, CALIBRATION_ALPHA {CALIBRATION_ALPHA}")
    print(f"CRITICAL = ({result['critical'][0]:.4f}, {result['critical'][1]:.4f})")
    print(f"GUARD_LOOK_LEVEL = {result['guard_look_level']:.5f}")
    print(f"# per-look null share {result['share']:.5f}, either look {result['either_rate']:.5f}; "
          f"guard either look {result['guard_either_rate']:.5f}")


if __name__ == "__main__":
    main()

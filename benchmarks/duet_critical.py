"""The duet policy's version-2 critical values, calibrated by simulation under the preregistered null.

Version 2 decides on t = Δ̂/SE of the Huber M-estimate (gatekit.policies.duet.huber_arrays), whose null
distribution has no closed form at small n. For every even number of pairs n this script draws `--draws`
gates of normal pair noise with no effect (d ~ N(0, 1): the scale cancels from t, and so does a slot effect,
which the fit removes exactly), the slot signs of version 2's order, and takes the quantiles of |t| (both
tails: the null is symmetric): c_test at 1 − 2·TEST_ALPHA (the one-sided level the rule tests at) and c_95 at
0.95 (the two-sided 95 % CI reported beside it). It prints the table that gatekit/policies/duet.py holds
(HUBER_CRITICAL), and beyond its last n the effective degrees of freedom the policy extrapolates with.

Run: .venv/bin/python benchmarks/duet_critical.py [--draws N] [--seed S] [--jobs J] [--largest N]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from gatekit.policies.duet import TEST_ALPHA, huber_arrays, thue_morse_signs

SEED = 20261218
DRAWS = 1_000_000
CHUNK = 100_000


def quantiles(n: int, draws: int, seed: int) -> tuple[int, float, float, float]:
    """(n, c_test, c_95, share of gates with no statistic) from `draws` null gates of n pairs."""
    rng = np.random.default_rng([seed, n])
    signs = thue_morse_signs(np.arange(1, n + 1))
    parts = []
    for start in range(0, draws, CHUNK):
        d = rng.standard_normal((min(CHUNK, draws - start), n))
        delta, se, _, _ = huber_arrays(d, signs)
        parts.append(np.abs(delta / se))
    t = np.concatenate(parts)
    finite = t[np.isfinite(t)]
    return n, float(np.quantile(finite, 1 - 2 * TEST_ALPHA)), float(np.quantile(finite, 0.95)), 1 - finite.size / t.size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--largest", type=int, default=64, help="the largest even n of the table")
    parser.add_argument("--check", type=int, nargs="*", default=[96, 128, 256],
                        help="larger n to compare with the extrapolation")
    args = parser.parse_args()
    began = time.monotonic()
    sizes = [*range(4, args.largest + 1, 2), *args.check]
    with ProcessPoolExecutor(args.jobs) as pool:
        found = sorted(pool.map(quantiles, sizes, [args.draws] * len(sizes), [args.seed] * len(sizes)),
                       key=lambda row: -row[0])  # the largest first: they take longest
    found.sort()
    print("HUBER_CRITICAL = {  # pairs: (c_test, c_95)")
    for n, c_test, c_95, missing in found:
        if n <= args.largest:
            print(f"    {n}: ({c_test:.4f}, {c_95:.4f}),")
    print("}")
    for n, c_test, c_95, missing in found:
        if n > args.largest:
            print(f"# check n={n}: c_test {c_test:.4f}, c_95 {c_95:.4f}")
        if missing:
            print(f"# n={n}: {100 * missing:.4f} % of gates had no statistic")
    print(f"# {args.draws} null gates per n, seed {args.seed}, {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()

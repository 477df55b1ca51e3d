"""The duet policy's critical values (versions 2 and 3), calibrated by simulation under the preregistered null.

Version 2 decides on t = Δ̂/SE of the Huber M-estimate (gatekit.policies.duet.huber_arrays), whose null
distribution has no closed form at small n. For every even number of pairs n this script draws `--draws`
gates of normal pair noise with no effect (d ~ N(0, 1): the scale cancels from t, and so does a slot effect,
which the fit removes exactly), the slot signs of version 2's order, and takes the quantiles of |t| (both
tails: the null is symmetric): c_test at 1 − 2·TEST_ALPHA (the one-sided level the rule tests at) and c_95 at
0.95 (the two-sided 95 % CI reported beside it). It prints the table that gatekit/policies/duet.py holds
(HUBER_CRITICAL), and beyond its last n the effective degrees of freedom the policy extrapolates with.

`--family two-states` calibrates version 3 under a composite null instead: for every even n from 10 to
`--largest`, the largest quantile over the laws TWO_STATE_LAWS — normal noise, and runs that each draw
N(0, 1) + r·Bernoulli(p) (two speed states r run-noise SDs apart, the slower one taken with probability p,
d = run_on − run_off) for p in TWO_STATE_P and r in TWO_STATE_R — with the law that gave it. It prints the
table gatekit/policies/duet.py holds as TWO_STATE_CRITICAL. The grid leaves out the ratios of the simulation
suite's two-state check rows (2.5, 5, 10, 20, 40), so those rows test the table rather than repeat it.

Run: .venv/bin/python benchmarks/duet_critical.py [--draws N] [--seed S] [--jobs J] [--largest N]
     [--family normal|two-states]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from gatekit.policies.duet import (TEST_ALPHA, TWO_STATE_LAWS, TWO_STATE_MIN_PAIRS, huber_arrays, null_pair_noise,
                                   thue_morse_signs)

SEED = 20261218
DRAWS = 1_000_000
CHUNK = 100_000


def quantiles(n: int, draws: int, seed: int, law: tuple[float, float] | None = None
              ) -> tuple[int, float, float, float]:
    """(n, c_test, c_95, share of gates with no statistic) from `draws` null gates of n pairs: normal pair
    noise (law None), or a two-state law (p, r) drawn by `null_pair_noise` (its seed the same for every n)."""
    rng = np.random.default_rng([seed, n] if law is None else [seed, n, round(100 * law[0]), round(law[1])])
    signs = thue_morse_signs(np.arange(1, n + 1))
    parts = []
    for start in range(0, draws, CHUNK):
        size = min(CHUNK, draws - start)
        d = rng.standard_normal((size, n)) if law is None else null_pair_noise(rng, size, n, *law)
        delta, se, _, _ = huber_arrays(d, signs)
        parts.append(np.abs(delta / se))
    t = np.concatenate(parts)
    finite = t[np.isfinite(t)]
    return n, float(np.quantile(finite, 1 - 2 * TEST_ALPHA)), float(np.quantile(finite, 0.95)), 1 - finite.size / t.size


def law_name(law: tuple[float, float] | None) -> str:
    return "normal" if law is None else f"p {law[0]:g} r {law[1]:g}"


def two_states(args: argparse.Namespace) -> None:
    """TWO_STATE_CRITICAL: per n, the largest c_test and c_95 over TWO_STATE_LAWS, and the laws that gave them."""
    began = time.monotonic()
    sizes = [*range(TWO_STATE_MIN_PAIRS, args.largest + 1, 2), *args.check]
    cells = [(n, law) for n in sizes for law in TWO_STATE_LAWS]
    cells.sort(key=lambda cell: -cell[0])  # the largest first: they take longest
    with ProcessPoolExecutor(args.jobs) as pool:
        found = list(pool.map(quantiles, [n for n, _ in cells], [args.draws] * len(cells),
                              [args.seed] * len(cells), [law for _, law in cells], chunksize=4))
    worst: dict[int, list[tuple[float, str, float, str, float]]] = {}
    for (n, law), (_, c_test, c_95, missing) in zip(cells, found):
        worst.setdefault(n, []).append((c_test, law_name(law), c_95, law_name(law), missing))
        print(f"n={n} {law_name(law)}: c_test {c_test:.4f} c_95 {c_95:.4f}", file=sys.stderr)
    print("TWO_STATE_CRITICAL = {  # pairs: (c_test, c_95)   least favourable law for c_test; for c_95")
    for n in sorted(worst):
        rows = worst[n]
        test = max(rows, key=lambda row: row[0])
        wide = max(rows, key=lambda row: row[2])
        line = f"    {n}: ({test[0]:.4f}, {wide[2]:.4f}),  # {test[1]}; {wide[3]}"
        print(line if n <= args.largest else f"# check n={n}: c_test {test[0]:.4f} ({test[1]}), c_95 "
                                               f"{wide[2]:.4f} ({wide[3]})")
    print("}")
    for n in sorted(worst):
        normal = next(row for row in worst[n] if row[1] == "normal")
        most_missing = max(row[4] for row in worst[n])
        print(f"# n={n}: normal c_test {normal[0]:.4f} c_95 {normal[2]:.4f}"
              + (f"; at most {100 * most_missing:.4f} % of gates had no statistic" if most_missing else ""))
    print(f"# {args.draws} null gates per n and law ({len(TWO_STATE_LAWS)} laws), seed {args.seed}, "
          f"{time.monotonic() - began:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--largest", type=int, default=64, help="the largest even n of the table")
    parser.add_argument("--check", type=int, nargs="*", default=[96, 128, 256],
                        help="larger n to compare with the extrapolation")
    parser.add_argument("--family", choices=("normal", "two-states"), default="normal",
                        help="the null: normal pair noise (version 2), or the largest over normal and two-state "
                             "laws (version 3)")
    args = parser.parse_args()
    if args.family == "two-states":
        two_states(args)
        return
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

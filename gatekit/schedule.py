"""Run order. A slot is (arm, round); labels are `<arm>-r<round>`; round 0 holds discarded warm-up runs."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import numpy as np

from gatekit.config import SEEDED_ORDERS
from gatekit.records import Record

WARMUP_ROUND = 0
# block-shuffle-spread: the six arrangements of a block of four rounds (does off run first?), two AB and two BA
BLOCK_ARRANGEMENTS = tuple(block for block in itertools.product((True, False), repeat=4) if sum(block) == 2)
# ... drawn among those that leave no job every k-th run with this many runs or more in the plan all on one arm: six
# such runs in eight rounds decide 98 % of A/A gates at CV 0.5 % (+8 %), five 17 %, four at most 0.1 %
# (docs/statistics.md §4, interference on every k-th run)
ONE_ARM_HITS = 5


@dataclass(frozen=True, slots=True)
class Slot(Record):
    arm: str
    round: int
    retry_of: int | None = None

    @property
    def label(self) -> str:
        return f"{self.arm}-r{self.round}"


def thue_morse(k: int) -> int:
    """The k-th Thue–Morse symbol: the parity of the number of 1 bits in k (0 1 1 0 1 0 0 1 …)."""
    return bin(k).count("1") % 2


def round_orders(n: int, order: str, seed: int = 0) -> list[bool]:
    """For each of n rounds: does off run first? A prefix of a longer plan is the shorter plan.

    abab: always (the classic order; a drift favours `on` by one run).
    abba: alternating, so a linear drift cancels over every two rounds.
    random: a fresh coin per round from a seeded RNG, as in RMIT (Abedi & Brecht, ICPE 2017).
    thue-morse: run k goes to arm A or B by the Thue–Morse symbol of k (ABBABAAB…); which arm is A is
    drawn from the seed. Round k's first run is symbol 2k = symbol k, and the symbols of 2^m runs cancel
    polynomial drifts of degree < m (Prouhet): 8 runs cancel linear and quadratic drift, 16 cubic.
    abba-baab: each block of four runs (two rounds) is ABBA or BAAB by a fresh seeded coin: a linear drift
    cancels within every block and the arms stay balanced, as with Thue–Morse, but which arm a run position
    gets is random, so interference on every k-th run (a periodic job) cannot line up with one arm.
    block-shuffle: each block of four rounds holds two AB and two BA rounds in a seeded random order (one of
    six): a linear drift cancels within every block (and so at every look of 4, 8, 12 rounds). In abba-baab runs
    0 and 3 of a block always share an arm, so a job every third run hits one arm twice in every third block;
    here any two rounds of a block are only weakly tied (correlation −1/3), and the hits spread over the arms.
    block-shuffle-spread: block-shuffle, each block drawn only among the arrangements that leave no job every k-th
    run with ONE_ARM_HITS or more runs in the plan so far all on one arm (`spread_blocks`). In block-shuffle a job
    every third run finds all six of its runs in eight rounds on one arm in 1 of 18 plans (the round-level
    Thue–Morse ABBABAAB BAABABBA and its mirror: at period 3, phase 0, 6.1 % of A/A gates decide); here in none.
    """
    rng = random.Random(seed)
    if order == "block-shuffle-spread":
        uniforms = np.array([[rng.random() for _ in range((n + 3) // 4)]])
        return [bool(first) for first in spread_blocks(uniforms)[0, :n]]
    if order == "block-shuffle":
        firsts: list[bool] = []
        while len(firsts) < n:
            block = [True, True, False, False]
            rng.shuffle(block)
            firsts.extend(block)
        return firsts[:n]
    if order == "abba-baab":
        blocks = [rng.random() < 0.5 for _ in range((n + 1) // 2)]
        return [blocks[k // 2] == (k % 2 == 0) for k in range(n)]
    if order == "thue-morse":
        mirror = rng.random() < 0.5
        return [(thue_morse(k) == 0) != mirror for k in range(n)]
    if order == "random":
        return [rng.random() < 0.5 for _ in range(n)]
    if order == "abba":
        return [k % 2 == 0 for k in range(n)]
    return [True] * n


def on_arm_signs(firsts: np.ndarray) -> np.ndarray:
    """[..., rounds] does off run first? → [..., 2·rounds] in execution order: +1 where on runs, −1 where off does."""
    first = np.where(np.asarray(firsts, bool), -1, 1)
    return np.stack([first, -first], axis=-1).reshape(*first.shape[:-1], -1)


def one_arm_jobs(firsts: np.ndarray) -> np.ndarray:
    """[..., rounds] → [...]: how many jobs every k-th run (a period k ≥ 2 and a phase) have ONE_ARM_HITS or more
    runs in these rounds, all on one arm. Phases are counted from the plan's first run, so warm-ups before it
    (which shift every phase alike) change nothing."""
    signs = on_arm_signs(firsts)
    runs = signs.shape[-1]
    count = np.zeros(signs.shape[:-1], int)
    for period in range(2, (runs - 1) // (ONE_ARM_HITS - 1) + 1):  # longer periods cannot reach ONE_ARM_HITS
        for phase in range(period):
            hits = signs[..., phase::period]
            if hits.shape[-1] >= ONE_ARM_HITS:
                count += np.abs(hits.sum(axis=-1)) == hits.shape[-1]
    return count


def spread_blocks(uniforms: np.ndarray) -> np.ndarray:
    """The block-shuffle-spread order of many plans at once: [plans, blocks] uniforms in [0, 1) → [plans, 4·blocks]
    does off run first? Block b takes the arrangement that uniform b picks among those BLOCK_ARRANGEMENTS that
    leave the fewest `one_arm_jobs` in blocks 1 … b, so a plan is a prefix of a longer one. In 12 rounds (the
    sequential policy's plan) the fewest is always none; past that a block may find none that leaves none (a long
    period's runs so far on one arm, none of them in this block), and it draws among those that leave the fewest."""
    uniforms = np.asarray(uniforms, float)
    plans, blocks = uniforms.shape
    options = np.array(BLOCK_ARRANGEMENTS)
    firsts = np.zeros((plans, 0), bool)
    for block in range(blocks):
        candidates = np.concatenate([np.broadcast_to(firsts[:, None, :], (plans, len(options), firsts.shape[1])),
                                     np.broadcast_to(options[None, :, :], (plans, *options.shape))], axis=-1)
        jobs = one_arm_jobs(candidates)
        allowed = jobs == jobs.min(axis=1, keepdims=True)
        pick = np.floor(uniforms[:, block] * allowed.sum(axis=1)).astype(int)
        chosen = np.argmax(np.cumsum(allowed, axis=1) > pick[:, None], axis=1)
        firsts = np.concatenate([firsts, options[chosen]], axis=1)
    return firsts


def _pair(off_arm: str, on_arm: str, off_first: bool) -> tuple[str, str]:
    return (off_arm, on_arm) if off_first else (on_arm, off_arm)


def plan(off_arm: str, on_arm: str, n: int, order: str, seed: int = 0, warmup: int = 0) -> list[Slot]:
    """The preregistered order of the first n rounds, after `warmup` discarded runs in round 0
    (1: the arm that runs first in round 1; 2: both arms, in round 1's order)."""
    firsts = round_orders(n, order, seed)
    slots = [Slot(arm, WARMUP_ROUND) for arm in _pair(off_arm, on_arm, firsts[0] if firsts else True)[:warmup]]
    for k, off_first in enumerate(firsts, 1):
        slots.extend(Slot(arm, k) for arm in _pair(off_arm, on_arm, off_first))
    return slots


def extension(off_arm: str, on_arm: str, order: str, seed: int, *, done_rounds: int, more_rounds: int,
              first_round: int) -> list[Slot]:
    """Rounds done_rounds+1 … done_rounds+more_rounds of the same plan, labelled from `first_round`
    (retries may have taken the round numbers in between)."""
    firsts = round_orders(done_rounds + more_rounds, order, seed)[done_rounds:]
    return [Slot(arm, first_round + i) for i, off_first in enumerate(firsts)
            for arm in _pair(off_arm, on_arm, off_first)]


def order_seed(predecision_sha256: str) -> int:
    """The order seed when the gate gives none: the predecision's first 16 hex digits as an integer.

    The order is then fixed by the preregistered rules themselves and drawn only after they are written.
    """
    return int(predecision_sha256[:16], 16)


def needs_seed(order: str) -> bool:
    return order in SEEDED_ORDERS


def retry_slots(off_arm: str, on_arm: str, new_round: int, replaces: int, first: str | None = None) -> list[Slot]:
    """A re-run pair at the end of the series; off first like the classic order unless `first` says
    otherwise (the sequential policy re-runs in the mirror of the replaced round)."""
    arms = (on_arm, off_arm) if first == on_arm else (off_arm, on_arm)
    return [Slot(arm, new_round, replaces) for arm in arms]

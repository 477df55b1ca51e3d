"""Run order. A slot is (arm, round); labels are `<arm>-r<round>`; round 0 holds discarded warm-up runs."""

from __future__ import annotations

import random
from dataclasses import dataclass

from gatekit.config import SEEDED_ORDERS
from gatekit.records import Record

WARMUP_ROUND = 0


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
    """
    rng = random.Random(seed)
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

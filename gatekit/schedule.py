"""Run order. A slot is (arm, round); labels are `<arm>-r<round>`."""

from __future__ import annotations

import random
from dataclasses import dataclass

from gatekit.records import Record


@dataclass(frozen=True, slots=True)
class Slot(Record):
    arm: str
    round: int
    retry_of: int | None = None

    @property
    def label(self) -> str:
        return f"{self.arm}-r{self.round}"


def plan(off_arm: str, on_arm: str, n: int, order: str, seed: int = 0) -> list[Slot]:
    """The preregistered order of the first n rounds.

    abab: off, on every round (the classic order; drift favours `on`).
    abba: off, on / on, off alternating, so a linear drift cancels over two rounds.
    random: each round's order drawn from a seeded RNG, so it is reproducible from the predecision.
    """
    rng = random.Random(seed)
    slots: list[Slot] = []
    for k in range(1, n + 1):
        first_off = {"abab": True, "abba": k % 2 == 1, "random": rng.random() < 0.5}[order]
        arms = (off_arm, on_arm) if first_off else (on_arm, off_arm)
        slots.extend(Slot(arm, k) for arm in arms)
    return slots


def retry_slots(off_arm: str, on_arm: str, new_round: int, replaces: int) -> list[Slot]:
    """A re-run pair at the end of the series, off first like the classic order."""
    return [Slot(off_arm, new_round, replaces), Slot(on_arm, new_round, replaces)]

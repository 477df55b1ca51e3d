"""Duet slots: the two twin devices a duet gate runs its arms on at the same time.

A slot is written `cuda:N` (GPU N of this host: the run sees only it, through CUDA_VISIBLE_DEVICES) or
`cpu:SPEC` with SPEC a core list such as `0`, `0-3` or `0,2,4-5` (the run and every process it starts are
pinned to those cores). Pair k puts the off run on slot 0 and the on run on slot 1 when k is odd, and the
reverse when k is even, so a difference between the slots cancels over an even number of pairs and can be
estimated from them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

SLOT_ENV = "GATEKIT_SLOT"
_SLOT = re.compile(r"(cuda|cpu):(.+)")
_CORE_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


class SlotError(ValueError):
    """A slot string that does not parse; the message says what is wrong (the caller adds file and key)."""


@dataclass(frozen=True, slots=True)
class DeviceSlot:
    """One slot: its text as written, its kind, and the GPU index or the cores it stands for."""

    text: str
    kind: str  # "cuda" or "cpu"
    gpu: int | None = None
    cores: tuple[int, ...] = ()

    def env(self, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
        """What a run on this slot gets in its environment. `cuda:N` is GPU N as the gate sees them: under
        a CUDA_VISIBLE_DEVICES of its own (a campaign gives each gate its GPUs) the Nth entry of that list."""
        env = {SLOT_ENV: self.text}
        if self.gpu is not None:
            listed = [e.strip() for e in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if e.strip()]
            visible = "CUDA_VISIBLE_DEVICES" in environ
            env["CUDA_VISIBLE_DEVICES"] = (listed[self.gpu] if self.gpu < len(listed) else "") if visible \
                else str(self.gpu)
        return env


def parse_cores(spec: str) -> tuple[int, ...]:
    """`0-3,6` → (0, 1, 2, 3, 6); each core once, in order."""
    cores: list[int] = []
    for part in spec.split(","):
        match = _CORE_RANGE.fullmatch(part.strip())
        if not match:
            raise SlotError(f"'{part}' is not a core number or range like 0-3")
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            raise SlotError(f"the range '{part}' ends before it starts")
        cores += [c for c in range(first, last + 1) if c not in cores]
    return tuple(cores)


def parse_slot(text: str) -> DeviceSlot:
    match = _SLOT.fullmatch(text.strip())
    if not match:
        raise SlotError(f"'{text}' is not a slot: write cuda:N (a GPU index) or cpu:CORES (e.g. cpu:0-3)")
    kind, spec = match.groups()
    if kind == "cuda":
        if not spec.isdigit():
            raise SlotError(f"'{text}': a cuda slot names one GPU index, e.g. cuda:0")
        return DeviceSlot(text, kind, gpu=int(spec))
    return DeviceSlot(text, kind, cores=parse_cores(spec))


def parse_slots(texts: Sequence[str]) -> tuple[DeviceSlot, DeviceSlot]:
    """Exactly two slots of one kind that share nothing (no GPU, no core)."""
    if len(texts) != 2:
        raise SlotError(f"a duet needs exactly two slots, got {len(texts)}")
    first, second = (parse_slot(t) for t in texts)
    if first.kind != second.kind:
        raise SlotError(f"both slots must be of one kind, got {first.kind} and {second.kind}")
    if first.gpu is not None and first.gpu == second.gpu:
        raise SlotError(f"both slots name GPU {first.gpu}: a duet needs two GPUs")
    shared = sorted(set(first.cores) & set(second.cores))
    if shared:
        raise SlotError(f"the slots share core(s) {', '.join(map(str, shared))}: a duet needs disjoint cores")
    return first, second


def slot_for(arm_is_off: bool, round_: int) -> int:
    """Which slot (0 or 1) a run of pair `round_` takes: off on slot 0 in odd pairs, on slot 1; the reverse
    in even pairs."""
    odd = round_ % 2 == 1
    return 0 if arm_is_off == odd else 1


def usable_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on, in order: its affinity mask where the OS has one (Linux), else every
    CPU the machine has (macOS and Windows' os has no sched_getaffinity)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return tuple(sorted(affinity(0))) if affinity is not None else tuple(range(os.cpu_count() or 1))


# Whether a process can be pinned to cores here: Linux has sched_setaffinity; macOS and Windows run unpinned.
CAN_PIN_CPUS = hasattr(os, "sched_setaffinity")


def unequal_cpu_slots(slots: Sequence[DeviceSlot]) -> str:
    """Why two cpu slots are not twins ('' when they are): unequal sizes, or cores this process may not use."""
    usable = set(usable_cpus())
    missing = sorted({c for s in slots for c in s.cores} - usable)
    if missing:
        return f"core(s) {', '.join(map(str, missing))} are not available here (usable: {cpu_list(usable)})"
    sizes = [len(s.cores) for s in slots]
    return "" if sizes[0] == sizes[1] else f"the slots have {sizes[0]} and {sizes[1]} cores"


def unequal_gpus(statics: Mapping[str, Mapping[str, object]]) -> str:
    """Why two GPUs are not twins ('' when they are), from each slot's NVML static reading."""
    keys = {"name": "model", "memory_total_bytes": "memory", "max_sm_clock_mhz": "max SM clock",
            # the set-up of the model (recordings made before these were read lack them on both sides)
            "vbios_version": "VBIOS", "ecc_mode": "ECC", "persistence_mode": "persistence mode",
            "compute_mode": "compute mode", "mig_mode": "MIG mode", "applications_sm_clock_mhz": "application SM clock",
            "applications_mem_clock_mhz": "application memory clock", "locked_clocks": "locked clocks"}
    (a, first), (b, second) = statics.items()
    differ = [f"{word} {first.get(key)} vs {second.get(key)}" for key, word in keys.items()
              if first.get(key) != second.get(key)]
    return f"{a} and {b} differ: {'; '.join(differ)}" if differ else ""


def cpu_list(cores: Iterable[int]) -> str:
    """(5, 0, 1, 2) → '0-2,5', as taskset and /proc write CPU lists."""
    runs: list[list[int]] = []
    for core in sorted(cores):
        if runs and runs[-1][1] == core - 1:
            runs[-1][1] = core
        else:
            runs.append([core, core])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)

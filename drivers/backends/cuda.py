"""The cuda backend: NVML telemetry in every run window, through `nvidia-ml-py` (the `cuda` extra).

Each sample reads GPU utilisation, memory, SM clock, temperature, power, clock-event (throttle) reasons and
the compute processes on the GPU. A compute process that is not the trainer — its ancestors do not include
the gate process, which starts every trainer as a child — is contamination evidence beside load, and
preflight refuses to start while one is there. GPU name, driver and CUDA driver versions go into provenance.

NVML is read through `NvmlReader`, whose readings have exactly the format `record_nvml.py` writes; the live
reader calls the recorder's own functions, so a recording of a real GPU replays through the same code.
`pynvml` is imported lazily: the core never needs it, and without it the backend says so cleanly.
"""

from __future__ import annotations

import os
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import psutil

from gatekit.driver import Telemetry, TelemetrySample, install_hint
from gatekit.errors import ConfigError, DriverError
from gatekit.records import CheckResult
from gatekit_drivers.backends._options import take_options

GIB = float(1 << 30)
MIB = float(1 << 20)

# NVML clock-event ("throttle") reason bits, nvml.h nvmlClocksEventReasons / nvmlClocksThrottleReasons.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the GPU ran slower than it could for a cause outside the trainer (heat, power brake).
# sw_power_cap and gpu_idle are routine under load and between kernels, so they are reported, not evidence.
SLOWDOWN_MASK = 0x8 | 0x20 | 0x40 | 0x80
INSTALL_HINT = install_hint("cuda")


class NvmlReader(Protocol):
    """Reads one GPU; `static()` and `sample()` return what `record_nvml.py` records."""

    def static(self) -> dict[str, Any]: ...

    def sample(self) -> dict[str, Any]: ...


class NvmlUnavailable(DriverError):
    """NVML cannot be used here (nvidia-ml-py missing, no driver, no such GPU)."""


class LiveNvml:
    """The real reader: pynvml, initialised on first use, for GPU `index` as CUDA numbers it in this process
    (NVML ignores CUDA_VISIBLE_DEVICES, so the index is mapped through it: visible_device)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._pynvml: Any = None
        self._handle: Any = None
        self._since_us: int | None = None

    def _open(self) -> tuple[Any, Any]:
        if self._handle is None:
            pynvml = _import_pynvml()
            target = visible_device(self.index)
            try:
                pynvml.nvmlInit()
                count = pynvml.nvmlDeviceGetCount()
                if target is None or (target.isdigit() and int(target) >= count):
                    raise NvmlUnavailable(f"not available: GPU {self.index} does not exist (NVML sees {count}"
                                          + (f", CUDA_VISIBLE_DEVICES={os.environ.get(VISIBLE)}" if
                                             os.environ.get(VISIBLE) is not None else "") + ")")
                self._handle = (pynvml.nvmlDeviceGetHandleByIndex(int(target)) if target.isdigit() else
                                pynvml.nvmlDeviceGetHandleByUUID(target))
            except pynvml.NVMLError as exc:
                raise NvmlUnavailable(f"not available: NVML cannot start ({exc})") from None
            self._pynvml = pynvml
        return self._pynvml, self._handle

    def static(self) -> dict[str, Any]:
        from gatekit_drivers.backends.record_nvml import static_info

        pynvml, handle = self._open()
        return {"device_count": pynvml.nvmlDeviceGetCount(), **static_info(pynvml, handle)}

    def sample(self) -> dict[str, Any]:
        import time

        from gatekit_drivers.backends.record_nvml import sample

        pynvml, handle = self._open()
        now_us = int(time.time() * 1e6)
        reading = sample(pynvml, handle, self._since_us)  # the processes' activity since the last reading
        self._since_us = now_us
        return reading


VISIBLE = "CUDA_VISIBLE_DEVICES"


def visible_device(index: int, environ: Mapping[str, str] = os.environ) -> str | None:
    """The GPU (NVML index or UUID) that CUDA calls `index` under this process's CUDA_VISIBLE_DEVICES; None
    when it hides that GPU. Unset: the index itself."""
    listed = environ.get(VISIBLE)
    if listed is None:
        return str(index)
    entries = [entry.strip() for entry in listed.split(",") if entry.strip()]
    return entries[index] if 0 <= index < len(entries) else None


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable(f"not available: nvidia-ml-py not installed ({INSTALL_HINT})") from None
    return pynvml


# -- identity --------------------------------------------------------------------------------------

COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


def _mode(reading: Any, names: Mapping[int, str] | None = None) -> str | None:
    """An NVML mode reading ([current, pending] or one value) as words: "on", "off (pending on)"."""
    def word(value: Any) -> str:
        return names.get(value, str(value)) if names else ("on" if value else "off")

    if isinstance(reading, list) and len(reading) == 2 and all(isinstance(v, int) for v in reading):
        current, pending = reading
        return word(current) + ("" if pending == current else f" (pending {word(pending)})")
    if isinstance(reading, int) and not isinstance(reading, bool):
        return word(reading)
    return None


def locked_below_max(reading: Any, max_sm_mhz: float | None) -> float | None:
    """The locked SM clock from a `locked_clocks` reading ([min, max] SM clock of P0): locked when they meet
    below the maximum SM clock; None when not locked or not readable."""
    if isinstance(reading, list) and len(reading) == 2 and all(number(v) is not None for v in reading):
        low, high = (float(v) for v in reading)
        if low == high and (max_sm_mhz is None or high < max_sm_mhz):
            return high
    return None


def locked_clocks_words(reading: Any, max_sm_mhz: float | None) -> str:
    """Whether the SM clock is locked, in words: 'locked at 1410 MHz', 'not locked (…)' or 'cannot tell (…)'."""
    locked = locked_below_max(reading, max_sm_mhz)
    if locked is not None:
        return f"locked at {locked:g} MHz"
    if isinstance(reading, list) and len(reading) == 2 and all(number(v) is not None for v in reading):
        return f"not locked (P0 SM clock range {reading[0]}–{reading[1]} MHz)"
    error = reading.get("nvml_error") if isinstance(reading, dict) else None
    return f"cannot tell ({error or 'NVML did not report it'})"


def gpu_identity(static: Mapping[str, Any]) -> dict[str, Any]:
    """The identity fields of provenance, as words or numbers (None where NVML did not answer)."""
    return {
        "vbios_version": static.get("vbios_version") if isinstance(static.get("vbios_version"), str) else None,
        "ecc_mode": _mode(static.get("ecc_mode")),
        "persistence_mode": _mode(static.get("persistence_mode")),
        "compute_mode": _mode(static.get("compute_mode"), COMPUTE_MODES),
        "mig_mode": _mode(static.get("mig_mode")),
        "applications_sm_clock_mhz": number(static.get("applications_sm_clock_mhz")),
        "applications_mem_clock_mhz": number(static.get("applications_mem_clock_mhz")),
        "max_mem_clock_mhz": number(static.get("max_mem_clock_mhz")),
        "locked_clocks": locked_clocks_words(static.get("locked_clocks"), number(static.get("max_sm_clock_mhz"))),
        "locked_sm_clock_mhz": locked_below_max(static.get("locked_clocks"), number(static.get("max_sm_clock_mhz"))),
    }


# -- readings -> telemetry -------------------------------------------------------------------------

def number(value: Any) -> float | None:
    """A reading as a number; None for an NVML error ({"nvml_error": ...}), None or anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def reason_names(mask: int) -> list[str]:
    names = [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_EVENT_REASONS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


def cuda_version(code: Any) -> str | None:
    """NVML's CUDA driver version code (e.g. 12080) as "12.8"."""
    if isinstance(code, bool) or not isinstance(code, int):
        return None
    return f"{code // 1000}.{code % 1000 // 10}"


def process_owner(pid: int, gate_pid: int) -> str:
    """'own' when `pid` is the gate or descends from it (the trainer and its children), else why not.

    NVML reports pids of the host's PID namespace; inside a container psutil may not see them, so a pid
    psutil cannot find is someone else's as far as this gate can tell ("not visible here").
    """
    try:
        process = psutil.Process(pid)
        if pid == gate_pid or gate_pid in {parent.pid for parent in process.parents()}:
            return "own"
        return process.name() or "?"
    except psutil.NoSuchProcess:
        return "not visible here"
    except psutil.AccessDenied:
        return "ancestry not readable"


def split_processes(processes: Any, gate_pid: int, known_own: set[int] | None = None) -> tuple[int, list[str]]:
    """(number of own compute processes, one line per other one) from a recorded process list.

    `known_own` remembers pids already seen as the gate's own: a trainer that exits between NVML's list
    and the ancestry check is still the trainer, not a process "not visible here".
    """
    if not isinstance(processes, list):
        return 0, []
    known_own = set() if known_own is None else known_own
    own, others = 0, []
    for entry in processes:
        pid = entry.get("pid") if isinstance(entry, dict) else None
        if not isinstance(pid, int):
            continue
        owner = "own" if pid in known_own else process_owner(pid, gate_pid)
        if owner == "own":
            known_own.add(pid)
            own += 1
            continue
        used = number(entry.get("used_gpu_memory"))
        memory = f"{used / GIB:.2f} GiB" if used is not None else "memory n/a"
        others.append(f"pid {pid} ({owner}) using {memory}")
    return own, others


# A process computed in a sample when its kernels ran (or it used memory bandwidth) at least this share of the
# sample period. On an H200 a tenant that only allocated 0.76 GiB read sm 1 % once, right after its allocation,
# and 0 % after; one running matmuls read 96-99 % (tests/fixtures/nvml/h200_tenant_*.json).
ACTIVE_UTIL_PCT = 5.0


def active_processes(samples: Any, gate_pid: int, known_own: set[int] | None = None) -> str | None:
    """The other processes whose kernels ran (or that used memory bandwidth) at least ACTIVE_UTIL_PCT in a
    reading's per-process utilisation samples (NVML nvmlDeviceGetProcessUtilization since the reading before): one
    "pid N (name) sm S % mem M %" each, the highest of its samples; '' when none did; None where NVML could
    not say (an older recording, a driver or mode without it): then holding memory is all that is known."""
    if not isinstance(samples, list):
        return None
    known_own = set() if known_own is None else known_own
    busiest: dict[int, tuple[str, float, float]] = {}
    for entry in samples:
        pid = entry.get("pid") if isinstance(entry, dict) else None
        if not isinstance(pid, int):
            continue
        sm, mem = number(entry.get("sm_util")) or 0.0, number(entry.get("mem_util")) or 0.0
        if sm < ACTIVE_UTIL_PCT and mem < ACTIVE_UTIL_PCT:
            continue
        owner = "own" if pid in known_own else process_owner(pid, gate_pid)
        if owner == "own":
            known_own.add(pid)
            continue
        _, top_sm, top_mem = busiest.get(pid, (owner, 0.0, 0.0))
        busiest[pid] = (owner, max(top_sm, sm), max(top_mem, mem))
    return "; ".join(f"pid {pid} ({owner}) sm {sm:g} % mem {mem:g} %" for pid, (owner, sm, mem) in busiest.items())


def telemetry(reading: Mapping[str, Any], gate_pid: int, known_own: set[int] | None = None) -> dict[str, Telemetry]:
    """One NVML reading as samples.csv columns."""
    mem_used, power, mask = (number(reading.get(k)) for k in ("mem_used_bytes", "power_mw", "throttle_reasons"))
    own, others = split_processes(reading.get("compute_processes"), gate_pid, known_own)
    return {
        "gpu_util_pct": number(reading.get("gpu_util_pct")),
        "gpu_mem_util_pct": number(reading.get("mem_util_pct")),
        "gpu_mem_used_mib": None if mem_used is None else round(mem_used / MIB, 1),
        "gpu_sm_clock_mhz": number(reading.get("sm_clock_mhz")),
        "gpu_mem_clock_mhz": number(reading.get("mem_clock_mhz")),
        "gpu_temperature_c": number(reading.get("temperature_c")),
        "gpu_power_w": None if power is None else power / 1000.0,
        "gpu_clock_event_reasons": None if mask is None else int(mask),
        "gpu_throttle": None if mask is None else "+".join(reason_names(int(mask))),
        "gpu_own_processes": own,
        "gpu_other_processes": "; ".join(others),
        "gpu_other_active": active_processes(reading.get("process_utilization"), gate_pid, known_own),
    }


def _numbers(samples: Sequence[TelemetrySample], key: str) -> list[float]:
    return [float(v) for s in samples if isinstance(v := s.get(key), (int, float)) and not isinstance(v, bool)]


_PID = re.compile(r"^pid (\d+) ")
IDLE = 0x1  # gpu_idle: no kernel running (start-up, data loading); kept apart from the run's clock state


def _busiest(lines: Sequence[str]) -> str:
    """Of one process's "pid N (name) sm S % mem M %" lines, the one with the highest SM share."""
    def sm(line: str) -> float:
        found = re.search(r" sm ([0-9.]+) %", line)
        return float(found.group(1)) if found else 0.0

    return max(lines, key=sm)


def sample_weights(samples: Sequence[TelemetrySample]) -> list[float]:
    """Each sample's share of the window's time: the interval to the next sample (the last one gets the
    median interval); equal weights where the samples carry no `t_s`."""
    times = [t for s in samples if isinstance(t := s.get("t_s"), (int, float)) and not isinstance(t, bool)]
    if len(samples) < 2 or len(times) < len(samples):
        return [1.0] * len(samples)
    gaps = [max(float(b) - float(a), 0.0) for a, b in zip(times, times[1:])]
    last = sorted(gaps)[len(gaps) // 2]
    return gaps + [last]


def is_idle(sample: TelemetrySample) -> bool:
    """No kernel ran: NVML's gpu_idle reason, or 0 % utilisation over the sample period. Both occur during a
    trainer's start-up; on an H200 a start-up sample read 375 MHz at 0 % with no reason set (a clock-down
    between idle and busy), which would pass for a slow run if it counted."""
    mask, util = sample.get("gpu_clock_event_reasons"), sample.get("gpu_util_pct")
    return ((isinstance(mask, (int, float)) and bool(int(mask) & IDLE))
            or (isinstance(util, (int, float)) and not isinstance(util, bool) and util == 0))


def clock_state(samples: Sequence[TelemetrySample], reference_mhz: float | None) -> dict[str, Telemetry]:
    """The window's clock state over its non-idle samples (is_idle), time-weighted: mean SM and memory clock,
    mean power, the share below `reference_mhz` (the locked clock, else the maximum SM clock), the share in
    each clock-event reason; and the share of the window that was idle."""
    weights = sample_weights(samples)
    masks = [int(m) if isinstance(m := s.get("gpu_clock_event_reasons"), (int, float)) else None for s in samples]
    idle = [is_idle(s) for s in samples]
    busy = [(s, w, m) for s, w, m, i in zip(samples, weights, masks, idle) if not i]
    total = sum(weights)
    recorded = any(m is not None for m in masks) or any(isinstance(s.get("gpu_util_pct"), (int, float))
                                                        for s in samples)
    idle_weight = sum(w for w, i in zip(weights, idle) if i)
    state: dict[str, Telemetry] = {"active_samples": len(busy),
                                   "gpu_idle_frac": round(idle_weight / total, 4) if total and recorded else None}

    def mean(key: str) -> float | None:
        pairs = [(float(v), w) for s, w, _ in busy if isinstance(v := s.get(key), (int, float))]
        weight = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / weight if weight else None

    sm_mean, mem_mean, power_mean = mean("gpu_sm_clock_mhz"), mean("gpu_mem_clock_mhz"), mean("gpu_power_w")
    state["sm_clock_mean_mhz"] = None if sm_mean is None else round(sm_mean, 1)
    state["mem_clock_mean_mhz"] = None if mem_mean is None else round(mem_mean, 1)
    state["power_mean_w"] = None if power_mean is None else round(power_mean, 2)
    clocked = [(float(v), w) for s, w, _ in busy if isinstance(v := s.get("gpu_sm_clock_mhz"), (int, float))]
    weight = sum(w for _, w in clocked)
    state["sm_clock_below_ref_frac"] = (round(sum(w for v, w in clocked if v < reference_mhz) / weight, 4)
                                        if reference_mhz and weight else None)
    busy_weight = sum(w for _, w, m in busy if m is not None)
    for bit, name in CLOCK_EVENT_REASONS.items():
        if bit == IDLE or not busy_weight:
            continue
        share = sum(w for _, w, m in busy if m is not None and m & bit) / busy_weight
        if share:
            state[f"clock_event_{name}_frac"] = round(share, 4)
    return state


class CudaBackend:
    """NVML telemetry, foreign GPU processes and hardware slowdowns as evidence, GPU provenance."""

    name = "cuda"
    OPTIONS: Mapping[str, tuple[type, Any]] = {"device": (int, 0), "throttle_evidence": (bool, True)}

    def __init__(self, *, device: int = 0, throttle_evidence: bool = True, reader: NvmlReader | None = None,
                 gate_pid: int | None = None) -> None:
        self.device = device
        self.throttle_evidence = throttle_evidence
        self.reader: NvmlReader = reader if reader is not None else LiveNvml(device)
        self.gate_pid = os.getpid() if gate_pid is None else gate_pid
        self._own_pids: set[int] = set()
        self._clocks: tuple[float | None, float | None] | None = None

    @classmethod
    def detect(cls) -> CheckResult:
        try:
            pynvml = _import_pynvml()
        except NvmlUnavailable as exc:
            return CheckResult(cls.name, False, str(exc))
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            return CheckResult(cls.name, False, f"not available: NVML cannot start ({exc})")
        try:
            count = pynvml.nvmlDeviceGetCount()
            if count < 1:
                return CheckResult(cls.name, False, "not available: NVML sees no GPU")
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        except pynvml.NVMLError as exc:
            return CheckResult(cls.name, False, f"not available: NVML cannot read GPU 0 ({exc})")
        finally:
            pynvml.nvmlShutdown()
        name = name.decode() if isinstance(name, bytes) else name
        return CheckResult(cls.name, True, f"{count} GPU(s), GPU 0: {name}")

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: Path) -> CudaBackend:
        values = take_options(options, cls.OPTIONS, source=source, backend=cls.name)
        if values["device"] < 0:
            raise ConfigError(f"{source}: backend.cuda.device: must be a GPU index (0 or more), "
                              f"got {values['device']}")
        return cls(**values)

    def for_device(self, device: int) -> CudaBackend:
        """The same backend reading GPU `device` (a duet slot's GPU); the reader is the live one, or a
        recorded one's `for_device` when it has one."""
        reader = self.reader.for_device(device) if hasattr(self.reader, "for_device") else (
            LiveNvml(device) if isinstance(self.reader, LiveNvml) else self.reader)
        return CudaBackend(device=device, throttle_evidence=self.throttle_evidence, reader=reader,
                           gate_pid=self.gate_pid)

    # -- preflight and provenance -------------------------------------------------------------------

    def preflight(self) -> list[CheckResult]:
        try:
            static = self.reader.static()
            reading = self.reader.sample()
        except NvmlUnavailable as exc:
            return [CheckResult(f"GPU {self.device} (NVML)", False, str(exc))]
        checks = [CheckResult(f"GPU {self.device} (NVML)", True,
                              f"{static.get('name')}, driver {static.get('driver_version')}, CUDA "
                              f"{cuda_version(static.get('cuda_driver_version'))}")]
        _, others = split_processes(reading.get("compute_processes"), self.gate_pid)
        active = active_processes(reading.get("process_utilization"), self.gate_pid)
        busy = active.split("; ") if active else others if active is None else []
        if busy:
            detail = (f"{len(busy)} {'other process(es) compute on it' if active else 'compute process(es) already use it'}"
                      f": {'; '.join(busy[:3])}; wait for them or stop them before a series")
        elif others:  # NVML reports their activity, and they had none: holding memory alone slows no run
            detail = f"{len(others)} other process(es) hold memory on it, idle: {'; '.join(others[:3])}"
        else:
            detail = "no compute process on it"
        checks.append(CheckResult(f"no other process on GPU {self.device}", not busy, detail, machine=bool(busy)))
        return checks

    def provenance(self) -> dict[str, Any]:
        static = self.reader.static()
        memory, power = number(static.get("memory_total_bytes")), number(static.get("power_limit_mw"))
        try:
            bindings: str | None = version("nvidia-ml-py")
        except PackageNotFoundError:
            bindings = None
        return {
            "gpu_index": self.device, "device_count": static.get("device_count"), "gpu": static.get("name"),
            "uuid": static.get("uuid"), "driver_version": static.get("driver_version"),
            "cuda_driver_version": cuda_version(static.get("cuda_driver_version")),
            "nvml_version": static.get("nvml_version"),
            "memory_total_gib": None if memory is None else round(memory / GIB, 2),
            "power_limit_w": None if power is None else power / 1000.0,
            "max_sm_clock_mhz": number(static.get("max_sm_clock_mhz")), "nvidia_ml_py": bindings,
            **gpu_identity(static),
        }

    # -- in-window telemetry ------------------------------------------------------------------------

    def sample(self) -> dict[str, Telemetry]:
        return telemetry(self.reader.sample(), self.gate_pid, self._own_pids)

    def summarize(self, samples: Sequence[TelemetrySample]) -> dict[str, Telemetry | bool]:
        util, clock = _numbers(samples, "gpu_util_pct"), _numbers(samples, "gpu_sm_clock_mhz")
        temp, power = _numbers(samples, "gpu_temperature_c"), _numbers(samples, "gpu_power_w")
        memory = _numbers(samples, "gpu_mem_used_mib")
        masks = [int(m) for m in _numbers(samples, "gpu_clock_event_reasons")]
        locked, max_sm = self.clocks_mhz()
        seen = 0
        for mask in masks:
            seen |= mask
        others = {m.group(1) for s in samples for line in str(s.get("gpu_other_processes") or "").split("; ")
                  if (m := _PID.match(line))}
        return {
            "gpu_util_mean": sum(util) / len(util) if util else None,
            "gpu_mem_used_max_mib": max(memory) if memory else None,
            "sm_clock_min_mhz": min(clock) if clock else None,
            "temperature_max_c": max(temp) if temp else None,
            "power_max_w": max(power) if power else None,
            "throttled": bool(seen & SLOWDOWN_MASK) if masks else None,
            "clock_event_reasons": "+".join(reason_names(seen)) if masks else None,
            "other_gpu_processes": len(others),
            **clock_state(samples, locked if locked is not None else max_sm),
            "sm_clock_locked_mhz": locked,
        }

    def clocks_mhz(self) -> tuple[float | None, float | None]:
        """(locked SM clock where NVML reports one, maximum SM clock), read once: the reference of a run's
        clock state."""
        if self._clocks is None:
            static = self.reader.static()
            max_sm = number(static.get("max_sm_clock_mhz"))
            self._clocks = (locked_below_max(static.get("locked_clocks"), max_sm), max_sm)
        return self._clocks

    def window_evidence(self, samples: Sequence[TelemetrySample]) -> list[str]:
        """Another process that computed on the GPU in the window (its own activity, per process), or — where
        NVML could not report activity — that held memory there; and hardware slowdowns."""
        evidence = []
        first_seen: dict[str, str] = {}
        count: dict[str, int] = {}
        unknown: set[str] = set()  # holders seen in a sample whose per-process activity NVML did not report
        active: dict[str, list[str]] = {}
        for s in samples:
            for line in filter(None, str(s.get("gpu_other_processes") or "").split("; ")):
                key = (m.group(1) if (m := _PID.match(line)) else line)
                first_seen.setdefault(key, line)
                count[key] = count.get(key, 0) + 1
                if s.get("gpu_other_active") is None:
                    unknown.add(key)
            for line in filter(None, str(s.get("gpu_other_active") or "").split("; ")):
                active.setdefault(m.group(1) if (m := _PID.match(line)) else line, []).append(line)
        for key, lines in active.items():  # computed beside the run: evidence, whatever memory it held
            evidence.append(f"other GPU process {_busiest(lines)} computed on the GPU (in {len(lines)} of "
                            f"{len(samples)} samples)")
        for key, line in first_seen.items():  # held memory only: evidence only where activity is unknown
            if key in unknown and key not in active:
                evidence.append(f"other GPU process {line} (in {count[key]} of {len(samples)} samples)")
        if self.throttle_evidence:
            slowed = [int(m) for m in _numbers(samples, "gpu_clock_event_reasons") if int(m) & SLOWDOWN_MASK]
            if slowed:
                union = 0
                for mask in slowed:
                    union |= mask & SLOWDOWN_MASK
                evidence.append(f"GPU {self.device} clocks slowed by {'+'.join(reason_names(union))} "
                                f"(in {len(slowed)} of {len(samples)} samples)")
        return evidence

    def evidence_rules(self) -> list[str]:
        rules = [f"cuda backend (GPU {self.device}): a process on the GPU whose ancestors do not include the gate "
                 "process (or that this gate cannot see) and that computed there in the window (NVML per-process "
                 "utilisation: SM or memory > 0 % in any sample) is evidence (i); one that only holds memory is "
                 "recorded, not evidence, except in samples where NVML cannot report per-process utilisation "
                 "(there holding memory counts)."]
        if self.throttle_evidence:
            rules.append("cuda backend: an NVML clock-event reason hw_slowdown, sw_thermal_slowdown, "
                         "hw_thermal_slowdown or hw_power_brake_slowdown in any sample is evidence (i); "
                         "sw_power_cap and gpu_idle are recorded, not evidence.")
        return rules

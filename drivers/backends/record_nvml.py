"""Record real NVML readings as JSON, so the CUDA backend can be tested where no GPU exists.

Usage: python -m gatekit_drivers.backends.record_nvml --samples 5 --interval 0.2 > nvml.json
Each sample holds what the cuda backend reads in a run window; `static` holds what goes into provenance.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def _safe(call: Any, *args: Any) -> Any:
    import pynvml

    try:
        value = call(*args)
    except pynvml.NVMLError as exc:
        return {"nvml_error": str(exc)}
    if isinstance(value, bytes):
        return value.decode()
    return value


def static_info(pynvml: Any, handle: Any) -> dict[str, Any]:
    return {
        "name": _safe(pynvml.nvmlDeviceGetName, handle),
        "uuid": _safe(pynvml.nvmlDeviceGetUUID, handle),
        "driver_version": _safe(pynvml.nvmlSystemGetDriverVersion),
        "cuda_driver_version": _safe(pynvml.nvmlSystemGetCudaDriverVersion_v2),
        "nvml_version": _safe(pynvml.nvmlSystemGetNVMLVersion),
        "memory_total_bytes": _safe(lambda h: pynvml.nvmlDeviceGetMemoryInfo(h).total, handle),
        "power_limit_mw": _safe(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle),
        "max_sm_clock_mhz": _safe(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
        **identity(pynvml, handle),
    }


def identity(pynvml: Any, handle: Any) -> dict[str, Any]:
    """What tells two set-ups of one GPU model apart: firmware, ECC, persistence, compute and MIG modes, and
    the clocks it was told to run at (application clocks; locked clocks where this NVML reports them)."""
    sm, mem = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM
    return {
        "vbios_version": _safe(pynvml.nvmlDeviceGetVbiosVersion, handle),
        "ecc_mode": _safe(pynvml.nvmlDeviceGetEccMode, handle),  # [current, pending]
        "persistence_mode": _safe(pynvml.nvmlDeviceGetPersistenceMode, handle),
        "compute_mode": _safe(pynvml.nvmlDeviceGetComputeMode, handle),
        "mig_mode": _safe(pynvml.nvmlDeviceGetMigMode, handle),  # [current, pending]
        "max_mem_clock_mhz": _safe(pynvml.nvmlDeviceGetMaxClockInfo, handle, mem),
        "applications_sm_clock_mhz": _safe(pynvml.nvmlDeviceGetApplicationsClock, handle, sm),
        "applications_mem_clock_mhz": _safe(pynvml.nvmlDeviceGetApplicationsClock, handle, mem),
        "default_applications_sm_clock_mhz": _safe(pynvml.nvmlDeviceGetDefaultApplicationsClock, handle, sm),
        "default_applications_mem_clock_mhz": _safe(pynvml.nvmlDeviceGetDefaultApplicationsClock, handle, mem),
        "locked_clocks": locked_clocks(pynvml, handle),
    }


def locked_clocks(pynvml: Any, handle: Any) -> Any:
    """The SM clock range a `nvidia-smi -lgc` lock holds, where this NVML can say: the P0 performance state's
    minimum and maximum SM clock (they meet when locked); {"nvml_error": ...} where NVML cannot tell."""
    query = getattr(pynvml, "nvmlDeviceGetMinMaxClockOfPState", None)
    if query is None:
        return {"nvml_error": "this nvidia-ml-py has no nvmlDeviceGetMinMaxClockOfPState"}
    return _safe(lambda h: list(query(h, pynvml.NVML_CLOCK_SM, pynvml.NVML_PSTATE_0)), handle)


NO_SAMPLES = (0, 6)  # NVML_SUCCESS with nothing to return, NVML_ERROR_NOT_FOUND: no process was active since


def process_utilization(pynvml: Any, handle: Any, since_us: int) -> Any:
    """Each process's GPU activity sampled since `since_us` (NVML's CPU timestamps, µs since the epoch):
    [{pid, time_stamp_us, sm_util, mem_util}] (% of the sample period its kernels ran / it used memory
    bandwidth); [] when no process was active; {"nvml_error": ...} where NVML cannot say (old driver, MIG)."""
    try:
        samples = pynvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except pynvml.NVMLError as exc:
        if getattr(exc, "value", None) in NO_SAMPLES:
            return []
        return {"nvml_error": str(exc)}
    return [{"pid": s.pid, "time_stamp_us": s.timeStamp, "sm_util": s.smUtil, "mem_util": s.memUtil}
            for s in samples]


def sample(pynvml: Any, handle: Any, since_us: int | None = None) -> dict[str, Any]:
    """One reading; the processes' activity since `since_us` (default: the second before it)."""
    since = int((time.time() - 1.0) * 1e6) if since_us is None else since_us
    util = _safe(pynvml.nvmlDeviceGetUtilizationRates, handle)
    mem = _safe(pynvml.nvmlDeviceGetMemoryInfo, handle)
    procs = _safe(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    return {
        "gpu_util_pct": util.gpu if hasattr(util, "gpu") else util,
        "mem_util_pct": util.memory if hasattr(util, "memory") else util,
        "mem_used_bytes": mem.used if hasattr(mem, "used") else mem,
        "sm_clock_mhz": _safe(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": _safe(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM),
        "temperature_c": _safe(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
        "power_mw": _safe(pynvml.nvmlDeviceGetPowerUsage, handle),
        "throttle_reasons": _safe(pynvml.nvmlDeviceGetCurrentClocksEventReasons, handle),
        "compute_processes": [{"pid": p.pid, "used_gpu_memory": p.usedGpuMemory} for p in procs]
        if isinstance(procs, list) else procs,
        "process_utilization": process_utilization(pynvml, handle, since),
    }


def probe(pynvml: Any, handle: Any) -> dict[str, Any]:
    """Every clock id NVML's nvmlDeviceGetClock knows, for SM and memory, and the clock-related calls present."""
    answers: dict[str, Any] = {}
    for clock_id in ("CURRENT", "APP_CLOCK_TARGET", "APP_CLOCK_DEFAULT", "CUSTOMER_BOOST_MAX"):
        for kind in ("SM", "MEM"):
            answers[f"{clock_id}_{kind}"] = _safe(pynvml.nvmlDeviceGetClock, handle,
                                                  getattr(pynvml, f"NVML_CLOCK_{kind}"),
                                                  getattr(pynvml, f"NVML_CLOCK_ID_{clock_id}"))
    answers["calls"] = sorted(name for name in dir(pynvml) if name.startswith("nvmlDevice")
                              and ("Clock" in name or "Lock" in name))
    return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--index", type=int, default=0, help="the GPU to record (NVML index)")
    parser.add_argument("--probe", action="store_true",
                        help="also record which clock queries this NVML offers and what they answer")
    args = parser.parse_args(argv)
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(args.index)
        record = {"device_count": pynvml.nvmlDeviceGetCount(), "static": static_info(pynvml, handle),
                  "samples": []}
        if args.probe:
            record["probe"] = probe(pynvml, handle)
        since: int | None = None  # each sample's process activity since the one before it
        for _ in range(args.samples):
            now_us = int(time.time() * 1e6)
            record["samples"].append({"t": time.monotonic(), **sample(pynvml, handle, since)})
            since = now_us
            time.sleep(args.interval)
    finally:
        pynvml.nvmlShutdown()
    json.dump(record, sys.stdout, indent=1, default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

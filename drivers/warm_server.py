"""The warm parent of `[driver] preload`: imports the heavy modules once, then forks one child per run.

Started by the command driver as `PYTHON warm_server.py MODULE... -- TARGET` (by path, so it needs only the standard
library of the trainer's Python, whatever is installed there). It never touches CUDA: a CUDA context does not
survive a fork, so each child initialises it fresh, as a cold run does (checked before every fork).

Protocol, one JSON object a line: the driver writes a request on stdin (argv after the interpreter, cwd, env,
the stdout/stderr paths, the cores); this process answers `{"pid": N}` when the child is forked and
`{"pid": N, "status": S}` (os.waitpid's status) when it has exited and been reaped. It serves one run at a time.
The child leads its own session and process group, as a cold run does, so the driver stops it and whatever it
started with one killpg. When stdin ends (the gate exited, however it died), a child still running is killed
with its group and this process exits: a warm parent never outlives its gate.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import time
from typing import Any

POLL_S = 0.001  # where there is no pidfd (macOS): how often a running child's exit is looked for


def say(message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode("utf-8")
    while data:
        data = data[os.write(1, data):]


def cuda_initialised() -> bool:
    """Whether a preloaded torch has a CUDA context here (it must not: a forked child could not use it)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return bool(cuda is not None and cuda.is_initialized())


def run_child(request: dict[str, Any]) -> int:
    """In the forked child: become a run exactly as `python ARGV...` would be, and return its exit code."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, target in ((null, 0), (out, 1), (err, 2)):  # the protocol's pipes are gone from here on
        os.dup2(fd, target)
        os.close(fd)
    if request.get("cpus"):
        os.sched_setaffinity(0, set(request["cpus"]))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import runpy

    argv = request["argv"]
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file in argv[0], as `python -m` does
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        code: Any = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # what the interpreter does with an uncaught exception: the traceback, status 1
        import traceback

        traceback.print_exc()
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    return code


def finish_child(code: int) -> None:
    """Leave the child as the interpreter leaves a script: threads joined, atexit run, output flushed."""
    import atexit
    import threading

    try:
        getattr(threading, "_shutdown", lambda: None)()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code & 0xFF)


def wait_for(pid: int) -> int | None:
    """The child's wait status once it exits; None when stdin ended first (the gate is gone)."""
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    try:
        while True:
            watched = [0] + ([pidfd] if pidfd is not None else [])
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else POLL_S)
            if 0 in ready and not os.read(0, 1 << 16):
                return None
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
    finally:
        if pidfd is not None:
            os.close(pidfd)


def serve(preload: list[str]) -> int:
    began = time.perf_counter()
    try:
        versions = {name: str(getattr(importlib.import_module(name), "__version__", "")) for name in preload}
    except BaseException as exc:  # an import that fails is the driver's message, not a traceback lost here
        say({"error": f"cannot import {', '.join(preload)}: {type(exc).__name__}: {exc}"})
        return 3
    if cuda_initialised():
        say({"error": "importing the preloaded modules initialised CUDA; a forked child cannot use that context"})
        return 3
    say({"ready": os.getpid(), "preloaded": versions, "import_s": round(time.perf_counter() - began, 4)})
    pending = b""
    while True:
        while b"\n" not in pending:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return 0  # the gate closed its end: done
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        request = json.loads(line)
        if cuda_initialised():  # nothing here may touch CUDA; a child would inherit a context it cannot use
            say({"error": "CUDA was initialised in the warm parent; refusing to fork"})
            return 3
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = run_child(request)
            finally:
                finish_child(code)
        say({"pid": pid})
        status = wait_for(pid)
        if status is None:  # the gate is gone: its run goes with it
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return 0
        say({"pid": pid, "status": status})


if __name__ == "__main__":
    # Started by path: its own folder (the drivers' package) must not shadow a trainer's imports.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    sys.path.insert(0, "")
    # MODULE... [-- TARGET...]: what follows `--` (the script or `-m MODULE` the runs execute) is there only to be
    # seen: this process's command line, and each forked run's, then match the gate's busy_pattern as a cold
    # run's would
    modules = sys.argv[1:sys.argv.index("--")] if "--" in sys.argv else sys.argv[1:]
    raise SystemExit(serve(modules))

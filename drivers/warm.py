"""The gate's side of a warm start (`[driver] preload`): warm parents that fork the runs, one per arm.

A warm parent (`warm_server.py`, started with the trainer's own Python) imports the preloaded modules once;
each run is then a child it forks, in its own session and process group as a cold run is, so timeouts, the
group kill and the escape sweep treat it as they treat a cold run. A parent is kept per interpreter, working
directory and environment (the driver's and the arm's: what an import may read), so the arms of a gate never
share one unless they would import alike; a duet runs two at once, each in its own parent.

A parent that dies or stops answering is a failed run (never a hang: its pipe ends, or the run's timeout
comes), and the next run starts a new parent. The parent leaves with the gate: when the gate's end of its
stdin closes, it kills a child still running and exits.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.driver import register_helper, unregister_helper

SERVER = Path(__file__).with_name("warm_server.py")
ANSWER_S = 10.0  # how long a parent may take to say it forked, or to report a child it has killed


class WarmParentError(Exception):
    """The warm parent failed (could not preload, died, stopped answering): the run fails with this text."""


class ParentSilent(WarmParentError):
    """The warm parent said nothing in time: during a run, the run's timeout."""


@dataclass(frozen=True, slots=True)
class ChildExit:
    """How a forked run ended: its exit code as Popen reports one (negative: the signal) or None (timed out)."""

    exit_code: int | None
    wallclock_s: float


class WarmParent:
    """One warm parent process and its pipes; serves one run at a time."""

    def __init__(self, python: str, preload: Sequence[str], *, cwd: Path, env: Mapping[str, str],
                 timeout_s: float, target: Sequence[str] = ()) -> None:
        """`target`: the script (or `-m MODULE`) its runs execute, shown on its command line (and so on every
        forked run's), where a busy_pattern looks for a trainer."""
        self.preload = tuple(preload)
        try:
            self.process = subprocess.Popen([python, str(SERVER), *preload, "--", *target], cwd=cwd, env=dict(env),
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise WarmParentError(f"cannot start the warm parent with {python!r}: {exc.strerror or exc}") from None
        register_helper(self.process.pid)
        self._pending = b""
        ready = self._answer(timeout_s, "preload")
        if "error" in ready:
            self.close()
            raise WarmParentError(f"warm parent: {ready['error']}")
        self.pid = self.process.pid
        self.preloaded: dict[str, str] = dict(ready["preloaded"])
        self.import_s = float(ready["import_s"])

    def alive(self) -> bool:
        return self.process.poll() is None

    def _answer(self, timeout_s: float, during: str) -> dict[str, Any]:
        """The parent's next line; WarmParentError when it ends its output or says nothing within `timeout_s`."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise ParentSilent(f"the warm parent (pid {self.process.pid}) said nothing for "
                                      f"{timeout_s:g} s ({during})")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self.process.wait()
                raise WarmParentError(f"the warm parent (pid {self.process.pid}) exited ({during}) with "
                                      f"status {code}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def fork_run(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdout: Path, stderr: Path,
                 cpus: Sequence[int], timeout_s: float, stop_group: Any) -> ChildExit:
        """Fork one run and wait for it: `argv` after the interpreter. The wallclock runs from the request to
        the parent's report of the exit. Then, or on a timeout, an interrupt or the parent's death,
        `stop_group(pgid)` stops the child's process group. WarmParentError when the parent fails (the
        parent cannot serve again then: close it)."""
        assert self.process.stdin is not None
        request = {"argv": list(argv), "cwd": str(cwd), "env": dict(env), "stdout": str(stdout),
                   "stderr": str(stderr), "cpus": sorted(cpus)}
        started = time.perf_counter()
        try:
            self.process.stdin.write((json.dumps(request) + "\n").encode("utf-8"))
            self.process.stdin.flush()
        except OSError:
            raise WarmParentError(f"the warm parent (pid {self.process.pid}) is gone") from None
        pid = int(self._answer(timeout_s, "forking the run")["pid"])
        try:
            answer = self._answer(max(0.0, timeout_s - (time.perf_counter() - started)), "the run")
        except ParentSilent:  # the run's time is up
            wallclock = time.perf_counter() - started
            stop_group(pid)
            self._answer(ANSWER_S, "reaping a timed-out run")  # the parent reaped it, else it is broken
            return ChildExit(None, wallclock)
        except BaseException:  # the parent died, or an interrupt: the run's group never outlives this call
            stop_group(pid)
            raise
        wallclock = time.perf_counter() - started
        stop_group(pid)  # after a normal exit too: what the run left in its group cannot load the next
        return ChildExit(os.waitstatus_to_exitcode(int(answer["status"])), wallclock)

    def close(self) -> None:
        """Stop the parent (its stdin closes: it exits), and reap it."""
        try:
            if self.process.stdin is not None:
                self.process.stdin.close()
            self.process.wait(timeout=ANSWER_S)
        except (OSError, subprocess.TimeoutExpired):
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        finally:
            if self.process.stdout is not None:
                self.process.stdout.close()
            unregister_helper(self.process.pid)


class WarmParents:
    """The warm parents of one driver, by (interpreter, cwd, environment); thread-safe for a duet's two runs."""

    def __init__(self, preload: Sequence[str]) -> None:
        self.preload = tuple(preload)
        self._idle: dict[tuple[Any, ...], list[WarmParent]] = {}
        self._lock = threading.Lock()

    def take(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str],
             timeout_s: float) -> tuple[tuple[Any, ...], WarmParent]:
        """An idle live parent for a run of `argv` (the interpreter, then the script or `-m MODULE` and its
        arguments) in `cwd` with `env`, or a new one (its preload happens here, before any clock starts)."""
        python, target = argv[0], tuple(argv[1:3] if list(argv[1:2]) == ["-m"] else argv[1:2])
        key = (python, target, str(cwd), tuple(sorted(env.items())))
        with self._lock:
            idle = self._idle.setdefault(key, [])
            while idle:
                parent = idle.pop()
                if parent.alive():
                    return key, parent
                parent.close()
        return key, WarmParent(python, self.preload, cwd=cwd, env=env, timeout_s=timeout_s, target=target)

    def give_back(self, key: tuple[Any, ...], parent: WarmParent) -> None:
        with self._lock:
            self._idle.setdefault(key, []).append(parent)

    def close(self) -> None:
        with self._lock:
            parents = [parent for idle in self._idle.values() for parent in idle]
            self._idle.clear()
        for parent in parents:
            parent.close()

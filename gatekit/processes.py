"""Stopping a trainer and everything it started, without a second Ctrl-C cutting the cleanup short.

A trainer runs as the leader of its own process group, so one `killpg` reaches every process it spawned —
except those that left the group (`setsid`, daemonizing). Those still carry the trainer contract's
`GATEKIT_RUN_DIR` in their environment, so they are found by it: every process whose environment names a
run directory of this series is a leftover of that run.

A process that calls `setsid` *and* clears its environment escapes both. On Linux the gate therefore
becomes a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`) while a series runs: every descendant whose
parent exits is re-parented to gatekit instead of init, so after a run any child of the gate that it did not
have when it became the subreaper is an escaped descendant of a run (`stop_escapees`). macOS and other
systems have no subreaper: there only the process-group kill and the environment scan apply.

Escapees are frozen before they are killed (`freeze_and_kill`): each one found gets SIGSTOP, which it
cannot catch, and the search is repeated — its children, the gate's new children, the marked processes —
until a search finds nothing new and every process found has stopped; only then does everything get
SIGKILL. So a process that forks a successor and exits over and over, or answers SIGTERM by forking a copy
of itself, cannot stay one step ahead: a stopped process forks nothing. No cgroup is used (see
docs/reliability.md for what that leaves open).
"""

from __future__ import annotations

import ctypes
import functools
import os
import shlex
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import psutil

from gatekit.contract import ENV_RUN_DIR
from gatekit.records import Record
from gatekit.sanitize import show_controls
from gatekit.signals import signals_deferred

_PROC = Path("/proc")
# How long a freeze chases a process tree that keeps forking faster than it is stopped (a search takes
# milliseconds; a relay of Python processes is caught within tens of them)
FREEZE_S = 5.0
KILL_WAIT_S = 2.0  # SIGKILL cannot be refused; this only waits for the kernel to finish the processes
_STOPPED_STATES = frozenset("TtZXx")  # stopped, traced, or already dead: forks nothing more


def _environ_bytes(pid: int) -> bytes | None:
    try:
        with open(_PROC / str(pid) / "environ", "rb") as handle:
            return handle.read()
    except OSError:
        return None


def processes_in_run_dirs(prefix: Path, *, exclude: Iterable[int] = ()) -> list[int]:
    """PIDs of live processes whose GATEKIT_RUN_DIR is `prefix` or lies under it (this process excluded)."""
    skip = {os.getpid(), *exclude}
    exact = f"{ENV_RUN_DIR}={prefix}".encode()
    found = []
    if _PROC.is_dir():  # Linux: read the environments directly, about 0.3 ms for a hundred processes
        for entry in os.listdir(_PROC):
            if not entry.isdigit() or int(entry) in skip:
                continue
            environ = _environ_bytes(int(entry))
            if environ and any(var == exact or var.startswith(exact + b"/") for var in environ.split(b"\0")):
                found.append(int(entry))
    else:  # macOS and others: psutil reads what the OS allows for our own processes
        for process in psutil.process_iter(["pid"]):
            if process.info["pid"] in skip:
                continue
            try:
                value = process.environ().get(ENV_RUN_DIR, "")
            except psutil.Error:
                continue
            if value == str(prefix) or value.startswith(f"{prefix}/"):
                found.append(process.info["pid"])
    return [pid for pid in found if _live(pid)]


def stop_pids(pids: Iterable[int], grace_s: float) -> list[int]:
    """SIGTERM each process, SIGKILL whatever outlives `grace_s`; returns the PIDs that were signalled."""
    signalled = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_live(pid) for pid in signalled):
        time.sleep(0.02)
    for pid in signalled:
        if _live(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
    deadline = time.monotonic() + 2.0  # SIGKILL cannot be refused; this only waits for the kernel
    while time.monotonic() < deadline and any(_live(pid) for pid in signalled):
        time.sleep(0.01)
    return signalled


def stop_run_processes(prefix: Path) -> list[int]:
    """Freeze and kill every leftover process of the run directory (or series directory) `prefix`, with
    whatever it started; returns the PIDs that were stopped."""
    with signals_deferred():
        frozen = freeze_and_kill(lambda: processes_in_run_dirs(prefix))
        reap(frozen)
    return list(frozen)


# -- the child subreaper (Linux >= 3.4) ------------------------------------------------------------------

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
PR_GET_CHILD_SUBREAPER = 37
COMMAND_CHARS = 200  # an escaped process's command line as recorded: enough to recognise it


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """libc where prctl(2) exists (Linux); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def is_subreaper() -> bool:
    """Whether this process is a child subreaper now (always False off Linux)."""
    libc = _libc()
    if libc is None:
        return False
    flag = ctypes.c_int(0)
    done = libc.prctl(ctypes.c_int(PR_GET_CHILD_SUBREAPER), ctypes.byref(flag), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0))
    return done == 0 and flag.value != 0


def become_subreaper(on: bool = True) -> bool:
    """Make this process a child subreaper (or stop being one): True when the kernel agreed.

    False on macOS and other systems, which have no such thing."""
    libc = _libc()
    if libc is None:
        return False
    return libc.prctl(ctypes.c_int(PR_SET_CHILD_SUBREAPER), ctypes.c_ulong(1 if on else 0), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0


def child_pids() -> set[int]:
    """PIDs of this process's children, zombies included."""
    return set(_child_pids_of(os.getpid()))


def _child_pids_of(pid: int) -> list[int]:
    """PIDs of `pid`'s children. Linux lists them per thread (an adopted orphan goes to one of the threads)
    in /proc/<pid>/task/*/children, without scanning every process as psutil must."""
    if not _proc_lists_children():
        return _psutil_children(pid)
    try:
        tasks = os.listdir(_PROC / str(pid) / "task")
    except OSError:  # the process is gone
        return []
    found: list[int] = []
    for task in tasks:
        try:
            with open(_PROC / str(pid) / "task" / task / "children") as handle:
                found += [int(word) for word in handle.read().split()]
        except OSError:  # that thread ended meanwhile
            continue
    return list(dict.fromkeys(found))


@functools.cache
def _proc_lists_children() -> bool:
    """Whether /proc has the per-thread children lists (Linux with CONFIG_PROC_CHILDREN)."""
    return (_PROC / "self" / "task" / str(os.getpid()) / "children").is_file()


def _psutil_children(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def _state(pid: int) -> str | None:
    """A process's state letter as the kernel reports it (R, S, D, T, Z, ...), None when it is gone."""
    try:
        with open(_PROC / str(pid) / "stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        if _PROC.is_dir():
            return None
    try:  # no /proc (macOS): psutil's names for the states that matter here
        status = psutil.Process(pid).status()
    except psutil.Error:
        return None
    return {psutil.STATUS_ZOMBIE: "Z", psutil.STATUS_STOPPED: "T", psutil.STATUS_DEAD: "X"}.get(status, "R")


def _live(pid: int) -> bool:
    state = _state(pid)
    return state is not None and state not in "ZXx"


def _signal(pid: int, sig: int) -> bool:
    """Send `sig` to `pid`; False when there is no such process any more."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def freeze_and_kill(find: Callable[[], Iterable[int]]) -> dict[int, str]:
    """Stop everything `find()` returns, with all its descendants, so that nothing can fork away; then kill it.

    Each process found gets SIGSTOP at once (no process can catch or ignore it; sent before anything else is
    read, so a process that lives for one fork is still caught), and the live ones' command lines are
    recorded; then `find()` and the children of every frozen process are searched again, until a search
    finds no new live process and every frozen one has really stopped (a fork already under way when the
    signal came completes: its child is found by the next search). Then all of them get SIGKILL, which
    reaches a stopped process too, and are waited for (not reaped: see `reap`). Gives up chasing after
    FREEZE_S (a tree forking faster than the search) and kills what it holds. `find()` must return only
    PIDs that cannot have been reused (this process's unreaped children, or processes found just now).
    Returns {pid: command line} of the live processes it stopped.
    """
    frozen: dict[int, str] = {}
    exited: set[int] = set()
    deadline = time.monotonic() + FREEZE_S
    while True:
        candidates = [*find(), *(child for pid in frozen for child in _child_pids_of(pid))]
        signalled = [pid for pid in dict.fromkeys(candidates)
                     if pid not in frozen and pid != os.getpid() and _signal(pid, signal.SIGSTOP)]
        new = [pid for pid in signalled if _live(pid)]
        frozen.update((pid, _command_line(pid)) for pid in new)
        # one that had exited may have left children, re-parented since the search: search once more
        just_exited = {pid for pid in signalled if pid not in frozen} - exited
        exited |= just_exited
        settled = not new and not just_exited and all((_state(pid) or "X") in _STOPPED_STATES for pid in frozen)
        if settled or time.monotonic() >= deadline:
            break
        if not new:
            time.sleep(0.0005)  # SIGSTOP is sent; the kernel is still stopping a process that was running
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    kill_deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < kill_deadline and any(_live(pid) for pid in frozen):
        time.sleep(0.005)
    return frozen


# Children a driver started to serve runs, not as one (a warm parent that forks the runs): never an escapee.
_helpers: set[int] = set()


def register_helper(pid: int) -> None:
    """Mark a child of this process that a driver keeps across runs (it reaps it itself): no sweep stops it."""
    _helpers.add(pid)


def unregister_helper(pid: int) -> None:
    """The helper `pid` was stopped and reaped by its driver (call before its PID can be reused)."""
    _helpers.discard(pid)


def adopted_children(known: Iterable[int]) -> list[int]:
    """This process's children that are not in `known` (the children it had before) nor a driver's helper:
    with the subreaper on, descendants of a run re-parented to gatekit. The exited ones are reaped first, so
    no PID returned can have been reused until the next call. The sampler is a thread, not one."""
    skip = set(known) | _helpers
    reap_orphaned_zombies(skip)
    return [pid for pid in child_pids() if pid not in skip]


def reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those of `pids` that are this process's exited children, so no zombie
    piles up under the subreaper; other PIDs (not our children, still running) are left alone."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue


def reap_orphaned_zombies(known: Iterable[int]) -> None:
    """Reap the exited children of this process that are not in `known` (e.g. members of a trainer's
    process group that were re-parented to the subreaper and then killed with the group). A driver's helper
    is its driver's to reap."""
    skip = set(known) | _helpers
    reap(pid for pid in child_pids() if pid not in skip)


def reap_group_zombies(pgid: int, *, keep: int) -> None:
    """Reap exited children of this process in process group `pgid`, except `keep` (the trainer, which its
    Popen waits for). With the subreaper on, a trainer's children are re-parented to the gate when the
    trainer exits; killed with the group they stay zombies, and a zombie keeps `killpg(pgid, 0)` succeeding."""
    while True:
        try:  # WNOWAIT: look without reaping, so the trainer's own status is never taken from its Popen
            info = os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except (ChildProcessError, AttributeError, OSError):  # none in the group, or no waitid here
            return
        if info is None or info.si_pid == keep or info.si_pid <= 0:
            return
        reap([info.si_pid])


@dataclass(frozen=True, slots=True)
class Escapee(Record):
    """A process that outlived its run: its pid and command line (escaped for terminals, bounded)."""

    pid: int
    command: str


def escaped_evidence(escaped: list[Escapee], source: str = "the run") -> str:
    """The window evidence line naming the processes that escaped a run (or a duet pair: `source`)."""
    count = (f"1 process escaped {source} and was" if len(escaped) == 1
             else f"{len(escaped)} processes escaped {source} and were")
    return f"{count} stopped: " + ", ".join(f"pid {e.pid} `{e.command}`" for e in escaped)


def _command_line(pid: int) -> str:
    try:
        process = psutil.Process(pid)
        try:
            words = process.cmdline() or [process.name()]
        except psutil.ZombieProcess:  # it exited as it was found: its name is all that is left
            words = [process.name()]
    except psutil.Error:
        return "?"
    # what a trainer chose as a command line is printed on the gate's terminal: no control characters
    text = show_controls(shlex.join(words))
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 1] + "…"


def stop_escapees(run_dir: Path, known: Iterable[int]) -> list[Escapee]:
    """Find, stop and reap the processes that escaped the run in `run_dir`, and say which they were.

    Escaped are the children of this process not in `known` (descendants re-parented to the subreaper;
    the trainer itself has been waited for) and the processes whose environment still names `run_dir`,
    each with all its descendants: frozen, recorded (pid, command line) and killed (`freeze_and_kill`),
    then reaped. `known` must not hold a process of any run: one that survived its run is found again.
    """
    return _sweep(lambda skip: [*adopted_children(skip), *processes_in_run_dirs(run_dir)], known)


def group_members(pgid: int) -> list[int]:
    """PIDs of the live processes in process group `pgid` (this process excluded)."""
    found = []
    for pid in psutil.pids():
        if pid == os.getpid():
            continue
        try:
            if os.getpgid(pid) == pgid:
                found.append(pid)
        except OSError:  # gone meanwhile, or not ours to ask about
            continue
    return [pid for pid in found if _live(pid)]


def stop_command_tree(pgid: int, known: Iterable[int]) -> list[Escapee]:
    """After a command gatekit started as the leader of its own session (`start_new_session`, group `pgid`)
    ended or timed out: freeze and kill whatever is left of its process group, with every descendant
    re-parented to this child subreaper (a `setsid` daemon, a background child: see `child_subreaper`), and
    say which they were. `known` are this process's children that are not the command's (those it had when it
    became the subreaper). The command itself must have been waited for. The sweep of a run, for a command
    that is not a run (a bisect's build): it has no GATEKIT_RUN_DIR to be found by."""
    return _sweep(lambda skip: [*group_members(pgid), *adopted_children(skip)], known)


def _sweep(found: Callable[[set[int]], list[int]], known: Iterable[int]) -> list[Escapee]:
    """Freeze and kill what `found(known)` lists (asked again until nothing is left), reap it and the orphaned
    zombies, and say which processes they were: the one sweep of a run and of a build."""
    skip = set(known)
    with signals_deferred():
        frozen = freeze_and_kill(lambda: found(skip))
        reap(frozen)
        reap_orphaned_zombies(skip)
    return [Escapee(pid, command) for pid, command in frozen.items()]


@dataclass(frozen=True, slots=True)
class Subreaper:
    """This process as a child subreaper: whether it is one, and the children it had when it became one
    (a run's escapees are the children it has beyond those)."""

    enabled: bool
    own: frozenset[int]


@contextmanager
def child_subreaper() -> Iterator[Subreaper]:
    """This process is a child subreaper inside the block (Linux); yields whether it is and its own children.

    On leaving, whatever was re-parented to it and still runs is frozen, killed and reaped, and the flag is
    restored, so a library caller (or a test process) is not left adopting orphans. A driver's helpers stay:
    their driver stops them."""
    was = is_subreaper()
    enabled = was or become_subreaper()
    own = frozenset(child_pids())
    try:
        yield Subreaper(enabled, own)
    finally:
        if enabled and not was:
            with signals_deferred():
                reap(freeze_and_kill(lambda: adopted_children(own)))
                reap_orphaned_zombies(own)
                become_subreaper(False)

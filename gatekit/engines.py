"""Where a campaign's gates run: each gate is its own `gate run` process, started by one of two engines.

- local: up to `max_parallel` gate processes at once on this host, from this (single) thread; each pinned to
  its own GPU(s) (CUDA_VISIBLE_DEVICES) and its own slot of CPU cores (sched_setaffinity), so the gates
  running side by side do not load each other's runs.
- ray: each gate is a Ray task asking for its resources (num_cpus, num_gpus); the task runs the same gate
  process on whichever worker Ray picks, with the GPUs Ray assigned, and sends the gate's series folder,
  log and finding back packed (tar), so they land on the machine that started the campaign.

A gate process is one process per gate because the run loop's signal handling and its child subreaper are
process-wide. It is started through `python -m gatekit.engines` (see `launch_argv`), which pins the CPU
cores and asks Linux to SIGTERM the gate when its parent (the campaign, or the Ray worker) dies — a gate
that loses its parent journals itself interrupted and stops its trainer instead of running on unwatched —
and then execs the gate. `ray` is imported inside the Ray functions only; this module imports nothing heavy,
so the launcher starts fast.
"""

from __future__ import annotations

import enum
import io
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from gatekit.distribution import install_hint
from gatekit.errors import ConfigError, GatekitError, OutputError, RunFileError, SeriesInterrupted
from gatekit.records import Record
from gatekit.runfiles import read_run_file
from gatekit.signals import interrupt_on_sigterm
from gatekit.slots import CAN_PIN_CPUS, cpu_list
from gatekit.storage import SeriesLayout, atomic_write_bytes, open_own_file, try_lock, unlock

ENGINES = ("local", "ray")
STOP_GRACE_S = 120.0  # a gate asked to stop journals its interruption and stops its trainer within this
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
ATTEMPT_HEADER = "== gate "  # starts each attempt's part of a gate's log


class GateStatus(enum.Enum):
    """How a gate's latest attempt ended. Only `finished` is skipped by `--resume`."""

    FINISHED = "finished"  # the series wrote its finding (any decision, invalid included)
    # stopped part-way (signal, lost worker) or by the machine (exit 4: a write that failed, a machine not ready
    # at preflight): resumable
    INTERRUPTED = "interrupted"
    FAILED = "failed"  # ended with an error and no finding (e.g. an arm config missing): tried again on resume


@dataclass(frozen=True, slots=True)
class Pinning(Record):
    """Where a gate ran: its CPU cores (empty: not pinned, e.g. Ray's logical CPUs), its GPUs as
    CUDA_VISIBLE_DEVICES lists them (empty: none visible) and the host (and Ray node)."""

    cores: tuple[int, ...] = ()
    gpus: tuple[str, ...] = ()
    node: str = ""

    def describe(self) -> str:
        cores = cpu_list(self.cores) if self.cores else "any"
        gpus = ",".join(self.gpus) if self.gpus else "none"
        return f"cores {cores}, GPU(s) {gpus}" + (f" on {self.node}" if self.node else "")


@dataclass(frozen=True, slots=True)
class GateTask:
    """One gate of a campaign, as an engine runs it. Its series go to `runs_dir`, a folder of its own (a
    runs folder holds one running series at a time), so the gate's series is the one folder there."""

    key: str  # the gate's name in the campaign and its folder: "01-resident-graph-resident-graph"
    gate_path: Path
    off: str
    on: str
    runs_dir: Path  # <campaign dir>/<key>
    out_dir: Path  # the campaign's findings folder, shared by its gates
    log_path: Path  # <campaign dir>/logs/<key>.log: the gate process's stdout and stderr, every attempt
    campaign_dir: Path
    gpus: int = 0
    cpus: int = 1
    env: Mapping[str, str] = field(default_factory=dict)  # added to the gate process's environment


@dataclass(frozen=True, slots=True)
class GateOutcome(Record):
    """How one attempt at a gate ended, read from its exit code and its series folder."""

    key: str
    status: GateStatus
    exit_code: int | None  # None: the process never reported one (its worker was lost)
    series_dir: Path | None = field(metadata={"omit": None})  # None: the gate made no series folder
    # the finding's JSON file (its TOML twin lies beside it); None: no finding
    finding_path: Path | None = field(metadata={"key": "finding", "omit": None})
    decision: str = ""  # the finding's decision, when finished
    detail: str = ""  # the gate's last error line, or why the attempt was lost
    pinning: Pinning = field(default_factory=Pinning)
    # When a Ray worker started the gate process (ISO time, UTC): a Ray gate is journaled when it is
    # submitted, and may wait there for its resources. Empty for the local engine, whose gate_start is the start.
    began: str = field(default="", metadata={"omit": ""})


Started = Callable[[GateTask, "Pinning | None"], None]  # None: submitted to Ray; where it runs is known at its end
Finished = Callable[[GateOutcome], None]


# -- plans (pure) ---------------------------------------------------------------------------------

def core_sets(cores: Sequence[int], slots: int) -> list[tuple[int, ...]]:
    """Split the cores this process may use into `slots` disjoint, contiguous sets of (almost) equal size;
    the first `len(cores) % slots` sets get one core more."""
    ordered = sorted(cores)
    if slots < 1 or slots > len(ordered):
        raise ConfigError(f"--max-parallel: {slots} gates at once need at least {slots} CPU cores, this process "
                          f"may use {len(ordered)} ({cpu_list(ordered)}); lower --max-parallel")
    size, extra = divmod(len(ordered), slots)
    sets, start = [], 0
    for index in range(slots):
        end = start + size + (1 if index < extra else 0)
        sets.append(tuple(ordered[start:end]))
        start = end
    return sets


def visible_gpus(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The GPUs this host gives the campaign: CUDA_VISIBLE_DEVICES when set (empty: none), else the
    indices `nvidia-smi` lists, else none."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        return tuple(g.strip() for g in environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip())
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if done.returncode != 0:
        return ()
    return tuple(line.strip() for line in done.stdout.splitlines() if line.strip())


# -- one gate process -----------------------------------------------------------------------------

def gate_argv(task: GateTask, resume: Path | None) -> list[str]:
    """The `gate run` command of a task: a fresh series, or the continuation of its interrupted one."""
    gate = [sys.executable, "-m", "gatekit.cli", "run"]
    if resume is not None:
        return [*gate, "--resume", str(resume)]
    return [*gate, task.off, task.on, "--gate", str(task.gate_path), "--out", str(task.out_dir),
            "--runs", str(task.runs_dir)]


def launch_argv(argv: Sequence[str], cores: Sequence[int]) -> list[str]:
    """`argv` started through the launcher: pinned to `cores` (none: unpinned), SIGTERM when we die."""
    return [sys.executable, "-m", "gatekit.engines", "--parent", str(os.getpid()),
            "--cores", ",".join(str(c) for c in cores), "--", *argv]


def series_dirs(runs_dir: Path) -> list[Path]:
    """The series folders of a gate's runs folder, oldest first (by their journal's last write)."""
    if not runs_dir.is_dir():
        return []
    found = [p for p in runs_dir.iterdir() if SeriesLayout(p).journal.is_file()]
    return sorted(found, key=lambda p: (SeriesLayout(p).journal.stat().st_mtime, p.name))


def resumable_series(runs_dir: Path) -> Path | None:
    """The gate's interrupted series (journaled, no DONE), newest first; None: start a new one."""
    open_ones = [p for p in series_dirs(runs_dir) if not SeriesLayout(p).done.exists()]
    return open_ones[-1] if open_ones else None


def finished_series(runs_dir: Path) -> Path | None:
    """The gate's newest finished series (DONE written): one whose gate ended before the campaign or bisect
    running it could journal its end, read back on resume instead of running the gate again."""
    done = [p for p in series_dirs(runs_dir) if SeriesLayout(p).done.is_file()]
    return done[-1] if done else None


def gate_env(gpus: Sequence[str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The gate process's environment: ours and the task's own, with exactly its GPUs visible ("" hides every
    GPU). GPU indices are nvidia-smi's, which count in PCI bus order; CUDA counts fastest first unless told."""
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **os.environ, **(extra or {}), "CUDA_VISIBLE_DEVICES": ",".join(gpus),
            "PYTHONUNBUFFERED": "1"}


@dataclass(frozen=True, slots=True)
class _Running:
    """A gate process the local engine watches."""

    task: GateTask
    process: subprocess.Popen[bytes]
    pinning: Pinning
    resumed: Path | None
    before: frozenset[Path]
    slot: int


def start_gate(task: GateTask, pinning: Pinning) -> tuple[subprocess.Popen[bytes], Path | None, frozenset[Path]]:
    """Start the gate process of `task` (continuing its interrupted series if it has one); its output is
    appended to the task's log. Returns the process, the series it resumes and the series there before."""
    task.runs_dir.mkdir(parents=True, exist_ok=True)
    _wait_for_owner(SeriesLayout.lock(task.runs_dir))
    resume = resumable_series(task.runs_dir)
    before = frozenset(series_dirs(task.runs_dir))
    task.log_path.parent.mkdir(parents=True, exist_ok=True)
    with task.log_path.open("ab", buffering=0) as log:  # unbuffered: a failed write is not retried at close
        try:
            log.write(f"{ATTEMPT_HEADER}{task.key}: {'resume ' + str(resume) if resume else 'new series'}; "
                      f"{pinning.describe()}\n".encode())
        except OSError as exc:  # a full disk: a failed write() names no file; the error message should
            exc.filename = str(task.log_path)
            raise
        process = subprocess.Popen(launch_argv(gate_argv(task, resume), pinning.cores), stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=subprocess.STDOUT, env=gate_env(pinning.gpus, task.env),
                                   cwd=task.gate_path.parent)
    return process, resume, before


def _wait_for_owner(lock: Path, timeout_s: float = STOP_GRACE_S) -> None:
    """Wait while a gate process of an earlier attempt still holds the gate's runs folder (it was told to
    stop when its campaign or worker died, and is journaling the interruption); after `timeout_s` the new
    attempt starts anyway and the gate's own lock says who holds it."""
    deadline = time.monotonic() + timeout_s
    try:  # never through a planted link: the gate's own lock then names the problem
        handle = os.fdopen(open_own_file(lock, os.O_RDONLY | os.O_CREAT), "rb")
    except OSError:
        return
    with handle:
        while not try_lock(handle, lock):
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)
        unlock(handle)


def outcome_of(task: GateTask, exit_code: int | None, pinning: Pinning, *, resumed: Path | None,
               before: frozenset[Path]) -> GateOutcome:
    """Read how an attempt ended: the series it wrote (the one it resumed, or the new folder), whether that
    series is DONE (its first line the decision, its second the finding's TOML path), and the exit code
    (None: no process reported one, e.g. a finished series found on resume)."""
    new = [p for p in series_dirs(task.runs_dir) if p not in before]
    series = resumed or (new[-1] if new else None)
    done = SeriesLayout(series).done if series else None
    if done is not None:
        try:
            lines = read_done(done)
        except RunFileError as exc:  # not what a gate writes: the attempt failed, and says which file and why
            return GateOutcome(task.key, GateStatus.FAILED, exit_code, series, None, "", str(exc), pinning)
        if lines is not None:
            return GateOutcome(task.key, GateStatus.FINISHED, exit_code, series, Path(lines[1]).with_suffix(".json"),
                               lines[0], "", pinning)
    # killed by a signal (negative), interrupted, or a file that could not be written: the series resumes
    interrupted = exit_code is not None and (exit_code < 0 or exit_code in (SeriesInterrupted.exit_code,
                                                                            OutputError.exit_code))
    status = GateStatus.INTERRUPTED if interrupted else GateStatus.FAILED
    return GateOutcome(task.key, status, exit_code, series, None, "", last_error(task.log_path), pinning)


MAX_DONE_BYTES = 16 << 10  # a decision and a path; a larger done file is not one a gate wrote
LOG_TAIL_BYTES = 16 << 10  # enough for the latest attempt's last lines


def read_done(path: Path) -> tuple[str, str] | None:
    """A finished series' done file: (its decision, its finding's TOML path); None when there is none.
    Read within bounds like a run file (`runfiles.read_run_file`: a FIFO, a device, a link out of its folder
    or a large file is refused, never read); one that is not two lines of text is a RunFileError naming it."""
    raw = read_run_file(path, MAX_DONE_BYTES)
    if raw is None:
        return None
    try:
        lines = [line.strip() for line in raw.decode("utf-8").splitlines()]
    except UnicodeDecodeError:
        raise RunFileError(f"{path}: is not text; a finished series writes its decision and finding path "
                           "there") from None
    if len(lines) < 2 or not lines[0] or not lines[1] or any(not line.isprintable() for line in lines[:2]):
        raise RunFileError(f"{path}: is not a decision and a finding path, one a line (as a finished gate "
                           "writes it)")
    return lines[0], lines[1]


def last_error(log_path: Path) -> str:
    """The latest attempt's own error line from the gate's log (`gate: error: …`), else its last line."""
    try:  # its tail only, and never a FIFO or a device in the log's place
        raw = read_run_file(log_path, LOG_TAIL_BYTES, tail=True) or b""
    except (RunFileError, OSError):
        return ""
    tail = raw.decode("utf-8", errors="replace").split(ATTEMPT_HEADER)[-1].splitlines()[1:]
    lines = [line.strip() for line in tail if line.strip()]
    errors = [line for line in lines if line.startswith("gate: error:")]
    return (errors or lines or [""])[-1][:500]


# -- the local engine -----------------------------------------------------------------------------

def run_local(tasks: Sequence[GateTask], *, max_parallel: int, cores: Sequence[int], gpus: Sequence[str],
              started: Started, finished: Finished, poll_s: float = 0.1) -> list[GateOutcome]:
    """Run the tasks on this host, up to `max_parallel` at once, in order; a task starts when a slot (its
    own core set) is free and enough of the GPUs are; each finished task is reported before the next
    starts in its slot. Ctrl-C or SIGTERM stops the running gates (each journals its interruption); once
    their outcomes are reported the KeyboardInterrupt goes on to the caller, even when every gate had
    already ended (a bisect would otherwise start its next round after the Ctrl-C)."""
    slots = core_sets(cores, max_parallel)
    for task in tasks:
        if task.gpus > len(gpus):
            raise ConfigError(f"{task.key}: resources.gpus = {task.gpus}, but this host gives {len(gpus)} GPU(s)"
                              f" ({','.join(gpus) or 'none'})")
    pending = list(tasks)
    free_slots = list(range(len(slots)))
    free_gpus = list(gpus)
    running: list[_Running] = []
    outcomes: list[GateOutcome] = []
    node = socket.gethostname()

    def reap(item: _Running, code: int) -> None:
        running.remove(item)
        free_slots.append(item.slot)
        free_slots.sort()
        free_gpus.extend(item.pinning.gpus)
        free_gpus.sort(key=list(gpus).index)
        outcome = outcome_of(item.task, code, item.pinning, resumed=item.resumed, before=item.before)
        outcomes.append(outcome)
        finished(outcome)

    with interrupt_on_sigterm():
        try:
            while pending or running:
                while pending and free_slots:
                    fitting = next((t for t in pending if t.gpus <= len(free_gpus)), None)
                    if fitting is None:
                        break
                    task = fitting
                    pending.remove(task)
                    slot = free_slots.pop(0)
                    # a gate records the cores it was pinned to; where the OS cannot pin (macOS), none
                    pinning = Pinning(slots[slot] if CAN_PIN_CPUS else (), tuple(free_gpus[:task.gpus]), node)
                    del free_gpus[:task.gpus]
                    started(task, pinning)
                    process, resumed, before = start_gate(task, pinning)
                    running.append(_Running(task, process, pinning, resumed, before, slot))
                for item in list(running):
                    code = item.process.poll()
                    if code is not None:
                        reap(item, code)
                if running:
                    time.sleep(poll_s)
        except KeyboardInterrupt:
            for item in running:
                _terminate(item.process)
            for item in list(running):
                reap(item, _wait(item.process))
            raise
    return outcomes


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        try:
            process.send_signal(signal.SIGTERM)  # the gate journals the interruption and stops its trainer
        except ProcessLookupError:
            pass


def _wait(process: subprocess.Popen[bytes]) -> int:
    try:
        return process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


# -- the Ray engine -------------------------------------------------------------------------------

def run_ray(tasks: Sequence[GateTask], *, address: str | None, started: Started,
            finished: Finished) -> list[GateOutcome]:
    """Run each task as a Ray task with num_cpus/num_gpus from its resources. Uses the Ray session this
    process already has, else starts a local Ray (no address) or joins the cluster at `address`. A task
    whose worker is lost ends its gate `interrupted`; the others go on. Ctrl-C or SIGTERM cancels the
    tasks left, reports them interrupted and goes on to the caller as KeyboardInterrupt."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--engine ray: Ray is not installed; install it with: {install_hint('ray')}") from None
    own = not ray.is_initialized()
    if own:
        try:
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise GatekitError(f"--address {address or '(local)'}: cannot start or join Ray: {exc}") from None
    try:
        _check_cluster(tasks, ray.cluster_resources())
        remote = ray.remote(max_retries=0)(ray_gate_task)
        refs: dict[Any, GateTask] = {}
        for task in tasks:
            started(task, None)
            ref = remote.options(num_cpus=task.cpus, num_gpus=task.gpus, name=f"gate {task.key}").remote(task)
            refs[ref] = task
        outcomes = []
        try:
            with interrupt_on_sigterm():
                while refs:
                    done, _ = ray.wait(list(refs), num_returns=1)
                    task = refs.pop(done[0])
                    try:
                        outcome_data, packed = ray.get(done[0])
                    except ray.exceptions.RayError as exc:
                        outcome = lost_outcome(task, exc, raised_in_task=isinstance(exc, ray.exceptions.RayTaskError))
                    else:
                        unpack_gate_files(packed, task)
                        outcome = GateOutcome.from_dict(outcome_data)
                    outcomes.append(outcome)
                    finished(outcome)
        except KeyboardInterrupt:
            # a cancelled task's worker is killed; its gate process gets SIGTERM and journals the interruption
            for ref, task in refs.items():
                ray.cancel(ref, force=True)
                outcome = lost_outcome(task, KeyboardInterrupt("the campaign was interrupted"))
                outcomes.append(outcome)
                finished(outcome)
            raise  # as run_local: the caller stops too
        return outcomes
    finally:
        if own:
            ray.shutdown()


def _check_cluster(tasks: Sequence[GateTask], resources: Mapping[str, float]) -> None:
    """Refuse a gate the cluster can never place (Ray would wait for it forever)."""
    for task in tasks:
        for name, need in (("CPU", task.cpus), ("GPU", task.gpus)):
            have = resources.get(name, 0.0)
            if need > have:
                raise ConfigError(f"{task.key}: needs {need} {name}(s), the Ray cluster has {have:g}; "
                                  "lower resources or add workers")


def lost_outcome(task: GateTask, exc: BaseException, *, raised_in_task: bool = False) -> GateOutcome:
    """A task that returned no result. Its worker died (or the campaign cancelled it): interrupted, the
    series resumable where the driver can see it (one host or a shared disk), else started again on resume.
    The task itself raised (`raised_in_task`: e.g. the worker cannot import gatekit or find the gate file):
    failed, with the task's error."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if raised_in_task:
        cause = lines[-1] if lines else type(exc).__name__  # the traceback's last line: the error itself
        return GateOutcome(task.key, GateStatus.FAILED, None, resumable_series(task.runs_dir), None, "",
                           f"the Ray task failed: {cause}"[:500])
    first = lines[0] if lines else type(exc).__name__
    return GateOutcome(task.key, GateStatus.INTERRUPTED, None, resumable_series(task.runs_dir), None, "",
                       f"worker lost: {type(exc).__name__}: {first}"[:500])


def ray_gate_task(task: GateTask) -> tuple[dict[str, Any], bytes]:
    """The Ray task: run the gate process on this worker with the GPUs Ray assigned and wait for it; return
    the outcome and the gate's files packed, for the driver to write where the campaign lives."""
    import ray

    from gatekit.series.runloop import now  # the one wall-clock label; imported here, not by the launcher

    gpus = tuple(str(g) for g in ray.get_gpu_ids())
    node = f"{socket.gethostname()} (ray node {ray.get_runtime_context().get_node_id()[:12]})"
    pinning = Pinning((), gpus, node)
    began = now().isoformat(timespec="seconds")
    process, resumed, before = start_gate(task, pinning)
    code = process.wait()
    outcome = replace(outcome_of(task, code, pinning, resumed=resumed, before=before), began=began)
    return outcome.to_dict(), pack_gate_files(task, outcome)


# -- the files a gate sends back ------------------------------------------------------------------

def pack_gate_files(task: GateTask, outcome: GateOutcome) -> bytes:
    """A tar of the gate's runs folder and log (under `campaign/`, relative to the campaign folder) and
    its finding files (under `out/`)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(p for p in task.runs_dir.rglob("*") if p.is_file()) if task.runs_dir.is_dir() else []:
            if path.name.endswith(".tmp"):
                continue  # an atomic write's leftover, never a record
            tar.add(path, arcname=f"campaign/{path.relative_to(task.campaign_dir).as_posix()}", recursive=False)
        if task.log_path.is_file():
            tar.add(task.log_path, arcname=f"campaign/{task.log_path.relative_to(task.campaign_dir).as_posix()}")
        if outcome.finding_path is not None:
            for twin in (outcome.finding_path.with_suffix(".toml"), outcome.finding_path.with_suffix(".json")):
                if twin.is_file():
                    tar.add(twin, arcname=f"out/{twin.name}")
    return buffer.getvalue()


def unpack_gate_files(packed: bytes, task: GateTask) -> list[Path]:
    """Write what `pack_gate_files` packed under this machine's campaign and findings folders, each file
    atomically; a file already there with the same bytes (a worker on this host) is left alone. Returns
    the files written."""
    roots = {"campaign": task.campaign_dir, "out": task.out_dir}
    written = []
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            top, _, relative = member.name.partition("/")
            root = roots.get(top)
            target = (root / relative) if root is not None and relative else None
            if root is None or target is None or root.resolve() not in target.resolve().parents:
                raise GatekitError(f"{task.key}: the worker sent {member.name!r}, outside the campaign; refused")
            handle = tar.extractfile(member)
            data = handle.read() if handle else b""
            if _same_bytes(target, data):
                continue
            atomic_write_bytes(target, data)
            written.append(target)
    return written


def _same_bytes(path: Path, data: bytes) -> bool:
    """`path` is a regular file holding exactly `data` (its size compared first: nothing larger is read)."""
    try:
        return path.stat().st_size == len(data) and read_run_file(path, len(data)) == data
    except (OSError, RunFileError):
        return False  # not a plain file of ours: the atomic write replaces it


# -- the launcher: python -m gatekit.engines --parent PID --cores 0,1 -- ARGV... ----------------------

def _launch(args: list[str]) -> int:
    """Pin, arrange to be stopped with the parent, exec the gate. Linux only for the parent-death signal;
    elsewhere the gate simply runs."""
    split = args.index("--")
    options, argv = args[:split], args[split + 1:]
    parent = int(options[options.index("--parent") + 1])
    cores = [int(c) for c in options[options.index("--cores") + 1].split(",") if c]
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            return SeriesInterrupted.exit_code
    if cores and CAN_PIN_CPUS:
        os.sched_setaffinity(0, cores)
    os.execv(argv[0], argv)
    return 127  # pragma: no cover - execv does not return


if __name__ == "__main__":
    raise SystemExit(_launch(sys.argv[1:]))

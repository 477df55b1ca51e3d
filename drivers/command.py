"""The command driver: runs any trainer binary per the trainer contract.

argv is a list and never passes through a shell; each placeholder fills exactly one argument.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.driver import (ENV_ARM, ENV_RESULT, ENV_RUN, ENV_RUN_DIR, MAX_RESULT_BYTES, TRACE_WARM_PARENT, ArmInput,
                            RunRequest, default_handlers_in_child, read_document, read_run_file, reap_group_zombies,
                            signals_deferred, stop_run_processes)
from gatekit.errors import ConfigError, RunFileError
from gatekit.records import CheckResult, RunOutcome
from gatekit_drivers.warm import WarmParentError, WarmParents

PLACEHOLDERS = ("arm_config", "python", "arm", "run", "run_dir", "result", "commit", "worktree")
# the placeholders an env value may hold too (the others are argv's alone; an env value keeps its other braces)
ENV_PLACEHOLDERS = ("commit", "worktree")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
KILL_GRACE_S = 5.0
MAX_LOG_SCAN_BYTES = 16 << 20  # metric regexes search at most the last 16 MiB of each log
MIN_SEARCH_S = 2.0  # the metric search's own time when the trainer used (nearly) all of the run's
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class CommandDriver:
    """Starts `argv` with the contract's env vars and reads metrics from the result file or regexes."""

    name = "command"

    def __init__(self, argv: Sequence[str], *, cwd: Path, metrics: Mapping[str, re.Pattern[str]],
                 env: Mapping[str, str], source: Path, cwd_option: str = ".",
                 preload: Sequence[str] = (), cold_arms: Sequence[str] = ()) -> None:
        self.argv = tuple(argv)
        self.preload = tuple(preload)
        self.cold_arms = frozenset(cold_arms)  # arms started cold despite `preload`: a warm-vs-cold A/A
        # warm parents (drivers/warm.py), started at the first run that needs each
        self.warm = WarmParents(preload) if preload else None
        self.cwd = cwd
        self.cwd_option = cwd_option  # as written: an arm in its own checkout resolves it there
        self.metrics = dict(metrics)
        self.env = dict(env)
        self.source = source

    @classmethod
    def from_options(cls, options: Mapping[str, Any], *, source: Path, base_dir: Path) -> CommandDriver:
        known = {"argv", "metrics", "cwd", "env", "preload", "cold_arms"}
        for key in options:
            if key not in known:
                raise ConfigError(f"{source}: driver.{key}: unknown key for the command driver "
                                  f"(known: {', '.join(sorted(known))}, timeout_s, hash, busy_pattern)")
        argv = options.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ConfigError(f"{source}: driver.argv: must be a non-empty list of strings")
        if any("\0" in a for a in argv) or not argv[0]:
            raise ConfigError(f"{source}: driver.argv: arguments cannot contain NUL characters, "
                              "and argv[0] cannot be empty")
        for arg in argv:
            for name in _PLACEHOLDER.findall(arg):
                if name not in PLACEHOLDERS:
                    raise ConfigError(f"{source}: driver.argv: unknown placeholder '{{{name}}}' in {arg!r} "
                                      f"(known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
        metrics = options.get("metrics", {})
        if not isinstance(metrics, dict):
            raise ConfigError(f"{source}: driver.metrics: must be a table of metric = 'regex'")
        compiled = {}
        for metric, pattern in metrics.items():
            key = f"driver.metrics.{metric}"
            if not isinstance(pattern, str):
                raise ConfigError(f"{source}: {key}: must be a regex string")
            try:
                compiled[metric] = re.compile(pattern)
            except (re.error, RecursionError, OverflowError) as exc:
                raise ConfigError(f"{source}: {key}: invalid regex: {exc}") from None
            if compiled[metric].groups < 1:
                raise ConfigError(f"{source}: {key}: the regex needs a capture group around the number")
        env = options.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ConfigError(f"{source}: driver.env: must be a table of string values")
        for name, value in env.items():
            if not _ENV_NAME.fullmatch(name) or "\0" in value:
                raise ConfigError(f"{source}: driver.env.{name}: names are letters, digits and _ "
                                  "(not starting with a digit), values cannot contain NUL characters")
        cwd = options.get("cwd", ".")
        if not isinstance(cwd, str) or "\0" in cwd:
            raise ConfigError(f"{source}: driver.cwd: must be a path string")
        preload = _preload_option(options.get("preload", []), argv, source)
        cold_arms = options.get("cold_arms", [])
        if not isinstance(cold_arms, list) or not all(isinstance(arm, str) for arm in cold_arms):
            raise ConfigError(f"{source}: driver.cold_arms: must be a list of arm names")
        if cold_arms and not preload:
            raise ConfigError(f"{source}: driver.cold_arms: names arms that start cold despite driver.preload, "
                              "which is not set")
        return cls(argv, cwd=(base_dir / cwd).resolve(), metrics=compiled, env=env, source=source, cwd_option=cwd,
                   preload=preload, cold_arms=cold_arms)

    def prepare(self, arms: Sequence[ArmInput], timeout_s: float) -> list[str]:
        """Start the warm parents the arms will fork from (`preload`), before the first run's window opens, so
        no run's window holds a parent's imports; returns a line on each. A parent that cannot start is the
        first run's error."""
        if self.warm is None:
            return []
        said = []
        for arm in arms:
            if arm.name in self.cold_arms:
                continue
            try:
                argv = self.command_for(arm)
                key, parent = self.warm.take(argv, self.cwd_for(arm), {**os.environ, **self.env_for(arm)},
                                             timeout_s)
            except (ConfigError, WarmParentError):
                continue
            self.warm.give_back(key, parent)
            modules = ", ".join(f"{name} {found}".strip() for name, found in parent.preloaded.items())
            line = f"warm start: parent pid {parent.pid} preloaded {modules} in {parent.import_s:.2f} s"
            if line not in said:  # arms that import alike share a parent
                said.append(line)
        return [f"{line} (arm {', '.join(a.name for a in arms if a.name not in self.cold_arms)})"
                if len(said) == 1 else line for line in said]

    def close(self) -> None:
        """Stop the warm parents, if any (they also leave by themselves when the gate exits)."""
        if self.warm is not None:
            self.warm.close()

    # -- argv -------------------------------------------------------------------------------------

    def cwd_for(self, arm: ArmInput) -> Path:
        """The arm's working directory: driver.cwd, inside the arm's checkout when it has one."""
        return self.cwd if arm.base_dir is None else (arm.base_dir / self.cwd_option).resolve()

    def checkout_values(self, arm: ArmInput) -> dict[str, str]:
        """{commit} and {worktree}: the arm's checkout (`gate bisect`), else '' and the gate file's folder."""
        return {"commit": arm.commit, "worktree": str(arm.worktree or self.source.parent)}

    def env_for(self, arm: ArmInput) -> dict[str, str]:
        """driver.env then the arm's env, {commit} and {worktree} filled in their values."""
        values = self.checkout_values(arm)

        def fill(match: re.Match[str]) -> str:
            return values[match.group(1)] if match.group(1) in ENV_PLACEHOLDERS else match.group(0)

        return {name: _PLACEHOLDER.sub(fill, value) for name, value in {**self.env, **arm.env}.items()}

    def command_for(self, arm: ArmInput, *, run: str = "", run_dir: Path | None = None,
                    result: Path | None = None) -> list[str]:
        """argv with placeholders filled; each placeholder stays inside its own argument."""
        values = {"python": sys.executable, "arm": arm.name, "run": run,
                  "run_dir": str(run_dir or ""), "result": str(result or ""),
                  "arm_config": str(arm.config) if arm.config else None, **self.checkout_values(arm)}

        def fill(match: re.Match[str]) -> str:
            value = values[match.group(1)]
            if value is None:
                raise ConfigError(f"{self.source}: arms.{arm.name}.config: driver.argv uses "
                                  "{arm_config} but this arm has no config file")
            return value

        return [_PLACEHOLDER.sub(fill, arg) for arg in self.argv] + list(arm.args)

    def _resolve_program(self, program: str, cwd: Path) -> str | None:
        if os.sep in program:
            path = Path(program) if Path(program).is_absolute() else cwd / program
            return str(path) if path.is_file() and os.access(path, os.X_OK) else None
        return shutil.which(program)

    # -- preflight --------------------------------------------------------------------------------

    def preflight(self, arms: Sequence[ArmInput]) -> list[CheckResult]:
        checks = []
        for cwd in dict.fromkeys([self.cwd_for(arm) for arm in arms] or [self.cwd]):
            if not cwd.is_dir():
                checks.append(CheckResult("driver cwd", False, f"{cwd} is not a directory"))
        for arm in arms:
            try:
                argv = self.command_for(arm)
            except ConfigError as exc:
                checks.append(CheckResult(f"argv for {arm.name}", False, str(exc)))
                continue
            resolved = self._resolve_program(argv[0], self.cwd_for(arm))
            checks.append(CheckResult(
                f"argv[0] for {arm.name}", resolved is not None,
                resolved or f"{argv[0]!r} is not an executable file or on PATH (driver.argv in {self.source})"))
        return checks

    # -- run --------------------------------------------------------------------------------------

    def run(self, request: RunRequest) -> RunOutcome:
        argv = self.command_for(request.arm, run=request.label, run_dir=request.run_dir,
                                result=request.result_path)
        env = {**os.environ, **self.env_for(request.arm),
               ENV_ARM: request.arm.name, ENV_RUN: request.label,
               ENV_RUN_DIR: str(request.run_dir), ENV_RESULT: str(request.result_path), **request.env}
        cpus = set(request.cpus)
        if self.warm is not None and request.arm.name not in self.cold_arms:
            return self._run_warm(request, argv, env)
        with request.stdout_path.open("wb") as out, request.stderr_path.open("wb") as err:
            started = time.perf_counter()
            try:
                # A new session makes the trainer a process-group leader, so a timeout or an
                # interrupt can stop it together with every process it spawned.
                # A duet slot's cores are set in the child before exec, so everything it starts inherits them.
                proc = subprocess.Popen(argv, cwd=self.cwd_for(request.arm), env=env, stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, start_new_session=True,
                                        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
            except OSError as exc:
                return RunOutcome(exit_code=None, process_wallclock_s=0.0,
                                  error=f"cannot start {argv[0]!r}: {exc.strerror or exc}")
            try:
                timed_out = not _wait_for_exit(proc, request.timeout_s)
                wallclock = time.perf_counter() - started
            finally:  # on an interrupt too: the trainer's group never outlives this call
                escaped = _stop_group(proc.pid, request.run_dir, leader=proc)
            exit_code: int | None = None if timed_out else proc.returncode
        return self._outcome(request, started, exit_code, wallclock, timed_out, escaped)

    def _run_warm(self, request: RunRequest, argv: list[str], env: dict[str, str]) -> RunOutcome:
        """The run forked from a warm parent (`preload`): argv[1:] run as `python argv[1:]` would run them."""
        assert self.warm is not None
        cwd = self.cwd_for(request.arm)
        parent_env = {**os.environ, **self.env_for(request.arm)}  # what the arm's imports may read
        try:
            key, parent = self.warm.take(argv, cwd, parent_env, request.timeout_s)
        except WarmParentError as exc:
            return RunOutcome(exit_code=None, process_wallclock_s=0.0, error=str(exc))
        for path in (request.stdout_path, request.stderr_path):  # the child writes them; there even if it never ran
            path.write_bytes(b"")
        escaped: list[int] = []

        def stop_group(pgid: int) -> None:
            escaped.extend(_stop_group(pgid, request.run_dir))

        started = time.perf_counter()
        try:
            ended = parent.fork_run(argv[1:], cwd=cwd, env=env, stdout=request.stdout_path,
                                    stderr=request.stderr_path, cpus=request.cpus, timeout_s=request.timeout_s,
                                    stop_group=stop_group)
        except WarmParentError as exc:
            parent.close()
            return RunOutcome(exit_code=None, process_wallclock_s=time.perf_counter() - started,
                              trace={TRACE_WARM_PARENT: parent.pid}, error=f"{exc}; the run failed with it")
        except BaseException:
            parent.close()  # it may still report the run it was stopped in: never reused
            raise
        self.warm.give_back(key, parent)
        outcome = self._outcome(request, started, ended.exit_code, ended.wallclock_s, ended.exit_code is None,
                                escaped)
        return dataclasses.replace(outcome, trace={**outcome.trace, TRACE_WARM_PARENT: parent.pid})

    def _outcome(self, request: RunRequest, started: float, exit_code: int | None, wallclock: float,
                 timed_out: bool, escaped: list[int]) -> RunOutcome:
        """The run's outcome once its process has ended and its group is stopped: the result file, the
        regex metrics, the exit code."""
        stopped = {"gatekit_stopped_escaped_pids": escaped} if escaped else {}
        if timed_out:
            return RunOutcome(exit_code=None, process_wallclock_s=wallclock, timed_out=True, trace=stopped,
                              error=f"timed out after {request.timeout_s:g} s; process group killed")
        metrics, config, trace, problem = read_result(request.result_path)
        searched, search_problem = self._regex_metrics(request, request.timeout_s - (time.perf_counter() - started))
        metrics = {**searched, **metrics}
        trace = {**trace, **stopped}  # kept visible: the trainer left processes outside its process group
        error = problem or search_problem
        if exit_code != 0:
            error = f"exit code {exit_code}" + (f" ({_signal_name(exit_code)})" if exit_code and exit_code < 0 else "")
        return RunOutcome(exit_code=exit_code, process_wallclock_s=wallclock, metrics=metrics,
                          config=config, trace=trace, error=error)

    def _regex_metrics(self, request: RunRequest, seconds_left: float) -> tuple[dict[str, float], str]:
        """The regex metrics found in the tails of the run's logs (stdout first, then stderr; the first group,
        a finite number), and a problem ('' if none). The logs are read like every run file (a FIFO in a
        log's place is a problem, never opened for a blocking read); the regexes run in a child process that
        is killed when the run's time is up (`seconds_left`, at least MIN_SEARCH_S): one long line can make
        a lazy pattern backtrack for minutes, and Python's `re` cannot be interrupted."""
        if not self.metrics:
            return {}, ""
        texts = []
        for path in (request.stdout_path, request.stderr_path):
            try:
                raw = read_run_file(path, MAX_LOG_SCAN_BYTES, tail=True)
            except RunFileError as exc:
                return {}, f"log {exc}"
            texts.append((raw or b"").decode("utf-8", errors="replace"))
        found = _search_in_child(self.metrics, texts, max(seconds_left, MIN_SEARCH_S))
        names = ", ".join(self.metrics)
        if found is None:
            return {}, (f"metric regexes ({names}) did not finish within the run's timeout "
                        f"({request.timeout_s:g} s) over the last {MAX_LOG_SCAN_BYTES >> 20} MiB of its logs; "
                        "a pattern like `.*?` before a number can backtrack for minutes on one long line")
        if isinstance(found, str):
            return {}, f"metric regexes ({names}) could not be searched: {found}"
        return {metric: value for metric, text in found.items() if (value := _number(text)) is not None}, ""


def first_groups(patterns: Mapping[str, re.Pattern[str]], texts: Sequence[str]) -> dict[str, str | None]:
    """{metric: the first group of the first match of its pattern, in the first text that has one}."""
    found: dict[str, str | None] = {}
    for metric, pattern in patterns.items():
        for text in texts:
            match = pattern.search(text)
            if match:
                found[metric] = match.group(1)
                break
    return found


def _search_in_child(patterns: Mapping[str, re.Pattern[str]], texts: Sequence[str],
                     timeout_s: float) -> dict[str, str | None] | str | None:
    """`first_groups` computed in a child process, which is killed after `timeout_s` (None then; a string
    says why a child that ended gave no answer): forked where the OS forks, else a fresh interpreter."""
    if not hasattr(os, "fork"):  # Windows
        return _search_in_interpreter(patterns, texts, timeout_s)
    return _search_in_fork(patterns, texts, timeout_s)


def _search_in_fork(patterns: Mapping[str, re.Pattern[str]], texts: Sequence[str],
                    timeout_s: float) -> dict[str, str | None] | str | None:
    """A fork (about 5 ms; starting an interpreter took 30) shares the compiled patterns and the texts; the
    child only searches, writes the answer to a pipe and leaves with os._exit, so it needs no lock that
    another thread of the gate (the sampler) could have held when it was forked.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        status = 1
        try:
            default_handlers_in_child()
            os.close(read_end)
            view = memoryview(json.dumps(first_groups(patterns, texts)).encode("utf-8"))
            while view:
                view = view[os.write(write_end, view):]
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    chunks: list[bytes] = []
    answered = False
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        answered = True
    finally:  # on a timeout or an interrupt too: the child never outlives this call
        os.close(read_end)
        if not answered:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if status != 0:
        return f"the search process ended with status {status}"
    return json.loads(b"".join(chunks))


def _search_in_interpreter(patterns: Mapping[str, re.Pattern[str]], texts: Sequence[str],
                           timeout_s: float) -> dict[str, str | None] | str | None:
    """Without fork: `search_stdin_job` in a new Python, given the patterns and texts as JSON on its stdin;
    subprocess.run kills it on the timeout (or an interrupt) before it returns."""
    job = json.dumps({"patterns": {metric: [p.pattern, p.flags] for metric, p in patterns.items()},
                      "texts": list(texts)})
    try:
        done = subprocess.run([sys.executable, "-c", "from gatekit_drivers.command import search_stdin_job; "
                               "search_stdin_job()"], input=job.encode("utf-8"), capture_output=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        last = done.stderr.decode("utf-8", errors="replace").strip().splitlines()[-1:]
        return f"the search process ended with status {done.returncode}" + (f": {last[0]}" if last else "")
    return json.loads(done.stdout)


def search_stdin_job() -> None:
    """The search process of `_search_in_interpreter`: a JSON job on stdin, `first_groups` on stdout."""
    job = json.loads(sys.stdin.buffer.read())
    patterns = {metric: re.compile(pattern, flags) for metric, (pattern, flags) in job["patterns"].items()}
    sys.stdout.write(json.dumps(first_groups(patterns, job["texts"])))


def _wait_for_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait until the trainer exits (True) or `timeout_s` passes (False), noticing the exit at once.

    Popen.wait(timeout) polls with sleeps growing to 50 ms, which would add up to 50 ms to every run and
    to its measured wallclock; a pidfd (Linux ≥ 5.3) becomes readable the moment the process exits.
    """
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here (macOS, old kernels): Popen's own wait
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while not poller.poll(max(0, min(deadline - time.monotonic(), 86400.0)) * 1000):
            if time.monotonic() >= deadline:
                return False
    finally:
        os.close(pidfd)
    proc.wait()  # reap it; it has exited already
    return True


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False once no process of it is left."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _stop_group(pgid: int, run_dir: Path, leader: subprocess.Popen[bytes] | None = None) -> list[int]:
    """SIGTERM the trainer's whole process group `pgid`, SIGKILL whatever outlives a grace period; then freeze
    and kill the processes that left the group (setsid, daemons) but still carry this run's GATEKIT_RUN_DIR.

    Also runs after a normal exit, so grandchildren a trainer left behind cannot load the next run.
    Signals are held back meanwhile: a second Ctrl-C cannot cut the cleanup short. `leader`: the trainer's
    Popen, reaped here; a run forked by a warm parent is that parent's to reap. Returns the PIDs of escaped
    processes that had to be stopped.
    """
    with signals_deferred():
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not _signal_group(pgid, sig):
                break
            deadline = time.monotonic() + KILL_GRACE_S
            while time.monotonic() < deadline:
                if leader is not None:
                    leader.poll()  # reap the leader so its zombie does not keep the group alive
                # and members re-parented to the gate (subreaper); a leader whose warm parent died, too
                reap_group_zombies(pgid, keep=leader.pid if leader is not None else -1)
                if not _signal_group(pgid, 0):
                    break
                time.sleep(0.02)
            else:
                continue
            break
        if leader is not None:
            leader.wait()
        return stop_run_processes(run_dir)


def _preload_option(value: Any, argv: Sequence[str], source: Path) -> tuple[str, ...]:
    """driver.preload checked: module names, a command the warm parent can run, a system that forks."""
    if not isinstance(value, list) or not all(isinstance(v, str) and _MODULE_NAME.fullmatch(v) for v in value):
        raise ConfigError(f"{source}: driver.preload: must be a list of module names, e.g. [\"torch\"]")
    if not value:
        return ()
    if not hasattr(os, "fork"):
        raise ConfigError(f"{source}: driver.preload: a warm start forks each run from a parent that preloaded "
                          f"{', '.join(value)}, and this system has no fork (os.fork); remove driver.preload")
    script = argv[1] if len(argv) > 1 else ""
    if not script or (script.startswith("-") and script != "-m") or (script == "-m" and len(argv) < 3):
        raise ConfigError(f"{source}: driver.preload: needs driver.argv = [PYTHON, SCRIPT, ...] or [PYTHON, \"-m\", "
                          f"MODULE, ...] (what a warm parent can fork; no interpreter options), not {list(argv)!r}")
    if script == "-m" and argv[2] in value:
        raise ConfigError(f"{source}: driver.preload: {argv[2]!r} is the module each run executes; it must load "
                          "fresh in every run (its file is hashed), so it cannot be preloaded")
    return tuple(value)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _number(value: Any) -> float | None:
    """A finite number, or None for strings, booleans, NaN and infinities."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _finite(value: Any) -> float | None:
    """A finite JSON/TOML number; strings, booleans, NaN and infinities are not metrics."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float range
        return None
    return number if math.isfinite(number) else None


def read_result(path: Path) -> tuple[dict[str, float], dict[str, Any], dict[str, Any], str]:
    """Parse a trainer's result file (JSON or TOML): metrics, config, trace and a problem ('' if none).

    Never raises for anything a trainer can write: every defect is a problem string, which fails the run
    (the bounds on what is read and parsed are gatekit's run-file reader's: `read_run_file`).
    Metrics are finite numbers only; others are listed in trace["gatekit_dropped_metrics"].
    """
    try:
        data = read_document(path, MAX_RESULT_BYTES)
    except RunFileError as exc:
        return {}, {}, {}, f"result file {exc}"
    if data is None:
        return {}, {}, {}, ""
    for key in ("metrics", "config", "trace"):
        if not isinstance(data.get(key, {}), dict):
            return {}, {}, {}, f"result file {path}: '{key}' must be a table/object"
    metrics: dict[str, float] = {}
    dropped = []
    for key, value in data.get("metrics", {}).items():
        number = _finite(value)
        if number is None:
            dropped.append(str(key))
        else:
            metrics[str(key)] = number
    config, trace = data.get("config", {}), data.get("trace", {})
    if dropped:  # kept visible: a metric the trainer meant to report but gatekit cannot use
        trace = {**trace, "gatekit_dropped_metrics": dropped}
    return metrics, config, trace, ""

"""The git side of a bisect: the commits between GOOD and BAD, one detached worktree per probed commit, and
the probe's build (exit 125 skips the commit, as `git bisect run`). `git` is run as a subprocess, never
through a shell; every failure names the command and what git said."""

from __future__ import annotations

import enum
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from gatekit.errors import ConfigError, GatekitError, OutputError
from gatekit.records import Record
from gatekit.signals import signals_deferred

SKIP_EXIT = 125  # `git bisect run`'s "this commit cannot be tested"
BUILD_TIMEOUT_S = 3600.0  # --build-timeout's default: a build that has not finished in an hour is stuck


@dataclass(frozen=True, slots=True)
class Commit(Record):
    """A commit of the range: its sha, subject and author date (ISO 8601)."""

    sha: str
    subject: str
    author_date: str


class BuildStatus(enum.Enum):
    BUILT = "built"  # the build exited 0 (or there is no build)
    SKIPPED = "skipped"  # exit 125: the commit cannot be tested
    FAILED = "failed"  # any other exit: skipped too, and said so


@dataclass(frozen=True, slots=True)
class BuildResult(Record):
    status: BuildStatus
    exit_code: int | None  # None: no build command
    log: str = ""  # the build's log file, relative to the probe's folder
    timed_out: bool = field(default=False, metadata={"omit": False})  # no exit within --build-timeout


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`; its stdout, stripped. A failure is a GatekitError naming the command."""
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise GatekitError(f"git {' '.join(args)}: cannot run git: {exc}") from None
    if done.returncode != 0:
        raise GatekitError(f"git {' '.join(args)}: {done.stderr.strip() or 'exit ' + str(done.returncode)}")
    return done.stdout.strip()


def repository(cwd: Path | None, command: str) -> Path:
    """The git repository of the working directory, where `command` (gate bisect, gate compare) runs, as git's."""
    where = (cwd or Path.cwd()).resolve()
    try:
        return Path(git(where, "rev-parse", "--show-toplevel"))
    except GatekitError:
        raise ConfigError(f"{where}: not inside a git repository; run {command} in the repository") from None


def resolve(repo: Path, revision: str) -> str:
    """A revision's full commit sha; a usage error when it names no commit."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    except GatekitError:
        raise ConfigError(f"{revision!r} names no commit of {repo}") from None


def commit_range(repo: Path, good: str, bad: str) -> list[Commit]:
    """GOOD, then every commit of `git rev-list --first-parent GOOD..BAD` oldest first, ending with BAD: index 0
    is GOOD, the last is BAD. GOOD must be an ancestor of BAD."""
    good_sha, bad_sha = resolve(repo, good), resolve(repo, bad)
    if good_sha == bad_sha:
        raise ConfigError(f"GOOD and BAD are the same commit ({good_sha[:12]}): there is nothing to bisect")
    try:
        git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except GatekitError:
        raise ConfigError(f"GOOD {good} ({good_sha[:12]}) is not an ancestor of BAD {bad} ({bad_sha[:12]})") from None
    shas = [good_sha, *git(repo, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}").split()]
    return [describe(repo, sha) for sha in shas]


def describe(repo: Path, sha: str) -> Commit:
    sha_, subject, date = git(repo, "show", "-s", "--format=%H%x00%s%x00%aI", sha).split("\x00")
    return Commit(sha_, subject, date)


def add_worktree(repo: Path, sha: str, path: Path) -> Path:
    """A detached worktree of `sha` at `path` (kept when it is there already at that commit: a resumed bisect)."""
    if path.is_dir() and (path / ".git").exists():
        if git(path, "rev-parse", "HEAD") == sha:
            return path
        raise GatekitError(f"{path}: a worktree of another commit is there; remove it or bisect into a new --out")
    if path.is_dir():  # a checkout cut off part-way (a full disk, a kill): gatekit's own folder, made again
        shutil.rmtree(path)
        git(repo, "worktree", "prune")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        git(repo, "worktree", "add", "--detach", "--force", str(path), sha)
    except GatekitError as exc:  # the commit was resolved before: what fails here is the disk (full, read-only)
        raise OutputError(f"{path}: the worktree of {sha[:12]} cannot be checked out: {exc}") from None
    return path


def remove_worktree(repo: Path, path: Path) -> None:
    git(repo, "worktree", "remove", "--force", str(path))


def worktree_paths(repo: Path) -> set[Path]:
    """The paths of the repository's worktrees as git lists them (`git worktree list --porcelain`), resolved."""
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    return {Path(line.removeprefix("worktree ")).resolve() for line in listed if line.startswith("worktree ")}


def build(command: Sequence[str] | str | None, worktree: Path, log_path: Path, *,
          timeout_s: float = BUILD_TIMEOUT_S) -> BuildResult:
    """Run the build in the worktree, its stdout and stderr to `log_path`. A string is split into words as a shell
    would (`shlex`) but never run by one, like every command gatekit starts; write `sh -c '...'` for shell syntax.
    Exit 125 skips the commit; another failure, or no exit within `timeout_s`, skips it and says so.

    The build runs as a run's trainer does: the leader of its own process group, under this process as a child
    subreaper; when it ends (or times out) whatever it left running — a background child, a `setsid` daemon —
    is frozen and killed (`processes.stop_command_tree`) and named at the end of its log, so no build outlives
    its probe."""
    # imported here: the gate-file schema imports this module for Commit, and psutil need not load with it
    from gatekit.processes import child_subreaper, escaped_evidence, stop_command_tree

    if command is None:
        return BuildResult(BuildStatus.BUILT, None)
    try:
        argv = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError as exc:
        raise ConfigError(f"--build: cannot split {command!r} into words: {exc}") from None
    if not argv:
        raise ConfigError("--build: the build command is empty")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    timed_out = False
    with log_path.open("wb", buffering=0) as log, child_subreaper() as reaper:  # unbuffered: the child writes too
        try:
            process = subprocess.Popen(argv, cwd=worktree, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            log.write(f"cannot start the build: {exc}\n".encode())
            return BuildResult(BuildStatus.FAILED, None, log_path.name)
        try:
            try:
                code: int | None = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out, code = True, None
        finally:  # an interrupt too: the build's processes never outlive this call
            with signals_deferred():
                if process.poll() is None:  # timed out (or interrupted): the build itself first; once it is
                    process.kill()  # waited for, its orphans are this subreaper's children
                    process.wait()
                escaped = stop_command_tree(process.pid, reaper.own)
        if timed_out:
            log.write(f"\ngate: the build did not finish within --build-timeout {timeout_s:g} s; stopped\n".encode())
        if escaped:
            log.write(("\ngate: " + escaped_evidence(escaped, "the build") + "\n").encode())
    status = (BuildStatus.BUILT if code == 0 else BuildStatus.SKIPPED if code == SKIP_EXIT else BuildStatus.FAILED)
    return BuildResult(status, code, log_path.name, timed_out=timed_out)

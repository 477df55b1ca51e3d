"""`gate compare BASE [HEAD]`: the pull-request gate. The gate file's arm at BASE (arm `base`, the off arm) and
at HEAD (arm `head`, the on arm), interleaved under the gate's policy as any gate series, in one folder.

It is bisect's "an arm at a commit" (gatekit.bisect): a detached worktree per side, its `--build` (exit 125 or a
failure: nothing to compare, exit 3), and the gate file of the arm at two commits (`arm_at_commits_toml`, with a
[commits] table: the sides' effective-config differences are recorded in the finding, never an error). The series
is run by the one run loop (gatekit.series), so every rule of a gate applies: preflight, the artifacts hashed per
side, contamination and retries, guards, the journal, resume, verify and signing.

BASE is replaced by `git merge-base BASE HEAD` unless told otherwise: a branch is measured against where it left
its base branch, so it is not blamed for what landed there since.

Folder (`--out`, default `<gate.runs>/compare-<gate id>-<time>`): `gate.toml` (the gate file of the two sides, as
the series reads it), `worktrees/{base,head}-<sha>/` (removed when the series ends), `build-{base,head}.log` and
`runs/<series>/`; the finding goes to the gate's findings folder.
"""

from __future__ import annotations

import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Callable

import tomlkit

from gatekit.bisect.run import GATE_COPY, arm_at_commits_toml, gate_subdir
from gatekit.commits import BuildStatus, Commit, add_worktree, build, describe, git, remove_worktree, \
    repository, resolve
from gatekit.config import GateConfig, load_gate, resolve_path
from gatekit.errors import BuildError, ConfigError, GatekitError, SeriesError
from gatekit.policy_descriptors import DUET_MODE
from gatekit.series.runloop import now, stamped_name
from gatekit.series.runner import SeriesResult
from gatekit.storage import atomic_write_text, read_input

BASE_ARM, HEAD_ARM = "base", "head"  # the off and the on arm of a comparison
DEFAULT_GATE = "gate.toml"
RUNS = "runs"  # the series folder, inside the compare folder

Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class CompareOptions:
    """What `gate compare` was asked (BASE and HEAD are run_compare's arguments)."""

    gate_path: Path | None = None  # None: gate.toml of HEAD's tree, at the working directory's place in it
    arm: str | None = None  # None: the gate file's first arm
    build: str | None = None  # run in each side's worktree first; split into words (shlex), never run by a shell
    merge_base: bool = True  # compare `git merge-base BASE HEAD`, not BASE itself
    n: int | None = None
    policy: str | None = None
    out: Path | None = None  # the compare folder
    resume: Path | None = None  # a compare folder to continue


@dataclass(frozen=True, slots=True)
class CompareResult:
    folder: Path
    series: SeriesResult


@dataclass(frozen=True, slots=True)
class Side:
    """One side of the comparison: its arm name, commit and worktree."""

    arm: str
    commit: Commit
    worktree: Path


def run_compare(base: str | None, head: str | None, options: CompareOptions, *, cwd: Path | None = None,
                report: Report = lambda line: None) -> CompareResult:
    """Compare the gate's arm at BASE (or its merge-base with HEAD) against HEAD in the repository of `cwd`, or
    continue the comparison in `options.resume`; the series' finding names both commits."""
    from gatekit.series_replay import open_series
    from gatekit.series.runner import SeriesRunner
    from gatekit.verify import verify_series

    here = (cwd or Path.cwd()).resolve()
    repo = repository(here, "gate compare")
    if options.resume is not None:
        folder = resolve_path(here, options.resume)
        series = _series_of(folder)
        verify_series(series)  # an edited journal or record is exit 3 naming it, before anything runs
        opened = open_series(series)
        sides = _sides_of(opened.config)
        _prepare(repo, sides, folder, options.build, report, rebuild_only_new=True)
        result = SeriesRunner(opened.config, opened.off, opened.on, report=report).resume(opened)
        _remove_worktrees(repo, sides, report)
        return CompareResult(folder, result)
    if base is None:
        raise ConfigError("gate compare needs BASE (or --resume DIR)")
    build_argv = _build_words(options.build)
    head_sha = resolve(repo, head or "HEAD")
    base_sha = resolve(repo, base)
    merged = False
    if options.merge_base:
        try:
            common = git(repo, "merge-base", base_sha, head_sha)
        except GatekitError:
            raise ConfigError(f"BASE {base} and HEAD {head or 'HEAD'} have no common ancestor; compare BASE itself "
                              "with --no-merge-base") from None
        merged = common != base_sha
        if merged:
            report(f"compare: BASE {base} ({base_sha[:12]}) is replaced by its merge-base with HEAD, {common[:12]}: "
                   "HEAD is measured against where it left BASE (--no-merge-base compares BASE itself)")
        base_sha = common
    if base_sha == head_sha:
        raise ConfigError(f"BASE and HEAD are the same commit ({head_sha[:12]}"
                          + (", the merge-base" if options.merge_base else "") + "): there is nothing to compare")
    text, source, subdir, origin = _gate_text(repo, here, head_sha, options.gate_path, report)
    head_table = _gate_table(text, source)
    started = now()
    folder = (resolve_path(here, options.out) if options.out is not None else
              resolve_path(origin, str(head_table.get("runs", "runs")))
              / stamped_name(f"compare-{head_table.get('id', 'gate')}", started))
    if (folder / GATE_COPY).exists():
        raise ConfigError(f"{folder}: holds a comparison already; continue it with --resume {folder} or compare "
                          "into a new --out")
    arm = options.arm or _first_arm(text, source)
    sides = (Side(BASE_ARM, describe(repo, base_sha), folder / "worktrees" / f"{BASE_ARM}-{base_sha[:12]}"),
             Side(HEAD_ARM, describe(repo, head_sha), folder / "worktrees" / f"{HEAD_ARM}-{head_sha[:12]}"))
    document = arm_at_commits_toml(text, arm, [(s.arm, s.commit, s.worktree) for s in sides], subdir,
                                   requested_base=base if merged else "", merge_base=merged)
    document["gate"]["out"] = str(resolve_path(origin, str(head_table.get("out", "findings"))))
    document["gate"]["runs"] = RUNS
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / GATE_COPY, tomlkit.dumps(document))
    config = load_gate(folder / GATE_COPY).with_overrides(n=options.n, policy=options.policy)
    if config.gate.mode == DUET_MODE:
        raise ConfigError(f"{source}: gate.mode: a duet gate cannot compare two commits (its arms run at once on "
                          "twin slots); compare with an interleaved gate of the arm")
    report(f"compare: arm {arm} at BASE {sides[0].commit.sha[:12]} {sides[0].commit.subject!r} against HEAD "
           f"{sides[1].commit.sha[:12]} {sides[1].commit.subject!r}; gate file {source}")
    try:
        _prepare(repo, sides, folder, build_argv, report)
    except BuildError:
        _remove_worktrees(repo, sides, report)
        raise
    result = SeriesRunner(config, config.arms[BASE_ARM], config.arms[HEAD_ARM], report=report).start()
    _remove_worktrees(repo, sides, report)
    return CompareResult(folder, result)


def _build_words(command: str | None) -> tuple[str, ...] | None:
    if command is None:
        return None
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:
        raise ConfigError(f"--build: cannot split {command!r} into words: {exc}") from None
    if not argv:
        raise ConfigError("--build: the build command is empty")
    return argv


def _gate_text(repo: Path, here: Path, head_sha: str, gate_path: Path | None,
               report: Report) -> tuple[str, str, str, Path]:
    """The gate file's text, what to call it, its folder inside the repository (where its relative paths
    resolve in each worktree) and the folder its `out` and `runs` are relative to: the file given, else
    gate.toml of HEAD's tree at the working directory's place in it or the nearest folder above (said)."""
    if gate_path is not None:
        path = resolve_path(here, gate_path)
        return read_input(path, "a gate file").decode("utf-8"), str(path), gate_subdir(path, repo), path.parent
    prefix = git(here, "rev-parse", "--show-prefix").rstrip("/")
    folders = [prefix] + [parent.as_posix() for parent in PurePosixPath(prefix).parents] if prefix else [""]
    for up, folder in enumerate(folders):
        folder = "" if folder == "." else folder
        name = f"{folder}/{DEFAULT_GATE}" if folder else DEFAULT_GATE
        try:
            text = git(repo, "show", f"{head_sha}:{name}")
        except GatekitError:
            continue
        if up:
            report(f"using gate file {head_sha[:12]}:{name} (HEAD's tree, {up} folder(s) above this one)")
        return text + "\n", f"{head_sha[:12]}:{name}", folder, here.joinpath(*[".."] * up).resolve()
    raise ConfigError(f"{head_sha[:12]}:{prefix + '/' if prefix else ''}{DEFAULT_GATE}: HEAD's tree has no gate file "
                      "there or in a folder above it; give one with --gate FILE")


def _gate_table(text: str, source: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: malformed TOML: {exc}") from None
    gate = data.get("gate")
    if not isinstance(gate, dict):
        raise ConfigError(f"{source}: gate: is missing (a [gate] table with at least id)")
    return gate


def _first_arm(text: str, source: str) -> str:
    arms = tomllib.loads(text).get("arms")
    if not isinstance(arms, dict) or not arms:
        raise ConfigError(f"{source}: arms: needs at least one arm (e.g. [arms.off])")
    return next(iter(arms))


def _sides_of(config: GateConfig) -> tuple[Side, Side]:
    """A compare folder's two sides, from its gate file."""
    if config.commits is None or {BASE_ARM, HEAD_ARM} - set(config.arms):
        raise SeriesError(f"{config.path}: not a gate compare folder's gate file (no [commits] table or no arms "
                          f"{BASE_ARM} and {HEAD_ARM})")
    sides = []
    for name, commit in ((BASE_ARM, config.commits.base), (HEAD_ARM, config.commits.head)):
        checkout = config.arms[name].checkout
        assert checkout is not None  # arm_at_commits_toml writes one for each side
        sides.append(Side(name, commit, checkout.worktree))
    return sides[0], sides[1]


def _series_of(folder: Path) -> Path:
    from gatekit.engines import series_dirs

    found = series_dirs(folder / RUNS) if (folder / RUNS).is_dir() else []
    if not found:
        raise SeriesError(f"{folder}: no series of a gate compare here ({folder / RUNS} holds none); start a new one")
    return found[-1]


def _prepare(repo: Path, sides: tuple[Side, Side], folder: Path, build_command: tuple[str, ...] | str | None,
             report: Report, *, rebuild_only_new: bool = False) -> None:
    """Each side's worktree and build; a side that cannot be built ends the comparison (BuildError, exit 3)."""
    for side in sides:
        existed = side.worktree.is_dir()
        add_worktree(repo, side.commit.sha, side.worktree)
        if build_command is None or (rebuild_only_new and existed):
            continue
        log = folder / f"build-{side.arm}.log"
        report(f"compare: building {side.arm} {side.commit.sha[:12]}: "
               f"{build_command if isinstance(build_command, str) else shlex.join(build_command)}")
        result = build(build_command, side.worktree, log)
        if result.status is not BuildStatus.BUILT:
            words = ("exited 125: it cannot be tested" if result.status is BuildStatus.SKIPPED else
                     f"failed ({'exit ' + str(result.exit_code) if result.exit_code is not None else 'did not finish'})")
            raise BuildError(f"the build of {side.arm} {side.commit.sha[:12]} {side.commit.subject!r} {words}; "
                             f"nothing to compare; its log: {log}")


def _remove_worktrees(repo: Path, sides: tuple[Side, Side], report: Report) -> None:
    """The finished comparison's worktrees go (its series, builds' logs and finding stay)."""
    for side in sides:
        if side.worktree.is_dir():
            try:
                remove_worktree(repo, side.worktree)
            except GatekitError as exc:
                report(f"compare: could not remove the worktree {side.worktree}: {exc}")

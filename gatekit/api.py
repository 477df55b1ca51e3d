"""The Python API (docs/api.md): `gatekit.analyze`, `gatekit.run`, `gatekit.compare` and `gatekit.verify` for
notebooks and scripts. They are the library calls `gate analyze`, `gate run`, `gate compare` and `gate verify`
make (cli.py prints what they return and turns their GatekitError into an exit code); they return the typed
records (Finding, SeriesResult, VerifyReport) and raise the GatekitError family. Everything heavy is imported
inside them, so `import gatekit` stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Union

from gatekit.errors import ConfigError

if TYPE_CHECKING:
    from gatekit.bisect.verify import BisectVerifyReport
    from gatekit.campaign import CampaignVerifyReport
    from gatekit.config import GateConfig
    from gatekit.finding import Finding
    from gatekit.series.runner import SeriesResult
    from gatekit.verify import VerifyReport

Progress = Callable[[str], None]  # one line of progress (gate prints them on stderr)
PathLike = Union[str, Path]


def _quiet(line: str) -> None:
    """The default progress: nothing (a notebook shows the returned record)."""


def analyze(source: PathLike, gate: PathLike | None = None, *, off: str | None = None, on: str | None = None,
            progress: Progress = _quiet) -> Finding:
    """Recompute a finding offline from a series folder (with the rules of its predecision file, after verifying
    its evidence; `gate` checks the gate file's configs too) or from a CSV of runs (arm,label,<metrics>,load1_mean,
    load1_max in execution order, decided by the rules of `gate`, default gate.toml here or in the nearest folder
    above, up to the repository's root (said through `progress`); `off`/`on` name its arms, default the gate
    file's first two)."""
    from gatekit.analysis import analyze as analyze_evidence
    from gatekit.config import find_gate_file, load_gate
    from gatekit.csvinput import evidence_from_csv
    from gatekit.verify import analyze_series

    source = Path(source)
    if not source.exists():  # name the missing source, not the gate file a CSV would need
        raise ConfigError(f"{source}: no such series directory or CSV file")
    if source.is_dir():
        return analyze_series(source, load_gate(gate) if gate is not None else None)
    from gatekit.importers.common import import_command_for

    tool_output = import_command_for(source)  # another tool's file would fail as a CSV, confusingly
    if tool_output is not None:
        raise ConfigError(f"{source}: is {tool_output}")
    config = load_gate(gate if gate is not None else find_gate_file(Path.cwd(), progress))
    off_arm, on_arm = config.two_arms(off, on)
    return analyze_evidence(evidence_from_csv(source, config, off_arm.name, on_arm.name))


def run(off: str | None = None, on: str | None = None, gate: PathLike | None = None, *, n: int | None = None,
        order: str | None = None, seed: int | None = None, policy: str | None = None, warmup: int | None = None,
        load_limit: float | None = None, out: PathLike | None = None, runs: PathLike | None = None,
        resume: PathLike | None = None, progress: Progress = _quiet, check: Callable[[GateConfig], None] | None = None,
        finished: bool = False, heartbeat_s: float = 0.0) -> SeriesResult:
    """Run the interleaved OFF/ON series of the gate file (arm names or arm .toml paths, both or neither: its first
    two arms; `gate`: default gate.toml here or in the nearest folder above, up to the repository's root) and write
    its finding; or continue the interrupted series folder `resume`, exactly as registered (with its own gate file
    unless `gate` is given).
    Returns the SeriesResult: `.finding` (the typed Finding), `.series_dir`, `.finding_paths`.

    `check` is called with the gate's config before anything runs (gate run checks its CI exports can hold it);
    `finished` with `resume`: a finished series is returned as it is (gate run --resume --sign-key signs it);
    `heartbeat_s`: a progress line every so many seconds during a run (0: none)."""
    from gatekit.config import find_gate_file, load_gate
    from gatekit.driver import make_backend, make_driver
    from gatekit.preflight import run_checks
    from gatekit.sampler import read_system_load
    from gatekit.storage import SeriesLayout, require_file_locks

    if resume is not None:
        from gatekit.series_replay import open_series
        from gatekit.series.runner import SeriesRunner, finished_series
        from gatekit.verify import verify_series

        if (off or on or n or order or seed is not None or out or runs or policy or warmup is not None
                or load_limit is not None):
            raise ConfigError("--resume continues a series exactly as registered; "
                              "drop OFF/ON, --n, --order, --seed, --policy, --warmup, --load-limit, --out and --runs")
        resume = Path(resume)
        verify_series(resume)  # an edited journal or record is exit 3 naming it, before anything runs
        if finished and SeriesLayout(resume).done.exists():
            return finished_series(resume)
        opened = open_series(resume, _path(gate))
        if check is not None:
            check(opened.config)
        return SeriesRunner(opened.config, opened.off, opened.on, report=progress,
                            heartbeat_s=heartbeat_s).resume(opened)
    if bool(off) != bool(on):
        raise ConfigError("name both arms or neither: gate run OFF ON (arm names of the gate file or arm "
                          ".toml paths; neither: the gate file's first two arms)")
    gate_file = gate if gate is not None else find_gate_file(Path.cwd(), progress)
    config = load_gate(gate_file).with_overrides(n=n, order=order, seed=seed, out=_path(out), runs=_path(runs),
                                                 policy=policy, warmup=warmup, load_limit=load_limit)
    if check is not None:
        check(config)
    off_arm, on_arm = config.two_arms(off, on)
    # the plugins' own keys are checked before the first line, so a bad key stays the one line printed
    driver = make_driver(config.driver.name, config.driver.options, source=config.path, base_dir=config.base_dir)
    backend = make_backend(config.backend.name, config.backend.options, source=config.path)
    # the preflight needs none of the statistics: it runs, and its passing is said, before they load (a second
    # or more), so the first line of `gate run` comes at once; a failure stays the one line printed
    checks = run_checks(config, [off_arm, on_arm], driver, backend, read_load=read_system_load)
    require_file_locks(SeriesLayout.lock(config.gate.runs))  # where it cannot run at all, that is the one line
    if all(check.ok for check in checks):
        progress(f"{config.gate.id}: {off_arm.name} vs {on_arm.name}: preflight passed ({len(checks)} checks); "
                 f"hashing {len(config.driver.hash)} artifact(s) and preregistering the rules")
    from gatekit.series.runner import SeriesRunner

    try:
        return SeriesRunner(config, off_arm, on_arm, driver=driver, backend=backend, report=progress,
                            heartbeat_s=heartbeat_s).start(checks)
    finally:  # its helpers (a warm start's parents) end with the series
        close = getattr(driver, "close", None)
        if callable(close):
            close()


def compare(base: str | None, head: str | None = None, gate: PathLike | None = None, *, arm: str | None = None,
            build: str | None = None, merge_base: bool = True, n: int | None = None, policy: str | None = None,
            out: PathLike | None = None, resume: PathLike | None = None, cwd: PathLike | None = None,
            progress: Progress = _quiet) -> SeriesResult:
    """The pull-request gate: the gate file's arm at BASE (its merge-base with HEAD unless `merge_base=False`)
    against HEAD (default HEAD) in the git repository of `cwd` (default the working directory), each side in its
    own worktree after its `build`; or continue the compare folder `resume`. Returns the series' SeriesResult,
    whose finding names both commits (docs/compare.md)."""
    from gatekit.compare import CompareOptions, run_compare

    if resume is not None and (base or head or n or policy or out or gate or not merge_base):
        raise ConfigError("--resume continues a comparison exactly as registered; drop BASE, HEAD, --gate, --n, "
                          "--policy, --out and --no-merge-base")
    options = CompareOptions(gate_path=_path(gate), arm=arm, build=build, merge_base=merge_base, n=n, policy=policy,
                             out=_path(out), resume=_path(resume))
    return run_compare(base, head, options, cwd=_path(cwd), report=progress).series


def verify(path: PathLike, finding: PathLike | None = None, *,
           pubkey: PathLike | None = None) -> VerifyReport | BisectVerifyReport | CampaignVerifyReport:
    """Verify the evidence in `path`: a series folder (its journal's chain, predecision, run records; with
    `finding`, that it equals its recomputation; with `pubkey`, its signature) gives a VerifyReport; a bisect
    folder (or its bisect-finding file) a BisectVerifyReport; a campaign folder a CampaignVerifyReport. Raises
    VerificationError (exit 3) at the first disagreement, naming the file and line."""
    from gatekit.bisect.finding import bisect_folder_of
    from gatekit.campaign import CAMPAIGN_JOURNAL
    from gatekit.storage import SeriesLayout
    from gatekit.verify import verify_series

    path = Path(path)
    bisect = bisect_folder_of(path)
    if bisect is not None:
        if finding is not None or pubkey is not None:
            raise ConfigError("a bisect folder is verified alone: its finding is the one in it, each probe's the one "
                              "its journal names")
        from gatekit.bisect.verify import verify_bisect

        return verify_bisect(bisect.resolve())
    if path.is_file():
        raise ConfigError(f"{path}: is a file; verify a series, bisect or campaign folder (a finding goes second)")
    if not SeriesLayout(path).journal.exists() and (path / CAMPAIGN_JOURNAL).exists():
        if finding is not None or pubkey is not None:
            raise ConfigError("a campaign folder is verified alone: each gate's finding is the one its journal names "
                              "(verify a gate's series to check a signature)")
        from gatekit.campaign import verify_campaign

        return verify_campaign(path.resolve())
    return verify_series(path, _path(finding), pubkey=_path(pubkey))


def _path(value: PathLike | None) -> Path | None:
    return None if value is None else Path(value)

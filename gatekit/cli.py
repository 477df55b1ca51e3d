"""`gate`: the command line. Parses, calls the library, prints, sets the exit code. Nothing else."""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import click

from gatekit.commits import BUILD_TIMEOUT_S
from gatekit.config import (DEFAULT_MAX_THRESHOLD_PCT, EXPORT_FORMATS, FAIL_ON, ORDERS, SEEDED_ORDERS, ThresholdSpec,
                            load_gate)
from gatekit.distribution import install_hint, installed_version
from gatekit.errors import (EXIT_FAIL_ON, EXIT_INVALID, MACHINE_ERRNOS, ConfigError, DriverError, GatekitError,
                            SeriesInterrupted, write_failed)
from gatekit.policy_descriptors import (DEFAULT_POLICY, IMPORT_POLICY, INTERLEAVED, describe, gate_policies,
                                        policies_of_mode, simulation_policies, suite_policies)
from gatekit.sanitize import show_controls  # control characters and bidi overrides shown as escapes

# The statistics (pandas, scipy: analysis, series, calibrate, csvinput, simulate), the findings, the reports,
# the drivers, the preflight and the engines (psutil, the process tree) are imported in the commands that use
# them, so `gate --help` and `gate check` start fast; tests/test_cli_imports.py keeps it so.
if TYPE_CHECKING:
    from gatekit.analysis import SeriesEvidence
    from gatekit.exports import CiOutputs
    from gatekit.finding import Finding
    from gatekit.findingset import LoadedFinding
    from gatekit.report.site import Prepared


T = TypeVar("T")
HEARTBEAT_S = 30.0  # seconds between the lines `gate run` prints during a long run (at a terminal only)


class LiveChoice(click.Choice):
    """An option's choices read when the option is parsed or its help shown, not when this module is imported:
    a policy registered later (a plugin's, a test's) is accepted too, and choices that live in a module `gate
    --help` need not import (the engines) stay unimported."""

    def __init__(self, names: Callable[[], tuple[str, ...]]) -> None:
        self.names = names
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        return self.names()

    @choices.setter
    def choices(self, _: object) -> None:  # click.Choice assigns them once; they are always read live
        pass


def run_policy_words() -> str:
    """"classic, or sequential (4, then 8, then 12 runs per arm)": the policies an interleaved gate may take."""
    return ", or ".join(name + (f" ({describe(name).stages_words})" if describe(name).fixes_schedule else "")
                        for name in policies_of_mode(INTERLEAVED))


class LiveHelpOption(click.Option):
    """An option whose help names the registered policies, composed when the help is shown: `gate --help` then
    need not read the entry points (importlib.metadata and the scan cost tens of ms of its < 0.3 s)."""

    def __init__(self, *args: Any, live_help: Callable[[], str], **kwargs: Any) -> None:
        self.live_help = live_help
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str:
        return self.live_help()

    @help.setter
    def help(self, _: object) -> None:  # click.Option assigns it once; it is always composed live
        pass


class GateError(click.ClickException):
    """A GatekitError at the edge: one line on stderr and the error's own exit code."""

    def __init__(self, error: GatekitError) -> None:
        super().__init__(str(error))
        self.exit_code = error.exit_code  # type: ignore[misc]  # a ClassVar in click's stubs; click reads it per instance

    def show(self, file: object = None) -> None:
        _echo(f"gate: error: {show_controls(self.format_message())}", err=True)


def _engines() -> tuple[str, ...]:
    from gatekit.engines import ENGINES

    return ENGINES


def _call(work: Callable[[], T]) -> T:
    try:
        return work()
    except GatekitError as error:
        raise GateError(error) from None
    except OSError as error:  # a write no layer named: files are written atomically, journals whole, so what
        if error.errno not in MACHINE_ERRNOS:  # was written stands; any other OSError is a bug: its traceback
            raise
        raise GateError(write_failed(error, "what was written before is whole — free space or fix permissions, "
                                            "then run the command again (a series or bisect: with --resume)")) from None
    except KeyboardInterrupt:  # before a series exists (preflight, preregistration): nothing to resume
        raise GateError(SeriesInterrupted("interrupted before any run started; nothing to resume")) from None


def _echo(text: str, *, err: bool = False, nl: bool = True, lines: bool = False) -> None:
    """THE way gate prints text for people: control characters and bidi overrides shown as escapes
    (`show_controls`; tabs kept), so a string from a finding, a trainer or a file (an id, a run folder, a
    config key in a reason, a command line) cannot clear, recolor or forge what a terminal shows. Click strips
    escape sequences only when output is redirected; a terminal would get them. A newline is escaped too,
    unless `lines`: the text of a renderer that composed several lines and escaped each string it put in
    (else a newline inside one would forge a line); its line breaks are kept. JSON goes out as is."""
    parts = text.split("\n") if lines else [text]
    click.echo("\n".join(show_controls(part, keep="\t") for part in parts), err=err, nl=nl)


def _stderr(text: str, *, lines: bool = False) -> None:
    _echo(text, err=True, lines=lines)


def _progress(line: str) -> None:
    """One progress line of a series on stderr; trainer-supplied text in it cannot break the terminal."""
    _echo(show_controls(line), err=True)


gate_option = click.option("--gate", "gate_path", type=click.Path(path_type=Path),
                           help="The gate file [default: gate.toml here or in the nearest folder above, up to the "
                                "repository's root].")


def _gate_file(gate_path: Path | None) -> Path:
    """--gate, else the gate file where the repository keeps it (one above here is said on stderr)."""
    from gatekit.config import find_gate_file

    return gate_path if gate_path is not None else find_gate_file(Path.cwd(), _stderr)
ray_address_option = click.option("--address", help="Ray: join the cluster at this address (e.g. auto or HOST:6379); "
                                                    "default: start a local Ray.")


def ci_output_options(command: Callable) -> Callable:
    """--summary-md, --junit, --export and --bmf-measure, handed to the command as one `ci`
    (gatekit.exports.CiOutputs, imported when the command runs): the CI outputs of its findings."""
    @functools.wraps(command)
    def with_ci_outputs(*args: Any, summary_md: Path | None, junit: Path | None,
                        exports: tuple[tuple[str, Path], ...], bmf_measure: str, **kwargs: Any) -> Any:
        from gatekit.exports import CiOutputs

        # the command's --fail-on decides what its JUnit report counts as a failure, too
        ci = CiOutputs(summary_md=summary_md, junit=junit, exports=tuple(exports), bmf_measure=bmf_measure,
                       fail_on=kwargs.get("fail_on"))
        return command(*args, ci=ci, **kwargs)

    for option in reversed((  # listed in --help in this order
            click.option("--summary-md", "summary_md", type=click.Path(path_type=Path),
                         help="Write a Markdown summary (for $GITHUB_STEP_SUMMARY or a PR comment)."),
            click.option("--junit", "junit", type=click.Path(path_type=Path),
                         help="Write JUnit XML: one testcase per gate, failed on regression, guard_failed "
                              "or invalid."),
            click.option("--bmf-measure", "bmf_measure", type=click.Choice(["custom", "latency"]),
                         default="custom", show_default=True,
                         help="bmf: the primary as a custom measure named by the metric, or as Bencher's "
                              "built-in latency in nanoseconds (a primary in seconds; continues a history "
                              "that Bencher's hyperfine adapter started)."),
            click.option("--export", "exports", type=(click.Choice(EXPORT_FORMATS), click.Path(path_type=Path)),
                         multiple=True, metavar="FORMAT FILE",
                         help="Also write FILE in FORMAT: gab-json (github-action-benchmark; configure "
                              "tool customSmallerIsBetter for a lower-is-better primary, customBiggerIsBetter "
                              "for a higher-is-better one) or bmf (Bencher Metric Format). Invalid findings "
                              "are left out (one line on stderr each). Repeatable."))):
        with_ci_outputs = option(with_ci_outputs)
    return with_ci_outputs


def _write_ci_outputs(ci: CiOutputs, findings: list[Finding], *, finding_paths: tuple[str, ...] = (),
                      full_report: str = "", exits_invalid: bool = False) -> None:
    """`ci.write` at the edge: its notes on stderr, its errors as gate errors."""
    _call(lambda: ci.write(findings, finding_paths=finding_paths, full_report=full_report,
                           exits_invalid=exits_invalid, note=_stderr))


class GateGroup(click.Group):
    """`gate`'s commands. `gate simulate --bisect …`, from before `gate simulate-bisect` was a command of its
    own, still runs it (with the same options), saying so."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args[:1] == ["simulate"] and "--bisect" in args:
            _stderr("gate simulate --bisect is deprecated: run gate simulate-bisect (the same options)")
            args = ["simulate-bisect", *(arg for arg in args[1:] if arg != "--bisect")]
        return super().parse_args(ctx, args)


def _show_version(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    """--version, as click.version_option prints it; the version is read only when asked for (importlib.metadata
    takes tens of ms to import, a fair part of `gate --help`)."""
    if value and not ctx.resilient_parsing:
        _echo(f"gate, version {installed_version()}")
        ctx.exit()


@click.group(cls=GateGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_show_version,
              help="Show the version and exit.")
def main() -> None:
    """gatekit: a preregistered, interleaved A/B gate for ML training code.

    \b
    Typical use:
      gate check off on            validate the gate file, arms and machine; nothing runs
      gate run off on --n 3        run the interleaved series and decide
      gate analyze runs/<series>   recompute a finding offline
    Exit codes: 0 decided, 1 a --fail-on condition met, 2 usage or config error (nothing ran),
    3 series invalid or evidence that does not verify, 4 the machine's fault: a file could not be written
    (a full, read-only or unwritable disk) or the machine was not ready at preflight (another trainer, the
    load, a battery); resume with --resume DIR, or run the command again when nothing ran, 130
    interrupted (resume with --resume DIR).
    """


load_limit_option = click.option(
    "--load-limit", type=float, help="Preflight refuses, and a run window is load evidence, above this load1 "
    "(overrides rules.load_limit; preregistered like it).")


@main.command()
@click.argument("off", required=False)
@click.argument("on", required=False)
@gate_option
@click.option("--policy", type=LiveChoice(gate_policies),
              cls=LiveHelpOption,
              live_help=lambda: f"Check as gate run --policy would run it (overrides gate.policy): {run_policy_words()}.")
@load_limit_option
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON on stdout ({ok, checks: [{name, ok, "
              "warn, detail}]}).")
def check(off: str | None, on: str | None, gate_path: Path | None, policy: str | None, load_limit: float | None,
          as_json: bool) -> None:
    """Validate the gate file and both arms and run preflight, without starting the trainer.

    OFF and ON are arm names of the gate file (default: its first two arms) or paths to arm .toml files.
    Exits 2 when a check fails, or warns (WARN) that runs started now would be flagged by a preregistered limit.
    """
    from gatekit.driver import make_backend, make_driver
    from gatekit.preflight import run_checks

    def work() -> bool:
        config = load_gate(_gate_file(gate_path)).with_overrides(policy=policy, load_limit=load_limit)
        arms = config.two_arms(off, on)
        driver = make_driver(config.driver.name, config.driver.options, source=config.path,
                             base_dir=config.base_dir)
        backend = make_backend(config.backend.name, config.backend.options, source=config.path)
        checks = run_checks(config, arms, driver, backend)
        if as_json:
            click.echo(json.dumps({"ok": all(item.ok and not item.flags_runs for item in checks),
                                   "checks": [{"name": item.name, "ok": item.ok, "warn": item.flags_runs,
                                               "detail": item.detail} for item in checks]}, indent=2))
        for item in checks if not as_json else ():
            # a detail may quote another process's command line: escapes shown, never sent to the terminal
            _echo(f"{('WARN' if item.flags_runs else 'ok  ') if item.ok else 'FAIL'}  {item.name}: {item.detail}")
        return all(item.ok and not item.flags_runs for item in checks)

    if not _call(work):
        raise SystemExit(2)


fail_on_option = click.option(
    "--fail-on", type=click.Choice(sorted(FAIL_ON)),
    help="Exit 1 on this outcome: regression (regression or guard_failed), unproven (anything that does not rule "
         "out a slowdown beyond the gate's tolerance: regression, guard_failed, inconclusive; invalid exits 3) or "
         "not-adopted (docs/ci.md).")
sign_key_option = click.option(
    "--sign-key", type=click.Path(path_type=Path, dir_okay=False),
    help="Ed25519 private key (PEM): sign the finding and the journal's chain head into <id>.sig "
         f"(needs: {install_hint('sign')}).")


@main.command()
@click.argument("off", required=False)
@click.argument("on", required=False)
@gate_option
@click.option("--n", type=int, help="Runs per arm (overrides gate.n).")
@click.option("--order", type=click.Choice(ORDERS), help="Run order (overrides gate.order).")
@click.option("--seed", type=int, help=f"Seed of a {', '.join(SEEDED_ORDERS[:-1])} or {SEEDED_ORDERS[-1]} order "
              "(overrides gate.seed; default: derived from the predecision's sha256).")
@click.option("--policy", type=LiveChoice(gate_policies),
              cls=LiveHelpOption, live_help=lambda: f"Decision policy (overrides gate.policy): {run_policy_words()}.")
@click.option("--warmup", type=click.IntRange(0, 2),
              help="Discarded warm-up runs before round 1: 1 the first arm, 2 both (overrides gate.warmup).")
@load_limit_option
@click.option("--out", type=click.Path(path_type=Path), help="Folder for the finding (overrides gate.out).")
@click.option("--runs", "runs_dir", type=click.Path(path_type=Path),
              help="Folder for series directories (overrides gate.runs).")
@click.option("--json", "as_json", is_flag=True, help="Print the finding as JSON on stdout.")
@fail_on_option
@click.option("--resume", type=click.Path(path_type=Path, file_okay=False),
              help="Continue an interrupted series directory (with --sign-key, a finished one: sign its finding "
              "if its signature could not be written).")
@sign_key_option
@ci_output_options
def run(off: str | None, on: str | None, gate_path: Path | None, n: int | None, order: str | None, seed: int | None,
        policy: str | None, warmup: int | None, load_limit: float | None, out: Path | None, runs_dir: Path | None,
        as_json: bool, fail_on: str | None, resume: Path | None, sign_key: Path | None, ci: CiOutputs) -> None:
    """Run the interleaved OFF/ON series, apply the preregistered rules and write the finding.

    OFF is the baseline arm and ON the arm with the change; each is an arm name of the gate file or a
    path to an arm .toml file. Name both or neither (default: the gate file's first two arms, OFF then
    ON, as `gate check`).
    """
    key = _signing_key(sign_key)
    # a line every HEARTBEAT_S during a run, for a person at a terminal; none for a pipe, a log or --json
    heartbeat_s = HEARTBEAT_S if sys.stdout.isatty() and not as_json else 0.0

    def work() -> Any:
        from gatekit import api

        return api.run(off, on, gate_path, n=n, order=order, seed=seed, policy=policy, warmup=warmup,
                       load_limit=load_limit, out=out, runs=runs_dir, resume=resume, progress=_progress,
                       finished=key is not None, heartbeat_s=heartbeat_s,
                       check=lambda config: ci.check(config.gate.primary, str(config.path)))

    _series_done(_call(work), key, sign_key, as_json, ci, fail_on)


def _signing_key(sign_key: Path | None) -> Any:
    """The --sign-key, loaded before anything runs: a missing package or a bad key is a usage error."""
    if sign_key is None:
        return None
    from gatekit.verify import load_signing_key

    return _call(lambda: load_signing_key(sign_key))


def _series_done(result: Any, key: Any, sign_key: Path | None, as_json: bool, ci: CiOutputs,
                 fail_on: str | None) -> None:
    """A series that ended (gate run, gate compare): signed when asked (`key`, loaded from the file `sign_key`),
    printed, its CI outputs, its exit code. A finished series of either is signed again by `gate run --resume`."""
    paths = tuple(str(p) for p in result.finding_paths)
    if key is not None:
        from gatekit.verify import sign_finding, verify_series

        json_path = next(p for p in result.finding_paths if p.suffix == ".json")
        # only what verifies is signed: the series' evidence and the finding as its recomputation
        _call(lambda: verify_series(result.series_dir, json_path))
        hint = f"fix it, then sign the finding with: gate run --resume {result.series_dir} --sign-key {sign_key}"
        signed = _call(lambda: sign_finding(json_path, result.finding.predecision.chain_head, key, resume_hint=hint))
        paths += (str(signed),)
    _emit(result.finding, as_json, paths)
    _write_ci_outputs(ci, [result.finding], finding_paths=paths, exits_invalid=True)
    _exit_for(result.finding, fail_on)


def _plain(report: Any) -> dict[str, Any]:
    """A report dataclass's fields as JSON-ready data (paths as text, tuples as lists)."""
    import dataclasses

    def plain(value: Any) -> Any:
        return str(value) if isinstance(value, Path) else [plain(v) for v in value] if isinstance(value, tuple) \
            else value

    return {f.name: plain(getattr(report, f.name)) for f in dataclasses.fields(report)}


def _emit(finding: Finding, as_json: bool, paths: tuple[str, ...] = ()) -> None:
    from gatekit.report.terminal import summary

    paths = tuple(str(Path(p).absolute()) for p in paths)  # every path gate prints is absolute
    if as_json:
        click.echo(finding.to_json(), nl=False)
        _stderr(summary(finding, paths), lines=True)
    else:
        _echo(summary(finding, paths), lines=True)


def _exit_for(finding: Finding, fail_on: str | None) -> None:
    """3 for an invalid finding (whatever --fail-on says), 1 when --fail-on names its decision (one line on
    stderr saying why under unproven), else returns."""
    if fail_on == "unproven" and finding.decision.value in FAIL_ON[fail_on]:
        from gatekit.exports import unproven_why

        _stderr(f"gate: --fail-on unproven: {unproven_why(finding)}")
    if finding.decision.value == "invalid":
        raise SystemExit(EXIT_INVALID)
    if fail_on and finding.decision.value in FAIL_ON[fail_on]:
        raise SystemExit(EXIT_FAIL_ON)


@main.command("analyze")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--gate", "gate_path", type=click.Path(path_type=Path),
              help="The gate file (a CSV needs one; default gate.toml here or in the nearest folder above, up to the "
                   "repository's root; a series directory knows its own).")
@click.option("--off", "off_name", help="The off arm's name in a CSV (default: the gate file's first arm).")
@click.option("--on", "on_name", help="The on arm's name in a CSV (default: the gate file's second arm).")
@click.option("--json", "as_json", is_flag=True, help="Print the finding as JSON on stdout.")
@fail_on_option
@ci_output_options
def analyze_cmd(source: Path, gate_path: Path | None, off_name: str | None, on_name: str | None, as_json: bool,
                fail_on: str | None, ci: CiOutputs) -> None:
    """Recompute stats and verdict offline from a series directory or a CSV.

    A series directory is analysed with the rules of its predecision file, after verifying its sha256,
    and reproduces the finding the series wrote. A CSV has columns arm,label,<metrics>,load1_mean,load1_max
    in execution order and is analysed with the rules of --gate.
    """
    def work() -> Finding:
        from gatekit import api

        return api.analyze(source, gate_path, off=off_name, on=on_name, progress=_stderr)

    finding = _call(work)
    _emit(finding, as_json)
    _write_ci_outputs(ci, [finding], exits_invalid=True)
    _exit_for(finding, fail_on)


@main.command("verify")
@click.argument("series_dir", type=click.Path(path_type=Path))
@click.argument("finding", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--pubkey", type=click.Path(path_type=Path, dir_okay=False),
              help="Ed25519 public key (PEM): check the finding's signature <id>.sig too.")
@click.option("--json", "as_json", is_flag=True,
              help="Print what was verified as JSON on stdout (kind, events, chain_head and the counts).")
def verify_cmd(series_dir: Path, finding: Path | None, pubkey: Path | None, as_json: bool) -> None:
    """Verify a series' evidence: the journal's hash chain, the predecision's sha256 and every run's
    record.json; given FINDING, that it equals the recomputed finding and records the chain head.
    A campaign folder: its journal's chain, and each finished gate's series with the finding it names.
    A bisect folder (or its bisect-finding.json/.toml): its journal's chain on the plan, the finding rebuilt
    from the journal, and each probe's series with its gate's finding.

    Exit 3 names the first file and line that disagree.
    """
    from gatekit import api
    from gatekit.bisect.finding import bisect_folder_of
    from gatekit.bisect.verify import BisectVerifyReport
    from gatekit.campaign import CampaignVerifyReport

    if series_dir.is_file() and bisect_folder_of(series_dir) is None:
        # what click's file_okay=False said before bisect findings were verified here
        raise click.BadParameter(f"Directory '{series_dir}' is a file.", param_hint="'SERIES_DIR'")
    report = _call(lambda: api.verify(series_dir, finding, pubkey=pubkey))
    if as_json:
        kind = ("bisect" if isinstance(report, BisectVerifyReport) else
                "campaign" if isinstance(report, CampaignVerifyReport) else "series")
        click.echo(json.dumps({"kind": kind, **_plain(report)}, indent=2, allow_nan=False))
        return
    if isinstance(report, BisectVerifyReport):
        what = f"its finding {report.finding.name}" if report.finding else "not stopped yet: no finding"
        _echo(f"verified bisect: {report.events} events, chain head {report.chain_head} ({report.probes} "
              f"probe series, each with its gate's finding; {what})")
        return
    if isinstance(report, CampaignVerifyReport):
        _echo(f"verified campaign: {report.events} events, chain head {report.chain_head} "
              f"({report.gates} finished gate(s), each series with its finding)")
        return
    for warning in report.warnings:
        _stderr(f"warning: {warning}")
    for note in report.notes:
        _stderr(f"note: {note}")
    checked = f"{report.records} run record(s)" + (f", {report.finding}" if report.finding else "") + (
        f", signature {report.signature}" if report.signature else "")
    head = report.chain_head or "none (a journal written before hash chains)"
    _echo(f"verified: {report.events} events, chain head {head} ({checked})")


@main.command()
@click.argument("arm", required=False)
@gate_option
@click.option("--n", type=int, default=10, show_default=True, help="A/A runs of the arm.")
@click.option("--min-effect", "min_effect_pct", type=float,
              help="The effect (in %) the gate must find; default: the gate's threshold.floor_pct.")
@click.option("--runs", "runs_dir", type=click.Path(path_type=Path),
              help="Folder for the calibration and its runs (overrides gate.runs).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON on stdout.")
def calibrate(arm: str | None, gate_path: Path | None, n: int, min_effect_pct: float | None, runs_dir: Path | None,
              as_json: bool) -> None:
    """A/A runs of one arm (default: the gate's first): CV, warm-up, drift, change point, runs needed
    (simulated under the gate's policy, as `gate plan`).

    Stored as <runs>/calibration.toml, where sigma_ref = "history" finds it.
    """
    from gatekit.calibrate import run_calibration, summary as calibration_summary

    def work() -> Any:
        config = load_gate(_gate_file(gate_path)).with_overrides(runs=runs_dir)
        chosen = config.arm(arm) if arm else config.arm(next(iter(config.arms)))
        return run_calibration(config, chosen, n, min_effect_pct=min_effect_pct, report=_stderr)

    calibration = _call(work)
    if as_json:
        click.echo(json.dumps(calibration.document, indent=2, ensure_ascii=False, allow_nan=False))
        _stderr(calibration_summary(calibration), lines=True)
    else:
        _echo(calibration_summary(calibration), lines=True)


VERSION_OPTION_PREFIX = "version_of_"  # the keyword `_design_version_options` gives each policy's option


def _design_version_options() -> list[click.Option]:
    """`--<policy>-version N` (repeatable) for each policy that keeps design versions (its descriptor's
    `version`): simulate that version instead of the one a new series preregisters, several side by side."""
    return [click.Option([f"--{name}-version", f"{VERSION_OPTION_PREFIX}{name}"], type=int, multiple=True,
                         help=f"Design version of the {name} policy to simulate (default: {describe(name).version}, "
                              "what a new series preregisters); repeat for several side by side.")
            for name in simulation_policies() if describe(name).version is not None]


class SimulateCommand(click.Command):
    """`gate simulate`: its `--<policy>-version` options join its parameters, after --workers, when they are first
    read (to parse, to show help, for docs/cli.md), so `gate --help` need not read the policies' entry points."""

    _params: list[click.Parameter]
    _with_versions = False

    @property
    def params(self) -> list[click.Parameter]:
        if not self._with_versions:
            self._with_versions = True
            at = next(k for k, param in enumerate(self._params) if param.name == "workers") + 1
            self._params[at:at] = _design_version_options()
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._params = value


@main.command("simulate", cls=SimulateCommand)
@click.option("--policy", "policies", type=LiveChoice(simulation_policies), multiple=True,
              cls=LiveHelpOption,
              live_help=lambda: f"Policy to simulate; repeat for several (default: {DEFAULT_POLICY}; with --suite "
                                f"{' and '.join(suite_policies())}).")
@click.option("--cv", "cv_off_pct", type=float, default=0.5, show_default=True,
              help="Coefficient of variation of the off arm's run times, in %.")
@click.option("--cv-on", "cv_on_pct", type=float, help="CV of the on arm in % (default: --cv).")
@click.option("--effect", "effect_pct", type=float, default=0.0, show_default=True,
              help="True change of on against off in % (negative: on is faster).")
@click.option("--drift", "drift_pct_per_run", type=float, default=0.0, show_default=True, help="Drift per run, in %.")
@click.option("--cold-first", "cold_first_pct", type=float, default=0.0, show_default=True,
              help="The series' first run is this much slower, in %.")
@click.option("--outlier-rate", type=float, default=0.0, show_default=True,
              help="Fraction of runs (each drawn independently) slowed by --outlier-pct.")
@click.option("--outlier-pct", type=float, default=0.0, show_default=True, help="How much an outlier run is slower, %.")
@click.option("--outlier-on-only", is_flag=True,
              help="Only the on arm's runs are slowed by --outlier-rate/--outlier-pct (a change of the mean).")
@click.option("--tails", type=float, help="Student-t noise with this many degrees of freedom (> 2), same CV.")
@click.option("--guard-drop", type=float, help="Guard scenario (sequential): true quality drop; the limit equals it.")
@click.option("--guard-sd", type=float, default=0.0, show_default=True, help="SD of a round's guard difference.")
@click.option("--shared-cv", "shared_cv_pct", type=float, default=0.0, show_default=True,
              help="CV in % of noise common to both runs of a pair (the host's, shared by a duet pair).")
@click.option("--slot-effect", "slot_effect_pct", type=float, default=0.0, show_default=True,
              help="Duet: a run on slot 1 is this much slower than on slot 0, in %.")
@click.option("--slot-step-pct", type=float, default=0.0, show_default=True,
              help="Duet: from pair --slot-step-from on, a run on slot 1 is this much slower still, in %.")
@click.option("--slot-step-from", type=int,
              help="Duet: the pair from which --slot-step-pct applies (1 = the first; -1 = the last, -2 the last two).")
@click.option("--slot-drift-pct", type=float, default=0.0, show_default=True,
              help="Duet: slot 1 slows by this much more with every pair, in % per pair.")
@click.option("--censored-pct", "censored_pct", type=float,
              help="A time to a quality target (--policy censored): runs are censored at the time this share "
                   "(%) of off runs would exceed (0: none).")
@click.option("--periodic-pct", type=float, default=0.0, show_default=True,
              help="Interference on every --period-th run (a periodic job): such runs are this much slower, in %.")
@click.option("--period", type=int, default=0, show_default=True,
              help="With --periodic-pct: every k-th run by execution position (warm-ups counted) is slowed.")
@click.option("--phase", type=int, help="With --periodic-pct: the first slowed position, 0 … period − 1 "
              "(default: drawn per gate).")
@click.option("--order", type=click.Choice(ORDERS), help="Run order (default: the policy's own).")
@click.option("--n", type=int, help="Runs per arm of fixed-n policies, pairs of a duet (default: 3; a duet's own "
              "default, 12 pairs for versions 3 and 2, 8 for version 1; version 3 needs at least 10).")
@click.option("--warmup", type=click.IntRange(0, 2), default=0, show_default=True, help="Discarded warm-up runs.")
@click.option("--sigma-k", type=float, default=2.0, show_default=True, help="Classic threshold's σ multiple.")
@click.option("--floor-pct", type=float, default=1.0, show_default=True, help="Threshold floor / sequential floor, %.")
@click.option("--max-threshold-pct", type=float, default=DEFAULT_MAX_THRESHOLD_PCT, show_default=True,
              help="Classic: a threshold above this makes the gate inconclusive, not rejected, as "
                   "rules.max_threshold_pct (0: no limit).")
@click.option("--draws", type=int, default=100_000, show_default=True, help="Simulated gates per scenario and policy.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the simulation.")
@click.option("--suite", is_flag=True, help="Every scenario of docs/statistics.md instead of the one given.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --suite: processes simulating its cells at once (each cell has its own seed: the same "
                   "numbers with any count).")
@click.option("--campaign", "campaign", is_flag=True,
              help="Simulate campaigns of --campaign-gates gates (null ones, and real ones of --effect), each "
                   "decided by its policy, then by the campaign's Benjamini–Hochberg at --fdr: FDR and power, "
                   "own rule beside controlled; --draws counts campaigns [default: 2000].")
@click.option("--campaign-gates", default="90,10", show_default=True, metavar="NULLS,REALS",
              help="With --campaign: gates of no change, and gates of the true --effect, in each campaign.")
@click.option("--fdr", type=float, default=0.05, show_default=True,
              help="With --campaign: the false-discovery level, as a campaign file's [campaign] fdr.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
def simulate_cmd(policies: tuple[str, ...], order: str | None, n: int | None, sigma_k: float, floor_pct: float,
                 max_threshold_pct: float, draws: int, seed: int, suite: bool, workers: int, campaign: bool,
                 campaign_gates: str, fdr: float, as_json: bool, **options: Any) -> None:
    """Monte-Carlo of a decision policy: false adoption, power and runs per arm, with their MC errors.

    Run times are lognormal with the given CVs (Student t on the log scale with --tails); the true effect is
    on the median. A guard scenario (--guard-drop D --guard-sd S) also reports how often the sequential
    guard passes with the true drop at its limit: its false-pass rate. Example:
    gate simulate --policy classic --policy sequential --cv 2 --cv-on 8

    A duet (--policy duet --n 12; duet-v2 and duet-v1 are its versions 2 and 1) runs both arms of a pair at
    once: --shared-cv adds noise common to both, --slot-effect makes slot 1 slower than slot 0, --slot-step-pct
    S --slot-step-from K slower still from pair K on, --slot-drift-pct D slower by D % more each pair.

    A time to a quality target (--policy censored --censored-pct 30 --cv 10 --n 16) censors the runs beyond the
    time that share of off runs would exceed.

    --campaign simulates a campaign's false-discovery control (docs/campaigns.md), e.g.
    gate simulate --campaign --policy sequential --effect -2 --cv 0.5

    `gate simulate-bisect` simulates a bisect.
    """
    if campaign:
        _simulate_campaign(policies, options["cv_off_pct"], options["effect_pct"], order, n, floor_pct, sigma_k,
                           max_threshold_pct, draws, seed, campaign_gates, fdr, as_json)
        return
    from dataclasses import replace

    from gatekit.simulate import Scenario, default_runs, run_suite, simulate, table

    thresholds = ThresholdSpec(sigma_k=sigma_k, floor_pct=floor_pct)
    # the options are the scenario's fields by name (--cv is cv_off_pct, …) and each policy's --NAME-version
    versions = {name.removeprefix(VERSION_OPTION_PREFIX): chosen for name, chosen in options.items()
                if name.startswith(VERSION_OPTION_PREFIX)}
    scenario_fields = {name: value for name, value in options.items() if not name.startswith(VERSION_OPTION_PREFIX)}
    began = time.monotonic()

    def work() -> Any:
        if suite:
            return run_suite(policies or suite_policies(), draws=draws, seed=seed, order=order,
                             thresholds=thresholds, max_threshold_pct=max_threshold_pct, versions=versions,
                             workers=workers)
        scenario = Scenario(order=order, n=n or 3, **scenario_fields)
        return [simulate(policy, scenario if n is not None else replace(scenario, n=default_runs(policy)),
                         draws=draws, seed=seed, thresholds=thresholds, max_threshold_pct=max_threshold_pct,
                         version=version)
                for policy in policies or (DEFAULT_POLICY,) for version in versions.get(policy) or (None,)]

    results = _call(work)
    if as_json:
        click.echo(json.dumps({"simulations": [r.to_dict() for r in results]}, indent=2, allow_nan=False))
    else:
        _echo(table(results), lines=True)
    _stderr(f"{len(results)} simulation(s) of {draws} gates in {time.monotonic() - began:.1f} s; "
            "± is one Monte-Carlo standard error")


def _simulate_campaign(policies: tuple[str, ...], cv_pct: float, effect_pct: float, order: str | None, n: int | None,
                       floor_pct: float, sigma_k: float, max_threshold_pct: float, draws: int, seed: int,
                       campaign_gates: str, fdr: float, as_json: bool) -> None:
    from gatekit.fdr_simulation import CampaignScenario, simulate_campaigns, table as campaign_table
    from gatekit.simulate import Scenario, default_runs

    began = time.monotonic()
    if click.get_current_context().get_parameter_source("draws") == click.core.ParameterSource.DEFAULT:
        draws = 2_000  # each campaign is a hundred gates

    def work() -> Any:
        try:
            nulls, reals = (int(part) for part in campaign_gates.split(","))
        except ValueError:
            raise ConfigError(f"--campaign-gates: write NULLS,REALS (e.g. 90,10), got {campaign_gates!r}") from None
        thresholds = ThresholdSpec(sigma_k=sigma_k, floor_pct=floor_pct)
        return [simulate_campaigns(policy, CampaignScenario(Scenario(cv_off_pct=cv_pct, effect_pct=effect_pct,
                                                                     order=order, n=n or default_runs(policy)),
                                                            nulls, reals, fdr),
                                   campaigns=draws, seed=seed, thresholds=thresholds,
                                   max_threshold_pct=max_threshold_pct)
                for policy in policies or (DEFAULT_POLICY,)]

    results = _call(work)
    if as_json:
        click.echo(json.dumps({"campaign_simulations": [r.to_dict() for r in results]}, indent=2, allow_nan=False))
    else:
        _echo(campaign_table(results), lines=True)
    _stderr(f"{len(results)} simulation(s) of {draws} campaigns in {time.monotonic() - began:.1f} s; "
            "± is one Monte-Carlo standard error")


@main.command("simulate-bisect")
@click.option("--commits", type=click.IntRange(2, 100_000), default=128, show_default=True,
              help="Commits from GOOD (excluded) to BAD.")
@click.option("--effect", "effect_pct", type=float, required=True,
              help="The step in % at the culprit, a commit drawn at random for each bisect (not 0).")
@click.option("--cv", "cv_pct", type=float, default=0.5, show_default=True,
              help="Coefficient of variation of the run times, in %.")
@click.option("--max-parallel", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Probes at once (one wall round).")
@click.option("--confidence", type=click.FloatRange(0.5, 0.9999), default=0.95, show_default=True,
              help="The posterior a commit must hold to be named the culprit.")
@click.option("--budget", type=click.IntRange(8), default=400, show_default=True,
              help="Runs at most, endpoints and references included.")
@click.option("--pairs-per-probe", type=click.IntRange(1, 100),
              help="Pairs (a run of the probed commit beside one of GOOD) per probe, as gate bisect's option "
                   "[default: gate bisect's, 1].")
@click.option("--n", "endpoint_pairs", type=click.IntRange(1), default=3, show_default=True,
              help="Pairs of GOOD and BAD compared first, as the gate's n.")
@click.option("--draws", type=click.IntRange(1), default=1000, show_default=True,
              help="Simulated bisects per method.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the simulation.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
def simulate_bisect_cmd(commits: int, effect_pct: float, cv_pct: float, max_parallel: int, confidence: float,
                        budget: int, pairs_per_probe: int | None, endpoint_pairs: int, draws: int, seed: int,
                        as_json: bool) -> None:
    """Monte-Carlo of `gate bisect` beside a Pinpoint-style baseline: how often each names the right culprit,
    its runs and rounds (docs/bisect.md). Run times are lognormal with the given CV; a step of --effect at a
    random commit. Example: gate simulate-bisect --commits 128 --effect 2 --cv 0.5
    """
    from gatekit.bisect.search import PROBE_PAIRS
    from gatekit.bisect.simulation import BisectScenario, simulate_bisect, table as bisect_table

    began = time.monotonic()

    def work() -> Any:
        if effect_pct == 0:
            raise ConfigError("--effect: must not be 0 (there is no culprit to find)")
        scenario = BisectScenario(commits=commits, effect_pct=effect_pct, cv_pct=cv_pct, max_parallel=max_parallel,
                                  confidence=confidence, budget=budget, endpoint_pairs=endpoint_pairs,
                                  pairs_per_probe=pairs_per_probe or PROBE_PAIRS)
        return simulate_bisect(scenario, draws=draws, seed=seed)

    result = _call(work)
    if as_json:
        click.echo(json.dumps({"bisect_simulation": result.to_dict()}, indent=2, allow_nan=False))
    else:
        _echo(bisect_table([result]), lines=True)
    _stderr(f"{draws} simulated bisects per method in {time.monotonic() - began:.1f} s; "
            "± is one Monte-Carlo standard error")


@main.command("plan")
@click.option("--cv", "cv_pct", type=float, required=True, help="Coefficient of variation of the run times, in %.")
@click.option("--effect", "effect_pct", type=float, required=True,
              help="The true change to find, in % (negative: on is faster, e.g. -2).")
@click.option("--policy", type=LiveChoice(gate_policies), default=DEFAULT_POLICY, show_default=True,
              help="Decision policy.")
@click.option("--floor-pct", type=float, default=1.0, show_default=True, help="Threshold floor / sequential floor, %.")
@click.option("--sigma-k", type=float, default=2.0, show_default=True, help="Classic threshold's σ multiple.")
@click.option("--max-threshold-pct", type=float, default=DEFAULT_MAX_THRESHOLD_PCT, show_default=True,
              help="Classic: a threshold above this makes the gate inconclusive, not rejected, as "
                   "rules.max_threshold_pct (0: no limit).")
@click.option("--power", type=float, default=0.8, show_default=True, help="Target power (a fraction).")
@click.option("--draws", type=int, default=20_000, show_default=True, help="Simulated gates per candidate n.")
@click.option("--seed", type=int, default=20261130, show_default=True, help="Seed of the simulation.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON on stdout.")
def plan_cmd(cv_pct: float, effect_pct: float, policy: str, floor_pct: float, sigma_k: float,
             max_threshold_pct: float, power: float, draws: int, seed: int, as_json: bool) -> None:
    """Runs per arm for a target power at a true effect under the policy, by simulating that policy.

    The floor and threshold count, so the answer agrees with `gate simulate`. Example:
    gate plan --cv 2 --effect -5 --policy classic
    """
    from gatekit.calibrate import plan_runs

    def work() -> Any:
        if draws < 100:
            raise ConfigError(f"--draws: must be at least 100, got {draws}")
        return plan_runs(policy, cv_pct, effect_pct, thresholds=ThresholdSpec(sigma_k=sigma_k, floor_pct=floor_pct),
                         power=power, draws=draws, seed=seed, max_threshold_pct=max_threshold_pct)

    plan = _call(work)
    if as_json:
        click.echo(json.dumps(plan.to_dict(), indent=2, allow_nan=False))
    else:
        _echo(plan.describe(), lines=True)


@main.command()
@click.option("--json", "as_json", is_flag=True,
              help="Print the plugins as JSON on stdout ({drivers: [{name, target}], backends: [{name, target, "
                   "status, detail}]}).")
def drivers(as_json: bool) -> None:
    """List the installed driver plugins (gatekit.drivers) and backend plugins (gatekit.backends).

    Each backend line says whether it can watch this machine; `[backend] name = "auto"` picks the first
    usable one of cuda, metal, cpu.
    """
    from gatekit.driver import BACKEND_GROUP, DRIVER_GROUP, installed_backends, installed_drivers, load_backend

    def work() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        plugins = [{"name": name, "target": target} for name, target in sorted(installed_drivers().items())]
        backends = []
        for name, target in sorted(installed_backends().items()):
            try:
                found = load_backend(name, source=Path("gate drivers")).detect()
            except DriverError as exc:  # a broken plugin is listed as such, the others still are
                backends.append({"name": name, "target": target, "status": "broken", "detail": str(exc)})
                continue
            backends.append({"name": name, "target": target, "status": "available" if found.ok else "not available",
                             "detail": found.detail.removeprefix("not available: ")})
        return plugins, backends

    plugins, backends = _call(work)
    if as_json:
        click.echo(json.dumps({"drivers": plugins, "backends": backends}, indent=2))
        return
    _echo(f"# drivers ({DRIVER_GROUP})")
    for plugin in plugins:
        _echo(f"{plugin['name']}\t{plugin['target']}")
    _echo(f"# backends ({BACKEND_GROUP})")
    for backend in backends:
        _echo(f"{backend['name']}\t{backend['target']}\t{backend['status']}: {backend['detail']}")


# -- reports, the findings site, history and imports ----------------------------------------------------
# The report modules (scipy for the page's statistics, matplotlib for history plots) are imported where used,
# so `gate run` starts fast.

runs_root_option = click.option(
    "--runs-root", "runs_roots", type=click.Path(path_type=Path, file_okay=False), multiple=True,
    help="Folder the findings' run paths (meta.related_runs) are relative to (repeatable); default: the "
         "current folder, then the folders above each finding.")


def _prepare(paths: list[Path], runs_roots: tuple[Path, ...]) -> tuple[list[LoadedFinding], list[Prepared]]:
    from gatekit.findingset import load_many
    from gatekit.report.rundata import load_run_files
    from gatekit.report.site import prepare

    loaded = load_many(paths)
    items = [(f.finding, load_run_files(f.finding, f.path, runs_roots, Path.cwd()), f.path.name if f.path else "")
             for f in loaded]
    return loaded, prepare(items)


@main.command("report")
@click.argument("findings", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--html", "html_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write one page per finding: DIR/<finding-id>/index.html with its figures beside it.")
@click.option("--md", "md_file", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the findings as one Markdown FILE, figures in <FILE stem>-figures/ beside it.")
@runs_root_option
@ci_output_options
def report_cmd(findings: tuple[Path, ...], html_dir: Path | None, md_file: Path | None, runs_roots: tuple[Path, ...],
               ci: CiOutputs) -> None:
    """Render finding files (.json or .toml) as HTML pages and/or Markdown, and CI outputs. A bisect folder (or
    its bisect-finding.json/.toml) is rendered as its own page, DIR/<bisect folder>/index.html (--html only)."""
    from gatekit.bisect.finding import bisect_folder_of

    if not (html_dir or md_file or ci.requested):
        raise click.UsageError("say what to write: --html DIR, --md FILE, --summary-md, --junit or --export")
    bisects = [(path, folder) for path in findings if (folder := bisect_folder_of(path)) is not None]
    for path in findings:
        if path.is_dir() and bisect_folder_of(path) is None:  # what click's dir_okay=False said before bisects
            raise click.BadParameter(f"File '{path}' is a directory.", param_hint="'FINDINGS...'")
    if bisects:
        if len(bisects) != len(findings) or md_file is not None or ci.requested or html_dir is None:
            raise click.UsageError("a bisect finding is rendered alone, as an HTML page: gate report BISECT_DIR "
                                   "--html DIR (no gate findings, --md or CI outputs beside it)")
        for path in _call(lambda: _bisect_reports(bisects, html_dir)):
            _echo(f"report: {path}")
        return

    def work() -> list[Path]:
        from gatekit.report.site import markdown_files, report_files, write_files

        loaded, prepared = _prepare(list(findings), runs_roots)
        written: list[Path] = []
        if html_dir is not None:
            files = report_files(prepared)
            written += [p for p in write_files(html_dir, files) if p.name == "index.html"]
        if md_file is not None:
            files = markdown_files(prepared, md_file.name)
            written += [p for p in write_files(md_file.parent, files) if p.suffix == ".md"]
        for item in prepared:
            for note in item.run_files.notes:
                _stderr(f"{item.finding.id}: {note}")
        ci.write([f.finding for f in loaded], full_report=str(md_file or html_dir or ""), note=_stderr)
        return written

    for path in _call(work):
        _echo(f"report: {path}")


def _bisect_reports(bisects: list[tuple[Path, Path]], html_dir: Path) -> list[Path]:
    from gatekit.bisect.finding import finding_paths, load_bisect_finding
    from gatekit.bisect.report import bisect_report_files
    from gatekit.report.common import safe_name
    from gatekit.report.site import GENERATOR, write_files

    written: list[Path] = []
    for path, folder in bisects:
        finding = load_bisect_finding(path)
        source = (finding_paths(folder)[1] if path.is_dir() else path).name
        files = bisect_report_files(finding, source=source, generator=GENERATOR)
        name = safe_name(folder.resolve().name)
        written += [p for p in write_files(html_dir, {f"{name}/{k}": v for k, v in files.items()})
                    if p.name == "index.html"]
    return written


@main.command("site")
@click.argument("findings_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option("-o", "--out", "site_dir", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="The site folder: index.html and one folder per finding.")
@runs_root_option
@click.option("--jobs", type=click.IntRange(min=1), help="Processes drawing pages at once (default: the CPUs "
              "this process may use, at most 8).")
def site_cmd(findings_dir: Path, site_dir: Path, runs_roots: tuple[Path, ...], jobs: int | None) -> None:
    """Render every finding of FINDINGS_DIR and its subfolders, and an index (date, title, verdict, Δ, guard
    Δ, tags). Only pages whose finding, run files or links changed since the last build are drawn again."""
    def work() -> Path:
        from gatekit.findingset import finding_files, sort_files
        from gatekit.report.site import build_site, default_jobs

        sorted_files = sort_files(finding_files(findings_dir, nested=True))
        left_out = sorted_files.note()
        if left_out is not None:
            _stderr(left_out)
        files = sorted_files.findings
        if not files:
            raise GatekitError(f"{findings_dir}: no findings here or in its subfolders (*.json or *.toml)")
        build = build_site(files, site_dir, runs_roots, cwd=Path.cwd(), jobs=jobs or default_jobs())
        for note in build.notes:
            _stderr(f"note: {note}")
        return build.index

    _echo(f"site: {_call(work)}")


@main.command("campaign")
@click.argument("campaign_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--engine", type=LiveChoice(_engines), default="local", show_default=True,
              help=f"local: gates as processes on this host; ray: each gate a Ray task ({install_hint('ray')}).")
@ray_address_option
@click.option("--max-parallel", type=click.IntRange(min=1),
              help="Local engine: gates at once, each on its own GPU(s) and an equal share of the CPU cores "
                   "[default: 1].")
@click.option("--resume", type=click.Path(path_type=Path, file_okay=False),
              help="Continue the campaign folder DIR: finished gates are skipped, interrupted ones resumed.")
@click.option("--fail-on", type=click.Choice(sorted(FAIL_ON)),
              help="Exit 1 when any gate has this outcome: regression, unproven or not-adopted (as gate run).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the campaign as JSON on stdout ({campaign, site, fdr, gates: [{key, outcome, "
                   "campaign_decision}]}).")
@ci_output_options
def campaign_cmd(campaign_file: Path, engine: str, address: str | None, max_parallel: int | None,
                 resume: Path | None, fail_on: str | None, as_json: bool, ci: CiOutputs) -> None:
    """Run every gate of a campaign file; write each finding, one summary of all gates and the findings site.

    Exit 3 if any gate is invalid (or could not run), else 4 if a file could not be written (a full or
    read-only disk), else 130 if any is interrupted (resume either with --resume DIR), else 1 if a --fail-on
    condition is met by any gate, else 0.
    """
    def work() -> Any:
        from gatekit.campaign import CampaignOptions, load_campaign, run_campaign

        campaign = load_campaign(campaign_file)
        for gate in campaign.gates:  # an export that cannot hold a gate is refused before anything runs
            ci.check(gate.primary, str(gate.gate_path))
        options = CampaignOptions(engine=engine, address=address, max_parallel=max_parallel, resume=resume)
        return run_campaign(campaign, options, report=_progress)

    from gatekit.campaign import as_document, describe, resume_hint

    result = _call(work)
    if as_json:
        click.echo(json.dumps(as_document(result), indent=2, allow_nan=False))
    for line in describe(result) if not as_json else ():
        _echo(line)
    findings = [f.finding for f in result.findings]
    if findings:
        _write_ci_outputs(ci, findings, finding_paths=tuple(str(f.path) for f in result.findings),
                          full_report=str(result.site_index or ""), exits_invalid=True)
    if resume_hint(result):
        _stderr(resume_hint(result))
    raise SystemExit(result.exit_code(FAIL_ON[fail_on] if fail_on else ()))


@main.command("bisect")
@click.argument("good", required=False)
@click.argument("bad", required=False)
@gate_option
@click.option("--arm", help="The arm to bisect [default: the gate file's first arm].")
@click.option("--build", "build_command",
              help="Run in each probed commit's worktree before its runs (split into words, no shell: "
                   "sh -c '...' for shell syntax); exit 125 skips the commit, another failure skips it and says so.")
@click.option("--build-timeout", "build_timeout_s", type=click.FloatRange(min=0, min_open=True, max=1e9),
              default=BUILD_TIMEOUT_S, show_default=True,
              help="Seconds a build may take; one still running then is stopped with everything it started, and "
                   "its commit skipped as a failed build.")
@click.option("--engine", type=LiveChoice(_engines), default="local", show_default=True,
              help=f"local: probes as gate processes on this host; ray: each probe a Ray task ({install_hint('ray')}).")
@ray_address_option
@click.option("--max-parallel", type=click.IntRange(min=1),
              help="Probes per round; local engine: at once, each on its own GPU(s) and an equal share of the CPU "
                   "cores [default: 1].")
@click.option("--gpus", type=click.IntRange(min=0),
              help="GPUs per probe [default: 1 where this host has GPUs, else 0].")
@click.option("--budget", type=click.IntRange(min=1), default=400, show_default=True,
              help="Trainer runs at most, endpoints and references included.")
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="Stop when one commit holds this share of the posterior.")
@click.option("--pairs-per-probe", type=click.IntRange(min=1),
              help="Pairs per probe (a run of the commit beside one of GOOD), preregistered; the posterior reads "
                   "them with every other pair [default: 1; --resume: the plan's].")
@click.option("--resume", type=click.Path(path_type=Path, file_okay=False),
              help="Continue the bisect folder DIR: finished probes are kept, unfinished ones run again.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False),
              help="The bisect folder, new or empty [default: bisect-ID-TIME in the gate file's runs folder].")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--fail-on", type=click.Choice(["culprit"]),
              help="Exit 1 when a culprit is named or more than one step is found (CI).")
def bisect_cmd(good: str | None, bad: str | None, gate_path: Path | None, arm: str | None, build_command: str | None,
               build_timeout_s: float, engine: str, address: str | None, max_parallel: int | None, gpus: int | None,
               budget: int, confidence: float, pairs_per_probe: int | None, resume: Path | None, out: Path | None,
               as_json: bool, fail_on: str | None) -> None:
    """Find the commit between GOOD and BAD that changed the gate's primary metric (docs/bisect.md).

    Run in the repository. Each probed commit gets its own worktree and runs the arm interleaved with GOOD;
    the endpoints are compared first. Exit 0 for a culprit, multiple steps, a credible set, no change or
    inconclusive (endpoints too noisy to say no change); 1 with --fail-on culprit when a culprit is named or
    more than one step is found; 3 invalid; 130 interrupted (resume with --resume DIR); 4 a write failure.
    """
    def work() -> Any:
        from gatekit.bisect.run import BisectOptions, run_bisect

        if resume is not None and (good or bad):
            raise ConfigError("--resume DIR continues a bisect; drop GOOD and BAD")
        gate_file = _gate_file(gate_path) if resume is None else gate_path or Path("gate.toml")  # resume: its own
        options = BisectOptions(gate_path=gate_file, arm=arm, build=build_command, engine=engine, address=address,
                                max_parallel=max_parallel, budget=budget, confidence=confidence, resume=resume,
                                out=out, gpus=gpus, pairs_per_probe=pairs_per_probe, build_timeout_s=build_timeout_s)
        return run_bisect(good, bad, options, report=_progress)

    result = _call(work)
    if as_json and result.finding_json is not None:  # the bisect finding, as `gate run --json` prints its own
        click.echo(result.finding_json.read_text(encoding="utf-8"), nl=False)
    else:
        for line in result.describe():
            _echo(line)
    raise SystemExit(result.exit_code(("culprit",) if fail_on else ()))


@main.command("compare")
@click.argument("base", required=False)
@click.argument("head", required=False)
@click.option("--gate", "gate_path", type=click.Path(path_type=Path),
              help="The gate file [default: gate.toml of HEAD's tree, at the working directory's place in it].")
@click.option("--arm", help="The arm to run at both commits [default: the gate file's first arm].")
@click.option("--build", "build_command",
              help="Run in each side's worktree before its runs (split into words, no shell: sh -c '...' for shell "
                   "syntax); exit 125 or a failure: nothing to compare (exit 3).")
@click.option("--no-merge-base", "no_merge_base", is_flag=True,
              help="Compare BASE itself, not git merge-base BASE HEAD.")
@click.option("--n", type=int, help="Runs per side (overrides gate.n).")
@click.option("--policy", type=LiveChoice(gate_policies),
              cls=LiveHelpOption, live_help=lambda: f"Decision policy (overrides gate.policy): {run_policy_words()}.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False),
              help="The compare folder [default: compare-ID-TIME in the gate file's runs folder].")
@click.option("--resume", type=click.Path(path_type=Path, file_okay=False),
              help="Continue the interrupted compare folder DIR.")
@click.option("--json", "as_json", is_flag=True, help="Print the finding as JSON on stdout.")
@fail_on_option
@sign_key_option
@ci_output_options
def compare_cmd(base: str | None, head: str | None, gate_path: Path | None, arm: str | None,
                build_command: str | None, no_merge_base: bool, n: int | None, policy: str | None, out: Path | None,
                resume: Path | None, as_json: bool, fail_on: str | None, sign_key: Path | None,
                ci: CiOutputs) -> None:
    """Compare the gate's arm at BASE against HEAD (default: HEAD), interleaved: the pull-request gate.

    Run in the repository. BASE is replaced by `git merge-base BASE HEAD` (--no-merge-base: BASE itself); each
    side runs in its own worktree after its --build, under the gate's rules and policy. The finding is a gate
    finding (off: base, on: head) that names both commits and the effective-config keys that differ between
    them (docs/compare.md). Exit codes as gate run.
    """
    key = _signing_key(sign_key)

    def work() -> Any:
        from gatekit import api

        return api.compare(base, head, gate_path, arm=arm, build=build_command, merge_base=not no_merge_base, n=n,
                           policy=policy, out=out, resume=resume, progress=_progress)

    _series_done(_call(work), key, sign_key, as_json, ci, fail_on)


@main.command("history")
@click.argument("findings_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option("--metric", required=True,
              help="A stats key (delta_pct, mean_on, ...), a run metric (train_elapsed_s: the mean of the used "
                   "runs of --arm) or a dotted path into the finding (guards.psnr_db.delta).")
@click.option("--arm", "arm_key", type=click.Choice(["on", "off"]), default="on", show_default=True,
              help="Whose runs a run metric is averaged over.")
@click.option("--gate-id", help="Only findings of this gate (gate.id).")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the plot (PNG) with the change points marked.")
@click.option("--json", "as_json", is_flag=True, help="Print the history as JSON on stdout.")
@click.option("--fail-on", "fail_on", type=click.Choice(["change", "trend"]), multiple=True,
              help="Exit 1 when a change point (change) or a trend (trend) is found, or when there are too few "
                   "findings to test (fewer than 8 without outliers), for CI; may be given twice.")
@click.option("--recent", type=click.IntRange(min=1),
              help="With --fail-on change: only change points among the last N findings count.")
@click.option("--alpha", type=float, default=0.05, show_default=True,
              help="Level of the shift test and of each change point's permutation test.")
def history_cmd(findings_dir: Path, metric: str, arm_key: str, gate_id: str | None, plot_path: Path | None,
                as_json: bool, fail_on: tuple[str, ...], recent: int | None, alpha: float) -> None:
    """A metric across findings over time, with change points: a shift test that autocorrelated noise
    (AR(1) ρ up to 0.6) does not fool, then ruptures PELT candidates, each kept by a permutation test at
    --alpha (see docs/history.md)."""
    def work() -> Any:
        from gatekit.findingset import load_folder
        from gatekit.history import build_history, history_json, history_plot, history_table, recent_changes

        history = build_history(load_folder(findings_dir, _stderr), metric, arm_key=arm_key, gate_id=gate_id, alpha=alpha)
        if plot_path is not None:
            from gatekit.storage import atomic_write_bytes
            try:
                atomic_write_bytes(plot_path, history_plot(history))
            except OSError as exc:
                raise GatekitError(f"{plot_path}: cannot write the plot: {exc.strerror or exc}") from None
        text = history_json(history) if as_json else history_table(history) + "\n"
        return text, recent_changes(history, recent), history

    text, changes, history = _call(work)
    if as_json:
        click.echo(text, nl=False)  # history_json: a document for programs, printed as is
    else:
        _echo(text, nl=False, lines=True)
    if fail_on and not history.tested:
        from gatekit.history import CHANGE_MIN_SEGMENT

        tested = len(history.points) - len(history.outliers)
        _stderr(f"gate history: {tested} finding(s) of {metric} to test, fewer than the {2 * CHANGE_MIN_SEGMENT} "
                f"the tests need ({CHANGE_MIN_SEGMENT} on each side of a change): nothing is ruled out; failing "
                f"(--fail-on {' '.join(fail_on)})")
        raise SystemExit(EXIT_FAIL_ON)
    if "change" in fail_on and changes:
        _stderr(f"gate history: {len(changes)} change point(s) in {metric}; failing (--fail-on change)")
        raise SystemExit(EXIT_FAIL_ON)
    if "trend" in fail_on and history.trend is not None:
        _stderr(f"gate history: a trend in {metric} ({history.trend.slope_pct:+.3f} % per finding); failing "
                "(--fail-on trend)")
        raise SystemExit(EXIT_FAIL_ON)


@main.group("import")
def import_group() -> None:
    """Turn another tool's results into a finding (stats and verdict computed as for a gate)."""


def import_options(command: Callable) -> Callable:
    """The options every importer shares: the finding's identity, where it goes, and its CI outputs."""
    for option in reversed((
            click.option("--id", "gate_id", help="Gate id (default: from the file name); the finding id adds "
                                                 "the date."),
            click.option("--title", help="Finding title."),
            click.option("--date", help="Finding date, YYYY-MM-DD (default: today)."),
            click.option("--out", type=click.Path(path_type=Path, file_okay=False), default=Path("findings"),
                         show_default=True, help="Folder for the finding."),
            click.option("--json", "as_json", is_flag=True, help="Print the finding as JSON on stdout."),
            click.option("--fail-on", type=click.Choice(sorted(FAIL_ON)), help="Exit 1 on this outcome."),
            click.option("--policy", "import_policy", metavar="NAME",
                         help=f"Decide by this policy: {IMPORT_POLICY} (default: ranks, fit for thousands of "
                              "heavy-tailed runs) or classic (the gate's rule)."),
            click.option("--floor-pct", type=float, metavar="PCT",
                         help="The smallest change that counts, in percent (default 1)."),
            ci_output_options)):
        command = option(command)
    return command


def _import(evidence: Callable[[], SeriesEvidence], *, out: Path, as_json: bool, fail_on: str | None,
            import_policy: str | None, floor_pct: float | None, ci: CiOutputs) -> None:
    """Analyze imported evidence like a gate's own, under the policy and floor asked for, write the finding and
    its CI outputs, exit by outcome."""
    def work() -> Any:
        from gatekit.analysis import analyze
        from gatekit.finding import write_finding
        from gatekit.importers.common import decided_by, refuse_to_replace

        finding = analyze(decided_by(evidence(), policy=import_policy, floor_pct=floor_pct))
        refuse_to_replace(finding, out)
        return finding, write_finding(finding, out)

    finding, paths = _call(work)
    _emit(finding, as_json, tuple(str(p) for p in paths))
    _write_ci_outputs(ci, [finding], full_report=str(paths[-1]), exits_invalid=True)
    _exit_for(finding, fail_on)


@import_group.command("hyperfine")
@click.argument("results", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--off", "off_command", help="The off command: its name or 1-based position (default: the first); "
                                            "with --param, the off value.")
@click.option("--on", "on_command", help="The on command: its name or 1-based position (default: the second); "
                                          "with --param, the on value.")
@click.option("--param", metavar="NAME", help="Choose the arms by this parameter's value (hyperfine -P/-L).")
@click.option("--guard", "guards", multiple=True, metavar="METRIC:MAX_DROP",
              help="On may exceed off by at most MAX_DROP in METRIC: memory_usage_byte (bytes), user or system "
                   "(seconds), where the file has them per run. Repeatable.")
@import_options
def import_hyperfine(results: Path, off_command: str | None, on_command: str | None, param: str | None,
                     guards: tuple[str, ...], gate_id: str | None, title: str | None, date: str | None,
                     **outputs: Any) -> None:
    """Turn a hyperfine --export-json file (1.x or 2.x) into a finding: arms = two commands, runs = their
    times, per-run memory and CPU times usable as guards."""
    from gatekit.importers.hyperfine import evidence_from_hyperfine

    _import(lambda: evidence_from_hyperfine(results, off=off_command, on=on_command, param=param, guards=guards,
                                            gate_id=gate_id, title=title, date=date), **outputs)


@import_group.command("pyperf")
@click.argument("off_file", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("on_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--benchmark", help="The benchmark to compare, by name (needed when a file holds several).")
@import_options
def import_pyperf(off_file: Path, on_file: Path, benchmark: str | None, gate_id: str | None, title: str | None,
                  date: str | None, **outputs: Any) -> None:
    """Turn two pyperf JSON files (off, on) into a finding: runs = each pyperf run's mean value."""
    from gatekit.importers.pyperf import evidence_from_pyperf

    _import(lambda: evidence_from_pyperf(off_file, on_file, benchmark=benchmark, gate_id=gate_id, title=title,
                                         date=date), **outputs)


@import_group.command("pytest-benchmark")
@click.argument("results")
@click.argument("on_results", required=False)
@click.option("--off", "off_name", help="One file: the off benchmark, by name or fullname.")
@click.option("--on", "on_name", help="One file: the on benchmark, by name or fullname.")
@click.option("--benchmark", help="Two runs: the benchmark to compare (needed when they share several).")
@click.option("--storage", type=click.Path(path_type=Path, file_okay=False), default=Path(".benchmarks"),
              show_default=True, help="Where saved runs named by id (0001) are found, as --benchmark-storage.")
@import_options
def import_pytest_benchmark(results: str, on_results: str | None, off_name: str | None, on_name: str | None,
                            benchmark: str | None, storage: Path, gate_id: str | None, title: str | None,
                            date: str | None, **outputs: Any) -> None:
    """Turn pytest-benchmark JSON into a finding: two benchmarks of one file, or one of two saved runs.

    One file: --off and --on name two of its benchmarks. Two saved runs (RESULTS ON_RESULTS, files or run ids
    as `pytest-benchmark compare 0001 0002`): one benchmark, the runs as arms. Runs = the rounds (stats.data)."""
    from gatekit.importers.pytest_benchmark import (evidence_from_pytest_benchmark, evidence_from_saved_runs,
                                                    saved_run)

    def evidence() -> SeriesEvidence:
        if on_results is None:
            if off_name is None or on_name is None:
                raise ConfigError("one file compares two of its benchmarks: give --off NAME and --on NAME (or "
                                  "two saved runs: RESULTS ON_RESULTS)")
            return evidence_from_pytest_benchmark(saved_run(results, storage), off=off_name, on=on_name,
                                                  gate_id=gate_id, title=title, date=date)
        if off_name is not None or on_name is not None:
            raise ConfigError("two saved runs are the arms: choose the benchmark with --benchmark NAME, not "
                              "--off/--on")
        return evidence_from_saved_runs(saved_run(results, storage), saved_run(on_results, storage),
                                        benchmark=benchmark, gate_id=gate_id, title=title, date=date)

    _import(evidence, **outputs)


@import_group.command("criterion")
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--off", "off_id", required=True,
              help="The off benchmark: its id as Criterion prints it (fib/20), optionally @BASELINE (default @new).")
@click.option("--on", "on_id", required=True,
              help="The on benchmark: its id, optionally @BASELINE; with one benchmark in FOLDER, @BASELINE alone.")
@import_options
def import_criterion(folder: Path, off_id: str, on_id: str, gate_id: str | None, title: str | None,
                     date: str | None, **outputs: Any) -> None:
    """Turn Criterion.rs output (target/criterion, or one benchmark's folder) into a finding: arms = two
    benchmarks or baselines, runs = their samples (time per iteration)."""
    from gatekit.importers.criterion import evidence_from_criterion

    _import(lambda: evidence_from_criterion(folder, off=off_id, on=on_id, gate_id=gate_id, title=title,
                                            date=date), **outputs)


@import_group.command("gobench")
@click.argument("old_file", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("new_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--bench", help="The benchmark to compare, e.g. Join (needed when the files hold several).")
@click.option("--pkg", help="Its package (a `pkg:` line, e.g. example.com/m/strjoin or strjoin), where the files "
                            "hold a benchmark of that name in several packages.")
@click.option("--guard", "guards", multiple=True, metavar="UNIT[:MAX_WORSE]",
              help="Guard a unit of the benchmark, e.g. B/op:0 or allocs/op:1 (repeatable; MB/s and other "
                   "rates are higher-is-better, the rest lower).")
@import_options
def import_gobench(old_file: Path, new_file: Path, bench: str | None, pkg: str | None, guards: tuple[str, ...],
                   gate_id: str | None, title: str | None, date: str | None,
                   **outputs: Any) -> None:
    """Turn two `go test -bench` outputs (OLD = off, NEW = on, as benchstat) into a finding: runs = the
    benchmark's result lines (-count N), ns/op as time_s."""
    from gatekit.importers.gobench import evidence_from_gobench

    _import(lambda: evidence_from_gobench(old_file, new_file, bench=bench, pkg=pkg, guards=guards, gate_id=gate_id,
                                          title=title, date=date), **outputs)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

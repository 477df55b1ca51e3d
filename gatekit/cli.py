"""`gate`: the command line. Parses, calls the library, prints, sets the exit code. Nothing else."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable, TypeVar

import click

from gatekit import __version__
from gatekit.calibrate import run_calibration, summary as calibration_summary
from gatekit.config import ORDERS, POLICIES, GateConfig, load_gate
from gatekit.csvinput import evidence_from_csv
from gatekit.driver import installed_drivers, make_driver
from gatekit.errors import ConfigError, GatekitError
from gatekit.finding import Finding, analyze
from gatekit.preflight import run_checks
from gatekit.report.terminal import summary
from gatekit.series import SeriesRunner, analyze_series, arms_of_series, load_series_gate, verify_unchanged, read_state
from gatekit.simulate import SIM_POLICIES, Scenario, Thresholds, run_suite, simulate, table

EXIT_FAIL_ON = 1
EXIT_INVALID = 3
FAIL_ON = {"regression": ("regression", "guard_failed"),
           "not-adopted": ("rejected", "regression", "guard_failed", "equivalent", "inconclusive")}

T = TypeVar("T")


class GateError(click.ClickException):
    """A GatekitError at the edge: one line on stderr and the error's own exit code."""

    def __init__(self, error: GatekitError) -> None:
        super().__init__(str(error))
        self.exit_code = error.exit_code

    def show(self, file: object = None) -> None:
        click.echo(f"gate: error: {self.format_message()}", err=True)


def _call(work: Callable[[], T]) -> T:
    try:
        return work()
    except GatekitError as error:
        raise GateError(error) from None


def _stderr(text: str) -> None:
    click.echo(text, err=True)


gate_option = click.option("--gate", "gate_path", type=click.Path(path_type=Path), default=Path("gate.toml"),
                           show_default=True, help="The gate file.")


def _two_arms(config: GateConfig, off: str | None, on: str | None) -> tuple:
    names = list(config.arms)
    return config.arm(off or names[0]), config.arm(on or names[1])


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="gate")
def main() -> None:
    """gatekit: a preregistered, interleaved A/B gate for ML training code.

    \b
    Typical use:
      gate check off on            validate the gate file, arms and machine; nothing runs
      gate run off on --n 3        run the interleaved series and decide
      gate analyze runs/<series>   recompute a finding offline
    Exit codes: 0 decided, 1 a --fail-on condition met, 2 usage or config error (nothing ran),
    3 series invalid, 130 interrupted (resume with --resume DIR).
    """


@main.command()
@click.argument("off", required=False)
@click.argument("on", required=False)
@gate_option
def check(off: str | None, on: str | None, gate_path: Path) -> None:
    """Validate the gate file and both arms and run preflight, without starting the trainer.

    OFF and ON are arm names of the gate file (default: its first two arms) or paths to arm .toml files.
    """
    def work() -> bool:
        config = load_gate(gate_path)
        arms = _two_arms(config, off, on)
        driver = make_driver(config.driver.name, config.driver.options, source=config.path,
                             base_dir=config.base_dir)
        checks = run_checks(config, arms, driver)
        for item in checks:
            click.echo(f"{'ok  ' if item.ok else 'FAIL'}  {item.name}: {item.detail}")
        return all(item.ok for item in checks)

    if not _call(work):
        raise SystemExit(2)


@main.command()
@click.argument("off", required=False)
@click.argument("on", required=False)
@gate_option
@click.option("--n", type=int, help="Runs per arm (overrides gate.n).")
@click.option("--order", type=click.Choice(ORDERS), help="Run order (overrides gate.order).")
@click.option("--seed", type=int, help="Seed of a random or thue-morse order (overrides gate.seed; default: "
              "derived from the predecision's sha256).")
@click.option("--policy", type=click.Choice(POLICIES),
              help="Decision policy (overrides gate.policy): classic, or sequential (4 then 8 runs per arm).")
@click.option("--warmup", type=click.IntRange(0, 2),
              help="Discarded warm-up runs before round 1: 1 the first arm, 2 both (overrides gate.warmup).")
@click.option("--out", type=click.Path(path_type=Path), help="Folder for the finding (overrides gate.out).")
@click.option("--runs", "runs_dir", type=click.Path(path_type=Path),
              help="Folder for series directories (overrides gate.runs).")
@click.option("--json", "as_json", is_flag=True, help="Print the finding as JSON on stdout.")
@click.option("--fail-on", type=click.Choice(sorted(FAIL_ON)),
              help="Exit 1 on this outcome: regression (regression or guard_failed) or not-adopted.")
@click.option("--resume", type=click.Path(path_type=Path, file_okay=False),
              help="Continue an interrupted series directory.")
def run(off: str | None, on: str | None, gate_path: Path, n: int | None, order: str | None, seed: int | None,
        policy: str | None, warmup: int | None, out: Path | None, runs_dir: Path | None, as_json: bool,
        fail_on: str | None, resume: Path | None) -> None:
    """Run the interleaved OFF/ON series, apply the preregistered rules and write the finding."""
    def work():  # type: ignore[no-untyped-def]
        if resume is not None:
            if off or on or n or order or seed is not None or out or runs_dir or policy or warmup is not None:
                raise ConfigError("--resume continues a series exactly as registered; "
                                  "drop OFF/ON, --n, --order, --seed, --policy, --warmup, --out and --runs")
            config = load_series_gate(resume, gate_path if gate_path != Path("gate.toml") else None)
            off_arm, on_arm = arms_of_series(resume, config)
            return SeriesRunner(config, off_arm, on_arm, report=_stderr).resume(resume)
        if not off or not on:
            raise ConfigError("name both arms: gate run OFF ON (arm names of the gate file or arm .toml paths)")
        config = load_gate(gate_path).with_overrides(n=n, order=order, seed=seed, out=out, runs=runs_dir,
                                                     policy=policy, warmup=warmup)
        off_arm, on_arm = _two_arms(config, off, on)
        return SeriesRunner(config, off_arm, on_arm, report=_stderr).start()

    result = _call(work)
    _emit(result.finding, as_json, tuple(str(p) for p in result.finding_paths))
    _exit_for(result.finding, fail_on)


def _emit(finding: Finding, as_json: bool, paths: tuple[str, ...] = ()) -> None:
    if as_json:
        click.echo(finding.to_json(), nl=False)
        _stderr(summary(finding, paths))
    else:
        click.echo(summary(finding, paths))


def _exit_for(finding: Finding, fail_on: str | None) -> None:
    if finding.decision == "invalid":
        raise SystemExit(EXIT_INVALID)
    if fail_on and finding.decision in FAIL_ON[fail_on]:
        raise SystemExit(EXIT_FAIL_ON)


@main.command("analyze")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--gate", "gate_path", type=click.Path(path_type=Path),
              help="The gate file (a CSV needs one; default ./gate.toml; a series directory knows its own).")
@click.option("--off", "off_name", help="The off arm's name in a CSV (default: the gate file's first arm).")
@click.option("--on", "on_name", help="The on arm's name in a CSV (default: the gate file's second arm).")
@click.option("--json", "as_json", is_flag=True, help="Print the finding as JSON on stdout.")
@click.option("--fail-on", type=click.Choice(sorted(FAIL_ON)), help="Exit 1 on this outcome.")
def analyze_cmd(source: Path, gate_path: Path | None, off_name: str | None, on_name: str | None, as_json: bool,
                fail_on: str | None) -> None:
    """Recompute stats and verdict offline from a series directory or a CSV.

    A series directory is analysed with the rules of its predecision file, after verifying its sha256,
    and reproduces the finding the series wrote. A CSV has columns arm,label,<metrics>,load1_mean,load1_max
    in execution order and is analysed with the rules of --gate.
    """
    def work() -> Finding:
        if source.is_dir():
            if gate_path is not None:
                config = load_gate(gate_path)
                verify_unchanged(source, read_state(source).start, config)
            return analyze_series(source)
        config = load_gate(gate_path or Path("gate.toml"))
        off_arm, on_arm = _two_arms(config, off_name, on_name)
        return analyze(evidence_from_csv(source, config, off_arm.name, on_arm.name))

    finding = _call(work)
    _emit(finding, as_json)
    _exit_for(finding, fail_on)


@main.command()
@click.argument("arm", required=False)
@gate_option
@click.option("--n", type=int, default=10, show_default=True, help="A/A runs of the arm.")
@click.option("--min-effect", "min_effect_pct", type=float,
              help="The effect (in %) the gate must find; default: the gate's threshold.floor_pct.")
@click.option("--runs", "runs_dir", type=click.Path(path_type=Path),
              help="Folder for the calibration and its runs (overrides gate.runs).")
@click.option("--json", "as_json", is_flag=True, help="Print the calibration as JSON on stdout.")
def calibrate(arm: str | None, gate_path: Path, n: int, min_effect_pct: float | None, runs_dir: Path | None,
              as_json: bool) -> None:
    """A/A runs of one arm (default: the gate's first): CV, warm-up, drift, change point, runs needed.

    Stored as <runs>/calibration.toml, where sigma_ref = "history" finds it.
    """
    def work():  # type: ignore[no-untyped-def]
        config = load_gate(gate_path).with_overrides(runs=runs_dir)
        chosen = config.arm(arm) if arm else config.arm(next(iter(config.arms)))
        return run_calibration(config, chosen, n, min_effect_pct=min_effect_pct, report=_stderr)

    calibration = _call(work)
    if as_json:
        click.echo(json.dumps(calibration.document, indent=2, ensure_ascii=False, allow_nan=False))
        _stderr(calibration_summary(calibration))
    else:
        click.echo(calibration_summary(calibration))


@main.command("simulate")
@click.option("--policy", "policies", type=click.Choice(SIM_POLICIES), multiple=True,
              help="Policy to simulate; repeat for several (default: classic; with --suite classic and sequential).")
@click.option("--cv", "cv_pct", type=float, default=0.5, show_default=True,
              help="Coefficient of variation of the off arm's run times, in %.")
@click.option("--cv-on", "cv_on_pct", type=float, help="CV of the on arm in % (default: --cv).")
@click.option("--effect", "effect_pct", type=float, default=0.0, show_default=True,
              help="True change of on against off in % (negative: on is faster).")
@click.option("--drift", "drift_pct", type=float, default=0.0, show_default=True, help="Drift per run, in %.")
@click.option("--cold-first", "cold_pct", type=float, default=0.0, show_default=True,
              help="The series' first run is this much slower, in %.")
@click.option("--order", type=click.Choice(ORDERS), help="Run order (default: the policy's own).")
@click.option("--n", type=int, default=3, show_default=True, help="Runs per arm of fixed-n policies.")
@click.option("--warmup", type=click.IntRange(0, 2), default=0, show_default=True, help="Discarded warm-up runs.")
@click.option("--sigma-k", type=float, default=2.0, show_default=True, help="Classic threshold's σ multiple.")
@click.option("--floor-pct", type=float, default=1.0, show_default=True, help="Threshold floor / sequential floor, %.")
@click.option("--draws", type=int, default=100_000, show_default=True, help="Simulated gates per scenario and policy.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the simulation.")
@click.option("--suite", is_flag=True, help="Every scenario of docs/statistics.md instead of the one given.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON on stdout.")
def simulate_cmd(policies: tuple[str, ...], cv_pct: float, cv_on_pct: float | None, effect_pct: float,
                 drift_pct: float, cold_pct: float, order: str | None, n: int, warmup: int, sigma_k: float,
                 floor_pct: float, draws: int, seed: int, suite: bool, as_json: bool) -> None:
    """Monte-Carlo of a decision policy: false adoption, power and runs per arm, with their MC errors.

    Run times are lognormal with the given CVs; the true effect is on the median. Example:
    gate simulate --policy classic --policy sequential --cv 2 --cv-on 8
    """
    thresholds = Thresholds(sigma_k=sigma_k, floor_pct=floor_pct)
    began = time.monotonic()

    def work():  # type: ignore[no-untyped-def]
        if suite:
            return run_suite(policies or ("classic", "sequential"), draws=draws, seed=seed, order=order,
                             thresholds=thresholds)
        scenario = Scenario(cv_off_pct=cv_pct, cv_on_pct=cv_on_pct, effect_pct=effect_pct,
                            drift_pct_per_run=drift_pct, cold_first_pct=cold_pct, order=order, n=n, warmup=warmup)
        return [simulate(policy, scenario, draws=draws, seed=seed, thresholds=thresholds)
                for policy in policies or ("classic",)]

    results = _call(work)
    if as_json:
        click.echo(json.dumps({"simulations": [r.to_dict() for r in results]}, indent=2, allow_nan=False))
    else:
        click.echo(table(results))
    _stderr(f"{len(results)} simulation(s) of {draws} gates in {time.monotonic() - began:.1f} s; "
            "± is one Monte-Carlo standard error")


@main.command()
def drivers() -> None:
    """List the installed driver plugins (entry point group gatekit.drivers)."""
    for name, target in sorted(installed_drivers().items()):
        click.echo(f"{name}\t{target}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

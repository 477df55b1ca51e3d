"""`gate`: the command line. Parses, calls the library, prints, sets the exit code. Nothing else."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, TypeVar

import click

from gatekit import __version__
from gatekit.config import ORDERS, GateConfig, load_gate
from gatekit.csvinput import evidence_from_csv
from gatekit.driver import installed_drivers, make_driver
from gatekit.errors import ConfigError, GatekitError, SeriesInterrupted
from gatekit.finding import Finding, analyze
from gatekit.preflight import run_checks
from gatekit.report.terminal import clean_terminal_text, summary
from gatekit.series import SeriesRunner, analyze_series, arms_of_series, load_series_gate, verify_unchanged, read_state

EXIT_FAIL_ON = 1
EXIT_INVALID = 3
FAIL_ON = {"regression": ("regression", "guard_failed"), "not-adopted": ("rejected", "regression", "guard_failed")}

T = TypeVar("T")


class GateError(click.ClickException):
    """A GatekitError at the edge: one line on stderr and the error's own exit code."""

    def __init__(self, error: GatekitError) -> None:
        super().__init__(str(error))
        self.exit_code = error.exit_code

    def show(self, file: object = None) -> None:
        click.echo(f"gate: error: {clean_terminal_text(self.format_message())}", err=True)


def _call(work: Callable[[], T]) -> T:
    try:
        return work()
    except GatekitError as error:
        raise GateError(error) from None
    except KeyboardInterrupt:  # before a series exists (preflight, preregistration): nothing to resume
        raise GateError(SeriesInterrupted("interrupted before any run started; nothing to resume")) from None


def _stderr(text: str) -> None:
    click.echo(text, err=True)


def _progress(line: str) -> None:
    """One progress line of a series on stderr; trainer-supplied text in it cannot break the terminal."""
    click.echo(clean_terminal_text(line), err=True)


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
@click.option("--seed", type=int, help="Seed of the random order (overrides gate.seed).")
@click.option("--out", type=click.Path(path_type=Path), help="Folder for the finding (overrides gate.out).")
@click.option("--runs", "runs_dir", type=click.Path(path_type=Path),
              help="Folder for series directories (overrides gate.runs).")
@click.option("--json", "as_json", is_flag=True, help="Print the finding as JSON on stdout.")
@click.option("--fail-on", type=click.Choice(sorted(FAIL_ON)),
              help="Exit 1 on this outcome: regression (regression or guard_failed) or not-adopted.")
@click.option("--resume", type=click.Path(path_type=Path, file_okay=False),
              help="Continue an interrupted series directory.")
def run(off: str | None, on: str | None, gate_path: Path, n: int | None, order: str | None, seed: int | None,
        out: Path | None, runs_dir: Path | None, as_json: bool, fail_on: str | None,
        resume: Path | None) -> None:
    """Run the interleaved OFF/ON series, apply the preregistered rules and write the finding."""
    def work():  # type: ignore[no-untyped-def]
        if resume is not None:
            if off or on or n or order or seed is not None or out or runs_dir:
                raise ConfigError("--resume continues a series exactly as registered; "
                                  "drop OFF/ON, --n, --order, --seed, --out and --runs")
            config = load_series_gate(resume, gate_path if gate_path != Path("gate.toml") else None)
            off_arm, on_arm = arms_of_series(resume, config)
            return SeriesRunner(config, off_arm, on_arm, report=_progress).resume(resume)
        if not off or not on:
            raise ConfigError("name both arms: gate run OFF ON (arm names of the gate file or arm .toml paths)")
        config = load_gate(gate_path).with_overrides(n=n, order=order, seed=seed, out=out, runs=runs_dir)
        off_arm, on_arm = _two_arms(config, off, on)
        return SeriesRunner(config, off_arm, on_arm, report=_progress).start()

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
def drivers() -> None:
    """List the installed driver plugins (entry point group gatekit.drivers)."""
    for name, target in sorted(installed_drivers().items()):
        click.echo(f"{name}\t{target}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

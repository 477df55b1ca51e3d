"""`gate bisect GOOD BAD`: the bisect as it runs — worktrees, builds, probes as gate series on the engines, the
search loop, the journal, resume — over the statistics of `posterior` and the loop of `search`.

A probe is a gate series of its own: the gate file's arm at the probed commit (arm `probe`) interleaved with
the same arm at the reference commit (arm `reference`: GOOD, or the commit before a named culprit for the
step's own pairs of neighbour rule 2, gatekit.bisect.checks), the plan's pairs per probe (`--pairs-per-probe`,
default one), run by the gate's own rules (contamination, retries, guards, the per-run checks). Its gate file says
`bisect_probe = true`: one run per arm is allowed there, and such a probe's gate decides nothing (`inconclusive`,
reason `bisect_probe`): the bisect's posterior reads its pair with every other pair of the bisect. Each arm runs in its commit's worktree (`ArmCheckout`): the gate file's
relative paths resolve there. The probe's gate file is written by the bisect from the one it read (its copy
in the bisect folder is what the plan's sha256 names), so a commit's own gate.toml never changes the rules.
The engines (gatekit.engines) run the probes' `gate run` processes: local, up to --max-parallel at once, each
pinned to its own cores; or as Ray tasks. The endpoints come first: BAD against GOOD with the gate's n pairs;
if the gate does not see them differ, n more pairs once, and the classic rule judges all of them.

Folder (`--out`, new or empty, default `<gate.runs>/bisect-<gate id>-<time>`): the plan and the journal
(gatekit.bisect.records), `gate.toml` (the gate file as read), `worktrees/<index>-<sha>/` (one detached
worktree per commit, removed when the bisect ends: only those, never through a symbolic link), `probes/r<round>-<index>-<sha>/` (the probe's gate file,
build log, runs, finding and its gate process's log) and the bisect finding.
"""

from __future__ import annotations

import hashlib
import math
import os
import shlex
import socket
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

import tomlkit

from gatekit.bisect.records import (BISECT_FINDING, BISECT_JOURNAL, BISECT_PLAN, GATE_COPY, BisectInterrupted, BisectResume,
                                    BisectStart, BisectState, BisectStop, MeasuredPair, ProbeEnd, ProbeStart, ProbeStatus, plan_toml,
                                    read_plan, replay)
from gatekit.bisect.checks import NEIGHBOUR_RULE, STEPS_ALPHA
from gatekit.bisect.posterior import Pair
from gatekit.bisect.search import PROBE_PAIRS, Measured, Outcome, SearchPlan, SearchResult, endpoints_outcome, search
from gatekit.bisect.simulation import endpoints_differ
from gatekit.commits import BUILD_TIMEOUT_S, BuildResult, BuildStatus, Commit, add_worktree, build, \
    commit_range, remove_worktree, repository, worktree_paths
from gatekit.config import CommitsSpec, GateConfig, load_gate
from gatekit.contract import ENV_BISECT
from gatekit.engines import ENGINES, GateOutcome, GateStatus, GateTask, Pinning, core_sets, finished_series, \
    outcome_of, run_local, run_ray, visible_gpus
from gatekit.errors import (EXIT_FAIL_ON, EXIT_INVALID, ConfigError, GatekitError, OutputError, SeriesError,
                            SeriesInterrupted, write_failed)
from gatekit.finding import ConfigChange, RunRow
from gatekit.policy_descriptors import DUET_MODE
from gatekit.provenance import sha256_file
from gatekit.series.runloop import now, stamped_name
from gatekit.signals import interrupt_on_sigterm, signals_deferred
from gatekit.slots import usable_cpus
from gatekit.storage import Journal, atomic_write_bytes, atomic_write_text, pid_lock, read_input
from gatekit.verify import check_written_journal

NOTHING_RAN = "nothing ran — free space or fix permissions, then start the bisect again"
REFERENCE_ARM = "reference"
PROBE_ARM = "probe"
# the probe gate's decisions that say its two commits differ (a guard failure is a change of the primary too)
CHANGED = frozenset({"regression", "adopted", "guard_failed"})

Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class BisectOptions:
    """What `gate bisect` was asked (its options; GOOD and BAD are run_bisect's arguments)."""

    gate_path: Path = Path("gate.toml")
    arm: str | None = None  # None: the gate file's first arm
    build: str | None = None  # split into words (shlex), never run by a shell
    engine: str = "local"
    address: str | None = None
    max_parallel: int | None = None  # probes per round (local: at once, each on its own cores); None: one
    budget: int = 400
    confidence: float = 0.95
    resume: Path | None = None
    out: Path | None = None
    gpus: int | None = None  # per probe; None: one where this host has GPUs, else none
    pairs_per_probe: int | None = None  # None: PROBE_PAIRS (a resumed bisect: its plan's)
    build_timeout_s: float = BUILD_TIMEOUT_S  # a build still running then failed (and is stopped)


@dataclass(frozen=True, slots=True)
class BisectResult:
    folder: Path
    outcome: Outcome
    commits: tuple[Commit, ...]
    culprit: int | None  # the named commit's index (most likely one of a credible set); None: no posterior
    probabilities: tuple[float, ...]  # k = 1 … N
    credible: tuple[int, ...]
    runs: int
    rounds: int
    reason: str = ""  # why the endpoints stopped it (no_change, invalid)
    finding_paths: tuple[Path, ...] = ()
    culprit_config_diff: tuple[ConfigChange, ...] = ()  # what the named commit changed in the effective config

    def exit_code(self, fail_on: Sequence[str] = ()) -> int:
        """0 (culprit, multiple steps, credible set, no change, inconclusive), 3 invalid, 1 when --fail-on culprit
        and a culprit is named or more than one step is found."""
        if self.outcome is Outcome.INVALID:
            return EXIT_INVALID
        if "culprit" in fail_on and self.outcome in (Outcome.CULPRIT, Outcome.MULTIPLE_STEPS):
            return EXIT_FAIL_ON
        return 0

    @property
    def finding_json(self) -> Path | None:
        return next((p for p in self.finding_paths if p.suffix == ".json"), None)

    def describe(self) -> list[str]:
        """The lines `gate bisect` prints on stdout."""
        lines = [f"outcome: {self.outcome.value}" + (f" ({self.reason})" if self.reason else "")]
        if self.outcome is Outcome.MULTIPLE_STEPS:
            lines.append("one step does not explain the pairs: more than one commit changed the metric; bisect "
                         "the ranges on either side of the most likely commit apart")
        if self.culprit is not None and self.probabilities:
            commit = self.commits[self.culprit]
            lines.append(f"{'culprit' if self.outcome is Outcome.CULPRIT else 'most likely'}: {commit.sha[:12]} "
                         f"{commit.subject} (posterior {self.probabilities[self.culprit - 1]:.3f})")
            if self.culprit_config_diff:
                lines.append("its effective config changed: " + "; ".join(c.describe()
                                                                           for c in self.culprit_config_diff))
            if self.outcome is not Outcome.CULPRIT:
                lines.append("credible set: " + ", ".join(
                    f"{self.commits[k].sha[:12]} ({self.probabilities[k - 1]:.3f})" for k in self.credible))
        lines.append(f"runs: {self.runs} in {self.rounds} round(s)")
        lines.append(f"bisect: {self.folder}")
        lines += [f"finding: {path}" for path in self.finding_paths]
        return lines


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """One probe to run: the commit against its reference, in a round (0: the endpoints), with its pairs."""

    commit: int
    reference: int
    round: int
    pairs: int

    @property
    def key(self) -> tuple[int, int, int]:
        return self.commit, self.reference, self.round


# -- pure helpers ----------------------------------------------------------------------------------

def measured_pairs(runs: Sequence[RunRow], primary: str) -> tuple[MeasuredPair, ...]:
    """The pairs of a probe gate's finding: per pair number, its used reference run and its used probe run
    (a pair that lost one of them to contamination or a failure has no pair left), each naming its two runs."""
    by_pair: dict[int, dict[str, tuple[float, str]]] = {}
    for run in runs:
        if not run.used or run.warmup:
            continue
        value = run.value_of(primary)
        if value is None or not math.isfinite(value) or value <= 0:
            continue
        by_pair.setdefault(run.pair, {})[run.arm] = (value, run.label)
    return tuple(MeasuredPair(arms[PROBE_ARM][0], arms[REFERENCE_ARM][0], probe_run=arms[PROBE_ARM][1],
                              reference_run=arms[REFERENCE_ARM][1])
                 for _, arms in sorted(by_pair.items()) if PROBE_ARM in arms and REFERENCE_ARM in arms)


def endpoints_changed(ends: Sequence[ProbeEnd], config: GateConfig) -> bool:
    """Whether the endpoints differ: the first endpoint gate's decision; after the extension, the classic rule
    of the gate's threshold over every endpoint pair (GOOD's runs give σ_off)."""
    if len(ends) == 1:
        return ends[0].decision in CHANGED
    pairs = [p for end in ends for p in end.pairs]
    if len(pairs) < 2:
        return False
    return endpoints_differ([math.log(p.reference_value) for p in pairs], [math.log(p.probe_value) for p in pairs],
                            sigma_k=config.threshold.sigma_k, floor_pct=config.threshold.floor_pct)


def arm_at_commits_toml(gate_text: str, arm: str, sides: Sequence[tuple[str, Commit, Path]], subdir: str, *,
                        requested_base: str = "", merge_base: bool = False) -> tomlkit.TOMLDocument:
    """A gate file of one arm at two commits (gate bisect's probes, gate compare), from the gate file as read: its
    `arm` twice, named by `sides` (name, commit, worktree: off first), each in its checkout (the gate file's
    relative paths resolve in `subdir` of it); no declared difference, and a [commits] table, so the config
    differences between the commits are recorded rather than refused. The document, for the caller to finish."""
    document = tomlkit.parse(gate_text)
    head = document["gate"]
    if "expect_diff" in head:
        del head["expect_diff"]
    arms_table = document.get("arms", {})
    if arm not in arms_table:
        raise ConfigError(f"arms: the gate file defines no arm '{arm}' (it defines: {', '.join(arms_table)})")
    table = arms_table[arm].unwrap()
    arms = tomlkit.table()
    for name, commit, worktree in sides:
        checkout = {"commit": commit.sha, "worktree": str(worktree)}
        if subdir not in ("", "."):
            checkout["base"] = subdir
        arms[name] = {**{k: v for k, v in table.items() if k != "checkout"}, "checkout": checkout}
    document["arms"] = arms
    (_, base, _), (_, tip, _) = sides
    document["commits"] = CommitsSpec(base, tip, requested_base, merge_base).to_dict()
    return document


def probe_gate_toml(gate_text: str, arm: str, commits: tuple[tuple[Commit, Path], tuple[Commit, Path]], subdir: str,
                    pairs: int) -> str:
    """The probe's gate file (`arm_at_commits_toml`): the arm as `reference` (GOOD's worktree) and `probe`;
    `pairs` runs per arm under the classic policy; runs and finding in the probe's folder."""
    (good, good_tree), (probed, probed_tree) = commits
    document = arm_at_commits_toml(gate_text, arm, ((REFERENCE_ARM, good, good_tree),
                                                       (PROBE_ARM, probed, probed_tree)), subdir)
    head = document["gate"]
    if "policy" in head:
        del head["policy"]
    head["n"] = pairs
    head["bisect_probe"] = True  # one run per arm allowed: the bisect's posterior decides, not this gate
    head["out"] = "findings"
    head["runs"] = "runs"
    return tomlkit.dumps(document)


def build_failure(result: BuildResult, timeout_s: float) -> str:
    """Why a build failed, in words: its exit code, or that it did not finish."""
    if result.timed_out:
        return f"did not finish within --build-timeout {timeout_s:g} s"
    return f"exit {result.exit_code}" if result.exit_code is not None else "could not be started"


def gate_subdir(gate_path: Path, repo: Path) -> str:
    """The gate file's folder relative to the repository ('' when the file lies outside it): where its relative
    paths resolve inside each worktree."""
    try:
        return gate_path.parent.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        return ""


def _label(index: int, commit: Commit) -> str:
    return f"{index:03d}-{commit.sha[:12]}"


# -- the run ---------------------------------------------------------------------------------------

class Bisect:
    """One bisect folder being run (fresh or resumed): the journal, the commits' worktrees and builds, and the
    probes it sends to the engine."""

    def __init__(self, folder: Path, start: BisectStart, config: GateConfig, gate_text: str, repo: Path,
                 options: BisectOptions, journal: Journal, state: BisectState | None, report: Report) -> None:
        self.folder, self.start, self.config, self.gate_text = folder, start, config, gate_text
        self.repo, self.options, self.journal, self.report = repo, options, journal, report
        self.commits = start.commits
        self.subdir = gate_subdir(Path(start.gate_file), repo)
        self.ends: dict[tuple[int, int, int], ProbeEnd] = {e.key: e for e in state.finished} if state else {}
        self.builds: dict[int, BuildResult] = {}
        for end in self.ends.values():
            if end.build is not None:
                self.builds.setdefault(end.commit, end.build)
        self.runs = sum(e.executions for e in self.ends.values())
        self.cores = list(usable_cpus())
        self.gpus = visible_gpus() if options.engine == "local" else ()
        self.gpus_per_probe = options.gpus if options.gpus is not None else (1 if self.gpus else 0)

    # -- commits ---------------------------------------------------------------------------------

    def worktree(self, index: int) -> Path:
        return self.folder / "worktrees" / _label(index, self.commits[index])

    def probe_folder(self, spec: ProbeSpec) -> Path:
        return self.folder / "probes" / f"r{spec.round:02d}-{_label(spec.commit, self.commits[spec.commit])}"

    def built(self, index: int, probe_dir: Path) -> tuple[BuildResult, bool]:
        """The commit's worktree and build (once per commit; a resumed bisect keeps both): the result, and
        whether it was built now (its log then lies in `probe_dir`)."""
        add_worktree(self.repo, self.commits[index].sha, self.worktree(index))
        if index in self.builds:
            return self.builds[index], False
        commit = self.commits[index]
        if self.start.build is not None:
            self.report(f"bisect: building {commit.sha[:12]} ({index}/{self.start.n}): {shlex.join(self.start.build)}")
        log = probe_dir / f"build-{_label(index, commit)}.log"
        result = build(self.start.build, self.worktree(index), log, timeout_s=self.options.build_timeout_s)
        self.builds[index] = result
        if result.status is not BuildStatus.BUILT:
            words = "exit 125: skipped" if result.status is BuildStatus.SKIPPED else (
                f"failed ({build_failure(result, self.options.build_timeout_s)}): skipped")
            self.report(f"bisect: build of {commit.sha[:12]} {words}; its log: {log}")
        return result, True

    # -- probes ----------------------------------------------------------------------------------

    def run_probes(self, specs: Sequence[ProbeSpec]) -> list[ProbeEnd]:
        """Run these probes (one round) on the engine; each journaled at its start and end. A probe whose
        commit cannot be built ends without running. Interrupted: the finished ones are journaled, then
        SeriesInterrupted."""
        ends: list[ProbeEnd] = []
        tasks: dict[str, tuple[ProbeSpec, GateTask, BuildResult | None]] = {}
        for spec in specs:
            probe_dir = self.probe_folder(spec)
            probe_dir.mkdir(parents=True, exist_ok=True)
            self.journal.record(ProbeStart(spec.commit, spec.reference, spec.round,
                                           probe_dir.relative_to(self.folder).as_posix(),
                                           now().isoformat(timespec="seconds")))
            reference, _ = self.built(spec.reference, probe_dir)
            result, fresh = self.built(spec.commit, probe_dir)
            build_now = result if fresh else None
            if result.status is not BuildStatus.BUILT:
                status = ProbeStatus.SKIPPED if result.status is BuildStatus.SKIPPED else ProbeStatus.BUILD_FAILED
                words = "exited 125 (cannot be tested)" if status is ProbeStatus.SKIPPED else "failed"
                why = f"exit {result.exit_code}" if not result.timed_out else build_failure(
                    result, self.options.build_timeout_s)
                ends.append(self._end(spec, status, (), f"the build {words} ({why})", build_now))
                self._report_end(ends[-1])
                continue
            if reference.status is not BuildStatus.BUILT:
                ends.append(self._end(spec, ProbeStatus.INVALID, (), f"the reference commit "
                                      f"{self.commits[spec.reference].sha[:12]} cannot be built", build_now))
                self._report_end(ends[-1])
                continue
            gate_file = probe_dir / "gate.toml"
            if not gate_file.is_file():  # a resumed probe keeps the file its series was started with
                atomic_write_text(gate_file, probe_gate_toml(
                    self.gate_text, self.start.arm,
                    ((self.commits[spec.reference], self.worktree(spec.reference)),
                     (self.commits[spec.commit], self.worktree(spec.commit))), self.subdir, spec.pairs))
            key = probe_dir.name
            task = GateTask(key=key, gate_path=gate_file, off=REFERENCE_ARM, on=PROBE_ARM, runs_dir=probe_dir / "runs",
                            out_dir=probe_dir / "findings", log_path=probe_dir / "gate.log", campaign_dir=probe_dir,
                            gpus=self.gpus_per_probe, cpus=1, env={ENV_BISECT: str(self.folder)})
            done = finished_series(task.runs_dir)
            if done is not None:  # killed after its gate finished, before its end was journaled: not run again
                ends.append(self._finished_probe(spec, outcome_of(task, 0, Pinning(), resumed=done,
                                                                  before=frozenset()), build_now))
                self._report_end(ends[-1])
                continue
            tasks[key] = (spec, task, build_now)
        outcomes: dict[str, GateOutcome] = {}

        def started(task: GateTask, pinning: Pinning | None) -> None:
            spec = tasks[task.key][0]
            where = pinning.describe() if pinning else f"submitted to Ray (num_cpus={task.cpus}, num_gpus={task.gpus})"
            self.report(f"bisect: round {spec.round}: probe {self._what(spec)} started ({where})")

        def finished(outcome: GateOutcome) -> None:
            outcomes[outcome.key] = outcome
            spec, _, build_now = tasks[outcome.key]
            if outcome.status is GateStatus.INTERRUPTED:  # a signal, or its files could not be written (exit 4)
                return  # journaled on resume, when it is run again
            end = self._finished_probe(spec, outcome, build_now)
            ends.append(end)
            self._report_end(end)

        if tasks:
            if self.options.engine == "ray":
                run_ray([t for _, t, _ in tasks.values()], address=self.options.address, started=started,
                        finished=finished)
            else:
                run_local([t for _, t, _ in tasks.values()], max_parallel=min(self._parallel(), len(tasks)),
                          cores=self.cores, gpus=self.gpus, started=started, finished=finished)
        # exit 4: the machine's fault, not the commit's (its files could not be written, or the machine refused
        # it at preflight: busy, loaded, on battery); left unfinished, the probe runs again on resume
        machine = [o for o in outcomes.values() if o.exit_code == OutputError.exit_code and
                   o.status is not GateStatus.FINISHED]
        if machine:
            said = machine[0].detail.removeprefix("gate: error: ")
            message = (f"probe {machine[0].key}: its gate failed for a reason of the machine, not of the commit"
                       f"{': ' + said if said else ''}; every finished probe is journaled and this one runs again "
                       "— free space, fix permissions or wait until the machine is ready, then: "
                       f"gate bisect --resume {self.folder}")
            try:  # journaled as the machine's failure where the journal can still be written (a full disk: not)
                self.journal.record(BisectInterrupted(message, len(replay(self.folder).unfinished),
                                                      now().isoformat(timespec="seconds")))
            except (OSError, GatekitError):
                pass
            raise OutputError(message)
        if any(o.status is GateStatus.INTERRUPTED for o in outcomes.values()) or len(outcomes) < len(tasks):
            raise SeriesInterrupted(f"interrupted during round {specs[0].round}; resume with: gate bisect --resume "
                                    f"{self.folder}")
        return ends

    def _parallel(self) -> int:
        """Probes at once on the local engine: as asked, else as the plan says (a resumed bisect)."""
        return self.options.max_parallel or self.start.max_parallel

    def _what(self, spec: ProbeSpec) -> str:
        commit = self.commits[spec.commit]
        return f"{spec.commit}/{self.start.n} {commit.sha[:12]} {commit.subject[:50]!r}"

    def _finished_probe(self, spec: ProbeSpec, outcome: GateOutcome, build_now: BuildResult | None) -> ProbeEnd:
        """A probe gate that ended: its pairs from its finding, or why it has none."""
        from gatekit.finding import load_finding

        if outcome.status is not GateStatus.FINISHED or outcome.finding_path is None:
            return self._end(spec, ProbeStatus.INVALID, (), f"its gate ended without a finding: "
                             f"{outcome.detail or f'exit {outcome.exit_code}'}", build_now)
        finding = load_finding(outcome.finding_path)
        pairs = measured_pairs(finding.runs, self.start.metric)
        relative = self._relative(outcome.finding_path)
        series = self._relative(outcome.series_dir) if outcome.series_dir is not None else None
        sha256 = hashlib.sha256(outcome.finding_path.read_bytes()).hexdigest()
        decision = finding.decision.value
        if decision == "invalid" or not pairs:
            reason = "; ".join(finding.verdict.reasons) or "no pair of a used reference and probe run"
            return self._end(spec, ProbeStatus.INVALID, (), f"its gate is {decision}: {reason}", build_now,
                             relative, sha256, decision, len(finding.runs), series)
        config_diff = finding.meta.commits.config_diff if finding.meta.commits is not None else ()
        return self._end(spec, ProbeStatus.MEASURED, pairs, "", build_now, relative, sha256, decision,
                         len(finding.runs), series, config_diff)

    def _relative(self, path: Path) -> str:
        return Path(os.path.relpath(path.absolute(), self.folder)).as_posix()

    def _end(self, spec: ProbeSpec, status: ProbeStatus, pairs: tuple[MeasuredPair, ...], reason: str,
             build_now: BuildResult | None, finding: str | None = None, sha256: str | None = None,
             decision: str = "", runs: int | None = 0, series: str | None = None,
             config_diff: tuple[ConfigChange, ...] = ()) -> ProbeEnd:
        end = ProbeEnd(spec.commit, spec.reference, spec.round, status, pairs, reason, build_now, finding, sha256,
                       series=series, decision=decision, runs=runs, ended=now().isoformat(timespec="seconds"),
                       config_diff=config_diff)
        end = self.journal.record(end)
        self.ends[end.key] = end
        self.runs += end.executions
        return end

    def _report_end(self, end: ProbeEnd) -> None:
        spec = ProbeSpec(end.commit, end.reference, end.round, len(end.pairs))
        if end.status is ProbeStatus.MEASURED:
            diffs = [math.log(p.probe_value / p.reference_value) for p in end.pairs]
            shift = (math.exp(sum(diffs) / len(diffs)) - 1) * 100
            self.report(f"bisect: round {end.round}: probe {self._what(spec)}: {len(end.pairs)} pair(s), probe vs "
                        f"GOOD {shift:+.2f} % ({end.decision}); {self.runs} run(s) so far")
        elif end.finding is not None or end.build is not None or end.reason:
            self.report(f"bisect: round {end.round}: probe {self._what(spec)}: {end.status.value}: {end.reason}")

    # -- the phases ------------------------------------------------------------------------------

    def endpoints(self) -> tuple[bool | None, str, int]:
        """BAD against GOOD (round 0), extended once (round 1) when the gate does not see them differ:
        (changed? None: they could not be measured, why, rounds used)."""
        n = self.start.n
        first_spec = ProbeSpec(n, 0, 0, self.config.gate.n)
        first = self.ends.get(first_spec.key) or self.run_probes([first_spec])[0]
        if first.status is not ProbeStatus.MEASURED:
            return None, f"the endpoints could not be measured: {first.reason}", 1
        if endpoints_changed([first], self.config):
            return True, "", 1
        self.report(f"bisect: the endpoints' gate says {first.decision}; {self.config.gate.n} more pairs, once")
        second_spec = ProbeSpec(n, 0, 1, self.config.gate.n)
        second = self.ends.get(second_spec.key) or self.run_probes([second_spec])[0]
        ends = [first] + ([second] if second.status is ProbeStatus.MEASURED else [])
        if endpoints_changed(ends, self.config):
            return True, "", 2
        return False, (f"GOOD and BAD do not differ by the gate's rules ({first.decision}, then over "
                       f"{sum(len(e.pairs) for e in ends)} pairs)"), 2

    def endpoint_pairs(self) -> list[Pair]:
        """The endpoints' measured pairs (BAD against GOOD, rounds 0 and 1), for the posterior's model."""
        n = self.start.n
        return [p for e in self.ends.values() if e.status is ProbeStatus.MEASURED and e.commit == n and
                e.reference == 0 and e.round <= 1 for p in e.posterior_pairs()]

    def unfinished(self, state: BisectState | None) -> list[ProbeSpec]:
        """The probes a killed bisect started and never ended, to run again first (their series resume)."""
        if state is None:
            return []
        return [ProbeSpec(p.commit, p.reference, p.round, self.start.pairs_per_probe
                          if p.round > 1 or p.commit != self.start.n else self.config.gate.n)
                for p in state.unfinished if p.key not in self.ends]

    def search(self, rounds: int) -> SearchResult:
        """The probe rounds, from every pair journaled so far."""
        start = self.start
        plan = SearchPlan(start.n, start.confidence, start.budget, start.max_parallel, start.pairs_per_probe,
                          start.floor_pct, start.steps_alpha, start.neighbour_rule)
        measured = [e for e in self.ends.values() if e.status is ProbeStatus.MEASURED]
        measured.sort(key=lambda e: (e.round, e.commit))
        pairs = [p for e in measured for p in e.posterior_pairs()]
        # the pair count at the end of each round: where the search looked (checks.held_since replays it)
        round_ends = [len(pairs) - sum(len(e.pairs) for e in measured if e.round > r)
                      for r in sorted({e.round for e in measured})]
        skipped = frozenset(e.commit for e in self.ends.values() if e.status is not ProbeStatus.MEASURED)
        counter = {"round": rounds}

        def measure(chosen: Sequence[int], reference: int) -> Measured:
            current = counter["round"]
            counter["round"] += 1
            ends = self.run_probes([ProbeSpec(c, reference, current, start.pairs_per_probe) for c in chosen])
            self._report_posterior()
            return Measured(tuple(p for e in ends for p in e.posterior_pairs()),
                            frozenset(e.commit for e in ends if e.status is not ProbeStatus.MEASURED))

        def no_endpoints() -> tuple[tuple, bool]:  # the endpoints ran before the search (self.endpoints)
            raise AssertionError("the search starts from the endpoints' pairs")

        return search(plan, no_endpoints, measure, lambda: self.runs, pairs, skipped, rounds, round_ends)

    def _report_posterior(self) -> None:
        from gatekit.bisect.posterior import posterior

        pairs = [p for e in self.ends.values() for p in e.posterior_pairs()]
        if len(pairs) < 2:
            return
        probabilities = posterior(pairs, self.start.n)
        top = sorted(range(len(probabilities)), key=lambda k: -probabilities[k])[:3]
        self.report("bisect: posterior: " + ", ".join(
            f"{self.commits[k + 1].sha[:12]} {probabilities[k]:.3f}" for k in top))

    def remove_worktrees(self) -> None:
        """The finished bisect's worktrees go (their probes' runs and findings stay)."""
        remove_own_worktrees(self.repo, self.folder, self.commits, self.report)


def remove_own_worktrees(repo: Path, folder: Path, commits: Sequence[Commit], report: Report) -> None:
    """Remove the worktrees a bisect made: one per commit of its plan, at the path it gave that commit
    (`worktrees/<index>-<sha>`), when git lists it as a worktree of `repo`. Nothing else under `worktrees/`
    goes (a user's worktree with uncommitted work), and nothing through a symbolic link (git would remove
    the worktree the link points at)."""
    root = folder / "worktrees"
    if root.is_symlink():
        report(f"bisect: {root} is a symbolic link; no worktree was removed through it")
        return
    if not root.is_dir():
        return
    registered = worktree_paths(repo)
    for index, commit in enumerate(commits):
        path = root / _label(index, commit)
        if path.is_symlink():
            report(f"bisect: {path} is a symbolic link, not a worktree this bisect made; left alone")
        elif path.is_dir() and path.resolve() in registered:
            try:
                remove_worktree(repo, path)
            except GatekitError as exc:
                report(f"bisect: could not remove the worktree {path}: {exc}")




def _check_engine(options: BisectOptions) -> None:
    if options.engine not in ENGINES:
        raise ConfigError(f"--engine: must be one of {', '.join(ENGINES)}, got {options.engine!r}")
    if options.engine != "ray" and options.address:
        raise ConfigError("--address joins a Ray cluster; use it with --engine ray")
    if options.engine == "local":  # each probe at once needs a core set of its own
        core_sets(usable_cpus(), options.max_parallel or 1)
    if not 0 < options.build_timeout_s < math.inf:  # checked here: a resumed bisect takes it anew too
        raise ConfigError(f"--build-timeout: must be a positive number of seconds, got {options.build_timeout_s:g}")


def _check_options(options: BisectOptions, config: GateConfig) -> str:
    """Usage errors before anything is written; returns the arm's name."""
    _check_engine(options)
    if options.max_parallel is not None and options.max_parallel < 1:
        raise ConfigError(f"--max-parallel: must be at least 1, got {options.max_parallel}")
    if not 0.5 <= options.confidence < 1:
        raise ConfigError(f"--confidence: must be from 0.5 to below 1, got {options.confidence:g}")
    if config.gate.mode == DUET_MODE:
        raise ConfigError(f"{config.path}: gate.mode: a duet gate cannot be bisected (a probe interleaves one arm "
                          "at two commits); bisect with an interleaved gate of the arm")
    arm = options.arm or next(iter(config.arms))
    if arm not in config.arms:
        raise ConfigError(f"--arm: the gate file {config.path} defines no arm '{arm}' (it defines: "
                          f"{', '.join(config.arms)})")
    pairs = options.pairs_per_probe or PROBE_PAIRS
    if pairs < 1:
        raise ConfigError(f"--pairs-per-probe: must be at least 1, got {pairs}")
    least = 2 * config.gate.n + 2 * pairs
    if options.budget < least:
        raise ConfigError(f"--budget: {options.budget} runs cannot hold the endpoints ({2 * config.gate.n} runs) and "
                          f"one probe ({2 * pairs}); give at least {least}")
    return arm


@contextmanager
def _bisect_lock(folder: Path) -> Iterator[None]:
    """One bisect process per folder: two would run the same probes and interleave the journal."""
    with pid_lock(folder / ".bisect.lock", lambda holder: SeriesError(
            f"{folder}: another gate bisect runs here ({holder}); wait for it")):
        yield


def run_bisect(good: str | None, bad: str | None, options: BisectOptions, *, cwd: Path | None = None,
               report: Report = lambda line: None) -> BisectResult:
    """Run (or, with options.resume, continue) a bisect of GOOD..BAD in the repository of `cwd`; the
    journal, then the bisect finding. SeriesInterrupted (130) when stopped: the folder resumes."""
    repo = repository(cwd, "gate bisect")
    here = (cwd or Path.cwd()).resolve()  # relative paths of the options are the working directory's
    options = replace(options, gate_path=here / options.gate_path,
                      out=None if options.out is None else here / options.out,
                      resume=None if options.resume is None else here / options.resume)
    state: BisectState | None = None
    if options.resume is not None:
        from gatekit.bisect.verify import verify_bisect

        folder = options.resume.resolve()
        verify_bisect(folder, finding_required=False)  # an edited journal or probe finding: exit 3, nothing runs
        state = replay(folder)
        start = state.start
        if read_plan(folder / BISECT_PLAN).gate_sha256 != start.gate_sha256:
            raise SeriesError(f"{folder / BISECT_PLAN}: does not say what the journal's bisect_start says; the plan "
                              "was edited")
        gate_bytes = (folder / GATE_COPY).read_bytes()
        if hashlib.sha256(gate_bytes).hexdigest() != start.gate_sha256:
            raise SeriesError(f"{folder / GATE_COPY}: changed since the bisect started (its sha256 is not the plan's "
                              "gate_sha256); restore it or start a new bisect")
        config = load_gate(folder / GATE_COPY)
        _check_engine(options)
        if options.pairs_per_probe is not None and options.pairs_per_probe != start.pairs_per_probe:
            raise ConfigError(f"--pairs-per-probe: a resumed bisect runs its plan's {start.pairs_per_probe} pair(s) "
                              "per probe; drop it")
        if state.stop is not None:
            if not (folder / f"{BISECT_FINDING}.json").is_file():  # stopped before its finding was written
                return _stopped_result(folder, state)
            raise SeriesError(f"{folder}: this bisect is finished ({state.stop.outcome.value}); start a new one")
    else:
        if good is None or bad is None:
            raise ConfigError("gate bisect needs GOOD and BAD (or --resume DIR)")
        gate_path = options.gate_path.resolve()
        gate_bytes = read_input(gate_path, "a gate file")  # read once: the copy, the plan's sha256 and the probes'
        config = load_gate(gate_path)
        if sha256_file(gate_path) != hashlib.sha256(gate_bytes).hexdigest():
            raise ConfigError(f"{gate_path}: changed while it was read; run gate bisect again")
        arm = _check_options(options, config)
        commits = commit_range(repo, good, bad)
        if len(commits) < 2:
            raise ConfigError("GOOD..BAD holds no commit")
        try:
            build_argv = tuple(shlex.split(options.build)) if options.build is not None else None
        except ValueError as exc:
            raise ConfigError(f"--build: cannot split {options.build!r} into words: {exc}") from None
        if build_argv == ():
            raise ConfigError("--build: the build command is empty")
        started = now()
        folder = (options.out.resolve() if options.out is not None else
                  config.gate.runs / stamped_name(f"bisect-{config.gate.id}", started))
        if (folder / BISECT_JOURNAL).exists():
            raise ConfigError(f"{folder}: holds a bisect already; continue it with --resume {folder} or bisect "
                              "into a new --out")
        if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):  # its gate.toml, worktrees/
            raise ConfigError(f"{folder}: is not empty, and gate bisect writes only into a new or empty folder "
                              "(it writes gate.toml and worktrees/ there); give a new --out")
        start = BisectStart(
            good=commits[0], bad=commits[-1], commits=tuple(commits), gate_file=str(gate_path),
            gate_sha256=hashlib.sha256(gate_bytes).hexdigest(), arm=arm, metric=config.gate.primary,
            higher_is_better=config.gate.direction == "higher", build=build_argv, confidence=options.confidence,
            budget=options.budget, max_parallel=options.max_parallel or 1, engine=options.engine,
            pairs_per_probe=options.pairs_per_probe or PROBE_PAIRS, started=started.isoformat(timespec="seconds"), host=socket.gethostname(),
            repo=str(repo), address=options.address or "", floor_pct=config.threshold.floor_pct,
            steps_alpha=STEPS_ALPHA, neighbour_rule=NEIGHBOUR_RULE)
        folder.mkdir(parents=True, exist_ok=True)
    journal = Journal(folder / BISECT_JOURNAL, genesis=folder / BISECT_PLAN, resume=f"gate bisect --resume {folder}")
    with _bisect_lock(folder), interrupt_on_sigterm():
        if state is None:
            try:  # a full or read-only disk before the journal's first line: nothing to resume, nothing ran
                atomic_write_bytes(folder / GATE_COPY, gate_bytes)
                atomic_write_text(folder / BISECT_PLAN, plan_toml(start))  # the preregistration, before any run
                start = journal.record(start)
            except OSError as exc:
                raise write_failed(exc, NOTHING_RAN) from None
            except OutputError as exc:
                raise OutputError(f"{str(exc).split('; every earlier event')[0]}; {NOTHING_RAN}") from None
            report(f"bisect: {len(start.commits) - 1} commit(s) after GOOD {start.good.sha[:12]} up to BAD "
                   f"{start.bad.sha[:12]}; preregistered {folder / BISECT_PLAN}")
        else:
            journal.record(BisectResume(f"resumed: {len(state.finished)} probe(s) finished, "
                                        f"{len(state.unfinished)} to run again", now().isoformat(timespec="seconds")))
            report(f"bisect: resuming {folder}: {len(state.finished)} probe(s) finished, "
                   f"{len(state.unfinished)} unfinished")
        bisect = Bisect(folder, start, config, gate_bytes.decode("utf-8"), repo, options, journal, state, report)
        try:
            result = _run(bisect, state)
        except OSError as exc:  # the bisect's own files (a probe's folder, build log, gate file, gate log)
            raise write_failed(exc, f"every finished probe is journaled and the unfinished one runs again — free "
                                    f"space or fix permissions, then: gate bisect --resume {folder}") from None
        except OutputError as exc:  # a worktree that could not be checked out, a journal line not written
            if "--resume" in str(exc):
                raise
            raise OutputError(f"{exc}; every finished probe is journaled and the unfinished one runs again — free "
                              f"space or fix permissions, then: gate bisect --resume {folder}") from None
        except (KeyboardInterrupt, SeriesInterrupted) as exc:
            message = str(exc) if isinstance(exc, SeriesInterrupted) else \
                f"interrupted; resume with: gate bisect --resume {folder}"
            with signals_deferred():  # a second Ctrl-C must not tear the event in half
                journal.record(BisectInterrupted(message, len(replay(folder).unfinished),
                                                 now().isoformat(timespec="seconds")))
            raise SeriesInterrupted(message) from None
        journal.record(BisectStop(result.outcome, result.culprit, result.probabilities, result.credible,
                                  result.runs, result.rounds, result.exit_code(), now().isoformat(timespec="seconds")))
        bisect.remove_worktrees()
        # no outcome said and no finding written over a bisect its own `gate verify` rejects: a build or
        # trainer that wrote a line into the journal, edited the plan or the gate file's copy, or a probe's
        # finding or series, is exit 3 naming the file (a partial journal line was dropped before the next
        # event, as a torn one is)
        from gatekit.bisect.verify import verify_bisect

        check_written_journal(journal, verify_bisect(folder, finding_required=False).chain_head)
    report_outcome(result, report)
    try:
        return _with_finding(result, folder)
    except OSError as exc:
        raise write_failed(exc, f"the bisect is journaled as stopped — free space or fix permissions, then write its "
                                f"finding with: gate bisect --resume {folder}") from None


def _with_finding(result: BisectResult, folder: Path) -> BisectResult:
    """The result with its bisect finding written, and what the finding says the named commit changed."""
    from gatekit.bisect.finding import build_finding, write_bisect_finding

    finding = build_finding(replay(folder))
    return replace(result, finding_paths=tuple(write_bisect_finding(folder, finding)),
                   culprit_config_diff=finding.culprit_config_diff)


def _run(bisect: Bisect, state: BisectState | None) -> BisectResult:
    start = bisect.start
    commits = start.commits
    # a killed bisect's unfinished probes first: they resume their series (the endpoints' among them)
    pending = bisect.unfinished(state)
    endpoint_rounds = [s for s in pending if s.commit == start.n and s.reference == 0 and s.round <= 1]
    later = [s for s in pending if s not in endpoint_rounds]
    for spec in endpoint_rounds:
        bisect.run_probes([spec])
    changed, reason, rounds = bisect.endpoints()
    if changed is not True:
        outcome = Outcome.INVALID
        if changed is False:  # no_change only with the power to show the floor (checks.endpoints_power)
            outcome, power = endpoints_outcome(bisect.endpoint_pairs(), start.floor_pct)
            if outcome is Outcome.INCONCLUSIVE:
                reason += (f"; but they cannot rule a change out: MDE {power.mde_pct:.2f} %" if power else
                           "; but too few pairs to rule a change out") + \
                    (f" (the floor {start.floor_pct:g} %)" if start.floor_pct is not None else "")
        return BisectResult(bisect.folder, outcome, commits, None, (), (), bisect.runs, rounds, reason)
    if later:
        bisect.run_probes(later)
    done_rounds = max([rounds] + [e.round + 1 for e in bisect.ends.values()])
    result = bisect.search(done_rounds)
    return BisectResult(bisect.folder, result.outcome, commits, result.culprit, result.probabilities,
                        result.credible, bisect.runs, result.rounds)


def report_outcome(result: BisectResult, report: Report) -> None:
    """The outcome's line, said once the bisect verifies: the commit named and its posterior, or why the
    endpoints stopped it."""
    if result.culprit is not None:
        commit = result.commits[result.culprit]
        report(f"bisect: {result.outcome.value}: {commit.sha[:12]} {commit.subject!r} holds "
               f"{result.probabilities[result.culprit - 1]:.3f} of the posterior")
    elif not result.probabilities:  # the endpoints stopped it
        report(f"bisect: {result.outcome.value}: {result.reason}")


def _stopped_result(folder: Path, state: BisectState) -> BisectResult:
    """A bisect that stopped before its finding was written: the result its bisect_stop journaled, and the finding."""
    stop = state.stop
    assert stop is not None
    return _with_finding(BisectResult(folder, stop.outcome, state.start.commits, stop.culprit, stop.probabilities,
                                      stop.credible, stop.runs, stop.rounds), folder)


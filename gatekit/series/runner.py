"""Runs one gate series: preflight, preregistration, the schedule and its retries and later stages (through
the run loop), the finding written under its reserved id; and resume of an interrupted series.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import tomllib

from gatekit import rules
from gatekit.analysis import analyze, assess, classify
from gatekit.config import ArmSpec, GateConfig
from gatekit.driver import ChosenBackend, Driver, make_backend, make_driver
from gatekit.errors import GatekitError, OutputError, SeriesError, write_failed
from gatekit.finding import Finding, load_finding, write_finding
from gatekit.policy_descriptors import policy_for
from gatekit.preflight import refuse_failed, run_checks
from gatekit.prereg import DecisionSpec, predecision_document, write_predecision
from gatekit.processes import stop_run_processes
from gatekit.provenance import (artifact_bytes, git_state, hash_artifacts_timed, host_fingerprint, redacted_env,
                                sha256_file, software_versions)
from gatekit.records import CheckResult, RunRecord
from gatekit.sampler import LoadReader, read_system_load
from gatekit.schedule import WARMUP_ROUND, Slot, extension, needs_seed, order_seed, plan, retry_slots
from gatekit.series_events import (Extend, Hashing, Invalid, JournaledArm, LeftoversStopped, ProvenanceEnd,
                                   ProvenanceStart, Retry, SeriesEnd, SeriesStart)
from gatekit.series_replay import (JournalState, OpenSeries, evidence_from_state, open_series, read_state,
                                   replacements)
from gatekit.series.reservation import check_finding_id, release_finding_id, reserve_finding_id
from gatekit.series.runloop import Report, RunLoop, failure_text, new_series_dir, now, runs_lock, stamped_name
from gatekit.storage import Journal, SeriesLayout, atomic_write_text, remove_stale_temp_files
from gatekit.verify import check_written_journal, signature_path, verify_series

PREFLIGHT_LOAD = "preflight"  # the label SeriesRunner's load_reader_for is asked for the preflight's reading
# a write that failed before the first run (exit 4): the series folder, if any, holds no journal to resume
NOTHING_RAN = "nothing ran — free space or fix permissions, then run the same command again"


@dataclass(frozen=True, slots=True)
class SeriesResult:
    series_dir: Path
    finding: Finding
    finding_paths: tuple[Path, ...]


class SeriesRunner:
    """Runs one gate series. `load_reader_for(label)` lets tests inject the load a run window sees, and the
    preflight's (label PREFLIGHT_LOAD); `backend` lets them inject a backend (e.g. one replaying recorded GPU
    telemetry)."""

    def __init__(self, config: GateConfig, off: ArmSpec, on: ArmSpec, *, driver: Driver | None = None,
                 backend: ChosenBackend | None = None, report: Report = lambda text: None,
                 load_reader_for: Callable[[str], LoadReader] | None = None, heartbeat_s: float = 0.0) -> None:
        self.config = config
        self.off, self.on = off, on
        self.driver = driver or make_driver(config.driver.name, config.driver.options, source=config.path,
                                            base_dir=config.base_dir)
        self._owns_driver = driver is None  # closed after its series (a given driver is its giver's to close)
        self.backend = backend or make_backend(config.backend.name, config.backend.options, source=config.path)
        self.report = report
        self.loop = RunLoop(config, {off.name: off, on.name: on}, self.driver, self.backend, report,
                            load_reader_for or (lambda label: read_system_load))
        self.loop.heartbeat_s = heartbeat_s  # a line every so many seconds during a run (0: none)
        self.spec = DecisionSpec.from_gate(config, off.name, on.name)
        self.policy = policy_for(self.spec.policy, self.spec.design_version)

    @property
    def git_dir(self) -> Path:
        """Whose git state the provenance records: the on arm's checkout (a bisect probe), else the gate file's."""
        return self.on.checkout.worktree if self.on.checkout is not None else self.config.base_dir

    # -- entry points ----------------------------------------------------------------------------

    def preflight(self) -> list[CheckResult]:
        return run_checks(self.config, [self.off, self.on], self.driver, self.backend,
                          read_load=self.loop.load_reader_for(PREFLIGHT_LOAD))

    def start(self, checks: Sequence[CheckResult] | None = None) -> SeriesResult:
        """Preflight (or take its `checks`, run just before by the caller), preregister, and run a new series."""
        refuse_failed(self.preflight() if checks is None else checks)
        runs_dir = self.config.gate.runs
        with runs_lock(runs_dir):
            started = now()
            try:  # a full, read-only or unwritable runs folder: nothing ran, and the same command runs again
                series_dir = new_series_dir(runs_dir, stamped_name(self.config.gate.id, started))
                layout = SeriesLayout(series_dir)
                journal = Journal(layout.journal, genesis=layout.predecision)
                state, predecision = self._preregister(series_dir, series_dir.name, started, journal)
            except OSError as exc:
                raise write_failed(exc, NOTHING_RAN) from None
            return self._execute(OpenSeries(series_dir, state, predecision, self.config, self.off, self.on), journal)

    def resume(self, opened: OpenSeries | Path) -> SeriesResult:
        """Continue an interrupted series (read once by `open_series`) without redoing finished runs."""
        if isinstance(opened, Path):
            opened = open_series(opened, self.config.path)
        series_dir, state, predecision = opened.series_dir, opened.state, opened.predecision
        layout = SeriesLayout(series_dir)
        if layout.done.exists():
            raise SeriesError(f"{series_dir}: this series is finished ({layout.done.name} exists); start a new one "
                              f"(or sign its finding: gate run --resume {series_dir} --sign-key KEY)")
        registered = predecision.get("backend", {}).get("name")
        if registered and registered != self.backend.name:
            raise SeriesError(f"{series_dir}: was registered with the {registered} backend, but this machine "
                              f"gives {self.backend.name} ({self.backend.detail}); resume it where it started")
        self.spec = DecisionSpec.from_dict(predecision["decision"])  # the rules as frozen, not as read now
        self.policy = policy_for(self.spec.policy, self.spec.design_version)
        with runs_lock(series_dir.parent):
            journal = Journal(layout.journal, genesis=layout.predecision)
            # Holding the lock, no gate process owns this series: whatever still runs in one of its run
            # directories is a trainer orphaned by a killed gate, and would load the runs to come.
            leftovers = [pid for prefix in dict.fromkeys((series_dir.absolute(), series_dir.resolve()))
                         for pid in stop_run_processes(prefix)]
            if leftovers:
                journal.record(LeftoversStopped(tuple(leftovers)))
                self.report(f"stopped {len(leftovers)} leftover trainer process(es) of the interrupted run: "
                            + ", ".join(f"pid {pid}" for pid in leftovers))
            if state.end is None and not state.problems:
                refuse_failed(self.preflight(), "nothing more ran")
            self.report(f"resuming {series_dir.name}: {len(state.records)} run(s) already done")
            return self._execute(opened, journal)

    # -- steps -----------------------------------------------------------------------------------

    def _preregister(self, series_dir: Path, series_id: str, started: dt.datetime,
                     journal: Journal) -> tuple[JournalState, dict[str, Any]]:
        """Write and hash the predecision file, then journal series_start; returns the journal's state and
        the predecision as registered."""
        config = self.config
        spec = self.spec
        # An order that draws from a seed and was given none takes it from the predecision's sha256,
        # so the schedule is fixed by the rules and drawn only after they are written.
        derived = spec.seed is None and needs_seed(spec.order)
        schedule = None if derived else plan(self.off.name, self.on.name, spec.n, spec.order, spec.seed or 0,
                                             spec.warmup)
        artifacts, hash_s = hash_artifacts_timed(config.driver.hash)
        driver_info = {"name": config.driver.name, "timeout_s": config.driver.timeout_s,
                       "hash": [str(p) for p in config.driver.hash], "busy_pattern": config.driver.busy_pattern,
                       **{k: v for k, v in config.driver.options.items() if k != "env"}}
        gate_sha256 = sha256_file(config.path)
        text = predecision_document(
            self.spec, series_id=series_id, created=started.isoformat(timespec="seconds"),
            gate_path=config.path, gate_sha256=gate_sha256, schedule=schedule,
            arm_configs={self.off.name: self.off.config, self.on.name: self.on.config},
            artifacts=artifacts, driver=driver_info, backend=self._backend_registration())
        predecision_sha = write_predecision(series_dir, text)
        if schedule is None:
            schedule = plan(self.off.name, self.on.name, spec.n, spec.order, order_seed(predecision_sha),
                            spec.warmup)
        out_dir = config.gate.out
        finding_id = reserve_finding_id(out_dir, f"{config.gate.id}-{started:%Y-%m-%d}", series_id)
        start = SeriesStart(
            series_id=series_id, finding_id=finding_id, date=f"{started:%Y-%m-%d}",
            started=started.isoformat(timespec="seconds"), gate_path=config.path, gate_sha256=gate_sha256,
            predecision_sha256=predecision_sha, off_arm=self.off.name, on_arm=self.on.name, out_dir=out_dir,
            schedule=tuple(schedule),
            arms={a.name: JournaledArm(str(a.config) if a.config else "", a.args,
                                       redacted_env(a.env, config.gate.record_env))
                  for a in (self.off, self.on)},
            provenance_start=ProvenanceStart(
                artifacts=artifacts, git=git_state(self.git_dir).to_dict(), host=host_fingerprint(),
                software=software_versions(),
                backend={"name": self.backend.name, **self.backend.backend.provenance()},
                hashing=Hashing(artifact_bytes(config.driver.hash), hash_s)),
        )
        try:
            start = journal.record(start)
        except OutputError as exc:  # nothing ran yet: nothing to resume, the same command starts it again
            what = str(exc).split("; every earlier event")[0]
            raise OutputError(f"{what}; {NOTHING_RAN}") from None
        self.report(f"preregistered {SeriesLayout(series_dir).predecision} (sha256 {predecision_sha[:12]}…)")
        return JournalState(start=start), tomllib.loads(text)

    def _backend_registration(self) -> dict[str, Any]:
        """The backend as preregistered: its name, what the gate file asked for, options, evidence rules."""
        return {"name": self.backend.name, "requested": self.backend.requested, "chosen": self.backend.detail,
                "options": dict(self.backend.options), "evidence_rules": self.backend.backend.evidence_rules()}

    def _execute(self, opened: OpenSeries, journal: Journal) -> SeriesResult:
        try:
            return self._execute_runs(opened, journal)
        finally:  # a driver's helpers (warm parents) end with the series that started them
            close = getattr(self.driver, "close", None)
            if self._owns_driver and callable(close):
                close()

    def _execute_runs(self, opened: OpenSeries, journal: Journal) -> SeriesResult:
        series_dir, state = opened.series_dir, opened.state
        if self.config.duet is not None:  # the preregistered design puts each run on its slot
            sha = state.start.predecision_sha256
            self.loop.slot_index = lambda arm_is_off, round_: self.policy.slot_index(arm_is_off, round_, sha)
        if state.end is not None or state.problems:  # ended (invalid or finished) before its finding
            return self._finish(opened, journal)
        slots = list(state.start.schedule)
        slots += [s for r in state.retries for s in retry_slots(self.off.name, self.on.name, r.round, r.replaces,
                                                                 r.first)]
        slots += [s for e in state.extensions for s in e.slots]
        logs: dict[str, Path] = {}  # a stop's message -> the failed run's log, printed (absolute) beside it

        def stop_at_unretryable(record: RunRecord) -> list[str]:
            message = self._unretryable(state, record, slots, series_dir)
            if message:
                logs[message] = SeriesLayout(series_dir).run(record.label).stderr.absolute()
            return [message] if message else []

        # a series cut off between a failed run and its stop (killed, power loss) stops on resume, too
        stops = [m for r in sorted(state.records.values(), key=lambda r: r.order) for m in stop_at_unretryable(r)]
        changed = stops[:1] or self.loop.run(series_dir, journal, state, slots, primary=self.spec.primary,
                                         start_artifacts={**state.start.provenance_start.artifacts,
                                                          **_arm_config_hashes(opened.predecision)},
                                         resume_hint=f"resume with: gate run --resume {series_dir}",
                                         most=2 * self.policy.stages(self.spec.n)[-1],
                                         more=lambda current: self._more_slots(opened, journal),
                                         check=stop_at_unretryable)
        for message in changed:
            journal.record(Invalid(message))
            state.problems.append(message)
            self.report(f"INVALID: {message}" + (f"; its log: {logs[message]}" if message in logs else ""))
        return self._finish(opened, journal)

    def _unretryable(self, state: JournalState, record: RunRecord, slots: Sequence[Slot], series_dir: Path) -> str:
        """Why the series stops after `record`, or '' to go on (both rules are in the predecision's words):
        - the first run of each arm failed the same way: the trainer fails whatever the arm (a crash on start,
          a result it never writes), so every run to come would fail too, retries included;
        - a failed run that its policy leaves unresolved and that no retry is left for makes the series invalid
          by the preregistered rules, whatever runs next (analysis: "… and its pair has no retry left").
        Either way the runs still to come would only cost time."""
        primary = self.spec.primary
        if not record.failure(primary) or record.pair == WARMUP_ROUND:  # a failed warm-up run is discarded
            return ""
        left = sum(1 for s in slots if s.label not in state.records)
        firsts = [next((s.label for s in state.start.schedule if s.arm == arm and s.round != WARMUP_ROUND), None)
                  for arm in (self.off.name, self.on.name)]
        if record.label in firsts and all(label in state.records for label in firsts):
            failures = {state.records[label].failure(primary) for label in firsts if label is not None}
            if len(failures) == 1:
                why = failure_text(record, primary, series_dir)
                return (f"stopped after {record.label}: the first run of each arm ({' and '.join(map(str, firsts))}) "
                        f"failed the same way ({why}), so the trainer fails whatever the arm and the series is "
                        f"invalid; fix the trainer (run its command by hand) and start again; {left} scheduled "
                        "run(s) not run")
        classified = classify(list(state.records.values()), self.spec, replacements(state.retries), state.cores)
        unresolved = set(self.policy.unresolved(classified).labels())
        if record.label not in unresolved or any(r.replaces == record.pair for r in self._plan_retries(state)):
            return ""
        return (f"stopped after {record.label}: its failure ({failure_text(record, primary, series_dir)}) cannot "
                f"be retried (rules.max_retries = {self.spec.rules.max_retries}), so the series is invalid "
                f"whatever runs next; {left} scheduled run(s) not run")

    def _more_slots(self, opened: OpenSeries, journal: Journal) -> list[Slot]:
        """Retries of flagged pairs; when none are due, the policy's next stage if it asks for one."""
        state = opened.state
        new = self._plan_retries(state)
        if new:
            slots = []
            for retry in new:
                retry = journal.record(retry)
                state.retries.append(retry)
                slots += retry_slots(self.off.name, self.on.name, retry.round, retry.replaces, retry.first)
                why = "; ".join(f"{label} {info['detail']}" for label, info in retry.flagged.items())
                self.report(f"retrying pair r{retry.replaces} as r{retry.round}: {why}")
            return slots
        stage = self._plan_extension(opened)
        if stage is None:
            return []
        stage = journal.record(stage)
        state.extensions.append(stage)
        number = stage.stage - 1  # the look that did not decide
        self.report(f"look {number} did not decide: extending to {self.policy.stages(self.spec.n)[number]} runs "
                    "per arm")
        return list(stage.slots)

    def _plan_retries(self, state: JournalState) -> list[Retry]:
        """Pairs with a failed or contaminated run get a re-run pair, at most max_retries per original pair."""
        retry_of = {r.round: r.replaces for r in state.retries}
        classified = classify(list(state.records.values()), self.spec, replacements(state.retries), state.cores)
        next_round = max(r.pair for r in state.records.values()) + 1
        retries = []
        for retry in sorted(self.policy.retries(classified, self.spec.rules, self.off.name, self.on.name),
                            key=lambda r: r.replaces):
            root = rules.lineage_root(retry.replaces, retry_of)
            used = sum(1 for r in state.retries if rules.lineage_root(r.replaces, retry_of) == root)
            if used >= self.spec.rules.max_retries:
                continue
            retries.append(Retry(round=next_round, replaces=retry.replaces, flagged=retry.flagged,
                                 reason=f"pair re-run as r{next_round}{retry.reason_suffix}", first=retry.first))
            next_round += 1
        return retries

    def _plan_extension(self, opened: OpenSeries) -> Extend | None:
        """The policy's next stage when its look — assessed exactly as the finding will be, narrative aside —
        did not decide; None after the last stage or when the look decided."""
        state = opened.state
        runs = self.policy.stages(self.spec.n)  # rounds per look
        stage = len(state.extensions) + 2  # stage 1 is the preregistered schedule
        if stage > len(runs) or not assess(evidence_from_state(opened)).decided.extend:
            return None
        seed = self.spec.seed if self.spec.seed is not None else order_seed(state.start.predecision_sha256)
        done, target = runs[stage - 2], runs[stage - 1]
        slots = extension(self.off.name, self.on.name, self.spec.order, seed, done_rounds=done,
                          more_rounds=target - done, first_round=max(r.pair for r in state.records.values()) + 1)
        return Extend(stage, tuple(slots), f"look {stage - 1} undecided: extend to {target} runs per arm")

    def _finish(self, opened: OpenSeries, journal: Journal) -> SeriesResult:
        series_dir, state = opened.series_dir, opened.state
        if state.end is None:  # a resumed series whose finding could not be written has ended already
            artifacts, hash_s = hash_artifacts_timed(self.config.driver.hash)
            state.end = journal.record(SeriesEnd(
                ProvenanceEnd(artifacts, git_state(self.git_dir).to_dict(), hash_s,
                              backend={"name": self.backend.name, **self.backend.backend.provenance()}),
                finished=now().isoformat(timespec="seconds")))
        # Success is never reported over evidence its own `gate verify` rejects: a trainer that wrote into its
        # series folder (a line in the journal, a record) is exit 3 naming the line, and no finding is written.
        check_written_journal(journal, verify_series(series_dir).chain_head)
        # The state is the journal as written, event for event, so this is what `gate analyze` computes; the
        # journal itself knows its chain head after the last event (escaped, retry, … included).
        state.chain_head, state.legacy = journal.head, journal.legacy
        finding = analyze(evidence_from_state(opened))
        out_dir = state.start.out_dir
        try:
            remove_stale_temp_files(out_dir)  # what a gate killed while writing a finding left there
            check_finding_id(out_dir, state.start.finding_id, state.start.series_id,
                             written_from=lambda head: head in journal.line_hashes())
            paths = write_finding(finding, out_dir)
            atomic_write_text(SeriesLayout(series_dir).done, f"{finding.decision.value}\n{paths[0]}\n")
            release_finding_id(out_dir, state.start.finding_id)
        except (GatekitError, OSError) as exc:
            what = exc if isinstance(exc, GatekitError) else f"{exc.filename}: {exc.strerror or exc}"
            raise OutputError(f"{what}. The series itself is complete and journaled in {series_dir}: fix the "
                              f"folder, then write the finding with: gate run --resume {series_dir}") from None
        return SeriesResult(series_dir, finding, paths)


def finished_series(series_dir: Path) -> SeriesResult:
    """A finished series (DONE written) as its run ended, for `gate run --resume DIR --sign-key KEY` to sign a
    finding whose signature could not be written then: the finding its series_start reserved (read, not
    verified: the signing path verifies it with the series before it signs). One signed already is refused."""
    start = read_state(series_dir).start
    toml_path, json_path = (start.out_dir / f"{start.finding_id}{suffix}" for suffix in (".toml", ".json"))
    if signature_path(json_path).exists():
        raise SeriesError(f"{series_dir}: this series is finished and its finding signed "
                          f"({signature_path(json_path)}); check it with gate verify --pubkey, or start a new one")
    return SeriesResult(series_dir, load_finding(json_path), (toml_path, json_path))


def _arm_config_hashes(predecision: Mapping[str, Any]) -> dict[str, str]:
    """{path: sha256} of the arm configs as preregistered: watched around every run like the artifacts."""
    return {info["path"]: info["sha256"] for info in predecision["arm_configs"].values() if info.get("path")}



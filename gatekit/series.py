"""Executes a series: preflight, preregistration, interleaved runs, retries, journal, resume.

Every finished run is journaled (fsynced) before the next one starts, so a crash loses at most the run
in flight, and `resume` re-runs only that one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import json
import os
import re
import signal
import stat
import time
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import psutil
import tomlkit

from gatekit import rules
from gatekit.analysis import SeriesEvidence, analyze, assess, classify
from gatekit.config import ArmSpec, GateConfig, load_gate
from gatekit.driver import ChosenBackend, Driver, RunRequest, make_backend, make_driver
from gatekit.duet_runs import OpenRun, run_together, slot_backend, slot_summary, slot_telemetry
from gatekit.errors import GatekitError, OutputError, PreflightError, SeriesError, SeriesInterrupted
from gatekit.finding import Finding, write_finding
from gatekit.policy import policy_for
from gatekit.preflight import arm_input, run_checks
from gatekit.prereg import (PREDECISION_FILE, DecisionSpec, predecision_document, read_predecision,
                            write_predecision)
from gatekit.processes import child_pids, child_subreaper, escaped_evidence, stop_escapees, stop_run_processes
from gatekit.provenance import (REDACTED_PREFIX, artifact_bytes, changed_artifacts, git_diff_stat, git_root,
                                git_state, hash_artifacts_timed, host_fingerprint, redacted_env, sha256_file,
                                software_versions)
from gatekit.records import CheckResult, RunOutcome, RunRecord, WindowSummary
from gatekit.report.common import number_text
from gatekit.sanitize import safe_outcome
from gatekit.sampler import LoadReader, WindowSampler, read_system_load, samples_csv
from gatekit.sequential import design_for
from gatekit.schedule import WARMUP_ROUND, Slot, extension, needs_seed, order_seed, plan, retry_slots
from gatekit.signals import ignore_further_interrupts, interrupt_on_sigterm
from gatekit.slots import DeviceSlot, slot_for
from gatekit.storage import (DONE_FILE, JOURNAL_FILE, LEGACY_JOURNAL_WARNING, LOCK_FILE, Journal, atomic_write_text,
                             line_sha256)

RESULT_FILE = "result"
RESERVED_SUFFIX = ".reserved"  # <out>/.<finding id>.reserved: the id is held by a series
LEFTOVER_GRACE_S = 5.0

Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class SeriesResult:
    series_dir: Path
    finding: Finding
    finding_paths: tuple[Path, ...]


@dataclass(slots=True)
class JournalState:
    """What the journal says so far: replayed from it on resume and for offline analysis, and kept in step
    with it, event for event, while a series runs."""

    start: Mapping[str, Any]
    records: dict[str, RunRecord] = field(default_factory=dict)
    retries: list[Mapping[str, Any]] = field(default_factory=list)
    extensions: list[Mapping[str, Any]] = field(default_factory=list)  # a policy's later stages
    problems: list[str] = field(default_factory=list)
    end: Mapping[str, Any] | None = None
    hash_s: list[float] = field(default_factory=list)  # artifact hashing between runs, seconds each
    chain_head: str | None = None  # sha256 of the journal's last line (None for a legacy journal)
    legacy: bool = False  # written before hash chains: nothing to verify, not tamper-evident

    @property
    def cores(self) -> int | None:
        return self.start.get("provenance_start", {}).get("host", {}).get("cpu_count")


def read_state(series_dir: Path) -> JournalState:
    """Replay the journal; the latest run_end of a label wins (a label only re-runs after a cut-off).

    A line that parses but does not hold what gatekit wrote (an edited or damaged journal) is an error
    naming the journal and the line, never a traceback later on.
    """
    path = series_dir / JOURNAL_FILE
    state: JournalState | None = None
    first: Any = None
    last = b""
    for number, (_, last, event) in enumerate(Journal(path).lines(), 1):
        first = event if first is None else first
        kind = event.get("event") if isinstance(event, Mapping) else None
        try:
            if not isinstance(kind, str):  # (events of kinds a newer gatekit added are skipped below)
                raise TypeError("not an event object")
            if kind == "series_start":
                _check_start(event)
                state = JournalState(start=event)
            elif state is None:
                raise SeriesError(f"{path}: does not begin with series_start")
            elif kind == "run_end":
                record = RunRecord.from_dict(event["record"])
                state.records[record.label] = record
                state.hash_s.extend(float(s) for s in event.get("hash_s", []))
            elif kind == "retry":
                _require(event, {"round": int, "replaces": int, "reason": str, "flagged": Mapping})
                state.retries.append(event)
            elif kind == "extend":
                _require(event, {"slots": list})
                state.extensions.append(event)
            elif kind == "invalid":
                state.problems.append(str(event["reason"]))
            elif kind == "series_end":
                _require(event, {"provenance_end": Mapping})
                _require(event["provenance_end"], {"artifacts": Mapping, "git": Mapping,
                                                   **({"hash_s": (int, float)} if "hash_s" in event["provenance_end"] else {})})
                state.end = event
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # RecordError is a ValueError
            raise SeriesError(f"{path}: event {number} ({kind!r}) is not what gatekit wrote ({exc!r}); the "
                              "journal was edited or damaged") from None
    if state is None:
        raise SeriesError(f"{path}: empty journal; the series never started")
    state.legacy = "prev" not in first
    state.chain_head = None if state.legacy else line_sha256(last)
    return state


def _require(table: Any, fields: Mapping[str, type | tuple[type, ...]]) -> None:
    if not isinstance(table, Mapping):
        raise TypeError(f"expected a table, got {type(table).__name__}")
    for name, kind in fields.items():
        if not isinstance(table[name], kind) or (kind is int and isinstance(table[name], bool)):
            raise TypeError(f"{name} is {type(table[name]).__name__}")


def _check_start(event: Mapping[str, Any]) -> None:
    _require(event, {"series_id": str, "finding_id": str, "date": str, "gate_path": str, "gate_sha256": str,
                     "predecision_sha256": str, "off_arm": str, "on_arm": str, "out_dir": str, "schedule": list,
                     "arms": Mapping, "provenance_start": Mapping})
    for slot in event["schedule"]:
        _require(slot, {"arm": str, "round": int})
    for arm in event["arms"].values():
        _require(arm, {"config": str, "args": list, "env": Mapping})
    _require(event["provenance_start"], {"artifacts": Mapping, "git": Mapping, "host": Mapping, "software": Mapping})
    if "hashing" in event["provenance_start"]:  # journals of earlier versions have no hashing record
        _require(event["provenance_start"]["hashing"], {"artifact_bytes": int, "hash_s": (int, float)})


def replacements(retries: Sequence[Mapping[str, Any]]) -> dict[int, rules.Replacement]:
    """Journaled retry events as {replaced round: Replacement}."""
    return {r["replaces"]: rules.Replacement.from_dict(r) for r in retries}


def now() -> dt.datetime:
    """Wall time with the local zone, for people (durations use monotonic clocks)."""
    return dt.datetime.now().astimezone()


@contextmanager
def runs_lock(runs_dir: Path) -> Iterator[None]:
    """One series at a time per runs folder: two interleaved series would contaminate each other."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / LOCK_FILE
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise SeriesError(f"{runs_dir}: another series is running here ({holder}); wait for it or use "
                          "another `runs` folder") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}")
    handle.flush()
    try:
        yield
    finally:
        handle.close()


class RunLoop:
    """THE run loop, used by `gate run`, `--resume` and `gate calibrate`: each slot runs with the gate's
    driver, the sampler and the backend's telemetry; artifacts are hashed around every run; every finished
    run is journaled (fsynced) before the next starts; an interrupt stops the trainer and is journaled."""

    def __init__(self, config: GateConfig, arms: Mapping[str, ArmSpec], driver: Driver, backend: ChosenBackend,
                 report: Report, load_reader_for: Callable[[str], LoadReader]) -> None:
        self.config, self.arms, self.driver, self.backend = config, arms, driver, backend
        self.report, self.load_reader_for = report, load_reader_for

    def run(self, series_dir: Path, journal: Journal, state: JournalState, slots: list[Slot], *, primary: str,
            start_artifacts: Mapping[str, str], resume_hint: str,
            more: Callable[[JournalState], list[Slot]] = lambda state: [],
            check: Callable[[RunRecord], Sequence[str] | None] = lambda record: None) -> list[str]:
        """Run every slot not yet in `state`, then whatever `more(state)` adds, until it adds nothing.
        `check(record)` sees each finished run; what it returns stops the loop there. Returns the messages
        that stopped it early — changed artifacts, or what `check` returned — empty when every slot ran."""
        # The subreaper adopts every descendant whose parent exits, so a run's escapees are found after it.
        with interrupt_on_sigterm(), child_subreaper():
            try:
                return self._run(series_dir, journal, state, slots, primary, start_artifacts, resume_hint, more,
                                 check)
            except KeyboardInterrupt:  # between runs (a run in flight raises SeriesInterrupted itself)
                ignore_further_interrupts()
                journal.append("interrupted", label="")
                raise SeriesInterrupted(f"interrupted; {resume_hint}") from None
            except OSError as exc:  # a full or read-only disk under the series directory
                raise OutputError(f"{exc.filename or series_dir}: {exc.strerror or exc}; every finished run is in "
                                  f"the journal — fix it, then {resume_hint}") from None

    def _run(self, series_dir: Path, journal: Journal, state: JournalState, slots: list[Slot], primary: str,
             start_artifacts: Mapping[str, str], resume_hint: str, more: Callable[[JournalState], list[Slot]],
             check: Callable[[RunRecord], Sequence[str] | None]) -> list[str]:
        series_began = time.monotonic()
        durations: list[float] = []
        while True:
            pending = [s for s in slots if s.label not in state.records]
            for unit in self.units(pending):
                total = len(slots)
                index = slots.index(unit[-1]) + 1
                what = " + ".join(s.label for s in unit)
                eta = (sum(durations) / len(durations)) * (total - index + 1) if durations else None
                self.report(f"[{index}/{total}] {what} starting{' together' if len(unit) > 1 else ''}; elapsed "
                            f"{time.monotonic() - series_began:.0f} s"
                            + (f", about {eta:.0f} s left" if eta is not None else ""))
                # Everything hashed at the start (the driver's artifacts and, for a series, the arm configs).
                watched = [Path(p) for p in start_artifacts]
                before, hash_before_s = hash_artifacts_timed(watched)
                changed = [f"{m} (found before {what})" for m in changed_artifacts(start_artifacts, before)]
                if changed:
                    return changed
                began = time.monotonic()
                order = len(state.records) + 1
                records = ([self.run_slot(series_dir, journal, unit[0], order=order, resume_hint=resume_hint)]
                           if len(unit) == 1 else
                           self.run_pair(series_dir, journal, unit, order=order, resume_hint=resume_hint))
                durations += [(time.monotonic() - began) / len(unit)] * len(unit)
                after, hash_after_s = hash_artifacts_timed(watched)
                changed = [f"{m} (during {what})" for m in changed_artifacts(start_artifacts, after)]
                stop: Sequence[str] | None = None
                for record in records:  # a pair is journaled only whole: resume re-runs a pair cut off
                    if changed:
                        record = dataclasses.replace(record, artifacts_ok=False)
                    written = journal.append("run_end", record=record.to_dict(),
                                             hash_s=[hash_before_s, hash_after_s])
                    state.hash_s += [hash_before_s, hash_after_s]
                    record = state.records[record.label] = RunRecord.from_dict(written["record"])
                    self.report(run_line(record, primary, series_dir))
                    stop = stop or check(record)
                if changed:
                    return changed
                if stop:
                    return list(stop)
            added = more(state)
            if not added:
                return []
            slots += added

    def units(self, pending: Sequence[Slot]) -> list[list[Slot]]:
        """What runs at once: each run alone, or in a duet the off and on runs of one pair together."""
        if self.config.duet is None:
            return [[slot] for slot in pending]
        pairs: dict[int, list[Slot]] = {}
        for slot in pending:
            pairs.setdefault(slot.round, []).append(slot)
        return list(pairs.values())

    def run_slot(self, series_dir: Path, journal: Journal, slot: Slot, *, order: int, resume_hint: str) -> RunRecord:
        run = self._open_run(series_dir, journal, slot, order=order)
        known = child_pids()  # the gate's own children before the run: never an escapee of it
        try:
            with run.sampler:
                outcome = safe_outcome(self.driver.run(run.request))
        except KeyboardInterrupt:
            ignore_further_interrupts()
            journal.append("interrupted", label=slot.label)
            self._stop_escapees(journal, run.request.run_dir, slot.label, known)
            atomic_write_text(run.request.run_dir / "samples.csv", samples_csv(run.sampler.samples))
            raise SeriesInterrupted(f"interrupted during {slot.label}; {resume_hint}") from None
        return self._close_run(journal, run, outcome,
                               self._stop_escapees(journal, run.request.run_dir, slot.label, known))

    def run_pair(self, series_dir: Path, journal: Journal, pair: Sequence[Slot], *, order: int,
                 resume_hint: str) -> list[RunRecord]:
        """A duet pair: both runs released from one barrier, each on its slot, each with its own sampler."""
        runs = [self._open_run(series_dir, journal, slot, order=order + i) for i, slot in enumerate(pair)]
        known = child_pids()
        outcomes, released = run_together(self.driver, runs)
        try:
            outcomes.wait()
        except KeyboardInterrupt:
            ignore_further_interrupts()
            for run in runs:  # the threads' trainers: the main thread alone sees the interrupt
                stop_run_processes(run.request.run_dir, LEFTOVER_GRACE_S)
            outcomes.wait()
            journal.append("interrupted", label=" + ".join(s.label for s in pair))
            self._stop_pair_escapees(journal, runs, known)
            for run in runs:
                atomic_write_text(run.request.run_dir / "samples.csv", samples_csv(run.sampler.samples))
            raise SeriesInterrupted(f"interrupted during pair r{pair[0].round}; the pair runs again; "
                                    f"{resume_hint}") from None
        skew_ms = (max(released) - min(released)) * 1000 if len(released) == len(runs) else None
        journal.append("duet_pair", round=pair[0].round, labels=[s.label for s in pair],
                       start_skew_ms=None if skew_ms is None else round(skew_ms, 3))
        escaped = self._stop_pair_escapees(journal, runs, known)
        return [self._close_run(journal, run, outcome, escaped[run.slot.label])
                for run, outcome in zip(runs, outcomes.results)]

    def _open_run(self, series_dir: Path, journal: Journal, slot: Slot, *, order: int) -> OpenRun:
        """The run's folder (a folder left by a cut-off run is kept aside), its request and its sampler."""
        run_dir = series_dir / slot.label
        if run_dir.exists():  # cut off mid-way earlier: keep its files, run it again
            attempt = 1
            while (series_dir / f"{slot.label}.cut-{attempt}").exists():
                attempt += 1
            run_dir.rename(series_dir / f"{slot.label}.cut-{attempt}")
        run_dir.mkdir()
        device = self.device_slot(slot)
        request = RunRequest(arm=arm_input(self.arms[slot.arm]), label=slot.label, run_dir=run_dir,
                             result_path=run_dir / RESULT_FILE, timeout_s=self.config.driver.timeout_s,
                             stdout_path=run_dir / "stdout.log", stderr_path=run_dir / "stderr.log",
                             env=device.env() if device else {}, cpus=device.cores if device else ())
        started_at = now().isoformat(timespec="seconds")
        journal.append("run_start", label=slot.label, order=order, started_at=started_at,
                       **({"slot": device.text} if device else {}))
        backend = slot_backend(self.backend.backend, device)
        sampler = WindowSampler(self.config.rules.sample_interval_s, read=self.load_reader_for(slot.label),
                                telemetry=slot_telemetry(backend, device))
        return OpenRun(slot, order, request, sampler, backend, device, started_at)

    def _close_run(self, journal: Journal, run: OpenRun, outcome: RunOutcome, escaped: tuple[str, ...]) -> RunRecord:
        """`escaped`: the evidence lines of the processes that escaped the run (already stopped)."""
        run_dir = run.request.run_dir
        atomic_write_text(run_dir / "samples.csv", samples_csv(run.sampler.samples))
        telemetry = [s.extra for s in run.sampler.samples]
        window = WindowSummary.of(run.sampler.samples,
                                  evidence=tuple(run.backend.window_evidence(telemetry)) + escaped,
                                  telemetry={**run.backend.summarize(telemetry), **slot_summary(telemetry)})
        record = RunRecord(order=run.order, arm=run.slot.arm, label=run.slot.label, pair=run.slot.round,
                           outcome=outcome, window=window, retry_of=run.slot.retry_of, started_at=run.started_at,
                           slot=run.device.text if run.device else None)
        atomic_write_text(run_dir / "record.json", json.dumps(record.to_dict(), indent=2, allow_nan=False))
        return record

    def device_slot(self, slot: Slot) -> DeviceSlot | None:
        """The duet slot a run takes by the swap rule; None outside a duet."""
        if self.config.duet is None:
            return None
        off_arm = next(iter(self.arms))  # the loop's arms are {off: …, on: …}
        # a replacement pair keeps the slots of the pair it replaces, so the slots stay balanced
        return self.config.duet.slots[slot_for(slot.arm == off_arm, slot.retry_of or slot.round)]

    def _stop_escapees(self, journal: Journal, run_dir: Path, label: str, known: set[int],
                       source: str = "the run") -> tuple[str, ...]:
        """Stop and reap the processes that escaped this run (re-parented to the gate, or still naming its
        run directory), journal them as `escaped`, and return the window evidence line naming them."""
        escaped = stop_escapees(run_dir, known, LEFTOVER_GRACE_S)
        if not escaped:
            return ()
        journal.append("escaped", label=label, processes=[e.to_dict() for e in escaped])
        return (escaped_evidence(escaped, source),)

    def _stop_pair_escapees(self, journal: Journal, runs: Sequence[OpenRun],
                            known: set[int]) -> dict[str, tuple[str, ...]]:
        """A duet pair's escapees, by run. Both runs' orphans are the gate's children by now, so each run
        first takes the processes whose environment names its own run directory (and what they started);
        an orphan that names neither (a cleared environment) could have come from either run, so it is
        evidence for both — each run's contamination rule can then see it."""
        both_orphans = child_pids()  # left out of the runs' own sweeps: no orphan is charged to the wrong run
        evidence = {run.slot.label: self._stop_escapees(journal, run.request.run_dir, run.slot.label, both_orphans)
                    for run in runs}
        labels = " + ".join(run.slot.label for run in runs)
        # the series folder as the marker: a process naming either run directory is gone already
        unmarked = self._stop_escapees(journal, runs[0].request.run_dir.parent, labels, known, f"the pair {labels}")
        return {label: own + unmarked for label, own in evidence.items()}


class SeriesRunner:
    """Runs one gate series. `load_reader_for(label)` lets tests inject the load a run window sees;
    `backend` lets them inject a backend (e.g. one replaying recorded GPU telemetry)."""

    def __init__(self, config: GateConfig, off: ArmSpec, on: ArmSpec, *, driver: Driver | None = None,
                 backend: ChosenBackend | None = None, report: Report = lambda text: None,
                 load_reader_for: Callable[[str], LoadReader] | None = None) -> None:
        self.config = config
        self.off, self.on = off, on
        self.driver = driver or make_driver(config.driver.name, config.driver.options, source=config.path,
                                            base_dir=config.base_dir)
        self.backend = backend or make_backend(config.backend.name, config.backend.options, source=config.path)
        self.report = report
        self.loop = RunLoop(config, {off.name: off, on.name: on}, self.driver, self.backend, report,
                            load_reader_for or (lambda label: read_system_load))
        self.spec = DecisionSpec.from_gate(config, off.name, on.name)
        self.policy = policy_for(self.spec.policy, self.spec.sequential_version)

    # -- entry points ----------------------------------------------------------------------------

    def preflight(self) -> list[CheckResult]:
        return run_checks(self.config, [self.off, self.on], self.driver, self.backend)

    def start(self) -> SeriesResult:
        """Preflight, preregister, and run a new series."""
        failed = [c for c in self.preflight() if not c.ok]
        if failed:
            raise PreflightError("preflight failed, nothing ran: " + "; ".join(f"{c.name}: {c.detail}" for c in failed))
        runs_dir = self.config.gate.runs
        with runs_lock(runs_dir):
            started = now()
            series_dir = new_series_dir(runs_dir, f"{self.config.gate.id}-{started:%Y%m%d-%H%M%S}")
            journal = Journal(series_dir / JOURNAL_FILE, genesis=series_dir / PREDECISION_FILE)
            state, predecision = self._preregister(series_dir, series_dir.name, started, journal)
            return self._execute(OpenSeries(series_dir, state, predecision, self.config, self.off, self.on), journal)

    def resume(self, opened: OpenSeries | Path) -> SeriesResult:
        """Continue an interrupted series (read once by `open_series`) without redoing finished runs."""
        if isinstance(opened, Path):
            opened = open_series(opened, self.config.path)
        series_dir, state, predecision = opened.series_dir, opened.state, opened.predecision
        if (series_dir / DONE_FILE).exists():
            raise SeriesError(f"{series_dir}: this series is finished (DONE exists); start a new one")
        registered = predecision.get("backend", {}).get("name")
        if registered and registered != self.backend.name:
            raise SeriesError(f"{series_dir}: was registered with the {registered} backend, but this machine "
                              f"gives {self.backend.name} ({self.backend.detail}); resume it where it started")
        self.spec = DecisionSpec.from_dict(predecision["decision"])  # the rules as frozen, not as read now
        self.policy = policy_for(self.spec.policy, self.spec.sequential_version)
        with runs_lock(series_dir.parent):
            journal = Journal(series_dir / JOURNAL_FILE, genesis=series_dir / PREDECISION_FILE)
            # Holding the lock, no gate process owns this series: whatever still runs in one of its run
            # directories is a trainer orphaned by a killed gate, and would load the runs to come.
            leftovers = [pid for prefix in dict.fromkeys((series_dir.absolute(), series_dir.resolve()))
                         for pid in stop_run_processes(prefix, LEFTOVER_GRACE_S)]
            if leftovers:
                journal.append("leftovers_stopped", pids=leftovers)
                self.report(f"stopped {len(leftovers)} leftover trainer process(es) of the interrupted run: "
                            + ", ".join(f"pid {pid}" for pid in leftovers))
            if state.end is None and not state.problems:
                failed = [c for c in self.preflight() if not c.ok]
                if failed:
                    raise PreflightError("preflight failed, nothing more ran: "
                                         + "; ".join(f"{c.name}: {c.detail}" for c in failed))
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
        finding_id = _reserve_finding_id(out_dir, f"{config.gate.id}-{started:%Y-%m-%d}", series_id)
        start = {
            "event": "series_start", "series_id": series_id, "finding_id": finding_id,
            "date": f"{started:%Y-%m-%d}", "started": started.isoformat(timespec="seconds"),
            "gate_path": str(config.path), "gate_sha256": gate_sha256, "predecision_sha256": predecision_sha,
            "off_arm": self.off.name, "on_arm": self.on.name, "out_dir": str(out_dir),
            "schedule": [s.to_dict() for s in schedule],
            "arms": {a.name: {"config": str(a.config) if a.config else "", "args": list(a.args),
                              "env": redacted_env(a.env, config.gate.record_env)}
                     for a in (self.off, self.on)},
            "provenance_start": {"artifacts": artifacts, "git": git_state(config.base_dir).to_dict(),
                                 "host": host_fingerprint(), "software": software_versions(),
                                 "backend": {"name": self.backend.name, **self.backend.backend.provenance()},
                                 "hashing": {"artifact_bytes": artifact_bytes(config.driver.hash), "hash_s": hash_s}},
        }
        try:
            start = journal.append(**start)
        except OutputError as exc:  # nothing ran yet: a plain error (exit 2), and nothing to resume
            what = str(exc).split("; every earlier event")[0]
            raise GatekitError(f"{what}; nothing ran — free space or fix permissions and start the series "
                               "again") from None
        self.report(f"preregistered {series_dir / PREDECISION_FILE} (sha256 {predecision_sha[:12]}…)")
        return JournalState(start=start), tomlkit.parse(text).unwrap()

    def _backend_registration(self) -> dict[str, Any]:
        """The backend as preregistered: its name, what the gate file asked for, options, evidence rules."""
        return {"name": self.backend.name, "requested": self.backend.requested, "chosen": self.backend.detail,
                "options": dict(self.backend.options), "evidence_rules": self.backend.backend.evidence_rules()}

    def _execute(self, opened: OpenSeries, journal: Journal) -> SeriesResult:
        series_dir, state = opened.series_dir, opened.state
        if state.end is not None or state.problems:  # ended (invalid or finished) before its finding
            return self._finish(opened, journal)
        slots = [Slot.from_dict(s) for s in state.start["schedule"]]
        slots += [s for r in state.retries for s in
                  retry_slots(self.off.name, self.on.name, r["round"], r["replaces"], r.get("first"))]
        slots += [Slot.from_dict(s) for e in state.extensions for s in e["slots"]]
        logs: dict[str, Path] = {}  # a stop's message -> the failed run's log, printed (absolute) beside it

        def stop_at_unretryable(record: RunRecord) -> list[str]:
            message = self._unretryable(state, record, slots)
            if message:
                logs[message] = (series_dir / record.label / "stderr.log").absolute()
            return [message] if message else []

        # a series cut off between a failed run and its stop (killed, power loss) stops on resume, too
        stops = [m for r in sorted(state.records.values(), key=lambda r: r.order) for m in stop_at_unretryable(r)]
        changed = stops[:1] or self.loop.run(series_dir, journal, state, slots, primary=self.spec.primary,
                                         start_artifacts={**state.start["provenance_start"]["artifacts"],
                                                          **_arm_config_hashes(opened.predecision)},
                                         resume_hint=f"resume with: gate run --resume {series_dir}",
                                         more=lambda current: self._more_slots(opened, journal),
                                         check=stop_at_unretryable)
        for message in changed:
            journal.append("invalid", reason=message)
            state.problems.append(message)
            self.report(f"INVALID: {message}" + (f"; its log: {logs[message]}" if message in logs else ""))
        return self._finish(opened, journal)

    def _unretryable(self, state: JournalState, record: RunRecord, slots: Sequence[Slot]) -> str:
        """Why the series stops after `record`, or '' to go on. A failed run that its policy leaves unresolved
        and that no retry is left for makes the series invalid by the preregistered rules, whatever runs next
        (analysis: "… and its pair has no retry left"), so the runs still to come would only cost time."""
        if not record.failed or record.pair == WARMUP_ROUND:  # a failed warm-up run is discarded, never retried
            return ""
        classified = classify(list(state.records.values()), self.spec, replacements(state.retries), state.cores)
        unresolved = set(classified.loc[self.policy.unresolved(classified), "label"])
        if record.label not in unresolved or any(r["replaces"] == record.pair for r in self._plan_retries(state)):
            return ""
        left = sum(1 for s in slots if s.label not in state.records)
        return (f"stopped after {record.label}: its failure cannot be retried (rules.max_retries = "
                f"{self.spec.rules.max_retries}), so the series is invalid whatever runs next; {left} scheduled "
                "run(s) not run")

    def _more_slots(self, opened: OpenSeries, journal: Journal) -> list[Slot]:
        """Retries of flagged pairs; when none are due, the policy's next stage if it asks for one."""
        state = opened.state
        new = self._plan_retries(state)
        if new:
            slots = []
            for retry in new:
                state.retries.append(journal.append("retry", **retry))
                slots += retry_slots(self.off.name, self.on.name, retry["round"], retry["replaces"],
                                     retry.get("first"))
                why = "; ".join(f"{label} {info['detail']}" for label, info in retry["flagged"].items())
                self.report(f"retrying pair r{retry['replaces']} as r{retry['round']}: {why}")
            return slots
        stage = self._plan_extension(opened)
        if stage is None:
            return []
        state.extensions.append(journal.append("extend", **stage))
        number = stage["stage"] - 1  # the look that did not decide
        self.report(f"look {number} did not decide: extending to "
                    f"{design_for(self.spec.sequential_version).runs[number]} runs per arm")
        return [Slot.from_dict(s) for s in stage["slots"]]

    def _plan_retries(self, state: JournalState) -> list[dict[str, Any]]:
        """Pairs with a failed or contaminated run get a re-run pair, at most max_retries per original pair."""
        retry_of = {r["round"]: r["replaces"] for r in state.retries}
        classified = classify(list(state.records.values()), self.spec, replacements(state.retries), state.cores)
        next_round = max(r.pair for r in state.records.values()) + 1
        retries = []
        for retry in sorted(self.policy.retries(classified, self.spec.rules, self.off.name, self.on.name),
                            key=lambda r: r.replaces):
            root = rules.lineage_root(retry.replaces, retry_of)
            used = sum(1 for r in state.retries if rules.lineage_root(r["replaces"], retry_of) == root)
            if used >= self.spec.rules.max_retries:
                continue
            event: dict[str, Any] = {"round": next_round, "replaces": retry.replaces, "flagged": retry.flagged,
                                     "reason": f"pair re-run as r{next_round}{retry.reason_suffix}"}
            if retry.first is not None:
                event["first"] = retry.first
            retries.append(event)
            next_round += 1
        return retries

    def _plan_extension(self, opened: OpenSeries) -> dict[str, Any] | None:
        """The policy's next stage when its look — assessed exactly as the finding will be, narrative aside —
        did not decide; None after the last stage or when the look decided."""
        state = opened.state
        runs = design_for(self.spec.sequential_version).runs  # rounds per look (only a sequential series extends)
        stage = len(state.extensions) + 2  # stage 1 is the preregistered schedule
        if stage > len(runs) or not assess(evidence_from_state(opened)).decided.extend:
            return None
        seed = self.spec.seed if self.spec.seed is not None else order_seed(state.start["predecision_sha256"])
        done, target = runs[stage - 2], runs[stage - 1]
        slots = extension(self.off.name, self.on.name, self.spec.order, seed, done_rounds=done,
                          more_rounds=target - done, first_round=max(r.pair for r in state.records.values()) + 1)
        return {"stage": stage, "slots": [s.to_dict() for s in slots],
                "reason": f"look {stage - 1} undecided: extend to {target} runs per arm"}

    def _finish(self, opened: OpenSeries, journal: Journal) -> SeriesResult:
        series_dir, state = opened.series_dir, opened.state
        if state.end is None:  # a resumed series whose finding could not be written has ended already
            artifacts, hash_s = hash_artifacts_timed(self.config.driver.hash)
            end = {"event": "series_end",
                   "provenance_end": {"artifacts": artifacts, "git": git_state(self.config.base_dir).to_dict(),
                                      "hash_s": hash_s},
                   "finished": now().isoformat(timespec="seconds")}
            state.end = journal.append(**end)
        # The state is the journal as written, event for event, so this is what `gate analyze` computes; the
        # journal itself knows its chain head after the last event (escaped, retry, … included).
        state.chain_head, state.legacy = journal.head, journal.legacy
        finding = analyze(evidence_from_state(opened))
        out_dir = Path(state.start["out_dir"])
        try:
            _remove_stale_temp_files(out_dir)  # what a gate killed while writing a finding left there
            _check_finding_id(out_dir, state.start["finding_id"], state.start["series_id"])
            paths = write_finding(finding, out_dir)
            atomic_write_text(series_dir / DONE_FILE, f"{finding.decision.value}\n{paths[0]}\n")
            # The finding now holds its id (its meta.series_id is this series): the marker has done its job.
            _reservation(out_dir, state.start["finding_id"]).unlink(missing_ok=True)
        except (GatekitError, OSError) as exc:
            what = exc if isinstance(exc, GatekitError) else f"{exc.filename}: {exc.strerror or exc}"
            raise OutputError(f"{what}. The series itself is complete and journaled in {series_dir}: fix the "
                              f"folder, then write the finding with: gate run --resume {series_dir}") from None
        return SeriesResult(series_dir, finding, paths)


def run_line(record: RunRecord, primary: str, series_dir: Path | None = None) -> str:
    """The progress line of a finished run, its primary metric under its own name; a failed run's log by its
    absolute path (given the series folder), as every other path gate prints."""
    if record.failed:
        log = (series_dir / record.label / "stderr.log").absolute() if series_dir else f"{record.label}/stderr.log"
        return f"      {record.label} FAILED: {record.outcome.error} (see {log})"
    value = record.value_of(primary)
    shown = number_text(value) if value is not None else "missing"
    return (f"      {record.label} {primary} = {shown}, wallclock {record.outcome.process_wallclock_s:.2f} s, "
            f"load1 mean {record.window.load1_mean or 0:.2f} over {record.window.samples} samples"
            + "".join(f"; evidence: {line}" for line in record.window.evidence))


def new_series_dir(runs_dir: Path, name: str) -> Path:
    """A fresh folder `<runs>/<name>` (suffixed -2, -3, … when taken), created."""
    series_dir, suffix = runs_dir / name, 1
    while series_dir.exists():
        suffix += 1
        series_dir = runs_dir / f"{name}-{suffix}"
    series_dir.mkdir(parents=True)
    return series_dir


# atomic_write_bytes' temp files: `.<name>.<8 random characters>.tmp` (tempfile.mkstemp's pattern).
_TEMP_FILE = re.compile(r"\..+\.[A-Za-z0-9_]{8}\.tmp")
STALE_TEMP_S = 60.0


def _remove_stale_temp_files(folder: Path) -> list[Path]:
    """Remove the temp files of atomic writes that a killed gate left in `folder`: our own naming pattern,
    last written before this process started and over a minute ago (a live writer's temp file is seconds
    old). Returns what it removed; a folder it cannot list or a file it cannot remove is left alone."""
    began = psutil.Process().create_time()  # wall-clock timestamps on both sides: a comparison, no duration
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not _TEMP_FILE.fullmatch(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_mtime < began - STALE_TEMP_S:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def _reservation(out_dir: Path, finding_id: str) -> Path:
    """The marker `<out>/.<id>.reserved` that holds a finding id for one series (its series id inside)."""
    return out_dir / f".{finding_id}{RESERVED_SUFFIX}"


def _reserve_finding_id(out_dir: Path, base: str, series_id: str) -> str:
    """The first id of `base`, `base-2`, … that no finding and no other series holds, reserved for this
    series at its start by an exclusive create of its marker (O_CREAT|O_EXCL: of two series starting at
    once, one gets it). An interrupted series keeps its id until its finding is written, so a series that
    starts and finishes meanwhile takes the next one. An out folder that cannot be written now gives the id
    unreserved; `_finish` still refuses to overwrite another series' finding."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # a file in its way or no permission: the finding write names the problem later
    _remove_stale_temp_files(out_dir)
    candidate, k = base, 1
    while True:
        if not any((out_dir / f"{candidate}{suffix}").exists() for suffix in (".toml", ".json")):
            marker = _reservation(out_dir, candidate)
            try:
                fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                pass  # another series holds it
            except OSError:
                return candidate
            else:
                try:
                    with os.fdopen(fd, "w") as handle:
                        handle.write(f"{series_id}\n")
                except OSError:  # a full disk: no half marker left behind
                    marker.unlink(missing_ok=True)
                return candidate
        k += 1
        candidate = f"{base}-{k}"


def _finding_owner(path: Path) -> str:
    """meta.series_id of the finding file at `path` ('' when it names none or cannot be read)."""
    try:
        data = json.loads(path.read_text()) if path.suffix == ".json" else tomllib.loads(path.read_text())
        owner = data.get("meta", {}).get("series_id")
    except (OSError, ValueError, AttributeError):
        return ""
    return owner if isinstance(owner, str) else ""


def _check_finding_id(out_dir: Path, finding_id: str, series_id: str) -> None:
    """Refuse to write this series' finding over one another series wrote or reserved."""
    marker = _reservation(out_dir, finding_id)
    try:
        holder = marker.read_text().strip() if marker.is_file() else series_id
    except OSError:
        holder = series_id
    owners = [(marker, holder)] + [(path, _finding_owner(path)) for suffix in (".json", ".toml")
                                   if (path := out_dir / f"{finding_id}{suffix}").is_file()]
    for path, owner in owners:
        if owner != series_id:
            raise OutputError(f"{path}: finding id '{finding_id}' belongs to series '{owner or 'unknown'}', not "
                              f"to this series '{series_id}'; refusing to overwrite it (move it away to write "
                              "this one)")


def _check_gate_file(path: Path, start: Mapping[str, Any]) -> None:
    current = sha256_file(path)
    if current != start["gate_sha256"]:
        raise SeriesError(f"{path}: changed since the series started (sha256 {start['gate_sha256']} -> "
                          f"{current}); restore it or start a new series")


def _arm_config_hashes(predecision: Mapping[str, Any]) -> dict[str, str]:
    """{path: sha256} of the arm configs as preregistered: watched around every run like the artifacts."""
    return {info["path"]: info["sha256"] for info in predecision["arm_configs"].values() if info.get("path")}


def _check_arm_configs(predecision: Mapping[str, Any]) -> None:
    for arm, info in predecision["arm_configs"].items():
        path = info.get("path")
        if path:
            current = sha256_file(Path(path)) if Path(path).is_file() else "missing"
            if current != info["sha256"]:
                raise SeriesError(f"{path}: arm config of '{arm}' changed since the series started (sha256 "
                                  f"{info['sha256']} -> {current}); restore it or start a new series")


def verify_unchanged(series_dir: Path, state: JournalState, config: GateConfig) -> dict[str, Any]:
    """Refuse to continue or analyse a series whose predecision, gate file or arm configs changed; returns
    the verified predecision."""
    start = state.start
    predecision = read_predecision(series_dir, start["predecision_sha256"])
    gate_path = Path(start["gate_path"])
    if gate_path != config.path:
        raise SeriesError(f"{series_dir}: was started with gate file {gate_path}, not {config.path}")
    _check_gate_file(config.path, start)
    _check_arm_configs(predecision)
    return predecision


@dataclass(frozen=True, slots=True)
class OpenSeries:
    """A series as read from disk once: its journal replayed, its predecision verified, its gate and arms."""

    series_dir: Path
    state: JournalState
    predecision: Mapping[str, Any]
    config: GateConfig
    off: ArmSpec
    on: ArmSpec


def open_series(series_dir: Path, gate_path: Path | None = None) -> OpenSeries:
    """Read a series for `--resume`: the journal replayed once; the gate file (the one it was started with,
    or the one given, which must be the same file) hashed before it is parsed, so an edited gate file is
    refused as changed even when the edit also broke it; the predecision and arm configs verified."""
    state = read_state(series_dir)
    start = state.start
    registered = Path(start["gate_path"])
    path = (gate_path or registered).resolve()
    if path == registered and path.is_file():
        _check_gate_file(path, start)
    config = load_gate(path)
    if registered != config.path:
        raise SeriesError(f"{series_dir}: was started with gate file {registered}, not {config.path}")
    predecision = read_predecision(series_dir, start["predecision_sha256"])
    _check_arm_configs(predecision)
    arms = []
    for name in (start["off_arm"], start["on_arm"]):
        if name in config.arms:
            arms.append(config.arms[name])
        else:  # an ad-hoc arm given as a path to its .toml (sha256 verified above): read again from it
            info = start["arms"][name]
            arm = config.arm(info["config"]) if info["config"] else ArmSpec(name=name)
            if any(str(v).startswith(REDACTED_PREFIX) for v in info["env"].values()):  # never run on a hash
                raise SeriesError(f"{series_dir}: arm '{name}' had environment values that were only journaled "
                                  "redacted; resume it with a gate file that defines the arm")
            arms.append(dataclasses.replace(arm, name=name, args=tuple(info["args"]),
                                            env=arm.env or dict(info["env"])))
    return OpenSeries(series_dir, state, predecision, config, arms[0], arms[1])


def evidence_from_state(opened: OpenSeries | tuple[Path, JournalState, Mapping[str, Any]]) -> SeriesEvidence:
    """Everything analysis needs, from the journal and the verified predecision alone."""
    if isinstance(opened, OpenSeries):
        series_dir, state, predecision = opened.series_dir, opened.state, opened.predecision
    else:
        series_dir, state, predecision = opened
    start = state.start
    spec = DecisionSpec.from_dict(predecision["decision"])
    base = git_root(Path(start["gate_path"]).parent) or Path(start["gate_path"]).parent
    provenance: dict[str, Any] = {
        "artifacts": {"start": _relative_keys(start["provenance_start"]["artifacts"], base)},
        "git": {"start": start["provenance_start"]["git"]},
        "host": start["provenance_start"]["host"],
        "software": start["provenance_start"]["software"],
    }
    if "backend" in start["provenance_start"]:
        provenance["backend"] = start["provenance_start"]["backend"]
    hashing = start["provenance_start"].get("hashing")
    if hashing is not None:  # how long sha256 of the artifacts took, all of it outside the timed windows
        between = list(state.hash_s)
        end_s = state.end["provenance_end"].get("hash_s") if state.end is not None else None
        provenance["hashing"] = {
            "artifact_bytes": hashing["artifact_bytes"], "series_start_s": hashing["hash_s"],
            "between_runs_count": len(between), "between_runs_max_s": max(between, default=0.0),
            "total_s": hashing["hash_s"] + sum(between) + (end_s or 0.0)}
    warnings: list[str] = [LEGACY_JOURNAL_WARNING] if state.legacy else []
    problems = list(state.problems)
    if state.end is not None:
        end = state.end["provenance_end"]
        provenance["artifacts"]["end"] = _relative_keys(end["artifacts"], base)
        provenance["git"]["end"] = end["git"]
        problems += [m for m in changed_artifacts(start["provenance_start"]["artifacts"], end["artifacts"])
                     if m not in problems]
        rev_start, rev_end = start["provenance_start"]["git"].get("rev"), end["git"].get("rev")
        if rev_start and rev_end and rev_start != rev_end:
            diff = git_diff_stat(Path(start["gate_path"]).parent, rev_start, rev_end)
            provenance["git"]["moved"] = True
            provenance["git"]["diff_stat"] = diff
            warnings.append(f"git HEAD moved during the series ({rev_start[:12]} -> {rev_end[:12]}); "
                            f"files touched: {diff.strip().splitlines()[-1] if diff.strip() else 'unknown'}")
    replaced = replacements(state.retries)
    records = tuple(sorted(state.records.values(), key=lambda r: r.order))
    config_paths = [_display(Path(a["config"]), base) for a in start["arms"].values() if a["config"]]
    return SeriesEvidence(
        series_id=start["series_id"], finding_id=start["finding_id"], spec=spec, records=records,
        replaced=replaced, date=start["date"],
        predecision_path=_display(series_dir / PREDECISION_FILE, base),
        predecision_sha256=start["predecision_sha256"], provenance=provenance,
        invalid_reasons=tuple(problems), warnings=tuple(warnings), config_paths=tuple(config_paths),
        related_runs=tuple(_display(series_dir / r.label, base) for r in records),
        chain_head=state.chain_head,
    )


def _display(path: Path, base: Path) -> str:
    """Paths in findings are relative to the repository (or gate folder), so they read the same anywhere."""
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def _relative_keys(hashes: Mapping[str, str], base: Path) -> dict[str, str]:
    return {_display(Path(p), base): h for p, h in hashes.items()}


def analyze_series(series_dir: Path, config: GateConfig | None = None) -> Finding:
    """Recompute a series' finding offline: the evidence verified first (`verify.verify_series`: the
    journal's hash chain, the predecision hash, every record.json; exit 3 on tampering), then the journal
    replayed once (and, given the gate's config, the gate file and arm configs checked too)."""
    from gatekit.verify import verify_series

    verify_series(series_dir)
    return analyze_unverified(series_dir, config)


def analyze_unverified(series_dir: Path, config: GateConfig | None = None) -> Finding:
    """`analyze_series` without the verification (the verifier's own recomputation)."""
    state = read_state(series_dir)
    if config is not None:
        predecision = verify_unchanged(series_dir, state, config)
    else:
        predecision = read_predecision(series_dir, state.start["predecision_sha256"])
    return analyze(evidence_from_state((series_dir, state, predecision)))

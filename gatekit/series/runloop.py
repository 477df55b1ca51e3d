"""THE run loop (`gate run`, `--resume` and `gate calibrate` use it) and what a folder of runs needs around
it: one series at a time per runs folder, a fresh series folder, the wall-clock label, the progress line.

Every finished run is journaled (fsynced) before the next one starts, so a crash loses at most the run
in flight, and `resume` re-runs only that one.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import secrets
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from gatekit.config import ArmSpec, GateConfig
from gatekit.driver import ChosenBackend, Driver, RunRequest
from gatekit.duet_runs import OpenRun, run_together, slot_backend, slot_summary, slot_telemetry
from gatekit.errors import OutputError, SeriesError, SeriesInterrupted
from gatekit.formatting import number_text
from gatekit.preflight import arm_input
from gatekit.processes import child_pids, child_subreaper, escaped_evidence, stop_escapees, stop_run_processes
from gatekit.provenance import (changed_artifacts, file_identities, hash_artifacts_timed, hash_files,
                                touched_artifacts)
from gatekit.quality import with_derived_primary
from gatekit.records import LoadSample, RunOutcome, RunRecord, WindowSummary
from gatekit.sampler import LoadReader, WindowSampler, samples_csv, stopped_gate
from gatekit.sanitize import safe_outcome, show_controls
from gatekit.schedule import Slot
from gatekit.series_events import DuetPair, Escaped, Interrupted, RunEnd, RunStart
from gatekit.series_replay import RunLog
from gatekit.signals import ignore_further_interrupts, interrupt_on_sigterm
from gatekit.slots import DeviceSlot, slot_for
from gatekit.storage import Journal, RunFolder, SeriesLayout, atomic_write_text, pid_lock

Report = Callable[[str], None]


def now() -> dt.datetime:
    """Wall time with the local zone, for people (durations use monotonic clocks)."""
    return dt.datetime.now().astimezone()


@contextmanager
def runs_lock(runs_dir: Path) -> Iterator[None]:
    """One series at a time per runs folder: two interleaved series would contaminate each other."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    with pid_lock(SeriesLayout.lock(runs_dir), lambda holder: SeriesError(
            f"{runs_dir}: another series is running here ({holder}); wait for it or use another `runs` folder")):
        yield


class RunLoop:
    """THE run loop, used by `gate run`, `--resume` and `gate calibrate`: each slot runs with the gate's
    driver, the sampler and the backend's telemetry; artifacts are hashed around every run; every finished
    run is journaled (fsynced) before the next starts; an interrupt stops the trainer and is journaled."""

    def __init__(self, config: GateConfig, arms: Mapping[str, ArmSpec], driver: Driver, backend: ChosenBackend,
                 report: Report, load_reader_for: Callable[[str], LoadReader]) -> None:
        self.config, self.arms, self.driver, self.backend = config, arms, driver, backend
        self.report, self.load_reader_for = report, load_reader_for
        # the gate's own children when its run loop began: never an escapee of a run. Any other child alive
        # after a run is one, also if it outlived an earlier run's sweep (it is never "known" for later runs)
        self.own_children: frozenset[int] = frozenset()
        # a duet's slot rule, (run is off, pair) → slot 0 or 1: the preregistered design's (SeriesRunner sets it
        # from its policy and predecision); version 1's swap rule until then
        self.slot_index: Callable[[bool, int], int] = slot_for
        # seconds between heartbeat lines during a run; 0: none (the CLI turns it on for a terminal, not --json)
        self.heartbeat_s = 0.0

    def run(self, series_dir: Path, journal: Journal, state: RunLog, slots: list[Slot], *, primary: str,
            start_artifacts: Mapping[str, str], resume_hint: str,
            more: Callable[[RunLog], list[Slot]] = lambda state: [],
            check: Callable[[RunRecord], Sequence[str] | None] = lambda record: None, most: int = 0) -> list[str]:
        """Run every slot not yet in `state`, then whatever `more(state)` adds, until it adds nothing.
        `most`: the most runs the policy may take (its last look's), shown as `[8/≤24]` and covered by the estimate.
        `check(record)` sees each finished run; what it returns stops the loop there. Returns the messages
        that stopped it early — changed artifacts, or what `check` returned — empty when every slot ran."""
        # The subreaper adopts every descendant whose parent exits, so a run's escapees are found after it.
        with interrupt_on_sigterm(), child_subreaper() as reaper:
            self.own_children = reaper.own
            try:
                prepare = getattr(self.driver, "prepare", None)  # optional: the command driver's warm parents
                if callable(prepare):
                    for line in prepare([arm_input(spec) for spec in self.arms.values()], self.config.driver.timeout_s):
                        self.report(line)
                return self._run(series_dir, journal, state, slots, primary, start_artifacts, resume_hint, more,
                                 check, most)
            except KeyboardInterrupt:  # between runs (a run in flight raises SeriesInterrupted itself)
                ignore_further_interrupts()
                journal.record(Interrupted(""))
                raise SeriesInterrupted(f"interrupted; {resume_hint}") from None
            except OSError as exc:  # a full or read-only disk under the series directory
                raise OutputError(f"{exc.filename or series_dir}: {exc.strerror or exc}; every finished run is in "
                                  f"the journal — fix it, then {resume_hint}") from None

    def _run(self, series_dir: Path, journal: Journal, state: RunLog, slots: list[Slot], primary: str,
             start_artifacts: Mapping[str, str], resume_hint: str, more: Callable[[RunLog], list[Slot]],
             check: Callable[[RunRecord], Sequence[str] | None], most: int = 0) -> list[str]:
        series_began = time.monotonic()
        durations: list[float] = []
        while True:
            pending = [s for s in slots if s.label not in state.records]
            for unit in self.units(pending):
                index = slots.index(unit[-1]) + 1
                counter = progress_counter(index, len(slots), most)
                what = " + ".join(s.label for s in unit)
                eta = ((sum(durations) / len(durations)) * (max(len(slots), most) - index + 1) if durations
                       else None)
                self.report(f"{counter} {what} starting{' together' if len(unit) > 1 else ''}; elapsed "
                            f"{time.monotonic() - series_began:.0f} s"
                            + (f", about {eta:.0f} s left" if eta is not None else ""))
                # Everything hashed at the start (the driver's artifacts and, for a series, the arm configs).
                watched = [Path(p) for p in start_artifacts]
                before, hash_before_s = hash_artifacts_timed(watched)
                identities = file_identities(watched)
                changed = [f"{m} (found before {what})" for m in changed_artifacts(start_artifacts, before)]
                if changed:
                    return changed
                began = time.monotonic()
                order = len(state.records) + 1
                records = ([self.run_slot(series_dir, journal, unit[0], order=order, resume_hint=resume_hint)]
                           if len(unit) == 1 else
                           self.run_pair(series_dir, journal, unit, order=order, resume_hint=resume_hint))
                durations += [(time.monotonic() - began) / len(unit)] * len(unit)
                touched = touched_artifacts(identities, file_identities(watched))
                after, hash_after_s = hash_artifacts_timed(watched)
                changed = [f"{m} (during {what})" for m in changed_artifacts(start_artifacts, after)]
                # the same bytes after the run as before it, yet written or replaced: swapped and restored inside
                # the run (or merely touched); a run that may have run something else is retried like a crash
                restored = [path for path in touched if before.get(path) == after.get(path)]
                stop: Sequence[str] | None = None
                for record in records:  # a pair is journaled only whole: resume re-runs a pair cut off
                    closed = record
                    if changed:
                        record = dataclasses.replace(record, artifacts_ok=False)
                    elif restored and not record.outcome.error:
                        record = dataclasses.replace(record, outcome=dataclasses.replace(record.outcome, error=(
                            f"{', '.join(restored)}: replaced, renamed or written during {record.label} (its inode, "
                            "size, mtime or ctime changed though its sha256 did not): an artifact swapped and "
                            "restored inside the run may be what ran")))
                    if record is not closed:  # record.json says what the journal says
                        write_record(SeriesLayout(series_dir).run(record.label), record)
                    files = hash_files(SeriesLayout(series_dir).run(record.label).evidence)
                    record = journal.record(RunEnd(record, (hash_before_s, hash_after_s), files)).record
                    state.hash_s += [hash_before_s, hash_after_s]
                    state.records[record.label] = record
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
        known = self.own_children
        try:
            with run.sampler, Heartbeat(slot.label, lambda: run.sampler.samples, self.report, self.heartbeat_s):
                outcome = safe_outcome(self.driver.run(run.request))
        except KeyboardInterrupt:
            ignore_further_interrupts()
            journal.record(Interrupted(slot.label))
            self._stop_escapees(journal, run.request.run_dir, slot.label, known)
            atomic_write_text(RunFolder(run.request.run_dir).samples, samples_csv(run.sampler.samples))
            raise SeriesInterrupted(f"interrupted during {slot.label}; {resume_hint}") from None
        return self._close_run(journal, run, outcome,
                               self._stop_escapees(journal, run.request.run_dir, slot.label, known))

    def run_pair(self, series_dir: Path, journal: Journal, pair: Sequence[Slot], *, order: int,
                 resume_hint: str) -> list[RunRecord]:
        """A duet pair: both runs released from one barrier, each on its slot, each with its own sampler."""
        runs = [self._open_run(series_dir, journal, slot, order=order + i) for i, slot in enumerate(pair)]
        known = self.own_children
        outcomes, released = run_together(self.driver, runs)
        try:
            outcomes.wait()
        except KeyboardInterrupt:
            ignore_further_interrupts()
            for run in runs:  # the threads' trainers: the main thread alone sees the interrupt
                stop_run_processes(run.request.run_dir)
            outcomes.wait()
            journal.record(Interrupted(" + ".join(s.label for s in pair)))
            self._stop_pair_escapees(journal, runs, known)
            for run in runs:
                atomic_write_text(RunFolder(run.request.run_dir).samples, samples_csv(run.sampler.samples))
            raise SeriesInterrupted(f"interrupted during pair r{pair[0].round}; the pair runs again; "
                                    f"{resume_hint}") from None
        skew_ms = (max(released) - min(released)) * 1000 if len(released) == len(runs) else None
        journal.record(DuetPair(pair[0].round, tuple(s.label for s in pair),
                                None if skew_ms is None else round(skew_ms, 3)))
        escaped = self._stop_pair_escapees(journal, runs, known)
        return [self._close_run(journal, run, outcome, escaped[run.slot.label])
                for run, outcome in zip(runs, outcomes.results)]

    def _open_run(self, series_dir: Path, journal: Journal, slot: Slot, *, order: int) -> OpenRun:
        """The run's folder (a folder left by a cut-off run is kept aside), its request and its sampler."""
        layout = SeriesLayout(series_dir)
        files = layout.run(slot.label)
        run_dir = files.path
        if run_dir.exists():  # cut off mid-way earlier: keep its files, run it again
            attempt = 1
            while layout.cut_off(slot.label, attempt).exists():
                attempt += 1
            run_dir.rename(layout.cut_off(slot.label, attempt))
        run_dir.mkdir()
        device = self.device_slot(slot)
        request = RunRequest(arm=arm_input(self.arms[slot.arm]), label=slot.label, run_dir=run_dir,
                             result_path=files.result, timeout_s=self.config.driver.timeout_s,
                             stdout_path=files.stdout, stderr_path=files.stderr,
                             env=device.env() if device else {}, cpus=device.cores if device else ())
        started_at = now().isoformat(timespec="seconds")
        journal.record(RunStart(slot.label, order, started_at, device.text if device else None))
        backend = slot_backend(self.backend.backend, device)
        sampler = WindowSampler(self.config.rules.sample_interval_s, read=self.load_reader_for(slot.label),
                                telemetry=slot_telemetry(backend, device))
        return OpenRun(slot, order, request, sampler, backend, device, started_at)

    def _close_run(self, journal: Journal, run: OpenRun, outcome: RunOutcome, escaped: tuple[str, ...]) -> RunRecord:
        """`escaped`: the evidence lines of the processes that escaped the run (already stopped)."""
        files = RunFolder(run.request.run_dir)
        atomic_write_text(files.samples, samples_csv(run.sampler.samples))
        stopped = stopped_gate(run.sampler.samples, run.sampler.interval_s)
        if stopped and not outcome.error:  # retried like a crash: no load rule could see it at n = 3
            outcome = dataclasses.replace(outcome, error=stopped)
        outcome = with_derived_primary(outcome, self.config.gate.primary, self.config.time_to_target)
        telemetry = [{"t_s": s.t_s, **s.extra} for s in run.sampler.samples]  # t_s: time-weighted summaries
        window = WindowSummary.of(run.sampler.samples,
                                  evidence=tuple(run.backend.window_evidence(telemetry)) + escaped,
                                  telemetry={**run.backend.summarize(telemetry), **slot_summary(telemetry)})
        record = RunRecord(order=run.order, arm=run.slot.arm, label=run.slot.label, pair=run.slot.round,
                           outcome=outcome, window=window, retry_of=run.slot.retry_of, started_at=run.started_at,
                           slot=run.device.text if run.device else None)
        write_record(files, record)
        return record

    def device_slot(self, slot: Slot) -> DeviceSlot | None:
        """The duet slot a run takes by the swap rule; None outside a duet."""
        if self.config.duet is None:
            return None
        off_arm = next(iter(self.arms))  # the loop's arms are {off: …, on: …}
        # a replacement pair keeps the slots of the pair it replaces, so the slots stay balanced
        return self.config.duet.slots[self.slot_index(slot.arm == off_arm, slot.retry_of or slot.round)]

    def _stop_escapees(self, journal: Journal, run_dir: Path, label: str, known: Iterable[int],
                       source: str = "the run") -> tuple[str, ...]:
        """Stop and reap the processes that escaped this run (re-parented to the gate, or still naming its
        run directory), journal them as `escaped`, and return the window evidence line naming them."""
        escaped = stop_escapees(run_dir, known)
        if not escaped:
            return ()
        journal.record(Escaped(label, tuple(escaped)))
        return (escaped_evidence(escaped, source),)

    def _stop_pair_escapees(self, journal: Journal, runs: Sequence[OpenRun],
                            known: Iterable[int]) -> dict[str, tuple[str, ...]]:
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


class Heartbeat:
    """A line every `every_s` while a run is in flight (a real trainer's run takes minutes, and nothing else is
    printed meanwhile): its elapsed time and its window's load so far. `every_s` 0: silent. The clock is
    injectable, so what it prints is tested without waiting; the thread only calls `beat` on a timer."""

    def __init__(self, label: str, samples: Callable[[], Sequence[LoadSample]], report: Report, every_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.samples, self.report, self.every_s, self.clock = label, samples, report, every_s, clock
        self.began = self.next_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.began = self.clock()
        self.next_at = self.began + self.every_s

    def beat(self) -> str | None:
        """The line due now, if one is (at most one per `every_s`, however late the call)."""
        now = self.clock()
        if now < self.next_at:
            return None
        while self.next_at <= now:
            self.next_at += self.every_s
        loads = [s.load1 for s in self.samples()]
        load = (f"window load1 max {max(loads):.2f}, last {loads[-1]:.2f}" if loads else "no window sample yet")
        return f"      {self.label} running: elapsed {now - self.began:.0f} s, {load}"

    def __enter__(self) -> Heartbeat:
        if self.every_s > 0:
            self.start()
            self._thread = threading.Thread(target=self._loop, name=f"heartbeat {self.label}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(max(0.0, self.next_at - self.clock())):
            line = self.beat()
            if line is not None:
                self.report(line)


def progress_counter(index: int, scheduled: int, most: int = 0) -> str:
    """`[8/24]`, or `[8/≤24]` while the policy may still extend past the runs scheduled so far (a sequential
    series looks at 8 and may go on to 24): the count a user can trust, not one that grows at every look."""
    return f"[{index}/≤{most}]" if most > scheduled else f"[{index}/{scheduled}]"


def write_record(files: RunFolder, record: RunRecord) -> None:
    """The run folder's record.json: the record as its run_end event journals it (verify compares them)."""
    atomic_write_text(files.record, json.dumps(record.to_dict(), indent=2, allow_nan=False))


LAST_LINE_CHARS = 200  # a trainer's last stderr line as quoted in a message: enough for an exception's line


def last_log_line(path: Path, limit: int = LAST_LINE_CHARS) -> str:
    """The last non-blank line of a run's log, control characters escaped, cut to `limit` characters ('' when
    the log is empty or unreadable): what a failed trainer said last, usually its error."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - 8 * limit))  # a tail is enough; a log can be gigabytes
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    last = next((line for line in reversed(lines) if line), "")
    last = show_controls(last)
    return last if len(last) <= limit else last[:limit - 1] + "…"


def failure_text(record: RunRecord, primary: str, series_dir: Path | None = None) -> str:
    """Why a run failed (see RunRecord.failure), with its trainer's last stderr line when the series folder is
    known and the line says more than the failure itself; '' when the run did not fail."""
    failure = record.failure(primary)
    said = last_log_line(SeriesLayout(series_dir).run(record.label).stderr) if failure and series_dir else ""
    return failure + (f"; its last stderr line: \"{said}\"" if said and said not in failure else "")


def run_line(record: RunRecord, primary: str, series_dir: Path | None = None) -> str:
    """The progress line of a finished run, its primary metric under its own name; a failed run — its driver
    reported an error, or its primary is missing (RunRecord.failure) — says FAILED, why, and its log by its
    absolute path (given the series folder), as every other path gate prints."""
    failure = failure_text(record, primary, series_dir)
    if failure:
        log = (SeriesLayout(series_dir).run(record.label).stderr.absolute() if series_dir
               else RunFolder(Path(record.label)).stderr)
        return f"      {record.label} FAILED: {failure} (see {log})"
    value = record.value_of(primary)
    shown = number_text(value) if value is not None else "missing"  # (a run without its primary failed above)
    return (f"      {record.label} {primary} = {shown}, wallclock "
            f"{record.outcome.process_wallclock_s:.2f} s, "
            f"load1 mean {record.window.load1_mean or 0:.2f} over {record.window.samples} samples"
            + "".join(f"; evidence: {line}" for line in record.window.evidence))


def stamped_name(prefix: str, started: dt.datetime) -> str:
    """`<prefix>-<YYYYmmdd-HHMMSS>-<6 hex digits>`, the name (and id) of a series, calibration, comparison,
    bisect or campaign folder: the second it started, for people, and 24 random bits, so two started in the
    same second in different runs folders (or on two machines) never share an id. Nothing parses the name, so
    folders named before the suffix (`<prefix>-<YYYYmmdd-HHMMSS>`) are read, resumed and verified as before."""
    return f"{prefix}-{started:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def new_series_dir(runs_dir: Path, name: str) -> Path:
    """A fresh folder `<runs>/<name>` (suffixed -2, -3, … when taken), created."""
    series_dir, suffix = runs_dir / name, 1
    while series_dir.exists():
        suffix += 1
        series_dir = runs_dir / f"{name}-{suffix}"
    series_dir.mkdir(parents=True)
    return series_dir


"""Executes a series: preflight, preregistration, interleaved runs, retries, journal, resume.

Every finished run is journaled (fsynced) before the next one starts, so a crash loses at most the run
in flight, and `resume` re-runs only that one.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from gatekit import rules, sequential
from gatekit.config import ArmSpec, GateConfig, load_gate
from gatekit.config import SEQUENTIAL_RUNS
from gatekit.driver import ChosenBackend, Driver, RunRequest, make_backend, make_driver
from gatekit.errors import GatekitError, PreflightError, SeriesError, SeriesInterrupted
from gatekit.finding import Finding, SeriesEvidence, analyze, records_table, write_finding
from gatekit.preflight import arm_input, run_checks
from gatekit.prereg import (PREDECISION_FILE, DecisionSpec, predecision_document, read_predecision,
                            write_predecision)
from gatekit.processes import ignore_further_interrupts, stop_run_processes
from gatekit.provenance import (artifact_bytes, changed_artifacts, git_diff_stat, git_root, git_state,
                                hash_artifacts_timed, host_fingerprint, sha256_file, software_versions)
from gatekit.records import CheckResult, RunRecord, WindowSummary
from gatekit.sanitize import safe_outcome
from gatekit.sampler import LoadReader, WindowSampler, read_system_load, samples_csv
from gatekit.schedule import Slot, extension, needs_seed, order_seed, plan, retry_slots
from gatekit.storage import Journal, atomic_write_text

JOURNAL_FILE = "journal.jsonl"
DONE_FILE = "DONE"
LOCK_FILE = ".gatekit.lock"
RESULT_FILE = "result"
LEFTOVER_GRACE_S = 5.0

Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class SeriesResult:
    series_dir: Path
    finding: Finding
    finding_paths: tuple[Path, ...]


@dataclass(slots=True)
class _State:
    """What the journal says so far (rebuilt from it on resume and for offline analysis)."""

    start: Mapping[str, Any]
    records: dict[str, RunRecord] = field(default_factory=dict)
    retries: list[Mapping[str, Any]] = field(default_factory=list)
    extensions: list[Mapping[str, Any]] = field(default_factory=list)  # sequential policy: stage 2
    problems: list[str] = field(default_factory=list)
    end: Mapping[str, Any] | None = None
    hash_s: list[float] = field(default_factory=list)  # artifact hashing between runs, seconds each


def read_state(series_dir: Path) -> _State:
    """Replay the journal; the latest run_end of a label wins (a label only re-runs after a cut-off).

    A line that parses but does not hold what gatekit wrote (an edited or damaged journal) is an error
    naming the journal and the line, never a traceback later on.
    """
    path = series_dir / JOURNAL_FILE
    state: _State | None = None
    for number, event in enumerate(Journal(path).events(), 1):
        kind = event.get("event") if isinstance(event, Mapping) else None
        try:
            if not isinstance(kind, str):  # (events of kinds a newer gatekit added are skipped below)
                raise TypeError("not an event object")
            if kind == "series_start":
                _check_start(event)
                state = _State(start=event)
            elif state is None:
                raise SeriesError(f"{path}: does not begin with series_start")
            elif kind == "run_end":
                record = _checked_record(event["record"])
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
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SeriesError(f"{path}: event {number} ({kind!r}) is not what gatekit wrote ({exc!r}); the "
                              "journal was edited or damaged") from None
    if state is None:
        raise SeriesError(f"{path}: empty journal; the series never started")
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


def _checked_record(data: Any) -> RunRecord:
    _require(data, {"order": int, "arm": str, "label": str, "pair": int, "outcome": Mapping, "window": Mapping})
    _require(data["outcome"], {"process_wallclock_s": (int, float), "metrics": Mapping, "config": Mapping})
    _require(data["window"], {"samples": int})
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in data["outcome"]["metrics"].values()):
        raise TypeError("a metric is not a number")
    return RunRecord.from_dict(data)


def replacements(retries: Sequence[Mapping[str, Any]]) -> dict[int, rules.Replacement]:
    """Journaled retry events as {replaced round: Replacement}."""
    return {r["replaces"]: rules.Replacement.from_dict(r) for r in retries}


def _now() -> dt.datetime:
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


@contextmanager
def _interrupt_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP (a closed terminal or ssh session) into KeyboardInterrupt, so a stopped
    series is cleaned up and journaled like Ctrl-C instead of leaving its trainer running."""
    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        # SIGINT's handler is saved too: handling an interrupt ignores further ones until this block ends.
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, raise_interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


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
        self.load_reader_for = load_reader_for or (lambda label: read_system_load)
        self.spec = DecisionSpec.from_gate(config, off.name, on.name)

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
            started = _now()
            series_id = f"{self.config.gate.id}-{started:%Y%m%d-%H%M%S}"
            series_dir = runs_dir / series_id
            suffix = 1
            while series_dir.exists():
                suffix += 1
                series_dir = runs_dir / f"{series_id}-{suffix}"
            series_dir.mkdir(parents=True)
            journal = Journal(series_dir / JOURNAL_FILE)
            self._preregister(series_dir, series_dir.name, started, journal)
            return self._execute(series_dir, journal)

    def resume(self, series_dir: Path) -> SeriesResult:
        """Continue an interrupted series without redoing finished runs."""
        if (series_dir / DONE_FILE).exists():
            raise SeriesError(f"{series_dir}: this series is finished (DONE exists); start a new one")
        state = read_state(series_dir)
        start = state.start
        predecision = verify_unchanged(series_dir, start, self.config)
        registered = predecision.get("backend", {}).get("name")
        if registered and registered != self.backend.name:
            raise SeriesError(f"{series_dir}: was registered with the {registered} backend, but this machine "
                              f"gives {self.backend.name} ({self.backend.detail}); resume it where it started")
        self.spec = DecisionSpec.from_dict(predecision["decision"])  # the rules as frozen, not as read now
        with runs_lock(series_dir.parent):
            journal = Journal(series_dir / JOURNAL_FILE)
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
            return self._execute(series_dir, journal)

    # -- steps -----------------------------------------------------------------------------------

    def _preregister(self, series_dir: Path, series_id: str, started: dt.datetime, journal: Journal) -> None:
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
        text = predecision_document(
            self.spec, series_id=series_id, created=started.isoformat(timespec="seconds"),
            gate_path=config.path, gate_sha256=sha256_file(config.path), schedule=schedule,
            arm_configs={self.off.name: self.off.config, self.on.name: self.on.config},
            artifacts=artifacts, driver=driver_info, backend=self._backend_registration())
        predecision_sha = write_predecision(series_dir, text)
        if schedule is None:
            schedule = plan(self.off.name, self.on.name, spec.n, spec.order, order_seed(predecision_sha),
                            spec.warmup)
        out_dir = config.gate.out
        finding_id = _free_finding_id(out_dir, f"{config.gate.id}-{started:%Y-%m-%d}")
        git_dir = config.base_dir
        journal.append(
            "series_start", series_id=series_id, finding_id=finding_id, date=f"{started:%Y-%m-%d}",
            started=started.isoformat(timespec="seconds"), gate_path=str(config.path),
            gate_sha256=sha256_file(config.path), predecision_sha256=predecision_sha,
            off_arm=self.off.name, on_arm=self.on.name, out_dir=str(out_dir),
            schedule=[s.to_dict() for s in schedule],
            arms={a.name: {"config": str(a.config) if a.config else "", "args": list(a.args), "env": dict(a.env)}
                  for a in (self.off, self.on)},
            provenance_start={"artifacts": artifacts, "git": git_state(git_dir).to_dict(),
                              "host": host_fingerprint(), "software": software_versions(),
                              "backend": {"name": self.backend.name, **self.backend.backend.provenance()},
                              "hashing": {"artifact_bytes": artifact_bytes(config.driver.hash),
                                          "hash_s": hash_s}},
        )
        self.report(f"preregistered {series_dir / PREDECISION_FILE} (sha256 {predecision_sha[:12]}…)")

    def _backend_registration(self) -> dict[str, Any]:
        """The backend as preregistered: its name, what the gate file asked for, options, evidence rules."""
        return {"name": self.backend.name, "requested": self.backend.requested, "chosen": self.backend.detail,
                "options": dict(self.backend.options), "evidence_rules": self.backend.backend.evidence_rules()}

    def _execute(self, series_dir: Path, journal: Journal) -> SeriesResult:
        state = read_state(series_dir)
        slots = [Slot.from_dict(s) for s in state.start["schedule"]]
        slots += [s for r in state.retries for s in
                  retry_slots(self.off.name, self.on.name, r["round"], r["replaces"], r.get("first"))]
        slots += [Slot.from_dict(s) for e in state.extensions for s in e["slots"]]
        with _interrupt_on_sigterm():
            try:
                if state.end is not None or state.problems:  # ended (invalid or finished) before its finding
                    return self._finish(series_dir, journal, state)
                return self._run_pending(series_dir, journal, state, slots)
            except KeyboardInterrupt:  # between runs (a run in flight raises SeriesInterrupted itself)
                ignore_further_interrupts()
                journal.append("interrupted", label="")
                raise SeriesInterrupted(f"interrupted; resume with: gate run --resume {series_dir}") from None
            except OSError as exc:  # a full or read-only disk under the series directory
                raise SeriesError(f"{exc.filename or series_dir}: {exc.strerror or exc}; every finished run is "
                                  f"in the journal — fix it, then continue with: gate run --resume {series_dir}"
                                  ) from None

    def _run_pending(self, series_dir: Path, journal: Journal, state: _State, slots: list[Slot]) -> SeriesResult:
        start_artifacts = state.start["provenance_start"]["artifacts"]
        series_began = time.monotonic()
        durations: list[float] = []
        while True:
            pending = [s for s in slots if s.label not in state.records]
            for slot in pending:
                total = len(slots)
                index = slots.index(slot) + 1
                eta = (sum(durations) / len(durations)) * (total - index + 1) if durations else None
                self.report(f"[{index}/{total}] {slot.label} starting; elapsed "
                            f"{time.monotonic() - series_began:.0f} s"
                            + (f", about {eta:.0f} s left" if eta is not None else ""))
                before, hash_before_s = hash_artifacts_timed(self.config.driver.hash)
                changed = changed_artifacts(start_artifacts, before)
                if changed:
                    return self._abort(series_dir, journal, state, changed)
                began = time.monotonic()
                record = self._run_slot(series_dir, journal, slot, order=len(state.records) + 1)
                durations.append(time.monotonic() - began)
                after, hash_after_s = hash_artifacts_timed(self.config.driver.hash)
                changed = changed_artifacts(start_artifacts, after)
                if changed:
                    record = RunRecord.from_dict({**record.to_dict(), "artifacts_ok": False})
                journal.append("run_end", record=record.to_dict(), hash_s=[hash_before_s, hash_after_s])
                state.hash_s += [hash_before_s, hash_after_s]
                state.records[record.label] = record
                self.report(_run_line(record, self.spec.primary))
                if changed:
                    return self._abort(series_dir, journal, state, changed)
            new = self._plan_retries(state)
            if not new:
                stage = self._plan_extension(series_dir, state)
                if stage is None:
                    break
                journal.append("extend", **stage)
                state.extensions.append(stage)
                slots += [Slot.from_dict(s) for s in stage["slots"]]
                self.report(f"look 1 did not decide: extending to {SEQUENTIAL_RUNS[1]} runs per arm")
                continue
            for retry in new:
                journal.append("retry", **retry)
                state.retries.append(retry)
                slots += retry_slots(self.off.name, self.on.name, retry["round"], retry["replaces"],
                                     retry.get("first"))
                why = "; ".join(f"{label} {info['detail']}" for label, info in retry["flagged"].items())
                self.report(f"retrying pair r{retry['replaces']} as r{retry['round']}: {why}")
        return self._finish(series_dir, journal, state)

    def _plan_retries(self, state: _State) -> list[dict[str, Any]]:
        """Pairs with a failed or contaminated run get a re-run pair, at most max_retries per original pair."""
        replaced = replacements(state.retries)
        retry_of = {r["round"]: r["replaces"] for r in state.retries}
        runs = records_table(list(state.records.values()), self.spec.primary)
        is_sequential = self.spec.policy == "sequential"
        if is_sequential:
            table = sequential.classify(runs, self.spec.rules, replaced, _cores(state))
            needed = sequential.rounds_needing_replacement(table)
        else:
            table = rules.classify(runs, self.spec.rules, replaced)
            needed = rules.rounds_needing_retry(table, self.spec.rules)
        next_round = max(r.pair for r in state.records.values()) + 1
        retries = []
        for round_, flagged in sorted(needed.items()):
            root = rules.lineage_root(round_, retry_of)
            used = sum(1 for r in state.retries if rules.lineage_root(r["replaces"], retry_of) == root)
            if used >= self.spec.rules.max_retries:
                continue
            retry = {"round": next_round, "replaces": round_, "flagged": flagged,
                     "reason": f"pair re-run as r{next_round}"}
            if is_sequential:  # in the mirror slot: the arm that ran second goes first
                retry["first"] = sequential.mirror_first(table, round_, self.off.name, self.on.name)
                retry["reason"] += " in the mirror order"
            retries.append(retry)
            next_round += 1
        return retries

    def _plan_extension(self, series_dir: Path, state: _State) -> dict[str, Any] | None:
        """Sequential policy: stage 2's rounds when look 1 — analysed exactly as the finding will — did
        not decide. None for the classic policy, after stage 2, or when look 1 decided."""
        if self.spec.policy != "sequential" or state.extensions:
            return None
        current = analyze(evidence_from_state(series_dir, state)).data.get("sequential", {})
        if current.get("next") != "extend":
            return None
        seed = self.spec.seed if self.spec.seed is not None else order_seed(state.start["predecision_sha256"])
        first, last = SEQUENTIAL_RUNS
        slots = extension(self.off.name, self.on.name, self.spec.order, seed, done_rounds=first,
                          more_rounds=last - first, first_round=max(r.pair for r in state.records.values()) + 1)
        return {"stage": 2, "slots": [s.to_dict() for s in slots],
                "reason": f"look 1 undecided: extend to {last} runs per arm"}

    def _run_slot(self, series_dir: Path, journal: Journal, slot: Slot, *, order: int) -> RunRecord:
        run_dir = series_dir / slot.label
        if run_dir.exists():  # cut off mid-way earlier: keep its files, run it again
            attempt = 1
            while (series_dir / f"{slot.label}.cut-{attempt}").exists():
                attempt += 1
            run_dir.rename(series_dir / f"{slot.label}.cut-{attempt}")
        run_dir.mkdir()
        arm = self.off if slot.arm == self.off.name else self.on
        request = RunRequest(arm=arm_input(arm), label=slot.label, run_dir=run_dir,
                             result_path=run_dir / RESULT_FILE, timeout_s=self.config.driver.timeout_s,
                             stdout_path=run_dir / "stdout.log", stderr_path=run_dir / "stderr.log")
        started_at = _now().isoformat(timespec="seconds")
        journal.append("run_start", label=slot.label, order=order, started_at=started_at)
        backend = self.backend.backend
        sampler = WindowSampler(self.config.rules.sample_interval_s, read=self.load_reader_for(slot.label),
                                telemetry=backend.sample)
        try:
            with sampler:
                outcome = safe_outcome(self.driver.run(request))
        except KeyboardInterrupt:
            ignore_further_interrupts()
            journal.append("interrupted", label=slot.label)
            atomic_write_text(run_dir / "samples.csv", samples_csv(sampler.samples))
            raise SeriesInterrupted(f"interrupted during {slot.label}; resume with: gate run --resume "
                                    f"{series_dir}") from None
        atomic_write_text(run_dir / "samples.csv", samples_csv(sampler.samples))
        telemetry = [s.extra for s in sampler.samples]
        window = WindowSummary.of(sampler.samples, evidence=tuple(backend.window_evidence(telemetry)),
                                  telemetry=backend.summarize(telemetry))
        record = RunRecord(order=order, arm=slot.arm, label=slot.label, pair=slot.round, outcome=outcome,
                           window=window, retry_of=slot.retry_of, started_at=started_at)
        atomic_write_text(run_dir / "record.json", json.dumps(record.to_dict(), indent=2, allow_nan=False))
        return record

    def _abort(self, series_dir: Path, journal: Journal, state: _State, changed: list[str]) -> SeriesResult:
        for message in changed:
            journal.append("invalid", reason=message)
            state.problems.append(message)
            self.report(f"INVALID: {message}")
        return self._finish(series_dir, journal, state)

    def _finish(self, series_dir: Path, journal: Journal, state: _State) -> SeriesResult:
        start = state.start
        if state.end is None:  # a resumed series whose finding could not be written has ended already
            git_dir = self.config.base_dir
            end_git = git_state(git_dir).to_dict()
            artifacts, hash_s = hash_artifacts_timed(self.config.driver.hash)
            provenance_end = {"artifacts": artifacts, "git": end_git, "hash_s": hash_s}
            journal.append("series_end", provenance_end=provenance_end,
                           finished=_now().isoformat(timespec="seconds"))
        # Analyse from the journal on disk, exactly as `gate analyze` will, so both always agree.
        finding = analyze(evidence_from_state(series_dir, read_state(series_dir)))
        try:
            paths = write_finding(finding, Path(start["out_dir"]))
        except GatekitError as exc:
            raise SeriesError(f"{exc}. The series itself is complete and journaled in {series_dir}: fix the "
                              f"folder, then write the finding with: gate run --resume {series_dir}") from None
        atomic_write_text(series_dir / DONE_FILE, f"{finding.decision}\n{paths[0]}\n")
        return SeriesResult(series_dir, finding, paths)


def _cores(state: _State) -> int | None:
    return state.start["provenance_start"].get("host", {}).get("cpu_count")


def _run_line(record: RunRecord, primary: str) -> str:
    if record.failed:
        return f"      {record.label} FAILED: {record.outcome.error} (see {record.label}/stderr.log)"
    value = record.outcome.metrics.get(primary, record.outcome.process_wallclock_s)
    return (f"      {record.label} {primary} = {value:.4f}, wallclock {record.outcome.process_wallclock_s:.2f} s, "
            f"load1 mean {record.window.load1_mean or 0:.2f} over {record.window.samples} samples"
            + "".join(f"; evidence: {line}" for line in record.window.evidence))


def _free_finding_id(out_dir: Path, base: str) -> str:
    candidate, k = base, 1
    while (out_dir / f"{candidate}.toml").exists():
        k += 1
        candidate = f"{base}-{k}"
    return candidate


def _check_gate_file(path: Path, start: Mapping[str, Any]) -> None:
    current = sha256_file(path)
    if current != start["gate_sha256"]:
        raise SeriesError(f"{path}: changed since the series started (sha256 {start['gate_sha256']} -> "
                          f"{current}); restore it or start a new series")


def verify_unchanged(series_dir: Path, start: Mapping[str, Any], config: GateConfig) -> dict[str, Any]:
    """Refuse to continue or analyse a series whose predecision, gate file or arm configs changed."""
    predecision = read_predecision(series_dir, start["predecision_sha256"])
    gate_path = Path(start["gate_path"])
    if gate_path != config.path:
        raise SeriesError(f"{series_dir}: was started with gate file {gate_path}, not {config.path}")
    _check_gate_file(config.path, start)
    for arm, info in predecision["arm_configs"].items():
        path = info.get("path")
        if path:
            now = sha256_file(Path(path)) if Path(path).is_file() else "missing"
            if now != info["sha256"]:
                raise SeriesError(f"{path}: arm config of '{arm}' changed since the series started (sha256 "
                                  f"{info['sha256']} -> {now}); restore it or start a new series")
    return predecision


def evidence_from_state(series_dir: Path, state: _State) -> SeriesEvidence:
    """Everything analysis needs, from the journal and the verified predecision file alone."""
    start = state.start
    predecision = read_predecision(series_dir, start["predecision_sha256"])
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
    warnings: list[str] = []
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
    )


def _display(path: Path, base: Path) -> str:
    """Paths in findings are relative to the repository (or gate folder), so they read the same anywhere."""
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def _relative_keys(hashes: Mapping[str, str], base: Path) -> dict[str, str]:
    return {_display(Path(p), base): h for p, h in hashes.items()}


def analyze_series(series_dir: Path) -> Finding:
    """Recompute a series' finding offline, after verifying its predecision hash."""
    return analyze(evidence_from_state(series_dir, read_state(series_dir)))


def series_gate(series_dir: Path, gate_path: Path | None) -> tuple[GateConfig, ArmSpec, ArmSpec]:
    """The gate file a series was started with (or the one given, which must be the same file), and its
    off and on arms as registered.

    The gate file's hash is checked before it is parsed, so an edited gate file is refused as changed
    (naming both hashes) even when the edit also broke it.
    """
    start = read_state(series_dir).start
    registered = Path(start["gate_path"])
    path = (gate_path or registered).resolve()
    if path == registered and path.is_file():
        _check_gate_file(path, start)
    config = load_gate(path)
    arms = []
    for name in (start["off_arm"], start["on_arm"]):
        if name in config.arms:
            arms.append(config.arms[name])
        else:  # an ad-hoc arm given as a path to its .toml
            info = start["arms"][name]
            arms.append(ArmSpec(name=name, config=Path(info["config"]) if info["config"] else None,
                                args=tuple(info["args"]), env=info["env"]))
    return config, arms[0], arms[1]

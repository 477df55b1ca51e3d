"""A campaign: many gates from one file, run by an engine (gatekit.engines), journaled, summarised once.

The campaign file (paths inside it relative to the file):

    [campaign]
    id = "nightly"
    out = "findings"          # the gates' findings
    runs = "runs"             # <runs>/<id>-<YYYYmmdd-HHMMSS>/ is the campaign folder
    [[gates]]
    gate = "configs/resident-graph.toml"
    off = "resident"
    on = "graph"
    resources = { gpus = 1 }  # also cpus (Ray's num_cpus; default 1); gpus default 0

The campaign folder holds `campaign.toml` (the file as started; the journal's genesis), `campaign.jsonl`
(the hash-chained journal: campaign_start, gate_start with the gate's pinning, gate_end with its outcome,
campaign_stop), one runs folder per gate (`<key>/<series>/`), the gates' logs (`logs/<key>.log`),
`summary.md` and `junit.xml` covering every finished gate, and the findings site (`site/index.html`).
`--resume DIR` verifies the folder first (`verify_campaign`, also `gate verify DIR`), then skips the gates
whose last gate_end is `finished` and continues the others, an interrupted series with `gate run --resume`.
A gate_end names its series and finding relative to the campaign folder, so the folder can move.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Iterator, Mapping, Sequence

from gatekit.config import load_gate, load_toml, name_problem, resolve_path
from gatekit.engines import (ENGINES, GateOutcome, GateStatus, GateTask, Pinning, core_sets, finished_series,
                             outcome_of, run_local, run_ray, visible_gpus)
from gatekit.errors import (EXIT_FAIL_ON, EXIT_INVALID, ConfigError, GatekitError, OutputError, SeriesError,
                            SeriesInterrupted, VerificationError, write_failed)
from gatekit.records import Event, Record, RecordError
from gatekit.series.runloop import now, stamped_name
from gatekit.slots import usable_cpus
from gatekit.storage import Journal, atomic_write_bytes, pid_lock

if TYPE_CHECKING:  # the findings (and the statistics behind them) are loaded when the gates are done
    from gatekit.findingset import LoadedFinding

CAMPAIGN_JOURNAL = "campaign.jsonl"
CAMPAIGN_COPY = "campaign.toml"  # the campaign file as started: the journal's genesis
SUMMARY_FILE = "summary.md"
JUNIT_FILE = "junit.xml"
SITE_DIR = "site"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

Report = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class GateEntry:
    """One [[gates]] entry: a gate file, its two arms and what it needs of a machine."""

    index: int  # position in [[gates]], 0-based as errors name it (gates[0])
    gate_path: Path
    gate_id: str
    off: str
    on: str
    gpus: int = 0
    cpus: int = 1
    primary: str = "train_elapsed_s"  # the gate's primary metric (what a metric export must hold)

    @property
    def key(self) -> str:
        """The gate's name in the campaign (journal, folders): position, gate id and arms."""
        return gate_key(self.index, self.gate_id, self.off, self.on)


def gate_key(index: int, gate_id: str, off: str, on: str) -> str:
    """The name in the campaign of the gate at `index` (0-based) of [[gates]]: position, gate id and arms."""
    return _UNSAFE.sub("-", f"{index + 1:02d}-{gate_id}-{off}-{on}")[:120]


@dataclass(frozen=True, slots=True)
class Campaign:
    """A campaign file, validated: every gate file loads and names both arms."""

    path: Path
    id: str
    out: Path
    runs: Path
    gates: tuple[GateEntry, ...]
    sha256: str
    fdr: float | None = None  # [campaign] fdr: None keeps each gate's own decision


@dataclass(frozen=True, slots=True)
class CampaignOptions:
    """How to run it: the engine, where Ray is, how many local gates at once, the folder to resume."""

    engine: str = "local"
    address: str | None = None
    max_parallel: int | None = None  # local engine only; None: one gate at a time
    resume: Path | None = None


@dataclass(frozen=True, slots=True)
class CampaignResult:
    """A campaign after this invocation: its folder, every gate's latest outcome (file order; None: never
    started), the findings of the finished gates, and the summary outputs written."""

    campaign: Campaign
    folder: Path
    outcomes: tuple[tuple[GateEntry, GateOutcome | None], ...]
    findings: tuple[LoadedFinding, ...] = ()  # in file order
    site_index: Path | None = None
    written: tuple[Path, ...] = ()

    @property
    def unfinished(self) -> list[GateEntry]:
        return [g for g, o in self.outcomes if o is None or o.status is not GateStatus.FINISHED]

    def exit_code(self, fail_on: Sequence[str] = ()) -> int:
        """3 if a gate is invalid or failed without a finding, else 4 if a gate failed for a reason of the machine
        (it could not write its files on a full or read-only disk, or the machine was not ready at its preflight;
        it runs again on resume), else 130 if a gate is interrupted or not run yet
        (resumable), else 1 if a finding's decision is in `fail_on`, else 0."""
        decisions = [f.finding.decision.value for f in self.findings]
        if "invalid" in decisions or any(o is not None and o.status is GateStatus.FAILED for _, o in self.outcomes):
            return EXIT_INVALID
        if any(o is not None and o.status is GateStatus.INTERRUPTED and o.exit_code == OutputError.exit_code
               for _, o in self.outcomes):
            return OutputError.exit_code
        if self.unfinished:
            return SeriesInterrupted.exit_code
        if any(d in fail_on for d in decisions):
            return EXIT_FAIL_ON
        return 0


# -- the journal's events --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class JournaledGate(Record):
    """A gate as campaign_start lists it."""

    key: str
    gate: Path
    off: str
    on: str
    gpus: int
    cpus: int

    @classmethod
    def of(cls, entry: GateEntry) -> JournaledGate:
        return cls(entry.key, entry.gate_path, entry.off, entry.on, entry.gpus, entry.cpus)


@dataclass(frozen=True, slots=True)
class CampaignStart(Event):
    KIND: ClassVar[str] = "campaign_start"
    campaign_id: str
    campaign_path: Path
    campaign_sha256: str
    started: str
    host: str
    out: Path
    gates: tuple[JournaledGate, ...]


@dataclass(frozen=True, slots=True)
class CampaignResume(Event):
    KIND: ClassVar[str] = "campaign_resume"
    resumed: str
    host: str
    skipped: tuple[str, ...]  # the gates finished before


@dataclass(frozen=True, slots=True)
class EngineChosen(Event):
    KIND: ClassVar[str] = "engine"
    engine: str
    address: str
    max_parallel: int | None  # the local engine's; None under Ray


@dataclass(frozen=True, slots=True)
class GateStart(Event):
    """A gate started where its pinning says (local), or submitted to Ray with what it asked for."""

    KIND: ClassVar[str] = "gate_start"
    key: str
    pinning: Pinning | None = field(default=None, metadata={"omit": None})
    started: str = field(default="", metadata={"omit": ""})
    requested: Mapping[str, int] | None = field(default=None, metadata={"omit": None})  # {cpus, gpus}
    submitted: str = field(default="", metadata={"omit": ""})


@dataclass(frozen=True, slots=True)
class GateEnd(Event):
    KIND: ClassVar[str] = "gate_end"
    outcome: GateOutcome
    ended: str


@dataclass(frozen=True, slots=True)
class CampaignStop(Event):
    KIND: ClassVar[str] = "campaign_stop"
    stopped: str
    unfinished: tuple[str, ...]


# -- the campaign file ------------------------------------------------------------------------------

def _problem(path: Path, key: str, problem: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {problem}")


# The campaign file's schema, read by the records codec (`Record.from_input`).

@dataclass(frozen=True, slots=True)
class CampaignHead(Record):
    """The [campaign] table."""

    id: str = field(metadata={"check": name_problem})
    out: Path = Path("findings")
    runs: Path = Path("runs")
    # the false-discovery level the campaign's decisions are controlled at (gatekit.fdr); absent: each gate's own
    fdr: float | None = field(default=None, metadata={"omit": None, "check": lambda v: None if 0 < v < 1 else
                                                        f"must be a level between 0 and 1 (e.g. 0.05), got {v:g}"})


@dataclass(frozen=True, slots=True)
class Resources(Record):
    """What a gate needs of a machine: GPUs (0 for a CPU gate) and CPUs (Ray's num_cpus)."""

    gpus: int = field(default=0, metadata={"check": lambda v: None if v >= 0 else f"must be 0 or more, got {v}"})
    cpus: int = field(default=1, metadata={"check": lambda v: None if v >= 1 else f"must be 1 or more, got {v}"})


@dataclass(frozen=True, slots=True)
class CampaignGate(Record):
    """One [[gates]] table as written."""

    gate: Path
    off: str
    on: str
    resources: Resources = field(default_factory=Resources)


@dataclass(frozen=True, slots=True)
class CampaignFile(Record):
    campaign: CampaignHead
    gates: tuple[CampaignGate, ...] = field(metadata={
        "check": lambda v: None if v else "lists no gate; add a [[gates]] table"})


def load_campaign(path: Path | str) -> Campaign:
    """Read and check a campaign file; every problem is one ConfigError line naming file, key and problem.
    Each gate file is loaded as `gate check` loads it, so a broken gate stops the campaign before any run."""
    path = Path(path).resolve()
    data = load_toml(path)
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    base = path.parent
    try:
        written = CampaignFile.from_input(data)
    except RecordError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    head = written.campaign
    gates: list[GateEntry] = []
    for index, table in enumerate(written.gates):
        prefix = f"gates[{index}]"
        gate_path, off, on = resolve_path(base, table.gate), table.off, table.on
        gpus, cpus = table.resources.gpus, table.resources.cpus
        if not gate_path.is_file():
            raise _problem(path, f"{prefix}.gate", f"{gate_path}: file not found")
        config = load_gate(gate_path)  # a broken gate file names itself, its key and the problem
        for key, arm in (("off", off), ("on", on)):
            if arm not in config.arms:
                raise _problem(path, f"{prefix}.{key}", f"the gate file {gate_path} defines no arm '{arm}' "
                               f"(it defines: {', '.join(config.arms) or 'none'})")
        if off == on:
            raise _problem(path, f"{prefix}.on", f"is the off arm too ('{on}'); a gate compares two arms")
        entry = GateEntry(index, gate_path, config.gate.id, off, on, gpus, cpus, config.gate.primary)
        twin = next((g for g in gates if (g.gate_path, g.off, g.on) == (gate_path, off, on)), None)
        if twin is not None:
            raise _problem(path, prefix, f"runs the same gate and arms as gates[{twin.index}]; list each gate once")
        gates.append(entry)
    return Campaign(path, head.id, resolve_path(base, head.out), resolve_path(base, head.runs), tuple(gates), sha256,
                    head.fdr)


# -- the journal ------------------------------------------------------------------------------------

def new_campaign_folder(campaign: Campaign) -> Path:
    """A fresh `<runs>/<id>-<YYYYmmdd-HHMMSS>-<hex>` (`stamped_name`; suffixed -2, -3, … when taken), created."""
    name = stamped_name(campaign.id, now())
    folder, suffix = campaign.runs / name, 1
    while True:
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            suffix += 1
            folder = campaign.runs / f"{name}-{suffix}"


def latest_outcomes(folder: Path) -> tuple[CampaignStart, dict[str, GateOutcome]]:
    """The campaign_start event and each gate's last gate_end, from the journal (its paths read inside
    `folder`, wherever the campaign folder lies now)."""
    start, outcomes = _journaled_outcomes(folder, Journal(folder / CAMPAIGN_JOURNAL).entries())
    return start, {key: outcome for key, (_, outcome) in outcomes.items()}


def _journaled_outcomes(folder: Path, entries: Iterable[tuple[int, bytes, Any] | tuple[int, Any]]) -> tuple[
        CampaignStart, dict[str, tuple[int, GateOutcome]]]:
    """campaign_start and {gate key: (line, its last gate_end's outcome)} of the journal's `entries`."""
    path = folder / CAMPAIGN_JOURNAL
    if not path.is_file():
        raise SeriesError(f"{folder}: no {CAMPAIGN_JOURNAL} here; is this a campaign folder?")
    start: CampaignStart | None = None
    outcomes: dict[str, tuple[int, GateOutcome]] = {}
    for number, *_, event in entries:
        kind = event.get("event") if isinstance(event, Mapping) else None
        try:
            if kind == CampaignStart.KIND:
                start = CampaignStart.from_dict(event)
            elif kind == GateEnd.KIND:
                outcome = _located(GateEnd.from_dict(event).outcome, folder)
                outcomes[outcome.key] = (number, outcome)
        except ValueError as exc:  # a RecordError naming the key
            raise SeriesError(f"{path}: event {number} ({kind!r}) is not what gatekit wrote ({exc}); the "
                              "journal was edited or damaged") from None
    if start is None:
        raise SeriesError(f"{path}: no campaign_start event; the journal is damaged")
    return start, outcomes


def _journaled(outcome: GateOutcome, folder: Path) -> GateOutcome:
    """The outcome as journaled: its paths relative to the campaign folder, so the folder can move."""
    def relative(path: Path | None) -> Path | None:
        return None if path is None else Path(os.path.relpath(path.absolute(), folder))
    return replace(outcome, series_dir=relative(outcome.series_dir), finding_path=relative(outcome.finding_path))


def _located(outcome: GateOutcome, folder: Path) -> GateOutcome:
    """A journaled outcome's paths on this machine: read inside the campaign folder. One journaled before
    they were relative names them where the campaign ran: the folder two levels above its series."""
    series, finding = outcome.series_dir, outcome.finding_path
    if series is not None and series.is_absolute():
        ran_in = series.parents[1]
        if finding is not None and finding.is_absolute():
            finding = Path(os.path.relpath(finding, ran_in))
        series = series.relative_to(ran_in)
    def inside(path: Path | None) -> Path | None:
        return None if path is None else Path(os.path.normpath(folder / path))
    return replace(outcome, series_dir=inside(series), finding_path=inside(finding))


@dataclass(frozen=True, slots=True)
class CampaignVerifyReport:
    """What a campaign's verification checked: its chained journal and each finished gate's evidence."""

    folder: Path
    events: int
    chain_head: str
    gates: int  # finished gates whose series and finding verified


def verify_campaign(folder: Path) -> CampaignVerifyReport:
    """The campaign journal's chain (anchored on the campaign file as started, whose sha256 its
    campaign_start names), then every finished gate: its series lies in the gate's runs folder, was run from
    that gate's file and arms (`check_gate_series`) and verifies, with the finding its gate_end names, and that
    finding's decision is the one journaled. VerificationError (exit 3) naming the journal's line at the first
    disagreement."""
    from gatekit.verify import verify_chain

    journal = folder / CAMPAIGN_JOURNAL
    if not journal.is_file():
        raise SeriesError(f"{folder}: no {CAMPAIGN_JOURNAL} here; is this a campaign folder?")
    events, head = verify_chain(journal, folder / CAMPAIGN_COPY)
    start, outcomes = _journaled_outcomes(folder, events)
    copy_sha256 = hashlib.sha256((folder / CAMPAIGN_COPY).read_bytes()).hexdigest()
    if start.campaign_sha256 != copy_sha256:
        raise VerificationError(f"{journal}: line 1 (campaign_start): campaign_sha256 {start.campaign_sha256} != "
                                f"the sha256 {copy_sha256} of {folder / CAMPAIGN_COPY}")
    checked = 0
    for key, (number, outcome) in outcomes.items():
        if outcome.status is not GateStatus.FINISHED:
            continue
        check_gate_series(folder, start, outcome, f"{journal}: line {number} (gate_end)")
        checked += 1
    return CampaignVerifyReport(folder, len(events), head, checked)


def check_gate_series(folder: Path, start: CampaignStart, outcome: GateOutcome, where: str) -> None:
    """A finished gate's series and finding are that gate's: the series lies in the gate's runs folder, its
    series_start names the gate file and arms campaign_start lists for the gate, its finding (bound to it by
    the chain head) names the gate's id, both verify, and the decision is the one the outcome says. Another
    gate's honest series copied in cannot stand for it. VerificationError naming `where` and the gate."""
    from gatekit.finding import load_finding
    from gatekit.series_events import SeriesStart
    from gatekit.storage import SeriesLayout
    from gatekit.verify import verify_series

    key, series, finding = outcome.key, outcome.series_dir, outcome.finding_path
    gates = {gate.key: (index, gate) for index, gate in enumerate(start.gates)}
    if key not in gates:
        raise VerificationError(f"{where}: gate {key} is none of the campaign's gates ({', '.join(gates)})")
    if series is None or finding is None or series.parent != folder / key:
        raise VerificationError(f"{where}: gate {key} finished, but names no series of its own runs folder "
                                f"{folder / key} and finding ({series}, {finding})")
    index, gate = gates[key]
    try:
        verify_series(series, finding)
        series_start = SeriesStart.from_dict(next(Journal(SeriesLayout(series).journal).events()))
        written = load_finding(finding)
    except (GatekitError, ValueError) as exc:  # a RecordError (a ValueError) names the key
        raise VerificationError(f"{where}: gate {key}: {exc}") from None
    ran = (series_start.gate_path, series_start.off_arm, series_start.on_arm)
    if ran != (gate.gate, gate.off, gate.on):
        raise VerificationError(f"{where}: gate {key}: its series {series} ran {ran[0]} {ran[1]} vs {ran[2]}, "
                                f"not this gate's {gate.gate} {gate.off} vs {gate.on}")
    if gate_key(index, written.gate.id, gate.off, gate.on) != key:
        raise VerificationError(f"{where}: gate {key}: its finding {finding} is of gate id {written.gate.id!r}")
    if written.decision.value != outcome.decision:
        raise VerificationError(f"{where}: gate {key}: decision {outcome.decision!r} != "
                                f"{written.decision.value!r} in {finding}")


# -- running ----------------------------------------------------------------------------------------

def _task(campaign: Campaign, folder: Path, gate: GateEntry) -> GateTask:
    return GateTask(key=gate.key, gate_path=gate.gate_path, off=gate.off, on=gate.on, runs_dir=folder / gate.key,
                    out_dir=campaign.out, log_path=folder / "logs" / f"{gate.key}.log", campaign_dir=folder,
                    gpus=gate.gpus, cpus=gate.cpus)


def run_campaign(campaign: Campaign, options: CampaignOptions, *, report: Report = lambda line: None) -> CampaignResult:
    """Run (or continue) the campaign, journal every gate, then write its summary and site."""
    if options.engine not in ENGINES:
        raise ConfigError(f"--engine: must be one of {', '.join(ENGINES)}, got {options.engine!r}")
    if options.engine != "ray" and options.address:
        raise ConfigError("--address joins a Ray cluster; use it with --engine ray")
    if options.engine == "ray" and options.max_parallel is not None:
        raise ConfigError("--max-parallel applies to the local engine; Ray runs as many gates as the cluster's "
                          "CPUs and GPUs hold")
    cores, gpus = list(usable_cpus()), visible_gpus() if options.engine == "local" else ()
    if options.engine == "local":  # refused before the campaign folder exists: nothing ran
        core_sets(cores, options.max_parallel or 1)
        for gate in campaign.gates:
            if gate.gpus > len(gpus):
                raise _problem(campaign.path, f"gates[{gate.index}].resources.gpus", f"needs {gate.gpus} GPU(s), "
                               f"this host gives {len(gpus)} ({','.join(gpus) or 'none'}; CUDA_VISIBLE_DEVICES, "
                               "else nvidia-smi)")
    recovered: list[GateOutcome] = []  # gates whose series finished, their end never journaled
    if options.resume is not None:
        folder = options.resume.resolve()
        verify_campaign(folder)  # an edited journal or gate finding is exit 3 naming it, before anything runs
        start, done = latest_outcomes(folder)
        if start.campaign_sha256 != campaign.sha256:
            raise ConfigError(f"{campaign.path}: changed since the campaign in {folder} started (sha256 "
                              f"{start.campaign_sha256} -> {campaign.sha256}); restore it or start a new "
                              "campaign")
        for gate in campaign.gates:
            last = done.get(gate.key)
            if last is None or last.status is not GateStatus.FINISHED:
                outcome = _finished_unjournaled(folder, start, _task(campaign, folder, gate), last)
                recovered += [outcome] if outcome is not None else []
    else:
        try:  # a full or read-only runs folder: no journal yet, so the same command starts the campaign again
            folder, done = new_campaign_folder(campaign), {}
            atomic_write_bytes(folder / CAMPAIGN_COPY, campaign.path.read_bytes())
        except OSError as exc:
            raise write_failed(exc, "nothing ran — free space or fix permissions, then run the same command "
                                    "again") from None
    resume = f"gate campaign {campaign.path} --resume {folder}"
    journal = Journal(folder / CAMPAIGN_JOURNAL, genesis=folder / CAMPAIGN_COPY, resume=resume)
    finished = {k for k, o in done.items() if o.status is GateStatus.FINISHED}
    todo = [g for g in campaign.gates if g.key not in finished and g.key not in {o.key for o in recovered}]
    by_key = {g.key: g for g in campaign.gates}
    outcomes: dict[str, GateOutcome] = dict(done)
    total = len(campaign.gates)

    def started(task: GateTask, pinning: Pinning | None) -> None:
        gate = by_key[task.key]
        at = now().isoformat(timespec="seconds")
        # a Ray gate may wait in Ray's queue for its resources: its start on the worker is its outcome's `began`
        journal.record(GateStart(task.key, pinning=pinning, started=at) if pinning else
                       GateStart(task.key, requested={"cpus": task.cpus, "gpus": task.gpus}, submitted=at))
        what = (f"started ({pinning.describe()})" if pinning else
                f"submitted to Ray (num_cpus={task.cpus}, num_gpus={task.gpus})")
        report(f"campaign {campaign.id}: gate {gate.index + 1}/{total} {task.key} {what}")

    def ended(outcome: GateOutcome) -> None:
        gate = by_key[outcome.key]
        outcomes[outcome.key] = outcome
        journal.record(GateEnd(_journaled(outcome, folder), now().isoformat(timespec="seconds")))
        if outcome.status is GateStatus.FINISHED:
            what = f"{outcome.decision} ({outcome.finding_path}; ran on {outcome.pinning.describe()})"
        else:
            what = f"{outcome.status.value}: {outcome.detail or f'exit {outcome.exit_code}'}"
        report(f"campaign {campaign.id}: gate {gate.index + 1}/{total} {outcome.key} {what}")

    tasks = [_task(campaign, folder, g) for g in todo]
    again = ("every finished gate is journaled; a gate that could not write its files runs again — free "
             f"space or fix permissions, then: {resume}")
    try:  # the campaign's own files (its gates' logs and folders, summary, JUnit, site)
        with _campaign_lock(folder):
            if options.resume is None:
                try:
                    journal.record(CampaignStart(campaign.id, campaign.path, campaign.sha256,
                                                 now().isoformat(timespec="seconds"), socket.gethostname(),
                                                 campaign.out, tuple(JournaledGate.of(g) for g in campaign.gates)))
                except OutputError as exc:  # no journal to resume: the same command starts the campaign again
                    raise OutputError(f"{str(exc).split('; every earlier event')[0]}; nothing ran — free space or "
                                      "fix permissions, then run the same command again") from None
            else:
                report(f"campaign {campaign.id}: resuming {folder}: {len(finished)} of {total} gate(s) finished")
                journal.record(CampaignResume(now().isoformat(timespec="seconds"), socket.gethostname(),
                                              tuple(sorted(finished))))
            journal.record(EngineChosen(options.engine, options.address or "",
                                        (options.max_parallel or 1) if options.engine == "local" else None))
            for outcome in recovered:
                report(f"campaign {campaign.id}: gate {outcome.key}: its series {outcome.series_dir} finished "
                       "before the campaign could journal it; journaled from it, not run again")
                ended(outcome)
            try:
                if tasks and options.engine == "ray":
                    run_ray(tasks, address=options.address, started=started, finished=ended)
                elif tasks:
                    run_local(tasks, max_parallel=options.max_parallel or 1, cores=cores, gpus=gpus,
                              started=started, finished=ended)
            except KeyboardInterrupt:
                pass  # each gate's end is journaled; those that did not finish make the campaign exit 130
            ordered = tuple((g, outcomes.get(g.key)) for g in campaign.gates)
            unfinished = [g.key for g, o in ordered if o is None or o.status is not GateStatus.FINISHED]
            journal.record(CampaignStop(now().isoformat(timespec="seconds"), tuple(unfinished)))
        result = CampaignResult(campaign, folder, ordered)
        # the site draws every finding's figures (seconds each): redrawn only when a gate ran
        return write_campaign_outputs(result, site=bool(tasks) or not (folder / SITE_DIR / "index.html").is_file())
    except OSError as exc:
        raise write_failed(exc, again) from None


def _finished_unjournaled(folder: Path, start: CampaignStart, task: GateTask,
                          last: GateOutcome | None) -> GateOutcome | None:
    """The outcome of a gate whose series finished (DONE) but whose end the campaign never journaled (killed in
    between), read from that series and checked as `gate verify` checks a finished gate's (`check_gate_series`),
    so that resume journals it instead of running the gate again; None when there is no such series."""
    series = finished_series(task.runs_dir)
    if series is None or (last is not None and last.series_dir == series):
        return None  # none, or the one the gate's last end already names (a failed attempt runs again)
    outcome = outcome_of(task, None, Pinning(), resumed=series, before=frozenset())
    if outcome.status is not GateStatus.FINISHED:
        return None
    check_gate_series(folder, start, outcome, f"{series}: finished, not journaled in {folder / CAMPAIGN_JOURNAL}")
    return outcome


@contextmanager
def _campaign_lock(folder: Path) -> Iterator[None]:
    """One campaign process per campaign folder: two would run the same gates and interleave the journal."""
    with pid_lock(folder / ".campaign.lock", lambda holder: SeriesError(
            f"{folder}: another campaign process runs here ({holder}); wait for it")):
        yield


# -- what a campaign leaves --------------------------------------------------------------------------

def write_campaign_outputs(result: CampaignResult, *, site: bool = True) -> CampaignResult:
    """Load the finished gates' findings; write summary.md, junit.xml and (`site`) the findings site into
    the campaign folder (the summary and JUnit cover every finished gate, the site every finding)."""
    from gatekit.exports import CiOutputs
    from gatekit.findingset import load_many
    from gatekit.report.site import build_site, default_jobs

    paths = [o.finding_path for _, o in result.outcomes
             if o is not None and o.status is GateStatus.FINISHED and o.finding_path is not None]
    loaded = controlled(load_many(paths), result.campaign.fdr)
    folder = result.folder
    written: list[Path] = []
    site_index: Path | None = None
    index = folder / SITE_DIR / "index.html"
    if loaded:
        site_index = index
        CiOutputs(summary_md=folder / SUMMARY_FILE, junit=folder / JUNIT_FILE).write(
            [f.finding for f in loaded], full_report=str(site_index))
        written += [folder / SUMMARY_FILE, folder / JUNIT_FILE]
    if loaded and site:
        # run folders are found under each gate's own runs folder (meta.related_runs end in <series>/<label>)
        roots = tuple(dict.fromkeys([folder / g.key for g, _ in result.outcomes]
                                    + [g.gate_path.parent for g, _ in result.outcomes]))
        build_site([f.path for f in loaded if f.path is not None], folder / SITE_DIR, roots, cwd=Path.cwd(),
                   jobs=default_jobs())
        written.append(index)
    return CampaignResult(result.campaign, folder, result.outcomes, tuple(loaded), site_index, tuple(written))


def controlled(loaded: Sequence[LoadedFinding], fdr: float | None) -> list[LoadedFinding]:
    """The finished gates' findings as the campaign reports them: under `[campaign] fdr`, an adoption or
    regression that Benjamini–Hochberg does not keep at that level is inconclusive (gatekit.fdr); the finding
    files stay the gates' own."""
    if fdr is None or not loaded:
        return list(loaded)
    from gatekit.fdr import control
    from gatekit.findingset import LoadedFinding

    return [LoadedFinding(c.finding, f.path) for f, c in zip(loaded, control([f.finding for f in loaded], fdr))]


def describe(result: CampaignResult) -> list[str]:
    """The lines `gate campaign` prints on stdout: one per gate (the campaign's decision where its false-discovery
    control withdrew the gate's own), then the folder and the site."""
    lines = []
    reported = {f.path.resolve(): f.finding for f in result.findings if f.path is not None}
    for gate, outcome in result.outcomes:
        if outcome is None:
            lines.append(f"{gate.key}: not run")
        elif outcome.status is GateStatus.FINISHED:
            finding = reported.get(outcome.finding_path.resolve()) if outcome.finding_path is not None else None
            decision = outcome.decision
            if finding is not None and finding.decision.value != decision:
                decision = f"{finding.decision.value} ({finding.verdict.reasons[0]})"
            lines.append(f"{gate.key}: {decision} {outcome.finding_path}")
        else:
            lines.append(f"{gate.key}: {outcome.status.value}: {outcome.detail or f'exit {outcome.exit_code}'}")
    lines.append(f"campaign: {result.folder}")
    if result.site_index is not None:
        lines.append(f"site: {result.site_index}")
    return lines


def as_document(result: CampaignResult) -> dict[str, Any]:
    """What `gate campaign --json` prints: the folder, the site, the false-discovery level (null: none), and each
    gate's latest outcome (the journal's record of it, the gate's own decision; null: never run) in file order,
    with the decision the campaign reports (`campaign_decision`: under `fdr`, BH's; null: not finished)."""
    reported = {f.path.resolve(): f.finding.decision.value for f in result.findings if f.path is not None}

    def campaign_decision(outcome: GateOutcome | None) -> str | None:
        if outcome is None or outcome.finding_path is None:
            return None
        return reported.get(outcome.finding_path.resolve())

    return {"campaign": str(result.folder), "site": None if result.site_index is None else str(result.site_index),
            "fdr": result.campaign.fdr,
            "gates": [{"key": gate.key, "outcome": None if outcome is None else outcome.to_dict(),
                       "campaign_decision": campaign_decision(outcome)} for gate, outcome in result.outcomes]}


def resume_hint(result: CampaignResult) -> str:
    """The line that tells how to finish the campaign ('' when every gate is finished)."""
    if not result.unfinished:
        return ""
    return (f"{len(result.unfinished)} gate(s) not finished; continue with: gate campaign {result.campaign.path} "
            f"--resume {result.folder}")


"""A bisect's data as written and read back: its folder's file names, the preregistered plan, the journal's
events, and `replay` (journal -> `BisectState`, read-only) — what the run, resume, verify, the finding and the
report share. Nothing here starts a process or writes a file.

The bisect folder holds `bisect-plan.toml` (the preregistration, written once before the first run: the
journal's genesis, as a campaign's copy of its file is), `bisect.jsonl` (the hash-chained journal:
bisect_start, probe_start / probe_end per probe, bisect_interrupted (Ctrl-C, SIGTERM), bisect_resume,
bisect_stop), one folder per probe (its runs and its gate's finding, named relative to the bisect folder so
the folder can move) and the bisect finding (`bisect-finding.toml` and `.json`). Commits are numbered as in
`posterior`: 0 (GOOD) … N (BAD); the endpoints are a probe like any other, commit N against reference 0 in
round 0.
"""

from __future__ import annotations

import enum
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

import tomlkit

from gatekit.bisect.checks import NEIGHBOUR_RULES, NeighbourRule, neighbour_rule, neighbour_since
from gatekit.bisect.posterior import Pair
from gatekit.bisect.search import Outcome
from gatekit.commits import BuildResult, Commit
from gatekit.errors import ConfigError, SeriesError
from gatekit.finding import ConfigChange
from gatekit.records import (BISECT_JOURNAL_SCHEMA, BISECT_PLAN_SCHEMA, BISECT_SCHEMA, SCHEMA_KEY,  # noqa: F401
                             Event, Record, RecordError,  # (the formats, named in records' list)
                             from_schema_document, schema_problem)
from gatekit.storage import Journal, line_sha256, read_input

BISECT_JOURNAL = "bisect.jsonl"
BISECT_PLAN = "bisect-plan.toml"  # the preregistration: the journal's genesis
BISECT_FINDING = "bisect-finding"  # stem of the finding's .toml and .json twins
GATE_COPY = "gate.toml"  # the gate file as the bisect read it (the plan holds its sha256)


def _positive_finite(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise RecordError(name, f"must be a positive finite number (a log difference is taken), got {value!r}")


@dataclass(frozen=True, slots=True)
class MeasuredPair(Record):
    """The primary metric of one probe run and of the reference run interleaved beside it."""

    probe_value: float
    reference_value: float
    # the two runs' labels in the probe gate's finding (`probe-r2`): `gate verify` then checks the values there
    probe_run: str = field(default="", metadata={"omit": ""})
    reference_run: str = field(default="", metadata={"omit": ""})

    def __post_init__(self) -> None:
        # checked, not trusted: a journal is read back, and log(0) or log(nan) would poison every posterior
        _positive_finite("probe_value", self.probe_value)
        _positive_finite("reference_value", self.reference_value)

    def pair(self, probe: int, reference: int) -> Pair:
        """The posterior's measurement: log(probe value) − log(reference value)."""
        return Pair(probe, reference, math.log(self.probe_value) - math.log(self.reference_value))


class ProbeStatus(enum.Enum):
    MEASURED = "measured"  # its pairs count
    SKIPPED = "skipped"  # the build exited 125: the commit cannot be tested
    BUILD_FAILED = "build_failed"  # another build exit: skipped too, and said so
    INVALID = "invalid"  # the probe's gate gave no usable pairs (contamination, trainer failures: `reason` says)


# -- the journal's events --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BisectStart(Event):
    """What the bisect preregistered (the plan file holds the same), journaled first."""

    KIND: ClassVar[str] = "bisect_start"
    good: Commit
    bad: Commit
    commits: tuple[Commit, ...]  # index 0 GOOD … N BAD
    gate_file: str
    gate_sha256: str
    arm: str
    metric: str  # the gate's primary metric
    higher_is_better: bool
    build: tuple[str, ...] | None  # the build's argv; None: no build
    confidence: float
    budget: int  # trainer executions, endpoints and references included
    max_parallel: int
    engine: str
    pairs_per_probe: int
    started: str = field(default="", metadata={"omit": ""})  # ISO 8601 wall time, for people
    host: str = field(default="", metadata={"omit": ""})
    repo: str = field(default="", metadata={"omit": ""})  # the git repository bisected
    address: str = field(default="", metadata={"omit": ""})  # the Ray cluster's, under --engine ray
    # the checks beyond the one-step posterior (gatekit.bisect.checks); None in a plan from before them, which
    # then says no_change without a power check and names a culprit without them
    floor_pct: float | None = field(default=None, metadata={"omit": None})  # the gate's threshold floor
    steps_alpha: float | None = field(default=None, metadata={"omit": None})  # the test for more than one step
    # how a named step must show between its neighbours (checks.NEIGHBOUR_RULES); None with steps_alpha: rule 1
    neighbour_rule: int | None = field(default=None, metadata={"omit": None})
    # the events' format (the journal's first line names the chain's format under `schema`, so not that key)
    schema: str = field(default=BISECT_JOURNAL_SCHEMA, metadata={"key": "bisect_schema"})

    def __post_init__(self) -> None:
        if self.neighbour_rule is not None and self.neighbour_rule not in NEIGHBOUR_RULES:
            raise RecordError("neighbour_rule", f"rule {self.neighbour_rule} is not one this gatekit knows "
                              f"({', '.join(map(str, NEIGHBOUR_RULES))}): the plan is from a newer gatekit")

    @property
    def n(self) -> int:
        """N: the index of BAD (the commits are 0 … N)."""
        return len(self.commits) - 1


@dataclass(frozen=True, slots=True)
class BisectResume(Event):
    KIND: ClassVar[str] = "bisect_resume"
    reason: str
    at: str  # ISO 8601 wall time


@dataclass(frozen=True, slots=True)
class BisectInterrupted(Event):
    """The bisect was stopped before it ended, by a signal (Ctrl-C, SIGTERM, SIGHUP) or by a probe that failed
    for a reason of the machine (its gate exited 4: a full disk, a busy machine at preflight; `reason` says
    which); `--resume` continues it (a SIGKILL leaves no such event: its unfinished probes say the same)."""

    KIND: ClassVar[str] = "bisect_interrupted"
    reason: str
    unfinished: int  # probes started and not ended: resume runs them again
    at: str  # ISO 8601 wall time


@dataclass(frozen=True, slots=True)
class ProbeStart(Event):
    KIND: ClassVar[str] = "probe_start"
    commit: int
    reference: int
    round: int  # 0: the endpoints
    folder: str  # relative to the bisect folder
    started: str = field(default="", metadata={"omit": ""})

    @property
    def key(self) -> tuple[int, int, int]:
        return self.commit, self.reference, self.round


@dataclass(frozen=True, slots=True)
class ProbeEnd(Event):
    KIND: ClassVar[str] = "probe_end"
    commit: int
    reference: int
    round: int
    status: ProbeStatus
    pairs: tuple[MeasuredPair, ...]
    reason: str
    build: BuildResult | None
    finding: str | None  # the probe gate's finding, relative to the bisect folder
    finding_sha256: str | None
    # the probe gate's series folder, relative to the bisect folder (`gate verify` checks it with its finding)
    series: str | None = field(default=None, metadata={"omit": None})
    # the probe gate's decision ("regression", "no_change", …; the endpoints' says whether they differ)
    decision: str = field(default="", metadata={"omit": ""})
    # trainer executions of the probe, failed ones included; None: two per pair
    runs: int | None = field(default=None, metadata={"omit": None})
    ended: str = field(default="", metadata={"omit": ""})
    # the probe gate's effective-config differences, reference (GOOD) → probe: what the commits changed
    config_diff: tuple[ConfigChange, ...] = field(default=(), metadata={"omit": ()})

    def __post_init__(self) -> None:
        if self.status is ProbeStatus.MEASURED and not self.pairs:
            raise RecordError("pairs", "a measured probe has at least one pair")
        if self.status is not ProbeStatus.MEASURED and self.pairs:
            raise RecordError("pairs", f"a {self.status.value} probe has no pairs that count")

    @property
    def key(self) -> tuple[int, int, int]:
        return self.commit, self.reference, self.round

    @property
    def executions(self) -> int:
        return 2 * len(self.pairs) if self.runs is None else self.runs

    def posterior_pairs(self) -> tuple[Pair, ...]:
        """The posterior's measurements of this probe (none unless it was measured)."""
        return tuple(p.pair(self.commit, self.reference) for p in self.pairs)


@dataclass(frozen=True, slots=True)
class BisectStop(Event):
    KIND: ClassVar[str] = "bisect_stop"
    outcome: Outcome
    culprit: int | None
    probabilities: tuple[float, ...]  # P(culprit = k), k = 1 … N; empty when it stopped at the endpoints
    credible: tuple[int, ...]  # most likely first
    runs: int
    rounds: int
    exit_code: int
    ended: str = field(default="", metadata={"omit": ""})


EVENTS: dict[str, type[Event]] = {e.KIND: e for e in (BisectStart, BisectResume, BisectInterrupted, ProbeStart, ProbeEnd,
                                                       BisectStop)}


# -- the plan (preregistration) --------------------------------------------------------------------

def plan_toml(start: BisectStart) -> str:
    """The plan file's text: the bisect_start event's fields, as TOML naming the plan's format (TOML has no
    null: a None is left out, and reads back as None)."""
    document = {SCHEMA_KEY: BISECT_PLAN_SCHEMA, **start.to_dict()}
    return tomlkit.dumps(_without_none(document))


def _without_none(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_none(v) for v in value]
    return value


def read_plan(path: Path) -> BisectStart:
    """The plan file as the bisect_start it preregistered; SeriesError naming the file and key otherwise."""
    try:
        data = tomllib.loads(read_input(path, "a bisect plan (TOML)").decode("utf-8"))
    except ConfigError as exc:  # the plan is gatekit's own output, not a usage error
        raise SeriesError(str(exc)) from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SeriesError(f"{path}: not a readable bisect plan: {exc}") from None
    return from_schema_document(BisectStart, data, BISECT_PLAN_SCHEMA, str(path), SeriesError)


# -- replay ----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BisectState:
    """What a bisect's journal says so far (read-only): what resume, verify, the finding and the report use."""

    folder: Path
    start: BisectStart
    finished: tuple[ProbeEnd, ...]  # in journal order
    unfinished: tuple[ProbeStart, ...]  # started, never ended (a killed bisect): resume runs them again
    stop: BisectStop | None
    resumes: tuple[BisectResume, ...] = ()
    interruptions: tuple[BisectInterrupted, ...] = ()
    chain_head: str = ""  # sha256 of the journal's last line
    lines: Mapping[tuple[int, int, int], int] = field(default_factory=dict)  # probe key -> its probe_end's line
    folders: Mapping[tuple[int, int, int], str] = field(default_factory=dict)  # probe key -> its probe_start's folder

    @property
    def n(self) -> int:
        return self.start.n

    def pairs(self) -> tuple[Pair, ...]:
        """Every measured probe's pairs, in journal order: what the posterior is computed from."""
        return tuple(p for end in self.finished for p in end.posterior_pairs())

    def pairs_by_round(self) -> tuple[tuple[Pair, ...], ...]:
        """The measured probes' pairs, one tuple per round in the order the rounds ran (what the search looked at
        after each; resume replays it in this order)."""
        measured = sorted((e for e in self.finished if e.status is ProbeStatus.MEASURED),
                          key=lambda e: (e.round, e.commit))
        rounds: dict[int, list[Pair]] = {}
        for end in measured:
            rounds.setdefault(end.round, []).extend(end.posterior_pairs())
        return tuple(tuple(pairs) for pairs in rounds.values())

    def neighbour_judged(self, named: int) -> tuple[list[Pair], NeighbourRule, int]:
        """What `checks.jump_p` and `checks.step_confirmed` judge the step at `named` on: the journaled pairs in
        the order of their rounds, the plan's neighbour rule, and where the pairs a rule of fresh pairs judges
        begin (0 for a rule that judges them all)."""
        rule = neighbour_rule(self.start.neighbour_rule)
        by_round = self.pairs_by_round()
        since = neighbour_since(by_round, self.start.n, self.start.confidence, named) if rule.fresh else 0
        return [p for r in by_round for p in r], rule, since

    def skipped(self) -> frozenset[int]:
        """The commits that cannot be built (exit 125, or another build failure): never probed again."""
        return frozenset(e.commit for e in self.finished if e.status in (ProbeStatus.SKIPPED, ProbeStatus.BUILD_FAILED))

    def invalid(self) -> frozenset[int]:
        """The commits of probes whose gate gave no usable pairs (they may be probed again)."""
        return frozenset(e.commit for e in self.finished if e.status is ProbeStatus.INVALID)

    def runs(self) -> int:
        """Every trainer execution of the finished probes (two per pair, unless a probe says otherwise)."""
        return sum(e.executions for e in self.finished)

    def rounds(self) -> int:
        """Wall rounds so far, the endpoints' (round 0) included, as `search` counts them: last round + 1."""
        return 1 + max(e.round for e in self.finished) if self.finished else 0

    def endpoints(self) -> ProbeEnd | None:
        """The endpoints' probe (BAD against GOOD, round 0), once finished."""
        return next((e for e in self.finished if e.key == (self.n, 0, 0)), None)


def replay(folder: Path) -> BisectState:
    """Read the bisect journal back (never written to). A line that parses but does not hold what gatekit
    wrote is a SeriesError naming the journal and the line; the chain is `gate verify`'s to check."""
    path = folder / BISECT_JOURNAL
    if not path.is_file():
        raise SeriesError(f"{folder}: no {BISECT_JOURNAL} here; is this a bisect folder?")
    start: BisectStart | None = None
    finished: list[ProbeEnd] = []
    started: dict[tuple[int, int, int], ProbeStart] = {}
    resumes: list[BisectResume] = []
    interruptions: list[BisectInterrupted] = []
    lines: dict[tuple[int, int, int], int] = {}
    folders: dict[tuple[int, int, int], str] = {}
    stop: BisectStop | None = None
    last = b""
    for number, last, event in Journal(path).entries():
        kind = event.get("event") if isinstance(event, Mapping) else None
        try:
            if not isinstance(kind, str):
                raise TypeError("not an event object")
            if kind not in EVENTS:
                continue  # an event a newer gatekit added
            if start is None and kind != BisectStart.KIND:
                raise SeriesError(f"{path}: line {number}: does not begin with {BisectStart.KIND}")
            if kind == BisectStart.KIND:
                if start is not None:
                    raise SeriesError(f"{path}: line {number}: a second {BisectStart.KIND}")
                start = BisectStart.from_dict(event)
                problem = schema_problem(start.schema, BISECT_JOURNAL_SCHEMA)
                if problem:
                    raise SeriesError(f"{path}: line {number}: bisect_{problem}")
            elif kind == ProbeStart.KIND:
                assert start is not None  # refused above: no event comes before the bisect_start
                probe = ProbeStart.from_dict(event)
                _check_indices(probe.commit, probe.reference, start.n)
                started[probe.key] = probe
                folders[probe.key] = probe.folder
            elif kind == ProbeEnd.KIND:
                assert start is not None  # refused above: no event comes before the bisect_start
                end = ProbeEnd.from_dict(event)
                _check_indices(end.commit, end.reference, start.n)
                started.pop(end.key, None)
                finished.append(end)
                lines[end.key] = number
            elif kind == BisectResume.KIND:
                resumes.append(BisectResume.from_dict(event))
            elif kind == BisectInterrupted.KIND:
                interruptions.append(BisectInterrupted.from_dict(event))
            elif kind == BisectStop.KIND:
                stop = BisectStop.from_dict(event)
        except SeriesError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # RecordError is a ValueError
            raise SeriesError(f"{path}: line {number} ({kind!r}) is not what gatekit wrote ({exc}); the journal "
                              "was edited or damaged") from None
    if start is None:
        raise SeriesError(f"{path}: empty journal; the bisect never started")
    return BisectState(folder, start, tuple(finished), tuple(started.values()), stop, tuple(resumes),
                       tuple(interruptions), line_sha256(last), lines, folders)


def _check_indices(commit: int, reference: int, n: int) -> None:
    for name, index in (("commit", commit), ("reference", reference)):
        if not 0 <= index <= n:
            raise RecordError(name, f"{index} is not a commit of the range 0 … {n}")
    if commit == reference:
        raise RecordError("reference", f"is the probed commit itself ({commit})")

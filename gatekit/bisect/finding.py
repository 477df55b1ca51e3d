"""The bisect finding (`bisect-finding.toml` and `.json`, same content, `schema = "gatekit.bisect/1"`): the
culprit, its posterior, the effect at it with its confidence interval, every probe with its values, the
skipped commits and why. It is a pure function of the journal (`build_finding(replay(folder))`): the posterior
is computed again from the journaled pairs, so `gate verify` can recompute the finding and compare.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from scipy import stats as scipy_stats

from gatekit.bisect import checks, posterior
from gatekit.bisect.records import BISECT_FINDING, BISECT_JOURNAL, BisectState, ProbeEnd, ProbeStatus
from gatekit.bisect.search import Outcome
from gatekit.commits import Commit
from gatekit.errors import FindingError, RunFileError, SeriesError
from gatekit.finding import ConfigChange, plain
from gatekit.records import BISECT_SCHEMA, SCHEMA_KEY, Record, dumps_toml, first_difference, from_schema_document
from gatekit.runfiles import MAX_RESULT_BYTES, parse_document, read_run_file
from gatekit.storage import write_output

CI_LEVEL = 0.95  # the effect's interval; the confidence of the culprit is the bisect's own (--confidence)


@dataclass(frozen=True, slots=True)
class ProbeSummary(Record):
    """One finished probe: the commit, what it was compared with, and what came of it."""

    commit: Commit
    index: int  # 0 GOOD … N BAD
    reference: int  # the reference commit's index
    round: int  # 0: the endpoints
    status: ProbeStatus
    reason: str
    values: tuple[float, ...]  # the probe's runs' primary metric, one per pair
    reference_values: tuple[float, ...]  # the reference runs beside them
    median_log_diff: float | None  # None: no pairs
    runs: int  # trainer executions, failed ones included
    folder: str  # relative to the bisect folder
    finding: str | None  # the probe gate's finding, relative to the bisect folder
    decision: str = ""
    # effective-config keys that differ from GOOD's at this commit (key, GOOD's value, this commit's)
    config_diff: tuple[ConfigChange, ...] = field(default=(), metadata={"omit": ()})


@dataclass(frozen=True, slots=True)
class SkippedCommit(Record):
    commit: Commit
    index: int
    status: ProbeStatus  # skipped (build exit 125) or build_failed
    why: str


@dataclass(frozen=True, slots=True)
class CulpritProbability(Record):
    """P(culprit = this commit | every pair), k = 1 … N."""

    index: int
    sha: str
    probability: float


@dataclass(frozen=True, slots=True)
class StepEstimate(Record):
    """One step of the best two-step fit (a `multiple_steps` bisect, or the test's alternative): the commit and
    the metric's change there, in percent."""

    index: int
    sha: str
    effect_pct: float


@dataclass(frozen=True, slots=True)
class BisectFinding(Record):
    good: Commit
    bad: Commit
    bad_index: int  # N: the commits are 0 (GOOD) … N (BAD)
    arm: str
    metric: str
    higher_is_better: bool
    outcome: Outcome
    # the named commit: the culprit of a `culprit` outcome, the most likely of a credible set; None: no posterior
    culprit: Commit | None
    culprit_index: int | None
    culprit_posterior: float | None
    credible_set: tuple[Commit, ...]  # the fewest commits holding the confidence, most likely first
    # the metric's change at the named commit (its level after / before − 1, in percent: a slower time metric is
    # positive), and its 95 % interval; None without a posterior (or with a single pair)
    effect_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    probes: tuple[ProbeSummary, ...]  # journal order
    skipped: tuple[SkippedCommit, ...]
    probabilities: tuple[CulpritProbability, ...]
    runs: int  # every trainer execution, endpoints and references included
    rounds: int
    confidence: float
    budget: int
    journal_sha256: str  # the journal's last line's hash (its chain head)
    started: str
    ended: str
    exit_code: int
    # what the named commit changed in the arm's effective config: its differences from GOOD's that the nearest
    # measured commit before it did not have (a culprit that changes a default names the key)
    culprit_config_diff: tuple[ConfigChange, ...] = field(default=(), metadata={"omit": ()})
    # the endpoints' pairs when they showed no change: their change, its 95 % interval and their MDE (percent);
    # `no_change` needs MDE ≤ the floor and 0 inside the interval, else `inconclusive` (gatekit.bisect.checks)
    endpoints_change_pct: float | None = field(default=None, metadata={"omit": None})
    endpoints_ci_low_pct: float | None = field(default=None, metadata={"omit": None})
    endpoints_ci_high_pct: float | None = field(default=None, metadata={"omit": None})
    endpoints_mde_pct: float | None = field(default=None, metadata={"omit": None})
    floor_pct: float | None = field(default=None, metadata={"omit": None})
    # the test for a second step beside the named commit: its p (Bonferroni), and the best two-step fit
    steps_p: float | None = field(default=None, metadata={"omit": None})
    steps: tuple[StepEstimate, ...] = field(default=(), metadata={"omit": ()})
    # the named step's jump between its neighbours, one-sided p (a culprit needs it ≤ its rule's α, checks.NEIGHBOUR_RULES)
    jump_p: float | None = field(default=None, metadata={"omit": None})

    def to_dict(self) -> dict[str, Any]:
        return plain({SCHEMA_KEY: BISECT_SCHEMA, **Record.to_dict(self)})

    @classmethod
    def from_document(cls, data: Mapping[str, Any], *, source: str = "bisect finding") -> BisectFinding:
        return from_schema_document(cls, data, BISECT_SCHEMA, source, FindingError)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    def to_toml(self) -> str:
        return dumps_toml(self.to_dict())


def effect_interval(pairs: tuple[posterior.Pair, ...], commits: int, culprit: int,
                    level: float = CI_LEVEL) -> tuple[float, float, float] | tuple[None, None, None]:
    """δ̂ at `culprit` and its `level` interval (Student t, n − 1 degrees of freedom), as percent changes
    100·(exp(·) − 1); Nones when the noise cannot be estimated (one pair, or no spread at all)."""
    delta, se, dof = posterior.effect_estimate(pairs, commits, culprit)
    if dof < 1 or not math.isfinite(se):
        return None, None, None
    half = float(scipy_stats.t.ppf(0.5 + level / 2, dof)) * se
    def percent(x: float) -> float:
        return 100.0 * math.expm1(x)

    return percent(delta), percent(delta - half), percent(delta + half)


def _summary(end: ProbeEnd, commits: tuple[Commit, ...], folder: str) -> ProbeSummary:
    diffs = [p.log_diff for p in end.posterior_pairs()]
    return ProbeSummary(commits[end.commit], end.commit, end.reference, end.round, end.status, end.reason,
                        tuple(p.probe_value for p in end.pairs), tuple(p.reference_value for p in end.pairs),
                        statistics.median(diffs) if diffs else None, end.executions, folder, end.finding,
                        end.decision, end.config_diff)


def changed_at(ends: Sequence[ProbeEnd], commit: int) -> tuple[ConfigChange, ...]:
    """The effective-config changes `commit` brought: its differences from GOOD's, less those the nearest
    measured commit before it had already (GOOD itself has none); () when it was not measured."""
    measured = {e.commit: e.config_diff for e in ends if e.status is ProbeStatus.MEASURED}
    if commit not in measured:
        return ()
    before = max((k for k in measured if k < commit), default=None)
    already = set(measured[before]) if before is not None else set()
    return tuple(change for change in measured[commit] if change not in already)


def build_finding(state: BisectState) -> BisectFinding:
    """The finding of a stopped bisect, from its journal alone: the posterior over the culprit recomputed from
    every measured pair (`posterior.posterior`), the credible set at the preregistered confidence, the effect
    at the named commit. A bisect that has not stopped has no finding yet (SeriesError)."""
    start, stop = state.start, state.stop
    if stop is None:
        raise SeriesError(f"{state.folder}: the bisect has not stopped (no bisect_stop in its journal); continue "
                          "it with gate bisect --resume")
    commits, n, pairs = start.commits, start.n, state.pairs()
    # the search stops at the endpoints (no_change, an invalid pair of endpoints) before any posterior exists
    probabilities = posterior.posterior(pairs, n) if stop.probabilities else None
    culprit_index = culprit_posterior = None
    credible: list[int] = []
    effect: tuple[float | None, ...] = (None, None, None)
    if probabilities is not None:
        credible = posterior.credible_set(probabilities, start.confidence)
        culprit_index = credible[0]
        culprit_posterior = float(probabilities[culprit_index - 1])
        effect = effect_interval(pairs, n, culprit_index)
    extra = _checks(state, pairs, culprit_index)
    probes = tuple(_summary(end, commits, state.folders.get(end.key, "")) for end in state.finished)
    skipped = tuple(SkippedCommit(commits[e.commit], e.commit, e.status, e.reason) for e in state.finished
                    if e.status in (ProbeStatus.SKIPPED, ProbeStatus.BUILD_FAILED))
    return BisectFinding(
        good=start.good, bad=start.bad, bad_index=n, arm=start.arm, metric=start.metric, higher_is_better=start.higher_is_better,
        outcome=stop.outcome,
        culprit=None if culprit_index is None else commits[culprit_index], culprit_index=culprit_index,
        culprit_posterior=culprit_posterior, credible_set=tuple(commits[k] for k in credible),
        effect_pct=effect[0], ci_low_pct=effect[1], ci_high_pct=effect[2],
        probes=probes, skipped=skipped,
        probabilities=() if probabilities is None else tuple(
            CulpritProbability(k, commits[k].sha, float(p)) for k, p in enumerate(probabilities, 1)),
        runs=state.runs(), rounds=state.rounds(), confidence=start.confidence, budget=start.budget,
        journal_sha256=state.chain_head, started=start.started, ended=stop.ended, exit_code=stop.exit_code,
        culprit_config_diff=() if culprit_index is None else changed_at(state.finished, culprit_index), **extra)


def _checks(state: BisectState, pairs: tuple[posterior.Pair, ...], named: int | None) -> dict[str, Any]:
    """The finding's fields from gatekit.bisect.checks, for a plan that preregistered them (none otherwise, so
    a finding from before them is rebuilt as it was written)."""
    start, stop = state.start, state.stop
    assert stop is not None
    extra: dict[str, Any] = {}
    if start.floor_pct is not None and stop.outcome in (Outcome.NO_CHANGE, Outcome.INCONCLUSIVE):
        ends = [p for e in state.finished if e.status is ProbeStatus.MEASURED and e.commit == start.n
                and e.reference == 0 and e.round <= 1 for p in e.posterior_pairs()]
        power = checks.endpoints_power([p.log_diff for p in ends])
        extra["floor_pct"] = start.floor_pct
        if power is not None:
            extra.update(endpoints_change_pct=power.change_pct, endpoints_ci_low_pct=power.ci_low_pct,
                         endpoints_ci_high_pct=power.ci_high_pct, endpoints_mde_pct=power.mde_pct)
    if start.steps_alpha is not None and named is not None:
        test = checks.second_step_test(pairs, start.n, named)
        if test is not None:
            extra["steps_p"] = test.p
            extra["steps"] = tuple(StepEstimate(k, start.commits[k].sha, 100.0 * math.expm1(effect))
                                   for k, effect in zip(test.steps, test.effects_log))
        judged, rule, since = state.neighbour_judged(named)
        extra["jump_p"] = checks.jump_p(judged, start.n, named, rule, since)
    return extra


def finding_paths(folder: Path) -> tuple[Path, Path]:
    """The finding's TOML and JSON twins in a bisect folder."""
    return folder / f"{BISECT_FINDING}.toml", folder / f"{BISECT_FINDING}.json"


def write_bisect_finding(folder: Path, finding: BisectFinding) -> tuple[Path, Path]:
    """Write the twins, each atomically (the TOML first; the JSON, what tools read, last)."""
    toml_path, json_path = finding_paths(folder)
    write_output(toml_path, finding.to_toml(), "bisect finding")
    write_output(json_path, finding.to_json(), "bisect finding")
    return toml_path, json_path


def read_bisect_finding(path: Path) -> BisectFinding:
    """A bisect finding from its .toml or .json twin (read within bounds); FindingError naming the file."""
    try:
        raw = read_run_file(path, MAX_RESULT_BYTES)
        if raw is None:
            raise FindingError(f"{path}: no bisect finding here")
        data = parse_document(raw, path)
    except RunFileError as exc:
        raise FindingError(str(exc)) from None
    return BisectFinding.from_document(data, source=str(path))


def bisect_folder_of(path: Path) -> Path | None:
    """The bisect folder a path names: a folder with a bisect journal, or the folder of its finding's twin named
    as a file; None otherwise (what `gate verify` and `gate report` tell a bisect from a series by)."""
    if path.is_dir():
        return path if (path / BISECT_JOURNAL).is_file() else None
    folder = path.parent
    twins = {twin.name for twin in finding_paths(folder)}
    return folder if path.name in twins and path.is_file() and (folder / BISECT_JOURNAL).is_file() else None


def load_bisect_finding(path: Path) -> BisectFinding:
    """The finding of a bisect folder (or named by either twin), its twin saying the same: an edited twin must
    not be shown as if it were the finding. FindingError naming both files otherwise."""
    toml_path, json_path = finding_paths(path) if path.is_dir() else finding_paths(path.parent)
    named = json_path if path.is_dir() or path == json_path else toml_path
    finding = read_bisect_finding(named)
    twin = toml_path if named == json_path else json_path
    if twin.is_file():
        difference = first_difference(finding.to_dict(), read_bisect_finding(twin).to_dict())
        if difference is not None:
            raise FindingError(f"{named}: differs from its twin {twin.name}: {difference}; one of them was edited "
                               f"(gate verify {named.parent} says which)")
    return finding

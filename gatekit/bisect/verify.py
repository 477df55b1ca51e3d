"""Verifying a bisect folder (pure reading): its journal's hash chain, anchored on the plan file; the plan
equal to the bisect_start it preregistered, and the copy of the gate file the sha256 it holds; the search's stop equal to the posterior of the journaled pairs;
the finding's twins equal to `build_finding(replay(folder))`; and every probe: its gate's finding has the
sha256 its probe_end journaled, and its series verifies with that finding (`gatekit.verify.verify_series`).

The first disagreement is a VerificationError (exit 3) naming the file and the journal line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gatekit.bisect.finding import build_finding, finding_paths, read_bisect_finding
from gatekit.bisect.checks import second_step_test, step_confirmed
from gatekit.bisect.posterior import credible_set, posterior
from gatekit.bisect.records import BISECT_JOURNAL, BISECT_PLAN, GATE_COPY, BisectState, BisectStop, ProbeEnd, read_plan, replay
from gatekit.bisect.search import Outcome
from gatekit.errors import GatekitError, SeriesError, VerificationError
from gatekit.provenance import sha256_file
from gatekit.records import first_difference
from gatekit.verify import verify_chain, verify_series

# the stop's probabilities were computed while the probes came back, perhaps in another order than the journal
# lists them: the same sums added in another order differ in the last bits, never by this much
PROBABILITY_TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class BisectVerifyReport:
    """What a bisect's verification checked."""

    folder: Path
    events: int
    chain_head: str
    probes: int  # probes whose series verified with their gate's finding
    finding: Path | None  # the JSON twin checked (None: the bisect has not stopped)


def verify_bisect(folder: Path, *, finding_required: bool = True) -> BisectVerifyReport:
    """Check the bisect folder as the module's docstring says. A stopped bisect must have its finding
    (`finding_required`; resume passes False to write a missing one again)."""
    journal = folder / BISECT_JOURNAL
    if not journal.is_file():
        raise SeriesError(f"{folder}: no {BISECT_JOURNAL} here; is this a bisect folder?")
    events, head = verify_chain(journal, folder / BISECT_PLAN)
    try:
        state = replay(folder)
        plan = read_plan(folder / BISECT_PLAN)
    except GatekitError as exc:
        raise VerificationError(str(exc)) from None
    if state.chain_head != head:  # the journal changed between the two reads
        raise VerificationError(f"{journal}: changed while it was verified")
    difference = first_difference(plan.to_dict(), state.start.to_dict())
    if difference is not None:
        raise VerificationError(f"{folder / BISECT_PLAN}: differs from the journal's line 1 (bisect_start): "
                                f"{difference}")
    _verify_gate_copy(folder / GATE_COPY, state.start.gate_sha256)
    stop_line = next((number for number, event in reversed(events) if event.get("event") == BisectStop.KIND), 0)
    _verify_stop(state, f"{journal}: line {stop_line} ({BisectStop.KIND})")
    checked = sum(_verify_probe(folder, end, state.start.metric,
                                f"{journal}: line {state.lines[end.key]} (probe_end)") for end in state.finished)
    finding = _verify_finding(state, finding_required) if state.stop is not None else None
    return BisectVerifyReport(folder, len(events), head, checked, finding)


def _verify_gate_copy(path: Path, planned: str) -> None:
    """The gate file every probe's gate file was made from, as the bisect read it: the sha256 its plan holds."""
    try:
        actual = sha256_file(path)
    except OSError as exc:
        raise VerificationError(f"{path}: the bisect's copy of its gate file cannot be read "
                                f"({exc.strerror or exc})") from None
    if actual != planned:
        raise VerificationError(f"{path}: has sha256 {actual}, the plan's gate_sha256 is {planned}: the bisect's "
                                "copy of its gate file changed since it started")


def _verify_stop(state: BisectState, where: str) -> None:
    """The bisect_stop's posterior and credible set are those of the journaled pairs."""
    stop = state.stop
    if stop is None or not stop.probabilities:
        return
    pairs, n = state.pairs(), state.n
    if len(stop.probabilities) != n or len(pairs) < 2:
        raise VerificationError(f"{where}: {len(stop.probabilities)} probabilities for {n} commits from "
                                f"{len(pairs)} pairs")
    recomputed = posterior(pairs, n)
    for k, (journaled, mine) in enumerate(zip(stop.probabilities, recomputed), 1):
        if not math.isclose(journaled, float(mine), rel_tol=PROBABILITY_TOLERANCE, abs_tol=PROBABILITY_TOLERANCE):
            raise VerificationError(f"{where}: P(culprit = {k}) {journaled!r} != {float(mine)!r}, the posterior of "
                                    "the journaled pairs")
    credible = tuple(credible_set(recomputed, state.start.confidence))
    if tuple(stop.credible) != credible:
        raise VerificationError(f"{where}: credible set {list(stop.credible)} != {list(credible)} of the journaled "
                                "pairs")
    if stop.culprit != credible[0]:
        raise VerificationError(f"{where}: culprit {stop.culprit} is not the most likely commit {credible[0]}")
    start = state.start
    if start.steps_alpha is None:  # a plan from before the checks: one commit at the confidence is the culprit
        if (stop.outcome is Outcome.CULPRIT) != (len(credible) == 1):
            raise VerificationError(f"{where}: outcome {stop.outcome.value} with a credible set of {len(credible)} "
                                    f"commit(s) at the confidence {start.confidence:g}")
        return
    test = second_step_test(pairs, n, credible[0])
    if (stop.outcome is Outcome.MULTIPLE_STEPS) != (test is not None and test.rejects(start.steps_alpha)):
        raise VerificationError(f"{where}: outcome {stop.outcome.value}, but the test for a second step gives p "
                                f"{'—' if test is None else f'{test.p:.4g}'} at the level {start.steps_alpha:g}")
    named = len(credible) == 1 and _step_confirmed(state, credible[0])
    if stop.outcome is not Outcome.MULTIPLE_STEPS and (stop.outcome is Outcome.CULPRIT) != named:
        raise VerificationError(f"{where}: outcome {stop.outcome.value} with a credible set of {len(credible)} "
                                f"commit(s) at the confidence {start.confidence:g} and the step's jump between "
                                f"its neighbours {'shown' if named else 'not shown'}")


def _step_confirmed(state: BisectState, named: int) -> bool:
    """checks.step_confirmed of the step at `named`, on what the journal holds (BisectState.neighbour_judged)."""
    judged, rule, since = state.neighbour_judged(named)
    return step_confirmed(judged, state.start.n, named, rule, since)


def _inside(folder: Path, relative: str, where: str, what: str) -> Path:
    """A path a probe_end names, read inside the bisect folder; one that leads out of it is refused."""
    path = PurePosixPath(relative)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise VerificationError(f"{where}: {what} {relative!r} is not a path inside the bisect folder")
    return folder.joinpath(*path.parts)


def _verify_probe(folder: Path, end: ProbeEnd, metric: str, where: str) -> int:
    """The probe's gate finding has its journaled sha256; its series verifies with it, and the pairs that name
    their runs hold those runs' values. 1 when a series was checked, else 0 (a probe never measured has none)."""
    finding = None if end.finding is None else _inside(folder, end.finding, where, "finding")
    if finding is not None and end.finding_sha256 is not None:
        try:
            actual = sha256_file(finding)
        except OSError as exc:
            raise VerificationError(f"{where}: commit {end.commit}: its gate's finding {finding} cannot be read "
                                    f"({exc.strerror or exc})") from None
        if actual != end.finding_sha256:
            raise VerificationError(f"{where}: commit {end.commit}: {finding} has sha256 {actual}, the journal "
                                    f"records {end.finding_sha256}")
    if end.series is None:
        return 0
    series = _inside(folder, end.series, where, "series")
    try:
        verify_series(series, finding)
    except GatekitError as exc:
        raise VerificationError(f"{where}: commit {end.commit}: {exc}") from None
    if finding is not None:
        _verify_pair_values(end, finding, metric, where)
    return 1


def _verify_pair_values(end: ProbeEnd, finding_path: Path, metric: str, where: str) -> None:
    """Each pair that names its two runs holds their values of the metric, as the probe gate's (verified)
    finding records them, and both runs counted there."""
    from gatekit.finding import load_finding

    named = [p for p in end.pairs if p.probe_run or p.reference_run]
    if not named:
        return
    runs = {run.label: run for run in load_finding(finding_path).runs}
    for index, pair in enumerate(named):
        for label, value in ((pair.probe_run, pair.probe_value), (pair.reference_run, pair.reference_value)):
            run = runs.get(label)
            recorded = None if run is None else run.value_of(metric)
            if run is None or not run.used or recorded is None or not math.isclose(recorded, value, rel_tol=1e-12):
                state = ("no such run" if run is None else "not used by its gate" if not run.used
                         else f"{metric} = {recorded!r}")
                raise VerificationError(f"{where}: commit {end.commit}: pair {index + 1} has {value!r} for run "
                                        f"{label!r}; {finding_path} says {state}")


def _verify_finding(state: BisectState, required: bool) -> Path | None:
    """Both twins equal the finding rebuilt from the journal, field by field."""
    toml_path, json_path = finding_paths(state.folder)
    if not json_path.is_file() and not toml_path.is_file() and not required:
        return None
    expected = build_finding(state).to_dict()
    for path in (json_path, toml_path):
        if not path.is_file():
            raise VerificationError(f"{path}: missing; the journal says the bisect stopped")
        try:
            written = read_bisect_finding(path).to_dict()
        except GatekitError as exc:
            raise VerificationError(str(exc)) from None
        difference = first_difference(written, expected, recomputed=True)
        if difference is not None:
            raise VerificationError(f"{path}: differs from the finding rebuilt from {state.folder / BISECT_JOURNAL}: "
                                    f"{difference}")
    return json_path

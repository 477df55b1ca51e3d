"""The bisect finding: a pure function of the journal, its effect checked by hand and with scipy, its twins."""

from __future__ import annotations

import json
import math
import statistics
import tomllib
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import scipy.stats

from gatekit.bisect import posterior
from gatekit.bisect.finding import (build_finding, effect_interval, finding_paths, read_bisect_finding,
                                    write_bisect_finding)
from gatekit.bisect.records import BisectStop, ProbeStatus, replay
from gatekit.bisect.search import Outcome
from gatekit.errors import FindingError, SeriesError
from tests.bisect_kit import (BUILD_FAILED, COMMITS, CULPRIT, N, SKIPPED, SLOWDOWN, probe_events, start_event,
                              write_events, write_example)


def test_the_finding_names_the_culprit_with_the_posterior_of_the_journaled_pairs(tmp_path: Path) -> None:
    journal = write_example(tmp_path)
    state = replay(tmp_path)
    finding = build_finding(state)
    probabilities = posterior.posterior(state.pairs(), N)
    assert finding.outcome is Outcome.CULPRIT
    assert finding.culprit == COMMITS[CULPRIT] and finding.culprit_index == CULPRIT
    assert finding.culprit_posterior == pytest.approx(float(probabilities[CULPRIT - 1]), rel=1e-12)
    assert finding.culprit_posterior > finding.confidence == 0.95
    assert finding.credible_set == (COMMITS[CULPRIT],)
    assert [(p.index, p.sha) for p in finding.probabilities] == [(k, COMMITS[k].sha) for k in range(1, N + 1)]
    assert [p.probability for p in finding.probabilities] == pytest.approx(list(probabilities), rel=1e-12)
    assert finding.journal_sha256 == journal.head
    assert (finding.runs, finding.rounds) == (2 * 3 * 4, 4)  # four measured probes of three pairs; rounds 0-3
    assert (finding.good, finding.bad, finding.started, finding.ended) == (
        COMMITS[0], COMMITS[N], "2026-12-01T18:00:00+00:00", "2026-12-01T18:09:00+00:00")


def test_the_effect_at_the_culprit_by_hand_and_by_scipy(tmp_path: Path) -> None:
    write_example(tmp_path)
    state = replay(tmp_path)
    finding = build_finding(state)
    ends = [e for e in state.finished if e.status is ProbeStatus.MEASURED]
    # by hand: a = [probe ≥ k] − [reference ≥ k], d = log(probe value / reference value)
    a = np.array([float(e.commit >= CULPRIT) - float(e.reference >= CULPRIT) for e in ends for _ in e.pairs])
    d = np.array([math.log(p.probe_value / p.reference_value) for e in ends for p in e.pairs])
    delta = (a @ d) / (a @ a)
    se = math.sqrt(((d - delta * a) ** 2).sum() / ((len(d) - 1) * (a @ a)))
    t = scipy.stats.t.ppf(0.975, len(d) - 1)
    by_hand = [100 * (math.exp(x) - 1) for x in (delta, delta - t * se, delta + t * se)]
    # scipy: least squares through the origin, and its t interval
    coef, residues, *_ = scipy.linalg.lstsq(a[:, None], d)
    low, high = scipy.stats.t.interval(0.95, len(d) - 1, loc=coef[0], scale=math.sqrt(residues / (len(d) - 1) / (a @ a)))
    by_scipy = [100 * math.expm1(x) for x in (coef[0], low, high)]
    got = [finding.effect_pct, finding.ci_low_pct, finding.ci_high_pct]
    assert got == pytest.approx(by_hand, rel=1e-9) and got == pytest.approx(by_scipy, rel=1e-9)
    # a slowdown of a time metric is positive, and the interval holds the 10 % the example injected
    assert finding.ci_low_pct < 100 * (SLOWDOWN - 1) < finding.ci_high_pct and finding.ci_low_pct > 0


def test_one_pair_gives_no_interval() -> None:
    pairs = (posterior.Pair(2, 0, 0.1),)
    assert effect_interval(pairs, 2, 1) == (None, None, None)


def test_every_probe_with_its_values_and_the_skipped_commits_with_why(tmp_path: Path) -> None:
    write_example(tmp_path)
    state = replay(tmp_path)
    finding = build_finding(state)
    assert [(p.index, p.reference, p.round, p.status) for p in finding.probes] == [
        (e.commit, e.reference, e.round, e.status) for e in state.finished]
    endpoints = finding.probes[0]
    journaled = state.finished[0].pairs
    assert endpoints.commit == COMMITS[N] and endpoints.folder == "probes/06-r0"
    assert endpoints.values == tuple(p.probe_value for p in journaled)
    assert endpoints.reference_values == tuple(p.reference_value for p in journaled)
    assert endpoints.median_log_diff == statistics.median(math.log(p.probe_value) - math.log(p.reference_value)
                                                          for p in journaled)
    assert endpoints.runs == 6 and endpoints.finding == "probes/06-r0/finding.json"
    assert [(s.index, s.commit, s.status, s.why) for s in finding.skipped] == [
        (SKIPPED, COMMITS[SKIPPED], ProbeStatus.SKIPPED, "the build exited 125: cannot be tested"),
        (BUILD_FAILED, COMMITS[BUILD_FAILED], ProbeStatus.BUILD_FAILED, "the build exited 2")]
    skipped_probe = next(p for p in finding.probes if p.index == SKIPPED)
    assert skipped_probe.values == () and skipped_probe.median_log_diff is None and skipped_probe.runs == 0


def test_the_twins_hold_the_same_finding_and_read_back(tmp_path: Path) -> None:
    write_example(tmp_path)
    finding = build_finding(replay(tmp_path))
    toml_path, json_path = write_bisect_finding(tmp_path, finding)
    assert (toml_path, json_path) == finding_paths(tmp_path)
    assert read_bisect_finding(toml_path) == read_bisect_finding(json_path) == finding
    assert tomllib.loads(toml_path.read_text()) == json.loads(json_path.read_text())
    assert json.loads(json_path.read_text())["schema"] == "gatekit.bisect/1"


def test_a_bisect_that_stopped_at_the_endpoints_has_no_posterior(tmp_path: Path) -> None:
    events = [start_event(), *probe_events()[:2],
              BisectStop(Outcome.NO_CHANGE, None, (), (), 6, 1, 0, ended="2026-12-01T18:01:00+00:00")]
    write_events(tmp_path, events)
    finding = build_finding(replay(tmp_path))
    assert finding.outcome is Outcome.NO_CHANGE and finding.culprit is None and finding.culprit_index is None
    assert finding.credible_set == () and finding.probabilities == () and finding.effect_pct is None
    write_bisect_finding(tmp_path, finding)
    assert read_bisect_finding(finding_paths(tmp_path)[0]) == finding  # TOML has no null: Nones left out


def test_a_bisect_that_has_not_stopped_has_no_finding(tmp_path: Path) -> None:
    write_example(tmp_path, stop=False)
    with pytest.raises(SeriesError, match="the bisect has not stopped"):
        build_finding(replay(tmp_path))


def test_a_document_of_another_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"schema": "gatekit.finding/2"}))
    with pytest.raises(FindingError, match=r"f.json: schema: 'gatekit.finding/2' is not 'gatekit.bisect/1' \(not a "
                                           r"gatekit bisect\)"):
        read_bisect_finding(path)
    path.write_text(json.dumps({"schema": "gatekit.bisect/1", "arm": "off"}))
    with pytest.raises(FindingError, match="f.json: good: is missing"):
        read_bisect_finding(path)
    with pytest.raises(FindingError, match="no bisect finding here"):
        read_bisect_finding(tmp_path / "none.json")

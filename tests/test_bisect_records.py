"""The bisect's journal events through the codec, the plan file, and replay of a journal written by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gatekit.bisect.posterior import Pair
from gatekit.bisect.records import (BISECT_JOURNAL, BISECT_JOURNAL_SCHEMA, BISECT_PLAN, BisectResume, BisectStart,
                                    BisectStop, MeasuredPair, ProbeEnd, ProbeStart, ProbeStatus, plan_toml, read_plan,
                                    replay)
from gatekit.bisect.search import Outcome
from gatekit.commits import BuildResult, BuildStatus
from gatekit.errors import SeriesError, VerificationError
from gatekit.records import RecordError
from gatekit.storage import Journal, atomic_write_text, line_sha256
from gatekit.verify import verify_chain
from tests import bisect_kit as kit

COMMITS = kit.COMMITS[:5]  # 0 GOOD … 4 BAD


def start_event(**changes: object) -> BisectStart:
    return kit.start_event(**{"commits": COMMITS, "bad": COMMITS[-1], **changes})


def measured(commit: int, reference: int, round_: int, values: list[tuple[float, float]]) -> ProbeEnd:
    return ProbeEnd(commit, reference, round_, ProbeStatus.MEASURED, tuple(MeasuredPair(p, r) for p, r in values),
                    "", BuildResult(BuildStatus.BUILT, 0, "build.log"), f"probes/{commit:02d}-r{round_}/finding.json",
                    "cd" * 32, series=f"probes/{commit:02d}-r{round_}/runs/s1",
                    decision="regression" if round_ == 0 else "")


EVENTS = [
    start_event(),
    start_event(build=None, address="ray://head:10001"),
    BisectResume("interrupted", "2026-12-01T18:05:00+00:00"),
    ProbeStart(4, 0, 0, "probes/04-r0", started="2026-12-01T18:00:01+00:00"),
    measured(4, 0, 0, [(1.10, 1.00), (1.12, 1.01)]),
    ProbeEnd(2, 0, 1, ProbeStatus.SKIPPED, (), "build exited 125", BuildResult(BuildStatus.SKIPPED, 125, "build.log"),
             None, None),
    ProbeEnd(3, 0, 1, ProbeStatus.INVALID, (), "every run contaminated", None, "probes/03-r1/f.json", "ef" * 32, runs=6),
    BisectStop(Outcome.CULPRIT, 3, (0.01, 0.02, 0.96, 0.01), (3,), 14, 3, 0, ended="2026-12-01T18:20:00+00:00"),
    BisectStop(Outcome.NO_CHANGE, None, (), (), 6, 1, 0),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_the_codec_and_the_journal(tmp_path: Path, event: object) -> None:
    assert type(event).from_dict(json.loads(json.dumps(event.to_dict()))) == event  # type: ignore[attr-defined]
    journal = Journal(tmp_path / "j.jsonl")
    assert journal.record(event) == event  # type: ignore[arg-type]


def test_the_first_line_keeps_the_chain_format_and_the_events_format_apart(tmp_path: Path) -> None:
    journal = Journal(tmp_path / BISECT_JOURNAL)
    written = journal.append(BisectStart.KIND, **start_event().to_dict())
    assert written["schema"] == "gatekit.journal/3" and written["bisect_schema"] == BISECT_JOURNAL_SCHEMA
    assert BisectStart.from_dict(written).schema == BISECT_JOURNAL_SCHEMA


def test_the_log_difference_is_that_of_the_two_values() -> None:
    pair = MeasuredPair(2.5, 2.0).pair(3, 0)
    assert (pair.probe, pair.reference) == (3, 0)
    assert pair.log_diff == pytest.approx(0.22314355131420976, rel=1e-14)  # ln 1.25, by hand
    assert MeasuredPair(1.0, math.e).pair(1, 2).log_diff == pytest.approx(-1.0, abs=1e-15)


@pytest.mark.parametrize("probe, reference, bad", [(0.0, 1.0, "probe_value"), (-1.5, 1.0, "probe_value"),
                                                    (1.0, math.nan, "reference_value"),
                                                    (math.inf, 1.0, "probe_value"), (True, 1.0, "probe_value")])
def test_values_that_have_no_logarithm_are_refused(probe: float, reference: float, bad: str) -> None:
    with pytest.raises(RecordError, match=rf"^{bad}: must be a positive finite number"):
        MeasuredPair(probe, reference)
    with pytest.raises(RecordError, match=bad):
        MeasuredPair.from_dict({"probe_value": probe, "reference_value": reference})


def test_a_probe_end_says_whether_its_pairs_count() -> None:
    with pytest.raises(RecordError, match="a measured probe has at least one pair"):
        ProbeEnd(1, 0, 1, ProbeStatus.MEASURED, (), "", None, None, None)
    with pytest.raises(RecordError, match="a skipped probe has no pairs"):
        ProbeEnd(1, 0, 1, ProbeStatus.SKIPPED, (MeasuredPair(1.0, 1.0),), "", None, None, None)


def test_the_plan_file_reads_back_as_the_start_it_preregistered(tmp_path: Path) -> None:
    for start in (start_event(), start_event(build=None), start_event(floor_pct=1.0, steps_alpha=0.01),
                  start_event(floor_pct=1.0, steps_alpha=0.01, neighbour_rule=2)):
        atomic_write_text(tmp_path / BISECT_PLAN, plan_toml(start))
        assert read_plan(tmp_path / BISECT_PLAN) == start
    # a plan without the key keeps rule 1; a rule this gatekit does not know is refused, naming the key
    assert "neighbour_rule" not in plan_toml(start_event(floor_pct=1.0, steps_alpha=0.01))
    atomic_write_text(tmp_path / BISECT_PLAN, plan_toml(start_event(neighbour_rule=2)).replace(
        "neighbour_rule = 2", "neighbour_rule = 7"))
    with pytest.raises(SeriesError, match="neighbour_rule: rule 7 is not one this gatekit knows"):
        read_plan(tmp_path / BISECT_PLAN)
    (tmp_path / BISECT_PLAN).write_text('schema = "gatekit.bisect-plan/9"\n')
    with pytest.raises(SeriesError, match="newer gatekit"):
        read_plan(tmp_path / BISECT_PLAN)


def test_replay_of_a_hand_written_journal(tmp_path: Path) -> None:
    endpoints = measured(4, 0, 0, [(1.10, 1.00), (1.12, 1.01), (1.09, 0.99)])
    skipped = ProbeEnd(1, 0, 1, ProbeStatus.BUILD_FAILED, (), "build exited 2",
                       BuildResult(BuildStatus.FAILED, 2, "build.log"), None, None)
    middle = measured(2, 0, 1, [(1.0, 1.0)])
    invalid = ProbeEnd(3, 0, 2, ProbeStatus.INVALID, (), "trainer failed", None, None, None, runs=4)
    journal = kit.write_events(tmp_path, [
        start_event(), ProbeStart(4, 0, 0, "probes/04-r0"), endpoints,
        ProbeStart(1, 0, 1, "probes/01-r1"), ProbeStart(2, 0, 1, "probes/02-r1"), skipped, middle,
        BisectResume("interrupted", "2026-12-01T18:05:00+00:00"),
        ProbeStart(3, 0, 2, "probes/03-r2"), invalid, ProbeStart(3, 0, 3, "probes/03-r3")])
    state = replay(tmp_path)
    assert state.start == start_event() and state.n == 4
    assert state.finished == (endpoints, skipped, middle, invalid)
    assert state.unfinished == (ProbeStart(3, 0, 3, "probes/03-r3"),)
    assert state.stop is None and len(state.resumes) == 1
    assert state.endpoints() == endpoints
    assert state.pairs() == (Pair(4, 0, math.log(1.10) - math.log(1.00)), Pair(4, 0, math.log(1.12) - math.log(1.01)),
                             Pair(4, 0, math.log(1.09) - math.log(0.99)), Pair(2, 0, 0.0))
    assert state.skipped() == frozenset({1}) and state.invalid() == frozenset({3})
    assert state.runs() == 2 * 3 + 0 + 2 * 1 + 4
    assert state.rounds() == 3  # rounds 0, 1 and 2 finished
    assert state.chain_head == journal.head == line_sha256((tmp_path / BISECT_JOURNAL).read_bytes().splitlines()[-1])
    verify_chain(tmp_path / BISECT_JOURNAL, tmp_path / BISECT_PLAN)  # the chain anchors on the plan

    journal.record(BisectStop(Outcome.CREDIBLE_SET, 2, (0.1, 0.5, 0.3, 0.1), (2, 3), 12, 3, 0))
    assert replay(tmp_path).stop == BisectStop(Outcome.CREDIBLE_SET, 2, (0.1, 0.5, 0.3, 0.1), (2, 3), 12, 3, 0)


def test_a_tampered_line_is_found(tmp_path: Path) -> None:
    kit.write_events(tmp_path, [start_event(), ProbeStart(4, 0, 0, "probes/04-r0"),
                            measured(4, 0, 0, [(1.10, 1.00), (1.12, 1.01)]),
                            BisectStop(Outcome.NO_CHANGE, None, (), (), 4, 1, 0)])
    path = tmp_path / BISECT_JOURNAL
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"probe_value": 1.12', b'"probe_value": 1.02')
    path.write_bytes(b"".join(lines))
    assert replay(tmp_path).pairs()[1].log_diff == pytest.approx(math.log(1.02 / 1.01))  # replay trusts the chain
    with pytest.raises(VerificationError, match=r"line 4 \(bisect_stop\): prev does not match line 3"):
        verify_chain(path, tmp_path / BISECT_PLAN)
    lines[2] = lines[2].replace(b'"probe_value": 1.02', b'"probe_value": -1.02')
    path.write_bytes(b"".join(lines))
    with pytest.raises(SeriesError, match=r"line 3 \('probe_end'\) is not what gatekit wrote \(probe_value: must be "
                                          r"a positive finite number"):
        replay(tmp_path)


def test_a_changed_plan_breaks_the_chain(tmp_path: Path) -> None:
    kit.write_events(tmp_path, [start_event()])
    (tmp_path / BISECT_PLAN).write_text(plan_toml(start_event(confidence=0.5)))
    with pytest.raises(VerificationError, match=rf"line 1 \(bisect_start\): prev does not match .*{BISECT_PLAN}"):
        verify_chain(tmp_path / BISECT_JOURNAL, tmp_path / BISECT_PLAN)


@pytest.mark.parametrize("events, problem", [
    ([], "empty journal; the bisect never started"),
    ([ProbeStart(4, 0, 0, "p")], "line 1: does not begin with bisect_start"),
    ([start_event(), ProbeStart(5, 0, 1, "p")], r"line 2 \('probe_start'\) is not what gatekit wrote \(commit: 5 is "
                                                 r"not a commit of the range 0 … 4\)"),
    ([start_event(), start_event()], "line 2: a second bisect_start"),
])
def test_a_journal_gatekit_did_not_write_is_named(tmp_path: Path, events: list[object], problem: str) -> None:
    journal = Journal(tmp_path / BISECT_JOURNAL)
    for event in events:
        journal.append(event.KIND, **event.to_dict())  # type: ignore[attr-defined]
    (tmp_path / BISECT_JOURNAL).touch()
    with pytest.raises(SeriesError, match=problem):
        replay(tmp_path)


def test_a_folder_without_a_journal_is_not_a_bisect(tmp_path: Path) -> None:
    with pytest.raises(SeriesError, match="no bisect.jsonl here; is this a bisect folder"):
        replay(tmp_path)

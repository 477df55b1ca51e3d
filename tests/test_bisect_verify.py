"""`gate verify` of a bisect folder: the chain on the plan, the stop, the finding rebuilt from the journal,
and every probe's series with its gate's finding; each kind of tampering is named."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from gatekit.bisect.finding import bisect_folder_of, build_finding, finding_paths, write_bisect_finding
from gatekit.bisect.records import BISECT_JOURNAL, BISECT_PLAN, BisectStop, plan_toml, replay
from gatekit.bisect.search import Outcome
from gatekit.bisect.verify import verify_bisect
from gatekit.errors import VerificationError
from gatekit.bisect.records import MeasuredPair, ProbeEnd
from gatekit.finding import load_finding
from tests.bisect_kit import CULPRIT, N, probe_events, start_event, stop_of, with_gate, write_events, write_example
from tests.conftest import gate_invoke, make_gate
from tests.fakes import install_fake_machine


@pytest.fixture(scope="module")
def probe_gate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One real gate's series and finding (the fixture trainer played in this process), every probe's gate."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        install_fake_machine(monkeypatch)
        gate = make_gate(tmp_path_factory.mktemp("probe-gate") / "gate", driver={"name": "fake"})
        ran = gate_invoke("run", "off", "on", cwd=gate.root)
    assert ran.returncode == 0, ran.stderr
    (series,) = gate.series_dirs()
    (finding,) = gate.findings()
    return series, finding


@pytest.fixture
def bisect(tmp_path: Path, probe_gate: tuple[Path, Path]) -> Path:
    folder = tmp_path / "bisect"
    write_example(folder, probe_gate=probe_gate)
    write_bisect_finding(folder, build_finding(replay(folder)))
    return folder


def fails(folder: Path, *args: str) -> str:
    verified = gate_invoke("verify", str(folder), *args, cwd=folder.parent)
    assert verified.returncode == 3, verified.stdout + verified.stderr
    return verified.stderr


def test_an_untouched_bisect_verifies(bisect: Path) -> None:
    report = verify_bisect(bisect)
    assert report.probes == 4 and report.finding == finding_paths(bisect)[1]
    assert report.chain_head == replay(bisect).chain_head and report.events == 1 + 2 * 6 + 1
    for named in (bisect, *finding_paths(bisect)):
        assert bisect_folder_of(named) == bisect
        verified = gate_invoke("verify", str(named), cwd=bisect.parent)
        assert verified.returncode == 0, verified.stderr
        assert f"verified bisect: 14 events, chain head {report.chain_head} (4 probe series" in verified.stdout


def test_a_tampered_finding_is_named(bisect: Path) -> None:
    toml_path, json_path = finding_paths(bisect)
    document = json.loads(json_path.read_text())
    document["effect_pct"] = 3.0
    json_path.write_text(json.dumps(document))
    assert re.search(rf"{json_path}: differs from the finding rebuilt from .*{BISECT_JOURNAL}: effect_pct 3.0 != ",
                     fails(bisect))
    write_bisect_finding(bisect, build_finding(replay(bisect)))
    toml_path.write_text(toml_path.read_text().replace(f"culprit_index = {CULPRIT}", "culprit_index = 3"))
    assert f"{toml_path}: differs from the finding rebuilt from" in fails(bisect)
    toml_path.unlink()
    assert f"{toml_path}: missing; the journal says the bisect stopped" in fails(bisect)


def test_a_tampered_journal_is_named(bisect: Path) -> None:
    path = bisect / BISECT_JOURNAL
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"decision": "regression"', b'"decision": "no_change"')
    path.write_bytes(b"".join(lines))
    assert f"{path}: line 4 (probe_start): prev does not match line 3" in fails(bisect)


def test_a_changed_plan_is_named(bisect: Path) -> None:
    (bisect / BISECT_PLAN).write_text(plan_toml(start_event(confidence=0.5)))
    assert f"line 1 (bisect_start): prev does not match {bisect / BISECT_PLAN}" in fails(bisect)


def test_a_changed_copy_of_the_gate_file_is_named(bisect: Path) -> None:
    """Every probe's gate file was made from the bisect's copy of its gate file, whose sha256 the plan holds."""
    copy = bisect / "gate.toml"
    planned = replay(bisect).start.gate_sha256
    copy.write_text(copy.read_text() + "n = 1\n")
    assert re.search(rf"{copy}: has sha256 [0-9a-f]{{64}}, the plan's gate_sha256 is {planned}", fails(bisect))
    copy.unlink()
    assert f"{copy}: the bisect's copy of its gate file cannot be read" in fails(bisect)


def test_a_tampered_probe_finding_is_named(bisect: Path) -> None:
    end = replay(bisect).finished[0]
    assert end.finding is not None
    finding = bisect / end.finding
    finding.write_text(finding.read_text().replace('"decision": "', '"decision": "x', 1))
    assert re.search(rf"{bisect / BISECT_JOURNAL}: line 3 \(probe_end\): commit {N}: {finding} has sha256 [0-9a-f]{{64}}, "
                     rf"the journal records {end.finding_sha256}", fails(bisect))


def test_a_tampered_probe_series_is_named(bisect: Path) -> None:
    end = replay(bisect).finished[-1]
    assert end.series is not None
    record = bisect / end.series / "off-r1" / "record.json"
    record.write_text(record.read_text().replace('"arm": "off"', '"arm": "on"'))
    problem = fails(bisect)
    assert f"{bisect / BISECT_JOURNAL}: line 13 (probe_end): commit {CULPRIT}: {record}" in problem
    shutil.rmtree(bisect / end.series)
    assert f"line 13 (probe_end): commit {CULPRIT}: " in fails(bisect)


def test_a_stop_the_journaled_pairs_do_not_give_is_named(tmp_path: Path) -> None:
    state_folder = tmp_path / "honest"
    write_example(state_folder)
    honest = replay(state_folder).stop
    assert honest is not None and honest.credible == (CULPRIT,)
    forged = BisectStop(Outcome.CULPRIT, 3, tuple(reversed(honest.probabilities)), (3,), honest.runs, honest.rounds, 0)
    folder = tmp_path / "forged"
    write_events(folder, [start_event(), *probe_events(), forged])  # a valid chain around a stop the pairs refute
    assert re.search(r"line 14 \(bisect_stop\): P\(culprit = 3\) 0.99.* != 2.1.*e-10, the posterior of the journaled pairs", fails(folder))
    with pytest.raises(VerificationError, match="credible set"):
        verify_bisect(_with_stop(tmp_path / "forged-set", honest.probabilities, (3, 4)))
    with pytest.raises(VerificationError, match=r"line 14 \(bisect_stop\): outcome credible_set with a credible set "
                                                r"of 1 commit\(s\) at the confidence 0.95"):
        verify_bisect(_with_stop(tmp_path / "forged-outcome", honest.probabilities, honest.credible))
    write_events(tmp_path / "forged-culprit", [start_event(), *probe_events(), dataclasses.replace(honest, culprit=3)])
    with pytest.raises(VerificationError, match=rf"culprit 3 is not the most likely commit {CULPRIT}"):
        verify_bisect(tmp_path / "forged-culprit")


def _with_stop(folder: Path, probabilities: tuple[float, ...], credible: tuple[int, ...]) -> Path:
    write_events(folder, [start_event(), *probe_events(),
                          BisectStop(Outcome.CREDIBLE_SET, credible[0], probabilities, credible, 24, 4, 0)])
    return folder


def test_a_probe_path_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    events = probe_events()
    events[1] = dataclasses.replace(events[1], series="../elsewhere")  # type: ignore[arg-type]
    write_events(tmp_path / "b", [start_event(), *events])
    with pytest.raises(VerificationError, match=r"line 3 \(probe_end\): series '../elsewhere' is not a path inside"):
        verify_bisect(tmp_path / "b")


def test_a_bisect_not_stopped_verifies_without_a_finding(tmp_path: Path, probe_gate: tuple[Path, Path]) -> None:
    write_example(tmp_path, stop=False, probe_gate=probe_gate)
    report = verify_bisect(tmp_path)
    assert report.finding is None and report.probes == 4


def test_a_bisect_folder_is_verified_alone(bisect: Path) -> None:
    verified = gate_invoke("verify", str(bisect), str(finding_paths(bisect)[1]), cwd=bisect.parent)
    assert verified.returncode == 2 and "a bisect folder is verified alone" in verified.stderr


def test_pairs_that_name_their_runs_hold_those_runs_values(tmp_path: Path, probe_gate: tuple[Path, Path]) -> None:
    values = {run.label: run.value_of("train_elapsed_s") for run in load_finding(probe_gate[1]).runs if run.used}
    honest = tuple(MeasuredPair(values[f"on-r{k}"], values[f"off-r{k}"], f"on-r{k}", f"off-r{k}")  # type: ignore[arg-type]
                   for k in (1, 2, 3))
    forged = (dataclasses.replace(honest[0], probe_value=honest[0].probe_value * 1.1), *honest[1:])
    unknown = (dataclasses.replace(honest[0], reference_run="off-r9"), *honest[1:])
    problems = {}
    for name, pairs in (("honest", honest), ("forged", forged), ("unknown", unknown)):
        folder = tmp_path / name
        events = probe_events()
        endpoints = events[1]
        assert isinstance(endpoints, ProbeEnd)
        events[1] = with_gate(folder, dataclasses.replace(endpoints, pairs=pairs), *probe_gate)
        write_events(folder, [start_event(), *events[:2]])
        try:
            verify_bisect(folder)
        except VerificationError as exc:
            problems[name] = str(exc)
    assert "honest" not in problems
    assert re.search(rf"line 3 \(probe_end\): commit {N}: pair 1 has {forged[0].probe_value!r} for run 'on-r1'; "
                     rf".*finding.json says train_elapsed_s = {honest[0].probe_value!r}", problems["forged"])
    assert "pair 1 has" in problems["unknown"] and "for run 'off-r9'" in problems["unknown"]
    assert problems["unknown"].endswith("says no such run")


def test_each_plan_verifies_by_its_own_neighbour_rule(tmp_path: Path, probe_gate: tuple[Path, Path]) -> None:
    # the example's pairs at 3 and 4 all came before 4 first held the confidence: rule 1 (a plan from before the
    # rules were numbered) judges them and names 4; rule 2 judges only later pairs, and there are none
    for rule, said, refused in ((None, Outcome.CULPRIT, Outcome.CREDIBLE_SET),
                                (2, Outcome.CREDIBLE_SET, Outcome.CULPRIT)):
        for outcome in (said, refused):
            folder = tmp_path / f"rule-{rule}-{outcome.value}"
            events = [with_gate(folder, e, *probe_gate) if isinstance(e, ProbeEnd) and e.series else e
                      for e in probe_events()]
            journal = write_events(folder, [start_event(floor_pct=1.0, steps_alpha=0.01, neighbour_rule=rule),
                                            *events])
            journal.record(dataclasses.replace(stop_of(folder), outcome=outcome))
            if outcome is said:
                verify_bisect(folder, finding_required=False)
            else:
                with pytest.raises(VerificationError, match="the step's jump between its neighbours"):
                    verify_bisect(folder, finding_required=False)

"""A bisect folder written by hand, as `gate bisect` writes one (plan, then journal), without git or trainers:
six commits after GOOD, the fourth slows the metric down by 10 %, one commit cannot be built (exit 125), one
fails its build. The values are seeded, so every test reads the same journal."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from gatekit.bisect.posterior import credible_set, posterior
from gatekit.bisect.records import (BISECT_JOURNAL, BISECT_PLAN, GATE_COPY, BisectStart, BisectStop, MeasuredPair, ProbeEnd,
                                    ProbeStart, ProbeStatus, plan_toml, replay)
from gatekit.bisect.search import Outcome
from gatekit.commits import BuildResult, BuildStatus, Commit
from gatekit.provenance import sha256_file
from gatekit.records import Event
from gatekit.storage import Journal, atomic_write_text

N = 6  # commits 0 (GOOD) … 6 (BAD)
CULPRIT = 4
SLOWDOWN = 1.10
LEVEL_S = 20.0
CV = 0.005
SKIPPED, BUILD_FAILED = 2, 1
COMMITS = tuple(Commit(f"{i + 1:x}{'0' * 38}{i:x}", f"commit {i}: change {i}", f"2026-11-{i + 10:02d}T09:30:00+01:00")
                for i in range(N + 1))


GATE_TEXT = '[gate]\nid = "tiny"\n'  # the bisect's copy of its gate file (the plan holds its sha256)


def start_event(**changes: object) -> BisectStart:
    fields = dict(good=COMMITS[0], bad=COMMITS[-1], commits=COMMITS, gate_file="gate.toml",
                  gate_sha256=hashlib.sha256(GATE_TEXT.encode()).hexdigest(),
                  arm="off", metric="train_elapsed_s", higher_is_better=False, build=("make",), confidence=0.95,
                  budget=60, max_parallel=2, engine="local", pairs_per_probe=3,
                  started="2026-12-01T18:00:00+00:00", host="box")
    fields.update(changes)
    return BisectStart(**fields)  # type: ignore[arg-type]


def level(commit: int) -> float:
    return LEVEL_S * (SLOWDOWN if commit >= CULPRIT else 1.0)


def measured(rng: np.random.Generator, commit: int, reference: int, round_: int, pairs: int = 3) -> ProbeEnd:
    drift = rng.normal(0.0, 0.02, pairs)  # the machine's level moves; it cancels within a pair
    values = [MeasuredPair(level(commit) * np.exp(d + rng.normal(0, CV)), level(reference) * np.exp(d + rng.normal(0, CV)))
              for d in drift]
    folder = probe_folder(commit, round_)
    return ProbeEnd(commit, reference, round_, ProbeStatus.MEASURED, tuple(values), "",
                    BuildResult(BuildStatus.BUILT, 0, "build.log"), f"{folder}/finding.json", None,
                    series=f"{folder}/runs/series", decision="regression" if round_ == 0 else "",
                    ended=f"2026-12-01T18:0{round_}:30+00:00")


def probe_folder(commit: int, round_: int) -> str:
    return f"probes/{commit:02d}-r{round_}"


def write_events(folder: Path, events: Sequence[Event]) -> Journal:
    """The gate file's copy and the plan (the first event's), then every event into the chained journal."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / GATE_COPY, GATE_TEXT)
    atomic_write_text(folder / BISECT_PLAN, plan_toml(events[0]))  # type: ignore[arg-type]
    journal = Journal(folder / BISECT_JOURNAL, genesis=folder / BISECT_PLAN)
    for event in events:
        journal.record(event)
    return journal


def probe_events(seed: int = 7) -> list[Event]:
    """The probes of the example, in the order a 2-wide search would run them, each started then ended."""
    rng = np.random.default_rng(seed)
    ends = [measured(rng, N, 0, 0),
            measured(rng, 3, 0, 1),
            ProbeEnd(SKIPPED, 0, 1, ProbeStatus.SKIPPED, (), "the build exited 125: cannot be tested",
                     BuildResult(BuildStatus.SKIPPED, 125, "build.log"), None, None),
            measured(rng, 5, 0, 2),
            ProbeEnd(BUILD_FAILED, 0, 2, ProbeStatus.BUILD_FAILED, (), "the build exited 2",
                     BuildResult(BuildStatus.FAILED, 2, "build.log"), None, None),
            measured(rng, CULPRIT, 0, 3)]
    events: list[Event] = []
    for end in ends:
        events += [ProbeStart(end.commit, end.reference, end.round, probe_folder(end.commit, end.round)), end]
    return events


def write_example(folder: Path, *, stop: bool = True, seed: int = 7,
                  probe_gate: tuple[Path, Path] | None = None) -> Journal:
    """The example bisect, stopped as the search would stop it (its outcome from the journal's pairs).
    `probe_gate` (a series folder and its finding) is copied in as every measured probe's gate, its finding's
    sha256 journaled."""
    events = probe_events(seed)
    if probe_gate is not None:
        events = [with_gate(folder, e, *probe_gate) if isinstance(e, ProbeEnd) and e.series else e for e in events]
    journal = write_events(folder, [start_event(), *events])
    if stop:
        journal.record(stop_of(folder))
    return journal


def stop_of(folder: Path) -> BisectStop:
    """The bisect_stop the search would journal after the probes in `folder`."""
    state = replay(folder)
    probabilities = posterior(state.pairs(), state.n)
    credible = tuple(credible_set(probabilities, state.start.confidence))
    outcome = Outcome.CULPRIT if len(credible) == 1 else Outcome.CREDIBLE_SET
    return BisectStop(outcome, credible[0], tuple(map(float, probabilities)), credible, state.runs(), state.rounds(),
                      0, ended="2026-12-01T18:09:00+00:00")


def with_gate(folder: Path, end: ProbeEnd, series: Path, finding: Path) -> ProbeEnd:
    """`end` with a copy of a real gate's series and finding as its probe's, the finding's sha256 journaled."""
    assert end.series is not None and end.finding is not None
    shutil.copytree(series, folder / end.series)
    shutil.copyfile(finding, folder / end.finding)
    return dataclasses.replace(end, finding_sha256=sha256_file(folder / end.finding))

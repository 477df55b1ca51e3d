"""GPU clock state per run, the clock rule, the cycle check and the GPU's identity — from real H200 output.

Everything here comes from one NVIDIA H200 lease (2026-12-01): the NVML recordings in tests/fixtures/nvml
(`h200_identity_idle.json` with the identity fields and a clock probe, `h200_busy_clocks.json` recorded while
the A/A series below ran) and the series committed in findings/h200-2026-12-01/clocks/. Two cases cannot be
made on one lent GPU that gatekit may not reconfigure: locked clocks and an identity change. For them a
real recording is edited, and each test says which field it edits.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from gatekit.analysis import analyze
from gatekit.config import load_gate
from gatekit.driver import ChosenBackend
from gatekit.errors import PreflightError
from gatekit.preflight import check_locked_clocks
from gatekit.prereg import read_predecision
from gatekit.records import first_difference
from gatekit.series.runner import SeriesRunner
from gatekit.series_replay import evidence_from_state, read_state
from gatekit.verify import analyze_series
from gatekit_drivers.backends.cuda import CudaBackend, is_idle
from tests.nvml_replay import ReplayNvml, descendants_of_this_process, recorded_process_memory, run_label

ROOT = Path(__file__).resolve().parents[1]
CLOCKS = ROOT / "findings" / "h200-2026-12-01" / "clocks"
AA_SERIES = CLOCKS / "runs" / "graph-aa-20261201-165715"


def _samples(label: str) -> list[dict[str, Any]]:
    """A committed run's samples.csv as the backend's summarize gets them (numbers as numbers)."""
    def cell(value: str) -> Any:
        if value == "":
            return None
        try:
            return float(value)
        except ValueError:
            return value
    with (AA_SERIES / label / "samples.csv").open() as handle:
        return [{key: cell(value) for key, value in row.items()} for row in csv.DictReader(handle)]


class EditedNvml(ReplayNvml):
    """A real recording with its static fields edited (`edits`), from the moment `edit_now` is set."""

    def __init__(self, name: str, edits: dict[str, Any], *, edit_now: bool = True, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.edits, self.edit_now = edits, edit_now

    def static(self) -> dict[str, Any]:
        static = super().static()
        return {**static, **self.edits} if self.edit_now else static


# -- the clock state of one window -------------------------------------------------------------------

def test_identity_recording_gives_the_gpus_set_up_in_provenance() -> None:
    provenance = CudaBackend(reader=ReplayNvml("h200_identity_idle.json")).provenance()
    assert provenance["vbios_version"] == "96.00.A5.00.1A"
    assert (provenance["ecc_mode"], provenance["persistence_mode"]) == ("on", "on")
    assert (provenance["compute_mode"], provenance["mig_mode"]) == ("default", "off")
    assert (provenance["applications_sm_clock_mhz"], provenance["applications_mem_clock_mhz"]) == (1980.0, 3201.0)
    # NVML's P0 SM clock range on this unlocked GPU: 345 (idle) to 1980 MHz, so not locked
    assert provenance["locked_clocks"] == "not locked (P0 SM clock range 345–1980 MHz)"
    assert provenance["locked_sm_clock_mhz"] is None
    # a recording from before the identity was read says what it lacks instead of guessing
    old = CudaBackend(reader=ReplayNvml("h200_idle.json")).provenance()
    assert old["vbios_version"] is None and old["locked_clocks"] == "cannot tell (NVML did not report it)"


def test_clock_state_leaves_out_idle_samples_of_a_real_run() -> None:
    # graph_again-r5 of the A/A: its start-up read 375 MHz at 0 % utilisation with no clock-event reason (a
    # clock-down between idle and busy), and gpu_idle at 1.5 s; its training samples all read 1980 MHz
    samples = _samples("graph_again-r5")
    dip = [s for s in samples if s["gpu_sm_clock_mhz"] == 375.0]
    assert len(dip) == 1 and dip[0]["gpu_util_pct"] == 0 and dip[0]["gpu_clock_event_reasons"] == 0
    active = [s for s in samples if not is_idle(s)]
    assert {s["gpu_sm_clock_mhz"] for s in active} == {1980.0}
    state = CudaBackend(reader=ReplayNvml("h200_identity_idle.json")).summarize(samples)
    assert state["active_samples"] == len(active) and state["sm_clock_mean_mhz"] == 1980.0
    assert state["sm_clock_below_ref_frac"] == 0.0 and state["mem_clock_mean_mhz"] == 3201.0
    assert state["sm_clock_min_mhz"] == 375.0  # the minimum alone cannot tell a start-up dip from a slow run
    weights = [b["t_s"] - a["t_s"] for a, b in zip(samples, samples[1:])]
    weights.append(sorted(weights)[len(weights) // 2])
    idle = sum(w for s, w in zip(samples, weights) if is_idle(s))
    assert state["gpu_idle_frac"] == pytest.approx(idle / sum(weights), abs=1e-4)


def test_clock_state_of_the_busy_recording_counts_its_reasons_apart_from_idle() -> None:
    reader = ReplayNvml("h200_busy_clocks.json", processes=list)
    backend = CudaBackend(reader=reader)
    samples = [{"t_s": float(s["t"]), **backend.sample()} for s in reader.recorded]
    state = backend.summarize(samples)
    busy = [s for s in reader.recorded if s["gpu_util_pct"] > 0 and not s["throttle_reasons"] & 1]
    assert state["active_samples"] == len(busy) > 0
    assert state["sm_clock_mean_mhz"] == pytest.approx(
        sum(s["sm_clock_mhz"] for s in busy) / len(busy), abs=0.1)  # the recording's intervals are near equal
    assert state["gpu_idle_frac"] > 0.5  # the recorder ran on between the series' runs
    assert not any(key.startswith("clock_event_gpu_idle") for key in state)  # idle is kept apart


# -- the clock rule and the cycle check, on the committed A/A series ---------------------------------

def test_the_committed_aa_series_flags_its_one_slow_clock_run_and_no_other() -> None:
    # as recorded (the clock state was then taken over samples without the gpu_idle reason, so the 375 MHz
    # start-up sample counted): graph_again-r5 read a mean SM clock of 1748 MHz, below 0.9 x the median 1980
    finding = analyze_series(AA_SERIES)
    flagged = {run.label for run in finding.runs if run.load_evidence}
    assert flagged == {"graph_again-r5"}
    row = next(run for run in finding.runs if run.label == "graph_again-r5")
    assert row.window.telemetry["sm_clock_mean_mhz"] == pytest.approx(1747.9)
    assert finding.rules.spec.min_clock_share == 0.9 and finding.rules.spec.confirm_cycles


def test_a_cycle_delta_that_contradicts_the_time_delta_makes_the_gate_inconclusive() -> None:
    finding = analyze_series(AA_SERIES)
    cycles = finding.stats.cycles
    assert cycles is not None and cycles.runs_with_clock == cycles.used_runs == 12
    # time: +0.28 % within ±1 % (rejected); cycles: graph_again-r5's clock makes σ_off 5 % in cycles
    assert abs(finding.stats.delta_pct) < finding.stats.threshold_pct
    assert cycles.decision_in_cycles == "inconclusive" and cycles.supports is False
    assert finding.decision == "inconclusive"
    assert finding.verdict.reasons[0].startswith("Δ in cycles (time x mean SM clock) +2.27 % decides inconclusive, "
                                                 "not rejected")
    # the same runs without the preregistered check: the time decision stands, the cycle Δ still reported
    evidence = evidence_from_state((AA_SERIES, read_state(AA_SERIES),
                                    read_predecision(AA_SERIES, read_state(AA_SERIES).start.predecision_sha256)))
    spec = dataclasses.replace(evidence.spec, rules=dataclasses.replace(evidence.spec.rules, confirm_cycles=False))
    unconfirmed = analyze(dataclasses.replace(evidence, spec=spec))
    assert unconfirmed.decision == "rejected" and unconfirmed.stats.cycles == cycles


def test_the_committed_campaign_gates_decide_alike_in_cycles() -> None:
    for finding_path in sorted((CLOCKS / "campaign-one-gpu" / "findings").glob("*.json")):
        data = json.loads(finding_path.read_text())
        cycles = data["stats"]["cycles"]
        assert cycles["supports"] is True, finding_path.name
        assert cycles["decision_in_cycles"] == data["verdict"]["decision"]


def test_a_series_preregistered_before_the_clock_rules_reanalyses_unchanged() -> None:
    # a series recorded before this change: no clock keys in its predecision, no clock state in its windows;
    # its finding is recomputed exactly as committed, with no cycle figures
    recorded = ROOT / "tests" / "fixtures" / "recorded" / "classic"
    series = recorded / "runs" / "recorded-classic-20261201-151352"
    predecision = read_predecision(series, read_state(series).start.predecision_sha256)
    assert not {"min_clock_share", "confirm_cycles"} & set(predecision["decision"]["rules"])
    finding = analyze_series(series)
    assert not finding.rules.spec.min_clock_share and not finding.rules.spec.confirm_cycles
    assert finding.stats.cycles is None and "cycles" not in finding.to_dict()["stats"]
    (committed,) = (recorded / "findings").glob("*.json")
    assert finding.to_dict()["stats"] == json.loads(committed.read_text())["stats"]


# -- identity changes and locked clocks, from edited real recordings --------------------------------

class ChangeAtLastRun:
    """The compute processes of the replayed GPU (each run's trainer); during `label` it sets the reader's
    edit on, so provenance at series end sees another set-up than at its start. Once it has seen that run it
    leaves the file `seen`, which the run waits for (fake_trainer's wait_for): on a busy machine a short run
    could otherwise end between two looks at the processes and never be seen."""

    def __init__(self, label: str, seen: Path) -> None:
        self.label, self.seen = label, seen
        self.reader: EditedNvml | None = None
        self.memory = recorded_process_memory()

    def __call__(self) -> list[dict[str, Any]]:
        trainers = descendants_of_this_process()
        if self.reader is not None and any(run_label(p) == self.label for p in trainers):
            self.reader.edit_now = True
            self.seen.touch()
        return [{"pid": p.pid, "used_gpu_memory": self.memory} for p in trainers]


def test_an_identity_change_during_the_series_invalidates_it(gate_dir, tmp_path: Path) -> None:
    # EDITED recording: h200_identity_idle.json with vbios_version changed from the last run on
    seen = tmp_path / "on-r3-seen"
    g = gate_dir(off={"elapsed": {"off-r1": 10.0, "off-r2": 10.1, "off-r3": 9.9}},
                 on={"elapsed": {"on-r1": 9.0, "on-r2": 9.1, "on-r3": 8.9},
                     "wait_for": {"label": "on-r3", "path": str(seen)}}, backend={"name": "cuda"})
    config = load_gate(g.gate)
    processes = ChangeAtLastRun("on-r3", seen)
    reader = EditedNvml("h200_identity_idle.json", {"vbios_version": "96.00.A5.00.1B"}, edit_now=False,
                        processes=processes)
    processes.reader = reader
    backend = ChosenBackend(CudaBackend(reader=reader), requested="cuda", detail="replaying an H200 recording")
    result = SeriesRunner(config, config.arms["off"], config.arms["on"], backend=backend).start()
    finding = result.finding
    assert finding.decision == "invalid"
    assert ("the cuda backend's vbios_version changed during the series: '96.00.A5.00.1A' -> '96.00.A5.00.1B'"
            in finding.verdict.reasons)
    assert finding.provenance.backend["vbios_version"] == "96.00.A5.00.1A"
    assert finding.provenance.backend_end["vbios_version"] == "96.00.A5.00.1B"
    assert analyze_series(result.series_dir).to_dict() == finding.to_dict()


def _chosen(reader: ReplayNvml) -> ChosenBackend:
    return ChosenBackend(CudaBackend(reader=reader), requested="cuda", detail="replaying an H200 recording")


def test_locked_clocks_required_and_missing_refuses_to_start(gate_dir) -> None:
    g = gate_dir(gate={"require_locked_clocks": True}, backend={"name": "cuda"})
    config = load_gate(g.gate)
    assert config.gate.require_locked_clocks
    real = _chosen(ReplayNvml("h200_identity_idle.json", processes=list))
    with pytest.raises(PreflightError, match=r"locked clocks \(gate.require_locked_clocks\): cuda: not locked "
                                             r"\(P0 SM clock range 345–1980 MHz\); lock them before the series"):
        SeriesRunner(config, config.arms["off"], config.arms["on"], backend=real).start()
    assert g.order() == [] and g.series_dirs() == []
    # a recording that cannot tell (made before NVML's clock range was read) refuses too, and says so
    unknown = check_locked_clocks(_chosen(ReplayNvml("h200_idle.json")))
    assert not unknown.ok and unknown.detail.startswith("cuda: cannot tell (NVML did not report it)")
    assert not check_locked_clocks(None).ok


def test_locked_clocks_reported_let_the_series_start_and_set_the_clock_reference() -> None:
    # EDITED recording: locked_clocks [1410, 1410] (what `nvidia-smi -lgc 1410` would give), nothing else
    reader = EditedNvml("h200_identity_idle.json", {"locked_clocks": [1410, 1410]})
    found = check_locked_clocks(_chosen(reader))
    assert found.ok and found.detail == "cuda: locked at 1410 MHz"
    backend = CudaBackend(reader=reader)
    state = backend.summarize([{"t_s": 0.0, "gpu_util_pct": 99.0, "gpu_sm_clock_mhz": 1410.0,
                                "gpu_clock_event_reasons": 0}])
    assert state["sm_clock_locked_mhz"] == 1410.0 and state["sm_clock_below_ref_frac"] == 0.0


def test_duet_slots_are_compared_on_the_identity_fields() -> None:
    from gatekit.slots import unequal_gpus
    static = ReplayNvml("h200_identity_idle.json").static()
    # EDITED: the second slot's ECC turned off
    other = copy.deepcopy(static) | {"ecc_mode": [0, 0]}
    assert unequal_gpus({"cuda:0": static, "cuda:1": other}) == "cuda:0 and cuda:1 differ: ECC [1, 1] vs [0, 0]"
    assert unequal_gpus({"cuda:0": static, "cuda:1": copy.deepcopy(static)}) == ""


def test_the_committed_h200_clock_findings_are_their_series_recomputed_here(monkeypatch) -> None:
    # the findings render from the repository alone: each is its committed series analysed again, from the
    # repository's root (the paths in a finding are relative to where it is analysed)
    monkeypatch.chdir(ROOT)
    series = [AA_SERIES, *sorted((CLOCKS / "campaign-one-gpu" / "runs").glob("nightly-*/0*/*-2026*"))]
    assert len(series) == 4
    for folder in series:
        finding = analyze_series(folder.relative_to(ROOT))
        out = CLOCKS / ("findings" if folder == AA_SERIES else "campaign-one-gpu/findings")
        committed = json.loads((out / f"{finding.id}.json").read_text())
        # written on the H200 host's numpy and scipy: floats agree as `gate verify` compares them, the rest exactly
        assert first_difference(committed, finding.to_dict(), recomputed=True) is None, folder.name
        assert finding.provenance.backend_end == finding.provenance.backend  # the same set-up at both ends

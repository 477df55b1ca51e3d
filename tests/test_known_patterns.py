"""Issue 30's rows in real `gate run` series: a trainer that reports a known pattern (tests/fixtures/
fake_trainer.py's `pattern` key, keyed by seed and execution index) is gated, and the decisions are counted
against the issue's goals — the rows `gate simulate --suite` checks on simulated runs (gatekit/simulate.py
TARGETS), here through the gate's own schedule, run loop and finding:

  - a cold first run (+5 % / +15 %) before a true −2 % at CV 0.5 %: a new gate file's `warmup = 1` takes the hit,
    so the gate adopts (≥ 90 %); the same A/A under random, thue-morse and block-shuffle: false regression ≤ 5 %;
  - interference on every k-th run in execution order (+8 %, A/A, CV 0.5 %), the current sequential version (block-shuffle-spread):
    false adoption and false regression ≤ 5 % each, at period 3 phase 0 (the worst simulated cell: 0.25 % / 0.27 %;
    v7's block-shuffle 3.1 % / 3.0 %, v5's Thue–Morse order 50 %) and at every period 2–12 and phase;
  - half of the on arm's runs 10 % slower (a true change of the mean): equivalent ≤ 5 %;
  - two speed states (every run slow with p 0.5 by 10 %), A/A: false adoption and regression ≤ 5 % each;
  - a true −0.8 % at CV 0.2 % (below the 1 % floor): adopted ≤ 5 %;
  - the on arm 3× noisier than off (nondeterministic atomics), A/A, classic: every adoption says "adopted by the
    team's rule — not confirmed" with the next step;
  - a duet (12 pairs on two cpu slots) whose every run is slow with p 0.5 by 10 %, A/A: false adoption and
    regression ≤ 5 % each (the trainer's noise keyed by run label: a duet's two runs start together).

A few seeds per pattern run as real processes (`gate run` in this process through conftest's gate_invoke, each run
a fake_trainer.py process); the counts of 20 seeds per pattern run the same gate folders through FakeDriver, which
calls the trainer's `perform` in process. Given its seed a series is the same either way — the trainer reports a
computed metric, never its wall time, and the load rules are set where no load reaches them — so the real series'
decisions equal the in-process ones (asserted), and no outcome depends on the machine's load or timing.

The seeds were fixed before any of these gates ran (1–20 for every pattern; the real series take the first
ones), and each count is asserted against a bound the binomial allows: at a true rate of 5 % (the goal's edge),
`at_most` fails with probability ≤ 1 %; at a true rate of 90 %, `at_least` does. The simulated rates of these rows
are far inside the goals, so a failure here is a real series that misses them, not bad luck.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from scipy.stats import binom

from gatekit.finding import load_finding
from gatekit.policies.base import verdict_headline, verdict_sentence
from gatekit.policies.classic import CONFIRM_STEP
from gatekit.policies.sequential import design_codes
from gatekit.policy_descriptors import describe
from gatekit.schedule import plan
from gatekit.verdict import CODE_NAMES
from tests.conftest import GateDir, gate_invoke, make_gate, write_toml
from tests.fakes import install_fake_machine
from tests.fixtures.fake_trainer import pattern_elapsed

SEQUENTIAL_VERSION = describe("sequential").version  # what a new series preregisters

SEEDS = range(1, 21)  # fixed first; every pattern's count runs them all
REAL_SEEDS = SEEDS[:2]  # as real processes: each also runs in process and must decide the same
COUNTER = "runs.txt"  # the trainer's execution counter, shared by both arms
# No load evidence can flag a run here (limits no load reaches, load1 only, no window sample required): a
# flagged run is re-run, which moves every later execution index, so the machine's load would pick the outcome.
QUIET_RULES = {"load_limit": 1000.0, "load_rel_median": 1000.0, "load_per_core_limit": 1000.0, "evidence": "load1",
               "require_window_samples": False}


def at_most(n: int, rate: float = 0.05) -> int:
    """The largest count of n gates a true `rate` exceeds with probability ≤ 1 % (n = 20: 4, P(X > 4) = 0.26 %;
    n = 77: 9, P = 0.50 %)."""
    return int(binom.isf(0.01, n, rate))


def at_least(n: int, rate: float = 0.90) -> int:
    """The smallest count of n gates a true `rate` falls below with probability ≤ 1 % (n = 40: 31, P(X < 31) =
    0.51 % at 90 %, 0.001 % at the simulated 95.4 %)."""
    return int(binom.ppf(0.01, n, rate))


@dataclass(frozen=True)
class Pattern:
    """What each arm's trainer reports (fake_trainer.py's `pattern` table, less seed and counter), and how it is
    gated: the policy, and the gate table's keys (warmup None: the gate file states none, as a new one)."""

    off: dict[str, Any]
    on: dict[str, Any]
    policy: str = "classic"
    gate: dict[str, Any] = field(default_factory=dict)
    warmup: int | None = 0

    def table(self, arm: str, seed: int) -> dict[str, Any]:
        """The arm config's `pattern` table at this seed."""
        return {**(self.off if arm == "off" else self.on), "seed": seed, "counter": COUNTER}


def cold_first_run(cold_pct: float, effect_pct: float, order: str = "abab") -> Pattern:
    arm = {"cv_pct": 0.5, "cold_pct": [cold_pct]}
    return Pattern(arm, {**arm, "effect_pct": effect_pct}, gate={"order": order}, warmup=None)


def periodic_job(period: int, phase: int) -> Pattern:
    arm = {"cv_pct": 0.5, "periodic_pct": 8.0, "period": period, "phase": phase}
    return Pattern(arm, arm, "sequential")


TWO_STATES = Pattern({"cv_pct": 0.5, "slow_p": 0.5, "slow_pct": 10.0}, {"cv_pct": 0.5, "slow_p": 0.5, "slow_pct": 10.0},
                     "sequential")
ON_ARM_SLOW_STATE = Pattern({"cv_pct": 0.5}, {"cv_pct": 0.5, "slow_p": 0.5, "slow_pct": 10.0}, "sequential")
BELOW_THE_FLOOR = Pattern({"cv_pct": 0.2}, {"cv_pct": 0.2, "effect_pct": -0.8}, "sequential")


@dataclass(frozen=True)
class Run:
    index: int  # execution index: the runs of either arm before it
    label: str
    arm: str
    elapsed: float  # train_elapsed_s as the finding recorded it
    used: bool


@dataclass(frozen=True)
class Series:
    gate_dir: GateDir
    pattern: Pattern
    seed: int
    finding: dict[str, Any]

    @property
    def decision(self) -> str:
        return str(self.finding["verdict"]["decision"])

    def runs(self) -> list[Run]:
        """The finding's runs in the order the trainer logged their starts (which its counter must agree with)."""
        order = self.gate_dir.order()
        assert (self.gate_dir.root / COUNTER).read_text().split() == order
        by_label = {run["label"]: run for run in self.finding["runs"]}
        return [Run(index, label, by_label[label]["arm"], by_label[label]["metrics"]["train_elapsed_s"],
                    by_label[label]["used"]) for index, label in enumerate(order)]

    def arm_pattern(self, arm: str) -> dict[str, Any]:
        return self.pattern.table(arm, self.seed)


def run_series(root: Path, pattern: Pattern, seed: int, *, in_process: bool) -> Series:
    """One `gate run` of the pattern at this seed (the trainer's noise and the gate's order both drawn from it):
    real trainer processes, or FakeDriver's in-process `perform` (under the `fake_machine` fixture)."""
    g = make_gate(root, off={"pattern": pattern.table("off", seed)}, on={"pattern": pattern.table("on", seed)},
                  gate={**pattern.gate, "seed": seed, "warmup": pattern.warmup or 0}, rules=QUIET_RULES,
                  driver={"name": "fake"} if in_process else {})
    if pattern.warmup is None:  # a gate file that states no warm-up, as `gate init` writes one
        gate_file = tomllib.loads(g.gate.read_text())
        del gate_file["gate"]["warmup"]
        write_toml(g.gate, gate_file)
    policy = ["--policy", pattern.policy] if pattern.policy != "classic" else []
    done = gate_invoke("run", "off", "on", *policy, cwd=g.root)
    assert done.returncode in (0, 1), done.stderr  # 1: a regression or a gate that did not pass
    series = Series(g, pattern, seed, g.finding())
    assert series.finding["gate"]["policy"] == pattern.policy and not any(  # every run counted, none re-run
        "re-run" in run["reason"] for run in series.finding["runs"])
    for run in series.runs():  # each run reported its execution index's value of the pattern
        assert run.elapsed == pattern_elapsed(series.arm_pattern(run.arm), run.index)
    return series


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A folder for many gate folders, in RAM where the machine has a RAM disk: the series journal fsyncs every
    record (most of an in-process gate's time on a disk), and on tmpfs an fsync costs nothing."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and shm.stat().st_mode & 0o002):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="known-patterns-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def real_series(root: Path, monkeypatch: pytest.MonkeyPatch, runs: list[tuple[Pattern, int]]) -> list[Series]:
    """These (pattern, seed) series with real trainer processes; each is then run again in process (FakeDriver)
    and must decide the same, so the in-process counts below are counts of real series."""
    real = [run_series(root / f"real{i}", pattern, seed, in_process=False) for i, (pattern, seed) in enumerate(runs)]
    install_fake_machine(monkeypatch)
    twins = [run_series(root / f"twin{i}", pattern, seed, in_process=True) for i, (pattern, seed) in enumerate(runs)]
    assert [s.decision for s in real] == [s.decision for s in twins]
    return real


def in_process(scratch: Path, pattern: Pattern, seeds: range = SEEDS, name: str = "") -> list[Series]:
    return [run_series(scratch / f"{name}seed{seed}", pattern, seed, in_process=True) for seed in seeds]


def decisions(series: list[Series]) -> Counter[str]:
    return Counter(s.decision for s in series)


def simulated_decisions(series: list[Series]) -> list[str]:
    """What `gate simulate`'s vectorised sequential policy decides from the values the trainer reports in each
    series' preregistered 12-round plan (warm-up 0): the gate must decide the same, so a count that strays from the
    simulated rate strays by its draws, not by the gate."""
    logs = {"off": np.zeros((len(series), 12)), "on": np.zeros((len(series), 12))}
    for row, s in enumerate(series):
        for index, slot in enumerate(plan("off", "on", 12, s.finding["gate"]["order"], s.seed)):
            logs[slot.arm][row, slot.round - 1] = math.log(pattern_elapsed(s.arm_pattern(slot.arm), index))
    codes, _ = design_codes(logs["off"], logs["on"], floor_pct=1.0, direction="lower")
    return [CODE_NAMES[int(code)] for code in codes]


def log_ratio(value: float, reference: float) -> float:
    return math.log(value / reference)


# -- a cold first run ------------------------------------------------------------------------------------


def assert_the_warm_up_took_the_cold_run(series: Series, cold_pct: float) -> None:
    """The first run was the discarded warm-up, and it was slower than its arm's runs by more than half the cold hit
    (2.5 % at +5 %: five noise SDs)."""
    first, *rest = series.runs()
    assert series.finding["gate"]["warmup"] == 1 and not first.used and first.label.endswith("-r0")
    same_arm = statistics.median(r.elapsed for r in rest if r.arm == first.arm)
    assert log_ratio(first.elapsed, same_arm) > math.log1p(cold_pct / 200)
    assert all(r.used for r in rest)


@pytest.mark.parametrize("cold_pct", [5.0, 15.0])
def test_a_cold_first_run_cannot_decide_a_new_gate_file_real_series(tmp_path: Path, cold_pct: float,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = real_series(tmp_path, monkeypatch, [(cold_first_run(cold_pct, effect_pct=-2.0), seed) for seed in REAL_SEEDS])
    for series in real:
        assert_the_warm_up_took_the_cold_run(series, cold_pct)
    assert decisions(real)["adopted"] >= 1  # both at 95.4 % each: P(neither adopted) = 0.2 %


def test_a_cold_first_run_before_a_true_2_percent_gain_is_adopted(scratch: Path, fake_machine: None) -> None:
    series = [s for cold_pct in (5.0, 15.0)
              for s in in_process(scratch, cold_first_run(cold_pct, effect_pct=-2.0), name=f"cold{cold_pct:g}")]
    for s in series:
        assert_the_warm_up_took_the_cold_run(s, s.pattern.off["cold_pct"][0])
    counts = decisions(series)
    assert counts["adopted"] >= at_least(len(series)), counts  # simulated: 95.4 % (docs/statistics.md §4)


@pytest.mark.parametrize("order", ["random", "thue-morse", "block-shuffle"])
def test_a_cold_first_run_in_an_a_a_gate_names_no_regression_in_any_seeded_order(scratch: Path, fake_machine: None,
                                                                                  order: str) -> None:
    series = [s for cold_pct in (5.0, 15.0)
              for s in in_process(scratch, cold_first_run(cold_pct, 0.0, order), SEEDS[::2] if cold_pct == 5 else
                                  SEEDS[1::2], name=f"cold{cold_pct:g}")]
    for s in series:
        assert s.finding["gate"]["order"] == order
        assert_the_warm_up_took_the_cold_run(s, s.pattern.off["cold_pct"][0])
    counts = decisions(series)
    assert counts["regression"] <= at_most(len(series)), counts  # simulated: 0.5 % (43–50 % without the warm-up)


# -- interference on every k-th run ------------------------------------------------------------------------


def assert_every_kth_run_was_slowed(series: Series, period: int, phase: int) -> None:
    """The runs at execution index i ≡ phase (mod period), and only they, are about 8 % slower than the rest."""
    runs = series.runs()
    usual = statistics.median(r.elapsed for r in runs if r.index % period != phase)
    for run in runs:  # 4 % is eight noise SDs from either state
        assert (log_ratio(run.elapsed, usual) > math.log1p(0.04)) == (run.index % period == phase), run


def test_every_third_run_slowed_in_real_series_decides_as_in_process(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = real_series(tmp_path, monkeypatch, [(periodic_job(3, 0), seed) for seed in REAL_SEEDS])
    for series in real:
        assert series.finding["sequential"]["version"] == SEQUENTIAL_VERSION and series.finding["gate"]["order"] == "block-shuffle-spread"
        assert_every_kth_run_was_slowed(series, 3, 0)


def test_every_third_run_slowed_is_rarely_adopted_or_a_regression(scratch: Path, fake_machine: None) -> None:
    series = in_process(scratch, periodic_job(3, 0))
    for s in series:
        assert_every_kth_run_was_slowed(s, 3, 0)
    assert [s.decision for s in series] == simulated_decisions(series)
    counts = decisions(series)
    # simulated at this cell (v8, 20 000 gates): adopted 0.25 %, regression 0.27 % (v7: 3.14 %, 2.95 %)
    assert counts["adopted"] <= at_most(len(series)) and counts["regression"] <= at_most(len(series)), counts


def test_interference_at_every_period_and_phase_is_rarely_adopted_or_a_regression(scratch: Path,
                                                                                 fake_machine: None) -> None:
    cells = [(period, phase) for period in range(2, 13) for phase in range(period)]
    series = [run_series(scratch / f"k{period}p{phase}", periodic_job(period, phase), SEEDS[i % len(SEEDS)],
                         in_process=True) for i, (period, phase) in enumerate(cells)]
    for s, (period, phase) in zip(series, cells):
        assert_every_kth_run_was_slowed(s, period, phase)
    counts = decisions(series)
    # simulated: every cell ≤ 0.52 % both together (docs/statistics.md §4), so ≤ 5 % over the 77 cells together
    assert counts["adopted"] <= at_most(len(series)) and counts["regression"] <= at_most(len(series)), counts


# -- speed states and a change below the floor -------------------------------------------------------------


def slow_share(series: list[Series], arm: str, slow_pct: float) -> float:
    """The share of this arm's runs in the slow state: above the midpoint of the two states' medians."""
    runs = [r for s in series for r in s.runs() if r.arm == arm]
    cut = 10.0 * math.sqrt(1 + slow_pct / 100)  # the pattern's base is 10 s, with no effect
    return sum(r.elapsed > cut for r in runs) / len(runs)


def test_speed_states_in_real_series_decide_as_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = real_series(tmp_path, monkeypatch,
                       [(pattern, REAL_SEEDS[0]) for pattern in (TWO_STATES, ON_ARM_SLOW_STATE, BELOW_THE_FLOOR)])
    assert all(s.finding["sequential"]["version"] == SEQUENTIAL_VERSION for s in real)


def test_two_speed_states_in_both_arms_are_rarely_adopted_or_a_regression(scratch: Path, fake_machine: None) -> None:
    series = in_process(scratch, TWO_STATES)
    assert 0.4 < slow_share(series, "off", 10.0) < 0.6 and 0.4 < slow_share(series, "on", 10.0) < 0.6
    counts = decisions(series)
    # simulated (v7, 200 000 gates): adopted 1.18 %, regression 1.17 %
    assert counts["adopted"] <= at_most(len(series)) and counts["regression"] <= at_most(len(series)), counts


def test_a_slow_state_in_the_on_arm_only_is_never_called_equivalent(scratch: Path, fake_machine: None) -> None:
    series = in_process(scratch, ON_ARM_SLOW_STATE)
    assert slow_share(series, "off", 10.0) == 0 and 0.4 < slow_share(series, "on", 10.0) < 0.6
    counts = decisions(series)
    assert counts["equivalent"] <= at_most(len(series)), counts  # simulated (v7): equivalent 0.81 %
    assert counts["adopted"] <= at_most(len(series)), counts  # on is slower on average: no gain to find


def test_a_true_change_below_the_floor_is_rarely_adopted(scratch: Path, fake_machine: None) -> None:
    series = in_process(scratch, BELOW_THE_FLOOR)
    gap = [statistics.median(r.elapsed for r in s.runs() if r.arm == "on" and r.used)
           / statistics.median(r.elapsed for r in s.runs() if r.arm == "off" and r.used) - 1 for s in series]
    assert -0.011 < statistics.mean(gap) < -0.005  # the true −0.8 %, seen through CV 0.2 %
    assert [s.decision for s in series] == simulated_decisions(series)
    counts = decisions(series)
    assert counts["adopted"] <= at_most(len(series)), counts  # simulated (v7): adopted 3.13 %


# -- the on arm noisier than off (nondeterministic atomics) --------------------------------------------------

NOISIER_ADOPTED_SEED = 11  # adopted in process (seeds 11, 12, 17 of 1–20 were), chosen after that ran
NOISIER_ON = Pattern({"cv_pct": 0.5}, {"cv_pct": 1.5})  # σ_on = 3σ_off, no change of the mean; classic, abab


def test_a_noisier_on_arm_is_never_adopted_by_the_classic_rule_without_saying_so(
        scratch: Path, fake_machine: None) -> None:
    """The classic rule's threshold max(2·σ_off, 1 %) ignores the on arm's noise (false adoption 10.9–18.1 % in
    the issue's measurements): every adoption of such a series says, in its headline and its summary, that it is
    adopted by the team's rule and not confirmed, and names σ_on against σ_off."""
    series = in_process(scratch, NOISIER_ON)
    adopted = [s for s in series if s.decision == "adopted"]
    assert adopted, "these seeds no longer show the classic rule fooled by the on arm's noise (3 of 20 were)"
    for s in adopted:
        finding = load_finding(s.gate_dir.findings()[0])
        assert verdict_headline(finding) == "ADOPTED by the team's rule — not confirmed"
        sentence = verdict_sentence(finding)
        assert "is more than twice σ_off" in sentence or "includes 0 %" in sentence, sentence
        assert sentence.endswith(CONFIRM_STEP)
    # the pattern happened: the on arm's runs scatter about three times as widely as the off arm's
    spread = {arm: statistics.median(statistics.stdev(math.log(r.elapsed) for r in s.runs() if r.arm == arm)
                                     for s in series) for arm in ("off", "on")}
    assert 2.0 < spread["on"] / spread["off"] < 4.5, spread


def test_a_noisier_on_arm_says_not_confirmed_on_the_real_verdict_line(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The same pattern as real processes: a seed whose in-process twin the classic rule adopts (fixed after the
    in-process series above ran; the twin check fails if it ever stops being adopted) and its CI summary
    (`gate report --summary-md`) gives the qualified verdict."""
    [real] = real_series(tmp_path, monkeypatch, [(NOISIER_ON, NOISIER_ADOPTED_SEED)])
    assert real.decision == "adopted"
    summary = tmp_path / "summary.md"
    done = gate_invoke("report", str(real.gate_dir.findings()[0]), "--summary-md", str(summary),
                       cwd=real.gate_dir.root)
    assert done.returncode == 0, done.stderr
    assert "ADOPTED by the team's rule — not confirmed" in summary.read_text()


# -- a duet whose runs move between two speed states ---------------------------------------------------------

DUET_PAIRS = 12  # the duet's default
DUET_STATES = {"cv_pct": 0.5, "slow_p": 0.5, "slow_pct": 10.0, "key": "label"}  # each run slow with p ½ by 10 %


def duet_series(root: Path, seed: int, *, in_process: bool) -> dict[str, Any]:
    """One duet A/A gate (two cpu slots, both runs of a pair at once) whose every run is slow with probability ½,
    keyed by its label (a duet's two runs start together, so no execution order exists); its finding."""
    cores = sorted(os.sched_getaffinity(0))
    g = make_gate(root, off={"pattern": {**DUET_STATES, "seed": seed}}, on={"pattern": {**DUET_STATES, "seed": seed}},
                  gate={"mode": "duet", "n": DUET_PAIRS, "seed": seed, "warmup": 0},
                  duet={"slots": [f"cpu:{cores[0]}", f"cpu:{cores[-1]}"]}, rules=QUIET_RULES,
                  driver={"name": "fake"} if in_process else {})
    gate_file = tomllib.loads(g.gate.read_text())
    gate_file["gate"].pop("order")  # a duet has no run order
    write_toml(g.gate, gate_file)
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode in (0, 1), done.stderr
    finding = g.finding()
    assert finding["gate"]["policy"] == "duet" and len(finding["runs"]) == 2 * DUET_PAIRS  # none re-run
    for run in finding["runs"]:
        assert run["metrics"]["train_elapsed_s"] == pattern_elapsed({**DUET_STATES, "seed": seed}, run["label"])
    return finding


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a cpu duet needs two cores")
def test_a_duet_with_two_speed_states_in_real_series_decides_as_in_process(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    real = duet_series(tmp_path / "real", REAL_SEEDS[0], in_process=False)
    install_fake_machine(monkeypatch)
    twin = duet_series(tmp_path / "twin", REAL_SEEDS[0], in_process=True)
    assert real["verdict"]["decision"] == twin["verdict"]["decision"]
    assert real["duet"]["version"] == describe("duet").version


def test_a_duet_with_two_speed_states_is_rarely_adopted_or_a_regression(scratch: Path, fake_machine: None) -> None:
    findings = [duet_series(scratch / f"duet{seed}", seed, in_process=True) for seed in SEEDS]
    slow = [run["metrics"]["train_elapsed_s"] > 10.0 * math.sqrt(1.1) for f in findings for run in f["runs"]]
    assert 0.4 < sum(slow) / len(slow) < 0.6  # the pattern happened: about half the runs slow
    counts = Counter(str(f["verdict"]["decision"]) for f in findings)
    assert counts["adopted"] <= at_most(len(findings)) and counts["regression"] <= at_most(len(findings)), counts

"""The seed finding's §6 gate, recomputed by `gate analyze` from a CSV.

The seed's table prints runs to 3 decimals but its means (124.5549 / 122.7680) and Δ (−1.4347 %) come
from the unrounded values. `seed_s6.csv` holds values that round to the printed runs AND reproduce the
printed means, so it stands for the real series; `seed_s6_rounded.csv` is the printed table itself.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES, gate_invoke


def analyze(csv_name: str) -> dict:
    done = gate_invoke("analyze", str(FIXTURES / csv_name), "--gate", str(FIXTURES / "seed_gate.toml"), "--json",
                    cwd=FIXTURES)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_seed_section_6_is_adopted_with_the_published_numbers() -> None:
    finding = analyze("seed_s6.csv")
    s = finding["stats"]
    assert round(s["delta_pct"], 4) == -1.4347
    assert round(s["sigma_off_pct"], 4) == 0.4541
    assert round(s["sigma_on_pct"], 4) == 0.8637
    assert round(s["mean_off"], 4) == 124.5549  # the seed prints 124.5549 and 122.7680
    assert round(s["mean_on"], 4) == 122.7680
    assert s["threshold_pct"] == 1.0
    assert s["pairs_consistent"] == "3/3"
    assert round(finding["guards"]["psnr_db"]["delta"], 3) == 0.053
    assert finding["guards"]["psnr_db"]["pass"] is True
    assert finding["verdict"]["decision"] == "adopted"


def test_seed_rounded_table_gives_the_hand_computed_delta() -> None:
    s = analyze("seed_s6_rounded.csv")["stats"]
    assert s["delta_pct"] == pytest.approx(-1.43498, abs=1e-5)  # see tests/test_stats.py for the arithmetic


def test_seed_exclusion_sensitivity_matches_the_seed_callout() -> None:
    rows = {tuple(r["dropped"]): r for r in analyze("seed_s6.csv")["sensitivity"]}
    # seed §6: off-r1 dropped → Δ −1.221 %; pair r1 dropped → Δ −1.712 %; both still pass 1.0 %
    assert round(rows[("off-r1",)]["delta_pct"], 3) == -1.221
    assert round(rows[("off-r1", "on-r1")]["delta_pct"], 3) == -1.712
    assert all(r["decision"] == "adopted" for r in rows.values())


def test_seed_rule_ii_cannot_fire_and_says_so() -> None:
    finding = analyze("seed_s6.csv")
    assert finding["rules"]["max_attainable_z"] == pytest.approx(1.1547, abs=1e-4)
    assert finding["rules"]["rule_ii_reachable"] is False
    # said once, where the rules are (the report's rules section, the predecision), not in every summary
    assert not any("rule (ii) cannot fire" in w for w in finding["verdict"]["warnings"])
    from gatekit.finding import Finding
    from gatekit.report.page import rules_block
    from gatekit.report.terminal import summary
    typed = Finding.from_document(finding, source="seed")
    assert "cannot fire" not in summary(typed)
    assert rules_block(typed)["items"][-1] == {
        "key": "rule (ii)", "value": "cannot fire: at n=3 no run can be more than 1.155σ from its own arm's mean "
        "(Samuelson bound (n−1)/√n), below sigma_k = 3; contamination retries are effectively disabled"}
    # the seed's own numbers: off-r1 0.95σ, on-r1 1.15σ; no run is contaminated
    z = {r["label"]: r["z"] for r in finding["runs"]}
    assert round(z["off-r1"], 2) == 0.95 and round(z["on-r1"], 2) == 1.15
    assert not any(r["contaminated"] for r in finding["runs"])
    # load evidence (i) by window mean: off-r1 3.99 > 1.5 × median 1.575
    evidence = {r["label"] for r in finding["runs"] if r["load_evidence"]}
    assert evidence == {"off-r1", "on-r2"}


def test_a_report_says_why_sub_second_runs_share_their_load1() -> None:
    import dataclasses

    from gatekit.finding import Finding
    from gatekit.report.page import LOAD1_UPDATE_S, load1_note
    seed = Finding.from_document(analyze("seed_s6.csv"), source="seed")
    assert load1_note(seed) is None  # a CSV measured no wallclock: nothing is known about the windows
    runs = {"long": 124.0, "short": 0.4}
    long, short = (dataclasses.replace(seed, runs=tuple(dataclasses.replace(run, process_wallclock_s=seconds)
                                                        for run in seed.runs)) for seconds in runs.values())
    assert load1_note(long) is None  # 2-minute runs: load1 moves between them
    note = load1_note(short)
    assert note is not None and note.startswith(f"every run was shorter than {LOAD1_UPDATE_S:g} s")
    one_long = dataclasses.replace(short, runs=(dataclasses.replace(short.runs[0], process_wallclock_s=6.0),
                                                *short.runs[1:]))
    assert load1_note(one_long) is None


def test_the_report_leaves_out_what_the_backend_found_empty() -> None:
    import dataclasses

    from gatekit.finding import Finding
    from gatekit.report.page import provenance_blocks
    seed = Finding.from_document(analyze("seed_s6.csv"), source="seed")
    backend = {"name": "cpu", "model": "Example CPU", "governors": {}, "sensors": []}
    found = dataclasses.replace(seed, provenance=dataclasses.replace(seed.provenance, backend=backend))
    items = {item["key"]: item["value"] for block in provenance_blocks(found) for item in block.get("items", [])
             if isinstance(item, dict) and "key" in item}
    assert items["backend cpu"] == "model Example CPU"  # no bare "governors" or "sensors" without a value


def test_run_labels_that_would_print_over_each_other_are_joined() -> None:
    from gatekit.report.figures import end_labels
    series = [("off-r1", "off", ([0.0, 0.4], [9.1, 9.1])), ("on-r1", "on", ([0.0, 0.4], [9.1, 9.1])),
              ("off-r2", "off", ([0.0, 12.0], [9.1, 2.0])), ("on-r2", "on", ([0.0], [5.0]))]
    assert end_labels(series) == {(0.4, 9.1): ["off-r1", "on-r1"], (12.0, 2.0): ["off-r2"], (0.0, 5.0): ["on-r2"]}


def test_the_seed_adoption_is_said_to_be_the_team_rule_not_confirmed_where_people_look() -> None:
    # The seed's own gate adopts by the classic rule (Δ −1.4347 % beyond 1 %), but its 3 + 3 runs do not rule out
    # no change: the Welch 95 % CI of the log-ratio holds 0. Computed here by hand from the six runs.
    import math

    from scipy import stats as sps

    from gatekit.exports import junit_xml, summary_markdown
    from gatekit.finding import Finding
    from gatekit.report.page import sig, verdict_callout
    from gatekit.report.terminal import summary

    rows = [line.split(",") for line in (FIXTURES / "seed_s6.csv").read_text().splitlines()[1:] if line.strip()]
    header = (FIXTURES / "seed_s6.csv").read_text().splitlines()[0].split(",")
    arm, value = header.index("arm"), header.index("train_elapsed_s")
    logs = {a: [math.log(float(r[value])) for r in rows if r[arm] == a] for a in ("off", "on")}
    v_off, v_on = (sps.tvar(logs["off"]) / 3, sps.tvar(logs["on"]) / 3)
    df = (v_off + v_on) ** 2 / (v_off ** 2 / 2 + v_on ** 2 / 2)
    centre = sum(logs["on"]) / 3 - sum(logs["off"]) / 3
    half = sps.t.ppf(0.975, df) * math.sqrt(v_off + v_on)
    low, high = 100 * math.expm1(centre - half), 100 * math.expm1(centre + half)
    assert low < 0 < high

    data = analyze("seed_s6.csv")
    assert data["verdict"]["decision"] == "adopted"  # the decision itself stays the team's rule
    finding = Finding.from_document(data, source="seed")
    why = f"the 95 % CI of Δ [{low:+.4f} %, {high:+.4f} %] includes 0 %"
    step = "re-run with `--policy sequential`"
    verdict_line = next(line for line in summary(finding).splitlines() if line.startswith("VERDICT:"))
    assert verdict_line.startswith("VERDICT: ADOPTED by the team's rule — not confirmed: ")
    assert why in verdict_line and step in verdict_line
    box = verdict_callout(finding)
    assert box["label"] == "Verdict: ADOPTED by the team's rule — not confirmed" and box["decision"] == "adopted"
    # the box shows its reason's numbers to 3 significant figures (the summary line keeps them whole)
    why_box = f"the 95 % CI of Δ [{sig(low, signed=True)} %, {sig(high, signed=True)} %] includes 0 %"
    assert box["text"].startswith("adopted by the team's rule — not confirmed: ") and why_box in box["text"]
    markdown = summary_markdown([finding])
    from gatekit.report.markdown import literal
    assert "**ADOPTED by the team's rule — not confirmed**" in markdown
    assert literal(why) in markdown and literal(step) in markdown
    junit = junit_xml([finding])
    assert "decision adopted by the team's rule — not confirmed: " in junit and "<failure" not in junit


def test_a_noisier_on_arm_is_said_and_a_confirmed_adoption_is_plain() -> None:
    from dataclasses import replace

    from gatekit.finding import Finding
    from gatekit.policies.base import verdict_headline, verdict_sentence
    from gatekit.verdict import Decision

    seed = Finding.from_document(analyze("seed_s6.csv"), source="seed")
    confirmed = replace(seed, stats=replace(seed.stats, ci_low_pct=-2.5, ci_high_pct=-1.2))
    assert verdict_headline(confirmed) == "ADOPTED" and verdict_sentence(confirmed) == ""
    # a CI that excludes 0 but reaches inside the 1 % floor: a change below the floor is not ruled out
    short = replace(seed, stats=replace(seed.stats, ci_low_pct=-2.5, ci_high_pct=-0.4))
    assert verdict_sentence(short).startswith(
        "adopted by the team's rule — not confirmed: the 95 % CI of Δ [-2.5000 %, -0.4000 %] reaches inside the "
        "±1 % floor (a change smaller than the floor is not ruled out); next step: ")
    at_floor = replace(seed, stats=replace(seed.stats, ci_low_pct=-2.5, ci_high_pct=-1.0))
    assert verdict_sentence(at_floor) == ""  # the floor itself is outside "inside"
    # σ_on 0.9083 % > 2 × σ_off 0.4541 % = 0.9082 %: just beyond; the CI alone excludes 0
    noisy = replace(confirmed, stats=replace(confirmed.stats, sigma_off_pct=0.4541, sigma_on_pct=0.9083))
    assert verdict_sentence(noisy).startswith("adopted by the team's rule — not confirmed: σ_on 0.9083 % is more "
                                              "than twice σ_off 0.4541 %; next step: ")
    assert verdict_sentence(replace(noisy, stats=replace(noisy.stats, sigma_on_pct=0.9082))) == ""  # not beyond
    rejected = replace(seed, verdict=replace(seed.verdict, decision=Decision.REJECTED))
    assert verdict_headline(rejected) == "REJECTED" and verdict_sentence(rejected) == ""  # only adoptions

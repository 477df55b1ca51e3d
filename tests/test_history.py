"""`gate history`: a metric across findings, change points from ruptures (PELT), `--fail-on change`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gatekit.history import change_point_indices, metric_value, noise_sigma
from tests.conftest import gate_invoke
from tests.findings_kit import finding_of, golden_data, variant, write_json

STEP = [10.0, 10.1, 9.9, 10.05, 9.95, 11.0, 11.1, 10.9, 11.05, 10.95]


def test_a_step_in_the_mean_is_one_change_point() -> None:
    indices, sigma, penalty = change_point_indices(STEP)
    assert indices == [5]
    assert sigma > 0 and penalty == pytest.approx(2 * sigma ** 2 * __import__("math").log(len(STEP)))


def test_noise_alone_has_no_change_point() -> None:
    noise = [10.0, 10.1, 9.9, 10.05, 9.95, 10.02, 10.08, 9.93, 10.01, 9.97]
    assert change_point_indices(noise)[0] == []


def test_degenerate_series() -> None:
    assert change_point_indices([5.0] * 8) == ([], 0.0, 0.0)  # no variation at all
    assert change_point_indices([1.0, 2.0, 3.0])[0] == []  # too short for two segments of two
    # flat segments: most differences are exactly 0 (MAD = 0), the fallback σ still finds the step
    assert noise_sigma([1, 1, 1, 1, 2, 2, 2, 2]) > 0
    assert change_point_indices([1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0])[0] == [4]


def test_metric_lookup() -> None:
    data = finding_of(golden_data())
    assert metric_value(data, "delta_pct", "on") == pytest.approx(-5.3245, abs=1e-4)
    assert metric_value(data, "train_elapsed_s", "on") == pytest.approx((9.5 + 9.55 + 9.4) / 3)
    assert metric_value(data, "train_elapsed_s", "off") == pytest.approx((10.0 + 10.1 + 9.95) / 3)
    assert metric_value(data, "guards.psnr_db.delta", "on") == pytest.approx(0.01)
    assert metric_value(data, "no_such_metric", "on") is None


def _folder(tmp_path: Path, values: list[float]) -> Path:
    folder = tmp_path / "findings"
    for day, value in enumerate(values, 1):
        write_json(folder / f"f{day:02d}.json",
                   variant(f"golden-2026-11-{day:02d}", f"2026-11-{day:02d}", mean_on=value))
    return folder


def test_history_cli_table_plot_and_fail_on_change(tmp_path: Path) -> None:
    folder = _folder(tmp_path, STEP)
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--plot", str(tmp_path / "h.png"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "mean_on: stats.mean_on of each finding, 10 findings of gate golden" in done.stdout
    assert "golden-2026-11-06" in done.stdout.split("<- change")[0].splitlines()[-1]
    assert "from golden-2026-11-06 (2026-11-06): mean 10.0000 -> 11.0000 (+10.00 %)" in done.stdout
    assert (tmp_path / "h.png").read_bytes().startswith(b"\x89PNG")
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", cwd=tmp_path)
    assert done.returncode == 1 and "1 change point(s) in mean_on" in done.stderr
    # only the last 3 findings count: the change at the 6th of 10 is older
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", "--recent", "3",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_history_without_change_passes_and_json(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [10.0, 10.1, 9.9, 10.05, 9.95, 10.02])
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["change_points"] == [] and [p["value"] for p in data["points"]] == [10.0, 10.1, 9.9, 10.05, 9.95, 10.02]
    assert data["method"].startswith("ruptures PELT")


def test_history_is_in_date_order_and_filters_gates(tmp_path: Path) -> None:
    folder = tmp_path / "findings"
    write_json(folder / "z.json", variant("b-2026-11-02", "2026-11-02", mean_on=2.0))
    write_json(folder / "a.json", variant("c-2026-11-03", "2026-11-03", mean_on=3.0))
    write_json(folder / "m.json", variant("a-2026-11-01", "2026-11-01", mean_on=1.0))
    write_json(folder / "other.json", variant("x-2026-11-01", "2026-11-01", mean_on=9.0, gate_id="other"))
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--gate-id", "golden", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p["value"] for p in json.loads(done.stdout)["points"]] == [1.0, 2.0, 3.0]
    done = gate_invoke("history", str(folder), "--metric", "mean_on", cwd=tmp_path)
    assert "findings of 2 gates are mixed; use --gate-id" in done.stdout
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--gate-id", "nope", cwd=tmp_path)
    assert done.returncode == 2 and "no finding of this gate (gates found: golden, other)" in done.stderr


def test_history_unknown_metric_is_exit_2(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [1.0, 2.0])
    done = gate_invoke("history", str(folder), "--metric", "nope", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "key 'nope' is in no finding" in line and "f01.json" in line

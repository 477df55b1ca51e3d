"""`gate history`: a metric across findings, PELT candidates kept by a permutation test, `--fail-on change`."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from scipy.stats import rankdata

from gatekit.history import (ChangeSearch, ar1_series, change_point_indices, flat_loglik, log_moment_table,
                             lone_outliers, metric_value, noise_sigma, null_rhos, null_series_for, null_statistics, permutation_p,
                             prais_winsten, shift_statistics, shift_test, standardised, step_logliks)
from tests.conftest import gate_invoke
from tests.findings_kit import finding_of, golden_data, variant, write_json

STEP = [10.0, 10.1, 9.9, 10.05, 9.95, 11.0, 11.1, 10.9, 11.05, 10.95]
# 20 findings of Gaussian noise (σ = 1 around 100), fixed so the tests are deterministic
NOISE = [float(v) for v in 100 + np.random.default_rng(7).standard_normal(20)]


def _hand_p(values: list[float]) -> float:
    """Every ordering of the ranks; the share whose best one-split mean shift (segments of ≥ 2) reaches the
    observed one, written out with plain loops."""
    def best(order: tuple[float, ...]) -> float:
        m = len(order)
        return max(k * (m - k) / m * (sum(order[k:]) / (m - k) - sum(order[:k]) / k) ** 2 for k in range(2, m - 1))
    r = tuple(rankdata(values))
    observed = best(r)
    orderings = list(itertools.permutations(r))
    return sum(best(o) >= observed - 1e-9 for o in orderings) / len(orderings)


def test_permutation_p_is_exact_on_tiny_series() -> None:
    # four values, one split (2|2): {1,2} or {3,4} in front, 2·2!·2! = 8 of 4! = 24 orderings
    assert permutation_p([1.0, 2.0, 3.0, 4.0]) == pytest.approx(8 / 24)
    # eight in order: only the 4|4 split in either direction reaches it, 2·4!·4! of 8!
    assert permutation_p(list(range(8)), permutations=50_000) == pytest.approx(2 * 24 * 24 / math.factorial(8))
    tiny = [3.0, 1.0, 4.0, 1.5, 5.0, 9.0]
    assert permutation_p(tiny) == pytest.approx(_hand_p(tiny))
    # random orderings estimate the same p (Phipson & Smyth: (1 + hits) / (1 + permutations))
    sampled = permutation_p(tiny, permutations=700, rng=np.random.default_rng(1))
    assert abs(sampled - _hand_p(tiny)) < 4 * math.sqrt(_hand_p(tiny) / 700) + 1 / 700


def test_a_step_in_the_mean_is_one_change_point() -> None:
    search = change_point_indices(STEP, permutations=199)
    assert [i for i, _ in search.changes] == [5] and search.changes[0][1] <= 0.05 and search.candidates >= 1
    assert search.outliers == () and search.shift_p <= 0.05
    assert search.sigma > 0 and search.penalty == pytest.approx(2 * search.sigma ** 2 * math.log(len(STEP)))
    step = [v + (3.0 if i >= 12 else 0.0) for i, v in enumerate(NOISE)]  # a 3σ step at index 12 of 20
    assert [i for i, _ in change_point_indices(step, permutations=199).changes] == [12]


def test_a_lone_spike_is_not_a_change_point() -> None:
    assert change_point_indices(NOISE, permutations=199).changes == ()
    for where in (0, 1, 10, 18, 19):
        spiked = [v + (10.0 if i == where else 0.0) for i, v in enumerate(NOISE)]
        search = change_point_indices(spiked, permutations=199)
        assert search.changes == () and search.outliers == (where,), where
    # the newest two apart from the rest may be a new level: no finding after them says they returned
    assert lone_outliers([*NOISE[:18], 110.0, 110.5], noise_sigma(NOISE)) == []
    assert [i for i, _ in change_point_indices([*NOISE[:14], *(v + 10 for v in NOISE[14:])]).changes] == [14]


def test_two_adjacent_spikes_are_outliers_and_only_they_are_marked() -> None:
    for first in (1, 9, 17):  # a finding before and after the pair
        spiked = [v + (10.0 if i in (first, first + 1) else 0.0) for i, v in enumerate(NOISE)]
        search = change_point_indices(spiked, permutations=199)
        assert search.changes == () and search.outliers == (first, first + 1), first
    # a pair of unequal spikes (+10, +6): both are marked, not the larger alone
    uneven = [v + {9: 10.0, 10: 6.0}.get(i, 0.0) for i, v in enumerate(NOISE)]
    assert lone_outliers(uneven, noise_sigma(uneven)) == [9, 10]
    # a pair next to the first or last finding: the end finding is not the spike, the pair is
    for pair, end in (((1, 2), 0), ((17, 18), 19)):
        spiked = [v + (10.0 if i in pair else 0.0) for i, v in enumerate(NOISE)]
        assert lone_outliers(spiked, noise_sigma(spiked)) == list(pair), end


def test_alpha_and_the_seed_decide() -> None:
    assert change_point_indices(STEP, alpha=0.0001).changes == ()  # the shift test's p ≥ 1/5000 > 0.0001
    assert change_point_indices(STEP, seed=3) == change_point_indices(STEP, seed=3)


def test_flat_series_rarely_raise_a_change_point() -> None:
    rng = np.random.default_rng(11)
    alarms = sum(bool(change_point_indices(list(rng.standard_normal(12)), permutations=99).changes)
                 for _ in range(150))
    assert alarms / 150 <= 0.12  # α = 0.05; the benchmark measures it at 5 000 series


def test_noise_alone_has_no_change_point() -> None:
    noise = [10.0, 10.1, 9.9, 10.05, 9.95, 10.02, 10.08, 9.93, 10.01, 9.97]
    assert change_point_indices(noise).changes == ()


def test_degenerate_series() -> None:
    assert change_point_indices([5.0] * 8) == ChangeSearch((), 0.0, 0.0, 0, ())  # no variation at all
    assert change_point_indices([1.0, 2.0, 3.0]).changes == ()  # too short for two segments
    # flat segments: most differences are exactly 0 (MAD = 0), the fallback σ still finds the step; ties share
    # ranks, and 4|4 in order is exact p 2·4!·4!/8! (8! > 999: sampled, so approximately)
    assert noise_sigma([1, 1, 1, 1, 2, 2, 2, 2]) > 0
    ((index, p),) = change_point_indices([1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]).changes
    assert index == 4 and p == pytest.approx(2 / 70, abs=0.015)


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
    assert "from golden-2026-11-06 (2026-11-06): mean 10.0000 -> 11.0000 (+10.00 %, p 0.0" in done.stdout
    assert (f"shift test p {shift_test(STEP)[0]:.4f} against noise correlated up to AR(1) ρ 0.6, α 0.05"
            in done.stdout)
    assert "kept at permutation p ≤ α" in done.stdout
    assert (tmp_path / "h.png").read_bytes().startswith(b"\x89PNG")
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", cwd=tmp_path)
    assert done.returncode == 1 and "1 change point(s) in mean_on" in done.stderr
    # only the last 3 findings count: the change at the 6th of 10 is older
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", "--recent", "3",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # a stricter α than the permutations can resolve for this series keeps nothing
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", "--alpha", "0.0001",
                       cwd=tmp_path)
    assert done.returncode == 0 and "change points: none" in done.stdout, done.stderr
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--alpha", "1.5", cwd=tmp_path)
    assert done.returncode == 2 and "--alpha: must be between 0 and 1, got 1.5" in done.stderr


def test_history_marks_a_lone_spike(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [*NOISE[:9], NOISE[9] + 10, *NOISE[10:]])
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["change_points"] == [] and data["outliers"] == ["golden-2026-11-10"]
    table = gate_invoke("history", str(folder), "--metric", "mean_on", cwd=tmp_path).stdout
    assert "golden-2026-11-10" in table.split("(lone outlier, not a change)")[0].splitlines()[-1]
    assert table.count("outlier") == 1  # on that finding only
    # two adjacent spikes: both marked, each as one of a pair, and nothing else
    folder = _folder(tmp_path / "pair", [*NOISE[:9], NOISE[9] + 10, NOISE[10] + 10, *NOISE[11:]])
    table = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", cwd=tmp_path).stdout
    marked = [line.split()[1] for line in table.splitlines() if "(one of two adjacent outliers" in line]
    assert marked == ["golden-2026-11-10", "golden-2026-11-11"] and "<- change" not in table


def test_history_without_change_passes_and_json(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [10.0, 10.1, 9.9, 10.05, 9.95, 10.02])
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["change_points"] == [] and [p["value"] for p in data["points"]] == [10.0, 10.1, 9.9, 10.05, 9.95, 10.02]
    assert data["tested"] is False and data["findings_needed"] == 8 and data["trend_p"] is None
    assert data["method"].startswith("AR(1)-robust likelihood-ratio test") and "ruptures PELT" in data["method"]
    assert data["alpha"] == 0.05 and data["permutations"] == 999 and data["null_series"] == 19_999
    # 6 findings are too few to look for a change (4 on each side): nothing was tested, and nothing says 0
    assert data["shift_p"] is None and data["penalty"] is None and data["rho_max"] == 0.6
    table = gate_invoke("history", str(folder), "--metric", "mean_on", cwd=tmp_path).stdout
    assert ("change points: none looked for: 6 finding(s) to test, a change needs 4 findings on each side"
            in table) and "penalty" not in table


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


def test_history_looks_into_subfolders_as_gate_site_does(tmp_path: Path) -> None:
    """A host's or a night's folder of findings inside the findings folder is part of the history; a series
    directory (one with a journal) is not looked into."""
    folder = tmp_path / "findings"
    write_json(folder / "a.json", variant("a-2026-11-01", "2026-11-01", mean_on=1.0))
    write_json(folder / "h200" / "b.json", variant("b-2026-11-02", "2026-11-02", mean_on=2.0))
    write_json(folder / "h200" / "night" / "c.json", variant("c-2026-11-03", "2026-11-03", mean_on=3.0))
    write_json(folder / "runs" / "s1" / "d.json", variant("d-2026-11-04", "2026-11-04", mean_on=4.0))
    (folder / "runs" / "s1" / "journal.jsonl").write_text("")
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p["value"] for p in json.loads(done.stdout)["points"]] == [1.0, 2.0, 3.0]


def test_history_unknown_metric_is_exit_2(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [1.0, 2.0])
    done = gate_invoke("history", str(folder), "--metric", "nope", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "key 'nope' is in no finding" in line and "f01.json" in line


def test_findings_of_one_day_get_x_labels_of_their_own() -> None:
    from gatekit.history import Point, x_labels
    points = [Point(date, f"g-{i}", "g", 1.0) for i, date in
              enumerate(["2026-11-30", "2026-12-01", "2026-12-01", "2026-12-02", "2026-12-01"])]
    labels = x_labels(points)
    assert labels == ["2026-11-30", "2026-12-01 #1", "2026-12-01 #2", "2026-12-02", "2026-12-01 #3"]
    assert len(set(labels)) == len(labels)


# -- the shift test ----------------------------------------------------------------------------------

def _invariant_density(x: np.ndarray, mean: np.ndarray, covariance: np.ndarray) -> float:
    """The density of x's maximal invariant under x → a·x + b (a > 0), by Wijsman's representation:
    ∫₀^∞ ∫ φ(a·x + b·1; mean, covariance)·a^{n−2} db da, integrated by scipy."""
    from scipy import integrate
    n = x.size
    density = sps.multivariate_normal(mean, covariance)
    inner = lambda b, a: density.pdf(a * x + b) * a ** (n - 2)  # noqa: E731 - dblquad's integrand order
    value, _ = integrate.dblquad(inner, 0, 6, -8, 8, epsabs=0, epsrel=1e-8)
    return value


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.6])
def test_flat_loglik_is_the_invariant_density_of_ar1_noise(rho: float) -> None:
    x = standardised(np.random.default_rng(3).standard_normal((1, 7)) + np.arange(7) * 0.3)
    lags = np.abs(np.subtract.outer(np.arange(7), np.arange(7)))
    expected = _invariant_density(x[0], np.zeros(7), rho ** lags)  # AR(1) correlations ρ^|i−j|
    assert flat_loglik(x, rho)[0] == pytest.approx(math.log(expected), abs=1e-6)


def test_step_logliks_are_the_invariant_densities_of_a_step_in_white_noise() -> None:
    x = standardised(np.random.default_rng(4).standard_normal((1, 7)) + 2.0 * (np.arange(7) >= 4))
    per_place, places = step_logliks(x, step_sigma=3.0, min_segment=3)
    assert list(places) == [3, 4]
    for k, got in zip(places, per_place[0]):
        step = (np.arange(7) >= k).astype(float)
        both = [_invariant_density(x[0], sign * 3.0 * step, np.eye(7)) for sign in (1, -1)]
        assert got == pytest.approx(math.log(sum(both) / 2), abs=1e-5)


@pytest.mark.parametrize("nu", [4, 18, 198])
def test_log_moment_table_is_the_parabolic_cylinder_closed_form(nu: int) -> None:
    from scipy import integrate, special
    grid, log_moment = log_moment_table(nu, 6.0)
    for z in (-6.0, -1.5, 0.0, 2.25, 6.0):
        at = float(np.interp(z, grid, log_moment))
        if nu < 100:  # J_ν(z) = Γ(ν + 1)·e^{z²/4}·D_{−ν−1}(−z)
            closed = special.gamma(nu + 1) * math.exp(z * z / 4) * special.pbdv(-nu - 1, -z)[0]
            assert at == pytest.approx(math.log(closed), abs=1e-7)
        peak = (z + math.sqrt(z * z + 4 * nu)) / 2  # scaled by the peak so quad sees numbers near 1
        top = nu * math.log(peak) - peak * peak / 2 + z * peak
        value, _ = integrate.quad(lambda u: math.exp(nu * math.log(u) - u * u / 2 + z * u - top), 1e-12, 60 + peak,
                                  points=[peak], epsabs=0, epsrel=1e-11, limit=200)
        assert at == pytest.approx(top + math.log(value), abs=1e-7)


def test_shift_statistic_is_invariant_and_places_the_step() -> None:
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((3, 14))
    rows[1, 9:] += 2.5  # a step at 9
    ratios, places = shift_statistics(rows)
    moved, moved_places = shift_statistics(1e9 + 1e3 * rows)  # nanosecond-sized values: the same ratio
    assert moved == pytest.approx(ratios, rel=1e-9) and list(moved_places) == list(places)
    assert places[1] == 9 and ratios[1] > ratios[0]
    assert shift_statistics(np.full((1, 10), 3.0))[0][0] == -math.inf  # a constant series has no step
    # against one ρ it is the Neyman–Pearson ratio: the mean step density over the flat one
    per_place, _ = step_logliks(standardised(rows))
    assert shift_statistics(rows, profile_rhos=(0.6,))[0] == pytest.approx(
        np.log(np.mean(np.exp(per_place), axis=1)) - flat_loglik(standardised(rows), 0.6), rel=1e-9)


def test_prais_winsten_returns_the_innovations() -> None:
    rng = np.random.default_rng(4)
    shocks = rng.standard_normal(30)
    series = [shocks[0] / math.sqrt(1 - 0.6 ** 2)]
    for shock in shocks[1:]:
        series.append(0.6 * series[-1] + shock)
    assert prais_winsten(series, 0.6) == pytest.approx(shocks, abs=1e-12)
    # and the AR(1) generator's lag-1 least squares (numpy.linalg.lstsq) finds its ρ on a long series
    long = ar1_series(0.6, 1, 20_000, rng)[0]
    (slope, _), *_ = np.linalg.lstsq(np.column_stack([long[:-1], np.ones(long.size - 1)]), long[1:], rcond=None)
    assert slope == pytest.approx(0.6, abs=0.02)


def test_shift_p_counts_the_null_series_that_reach_it() -> None:
    step = [v + (3.0 if i >= 12 else 0.0) for i, v in enumerate(NOISE)]
    p, place = shift_test(step)
    observed = shift_statistics(np.array([step]))[0][0]
    assert null_rhos() == (0.0, 0.15, 0.3, 0.45, 0.6) and place == 12
    nulls = [null_statistics(20, rho=rho) for rho in null_rhos()]
    assert all(null.size == 19_999 for null in nulls)
    assert p == max((1 + int(np.sum(null >= observed))) / 20_000 for null in nulls)
    assert null_series_for(200) == 19_999 and null_series_for(2000) == 4999  # long histories: fewer
    assert shift_test(NOISE[:7]) == (1.0, None)  # 7 findings: not 4 on each side


def test_autocorrelated_noise_rarely_raises_a_change_point_and_a_step_is_still_found() -> None:
    # seeded series of 20 (the benchmark measures the rates at 5 000 series): flat AR(1) noise of ρ 0.6, which
    # the permutation test alone flagged in 43 % of such series, and a 3σ step in white noise at 12 and 16
    rng = np.random.default_rng(12)
    flat = ar1_series(0.6, 120, 20, rng)
    alarms = sum(bool(change_point_indices(list(row), permutations=99).changes) for row in flat)
    assert alarms <= 10  # 8 % at most here; 5 % in the benchmark
    for at in (12, 16):
        steps = rng.standard_normal((60, 20))
        steps[:, at:] += 3.0
        found = sum(any(abs(i - at) <= 1 for i, _ in change_point_indices(list(row), permutations=99).changes)
                    for row in steps)
        assert found >= 36, at  # 60 % at least here; the benchmark has the rates


# -- a trend is its own outcome ------------------------------------------------------------------------------

TREND = [100 + 0.2 * i + v for i, v in enumerate(np.random.default_rng(11).standard_normal(30))]  # 0.2σ a finding


def test_ar1_profile_loglik_is_the_exact_likelihood_maximised() -> None:
    """The Prais–Winsten profile likelihood against scipy's multivariate normal density of AR(1) noise,
    maximised over β and σ by scipy.optimize: equal up to the constant n/2·(ln n − ln 2π − 1)."""
    from scipy.optimize import minimize

    from gatekit.history import ar1_profile_loglik

    x = np.array([[0.3, -0.2, 0.9, 1.4, 0.7, 1.9, 1.1, 2.2, 1.8, 2.9]])
    n = x.shape[1]
    line = np.vstack([np.ones(n), np.arange(n, dtype=float)])
    for rho in (0.0, 0.3, 0.6):
        corr = rho ** np.abs(np.subtract.outer(np.arange(n), np.arange(n))) / (1 - rho * rho)

        def negative(theta: np.ndarray) -> float:
            mean = theta[0] + theta[1] * np.arange(n)
            return -float(sps.multivariate_normal(mean, math.exp(2 * theta[2]) * corr).logpdf(x[0]))

        best = minimize(negative, np.array([0.0, 0.3, -1.0]), method="Nelder-Mead",
                        options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20_000})
        mine = float(ar1_profile_loglik(x, line, rho)[0])
        assert -best.fun == pytest.approx(mine + n / 2 * (math.log(n) - math.log(2 * math.pi) - 1), abs=1e-6)


def test_line_and_step_fits_by_hand() -> None:
    from gatekit.history import line_fit, step_sse, trend_fits_better

    slope, intercept, sse = line_fit([1.0, 2.0, 4.0, 4.0])
    # t̄ 1.5, ȳ 2.75: slope Σ(t−t̄)(y−ȳ)/Σ(t−t̄)² = 5.5/5 = 1.1, intercept 2.75 − 1.65 = 1.1
    assert slope == pytest.approx(1.1) and intercept == pytest.approx(1.1)
    assert sse == pytest.approx(sum((y - 1.1 - 1.1 * t) ** 2 for t, y in enumerate([1.0, 2.0, 4.0, 4.0])))
    # a step 0,0,0,0 | 1,1,1,1: no residual at all; a line leaves some
    assert step_sse([0.0] * 4 + [1.0] * 4) == pytest.approx(0.0)
    assert not trend_fits_better([0.0] * 4 + [1.0] * 4 + [0.01])
    assert trend_fits_better([0.1 * i + (0.01 if i % 2 else -0.01) for i in range(12)])


def test_a_slow_trend_is_a_trend_not_a_change_point() -> None:
    from gatekit.history import trend_test

    search = change_point_indices(TREND, permutations=199)
    assert search.trend and search.changes == () and search.trend_p <= 0.05
    assert trend_test(NOISE) > 0.05  # flat noise: no trend
    step = [v + (3.0 if i >= 12 else 0.0) for i, v in enumerate(NOISE)]  # a step stays a step
    stepped = change_point_indices(step, permutations=199)
    assert not stepped.trend and [i for i, _ in stepped.changes] == [12]


def test_history_cli_reports_a_trend_and_fails_on_it(tmp_path: Path) -> None:
    folder = _folder(tmp_path, TREND[:28])  # 28 days of November
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # a trend is not a change point
    data = json.loads(done.stdout)
    assert data["change_points"] == [] and data["trend"]["p"] <= 0.05 and data["tested"]
    slope = np.polyfit(np.arange(28), TREND[:28], 1)[0]
    assert data["trend"]["slope"] == pytest.approx(slope)
    assert data["trend"]["slope_pct"] == pytest.approx(100 * slope / data["trend"]["first"])
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "trend", "--plot",
                       str(tmp_path / "t.png"), cwd=tmp_path)
    assert done.returncode == 1 and "a trend in mean_on" in done.stderr and "failing (--fail-on trend)" in done.stderr
    assert "trend: " in done.stdout and "per finding" in done.stdout and "no change point" in done.stdout


def test_fail_on_with_too_few_findings_says_so_and_fails(tmp_path: Path) -> None:
    folder = _folder(tmp_path, [10.0, 10.1, 9.9, 10.05, 9.95, 10.02])
    done = gate_invoke("history", str(folder), "--metric", "mean_on", "--fail-on", "change", cwd=tmp_path)
    assert done.returncode == 1
    assert ("6 finding(s) of mean_on to test, fewer than the 8 the tests need (4 on each side of a change): nothing "
            "is ruled out; failing (--fail-on change)") in done.stderr
    assert gate_invoke("history", str(folder), "--metric", "mean_on", cwd=tmp_path).returncode == 0

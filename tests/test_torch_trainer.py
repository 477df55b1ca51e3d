"""The PyTorch reference trainer on CPU torch: numerics of the host and resident paths, resume, fallbacks.

Host vs resident agree within a stated bound, not bit for bit: the first step's loss is bit-identical
(same initial weights, same forward), but the fused Adam kernel evaluates lr/bc1 · m / (√v/√bc2 + ε) in a
different order (and with fused multiply-adds) than the host path, which rounds every numpy temporary —
so parameters differ by an ulp or two after the first update and the loss trajectories by < 1e-5 relative.
GPU-only paths (CUDA graphs) have their own tests that skip cleanly without CUDA.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gatekit.distribution import install_hint

torch = pytest.importorskip("torch", reason=f"the torch extra is not installed ({install_hint('torch')})")

from gatekit_drivers.command import read_result  # noqa: E402
from gatekit_drivers.torch_trainer import (Trainer, TrainerConfig, TrainerConfigError, dataset_key,  # noqa: E402
                                           resolve_path, run, write_result)

from gatekit.records import startup_overhead_s  # noqa: E402

from tests.conftest import gate_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL_IMAGE = {"problem": "image-fit", "image_size": 16, "width": 32, "layers": 2, "fourier_features": 8}


def trajectory(n_steps: int, **overrides: object) -> tuple[Trainer, list[float]]:
    trainer = Trainer(TrainerConfig(device="cpu", **overrides))  # type: ignore[arg-type]
    return trainer, [float(trainer.step()) for _ in range(n_steps)]


@pytest.mark.parametrize("problem", [{}, SMALL_IMAGE])
def test_host_and_resident_agree_within_the_stated_bound(problem: dict) -> None:
    _, host = trajectory(40, optimizer="host", **problem)
    _, resident = trajectory(40, optimizer="resident", **problem)
    assert host[0] == resident[0]  # first step: identical weights, identical forward, bit-identical loss
    relative = np.abs(np.array(host) - np.array(resident)) / np.abs(np.array(resident))
    assert relative.max() < 1e-5


def test_first_update_agrees_to_a_few_ulp() -> None:
    host, _ = trajectory(1, optimizer="host")
    resident, _ = trajectory(1, optimizer="resident")
    for a, b in zip(host.problem.params, resident.problem.params):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=4 * 1.2e-7, atol=1e-9)


@pytest.mark.parametrize("optimizer", ["host", "resident"])
@pytest.mark.parametrize("problem", [{}, SMALL_IMAGE])
def test_loss_decreases(optimizer: str, problem: dict) -> None:
    _, losses = trajectory(150, optimizer=optimizer, **problem)
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])


@pytest.mark.parametrize("optimizer", ["host", "resident"])
def test_validation_moves_no_weight_and_no_adam_step(optimizer: str) -> None:
    trainer, _ = trajectory(5, optimizer=optimizer)
    before = [p.detach().clone() for p in trainer.problem.params]
    steps_before = trainer.adam_steps()
    trainer.problem.evaluate()
    assert trainer.adam_steps() == steps_before == 5
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, trainer.problem.params))


@pytest.mark.parametrize("optimizer", ["host", "resident"])
def test_saved_state_resumes_bit_exactly(optimizer: str, tmp_path: Path) -> None:
    trainer, _ = trajectory(7, optimizer=optimizer, lr_schedule="cosine", steps=30)
    torch.save(trainer.state_dict(), tmp_path / "state.pt")
    continued = [float(trainer.step()) for _ in range(8)]
    resumed = Trainer(TrainerConfig(device="cpu", optimizer=optimizer, lr_schedule="cosine", steps=30))
    resumed.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=False))
    assert resumed.adam_steps() == 7
    assert [float(resumed.step()) for _ in range(8)] == continued
    for a, b in zip(trainer.problem.params, resumed.problem.params):
        assert torch.equal(a.detach(), b.detach())


def test_unavailable_graph_fails_clearly_or_falls_back_and_says_so() -> None:
    with pytest.raises(TrainerConfigError, match="capture = graph needs CUDA graphs"):
        resolve_path(TrainerConfig(device="cpu", capture="graph"))
    effective, notes = resolve_path(TrainerConfig(device="cpu", capture="graph", on_unavailable="fallback"))
    assert effective.capture == "off" and notes


def run_trainer(config_text: str, tmp_path: Path, name: str = "arm",
                env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], dict | None]:
    config = tmp_path / f"{name}.toml"
    config.write_text(config_text)
    result = tmp_path / f"{name}-result.json"
    base = {k: v for k, v in os.environ.items() if k not in ("GATEKIT_CACHE_DIR", "GATEKIT_RUN_DIR")}
    done = subprocess.run([sys.executable, "-m", "gatekit_drivers.torch_trainer", "--config", str(config)],
                          capture_output=True, text=True, timeout=120,
                          env={**base, **(env or {}), "GATEKIT_RESULT": str(result)})
    return done, json.loads(result.read_text()) if result.exists() else None


def test_result_follows_the_trainer_contract(tmp_path: Path) -> None:
    done, result = run_trainer('device = "cpu"\nsteps = 30\nwarmup_steps = 2\nproblem = "image-fit"\n'
                               'image_size = 16\nwidth = 32\nfourier_features = 8\n', tmp_path)
    assert done.returncode == 0, done.stderr
    assert result is not None
    metrics = result["metrics"]
    for key in ("train_elapsed_s", "final_loss", "psnr_db", "step_ms_median", "step_ms_p10", "step_ms_p90"):
        assert np.isfinite(metrics[key])
    # start-up phases measured apart from the timed steps; a lone run (no gate, no cache dir) caches nothing
    for key in ("import_s", "setup_s", "dataset_s", "capture_s", "warmup_s", "eval_s"):
        assert metrics[key] >= 0
    assert metrics["dataset_s"] <= metrics["setup_s"] and metrics["dataset_cache_hit"] == 0
    assert "start-up: import " in done.stdout and "data set cache" not in done.stderr
    assert metrics["step_ms_p10"] <= metrics["step_ms_median"] <= metrics["step_ms_p90"]
    assert len(result["trace"]["ms_per_iter"]) == 30
    assert result["is_resident"] is True and result["config"]["is_resident"] is True
    assert result["config"]["device"] == "cpu" and "fused adam" in result["path"]["optimizer"]
    assert "train elapsed: " in done.stdout and "psnr: " in done.stdout


def test_a_diverged_run_writes_its_result_instead_of_crashing(tmp_path: Path) -> None:
    # lr = 1e30 drives the loss (and so PSNR) to NaN within a few steps on CPU
    done, result = run_trainer('device = "cpu"\nsteps = 20\nwarmup_steps = 0\nlr = 1e30\nproblem = "image-fit"\n'
                               'image_size = 16\nwidth = 32\nfourier_features = 8\n', tmp_path)
    assert done.returncode == 0, done.stderr
    assert result is not None and math.isnan(result["metrics"]["final_loss"])
    assert math.isnan(result["metrics"]["psnr_db"]) and math.isfinite(result["metrics"]["train_elapsed_s"])
    metrics, _, trace, problem = read_result(tmp_path / "arm-result.json")  # what gatekit makes of it
    assert problem == "" and "final_loss" not in metrics and "train_elapsed_s" in metrics
    assert {"final_loss", "last_train_loss", "psnr_db"} <= set(trace["gatekit_dropped_metrics"])


def test_non_finite_values_are_written_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    write_result(path, {"metrics": {"train_elapsed_s": 1.5, "final_loss": math.nan, "psnr_db": math.inf,
                                    "step_ms_p90": -math.inf}, "trace": {"ms_per_iter": [0.1]}})
    metrics, _, trace, problem = read_result(path)
    assert problem == "" and metrics == {"train_elapsed_s": 1.5}
    assert sorted(trace["gatekit_dropped_metrics"]) == ["final_loss", "psnr_db", "step_ms_p90"]


def test_fallback_is_in_the_effective_config(tmp_path: Path) -> None:
    done, result = run_trainer('device = "cuda"\ncapture = "graph"\nsteps = 5\nwarmup_steps = 0\n'
                               'on_unavailable = "fallback"\n', tmp_path)
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: nothing falls back")
    assert done.returncode == 0, done.stderr
    assert result["config"]["capture"] == "off" and result["config"]["device"] == "cpu"
    assert "cuda requested" in result["config"]["fallback"]
    done, result = run_trainer('device = "cuda"\nsteps = 5\n', tmp_path, name="strict")
    assert done.returncode == 2 and "requested path unavailable" in done.stderr and result is None


def test_bad_key_exits_2_with_one_line(tmp_path: Path) -> None:
    done, _ = run_trainer('optimiser = "host"\n', tmp_path)
    assert done.returncode == 2
    assert "key 'optimiser': unknown key" in done.stderr.strip().splitlines()[-1]


def _gate_copy(tmp_path: Path, gate: str, steps: int) -> Path:
    """The shipped gate and its arm configs, shortened for a test run. These tests are of the trainer in a real
    gate process, so a busy machine must not stop them in the preflight: the load limit is raised, and the
    busy pattern matches only a trainer of this copy (another test suite on the machine may run its own)."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    gate_path = tmp_path / "configs" / gate
    text = gate_path.read_text()
    assert "load_limit = 8.0" in text and 'busy_pattern = "gatekit_drivers.torch_trainer"' in text
    gate_path.write_text(text.replace("load_limit = 8.0", "load_limit = 1000.0").replace(
        'busy_pattern = "gatekit_drivers.torch_trainer"',
        f"busy_pattern = 'gatekit_drivers.torch_trainer --config {re.escape(str(tmp_path))}'"))
    (tmp_path / "drivers").mkdir()
    shutil.copy(ROOT / "drivers" / "torch_trainer.py", tmp_path / "drivers" / "torch_trainer.py")
    for arm in (tmp_path / "configs" / "torch").glob("*.toml"):
        text = arm.read_text()
        arm.write_text(text.replace("steps = 10000", f"steps = {steps}").replace("steps = 5000", f"steps = {steps}")
                       .replace("image_size = 256", "image_size = 16").replace("width = 256", "width = 32"))
    return tmp_path / "configs" / gate


def test_resident_mlp_gate_runs_on_cpu(tmp_path: Path) -> None:
    gate = _gate_copy(tmp_path, "resident-mlp.toml", steps=300)
    done = gate_cli("run", "host", "resident", "--gate", str(gate), "--n", "2", "--out", str(tmp_path / "out"),
                    "--runs", str(tmp_path / "runs"), "--json", cwd=tmp_path, timeout=600)
    assert done.returncode in (0, 1), done.stderr
    finding = json.loads(done.stdout)
    # a shared CPU can be too noisy to tell at n = 2 (rules.max_threshold_pct): inconclusive is a verdict too
    assert finding["verdict"]["decision"] in ("adopted", "rejected", "regression", "inconclusive")
    assert all(r["config"]["device"] == "cpu" for r in finding["runs"])
    # a time primary: every run row carries its start-up overhead, and the series shared one cached data set
    assert all(r["startup_s"] > 0 for r in finding["runs"])
    assert [r["metrics"]["dataset_cache_hit"] for r in finding["runs"]][1:] == [1.0] * (len(finding["runs"]) - 1)
    assert {r["config"]["optimizer"] for r in finding["runs"]} == {"host", "resident"}
    # the bundled gate preloads torch: every run forked from a warm parent, which had imported it already
    assert all(r["warm_parent"] > 0 and r["metrics"]["import_s"] < 0.5 for r in finding["runs"])


def test_a_silent_capture_fallback_cannot_pass_the_gate(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: graph capture does not fall back")
    gate = _gate_copy(tmp_path, "resident-graph.toml", steps=50)
    done = gate_cli("run", "resident", "graph", "--gate", str(gate), "--n", "2", "--out", str(tmp_path / "out"),
                    "--runs", str(tmp_path / "runs"), "--json", cwd=tmp_path, timeout=600)
    assert done.returncode == 3
    reasons = " ".join(json.loads(done.stdout)["verdict"]["reasons"])
    assert "declared flag(s) do not differ in the effective config: capture" in reasons


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)")
def test_graph_replay_matches_eager_resident_on_cuda() -> None:
    eager = Trainer(TrainerConfig(device="cuda", optimizer="resident", capture="off"))
    graph = Trainer(TrainerConfig(device="cuda", optimizer="resident", capture="graph"))
    graph.prepare()
    for _ in range(3):  # the capture's warm-up steps
        eager.step()
    a = [float(eager.step()) for _ in range(20)]
    b = [float(graph.step()) for _ in range(20)]
    assert np.allclose(a, b, rtol=1e-4)



# -- the quality trace of time-to-target gates ---------------------------------------------------------

@pytest.mark.parametrize("problem, series", [({}, {"loss"}), (SMALL_IMAGE, {"loss", "psnr_db"})])
def test_a_quality_trace_every_k_steps_follows_the_trainer_contract(problem: dict, series: set) -> None:
    """trace_every = K: the training seconds, the step and the whole data set's loss (image-fit: and PSNR) every K
    timed steps, checked by gatekit's reader of quality traces; evaluating them trains nothing."""
    from gatekit.quality import quality_trace

    base = {"device": "cpu", "steps": 30, "warmup_steps": 2, "dataset_batches": 4, **problem}
    traced = run(TrainerConfig(**base, trace_every=10))  # type: ignore[arg-type]
    quality = quality_trace(traced["trace"])
    assert quality is not None and quality.axes["step"] == (10.0, 20.0, 30.0) and set(quality.series) == series
    assert quality.axes["elapsed_s"][-1] <= traced["metrics"]["train_elapsed_s"] + 1e-6
    assert traced["trace"]["loss"][-1] == traced["metrics"]["final_loss"]  # the last point is the trained model
    assert len(traced["trace"]["ms_per_iter"]) == 30
    plain = run(TrainerConfig(**base))  # type: ignore[arg-type]
    assert set(plain["trace"]) == {"ms_per_iter"}  # trace_every = 0: no quality trace
    assert _losses(plain) == _losses(traced)  # evaluating at the trace points moved no weight


def test_a_trace_longer_than_gatekit_reads_is_refused_at_the_config(tmp_path: Path) -> None:
    with pytest.raises(TrainerConfigError, match="key 'trace_every': steps / trace_every = 200000 points, more "
                                                  "than the 100000"):
        TrainerConfig.from_mapping({"steps": 200_000, "trace_every": 1}, "arm.toml")
    with pytest.raises(TrainerConfigError, match="key 'trace_every': must be 0"):
        TrainerConfig.from_mapping({"trace_every": -1}, "arm.toml")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (CI has none)")
def test_a_graph_captured_run_writes_its_quality_trace() -> None:
    config = TrainerConfig(device="cuda", capture="graph", steps=40, warmup_steps=2, trace_every=10, **SMALL_IMAGE)
    document = run(config)  # type: ignore[arg-type]
    trace = document["trace"]
    assert trace["step"] == [10, 20, 30, 40] and len(trace["psnr_db"]) == 4
    assert trace["elapsed_s"][-1] <= document["metrics"]["train_elapsed_s"] + 1e-6
    assert len(trace["ms_per_iter"]) == 40 and all(ms > 0 for ms in trace["ms_per_iter"])


# -- the data-set cache and the start-up overhead ----------------------------------------------------

CACHED = {"device": "cpu", "steps": 15, "warmup_steps": 2, "dataset_batches": 4}


def _losses(document: dict) -> tuple[float, float]:
    return document["metrics"]["final_loss"], document["metrics"]["last_train_loss"]


@pytest.mark.parametrize("problem", [{}, SMALL_IMAGE])
def test_results_are_identical_with_and_without_the_cache(problem: dict, tmp_path: Path) -> None:
    config = TrainerConfig(**{**CACHED, **problem})  # type: ignore[arg-type]
    uncached = run(config)
    first = run(config, tmp_path / "cache")
    second = run(config, tmp_path / "cache")
    assert (first["metrics"]["dataset_cache_hit"], second["metrics"]["dataset_cache_hit"]) == (0.0, 1.0)
    assert len(list((tmp_path / "cache").glob("torch-dataset-*.pt"))) == 1
    assert not list((tmp_path / "cache").glob(".*.tmp"))  # written atomically: no temporary left behind
    # the generator state travels with the data: the parameters and so every loss are bit-identical
    assert _losses(uncached) == _losses(first) == _losses(second)
    if "psnr_db" in uncached["metrics"]:
        assert uncached["metrics"]["psnr_db"] == second["metrics"]["psnr_db"]


def test_second_run_of_a_series_hits_the_cache_in_the_runs_folder(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    series = tmp_path / "runs" / "series"
    monkeypatch.delenv("GATEKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("GATEKIT_RUN_DIR", str(series / "off-r1"))
    from gatekit_drivers.torch_trainer import dataset_cache_dir
    first = run(TrainerConfig(**CACHED), dataset_cache_dir())  # type: ignore[arg-type]
    assert list((tmp_path / "runs" / ".cache").glob("torch-dataset-*.pt"))  # beside the series: shared by all
    # the second run of the series, as the gate starts it; another arm (optimizer) shares the data set
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in {**CACHED, "optimizer": "host"}.items())
    done, result = run_trainer(text, tmp_path, env={"GATEKIT_RUN_DIR": str(series / "on-r1")})
    assert done.returncode == 0, done.stderr
    assert result is not None and result["metrics"]["dataset_cache_hit"] == 1.0
    assert "data set cache hit" in done.stderr and "cache hit" in done.stdout
    assert first["metrics"]["dataset_cache_hit"] == 0.0


def test_cache_key_follows_the_data_config_only() -> None:
    base = TrainerConfig()
    key = dataset_key(base)
    assert len(key) == 64 and key == dataset_key(TrainerConfig())
    for changed in ({"seed": 1}, {"batch": 32}, {"dataset_batches": 8}, {"problem": "image-fit"}):
        assert dataset_key(TrainerConfig(**changed)) != key, changed  # type: ignore[arg-type]
    for same in ({"lr": 0.1}, {"optimizer": "host"}, {"capture": "graph"}, {"steps": 3}, {"hidden": 64}):
        assert dataset_key(TrainerConfig(**same)) == key, same  # type: ignore[arg-type]
    image = TrainerConfig(problem="image-fit")
    assert dataset_key(TrainerConfig(problem="image-fit", image_size=64)) != dataset_key(image)
    assert dataset_key(TrainerConfig(problem="image-fit", seed=3)) == dataset_key(image)  # the photo has no seed


def test_a_damaged_cache_file_is_generated_again(tmp_path: Path) -> None:
    config = TrainerConfig(**CACHED)  # type: ignore[arg-type]
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / f"torch-dataset-{dataset_key(config)}.pt").write_bytes(b"half a file")
    document = run(config, cache)
    assert document["metrics"]["dataset_cache_hit"] == 0.0
    assert _losses(document) == _losses(run(config, cache))  # rewritten whole, then hit


def test_startup_overhead_is_wallclock_minus_a_time_primary() -> None:
    metrics = {"train_elapsed_s": 0.95, "psnr_db": 30.0}
    assert startup_overhead_s(metrics, 9.1, "train_elapsed_s") == pytest.approx(8.15)
    assert startup_overhead_s(metrics, 9.1, "psnr_db") is None  # not a time
    assert startup_overhead_s(metrics, 9.1, "process_wallclock_s") is None  # would be 0 by definition
    assert startup_overhead_s({}, 9.1, "train_elapsed_s") is None  # primary missing: a failed run
    assert startup_overhead_s(metrics, 0.0, "train_elapsed_s") is None  # never started
    assert startup_overhead_s(metrics, 0.5, "train_elapsed_s") is None  # not timed inside this process
    assert startup_overhead_s(metrics, 0.95, "train_elapsed_s") == 0.0


@pytest.mark.parametrize("problem", [{}, {**SMALL_IMAGE, "lr_schedule": "cosine", "steps": 30}])
def test_direct_fused_adam_is_bit_identical_to_torch_optim(problem: dict) -> None:
    from gatekit_drivers.torch_trainer import FusedAdam, make_resident_adam
    direct = Trainer(TrainerConfig(device="cpu", **problem))
    reference = Trainer(TrainerConfig(device="cpu", **problem))
    reference.optimizer, _ = make_resident_adam(reference.problem.params, reference.config.lr, capturable=False)
    assert isinstance(direct.optimizer, FusedAdam) and isinstance(reference.optimizer, torch.optim.Adam)
    assert [float(direct.step()) for _ in range(25)] == [float(reference.step()) for _ in range(25)]
    assert all(torch.equal(a, b) for a, b in zip(direct.problem.params, reference.problem.params))
    assert direct.adam_steps() == reference.adam_steps() == 25


def test_a_run_never_imports_torch_dynamo() -> None:
    # torch.optim's first use imports torch._dynamo (~1 s of start-up); the trainer's resident path avoids it
    code = ("import sys; from gatekit_drivers.torch_trainer import TrainerConfig, run; "
            "run(TrainerConfig(device='cpu', steps=3, warmup_steps=1, dataset_batches=2)); "
            "print('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_two_runs_at_once_share_the_cache_safely(tmp_path: Path) -> None:
    # duet mode starts two runs together: each writes the data set to its own temporary and renames it, so
    # neither can read half a file; both see the same data and train to the same loss
    (tmp_path / "arm.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in CACHED.items()))
    base = {k: v for k, v in os.environ.items() if k != "GATEKIT_RUN_DIR"}
    procs = [subprocess.Popen([sys.executable, "-m", "gatekit_drivers.torch_trainer", "--config",
                               str(tmp_path / "arm.toml")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, env={**base, "GATEKIT_CACHE_DIR": str(tmp_path / "cache"),
                                              "GATEKIT_RESULT": str(tmp_path / f"r{i}.json")}) for i in range(2)]
    for proc in procs:
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
    results = [json.loads((tmp_path / f"r{i}.json").read_text()) for i in range(2)]
    assert _losses(results[0]) == _losses(results[1])
    key = dataset_key(TrainerConfig(**CACHED))  # type: ignore[arg-type]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f"torch-dataset-{key}.pt"]  # no temporary left


def test_torch_bytecode_is_cached_only_where_torch_has_none_and_cannot_write_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from gatekit_drivers.torch_trainer import cache_torch_bytecode
    package = tmp_path / "site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    spec = importlib.util.spec_from_file_location("torch", package / "__init__.py")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    cache = tmp_path / "cache"
    assert cache_torch_bytecode(cache) is None  # a writable folder: Python writes the bytecode itself
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # PYTHONDONTWRITEBYTECODE: never next to the sources
    assert cache_torch_bytecode(cache) == cache / "pycache" and sys.dont_write_bytecode is False
    monkeypatch.setattr(sys, "pycache_prefix", None)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if Path(path).is_relative_to(package)
                        else real_access(path, mode))
    assert cache_torch_bytecode(None) is None  # no cache dir (a lone run): nothing changes
    assert cache_torch_bytecode(cache) == cache / "pycache" and sys.pycache_prefix == str(cache / "pycache")
    monkeypatch.setattr(sys, "pycache_prefix", None)
    compiled = Path(importlib.util.cache_from_source(str(package / "__init__.py")))
    compiled.parent.mkdir()
    compiled.write_bytes(b"")
    assert cache_torch_bytecode(cache) is None  # shipped with bytecode: nothing to cache

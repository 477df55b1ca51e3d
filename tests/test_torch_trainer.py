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
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e '.[torch]')")

from gatekit_drivers.command import read_result  # noqa: E402
from gatekit_drivers.torch_trainer import (Trainer, TrainerConfig, TrainerConfigError, resolve_path,  # noqa: E402
                                           write_result)

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


def run_trainer(config_text: str, tmp_path: Path, name: str = "arm") -> tuple[subprocess.CompletedProcess[str],
                                                                             dict | None]:
    config = tmp_path / f"{name}.toml"
    config.write_text(config_text)
    result = tmp_path / f"{name}-result.json"
    done = subprocess.run([sys.executable, "-m", "gatekit_drivers.torch_trainer", "--config", str(config)],
                          capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "GATEKIT_RESULT": str(result)})
    return done, json.loads(result.read_text()) if result.exists() else None


def test_result_follows_the_trainer_contract(tmp_path: Path) -> None:
    done, result = run_trainer('device = "cpu"\nsteps = 30\nwarmup_steps = 2\nproblem = "image-fit"\n'
                               'image_size = 16\nwidth = 32\nfourier_features = 8\n', tmp_path)
    assert done.returncode == 0, done.stderr
    assert result is not None
    metrics = result["metrics"]
    for key in ("train_elapsed_s", "final_loss", "psnr_db", "step_ms_median", "step_ms_p10", "step_ms_p90"):
        assert np.isfinite(metrics[key])
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
    """The shipped gate and its arm configs, shortened for a test run."""
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
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
    assert finding["verdict"]["decision"] in ("adopted", "rejected", "regression")
    assert all(r["config"]["device"] == "cpu" for r in finding["runs"])
    assert {r["config"]["optimizer"] for r in finding["runs"]} == {"host", "resident"}


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

"""Tests for drivers/numpy_trainer.py, run the way the gate runs it: a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "drivers" / "numpy_trainer.py"

# Tiny problems so every subprocess finishes in a fraction of a second.
TINY_MNIST: dict[str, Any] = {
    "problem": "mnist-mlp",
    "steps": 30,
    "warmup_steps": 2,
    "batch": 16,
    "hidden": 16,
}
TINY_IMAGE: dict[str, Any] = {
    "problem": "image-fit",
    "steps": 30,
    "warmup_steps": 2,
    "batch": 32,
    "hidden": 16,
    "layers": 2,
    "fourier_features": 8,
    "image_size": 16,
    "lr": 0.005,
}

METRIC_KEYS = {
    "train_elapsed_s",
    "final_loss",
    "step_ms_median",
    "step_ms_p10",
    "step_ms_p90",
}
CONFIG_KEYS = {
    "problem",
    "optimizer",
    "steps",
    "warmup_steps",
    "batch",
    "hidden",
    "layers",
    "fourier_features",
    "image_size",
    "lr",
    "seed",
    "dtype",
    "trace_every",
}


def _toml(cfg: dict[str, Any]) -> str:
    """Minimal TOML writer for flat str/int/float tables (json quoting is valid TOML)."""
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in cfg.items())


def run_trainer(
    tmp_path: Path, cfg: dict[str, Any], *, name: str = "run", result: bool = True
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Run the trainer as a real subprocess; return the process and parsed result."""
    conf = tmp_path / f"{name}.toml"
    conf.write_text(_toml(cfg), encoding="utf-8")
    res = tmp_path / name / "result.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEKIT_")}
    env.update(GATEKIT_ARM="off", GATEKIT_RUN="1", GATEKIT_RUN_DIR=str(tmp_path / name))
    if result:
        env["GATEKIT_RESULT"] = str(res)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--config", str(conf)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    payload = json.loads(res.read_text()) if result and res.exists() else None
    return proc, payload


@pytest.mark.parametrize("base", [TINY_MNIST, TINY_IMAGE], ids=["mnist-mlp", "image-fit"])
def test_host_and_resident_are_bit_identical(tmp_path: Path, base: dict[str, Any]) -> None:
    out = {}
    for opt in ("host", "resident"):
        proc, payload = run_trainer(tmp_path, {**base, "optimizer": opt}, name=opt)
        assert proc.returncode == 0, proc.stderr
        assert payload is not None
        out[opt] = payload["metrics"]
    # Exact equality on purpose: both arms must do the same float ops in the same order.
    assert out["host"]["final_loss"] == out["resident"]["final_loss"]
    assert out["host"].get("psnr_db") == out["resident"].get("psnr_db")


@pytest.mark.parametrize("base", [TINY_MNIST, TINY_IMAGE], ids=["mnist-mlp", "image-fit"])
def test_loss_decreases_with_training(tmp_path: Path, base: dict[str, Any]) -> None:
    losses = []
    for steps in (1, 150):
        cfg = {**base, "optimizer": "resident", "steps": steps, "warmup_steps": 0}
        proc, payload = run_trainer(tmp_path, cfg, name=f"s{steps}")
        assert proc.returncode == 0, proc.stderr
        assert payload is not None
        losses.append(payload["metrics"]["final_loss"])
    assert losses[1] < 0.8 * losses[0], losses


def test_result_json_follows_contract(tmp_path: Path) -> None:
    cfg = {**TINY_IMAGE, "optimizer": "resident"}
    proc, payload = run_trainer(tmp_path, cfg)
    assert proc.returncode == 0, proc.stderr
    assert payload is not None
    assert set(payload) == {"metrics", "config", "trace"}

    m = payload["metrics"]
    assert METRIC_KEYS | {"psnr_db"} <= set(m)
    assert all(isinstance(m[k], float) for k in METRIC_KEYS | {"psnr_db"})
    assert m["train_elapsed_s"] > 0
    assert m["step_ms_p10"] <= m["step_ms_median"] <= m["step_ms_p90"]
    assert 5.0 < m["psnr_db"] < 60.0

    c = payload["config"]
    assert set(c) == CONFIG_KEYS
    assert c["optimizer"] == "resident" and c["problem"] == "image-fit"
    assert c["steps"] == cfg["steps"] and c["seed"] == 0  # default echoed too

    ms = payload["trace"]["ms_per_iter"]
    assert len(ms) == cfg["steps"]  # warm-up steps are not timed
    assert all(t > 0 and round(t, 4) == t for t in ms)
    # Timed loop covers exactly the per-step times (allow for clock granularity).
    assert sum(ms) / 1e3 == pytest.approx(m["train_elapsed_s"], rel=0.05, abs=1e-3)

    # Atomic write leaves no temp files behind.
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["result.json"]


def test_mnist_has_no_psnr(tmp_path: Path) -> None:
    proc, payload = run_trainer(tmp_path, {**TINY_MNIST, "optimizer": "host"})
    assert proc.returncode == 0, proc.stderr
    assert payload is not None
    assert METRIC_KEYS <= set(payload["metrics"])
    assert "psnr_db" not in payload["metrics"]
    assert payload["config"]["optimizer"] == "host"


def test_stdout_lines_without_result_file(tmp_path: Path) -> None:
    proc, payload = run_trainer(tmp_path, TINY_IMAGE, result=False)
    assert proc.returncode == 0, proc.stderr
    assert payload is None
    lines = proc.stdout.splitlines()
    assert any(line.startswith("train elapsed: ") and line.endswith("s") for line in lines)
    assert any(line.startswith("final loss: ") for line in lines)
    assert any(line.startswith("psnr: ") and line.endswith(" dB") for line in lines)
    float(next(line for line in lines if line.startswith("train elapsed: "))[15:-1])
    # Start banner goes to stderr and echoes the effective config.
    assert "optimizer=host" in proc.stderr and "problem=image-fit" in proc.stderr


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"learning_rate": 0.1}, "learning_rate"),
        ({"optimizer": "sgd"}, "optimizer"),
        ({"steps": 0}, "steps"),
        ({"lr": "fast"}, "lr"),
        ({"steps": 100_001, "trace_every": 1}, "trace_every"),
    ],
    ids=["unknown-key", "bad-choice", "out-of-range", "wrong-type", "trace-too-long"],
)
def test_bad_config_exits_2_with_one_line(
    tmp_path: Path, extra: dict[str, Any], key: str
) -> None:
    proc, payload = run_trainer(tmp_path, {**TINY_MNIST, **extra})
    assert proc.returncode == 2
    assert payload is None
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"numpy_trainer: {tmp_path / 'run.toml'}: key '{key}': ")
    assert proc.stdout == ""


def _load_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("numpy_trainer_under_test", SCRIPT)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_resident_step_allocates_nothing() -> None:
    """The point of the resident arm: no per-step buffers (numpy reports to tracemalloc)."""
    import numpy as np

    nt = _load_module()
    dtype = np.dtype("float32")
    init = nt.init_params([256, 256, 256, 3], 0, dtype)
    n_bytes = sum(p.nbytes for p in init)
    peaks = {}
    for name, cls in (("host", nt.HostAdam), ("resident", nt.ResidentAdam)):
        opt = cls([p.copy() for p in init], nt.AdamConsts(1e-3, dtype))
        if name == "host":
            opt.grads[:] = [np.ones_like(p) for p in init]
        else:
            opt.G[:] = 1
        opt.step()  # first step outside the measurement
        tracemalloc.start()
        opt.step()
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks["resident"] < 4096, peaks
    assert peaks["host"] > n_bytes // 4, peaks  # host temporaries are tensor-sized


def test_a_quality_trace_every_k_steps_follows_the_trainer_contract(tmp_path: Path) -> None:
    """trace_every = K: the training seconds, the step and the whole data set's loss (and PSNR) every K steps,
    checked by gatekit's reader of quality traces."""
    from gatekit.quality import quality_trace

    cfg = {**TINY_IMAGE, "optimizer": "resident", "trace_every": 10}
    proc, payload = run_trainer(tmp_path, cfg)
    assert proc.returncode == 0, proc.stderr
    assert payload is not None
    trace = payload["trace"]
    quality = quality_trace(trace)
    assert quality is not None and quality.axes["step"] == (10.0, 20.0, 30.0)
    assert set(quality.series) == {"loss", "psnr_db"}
    assert quality.axes["elapsed_s"][-1] <= payload["metrics"]["train_elapsed_s"] + 1e-6
    assert trace["loss"][-1] == pytest.approx(payload["metrics"]["final_loss"])  # the last point is the trained model
    _, plain = run_trainer(tmp_path, {**TINY_IMAGE, "optimizer": "resident"}, name="plain")
    assert plain is not None and set(plain["trace"]) == {"ms_per_iter"}  # trace_every = 0: no quality trace
    assert plain["metrics"]["final_loss"] == payload["metrics"]["final_loss"]  # evaluating does not train

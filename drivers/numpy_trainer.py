"""Numpy reference trainer: an MLP trained with Adam, two optimizer layouts.

The gate runs this file as a subprocess (``python drivers/numpy_trainer.py
--config FILE.toml``); it is also importable as ``gatekit_drivers.numpy_trainer``.

``optimizer`` selects one of two Adam implementations that do the SAME
arithmetic in the SAME order (so the loss trajectory is bit-identical):

* ``host``: per parameter tensor, copy parameter and gradient out, update the
  moments and compute the step with fresh temporaries, copy the result back --
  the download/update/upload round trip of a host-side optimizer.
* ``resident``: parameters, gradients and both moments each live in ONE flat
  preallocated buffer (parameters and gradients are views into it); Adam is a
  fixed sequence of in-place ``out=`` ufuncs over the whole buffer with
  preallocated scratch, so a step allocates nothing.

Problems: ``mnist-mlp`` (784->hidden->10, ReLU, softmax cross-entropy on
deterministic class-blob data shaped like MNIST) and ``image-fit`` (coordinate
MLP: (x, y) -> Fourier features -> ``layers`` ReLU layers -> RGB, MSE, fitting
matplotlib's ``grace_hopper.jpg``; reports ``psnr_db``).

Timing: ``warmup_steps`` untimed steps, then ``steps`` timed steps; only that
steady-state loop counts toward ``train_elapsed_s`` / ``ms_per_iter``.
``trace_every = K`` (0: off) adds a quality trace for time-to-target gates:
every K steps the training seconds so far (``trace.elapsed_s``), the step
(``trace.step``) and the whole data set's loss (``trace.loss``; image-fit also
``trace.psnr_db``), evaluated outside the clock.
``final_loss`` is the loss of the trained model on the whole data set (all
synthetic samples / all pixels), evaluated after the timed loop.

BLAS threads: when run as a script, OpenBLAS/OMP/MKL are pinned to ONE thread
unless the caller already set the variables (importing the module leaves the
environment alone). Measured on the 2-core KVM dev box, 4 alternating runs
per setting, train-loop seconds:
  demo config (image-fit, batch 32, hidden 64, 8 layers):
    1 thread  host 2.69-2.83, resident 1.87-1.94
    2 threads host 2.67-2.88, resident 1.83-1.95   (no difference: 32x64
    matmuls are below OpenBLAS's threading threshold)
  mnist-mlp, batch 64: 1 thread 1.50-1.53, 2 threads 1.42-1.47
  image-fit, batch 512, hidden 256: 1 thread 5.54-5.83 (CV 2.6 %),
    2 threads 3.87-4.27 (CV 4.1 %)
Two threads only pay off for big matmuls and then with ~1.6x the run-to-run
spread, because the second core is shared with the gate and whatever else
runs on the box. A gate decides on spread, so the default is one thread.
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    # Must happen before numpy loads OpenBLAS; see the module docstring. A run forked from a warm parent
    # (`[driver] preload = ["numpy"]`) finds numpy loaded already: the parent's environment decided, so the
    # gate file sets these in driver.env then (results are the same either way; only the speed differs).
    import sys as _sys

    _BLAS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    if "numpy" in _sys.modules and not all(_var in os.environ for _var in _BLAS):
        print("numpy_trainer: numpy was preloaded by a warm parent; its BLAS threads were set there "
              "(set OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS in driver.env)", file=_sys.stderr)
    for _var in _BLAS:
        os.environ.setdefault(_var, "1")

import argparse
import json
import math
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any, Callable

import numpy as np

PROG = "numpy_trainer"

PROBLEMS = ("mnist-mlp", "image-fit")
OPTIMIZERS = ("host", "resident")
DTYPES = ("float32", "float64")

DEFAULTS: dict[str, Any] = {
    "problem": "mnist-mlp",
    "optimizer": "host",
    "steps": 200,
    "warmup_steps": 20,
    "batch": 64,
    "hidden": 128,
    "layers": 3,
    "fourier_features": 64,
    "image_size": 64,
    "lr": 1e-3,
    "seed": 0,
    "dtype": "float32",
    "trace_every": 0,
}

BETA1 = 0.9
BETA2 = 0.999
EPS = 1e-8

MNIST_SAMPLES = 4096  # size of the fixed synthetic data set
MNIST_INPUT = 784
MNIST_CLASSES = 10
FOURIER_SCALE = 10.0  # std of the random frequencies, in cycles per image
ALIGN_ELEMS = 16  # flat-buffer offsets are padded to 64 B (float32) for SIMD
MAX_TRACE_POINTS = 100_000  # gatekit.quality's bound on a quality trace (drivers do not import the core)


class ConfigError(Exception):
    """A config problem, reported as ``key '<k>': <problem>``."""

    def __init__(self, key: str | None, problem: str) -> None:
        super().__init__(problem)
        self.key = key
        self.problem = problem


# --------------------------------------------------------------------------
# config


def _int(lo: int, hi: int | None = None) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        # bool is an int subclass; `steps = true` is a mistake, not 1.
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"expected an integer, got {v!r}")
        if v < lo or (hi is not None and v > hi):
            bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise ValueError(f"must be {bound}, got {v}")
        return v

    return check


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        if v not in options:
            raise ValueError(f"must be one of {', '.join(options)}; got {v!r}")
        return v

    return check


def _positive_float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number, got {v!r}")
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"must be a finite number > 0, got {v!r}")
    return float(v)


CHECKS: dict[str, Callable[[Any], Any]] = {
    "problem": _choice(PROBLEMS),
    "optimizer": _choice(OPTIMIZERS),
    "steps": _int(1),
    "warmup_steps": _int(0),
    "batch": _int(1),
    "hidden": _int(1),
    "layers": _int(1),
    "fourier_features": _int(0),
    "image_size": _int(2, 512),
    "lr": _positive_float,
    "seed": _int(0),
    "dtype": _choice(DTYPES),
    "trace_every": _int(0),
}


def load_config(path: Path) -> dict[str, Any]:
    """Read and validate a TOML config; returns every effective key."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(None, f"cannot read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(None, f"invalid TOML: {exc}") from exc
    cfg = dict(DEFAULTS)
    for key, value in raw.items():
        if key not in CHECKS:
            raise ConfigError(key, f"unknown key (known: {', '.join(CHECKS)})")
        try:
            cfg[key] = CHECKS[key](value)
        except ValueError as exc:
            raise ConfigError(key, str(exc)) from exc
    points = cfg["steps"] // cfg["trace_every"] if cfg["trace_every"] else 0
    if points > MAX_TRACE_POINTS:
        raise ConfigError("trace_every", f"steps / trace_every = {points} points, more than the "
                          f"{MAX_TRACE_POINTS} a quality trace may hold")
    return cfg


# --------------------------------------------------------------------------
# data


def make_mnist_like(seed: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic MNIST-shaped data: one Gaussian blob per class."""
    rng = np.random.default_rng([seed, 1])
    protos = rng.standard_normal((MNIST_CLASSES, MNIST_INPUT))
    labels = rng.integers(0, MNIST_CLASSES, size=MNIST_SAMPLES)
    # Small class signal under unit noise: separable, but it takes some steps.
    x = 0.15 * protos[labels] + rng.standard_normal((MNIST_SAMPLES, MNIST_INPUT))
    return x.astype(dtype), labels


def _sample_image_path() -> Path:
    """Locate matplotlib's grace_hopper.jpg without importing matplotlib."""
    import importlib.util

    spec = importlib.util.find_spec("matplotlib")
    for root in (spec.submodule_search_locations or []) if spec else []:
        cand = Path(root) / "mpl-data" / "sample_data" / "grace_hopper.jpg"
        if cand.is_file():
            return cand
    import matplotlib.cbook  # slower fallback (custom data paths)

    return Path(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))


def load_image(size: int) -> np.ndarray:
    """Centre-cropped, box-downsampled photo as float64 (size, size, 3) in [0, 1]."""
    from PIL import Image  # lazy: only image-fit needs it

    with Image.open(_sample_image_path()) as im:
        im = im.convert("RGB")
        w, h = im.size
        s = min(w, h)
        left, top = (w - s) // 2, (h - s) // 2
        im = im.crop((left, top, left + s, top + s)).resize((size, size), Image.BOX)
        return np.asarray(im, dtype=np.float64) / 255.0


def make_image_fit(
    seed: int, size: int, n_freq: int, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """Fourier features of every pixel centre, and the RGB targets."""
    img = load_image(size)
    ticks = (np.arange(size) + 0.5) / size
    yy, xx = np.meshgrid(ticks, ticks, indexing="ij")
    coords = np.stack([xx.ravel(), yy.ravel()], axis=1)
    if n_freq:
        rng = np.random.default_rng([seed, 2])
        freqs = rng.normal(0.0, FOURIER_SCALE, size=(2, n_freq))
        proj = 2.0 * np.pi * coords @ freqs
        feats = np.concatenate([np.sin(proj), np.cos(proj)], axis=1)
    else:
        feats = coords
    return feats.astype(dtype), img.reshape(-1, 3).astype(dtype)


# --------------------------------------------------------------------------
# model + optimizers


def init_params(sizes: list[int], seed: int, dtype: np.dtype) -> list[np.ndarray]:
    """He-normal weights, zero biases: [W0, b0, W1, b1, ...]."""
    rng = np.random.default_rng([seed, 3])
    params: list[np.ndarray] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w = rng.standard_normal((fan_in, fan_out)) * math.sqrt(2.0 / fan_in)
        params += [w.astype(dtype), np.zeros(fan_out, dtype=dtype)]
    return params


class AdamConsts:
    """Scalars shared by both arms, pre-cast to the working dtype so that
    every ufunc sees exactly the same operand values."""

    def __init__(self, lr: float, dtype: np.dtype) -> None:
        t = dtype.type
        self.t = t
        self.lr = t(lr)
        self.b1, self.b2 = t(BETA1), t(BETA2)
        self.c1, self.c2 = t(1.0 - BETA1), t(1.0 - BETA2)
        self.eps = t(EPS)

    def bias(self, step: int) -> tuple[Any, Any]:
        """Bias-correction denominators for 1-based ``step``."""
        return self.t(1.0 - BETA1**step), self.t(1.0 - BETA2**step)


class HostAdam:
    """Per-tensor Adam with a copy out / temporaries / copy back round trip."""

    def __init__(self, params: list[np.ndarray], consts: AdamConsts) -> None:
        self.params = params
        self.grads: list[np.ndarray | None] = [None] * len(params)
        self.grad_out: list[np.ndarray | None] = [None] * len(params)  # allocate
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.k = consts
        self.step_count = 0

    def step(self) -> None:
        k = self.k
        self.step_count += 1
        bc1, bc2 = k.bias(self.step_count)
        for i, param in enumerate(self.params):
            p = np.array(param)  # "download" parameter and gradient
            g = np.array(self.grads[i])
            # Same operations, same order as ResidentAdam.step (bit-identity).
            m = self.m[i] * k.b1 + g * k.c1
            v = self.v[i] * k.b2 + (g * g) * k.c2
            self.m[i], self.v[i] = m, v
            upd = ((m / bc1) * k.lr) / (np.sqrt(v / bc2) + k.eps)
            p = p - upd
            param[...] = p  # "upload"


class ResidentAdam:
    """Adam over flat resident buffers, in place, allocation-free per step."""

    def __init__(self, init: list[np.ndarray], consts: AdamConsts) -> None:
        dtype = init[0].dtype
        offsets, total = [], 0
        for p in init:
            offsets.append(total)
            total += -(-p.size // ALIGN_ELEMS) * ALIGN_ELEMS
        self.P = np.zeros(total, dtype=dtype)
        self.G = np.zeros(total, dtype=dtype)
        self.M = np.zeros(total, dtype=dtype)
        self.V = np.zeros(total, dtype=dtype)
        self.S1 = np.empty(total, dtype=dtype)
        self.S2 = np.empty(total, dtype=dtype)
        self.params, self.grad_out = [], []
        for p, off in zip(init, offsets):
            view = self.P[off : off + p.size].reshape(p.shape)
            view[...] = p
            self.params.append(view)
            self.grad_out.append(self.G[off : off + p.size].reshape(p.shape))
        self.grads = self.grad_out  # backward writes straight into G
        self.k = consts
        self.step_count = 0

    def step(self) -> None:
        k, P, G, M, V, S1, S2 = self.k, self.P, self.G, self.M, self.V, self.S1, self.S2
        self.step_count += 1
        bc1, bc2 = k.bias(self.step_count)
        # Padding lanes hold zeros in P/G/M/V, so they stay exactly zero.
        np.multiply(M, k.b1, out=M)
        np.multiply(G, k.c1, out=S1)
        np.add(M, S1, out=M)  # m = m*b1 + g*c1
        np.multiply(V, k.b2, out=V)
        np.multiply(G, G, out=S1)
        np.multiply(S1, k.c2, out=S1)
        np.add(V, S1, out=V)  # v = v*b2 + (g*g)*c2
        np.divide(M, bc1, out=S1)
        np.multiply(S1, k.lr, out=S1)  # (m/bc1)*lr
        np.divide(V, bc2, out=S2)
        np.sqrt(S2, out=S2)
        np.add(S2, k.eps, out=S2)  # sqrt(v/bc2) + eps
        np.divide(S1, S2, out=S1)
        np.subtract(P, S1, out=P)


class MLP:
    """Dense ReLU MLP; forward/backward shared by both optimizer arms."""

    def __init__(self, opt: HostAdam | ResidentAdam) -> None:
        self.opt = opt
        self.n_layers = len(opt.params) // 2

    def forward(self, x: np.ndarray) -> list[np.ndarray]:
        acts = [x]
        ps = self.opt.params
        for li in range(self.n_layers):
            z = acts[-1] @ ps[2 * li]
            z += ps[2 * li + 1]
            if li < self.n_layers - 1:
                np.maximum(z, 0, out=z)
            acts.append(z)
        return acts

    def backward(self, acts: list[np.ndarray], d: np.ndarray) -> None:
        """Gradients into opt.grads (new arrays for host, views of G for resident)."""
        ps, out, grads = self.opt.params, self.opt.grad_out, self.opt.grads
        for li in reversed(range(self.n_layers)):
            grads[2 * li] = np.matmul(acts[li].T, d, out=out[2 * li])
            grads[2 * li + 1] = np.sum(d, axis=0, out=out[2 * li + 1])
            if li > 0:
                d = d @ ps[2 * li].T
                d[acts[li] <= 0] = 0  # ReLU gate


def softmax_xent(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy and its gradient w.r.t. the logits."""
    n = logits.shape[0]
    shift = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shift)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    loss = float(np.mean(np.log(s[:, 0]) - shift[rows, labels]))
    d = e / s
    d[rows, labels] -= 1
    d /= d.dtype.type(n)
    return loss, d


def mse(pred: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean squared error and its gradient w.r.t. the prediction."""
    diff = pred - target
    loss = float(np.mean(diff * diff))
    return loss, diff * diff.dtype.type(2.0 / diff.size)


# --------------------------------------------------------------------------
# training


def percentile(xs: np.ndarray, q: float) -> float:
    """q-th percentile as a plain float (JSON-serialisable)."""
    return float(np.percentile(xs, q))


def train(cfg: dict[str, Any]) -> dict[str, Any]:
    """Build data + model, run warm-up and the timed loop; return metrics + trace."""
    dtype = np.dtype(cfg["dtype"])
    if cfg["problem"] == "mnist-mlp":
        xs, ys = make_mnist_like(cfg["seed"], dtype)
        sizes = [MNIST_INPUT, cfg["hidden"], MNIST_CLASSES]
        loss_fn: Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray]] = softmax_xent
    else:
        xs, ys = make_image_fit(cfg["seed"], cfg["image_size"], cfg["fourier_features"], dtype)
        sizes = [xs.shape[1]] + [cfg["hidden"]] * cfg["layers"] + [3]
        loss_fn = mse

    consts = AdamConsts(cfg["lr"], dtype)
    init = init_params(sizes, cfg["seed"], dtype)
    opt: HostAdam | ResidentAdam
    opt = HostAdam(init, consts) if cfg["optimizer"] == "host" else ResidentAdam(init, consts)
    model = MLP(opt)
    # Batch indices come from their own stream so both arms see the same batches.
    batch_rng = np.random.default_rng([cfg["seed"], 4])
    n, bs = xs.shape[0], cfg["batch"]

    def step() -> float:
        idx = batch_rng.integers(0, n, size=bs)
        acts = model.forward(xs[idx])
        loss, d = loss_fn(acts[-1], ys[idx])
        model.backward(acts, d)
        opt.step()
        return loss

    for _ in range(cfg["warmup_steps"]):
        step()

    def evaluate() -> tuple[float, float | None]:
        """The whole data set's loss, and the PSNR of the fitted image (image-fit only)."""
        pred = model.forward(xs)[-1]
        loss, _ = loss_fn(pred, ys)
        if cfg["problem"] != "image-fit":
            return loss, None
        # PSNR of the displayable image: clip to [0, 1] as a viewer would, in float64.
        err = np.clip(pred.astype(np.float64), 0.0, 1.0) - ys.astype(np.float64)
        return loss, float(10.0 * math.log10(1.0 / max(np.mean(err * err), 1e-12)))

    # The quality trace (trace_every > 0): every trace_every steps, the training seconds so far, the step and the
    # whole data set's loss (and PSNR). Evaluating is not training: its time is left out of every clock.
    every = cfg["trace_every"]
    quality: dict[str, list[float]] = {"elapsed_s": [], "step": [], "loss": []}
    if cfg["problem"] == "image-fit" and every:
        quality["psnr_db"] = []
    ms = np.empty(cfg["steps"])
    t_start = time.perf_counter()
    prev = t_start
    evaluating_s = 0.0
    for i in range(cfg["steps"]):
        step()
        now = time.perf_counter()
        ms[i] = (now - prev) * 1e3
        prev = now
        if every and (i + 1) % every == 0:
            loss_now, psnr_now = evaluate()
            quality["elapsed_s"].append(round(now - t_start - evaluating_s, 6))
            quality["step"].append(i + 1)
            quality["loss"].append(float(loss_now))
            if psnr_now is not None:
                quality["psnr_db"].append(psnr_now)
            prev = time.perf_counter()
            evaluating_s += prev - now
    elapsed = time.perf_counter() - t_start - evaluating_s

    final_loss, psnr = evaluate()
    metrics: dict[str, Any] = {"train_elapsed_s": elapsed, "final_loss": final_loss}
    if psnr is not None:
        metrics["psnr_db"] = psnr
    metrics["step_ms_median"] = percentile(ms, 50)
    metrics["step_ms_p10"] = percentile(ms, 10)
    metrics["step_ms_p90"] = percentile(ms, 90)
    trace: dict[str, Any] = {"ms_per_iter": [round(float(t), 4) for t in ms]}
    if every:
        trace.update(quality)
    return {"metrics": metrics, "trace": trace}


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Temp file in the target directory + os.replace: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path, help="TOML config file")
    args = parser.parse_args(argv)

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        where = f"key '{exc.key}': " if exc.key is not None else ""
        msg = " ".join(f"{PROG}: {args.config}: {where}{exc.problem}".split())
        print(msg, file=sys.stderr)
        return 2

    env = {k: os.environ.get(f"GATEKIT_{k.upper()}", "-") for k in ("arm", "run")}
    print(
        f"{PROG}: arm={env['arm']} run={env['run']} "
        + " ".join(f"{k}={v}" for k, v in cfg.items())
        + f" blas_threads={os.environ.get('OPENBLAS_NUM_THREADS', 'default')}",
        file=sys.stderr,
        flush=True,
    )

    out = train(cfg)
    m = out["metrics"]
    result_path = os.environ.get("GATEKIT_RESULT")
    if result_path:
        write_json_atomic(
            Path(result_path), {"metrics": m, "config": dict(cfg), "trace": out["trace"]}
        )

    print(f"train elapsed: {m['train_elapsed_s']:.4f}s")
    print(f"final loss: {m['final_loss']:.6f}")
    if "psnr_db" in m:
        print(f"psnr: {m['psnr_db']:.2f} dB")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

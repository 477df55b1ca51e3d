"""A short commit range of the reference torch trainer with one regression injected, for a real `gate bisect`
(findings/bisect-torch-*/ holds the bisect it gave).

    python benchmarks/bisect_demo_repo.py DIR          # DIR/repo: 10 commits, GOOD the first, BAD the last
    cd DIR/repo && gate bisect $(git rev-list --max-parents=0 HEAD) HEAD --out ../bisect

The repository holds drivers/torch_trainer.py as trainer.py, an arm config of the MNIST-shaped MLP with the
device-resident fused Adam, and a gate file whose first arm is that config. Commit 6 ("check the gradients
for inf/nan every step") adds a norm per parameter, their total and a host sync (`if not torch.isfinite(...)`)
to every step, which a launch-bound GPU step pays for; it changes no number. The other commits touch docs and
comments only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINER = ROOT / "drivers" / "torch_trainer.py"

GATE = '''[gate]
id = "bisect-torch"
title = "Resident Adam MLP: which commit made training slower"
n = 3
primary = "train_elapsed_s"
direction = "lower"
expect_diff = ["optimizer"]

[threshold]
sigma_k = 2.0
floor_pct = 1.0

[rules]
sample_interval_s = 0.25

[driver]
name = "command"
argv = ["{python}", "trainer.py", "--config", "{arm_config}"]
timeout_s = 300
hash = ["trainer.py"]
busy_pattern = "trainer\\\\.py --config"

[arms.resident]
config = "configs/resident.toml"
[arms.host]
config = "configs/host.toml"
'''

ARM = '''# MNIST-shaped MLP 784->128->10, batch 64, eager launches: a launch-bound step on a large GPU.
problem = "mnist-mlp"
batch = 64
hidden = 128
steps = {steps}
warmup_steps = 200
readback_every = 100
precision = "fp32"
optimizer = "{optimizer}"
capture = "off"
device = "cuda"
on_unavailable = "fallback"
seed = 0
'''

READBACK = "        loss = self._forward_backward()\n        if self.scaler is not None:\n"
REGRESSION = ("        loss = self._forward_backward()\n"
              "        grads = [p.grad for p in self.problem.params if p.grad is not None]\n"
              "        if grads and not torch.isfinite(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))):\n"
              "            raise FloatingPointError(\"non-finite gradients\")  # fail fast instead of training on NaN\n"
              "        if self.scaler is not None:\n")


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "A. Trainer", "GIT_AUTHOR_EMAIL": "trainer@example.invalid",
           "GIT_COMMITTER_NAME": "A. Trainer", "GIT_COMMITTER_EMAIL": "trainer@example.invalid"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=env, capture_output=True)


def make(root: Path, steps: int) -> Path:
    repo = root / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    (repo / "configs").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    trainer = TRAINER.read_text()
    assert READBACK in trainer, "the trainer's readback line moved; update REGRESSION"
    (repo / "trainer.py").write_text(trainer)
    (repo / "gate.toml").write_text(GATE)
    (repo / "configs" / "resident.toml").write_text(ARM.format(steps=steps, optimizer="resident"))
    (repo / "configs" / "host.toml").write_text(ARM.format(steps=steps, optimizer="host"))
    (repo / ".gitignore").write_text("__pycache__/\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "The resident-Adam MLP trainer and its gate")
    edits = [
        ("README.md", "append", "# MLP trainer\n\nRun: python trainer.py --config configs/resident.toml\n",
         "README: how to run the trainer"),
        ("configs/resident.toml", "append", "# fused Adam on the device; only the loss is read back\n",
         "configs: say what the resident arm keeps on the device"),
        ("README.md", "append", "\nThe gate: gate run resident host\n", "README: the gate"),
        ("trainer.py", "replace", ("Run: python -m gatekit_drivers.torch_trainer", "Run: python trainer.py"),
         "trainer: the run line of the docstring names this file"),
        ("trainer.py", "replace", (READBACK, REGRESSION), "trainer: check the gradients for inf/nan every step"),
        ("README.md", "append", "\nA non-finite gradient stops the training.\n", "README: non-finite gradients"),
        ("configs/host.toml", "append", "# the host round trip the resident arm replaces\n",
         "configs: say what the host arm does"),
        ("README.md", "append", "\nLicense: MIT\n", "README: license"),
        (".gitignore", "append", "runs/\n", "gitignore: the runs folder"),
    ]
    for path, how, what, message in edits:
        target = repo / path
        if how == "append":
            target.write_text((target.read_text() if target.exists() else "") + what)
        else:
            old, new = what
            text = target.read_text()
            assert old in text, f"{path}: {old!r} not found"
            target.write_text(text.replace(old, new, 1))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", message)
    return repo


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--steps", type=int, default=10000)
    args = parser.parse_args()
    print(make(args.root.resolve(), args.steps))


if __name__ == "__main__":
    main()

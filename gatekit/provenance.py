"""What the series ran on: artifact hashes, git state, host and software fingerprint."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Mapping, Sequence

from gatekit.records import Record

SOFTWARE = ("gatekit", "click", "pandas", "scipy", "psutil", "tomlkit", "matplotlib", "numpy", "nvidia-ml-py")


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """sha256 of a file, read in chunks so multi-GB artifacts do not fill memory."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hash_artifacts(paths: Sequence[Path]) -> dict[str, str]:
    """{path: sha256}; a missing artifact hashes to 'missing' so a deletion shows as a change."""
    hashes = {}
    for path in paths:
        try:
            hashes[str(path)] = sha256_file(path)
        except FileNotFoundError:
            hashes[str(path)] = "missing"
    return hashes


def changed_artifacts(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """One message per artifact whose hash differs, naming the file and both hashes."""
    return [f"{path} changed: sha256 {before[path]} -> {after.get(path, 'missing')}"
            for path in before if before[path] != after.get(path, "missing")]


@dataclass(frozen=True, slots=True)
class GitState(Record):
    rev: str | None
    dirty: bool | None
    branch: str | None = None


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state(cwd: Path) -> GitState:
    """HEAD, whether the work tree is dirty, and the branch; all None outside a git repository."""
    rev = _git(cwd, "rev-parse", "HEAD")
    if rev is None:
        return GitState(None, None, None)
    status = _git(cwd, "status", "--porcelain", "--untracked-files=no")
    branch = _git(cwd, "rev-parse", "--abbrev-ref", "HEAD")
    return GitState(rev, bool(status) if status is not None else None, branch)


def git_root(cwd: Path) -> Path | None:
    top = _git(cwd, "rev-parse", "--show-toplevel")
    return Path(top) if top else None


def git_diff_stat(cwd: Path, rev_from: str, rev_to: str) -> str:
    """`git diff --stat` between two revisions: which files a HEAD move during the series touched."""
    return _git(cwd, "diff", "--stat", rev_from, rev_to) or ""


def host_fingerprint() -> dict[str, object]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }


def software_versions() -> dict[str, str]:
    versions = {}
    for name in SOFTWARE:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            continue
    return versions

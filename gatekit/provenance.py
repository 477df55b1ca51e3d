"""What the series ran on: artifact hashes, git state, host and software fingerprint."""

from __future__ import annotations

import hashlib
import os
import platform
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit.distribution import installed_version
from gatekit.records import Record
from gatekit.storage import file_kind

# Distributions whose versions provenance records; gatekit itself is recorded under "gatekit" (its import name)
# from its own distribution, whatever else of that name is installed.
SOFTWARE = ("click", "pandas", "scipy", "psutil", "tomlkit", "matplotlib", "numpy", "nvidia-ml-py")

# The only environment variables provenance records: the ones that change how a trainer performs.
# An allow-list, never a deny-list, so a token or password that happens to be set is never written down.
ENV_ALLOWLIST = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
    "CUBLAS_WORKSPACE_CONFIG", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_TF32_OVERRIDE",
    "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ENABLE_MPS_FALLBACK", "PYTORCH_MPS_HIGH_WATERMARK_RATIO",
    "XLA_FLAGS", "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "TF_CPP_MIN_LOG_LEVEL",
    "MTL_DEBUG_LAYER", "MTL_SHADER_VALIDATION", "METAL_DEVICE_WRAPPER_TYPE",
    "OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "RAYON_NUM_THREADS", "TOKIO_WORKER_THREADS",
    "PYTHONHASHSEED", "PYTHONOPTIMIZE", "RUSTFLAGS", "CARGO_PROFILE_RELEASE_LTO",
    "MALLOC_ARENA_MAX", "LD_PRELOAD",
)


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """sha256 of a file, read in chunks so multi-GB artifacts do not fill memory."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def not_a_file(path: Path) -> str | None:
    """None for a regular file (symlinks followed); else what the path is, in words ("not found", "a
    directory", "a character device", …), so an artifact that cannot be hashed is named for what it is."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "not found"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None if stat.S_ISREG(mode) else file_kind(mode)


def hash_artifacts(paths: Sequence[Path]) -> dict[str, str]:
    """{path: sha256}; a missing artifact hashes to 'missing' so a deletion shows as a change, and one that
    is no regular file (a directory, /dev/zero: never read, it could not end) to what it is."""
    hashes = {}
    for path in paths:
        what = not_a_file(path)
        try:
            hashes[str(path)] = "missing" if what == "not found" else what if what else sha256_file(path)
        except FileNotFoundError:
            hashes[str(path)] = "missing"
    return hashes


def file_identities(paths: Sequence[Path]) -> dict[str, tuple[int, ...] | None]:
    """{path: (device, inode, size, mtime_ns, ctime_ns)}, None where it cannot be stat'ed. A write, a rename
    or a replace changes it even when the bytes end up the same, and no one can set a ctime back, so an
    artifact swapped and restored between two hashings shows here (a stat each: cheap beside a hash)."""
    identities: dict[str, tuple[int, ...] | None] = {}
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            identities[str(path)] = None
            continue
        identities[str(path)] = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    return identities


def touched_artifacts(before: Mapping[str, tuple[int, ...] | None],
                      after: Mapping[str, tuple[int, ...] | None]) -> list[str]:
    """The paths whose identity (file_identities) differs between two snapshots."""
    return [path for path in before if before[path] != after.get(path)]


def hash_files(paths: Mapping[str, Path]) -> dict[str, str]:
    """hash_artifacts keyed by the given names (a run folder's file names, which no machine changes)."""
    hashes = hash_artifacts(list(paths.values()))
    return {name: hashes[str(path)] for name, path in paths.items()}


def hash_artifacts_timed(paths: Sequence[Path]) -> tuple[dict[str, str], float]:
    """hash_artifacts and how long it took (monotonic seconds); always outside a run's timed window."""
    began = time.perf_counter()
    hashes = hash_artifacts(paths)
    return hashes, time.perf_counter() - began


def artifact_bytes(paths: Sequence[Path]) -> int:
    """Total size of the hashed artifacts (missing ones count 0)."""
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total


def changed_artifacts(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """One message per artifact whose hash differs, naming the file and both hashes."""
    return [f"{path} changed: sha256 {before[path]} -> {after.get(path, 'missing')}"
            for path in before if before[path] != after.get(path, "missing")]


def changed_backend(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """One message per field of the backend's provenance (e.g. the GPU's VBIOS, ECC or locked clocks) that
    differs between series start and end: the series ran on another set-up than it began on."""
    return [f"the {before.get('name', 'backend')} backend's {key} changed during the series: "
            f"{before[key]!r} -> {after[key]!r}"
            for key in before if key in after and before[key] != after[key]]


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


def allowed_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment variables that are set (ENV_ALLOWLIST); nothing else, ever."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in ENV_ALLOWLIST if name in environ}


REDACTED_PREFIX = "<redacted sha256:"


def redacted_env(env: Mapping[str, str], record: Sequence[str] = ()) -> dict[str, str]:
    """`env` as written to journals and findings: the variables in `record` (gate.record_env) verbatim,
    every other value as `<redacted sha256:…>` (its first 12 hex digits), so a token set for an arm never
    lands on disk, yet a changed value still shows as a changed hash."""
    return {name: value if name in record else f"{REDACTED_PREFIX}{sha256_bytes(value.encode())[:12]}>"
            for name, value in env.items()}


def host_fingerprint() -> dict[str, object]:
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "env": allowed_environment(),
    }


def software_versions() -> dict[str, str]:
    versions = {"gatekit": installed_version()}
    for name in SOFTWARE:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            continue
    return versions

"""Which tests start real processes: a pytest plugin that records every subprocess.Popen a test makes.

    python benchmarks/process_census.py [pytest args]     e.g. -q -n 2 --dist loadfile -m "not alone"

runs pytest with this file as a plugin (`-p process_census`, so xdist workers load it too), then prints how
many test functions started a process, by kind: a trainer (started with the trainer contract's GATEKIT_RUN
in its environment, or a command naming a trainer script), a `gate` process (`python -m gatekit.cli`), git
(gatekit records the repository's HEAD in every series), or anything else (chromium, a helper `python -c`,
a CPU burner); then each function that starts a trainer or a `gate` process. A test counts where it makes a
Popen in its setup, call or teardown (a module-scoped fixture counts for the test that first needs it); its
parametrizations count as one function. Processes made without subprocess (os.system, os.fork) are not
seen, nor those a trainer or a `gate` process starts itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest

LOG_ENV = "GATEKIT_PROCESS_CENSUS"
TRAINER_MARKS = ("fake_trainer.py", "numpy_trainer", "torch_trainer", "sleep_trainer.sh", "trainer.py")
_current: list[str] = []


def kind_of(argv: Any, env: Any = None) -> str:
    words = [str(w) for w in argv] if isinstance(argv, (list, tuple)) else [str(argv)]
    text = " ".join(words)
    if "gatekit.cli" in text or (words and Path(words[0]).name == "gate"):
        return "gate"
    # a driver starts its trainer with the contract's environment (GATEKIT_RUN), whatever the command
    if (isinstance(env, dict) and "GATEKIT_RUN" in env) or any(mark in text for mark in TRAINER_MARKS):
        return "trainer"
    if words and Path(words[0]).name == "git":
        return "git"
    return "other"


def _record(argv: Any, env: Any) -> None:
    path = os.environ.get(LOG_ENV)
    if path and _current:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"test": _current[-1], "kind": kind_of(argv, env)}) + "\n")


_original_init = subprocess.Popen.__init__


def _counting_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
    _record(args, kwargs.get("env"))
    _original_init(self, args, *rest, **kwargs)


subprocess.Popen.__init__ = _counting_init  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current.append(item.nodeid)
    try:
        yield
    finally:
        _current.pop()


def summary(log: Path) -> str:
    """Counts by kind, then each test function that starts a trainer or a `gate` process, by file."""
    by_function: dict[str, set[str]] = defaultdict(set)
    for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else []:
        entry = json.loads(line)
        by_function[entry["test"].split("[")[0]].add(entry["kind"])

    def files(names: list[str]) -> int:
        return len({name.split("::")[0] for name in names})

    lines = [f"test functions that start a process: {len(by_function)} in {files(list(by_function))} files"]
    for kind in ("trainer", "gate", "git", "other"):
        hit = [name for name, kinds in by_function.items() if kind in kinds]
        lines.append(f"  {kind}: {len(hit)} functions in {files(hit)} files")
    real = sorted(name for name, kinds in by_function.items() if kinds & {"trainer", "gate"})
    lines.append(f"a trainer or gate process: {len(real)} functions in {files(real)} files")
    lines += [f"  {name}  [{', '.join(sorted(by_function[name] & {'trainer', 'gate'}))}]" for name in real]
    return "\n".join(lines)


def main(args: list[str]) -> int:
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "popen.jsonl"
        env = {**os.environ, LOG_ENV: str(log),
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "process_census", "-p", "no:cacheprovider",
                               *args], env=env)
        print(summary(log))
        return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

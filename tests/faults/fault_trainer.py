"""A trainer that misbehaves on request, for the fault-injection suite (follows the trainer contract).

Its arm config (TOML) says what each run does; `<run>` is GATEKIT_RUN, e.g. off-r2:
  flags = {...}                 echoed as the effective config
  elapsed = {off-r1 = 10.0}     train_elapsed_s per run (or default_elapsed); default_psnr for psnr_db
  log = "path"                  append "start <run>" / "end <run>" (the order the trainer saw)
  state = "dir"                 pid files (<run>.pid, <run>.child.pid, <run>.escaped.pid) and once-markers
  hold = ["off-r2"]             first attempt only: wait (up to 600 s) until <state>/release exists
  child = ["off-r2"]            spawn a grandchild in the trainer's process group (sleeps 600 s)
  escape = ["off-r2"]           spawn a grandchild that leaves the group with setsid (sleeps 600 s)
  ignore_term = true            the trainer and its grandchildren ignore SIGTERM (the trainer notes each
                                one it gets in <state>/<run>.term)
  result_text = {on-r1 = "..."} write this text as the result file instead of a proper one
  result_kind = {on-r1 = "fifo" | "dir" | "huge" | "devzero"}  make the result path something hostile
  stdout = "text"               print this on stdout (and stderr) in every run
  argv_log = "path"             append this process's argv as one JSON line
  env_probe = "path"            append which of the listed env names were set: env_names = [...]
  fill = ["on-r2"]              first attempt only: after the result, fill GATEKIT_RUN_DIR's disk
  journal_text = {on-r2 = "..."}  append this text to the series' journal ($GATEKIT_RUN_DIR/../journal.jsonl):
                                code under test writing into gatekit's folder
  append_to = {on-r2 = ["predecision.toml", "..."]}  append the text to that file of the series folder
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

SLEEPER = "import signal, time, sys\nif sys.argv[1] == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"


def first_attempt(state: Path, what: str, run: str) -> bool:
    marker = state / f"{run}.{what}.once"
    if marker.exists():
        return False
    marker.touch()
    return True


def spawn(state: Path, run: str, kind: str, ignore_term: bool) -> None:
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, "1" if ignore_term else "0"],
                            start_new_session=(kind == "escaped"))
    (state / f"{run}.{kind}.pid").write_text(str(proc.pid))


def main() -> int:
    config_path = sys.argv[sys.argv.index("--config") + 1]
    with open(config_path, "rb") as handle:
        config = tomllib.load(handle)
    run, result_path = os.environ["GATEKIT_RUN"], Path(os.environ["GATEKIT_RESULT"])
    state = Path(config.get("state", "."))
    if config.get("ignore_term"):
        signal.signal(signal.SIGTERM, lambda signum, frame: (state / f"{run}.term").touch())
    if config.get("argv_log"):
        with open(config["argv_log"], "a") as handle:
            handle.write(json.dumps({"argv": sys.argv, "cwd": os.getcwd()}) + "\n")
    if config.get("env_probe"):
        seen = {name: name in os.environ for name in config.get("env_names", [])}
        with open(config["env_probe"], "a") as handle:
            handle.write(json.dumps(seen) + "\n")
    log = config.get("log")
    if log:
        with open(log, "a") as handle:
            handle.write(f"start {run} {os.environ['GATEKIT_ARM']}\n")
    (state / f"{run}.pid").write_text(str(os.getpid()))
    if run in config.get("child", []):
        spawn(state, run, "child", bool(config.get("ignore_term")))
    if run in config.get("escape", []):
        spawn(state, run, "escaped", bool(config.get("ignore_term")))
    if config.get("stdout"):
        print(config["stdout"])
        print(config["stdout"], file=sys.stderr)
    if run in config.get("hold", []) and first_attempt(state, "hold", run):
        (state / f"{run}.holding").touch()
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (state / "release").exists():
            time.sleep(0.05)
    time.sleep(config.get("sleep_s", 0.02))

    kind = config.get("result_kind", {}).get(run)
    if kind == "fifo":
        os.mkfifo(result_path)
    elif kind == "dir":
        result_path.mkdir()
    elif kind == "huge":  # sparse: 65 MiB on paper, no disk used
        with open(result_path, "wb") as handle:
            handle.truncate(65 << 20)
    elif kind == "devzero":
        result_path.symlink_to("/dev/zero")
    elif run in config.get("result_text", {}):
        result_path.write_text(config["result_text"][run])
    else:
        elapsed = config.get("elapsed", {}).get(run, config.get("default_elapsed", 1.0))
        metrics = {"train_elapsed_s": elapsed, "psnr_db": config.get("default_psnr", 30.0)}
        result_path.write_text(json.dumps({"metrics": metrics, "config": config.get("flags", {})}))
    if run in config.get("journal_text", {}):
        with open(Path(os.environ["GATEKIT_RUN_DIR"]).parent / "journal.jsonl", "a") as handle:
            handle.write(config["journal_text"][run])
    if run in config.get("append_to", {}):
        name, text = config["append_to"][run]
        with open(Path(os.environ["GATEKIT_RUN_DIR"]).parent / name, "a") as handle:
            handle.write(text)
    if run in config.get("fill", []) and first_attempt(state, "fill", run):
        block = b"\0" * (1 << 16)
        try:
            with open(Path(os.environ["GATEKIT_RUN_DIR"]) / "filler.bin", "wb") as handle:
                while True:
                    handle.write(block)
                    handle.flush()
        except OSError:
            pass  # the disk is full now: exactly what the test wants gatekit to meet next
    if log:
        with open(log, "a") as handle:
            handle.write(f"end {run}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

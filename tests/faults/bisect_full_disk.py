"""`gate bisect` in this process with a full disk under one probe's runs folder, then `--resume` once space is
freed; run it in a private mount namespace (`unshare -r -m`), where it may mount a tmpfs.

    python bisect_full_disk.py SHA12 REPORT_JSON gate-arguments...

Before the first probe of the commit SHA12 starts, a 4 KiB tmpfs, filled, is mounted on that probe's runs folder:
its gate process meets ENOSPC writing its own files (a real file-system error, in a real gate process). When the
bisect returns, the tmpfs is unmounted (the space is freed) and `gate bisect --resume OUT` runs. REPORT_JSON
gets both exit codes and the folder that was full.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gatekit.engines as engines
from gatekit.cli import main


def gate(*args: str) -> int:
    try:
        main.main(list(args), prog_name="gate")
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def run() -> None:
    target, report, *args = sys.argv[1:]
    out = args[args.index("--out") + 1]
    full: list[Path] = []
    start_gate = engines.start_gate

    def start_on_a_full_disk(task: engines.GateTask, pinning: engines.Pinning):  # type: ignore[no-untyped-def]
        if target in task.key and not full:
            task.runs_dir.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(task.runs_dir)], check=True)
            (task.runs_dir / "filler").write_bytes(b"\0" * 4096)  # every page of it taken
            full.append(task.runs_dir)
        return start_gate(task, pinning)

    engines.start_gate = start_on_a_full_disk
    first = gate(*args)
    for path in full:
        subprocess.run(["umount", str(path)], check=True)  # the space is freed
    engines.start_gate = start_gate
    second = gate("bisect", "--resume", out)
    Path(report).write_text(json.dumps({"first": first, "second": second, "full": [str(p) for p in full]}))


if __name__ == "__main__":
    run()

"""`python -m gatekit`: the `gate` command line, for a Python without the console script on PATH."""

from __future__ import annotations

from gatekit.cli import main

if __name__ == "__main__":
    main(prog_name="gate")

"""The one user-facing error family. Anything else that escapes is a bug and shows a traceback."""

from __future__ import annotations

import errno


class GatekitError(Exception):
    """An error a user can act on; its message names the file, the key and what to do."""

    exit_code = 2


class ConfigError(GatekitError):
    """A gate file, arm config or option is wrong; nothing ran."""


class PreflightError(GatekitError):
    """A preflight check failed; nothing ran."""


class MachineNotReady(PreflightError):
    """Every check the preflight failed is the machine's state (a trainer already running, the load, a battery,
    a GPU in use): nothing ran and nothing is wrong with the gate. Exit 4, the code of the machine's faults
    (as a full disk), so a bisect probe or campaign gate refused so is left unfinished and run again on resume,
    never recorded as a property of the commit or gate."""

    exit_code = 4


class DriverError(GatekitError):
    """A driver plugin is missing, malformed, or could not start the trainer."""


class SeriesError(GatekitError):
    """A series directory cannot be used (locked, finished, tampered with)."""


class ProvenanceError(GatekitError):
    """An artifact changed during a series: the series is invalid."""

    exit_code = 3


class CalibrationError(GatekitError):
    """A calibration run failed: the calibration is not usable."""

    exit_code = 3


class FindingError(GatekitError):
    """A finding file cannot be read (unknown schema, malformed)."""


class PlatformError(GatekitError):
    """This platform lacks what the command needs (file locks, fork: gates run on Linux and macOS); nothing
    ran."""


class SeriesInterrupted(GatekitError):
    """The series was interrupted by a signal; it can be resumed."""

    exit_code = 130


class BuildError(GatekitError):
    """A side of `gate compare` could not be built (its --build exited 125 or failed): nothing can be compared,
    as an invalid series; names the commit and the build's log."""

    exit_code = 3


class OutputError(GatekitError):
    """Runs happened, then a file (journal event, finding, DONE) could not be written; every finished run is
    journaled and the series resumes with `gate run --resume DIR`."""

    exit_code = 4


# The errors a write gets from the machine rather than from gatekit: a full disk or quota, a read-only,
# unwritable or failing file system, a file grown past its limit.
MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO,
                            errno.EFBIG})


def write_failed(exc: OSError, then: str) -> OutputError:
    """A write of gatekit's own files that failed for a reason of the machine — a full disk, a read-only or
    unwritable folder, an I/O error — as the exit-4 error: the file, why, and `then` (what was kept and the
    command that continues). Never a property of what was being measured: what ran is kept and resumes."""
    return OutputError(f"{exc.filename or 'a file'}: cannot be written: {exc.strerror or exc}; {then}")


class VerificationError(GatekitError):
    """A series' evidence does not verify (a broken hash chain, a record that differs from its journal
    event, a finding that differs from its recomputation, a bad signature); names the file and line."""

    exit_code = 3


class RunFileError(GatekitError):
    """A file a trainer left in a run folder cannot be read back safely (not a regular file, a link out of its
    folder, too large, too deeply nested, too many values, not JSON or TOML); names the file. Its readers
    turn it into a failed run or a note; one that reaches the user means the evidence is unusable."""

    exit_code = 3


# Exit codes that are not an error's own: a --fail-on condition met, and an invalid finding or series (the
# same code as a verification failure).
EXIT_FAIL_ON = 1
EXIT_INVALID = 3

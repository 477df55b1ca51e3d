"""The only places that touch disk for records: atomic writes and the fsynced append-only journal."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping, TypeVar


from gatekit.errors import ConfigError, GatekitError, OutputError, PlatformError, SeriesError, write_failed
from gatekit.records import (JOURNAL_SCHEMA, SCHEMA_KEY, UNCHAINED_JOURNAL, DuplicateKeyError, Event, journal_schema,
                             loads_json, schema_problem, upgrade)
from gatekit.signals import signals_deferred


# Open flags and calls Windows' os lacks, feature-tested once: where a flag is missing a file is opened
# without it, and what it guarded is checked another way (a link by lstat before the open; Windows has no
# FIFO to block on, and Python's descriptors are never inherited there). Linux and macOS keep every flag.
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, rename: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates the file owner-only; give it the mode any new file gets (0666 less the umask)
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o666 & ~current_umask())
        else:  # Windows: a mode there only says read-only or not, set by name
            os.chmod(tmp, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:
            exc.filename = str(path)  # a failed write() names no file; the error message should
        raise
    _fsync_dir(path.parent)


def current_umask() -> int:
    """The process umask (read by setting it and putting it back), for files made with an explicit mode."""
    current = os.umask(0)
    os.umask(current)
    return current


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _fsync_dir(folder: Path) -> None:
    # The rename itself is durable only once the directory entry is flushed. A folder can be opened for that
    # only where the OS has O_DIRECTORY (POSIX); Windows opens no folder as a file and flushes no entry.
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_output(path: Path, text: str, what: str) -> None:
    """Atomically write a user-facing output file, turning an OS failure into a clear error (exit 4: a failure
    to write; the file is the old one or none, never half of the new one)."""
    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the {what}: {exc.strerror or exc}") from None


# atomic_write_bytes' temp files: `.<name>.<8 random characters>.tmp` (tempfile.mkstemp's pattern).
_TEMP_FILE = re.compile(r"\..+\.[A-Za-z0-9_]{8}\.tmp")
STALE_TEMP_S = 60.0


def remove_stale_temp_files(folder: Path) -> list[Path]:
    """Remove the temp files of atomic writes that a killed gate left in `folder`: our own naming pattern,
    last written before this process started and over a minute ago (a live writer's temp file is seconds
    old). Returns what it removed; a folder it cannot list or a file it cannot remove is left alone."""
    import psutil  # here: the gate-file schema imports this module, and `gate --help` need not load psutil

    began = psutil.Process().create_time()  # wall-clock timestamps on both sides: a comparison, no duration
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        if not _TEMP_FILE.fullmatch(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_mtime < began - STALE_TEMP_S:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def open_own_file(path: Path, flags: int, mode: int = 0o666) -> int:
    """A file descriptor of `path`, a file gatekit owns (a lock, a journal), opened without following a
    symbolic link and only when it is a regular file: a link planted in its place would make gatekit
    truncate or append to whatever it points at, a FIFO would block it. Raises OSError, whose strerror
    says which of these it was (callers name the file and what they wanted of it)."""
    try:
        if not O_NOFOLLOW and path.is_symlink():  # no flag to refuse it with (Windows): refused by lstat
            raise OSError(errno.ELOOP, "is a symbolic link", str(path))
        fd = os.open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise OSError(errno.ELOOP, "is a symbolic link; gatekit opens the files it owns only as regular "
                          "files, never through a link (remove it)", str(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "is not a regular file; gatekit opens the files it owns only as regular "
                      "files (remove it)", str(path))
    return fd


def read_own_file(path: Path) -> bytes:
    """The bytes of a file gatekit owns (a journal), opened as `open_own_file` opens it: a link or a FIFO
    in its place (one to /dev/zero would never end) is an OSError; FileNotFoundError when there is none."""
    with os.fdopen(open_own_file(path, os.O_RDONLY), "rb") as handle:
        return handle.read()


def require_file_locks(path: Path) -> None:
    """A PlatformError naming `path` where this platform has no file locks (fcntl: Linux and macOS have it)."""
    try:
        import fcntl  # noqa: F401
    except ModuleNotFoundError:
        raise PlatformError(f"{path}: cannot be locked: this platform has no fcntl (file locks); gates run on "
                            "Linux and macOS (docs/install.md lists what runs where)") from None


def try_lock(handle: IO[Any], path: Path) -> bool:
    """Take an exclusive lock (flock) on the open file `path` without waiting: False while another process
    holds it. The lock goes with the file's closing or the process's end (a killed gate holds none).

    flock is in fcntl, on Linux and macOS, where gates run; the commands that start no trainer lock nothing,
    so only gate run, calibrate, bisect and campaign need it: elsewhere (Windows) a PlatformError says so."""
    require_file_locks(path)
    import fcntl

    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock(handle: IO[Any]) -> None:
    """Give up a lock `try_lock` took, the file staying open."""
    import fcntl

    fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def pid_lock(path: Path, busy: Callable[[str], GatekitError]) -> Iterator[None]:
    """Hold an exclusive lock (`try_lock`) on `path`, created if missing, with this process's pid written in
    it. While another process holds it, raises `busy(what the holder wrote)`; a path that cannot be a lock
    (a symbolic link, not a regular file) is a SeriesError naming it, one that cannot be written (a full,
    read-only or unwritable folder) an OutputError (exit 4: the command runs again once it can)."""
    again = "nothing was lost — free space or fix permissions, then run the command again"
    try:
        fd = open_own_file(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EINVAL):  # a link or a FIFO in its place: not the machine's fault
            raise SeriesError(f"{path}: cannot be used as a lock: {exc.strerror or exc}") from None
        exc.filename = str(path)
        raise write_failed(exc, again) from None
    with os.fdopen(fd, "r+") as handle:
        if not try_lock(handle, path):
            raise busy(handle.read(200).strip() or "unknown")
        try:
            os.ftruncate(handle.fileno(), 0)  # unbuffered: a failed write leaves nothing for close() to retry
            os.pwrite(handle.fileno(), f"pid {os.getpid()}".encode(), 0)
        except OSError as exc:  # a full disk: the lock is held all the same, but nothing may run on it
            exc.filename = str(path)
            raise write_failed(exc, again) from None
        yield


@dataclass(frozen=True, slots=True)
class RunFolder:
    """The files of one run's folder, `<series>/<label>/` (DESIGN "Series directory")."""

    path: Path

    @property
    def record(self) -> Path:
        """The run's record, as its `run_end` event journaled it (verify compares the two)."""
        return self.path / "record.json"

    @property
    def samples(self) -> Path:
        """The in-window sampler's rows."""
        return self.path / "samples.csv"

    @property
    def stdout(self) -> Path:
        return self.path / "stdout.log"

    @property
    def stderr(self) -> Path:
        return self.path / "stderr.log"

    @property
    def result(self) -> Path:
        """GATEKIT_RESULT: the file the trainer may write its metrics to."""
        return self.path / "result"

    @property
    def evidence(self) -> dict[str, Path]:
        """The files the run's record was made from, by name: hashed into its `run_end` event when it ends and
        checked by `gate verify` (the report draws load timelines from samples.csv, quotes the logs)."""
        return {path.name: path for path in (self.samples, self.stdout, self.stderr, self.result)}


@dataclass(frozen=True, slots=True)
class SeriesLayout:
    """The one home of a series folder's file names, `<runs>/<series-id>/`: the predecision, the journal,
    `DONE` and a folder per run; a calibration's folder is laid out the same, without a predecision."""

    path: Path

    @property
    def predecision(self) -> Path:
        """The preregistered rules, written and hashed before the first run (the journal's anchor)."""
        return self.path / "predecision.toml"

    @property
    def journal(self) -> Path:
        return self.path / "journal.jsonl"

    @property
    def done(self) -> Path:
        """A finished series: its decision, then its finding's path."""
        return self.path / "DONE"

    def run(self, label: str) -> RunFolder:
        return RunFolder(self.path / label)

    def cut_off(self, label: str, attempt: int) -> Path:
        """Where the folder of a run cut off mid-way is kept, aside, when the run runs again."""
        return self.path / f"{label}.cut-{attempt}"

    @staticmethod
    def lock(runs_dir: Path) -> Path:
        """The lock in a runs folder, held by the gate process that owns the series there."""
        return runs_dir / ".gatekit.lock"


EventT = TypeVar("EventT", bound=Event)
LEGACY_JOURNAL_WARNING = "journal written before hash chains: not tamper-evident"
# The chain's anchor when a journal has no predecision file before it (a calibration): sha256 of no bytes.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def line_sha256(line: bytes) -> str:
    """The hash chain's link: sha256 (hex) of a journal line's exact bytes, without its newline."""
    return hashlib.sha256(line).hexdigest()


class Journal:
    """`journal.jsonl`: one JSON event a line, flushed and fsynced before the call returns.

    An event is written whole or not at all: signals are held back while it is written, a failed write is
    truncated away, and a torn last line (no newline at the end of the file) is dropped before every event
    is appended, so it can never end up in the middle of the journal: one torn by a kill, or a partial line
    another process appended (the code under test writing into gatekit's folder; a complete one breaks the
    chain, and the gate that wrote the journal verifies it before it reports success).

    The lines form a hash chain: every event carries `prev`, the sha256 of the line before it; the first
    carries the sha256 of `genesis` (the predecision file, written before it) or of no bytes when there is
    none, and names the journal's format (`schema`, see `gatekit.records`). A journal of an older format
    is continued in it: one without a chain (`legacy`) without one.
    """

    def __init__(self, path: Path, genesis: Path | None = None, *, resume: str | None = None) -> None:
        self.path = path
        self.genesis = genesis
        self.resume = resume or f"gate run --resume {path.parent}"  # what continues after a failed write
        self._loaded = False
        self._head: str | None = None
        self._schema: object = JOURNAL_SCHEMA  # of a journal with no line yet: the one its first line will name
        self._empty = True

    @property
    def head(self) -> str | None:
        """sha256 of the last complete line (None: empty, or a legacy journal without a chain)."""
        self._ensure_loaded()
        return self._head

    @property
    def legacy(self) -> bool:
        """Whether the journal was written before hash chains (gatekit.journal/1: its first event has no `prev`)."""
        return self.schema == UNCHAINED_JOURNAL

    @property
    def schema(self) -> object:
        """The journal's format, named by its first line (`records.journal_schema`)."""
        self._ensure_loaded()
        return self._schema

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            try:
                content = read_own_file(self.path)
            except FileNotFoundError:
                content = b""
            except OSError as exc:
                raise SeriesError(f"{self.path}: cannot be read: {exc.strerror or exc}") from None
            self._load(content[:content.rfind(b"\n") + 1])  # a torn last line is dropped by the next append

    def _load(self, content: bytes) -> None:
        """Chain state of the complete lines in `content`."""
        lines = [line for line in content.split(b"\n") if line.strip()]
        self._head, self._schema = None, JOURNAL_SCHEMA
        if lines:
            try:
                first = loads_json(lines[0])
            except ValueError:
                first = None  # damaged, not legacy: the chain goes on and verification names the line
            self._schema = journal_schema(first)
            self._head = None if self._schema == UNCHAINED_JOURNAL else line_sha256(lines[-1])
        self._empty = not lines
        self._loaded = True

    def _anchor(self) -> str:
        if self.genesis is not None and self.genesis.is_file():
            return hashlib.sha256(self.genesis.read_bytes()).hexdigest()
        return EMPTY_SHA256

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        """Write one event; returns it as a reader of the journal will see it (keys sorted, plain JSON)."""
        with signals_deferred():
            size = 0
            try:
                fd = open_own_file(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise self._failed(event, exc) from None
            try:
                size = os.lseek(fd, 0, os.SEEK_END)
                if size:  # not only at the first append: another process may have appended since the last
                    size = _drop_torn_tail(fd, size)
                if not self._loaded:
                    self._load(_read_all(fd, size))
                chain = {} if self.legacy else {"prev": self._head or self._anchor()}
                if self._empty:
                    chain[SCHEMA_KEY] = JOURNAL_SCHEMA
                text = json.dumps({"event": event, **fields, **chain}, sort_keys=True, allow_nan=False)
                data = (text + "\n").encode("utf-8")
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError as exc:
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass  # the reader ignores a torn last line; the next append drops it
                raise self._failed(event, exc) from None
            finally:
                os.close(fd)
            self._empty = False
            if not self.legacy:
                self._head = line_sha256(data[:-1])
        return loads_json(text)

    def line_hashes(self) -> set[str]:
        """The sha256 of every complete line: each chain head this journal has had."""
        return {line_sha256(line) for _, line, _ in self.lines()}

    def record(self, event: EventT) -> EventT:
        """Write a typed event; returns it as a reader of the journal will see it."""
        return type(event).from_dict(self.append(event.KIND, **event.to_dict()))

    def _failed(self, event: str, exc: OSError) -> OutputError:
        # a journal exists only inside a series, so a failed event is an output failure (exit 4), not usage
        return OutputError(f"{self.path}: cannot record the '{event}' event: {exc.strerror or exc}; every "
                           "earlier event is intact — free space or fix permissions, then continue with: "
                           f"{self.resume}")

    def events(self) -> Iterator[Mapping[str, Any]]:
        """Every complete event, upgraded to the current format (`records.upgrade`); a torn last line (killed
        mid-write) is ignored, anything else is an error. Its chain is `gate verify`'s to check, on `lines`."""
        for _, _, event in self.entries():
            yield event

    def entries(self) -> Iterator[tuple[int, bytes, Any]]:
        """(line number, the line's exact bytes, its event upgraded to the current format) of every event;
        a journal of a format this gatekit does not know is a SeriesError naming it."""
        schema: object = None
        for number, line, event in self.lines():
            if schema is None:
                schema = journal_schema(event)
                problem = schema_problem(schema, JOURNAL_SCHEMA)
                if problem:
                    raise SeriesError(f"{self.path}: line {number}: {problem}")
            upgraded = upgrade(event, schema) if isinstance(event, Mapping) else event
            yield number, line, upgraded

    def lines(self) -> Iterator[tuple[int, bytes, Any]]:
        """(line number, the line's exact bytes, its event) of every event, as `events` reads them."""
        try:
            content = read_own_file(self.path)
        except FileNotFoundError:
            raise SeriesError(f"{self.path}: no journal here; is this a series directory?") from None
        except OSError as exc:
            raise SeriesError(f"{self.path}: cannot be read: {exc.strerror or exc}") from None
        lines = content.split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield number, line, loads_json(line.decode("utf-8"))
            except DuplicateKeyError as exc:  # whole, not torn: one reader would see another event than the next
                raise SeriesError(f"{self.path}: line {number}: {exc}") from None
            except (json.JSONDecodeError, UnicodeDecodeError):
                if number == len(lines):  # the last line lacks its newline: a write was cut off
                    return
                raise SeriesError(f"{self.path}: line {number} is not a JSON event; the journal is damaged") from None


def _drop_torn_tail(fd: int, size: int) -> int:
    """Cut a last line without its newline (a write killed mid-way, or another process's partial line);
    returns the new size."""
    if os.pread(fd, 1, size - 1) == b"\n":
        return size
    content = os.pread(fd, size, 0)
    keep = content.rfind(b"\n") + 1
    os.ftruncate(fd, keep)
    return keep


def _read_all(fd: int, size: int) -> bytes:
    chunks, offset = [], 0
    while offset < size:
        chunk = os.pread(fd, size - offset, offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


MAX_INPUT_BYTES = 64 << 20  # a gate file, a CSV or a tool's output is far smaller; a larger one is not read at all


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words ("a FIFO", "a character device", …)."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def size_text(limit: int) -> str:
    """A byte limit in words: MiB, KiB or bytes."""
    if limit >= 1 << 20:
        return f"{limit >> 20} MiB"
    return f"{limit >> 10} KiB" if limit >= 1 << 10 else f"{limit} bytes"


def read_input(path: Path, expected: str, limit: int | None = None, *, private: bool = False) -> bytes:
    """An input file's bytes (a gate file, a CSV, another tool's output, a key). Only a regular file is read
    (symbolic links followed), opened without blocking and checked after opening, so a FIFO cannot hang the
    reader nor a device (/dev/zero) flood it; nothing past `limit` is read. `private`: a secret (a signing
    key) that group or others may access is refused, before a byte of it is read. A missing, folder,
    unreadable, too large or shared path is one ConfigError line naming it and what was `expected` there
    (e.g. "a TOML file"); `limit` defaults to MAX_INPUT_BYTES."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | O_NONBLOCK | O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected {expected}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{path}: is {file_kind(info.st_mode)}, expected {expected}")
        if private and info.st_mode & 0o077:
            raise ConfigError(f"{path}: {expected} that group or others can access (mode "
                              f"{stat.S_IMODE(info.st_mode):04o}) is not used; make it private: chmod 600 {path}")
        try:
            data = handle.read(limit + 1) if info.st_size <= limit else b""
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if info.st_size > limit or len(data) > limit:
        raise ConfigError(f"{path}: is larger than {size_text(limit)}, expected {expected}")
    return data

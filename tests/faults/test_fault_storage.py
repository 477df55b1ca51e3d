"""A findings folder that cannot be written, and a runs folder whose disk fills up mid-series.

Real file-system errors: a read-only or 4 KiB tmpfs mounted in a private mount namespace (`unshare -r -m`,
no root needed on the host). The journal and every finished run survive; a resume writes the finding.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from gatekit.storage import Journal, pid_lock
from gatekit.errors import OutputError, SeriesError
from tests.conftest import gate_invoke
from tests.faults.faultkit import (assert_journal_consistent, fault_gate, in_mount_namespace,
                                   mount_namespace_available)

SIX = ["off-r1", "on-r1", "off-r2", "on-r2", "off-r3", "on-r3"]
needs_namespace = pytest.mark.skipif(not mount_namespace_available(),
                                     reason="needs `unshare -r -m` to mount a tmpfs (user namespaces disabled)")


def _check_failed_finding_write(g, code: int, stderr: str, why: str) -> Path:
    assert code == 4, stderr  # runs happened, then the finding could not be written: OutputError
    (line,) = [line for line in stderr.splitlines() if line.startswith("gate: error: ")]
    series = g.series()
    assert str(g.root / "findings") in line and why in line
    assert "The series itself is complete and journaled" in line and f"gate run --resume {series}" in line
    journal = assert_journal_consistent(series)
    assert [e["record"]["label"] for e in journal if e["event"] == "run_end"] == SIX
    assert journal[-1]["event"] == "series_end" and not (series / "DONE").exists()
    return series


def _resume_writes_the_finding(g, series: Path) -> None:
    done = gate_invoke("run", "--resume", str(series), cwd=g.root)
    assert done.returncode == 0, done.stderr
    assert g.order() == SIX  # no run was repeated
    journal = assert_journal_consistent(series)
    assert [e["event"] for e in journal].count("series_end") == 1
    assert (series / "DONE").exists() and g.finding()["verdict"]["decision"] == "adopted"
    analyzed = gate_invoke("analyze", str(series), "--json", cwd=g.root)
    assert json.loads(analyzed.stdout) == g.finding()


@needs_namespace
@pytest.mark.parametrize("mount, why", [("-o ro", "Read-only file system"),
                                        ("-o size=4k", "No space left on device")], ids=["read-only", "full"])
def test_findings_folder_unwritable_or_full(tmp_path: Path, mount: str, why: str) -> None:
    g = fault_gate(tmp_path / "g")
    (g.root / "findings").mkdir()
    done = in_mount_namespace(
        f"mount -t tmpfs {mount} tmpfs findings && cd . && $GATE run off on >out.txt 2>err.txt; echo $? >rc.txt",
        cwd=g.root)
    assert done.returncode == 0, done.stderr
    code, stderr = int((g.root / "rc.txt").read_text()), (g.root / "err.txt").read_text()
    series = _check_failed_finding_write(g, code, stderr, why)
    assert not any((g.root / "findings").iterdir())  # the tmpfs is gone; nothing half-written is left here
    _resume_writes_the_finding(g, series)


def test_findings_path_blocked_by_a_file(tmp_path: Path) -> None:
    # No namespace needed: a file where the folder should be is an unwritable findings folder too.
    g = fault_gate(tmp_path / "g")
    (g.root / "findings").write_text("not a folder")
    done = gate_invoke("run", "off", "on", cwd=g.root)
    series = _check_failed_finding_write(g, done.returncode, done.stderr, "cannot write the finding")
    (g.root / "findings").unlink()
    _resume_writes_the_finding(g, series)


@needs_namespace
def test_runs_folder_full_mid_series_then_resume(tmp_path: Path) -> None:
    # on-r2 fills the runs disk after writing its result: gatekit meets ENOSPC writing that run's files.
    g = fault_gate(tmp_path / "g", on={"fill": ["on-r2"]})
    (g.root / "runs").mkdir()
    script = """
mount -t tmpfs -o size=1m tmpfs runs
$GATE run off on >out1.txt 2>err1.txt; echo $? >rc1.txt
cp -a runs saved-at-failure
rm -f runs/*/on-r2/filler.bin
$GATE run --resume "$(ls -d runs/*/)" >out2.txt 2>err2.txt; echo $? >rc2.txt
cp -a runs saved-after-resume
"""
    done = in_mount_namespace(script, cwd=g.root)
    assert done.returncode == 0, done.stderr
    read = lambda name: (g.root / name).read_text()  # noqa: E731
    assert read("rc1.txt").strip() == "4", read("err1.txt")  # runs happened: OutputError
    (line,) = [line for line in read("err1.txt").splitlines() if line.startswith("gate: error: ")]
    assert "No space left on device" in line and "gate run --resume" in line
    assert "/on-r2/" in line  # names the file it could not write
    (at_failure,) = [p for p in (g.root / "saved-at-failure").iterdir() if p.is_dir()]
    journal = assert_journal_consistent(at_failure)  # every line whole, every finished run intact
    assert [e["record"]["label"] for e in journal if e["event"] == "run_end"] == ["off-r1", "on-r1", "off-r2"]
    assert journal[-1] == {**journal[-1], "event": "run_start", "label": "on-r2"}

    assert read("rc2.txt").strip() == "0", read("err2.txt")
    (after,) = [p for p in (g.root / "saved-after-resume").iterdir() if p.is_dir()]
    journal = assert_journal_consistent(after)
    assert [e["record"]["label"] for e in journal if e["event"] == "run_end"] == SIX
    assert (after / "DONE").exists() and (after / "on-r2.cut-1").is_dir()
    assert g.finding()["verdict"]["decision"] == "adopted"
    assert [r["label"] for r in g.finding()["runs"]] == SIX
    shutil.rmtree(g.root / "saved-at-failure")


def test_a_journal_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    journal_path = tmp_path / "series" / "journal.jsonl"
    journal_path.mkdir(parents=True)  # a folder where the journal should be: every append fails
    with pytest.raises(OutputError) as caught:
        Journal(journal_path).append("run_start", label="off-r1")
    message = str(caught.value)
    assert str(journal_path) in message and "cannot record the 'run_start' event" in message
    assert f"gate run --resume {journal_path.parent}" in message


def test_written_files_get_the_usual_mode_not_owner_only(tmp_path: Path) -> None:
    """Findings and reports are read by others (CI artifacts, web servers): 0666 less the umask."""
    import stat

    from gatekit.storage import atomic_write_text

    previous = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "finding.json", "{}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "finding.json").stat().st_mode) == 0o644


def test_files_gatekit_owns_are_never_opened_through_a_planted_link(tmp_path: Path) -> None:
    """Issue 19, point 8: `runs/.gatekit.lock` planted as a symbolic link had its target truncated and
    overwritten with `pid N`. The lock, the campaign lock and the journal are opened without following a
    link (O_NOFOLLOW) and only as regular files: refused naming the file, the target untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    g = fault_gate(tmp_path / "g")
    (g.root / "runs").mkdir()
    lock = g.root / "runs" / ".gatekit.lock"
    lock.symlink_to(victim)
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("gate: error: ")]
    assert str(lock) in line and "is a symbolic link" in line, line
    assert victim.read_text() == "precious\n" and g.order() == []  # nothing ran, nothing written through it
    lock.unlink()
    os.mkfifo(lock)  # a FIFO cannot block the gate either
    done = gate_invoke("run", "off", "on", cwd=g.root)
    assert done.returncode == 2 and f"{lock}: cannot be used as a lock: is not a regular file" in done.stderr
    # the same helper holds the campaign lock; a journal replaced by a link (a trainer can reach its series
    # folder) is never appended through
    campaign_lock = tmp_path / ".campaign.lock"
    campaign_lock.symlink_to(victim)
    with pytest.raises(SeriesError, match=f"{campaign_lock}: cannot be used as a lock: is a symbolic link"):
        with pid_lock(campaign_lock, SeriesError):
            pass
    journal = tmp_path / "series" / "journal.jsonl"
    journal.parent.mkdir()
    journal.symlink_to(victim)
    with pytest.raises(OutputError, match=f"{journal}: cannot record the 'series_start' event: is a symbolic link"):
        Journal(journal).append("series_start")
    assert victim.read_text() == "precious\n"
    # nor read through one (a link to /dev/zero never ends), nor read when it is a FIFO (it would block)
    journal.unlink()
    journal.symlink_to("/dev/zero")
    with pytest.raises(SeriesError, match=f"{journal}: cannot be read: is a symbolic link"):
        list(Journal(journal).events())
    journal.unlink()
    os.mkfifo(journal)
    with pytest.raises(SeriesError, match=f"{journal}: cannot be read: is not a regular file"):
        list(Journal(journal).events())


@needs_namespace
@pytest.mark.parametrize("mount, why", [("-o ro", "Read-only file system"),
                                        ("-o size=8k", "No space left on device")], ids=["read-only", "full"])
def test_a_runs_folder_that_cannot_be_written_before_any_run_exits_4_then_runs_again(tmp_path: Path, mount: str,
                                                                                     why: str) -> None:
    """A read-only or full runs folder at the start (the lock, the series folder, the predecision): one line naming
    the file, exit 4 (a failure to write, never a traceback or a usage error), nothing ran; the same command runs the
    series once the folder can be written."""
    g = fault_gate(tmp_path / "g")
    (g.root / "runs").mkdir()
    done = in_mount_namespace(
        f"mount -t tmpfs {mount} tmpfs runs && $GATE run off on >out.txt 2>err.txt; echo $? >rc.txt", cwd=g.root)
    assert done.returncode == 0, done.stderr
    code, stderr = int((g.root / "rc.txt").read_text()), (g.root / "err.txt").read_text()
    assert code == 4, stderr
    assert "Traceback" not in stderr
    (line,) = [line for line in stderr.splitlines() if line.startswith("gate: error: ")]
    assert str(g.root / "runs") in line and why in line and "run the command again" in line.replace("same ", "")
    assert g.order() == []  # nothing ran
    again = gate_invoke("run", "off", "on", cwd=g.root)
    assert again.returncode == 0, again.stderr
    assert g.finding()["verdict"]["decision"] == "adopted"


@needs_namespace
@pytest.mark.parametrize("size", ["4k", "8k", "12k", "48k"])
def test_a_campaign_on_a_full_disk_exits_4_and_resumes_once_space_is_freed(tmp_path: Path, size: str) -> None:
    """The campaign folder's disk is full (a tmpfs of `size`: full at its lock, its journal's first event, a gate's
    log, or inside the gate's series): one line naming the file, exit 4, never a traceback; once the disk has room,
    the command it names — run again when nothing ran, else --resume — finishes the campaign."""
    from tests.test_campaign import FAST, make_campaign

    path = make_campaign(tmp_path, [("alpha", {"elapsed": FAST})])
    (tmp_path / "runs").mkdir()
    script = f"""
mount -t tmpfs -o size={size} tmpfs runs
$GATE campaign campaign.toml >out1.txt 2>err1.txt; echo $? >rc1.txt
mount -o remount,size=64m runs
if grep -q -- '--resume' err1.txt; then
    $GATE campaign campaign.toml --resume "$(ls -d runs/*/ | tail -1)" >out2.txt 2>err2.txt; echo $? >rc2.txt
else
    $GATE campaign campaign.toml >out2.txt 2>err2.txt; echo $? >rc2.txt
fi
"""
    done = in_mount_namespace(script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    read = lambda name: (tmp_path / name).read_text()  # noqa: E731
    assert read("rc1.txt").strip() == "4", read("err1.txt")
    assert "Traceback" not in read("err1.txt")
    (line,) = [line for line in read("err1.txt").splitlines() if line.startswith("gate: error: ")] or [
        line for line in read("err1.txt").splitlines() if "No space left on device" in line][:1]
    assert "No space left on device" in line and str(tmp_path / "runs") in line
    assert read("rc2.txt").strip() == "0", read("err2.txt")
    assert "01-alpha-off-on: adopted" in read("out2.txt")
    assert path.is_file()


@needs_namespace
def test_gate_site_with_a_full_dev_shm_draws_its_pages_without_workers(tmp_path: Path) -> None:
    """/dev/shm full (a trainer's leftovers): the worker pool cannot get its semaphores, so `gate site --jobs 2`
    draws the pages in its own process instead — exit 0 and the same files as a one-process build, no traceback."""
    root = Path(__file__).parents[2] / "findings"
    (tmp_path / "findings").mkdir()
    names = ["demo-resident-adam-2026-11-30", "image-precision-2026-11-30", "resident-graph-2026-11-30"]
    for name in names:
        for suffix in (".json", ".toml"):
            shutil.copyfile(root / f"{name}{suffix}", tmp_path / "findings" / f"{name}{suffix}")
    script = """
mount -t tmpfs -o size=4k tmpfs /dev/shm
head -c 4096 /dev/zero >/dev/shm/leftover
$GATE site findings --out full-shm --jobs 2 >out.txt 2>err.txt; echo $? >rc.txt
"""
    done = in_mount_namespace(script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "rc.txt").read_text().strip() == "0", (tmp_path / "err.txt").read_text()
    assert "Traceback" not in (tmp_path / "err.txt").read_text()
    alone = gate_invoke("site", "findings", "--out", "one-process", "--jobs", "1", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    files = lambda site: sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file())  # noqa: E731
    assert files(tmp_path / "full-shm") == files(tmp_path / "one-process")
    index = (tmp_path / "full-shm" / "index.html").read_text()
    assert all(name in index for name in names)

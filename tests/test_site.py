"""The findings site: built incrementally (a page is drawn again only when its inputs change), nested folders
of findings, and a build that fails leaves the old site whole and exits 4.

What was drawn is read from `SiteBuild` and the site's manifest, never from timings.
"""

from __future__ import annotations

import errno
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gatekit.cli import main
from gatekit.errors import OutputError
from gatekit.finding import write_finding
from gatekit.findingset import finding_files
from gatekit.report import site as site_module
from gatekit.report.site import SITE_MANIFEST, build_site
from gatekit.storage import SeriesLayout
from tests.findings_kit import finding_of, variant, write_json


def _findings(folder: Path, count: int) -> list[Path]:
    return [write_json(folder / f"f{k}.json", variant(f"f{k}", f"2027-01-0{k + 1}", delta_pct=-2.0 - k))
            for k in range(count)]


def _stamp(page: Path) -> tuple[int, int]:
    stat = page.stat()
    return stat.st_ino, stat.st_mtime_ns


def test_a_second_build_draws_only_what_changed(tmp_path: Path) -> None:
    findings = tmp_path / "findings"
    paths = _findings(findings, 3)
    site = tmp_path / "site"
    first = build_site(paths, site, cwd=tmp_path)
    assert sorted(first.rendered) == ["f0", "f1", "f2"] and first.kept == ()
    before = {folder: _stamp(site / folder / "index.html") for folder in first.rendered}

    again = build_site(paths, site, cwd=tmp_path)
    assert again.rendered == () and sorted(again.kept) == ["f0", "f1", "f2"]
    assert {folder: _stamp(site / folder / "index.html") for folder in again.kept} == before  # not rewritten

    # one new finding, one finding edited: only those two are drawn
    paths.append(write_json(findings / "f3.json", variant("f3", "2027-01-04")))
    write_json(paths[1], variant("f1", "2027-01-02", delta_pct=-9.5))
    third = build_site(paths, site, cwd=tmp_path)
    assert sorted(third.rendered) == ["f1", "f3"] and sorted(third.kept) == ["f0", "f2"]
    assert _stamp(site / "f0" / "index.html") == before["f0"]
    assert "-9.5000 %" in (site / "f1" / "index.html").read_text()
    index = (site / "index.html").read_text()
    assert all(f'href="f{k}/index.html"' in index for k in range(4))


def test_a_page_is_drawn_again_when_a_finding_it_names_appears(tmp_path: Path) -> None:
    findings = tmp_path / "findings"
    first = write_json(findings / "a.json", variant("a", "2027-01-01", related=["b"]))
    site = tmp_path / "site"
    build_site([first], site, cwd=tmp_path)
    assert 'href="../b/index.html"' not in (site / "a" / "index.html").read_text()  # b is not in the site yet
    second = write_json(findings / "b.json", variant("b", "2027-01-02"))
    build = build_site([first, second], site, cwd=tmp_path)
    assert sorted(build.rendered) == ["a", "b"]  # a's link to b now resolves
    assert 'href="../b/index.html"' in (site / "a" / "index.html").read_text()


def test_each_finding_and_its_twin_are_read_once_by_a_build_that_draws_it(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold build read each finding twice (for its index row, then for its page); now once, with its twin
    for the check. A page drawn again whose finding is unchanged (a finding it names appeared) reads the pair
    once where it is drawn; a build that draws nothing reads no finding."""
    from gatekit import finding as finding_module

    reads: Counter[str] = Counter()
    real = finding_module.read_finding_document

    def counted(path: Path) -> dict[str, Any]:
        reads[path.name] += 1
        return real(path)
    monkeypatch.setattr(finding_module, "read_finding_document", counted)  # what reads a finding file or its twin
    findings, site = tmp_path / "findings", tmp_path / "site"
    findings.mkdir()
    paths = [write_finding(finding_of(variant(f"f{k}", f"2027-01-0{k + 1}", related=["later"])), findings)[1]
             for k in range(3)]
    assert sorted(build_site(paths, site, cwd=tmp_path).rendered) == ["f0", "f1", "f2"]
    assert reads == Counter({f"f{k}.{suffix}": 1 for k in range(3) for suffix in ("json", "toml")})
    reads.clear()
    assert build_site(paths, site, cwd=tmp_path).rendered == () and reads == Counter()
    later = write_finding(finding_of(variant("later", "2027-01-09")), findings)[1]
    assert sorted(build_site([*paths, later], site, cwd=tmp_path).rendered) == ["f0", "f1", "f2", "later"]
    assert reads == Counter({f"{stem}.{suffix}": 1 for stem in ("f0", "f1", "f2", "later")
                             for suffix in ("json", "toml")})


def test_a_page_is_drawn_again_when_its_run_files_change(tmp_path: Path) -> None:
    data = variant("r", "2027-01-01")
    run = tmp_path / data["meta"]["related_runs"][0]
    run.mkdir(parents=True)
    (run / "samples.csv").write_text("t_s,load1\n0.0,0.5\n1.0,0.6\n")
    path = write_json(tmp_path / "findings" / "r.json", data)
    site = tmp_path / "site"
    assert build_site([path], site, cwd=tmp_path).rendered == ("r",)
    assert build_site([path], site, cwd=tmp_path).rendered == ()
    (run / "samples.csv").write_text("t_s,load1\n0.0,0.5\n1.0,3.6\n")
    assert build_site([path], site, cwd=tmp_path).rendered == ("r",)
    assert (site / "r" / "load.svg").is_file()
    (run / "samples.csv").unlink()  # the page drawn again has no load figure: the old one leaves the site
    assert build_site([path], site, cwd=tmp_path).rendered == ("r",)
    assert not (site / "r" / "load.svg").exists() and (site / "r" / "runs.svg").is_file()


def test_a_removed_finding_leaves_the_site_and_files_no_build_wrote_stay(tmp_path: Path) -> None:
    paths = _findings(tmp_path / "findings", 2)
    site = tmp_path / "site"
    build_site(paths, site, cwd=tmp_path)
    (site / "CNAME").write_text("findings.example\n")  # a file the team put there
    (site / "f1" / "notes.txt").write_text("kept\n")
    build = build_site(paths[:1], site, cwd=tmp_path)
    assert build.rendered == () and build.kept == ("f0",)
    assert not (site / "f1" / "index.html").exists() and (site / "f1" / "notes.txt").read_text() == "kept\n"
    assert (site / "CNAME").read_text() == "findings.example\n"
    manifest = json.loads((site / SITE_MANIFEST).read_text())
    assert set(manifest["pages"]) == {"f0"}


def test_the_page_drawn_by_workers_is_the_one_drawn_here(tmp_path: Path) -> None:
    paths = _findings(tmp_path / "findings", 3)
    alone = build_site(paths, tmp_path / "one", cwd=tmp_path, jobs=1)
    pooled = build_site(paths, tmp_path / "two", cwd=tmp_path, jobs=2)
    assert sorted(alone.rendered) == sorted(pooled.rendered)

    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert files(tmp_path / "one") == files(tmp_path / "two")


def test_a_failed_build_leaves_the_old_site_whole_and_exits_4(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    findings = tmp_path / "findings"
    paths = _findings(findings, 2)
    site = tmp_path / "site"
    build_site(paths, site, cwd=tmp_path)
    before = {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()}
    write_json(findings / "f2.json", variant("f2", "2027-01-03"))

    def disk_full(task: site_module.PageTask) -> tuple[str, list[str]]:
        (task.out / task.folder).mkdir(parents=True)
        (task.out / task.folder / "index.html").write_bytes(b"<half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(site_module, "render_page", disk_full)
    with pytest.raises(OutputError, match="No space left on device"):
        build_site(finding_files(findings), site, cwd=tmp_path)
    done = CliRunner().invoke(main, ["site", str(findings), "-o", str(site), "--jobs", "1"])
    assert done.exit_code == 4, done.output
    assert {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no half-built folder left


def test_findings_in_subfolders_are_found_but_not_inside_a_series(tmp_path: Path) -> None:
    findings = tmp_path / "findings"
    top = write_json(findings / "top.json", variant("top", "2027-01-01"))
    nested = write_json(findings / "h200-2027-01-02" / "campaign" / "deep.json", variant("deep", "2027-01-02"))
    series = findings / "h200-2027-01-02" / "runs" / "s1"
    write_json(series / "off-r1" / "record.json", {"not": "a finding"})
    SeriesLayout(series).journal.write_text("")
    write_json(findings / ".hidden" / "x.json", {"not": "a finding"})
    assert finding_files(findings) == [top]  # as gate history reads a folder
    assert finding_files(findings, nested=True) == [top, nested]
    done = CliRunner().invoke(main, ["site", str(findings), "-o", str(tmp_path / "site"), "--jobs", "1"])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "site" / "deep" / "index.html").is_file()


def test_the_index_names_guards_and_verdict_tags_in_words(tmp_path: Path) -> None:
    path = write_json(tmp_path / "g.json", variant("g", "2027-01-01", decision="guard_failed"))
    data = json.loads(path.read_text())
    data["meta"]["tags"] = ["g", "gate-guard_failed", "use_graph"]
    write_json(path, data)
    build_site([path], tmp_path / "site", cwd=tmp_path)
    index = (tmp_path / "site" / "index.html").read_text()
    assert "guard Δ (PSNR)" not in index and ">guard Δ</button>" in index
    assert "<code>verdict: guard failed</code>" in index and "gate-guard_failed" not in index
    assert "<code>use_graph</code>" in index  # a config key stays as written
    assert "<li>verdict: guard failed</li>" in (tmp_path / "site" / "g" / "index.html").read_text()


def test_a_site_built_before_the_manifest_is_redrawn_without_touching_the_old_files(tmp_path: Path) -> None:
    """A site an older gatekit wrote has no manifest: every page is drawn again, and the old site's files
    (carried over as hard links until then) are replaced, never written through."""
    paths = _findings(tmp_path / "findings", 1)
    site = tmp_path / "site"
    build_site(paths, site, cwd=tmp_path)
    (site / SITE_MANIFEST).unlink()
    (site / "f0" / "index.html").write_bytes(b"stale")
    os.link(site / "f0" / "index.html", tmp_path / "stale.html")  # a second name for the old page's inode
    build = build_site(paths, site, cwd=tmp_path)
    assert build.rendered == ("f0",)
    assert b"<!doctype html>" in (site / "f0" / "index.html").read_bytes()
    assert (tmp_path / "stale.html").read_bytes() == b"stale"  # the old inode was replaced, not written through


def test_the_folder_index_answers_as_the_file_system_does(tmp_path: Path) -> None:
    from gatekit.report.rundata import FolderIndex

    (tmp_path / "runs" / "s1" / "off-r1").mkdir(parents=True)
    (tmp_path / "runs" / "s1" / "file").write_text("")
    (tmp_path / "linked").symlink_to(tmp_path / "runs")
    index = FolderIndex()
    for relative in ("runs", "runs/s1/off-r1", "runs/s1/file", "runs/s2", "linked/s1/off-r1", "missing/x",
                     "runs/s1/../s1/off-r1"):
        parts = relative.split("/")
        assert index.has(tmp_path, parts) == (tmp_path / relative).is_dir(), relative
    assert not index.has(tmp_path / "missing", ["runs"]) and index.has(Path("."), ["."]) == Path(".").is_dir()


def test_a_page_an_index_or_a_manifest_edited_in_the_site_is_drawn_again_and_said(tmp_path: Path) -> None:
    """A page's verdict edited in the site, and an index row edited where the site keeps it (the manifest): both
    were kept by every rebuild from the unchanged findings. Now what a build keeps it checks first against the
    sha256 the last build recorded; what differs is drawn again, one note each on stderr."""
    paths = _findings(tmp_path / "findings", 2)
    site = tmp_path / "site"
    build_site(paths, site, cwd=tmp_path)
    page = site / "f0" / "index.html"
    honest = page.read_bytes()
    assert b"ADOPTED" in honest.upper() and b"REGRESSION" not in honest.upper()
    page.write_bytes(honest.replace(b"adopted", b"regression").replace(b"ADOPTED", b"REGRESSION"))
    build = build_site(paths, site, cwd=tmp_path)
    assert build.rendered == ("f0",) and build.kept == ("f1",)
    assert page.read_bytes() == honest
    assert build.notes == (f"{page}: differs from what the last build wrote; its page is drawn again",)
    assert build_site(paths, site, cwd=tmp_path).notes == ()  # redrawn: as written again

    # the index edited: written anew (as every build writes it), and said
    index = (site / "index.html").read_text()
    (site / "index.html").write_text(index.replace("adopted", "regression"))
    build = build_site(paths, site, cwd=tmp_path)
    assert build.rendered == () and build.notes == (
        f"{site / 'index.html'}: differs from what the last build wrote; written again",)
    assert (site / "index.html").read_text() == index

    # an index row edited where the site keeps it, the manifest: that manifest is not used
    manifest_path = site / SITE_MANIFEST
    manifest = json.loads(manifest_path.read_text())
    (row,) = [s["entry"] for s in manifest["sources"].values() if s["id"] == "f1"]
    assert row["decision"] == "adopted"
    row["decision"] = "regression"
    manifest_path.write_text(json.dumps(manifest, sort_keys=True))
    done = CliRunner().invoke(main, ["site", str(tmp_path / "findings"), "-o", str(site)])
    assert done.exit_code == 0, done.output
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: ")]
    assert notes == [f"note: {manifest_path}: differs from what the last build wrote (edited); every finding is "
                     "read and every page drawn again"], notes
    assert (site / "index.html").read_text() == index
    rows = [s["entry"]["decision"] for s in json.loads(manifest_path.read_text())["sources"].values()]
    assert rows == ["adopted", "adopted"]

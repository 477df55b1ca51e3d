"""Report folders and the findings site: pure builders of {relative path: bytes}, and the one writer.

Layout (the same for `gate report --html DIR` and `gate site ... -o DIR`):
  DIR/index.html               the findings index (site only)
  DIR/<finding-id>/index.html  one page per finding
  DIR/<finding-id>/*.svg       its figures, beside the page
so a page links a related finding as `../<id>/index.html`, and the folder can be copied or uploaded whole.
`--md FILE` writes FILE and its figures in `<FILE stem>-figures/`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, TypeVar

from gatekit import __version__
from gatekit.errors import GatekitError, OutputError
from gatekit.finding import Finding
from gatekit.findingset import load_checked, pair_sha256
from gatekit.formatting import is_number
from gatekit.records import canonical_json, loads_json
from gatekit.report.common import safe_name, tag_text
from gatekit.report.html import index_html, report_html
from gatekit.report.rundata import FolderIndex, RunFiles, load_run_files, run_files_digest, run_folders
from gatekit.slots import usable_cpus
from gatekit.storage import atomic_write_bytes, current_umask, read_own_file

# Drawing the figures and the page's statistics (scipy) are imported where a page is drawn, so a site
# build that finds nothing changed never loads them.
if TYPE_CHECKING:
    from gatekit.report.figures import FigureImage

GENERATOR = f"gatekit {__version__}"
Item = TypeVar("Item")
Done = TypeVar("Done")


@dataclass(frozen=True, slots=True)
class Prepared:
    """A finding ready to render: the finding, its folder name, figures and the notes about its run folders."""

    finding: Finding
    folder: str
    figures: Mapping[str, FigureImage]
    run_files: RunFiles
    source: str


def folder_names(ids: Sequence[str]) -> list[str]:
    """A distinct, filesystem-safe folder per finding id (ids come from gate files, so never trust them)."""
    names: list[str] = []
    taken: set[str] = set()  # a set beside the list: thousands of findings, no quadratic search
    for finding_id in ids:
        base = safe_name(finding_id)
        name, k = base, 1
        while name in taken or name == "index.html":
            k += 1
            name = f"{base}-{k}"
        names.append(name)
        taken.add(name)
    return names


def prepare(items: Sequence[tuple[Finding, RunFiles, str]]) -> list[Prepared]:
    """Draw every finding's figures once: (finding, run files, source file name) → Prepared."""
    from gatekit.report.figures import report_figures

    names = folder_names([finding.id for finding, _, _ in items])
    return [Prepared(finding, name, report_figures(finding, run_files), run_files, source)
            for (finding, run_files, source), name in zip(items, names)]


def _related_links(prepared: Sequence[Prepared], prefix: str) -> dict[str, str]:
    return {p.finding.id: f"{prefix}{p.folder}/index.html" for p in prepared}


def page_files(item: Prepared, related: Mapping[str, str], *, with_index: bool,
               generator: str = GENERATOR) -> dict[str, bytes]:
    """One finding's page and its figures, by name inside its folder; `related` links ids to pages."""
    from gatekit.report.page import build_page

    page = build_page(item.finding, item.figures, item.run_files, related=related)
    text = report_html(page, index_href="../index.html" if with_index else "", source=item.source,
                       generator=generator)
    return {"index.html": text.encode("utf-8"), **{image.name: image.data for image in item.figures.values()}}


def report_files(prepared: Sequence[Prepared], *, with_index: bool = False,
                 generator: str = GENERATOR) -> dict[str, bytes]:
    """Each finding's page and figures under its folder; with_index adds the index and back links."""
    links = _related_links(prepared, "../")
    files: dict[str, bytes] = {}
    for item in prepared:
        for name, content in page_files(item, links, with_index=with_index, generator=generator).items():
            files[f"{item.folder}/{name}"] = content
    if with_index:
        files["index.html"] = index_html(index_entries(prepared), generator=generator).encode("utf-8")
    return files


def index_entry(finding: Finding) -> dict[str, Any]:
    """A finding's row of the index, without its links (plain JSON values, so the site can keep it)."""
    from gatekit.report.page import headline_numbers

    meta, decision = finding.meta, finding.decision
    delta_text, guard_text = headline_numbers(finding)
    guard_value = next((g.delta for g in finding.guards.values()), None)
    delta = finding.stats.delta_pct
    return {"id": meta.id, "date": meta.date, "title": meta.title, "decision": decision.value,
            "variant": decision.severity, "delta_pct": delta if is_number(delta) else None,
            "delta_text": delta_text, "guard_text": guard_text,
            "guard_value": guard_value if is_number(guard_value) else None,
            "tags": [tag_text(t) for t in meta.tags], "related_ids": list(meta.related_findings)}


def linked_entry(entry: Mapping[str, Any], folder: str, links: Mapping[str, str]) -> dict[str, Any]:
    """An index row with its page's link and its related findings linked where they are in the site."""
    return {**entry, "href": f"{folder}/index.html",
            "related": [(r, links.get(r, "")) for r in entry["related_ids"]]}


def index_entries(prepared: Sequence[Prepared]) -> list[dict[str, Any]]:
    links = _related_links(prepared, "")
    return [linked_entry(index_entry(item.finding), item.folder, links) for item in prepared]


def markdown_files(prepared: Sequence[Prepared], md_name: str) -> dict[str, bytes]:
    """One Markdown file for all the findings given, its figures in `<stem>-figures/` beside it."""
    from gatekit.report.markdown import report_markdown
    from gatekit.report.page import build_page

    figure_dir = f"{Path(md_name).stem}-figures"
    files: dict[str, bytes] = {}
    parts = []
    for item in prepared:
        page = build_page(item.finding, item.figures, item.run_files, figure_prefix=f"{figure_dir}/{item.folder}-")
        parts.append(report_markdown(page))
        for image in item.figures.values():
            files[f"{figure_dir}/{item.folder}-{image.name}"] = image.data
    files[Path(md_name).name] = "\n---\n\n".join(parts).encode("utf-8")
    return files


def write_files(root: Path, files: Mapping[str, bytes]) -> list[Path]:
    """The one writer of report output: every file atomically, under root only. Returns the paths written,
    absolute (gate prints them beside the finding paths, which are absolute too)."""
    written = []
    resolved_root = root.resolve()
    for relative, content in files.items():
        path = root / relative
        if resolved_root not in path.resolve().parents:
            raise GatekitError(f"{path}: refusing to write outside {root}")
        try:
            atomic_write_bytes(path, content)
        except OSError as exc:
            raise OutputError(f"{path}: cannot write the report: {exc.strerror or exc}") from None
        written.append(path.absolute())
    return written


# -- the findings site, built incrementally ------------------------------------------------------------
# A site of thousands of findings is rebuilt every night with one or two new ones. Each page's inputs (the
# bytes of the finding and of its twin, the run files it reads, its folder and the links to the findings it
# names, the renderer's own code) are hashed into a key kept in the site's manifest; a page whose key is
# unchanged is left where it is, untouched, and a finding whose bytes (and its twin's) are unchanged is not
# even parsed (its index row is kept too); one that is parsed is parsed once, by a worker, and checked against
# its twin (load_checked). The pages that are drawn, the index and the manifest are written into a folder
# beside the site first, then renamed into it file by file, the manifest last: a build that fails while
# drawing (a full disk) leaves the old site whole, and one stopped while moving in leaves whole pages and a
# manifest that has them drawn again. So a rebuild costs what changed plus reading the findings' and run
# files' bytes, and the kept pages' bytes, not drawing them.
# What a build keeps it verifies first: the manifest records the sha256 of every file it wrote (each page's,
# the index's) and of its own content. A kept page whose files differ from what the last build wrote (edited
# in the site) is drawn again, an index that differs is said so (it is written anew each build), and a
# manifest whose content differs from its recorded sha256 (an index row edited there) is not used: every
# finding is read and every page drawn again. Each is one note on stderr. (The manifest is not signed: a forger
# who rewrites it consistently is not caught here; the findings are what `gate verify` checks.)

SITE_MANIFEST = ".gatekit-site.json"
SITE_SCHEMA = "gatekit.site/2"  # /2: the sha256 of every file written, and of the manifest's own content


@dataclass(frozen=True, slots=True)
class SiteBuild:
    """What one `build_site` did: the index written, and the page folders drawn or carried over."""

    index: Path
    rendered: tuple[str, ...]
    kept: tuple[str, ...]
    notes: tuple[str, ...] = ()  # what differed from what the last build wrote (edited in the site), redrawn


@dataclass(frozen=True, slots=True)
class PageTask:
    """Everything one page needs, picklable, so a worker process can draw it."""

    path: Path
    # the finding as this build loaded and checked it (load_source), pickled: the page is drawn without
    # reading the file again, and a cold build of thousands holds some 10 kB a page, not each typed finding's
    # 100 kB. None: a finding whose summary the manifest kept, loaded (and checked) where the page is drawn
    finding: bytes | None
    folder: str
    links: Mapping[str, str]
    runs_roots: tuple[Path, ...]
    cwd: Path
    out: Path


def renderer_fingerprint() -> str:
    """sha256 of the code that shapes a page (gatekit's own modules, the figures included): a site built by
    other code is drawn again in full."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(f"{GENERATOR}\n".encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _read_manifest(site_dir: Path, renderer: str, notes: list[str]) -> dict[str, Any]:
    """The last build's manifest; empty when there is none, it is unreadable, other code made it, or its content
    is not what that build wrote (its recorded sha256 differs: a note says so)."""
    empty: dict[str, Any] = {"sources": {}, "pages": {}, "index": ""}
    path = site_dir / SITE_MANIFEST
    try:
        data = loads_json(read_own_file(path).decode("utf-8"))
    except (OSError, ValueError):
        return empty
    if not isinstance(data, dict) or data.get("schema") != SITE_SCHEMA or data.get("renderer") != renderer:
        return empty
    recorded = data.pop("sha256", None)
    if recorded != _content_sha256(data):
        notes.append(f"{path}: differs from what the last build wrote (edited); every finding is read and every "
                     "page drawn again")
        return empty
    return data


def _content_sha256(document: Mapping[str, Any]) -> str:
    """sha256 of a manifest's content (its canonical JSON), recorded in it as `sha256`."""
    return hashlib.sha256(canonical_json(document).encode("utf-8")).hexdigest()


def _file_sha256(path: Path) -> str | None:
    """sha256 of a file the site holds (only a regular file, never through a link); None when it cannot be read."""
    try:
        return hashlib.sha256(read_own_file(path)).hexdigest()
    except OSError:
        return None


def _as_written(folder: Path, files: Mapping[str, str]) -> str | None:
    """The first of a page's files (name: sha256 as the last build wrote it) that differs from it now; None when
    every one is as written."""
    return next((name for name, sha256 in files.items() if _file_sha256(folder / name) != sha256), None)


def _summary(finding: Finding) -> dict[str, Any]:
    """What the site keeps of a finding between builds: its id, run folders and index row."""
    return {"id": finding.id, "run_folders": run_folders(finding), "entry": index_entry(finding)}


def load_source(path: Path) -> tuple[dict[str, Any], bytes]:
    """One finding file, loaded once and checked against its twin (`findingset.load_checked`): its summary
    for the index and the manifest, and the finding pickled for its page. A module-level function of a path,
    so it runs in a worker process as well as here."""
    finding = load_checked(path).finding
    return _summary(finding), pickle.dumps(finding)


def render_page(task: PageTask) -> tuple[str, dict[str, str]]:
    """Draw one finding's page and figures into `task.out/<folder>/`; returns the folder and {file name: sha256}.
    A module-level function of picklable arguments, so it runs in a worker process as well as here."""
    from gatekit.report.figures import report_figures

    # bytes this build pickled (never a file's), or the file read and checked here
    finding = pickle.loads(task.finding if task.finding is not None else load_source(task.path)[1])
    run_files = load_run_files(finding, task.path, task.runs_roots, task.cwd)
    item = Prepared(finding, task.folder, report_figures(finding, run_files), run_files, task.path.name)
    files = page_files(item, task.links, with_index=True)
    folder = task.out / task.folder
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return task.folder, {name: hashlib.sha256(files[name]).hexdigest() for name in sorted(files)}


def _in_workers(work: Callable[[Item], Done], items: Sequence[Item], jobs: int) -> list[Done]:
    """`work` of each item, in order: in up to `jobs` worker processes, or here for one job or one item. The
    first item whose work raises (a finding that differs from its twin) raises here, as it would in order."""
    if jobs <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # the platform's own way (Linux forks: the workers start with what is imported here); without fork, spawned
    context = None if hasattr(os, "fork") else multiprocessing.get_context("spawn")
    try:
        pool = ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=context)
    except OSError:  # no room for the pool's semaphores (a full /dev/shm, e.g. a trainer's leftovers): here, in turn
        return [work(item) for item in items]
    with pool:
        return list(pool.map(work, items, chunksize=max(1, min(16, len(items) // (4 * jobs)))))


def _render_all(tasks: Sequence[PageTask], jobs: int) -> dict[str, dict[str, str]]:
    if jobs > 1 and len(tasks) > 1:
        import gatekit.report.figures  # noqa: F401  (imported once here: forked workers start with it)
        import gatekit.report.page  # noqa: F401
    return dict(_in_workers(render_page, tasks, jobs))


def default_jobs() -> int:
    """Worker processes for drawing pages: the CPUs this process may run on, at most 8."""
    return max(1, min(8, len(usable_cpus())))


def build_site(paths: Sequence[Path], site_dir: Path, runs_roots: Sequence[Path] = (), *, cwd: Path,
               jobs: int = 1) -> SiteBuild:
    """The findings site of these finding files in `site_dir`: an index and a page per finding, drawing only
    the pages whose inputs changed since the last build (see above). Files in `site_dir` that no build
    wrote are kept. FindingError when a finding cannot be read or differs from its twin, OutputError when
    the site cannot be written; the old site is then untouched."""
    renderer = renderer_fingerprint()
    notes: list[str] = []
    manifest = _read_manifest(site_dir, renderer, notes)
    roots = tuple(runs_roots)
    sources: dict[str, Any] = {}
    found = []
    shas = [pair_sha256(path) for path in paths]
    unread = [path for path, sha in zip(paths, shas) if sha not in manifest["sources"]]
    # each finding not summarised before is loaded once, in the workers, for its index row and its page
    loaded = dict(zip(unread, _in_workers(load_source, unread, jobs)))
    for path, sha in zip(paths, shas):
        summary = loaded[path][0] if path in loaded else manifest["sources"][sha]
        sources[sha] = summary
        found.append((path, sha, summary))
    folders = folder_names([summary["id"] for _, _, summary in found])
    page_links = {summary["id"]: f"../{folder}/index.html" for (_, _, summary), folder in zip(found, folders)}
    pages: dict[str, Any] = {}
    tasks: list[PageTask] = []
    kept: list[str] = []
    old_pages = manifest["pages"]
    existing = FolderIndex()  # which run folders exist, listed once for all the findings
    for (path, sha, summary), folder in zip(found, folders):
        links = {r: page_links[r] for r in summary["entry"]["related_ids"] if r in page_links}
        key = hashlib.sha256(json.dumps([renderer, sha, folder, path.name, links, run_files_digest(
            summary["run_folders"], path, roots, cwd, existing)], sort_keys=True).encode()).hexdigest()
        old = old_pages.get(folder)
        edited = _as_written(site_dir / folder, old["files"]) if old and old["key"] == key else None
        if old and old["key"] == key and edited is None:
            pages[folder] = old
            kept.append(folder)
        else:
            if edited is not None:
                notes.append(f"{site_dir / folder / edited}: differs from what the last build wrote; its page is "
                             "drawn again")
            pages[folder] = {"key": key, "files": {}}
            pickled = loaded.pop(path)[1] if path in loaded else None
            tasks.append(PageTask(path, pickled, folder, links, roots, cwd, Path()))
    index_links = {summary["id"]: f"{folder}/index.html" for (_, _, summary), folder in zip(found, folders)}
    entries = [linked_entry(summary["entry"], folder, {r: index_links[r] for r in summary["entry"]["related_ids"]
                                                       if r in index_links})
               for (_, _, summary), folder in zip(found, folders)]
    try:
        site_dir.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{site_dir.name}.building-", dir=site_dir.parent))
    except OSError as exc:
        raise OutputError(f"{site_dir}: cannot write the site: {exc.strerror or exc}") from None
    try:
        os.chmod(building, 0o777 & ~current_umask())  # mkdtemp makes it owner-only; a site is for reading
        tasks = [dataclasses.replace(task, out=building) for task in tasks]
        for folder, names in _render_all(tasks, jobs).items():
            pages[folder]["files"] = names
        index = index_html(entries, generator=GENERATOR).encode("utf-8")
        if manifest["index"] and _file_sha256(site_dir / "index.html") != manifest["index"]:
            notes.append(f"{site_dir / 'index.html'}: differs from what the last build wrote; written again")
        (building / "index.html").write_bytes(index)
        document = {"schema": SITE_SCHEMA, "renderer": renderer, "sources": sources, "pages": pages,
                    "index": hashlib.sha256(index).hexdigest()}
        document["sha256"] = _content_sha256(document)
        (building / SITE_MANIFEST).write_text(json.dumps(document, sort_keys=True), encoding="utf-8")
        if site_dir.is_dir():
            _move_in(building, site_dir, {folder: pages[folder]["files"] for folder in (t.folder for t in tasks)},
                     old_pages, set(pages))
            building.rmdir()
        else:
            os.rename(building, site_dir)
    except OSError as exc:
        shutil.rmtree(building, ignore_errors=True)
        raise OutputError(f"{site_dir}: cannot write the site: {exc.strerror or exc} (the site there is "
                          "unchanged)") from None
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return SiteBuild((site_dir / "index.html").absolute(), tuple(t.folder for t in tasks), tuple(kept),
                     tuple(notes))


def _move_in(building: Path, site_dir: Path, drawn: Mapping[str, Sequence[str]], old_pages: Mapping[str, Any],
             current: set[str]) -> None:
    """The pages drawn in `building` into the site, each file by an atomic rename; the files the last build
    wrote for a page no longer in the site, or no longer part of its page, removed (files no build wrote stay);
    the index, then the manifest, last. Kept pages are not touched at all. Until the manifest is replaced the
    old one describes the site, so a build stopped half way only draws those pages again next time."""
    for folder, names in drawn.items():
        target = site_dir / folder
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
        target.mkdir(exist_ok=True)
        for name in names:
            os.replace(building / folder / name, target / name)
        (building / folder).rmdir()
    for folder, page in old_pages.items():
        stale = set(page["files"]) - set(drawn.get(folder, page["files"] if folder in current else ()))
        for name in stale:
            (site_dir / folder / name).unlink(missing_ok=True)
        if folder not in current:
            try:
                (site_dir / folder).rmdir()  # only when empty: a file the team put there keeps the folder
            except OSError:
                pass
    os.replace(building / "index.html", site_dir / "index.html")
    os.replace(building / SITE_MANIFEST, site_dir / SITE_MANIFEST)

"""Report folders and the findings site: pure builders of {relative path: bytes}, and the one writer.

Layout (the same for `gate report --html DIR` and `gate site ... -o DIR`):
  DIR/index.html               the findings index (site only)
  DIR/<finding-id>/index.html  one page per finding
  DIR/<finding-id>/*.png       its figures, beside the page
so a page links a related finding as `../<id>/index.html`, and the folder can be copied or uploaded whole.
`--md FILE` writes FILE and its figures in `<FILE stem>-figures/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from gatekit import __version__
from gatekit.errors import GatekitError
from gatekit.finding import Finding
from gatekit.report.common import is_number, safe_name
from gatekit.report.figures import FigureImage, report_figures
from gatekit.report.html import index_html, report_html
from gatekit.report.markdown import report_markdown
from gatekit.report.page import build_page, headline_numbers
from gatekit.report.rundata import RunFiles
from gatekit.storage import atomic_write_bytes

GENERATOR = f"gatekit {__version__}"


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
    for finding_id in ids:
        base = safe_name(finding_id)
        name, k = base, 1
        while name in names or name == "index.html":
            k += 1
            name = f"{base}-{k}"
        names.append(name)
    return names


def prepare(items: Sequence[tuple[Finding, RunFiles, str]]) -> list[Prepared]:
    """Draw every finding's figures once: (finding, run files, source file name) → Prepared."""
    names = folder_names([finding.id for finding, _, _ in items])
    return [Prepared(finding, name, report_figures(finding, run_files), run_files, source)
            for (finding, run_files, source), name in zip(items, names)]


def _related_links(prepared: Sequence[Prepared], prefix: str) -> dict[str, str]:
    return {p.finding.id: f"{prefix}{p.folder}/index.html" for p in prepared}


def report_files(prepared: Sequence[Prepared], *, with_index: bool = False,
                 generator: str = GENERATOR) -> dict[str, bytes]:
    """Each finding's page and figures under its folder; with_index adds the index and back links."""
    links = _related_links(prepared, "../")
    files: dict[str, bytes] = {}
    for item in prepared:
        page = build_page(item.finding, item.figures, item.run_files, related=links)
        text = report_html(page, index_href="../index.html" if with_index else "", source=item.source,
                           generator=generator)
        files[f"{item.folder}/index.html"] = text.encode("utf-8")
        for image in item.figures.values():
            files[f"{item.folder}/{image.name}"] = image.png
    if with_index:
        files["index.html"] = index_html(index_entries(prepared), generator=generator).encode("utf-8")
    return files


def index_entries(prepared: Sequence[Prepared]) -> list[dict[str, Any]]:
    links = _related_links(prepared, "")
    entries = []
    for item in prepared:
        finding = item.finding
        meta, decision = finding.meta, finding.decision
        delta_text, guard_text = headline_numbers(finding)
        guard_value = next((g.delta for g in finding.guards.values()), None)
        delta = finding.stats.delta_pct
        entries.append({
            "id": meta.id, "date": meta.date, "title": meta.title, "decision": decision.value,
            "variant": decision.severity, "delta_pct": delta if is_number(delta) else None,
            "delta_text": delta_text, "guard_text": guard_text,
            "guard_value": guard_value if is_number(guard_value) else None,
            "tags": list(meta.tags), "href": f"{item.folder}/index.html",
            "related": [(r, links.get(r, "")) for r in meta.related_findings],
        })
    return entries


def markdown_files(prepared: Sequence[Prepared], md_name: str) -> dict[str, bytes]:
    """One Markdown file for all the findings given, its figures in `<stem>-figures/` beside it."""
    figure_dir = f"{Path(md_name).stem}-figures"
    files: dict[str, bytes] = {}
    parts = []
    for item in prepared:
        page = build_page(item.finding, item.figures, item.run_files, figure_prefix=f"{figure_dir}/{item.folder}-")
        parts.append(report_markdown(page))
        for image in item.figures.values():
            files[f"{figure_dir}/{item.folder}-{image.name}"] = image.png
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
            raise GatekitError(f"{path}: cannot write the report: {exc.strerror or exc}") from None
        written.append(path.absolute())
    return written

"""HTML for report pages and the findings index: pure functions returning str.

Every string from a finding is escaped (`html.escape`, quotes included). Narrative text may use inline
`code` and **bold**: the text is escaped first and only then are those two marks turned into tags, so a
finding can never inject markup. Pages are self-contained: inline CSS, images beside the page, no network;
the index's sort buttons are a few lines of plain script and the table reads fine without them.
"""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from gatekit.report.common import IMAGE_LEFT_OUT, LINK_LEFT_OUT
from gatekit.sanitize import safe_url, show_controls

if TYPE_CHECKING:  # the index needs no page, and page.py imports the statistics (scipy)
    from gatekit.report.page import Page

VARIANTS = ("success", "danger", "warning", "info", "note")
LONG_CELL = 28
_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")

CSS = """
:root{--fg:#111827;--muted:#4b5563;--line:#e5e7eb;--bg:#fff;--soft:#f9fafb;--link:#1d4ed8;
--success:#047857;--success-bg:#ecfdf5;--danger:#b91c1c;--danger-bg:#fef2f2;--warning:#92400e;
--warning-bg:#fffbeb;--info:#1e40af;--info-bg:#eff6ff;--note:#374151;--note-bg:#f3f4f6}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--fg);font:16px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,
"Noto Sans","Helvetica Neue",Arial,sans-serif}
main{max-width:64rem;margin:0 auto;padding:1.25rem 1rem 3rem}
a{color:var(--link)}
nav.crumbs{font-size:.9rem;margin-bottom:.75rem}
.eyebrow{color:var(--muted);font-size:.85rem;margin:0 0 .25rem;overflow-wrap:anywhere}
h1{font-size:1.6rem;line-height:1.25;margin:.1rem 0 .5rem;overflow-wrap:anywhere}
details{margin:.5rem 0 1rem}
summary{cursor:pointer;color:var(--link);font-weight:600}
h2{font-size:1.2rem;margin:2rem 0 .6rem;padding-bottom:.25rem;border-bottom:1px solid var(--line)}
.subtitle{color:var(--muted);margin:.25rem 0 .5rem;overflow-wrap:anywhere}
.tags{list-style:none;padding:0;margin:.5rem 0 1rem;display:flex;flex-wrap:wrap;gap:.35rem}
.tags li{background:var(--soft);border:1px solid var(--line);border-radius:999px;padding:.05rem .6rem;
font-size:.8rem;color:var(--muted)}
.lead{font-size:1.05rem;margin:.75rem 0 1rem}
code{font:.88em/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--soft);
border:1px solid var(--line);border-radius:4px;padding:0 .25em;overflow-wrap:anywhere}
.callout{border-left:4px solid var(--info);background:var(--info-bg);border-radius:6px;padding:.7rem .9rem;
margin:1rem 0}
.callout p{margin:.2rem 0}
.callout ul{margin:.3rem 0 .1rem;padding-left:1.2rem}
.callout-label{font-weight:700}
.callout-success{border-color:var(--success);background:var(--success-bg)}
.callout-success .callout-label{color:var(--success)}
.callout-danger{border-color:var(--danger);background:var(--danger-bg)}
.callout-danger .callout-label{color:var(--danger)}
.callout-warning{border-color:var(--warning);background:var(--warning-bg)}
.callout-warning .callout-label{color:var(--warning)}
.callout-info .callout-label{color:var(--info)}
.callout-note{border-color:var(--note);background:var(--note-bg)}
.verdict .callout-label{font-size:1.15rem;letter-spacing:.02em}
.table-wrap{overflow-x:auto;margin:.5rem 0 1rem;border:1px solid var(--line);border-radius:6px}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{padding:.4rem .6rem;border-bottom:1px solid var(--line);vertical-align:top;text-align:left;
white-space:nowrap}
th{background:var(--soft);font-weight:600;white-space:nowrap}
tr:last-child td{border-bottom:0}
td.r,th.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.c,th.c{text-align:center}
td.long{white-space:normal;min-width:14rem;overflow-wrap:anywhere}
tr.unused td{color:var(--muted);background:#fafafa}
tr.fail td{background:var(--danger-bg)}
dl.kv{margin:.5rem 0 1rem;border:1px solid var(--line);border-radius:6px}
dl.kv div{display:grid;grid-template-columns:minmax(8rem,16rem) 1fr;gap:.75rem;padding:.4rem .7rem;
border-bottom:1px solid var(--line)}
dl.kv div:last-child{border-bottom:0}
dt{font-weight:600;overflow-wrap:anywhere}
dd{margin:0;overflow-wrap:anywhere}
figure{margin:1rem 0}
.figure-scroll{overflow-x:auto}
figure img{display:block;max-width:100%;height:auto;border:1px solid var(--line);border-radius:6px}
figcaption{color:var(--muted);font-size:.85rem;margin-top:.3rem}
ul.plain{padding-left:1.2rem}
ul.plain li{margin:.2rem 0;overflow-wrap:anywhere}
.badge{display:inline-block;border-radius:4px;padding:0 .45rem;font-size:.8rem;font-weight:700;
white-space:nowrap}
.badge-success{color:var(--success);background:var(--success-bg)}
.badge-danger{color:var(--danger);background:var(--danger-bg)}
.badge-warning{color:var(--warning);background:var(--warning-bg)}
.badge-info,.badge-note{color:var(--info);background:var(--info-bg)}
th button{font:inherit;font-weight:600;background:none;border:0;padding:0;cursor:pointer;color:var(--link)}
footer{color:var(--muted);font-size:.8rem;margin-top:3rem;border-top:1px solid var(--line);padding-top:.75rem}
@media (max-width:40rem){
body{font-size:15px}
main{padding:.9rem .75rem 2rem}
h1{font-size:1.3rem}
dl.kv div{grid-template-columns:1fr;gap:.1rem}
figure img{max-width:none;width:600px}
td.long{min-width:12rem}
th,td{padding:.35rem .45rem}
}
"""

SORT_SCRIPT = """
document.querySelectorAll("table.sortable th[data-sort] button").forEach(function (button) {
  button.addEventListener("click", function () {
    var th = button.parentElement, table = th.closest("table"), body = table.tBodies[0];
    var index = Array.prototype.indexOf.call(th.parentElement.children, th);
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    var numeric = th.getAttribute("data-sort") === "number";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[index].getAttribute("data-key"), y = b.cells[index].getAttribute("data-key");
      var order = numeric ? (parseFloat(x) || 0) - (parseFloat(y) || 0) : (x < y ? -1 : x > y ? 1 : 0);
      return ascending ? order : -order;
    });
    table.querySelectorAll("th[data-sort]").forEach(function (other) { other.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
"""


def esc(value: Any) -> str:
    # control characters (an ESC from a trainer's output, say) are shown as escapes, never passed through
    return html.escape(show_controls(str(value), keep="\n\t"), quote=True)


def inline(text: Any, plain: bool = False) -> str:
    """Escaped text; unless plain, `code` and **bold** become tags (after escaping, so nothing else can)."""
    text = str(text)
    if plain:
        return esc(text).replace("\n", "<br>")
    parts = []
    for index, piece in enumerate(_CODE.split(text)):
        if index % 2:
            parts.append(f"<code>{esc(piece)}</code>")
        else:
            parts.append(_BOLD.sub(r"<strong>\1</strong>", esc(piece)))
    return "".join(parts).replace("\n", "<br>")


def _variant(value: Any) -> str:
    return value if value in VARIANTS else "info"


def _cell_class(align: Any, text: Any = "") -> str:
    """Alignment, and `long` for text that should wrap (short cells stay on one line, tables scroll)."""
    names = [{"right": "r", "center": "c"}.get(str(align), "")]
    if len(str(text)) > LONG_CELL:
        names.append("long")
    joined = " ".join(n for n in names if n)
    return f' class="{joined}"' if joined else ""


def render_block(block: Mapping[str, Any]) -> str:
    """One block as HTML; an unknown block type is shown as escaped data, never dropped silently."""
    kind = block.get("type")
    plain = bool(block.get("plain"))
    if kind == "lead":
        return f'<p class="lead">{inline(block.get("text", ""), plain)}</p>'
    if kind == "heading":
        return f"<h2>{inline(block.get('text', ''), plain)}</h2>"
    if kind == "table":
        return _table(block, plain)
    if kind == "kv":
        rows = "".join(f"<div><dt>{inline(item.get('key', ''), plain)}</dt><dd>{inline(item.get('value', ''), plain)}"
                       f"</dd></div>" for item in block.get("items", []) if isinstance(item, Mapping))
        return f'<dl class="kv">{rows}</dl>'
    if kind == "callout":
        role = ' role="status"' if block.get("role") == "verdict" else ""
        extra = " verdict" if block.get("role") == "verdict" else ""
        decision = f' data-decision="{esc(block["decision"])}"' if "decision" in block else ""
        body = f"<p>{inline(block.get('text', ''), plain)}</p>" if block.get("text") else ""
        items = block.get("items")
        if items:  # gatekit's own words may mark `code` (marked_items) though the text beside them is plain
            items_plain = plain and not block.get("marked_items")
            body += "<ul>" + "".join(f"<li>{inline(i, items_plain)}</li>" for i in items) + "</ul>"
        label = f'<p class="callout-label">{inline(block.get("label", ""), plain)}</p>' if block.get("label") else ""
        return (f'<aside class="callout callout-{_variant(block.get("variant"))}{extra}"{role}{decision}>'
                f"{label}{body}</aside>")
    if kind == "list":
        items = "".join(f"<li>{inline(item, plain)}</li>" for item in block.get("items", []))
        return f'<ul class="plain">{items}</ul>'
    if kind == "figure":
        url = safe_url(block.get("src"))
        caption = f"<figcaption>{esc(block.get('caption', ''))}</figcaption>"
        if not url:
            return (f'<figure><p class="callout callout-note">{esc(block.get("alt", ""))} <small>({IMAGE_LEFT_OUT})'
                    f"</small></p>{caption}</figure>")
        size = ""
        if block.get("width") and block.get("height"):
            size = f' width="{int(block["width"])}" height="{int(block["height"])}"'
        src = esc(url)
        return (f'<figure><div class="figure-scroll"><a href="{src}"><img src="{src}" '
                f'alt="{esc(block.get("alt", ""))}"{size}></a></div>{caption}</figure>')
    if kind == "details":  # folded: the page's own depth (every statistic), one click away
        inner = "\n".join(render_block(b) for b in block.get("blocks", []) if isinstance(b, Mapping))
        return f"<details><summary>{inline(block.get('summary', ''), plain)}</summary>\n{inner}\n</details>"
    if kind == "links":
        items = []
        for item in block.get("items", []):
            if not isinstance(item, Mapping):
                continue
            text, href = esc(item.get("text", "")), item.get("href", "")
            url = safe_url(href)
            items.append(f'<li><a href="{esc(url)}">{text}</a></li>' if href and url
                         else f"<li>{text} <small>({LINK_LEFT_OUT})</small></li>" if href
                         else f"<li>{text} <small>(not in this set of reports)</small></li>")
        return f'<ul class="plain">{"".join(items)}</ul>'
    shown = json.dumps(dict(block), ensure_ascii=False, indent=1, default=str)
    return (f'<aside class="callout callout-note"><p class="callout-label">Section of unknown type '
            f"{esc(kind)}</p><pre>{esc(shown)}</pre></aside>")


def _table(block: Mapping[str, Any], plain: bool) -> str:
    columns = list(block.get("columns", []))
    align = list(block.get("align", []))
    classes = list(block.get("row_classes", []))
    head = "".join(f"<th{_cell_class(align[i] if i < len(align) else '')}>{inline(c, plain)}</th>"
                   for i, c in enumerate(columns))
    rows = []
    for r, row in enumerate(block.get("rows", [])):
        cells = "".join(f"<td{_cell_class(align[i] if i < len(align) else '', cell)}>{inline(cell, plain)}</td>"
                        for i, cell in enumerate(row))
        row_class = f' class="{esc(classes[r])}"' if r < len(classes) and classes[r] else ""
        rows.append(f"<tr{row_class}>{cells}</tr>")
    return (f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>")


def _document(title: str, body: str, *, script: str = "") -> str:
    script_tag = f"<script>{script}</script>" if script else ""
    return ("<!doctype html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<meta name="referrer" content="no-referrer">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n"
            f"<body><main>\n{body}\n</main>{script_tag}</body></html>\n")


def report_html(page: Page, *, index_href: str = "", source: str = "", generator: str = "gatekit") -> str:
    """One finding's report page."""
    return blocks_html(page.title, page.eyebrow, page.subtitle, page.blocks, tags=page.tags, index_href=index_href,
                       source=source, generator=generator, document_title=f"{page.title} — {page.decision}")


def blocks_html(title: str, eyebrow: str, subtitle: str, blocks: Sequence[Mapping[str, Any]], *,
                tags: Sequence[str] = (), index_href: str = "", source: str = "", generator: str = "gatekit",
                document_title: str = "") -> str:
    """A report page: the header (eyebrow, title, subtitle, tags), the blocks, the footer (a finding's page,
    a bisect finding's)."""
    crumbs = f'<nav class="crumbs"><a href="{esc(index_href)}">← all findings</a></nav>' if index_href else ""
    tag_items = "".join(f"<li>{esc(t)}</li>" for t in tags)
    header = (f"<header>{crumbs}<p class=\"eyebrow\">{esc(eyebrow)}</p><h1>{esc(title)}</h1>"
              f"<p class=\"subtitle\">{inline(subtitle)}</p>"
              + (f'<ul class="tags">{tag_items}</ul>' if tag_items else "") + "</header>")
    body = "\n".join(render_block(block) for block in blocks)
    origin = f" from {esc(source)}" if source else ""
    footer = f"<footer>Rendered by {esc(generator)}{origin}.{_figures_note(blocks)}</footer>"
    return _document(document_title or title, f"{header}\n{body}\n{footer}")


def _figures_note(blocks: Sequence[Mapping[str, Any]]) -> str:
    """What the footer says of the figures gatekit drew beside the page (`role = "drawn"`; people's sections
    cannot carry a role): their files and format."""
    names = [str(b.get("src", "")) for b in blocks
             if b.get("type") == "figure" and b.get("role") == "drawn" and safe_url(b.get("src"))]
    if not names:
        return ""
    kinds = sorted({name.rsplit(".", 1)[-1].upper() for name in names if "." in name})
    return f" Figures: {', '.join(esc(n) for n in names)} ({', '.join(kinds) or 'image'} files beside this page)."


def index_html(entries: Sequence[Mapping[str, Any]], *, title: str = "Findings", generator: str = "gatekit") -> str:
    """The findings index: date, title, verdict, Δ, guard Δ, tags, related; newest first, sortable.

    Each entry: id, date, title, decision, variant, delta_pct (number or None), delta_text, guard_text,
    guard_value (number or None), tags, href, related [(id, href or "")].
    """
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry["decision"]] = counts.get(entry["decision"], 0) + 1
    summary = ", ".join(f"{n} {esc(d.replace('_', ' '))}" for d, n in sorted(counts.items()))
    rows = []
    for e in sorted(entries, key=lambda e: (e["date"], e["id"]), reverse=True):
        related = ", ".join(f'<a href="{esc(h)}">{esc(i)}</a>' if h else esc(i) for i, h in e["related"]) or "—"
        tags = " ".join(f"<code>{esc(t)}</code>" for t in e["tags"])
        delta_key = "" if e["delta_pct"] is None else repr(float(e["delta_pct"]))
        guard_key = "" if e["guard_value"] is None else repr(float(e["guard_value"]))
        rows.append(
            f'<tr><td data-key="{esc(e["date"])}" class="date">{esc(e["date"])}</td>'
            f'<td class="long" data-key="{esc(e["title"])}"><a href="{esc(e["href"])}">{esc(e["title"])}</a><br>'
            f'<small>{esc(e["id"])}</small></td>'
            f'<td data-key="{esc(e["decision"])}"><span class="badge badge-{_variant(e["variant"])}">'
            f'{esc(e["decision"].replace("_", " "))}</span></td>'
            f'<td class="r" data-key="{esc(delta_key)}">{esc(e["delta_text"])}</td>'
            f'<td{_cell_class("right", e["guard_text"])} data-key="{esc(guard_key)}">{esc(e["guard_text"])}</td>'
            f'<td class="long" data-key="{esc(" ".join(e["tags"]))}">{tags}</td>'
            f'<td class="long" data-key="">{related}</td></tr>')
    head = ('<tr><th data-sort="text" aria-sort="descending"><button type="button">date</button></th>'
            '<th data-sort="text"><button type="button">finding</button></th>'
            '<th data-sort="text"><button type="button">verdict</button></th>'
            '<th class="r" data-sort="number"><button type="button">Δ</button></th>'
            '<th class="r" data-sort="number"><button type="button">guard Δ</button></th>'
            "<th>tags</th><th>related</th></tr>")
    body = (f"<header><p class=\"eyebrow\">{len(entries)} findings: {summary}</p><h1>{esc(title)}</h1>"
            "<p class=\"subtitle\">Newest first; the column buttons sort. Δ is the primary metric's relative "
            "change, on vs off; guard Δ is the first quality guard's on − off.</p></header>\n"
            f'<div class="table-wrap"><table class="sortable"><thead>{head}</thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>\n"
            f"<footer>Rendered by {esc(generator)}.</footer>")
    return _document(title, body, script=SORT_SCRIPT)

"""GitHub-flavoured Markdown for report pages: a pure function returning str.

Text from a finding is made literal: characters Markdown would act on are backslash-escaped and `<`, `>`
and `&` become entities, so a metric called `<script>` or a label with `|` reads as written and never
breaks a table. Narrative text keeps its inline `code` and **bold** (code spans are literal by nature).
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import quote

from gatekit.report.common import IMAGE_LEFT_OUT, LINK_LEFT_OUT
from gatekit.sanitize import safe_url, show_controls

if TYPE_CHECKING:  # the page model draws nothing, but keep exports (which use `literal`) free of it
    from gatekit.report.page import Page

_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_CODE = re.compile(r"(`[^`]+`)")


# GitHub turns `@name` into a mention (a PR comment notifies that user or team) and a bare `https://…`,
# `www.…` or `a@b.org` into a link. Text from a finding (a trainer's or a user's field) may do neither: a word
# joiner (U+2060, invisible) after each `@` and after a URL's scheme or `www` breaks them, and the text reads
# the same. Code spans need none: GitHub links nothing inside them.
WORD_JOINER = "\u2060"
_AUTOLINKS = re.compile(r"@|(?i:\b(?:https?|ftp)(?=://)|\bwww(?=\.))")


def unlinked(text: str) -> str:
    """`text` with no mention and no bare URL for GitHub to act on (see WORD_JOINER)."""
    return _AUTOLINKS.sub(lambda match: match.group() + WORD_JOINER, text)


def literal(text: Any) -> str:
    """Plain text that Markdown shows exactly as written (one line), with no mention or bare URL for GitHub
    to act on."""
    text = show_controls(str(text).replace("\r", " ").replace("\n", " "))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return unlinked(_SPECIAL.sub(r"\\\1", text))


def narrative(text: Any) -> str:
    """Narrative text: its `code` spans and **bold** kept, raw HTML neutralised, `|` escaped for tables, no
    mention or bare URL for GitHub to act on outside code spans."""
    out = []
    for index, piece in enumerate(_CODE.split(show_controls(str(text).replace("\r", " ").replace("\n", " ")))):
        if index % 2:
            out.append(piece.replace("|", "\\|"))
        else:
            out.append(unlinked(piece.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                                .replace("|", "\\|")))
    return "".join(out)


def destination(url: str) -> str:
    """A link destination Markdown keeps whole: spaces, parentheses, `<`, `>` and other characters that
    could end it or start markup are percent-encoded (the URL itself is judged by sanitize.safe_url)."""
    return quote(url, safe="!#$%&'*+,-./:;=?@[]_~")


def _text(value: Any, plain: bool) -> str:
    return literal(value) if plain else narrative(value)


def render_block(block: Mapping[str, Any]) -> str:
    kind = block.get("type")
    plain = bool(block.get("plain"))
    if kind == "lead":
        return _text(block.get("text", ""), plain)
    if kind == "heading":
        return f"## {_text(block.get('text', ''), plain)}"
    if kind == "table":
        columns = [_text(c, plain) or " " for c in block.get("columns", [])]
        align = list(block.get("align", []))
        rule = [("---:" if i < len(align) and align[i] == "right" else
                 ":---:" if i < len(align) and align[i] == "center" else "---") for i in range(len(columns))]
        lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join(rule) + " |"]
        for row in block.get("rows", []):
            cells = [_text(c, plain) for c in row] + [""] * (len(columns) - len(row))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    if kind == "kv":
        return "\n".join(f"- **{_text(i.get('key', ''), plain)}**: {_text(i.get('value', ''), plain)}"
                         for i in block.get("items", []) if isinstance(i, Mapping))
    if kind == "callout":
        lines = []
        if block.get("label"):
            lines.append(f"> **{_text(block['label'], plain)}**")
        if block.get("text"):
            lines += [">"] if lines else []
            lines.append(f"> {_text(block['text'], plain)}")
        items_plain = plain and not block.get("marked_items")  # gatekit's own words may mark `code`
        lines += [f"> - {_text(item, items_plain)}" for item in block.get("items", []) or []]
        return "\n".join(lines)
    if kind == "list":
        return "\n".join(f"- {_text(item, plain)}" for item in block.get("items", []))
    if kind == "figure":
        url = safe_url(block.get("src"))
        caption = f"*{literal(block.get('caption', ''))}*"
        if not url:
            return f"{literal(block.get('alt', ''))} ({IMAGE_LEFT_OUT})\n\n{caption}"
        return f"![{literal(block.get('alt', ''))}]({destination(url)})\n\n{caption}"
    if kind == "details":  # GitHub folds it as the HTML page does; the summary is HTML there, escaped as such
        inner = "\n\n".join(render_block(b) for b in block.get("blocks", []) if isinstance(b, Mapping))
        summary = html.escape(show_controls(str(block.get("summary", ""))), quote=True)
        return f"<details><summary>{summary}</summary>\n\n{inner}\n\n</details>"
    if kind == "links":
        items = []
        for item in block.get("items", []):
            if not isinstance(item, Mapping):
                continue
            text, href = literal(item.get("text", "")), item.get("href", "")
            url = safe_url(href)
            items.append(f"- [{text}]({destination(url)})" if href and url
                         else f"- {text} ({LINK_LEFT_OUT})" if href else f"- {text} (not in this set of reports)")
        return "\n".join(items)
    return f"> Section of unknown type {literal(kind)} (shown in the HTML report only)"


def report_markdown(page: Page) -> str:
    """One finding's report as Markdown; figures are linked by the paths the page blocks carry."""
    lines = [f"# {literal(page.title)}", "", f"*{literal(page.eyebrow)}*", "", narrative(page.subtitle)]
    if page.tags:
        lines += ["", "Tags: " + ", ".join(f"`{t}`" if "`" not in t else literal(t) for t in page.tags)]
    for block in page.blocks:
        lines += ["", render_block(block)]
    return "\n".join(lines).rstrip() + "\n"

"""A small plotting kit for the report's figures: axes of data-space marks rendered to a standalone SVG.

The report's figures are simple (points, lines, bands, bars, labels, a legend), and a findings site draws
thousands of them: built here as text they cost about a millisecond each, where matplotlib took ~0.2 s of
CPU per figure. The output is deterministic (no ids, dates or hashes; numbers at fixed precision), so the
same figure gives the same bytes. Every string is escaped for XML and control characters are shown as
escapes, so a trainer-supplied label cannot inject markup. Text widths are estimated from the character
count (the SVG names a font family, it embeds none), so margins leave room for the widest estimate.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from gatekit.sanitize import show_controls

FONT = "system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',Arial,sans-serif"
LABEL_PX = 13.5  # axis labels (matplotlib's 10 pt at the page's 100 px per inch)
TICK_PX = 12.5
LEGEND_PX = 11.5
NOTE_PX = 11.0
CHAR_EM = 0.58  # an average character's width in em, for the margin and legend estimates
GRID = "#e5e7eb"
AXIS = "#374151"
TEXT = "#111827"
DASHES = {"-": "", "--": "6,3", ":": "1.5,2.5", "-.": "6,2,1.5,2"}


def text_width(text: str, size: float) -> float:
    return len(text) * size * CHAR_EM


def esc(text: object) -> str:
    return html.escape(show_controls(str(text)), quote=True)


def num(value: float) -> str:
    """A coordinate at 0.01 px, without trailing zeros (the same figure gives the same bytes)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def nice_ticks(low: float, high: float, target: int = 6) -> list[float]:
    """Round tick values covering [low, high], about `target` of them, on steps of 1, 2, 2.5 or 5 × 10^k."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * 0.999)
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def tick_text(values: Sequence[float]) -> list[str]:
    """Tick labels with as few decimals as tell the ticks apart."""
    if len(values) < 2:
        return [f"{v:g}" for v in values]
    step = min(abs(b - a) for a, b in zip(values, values[1:])) or 1.0
    decimals = 0
    while decimals < 8 and abs(round(step, decimals) - step) > step * 1e-6:
        decimals += 1
    big = max(abs(v) for v in values) >= 1e6
    return [f"{v:.3g}" if big else f"{v:.{decimals}f}" for v in values]


@dataclass
class Mark:
    kind: str
    data: dict[str, Any]
    z: int = 2


@dataclass
class LegendEntry:
    label: str
    kind: str  # line | point | cross | patch | band | errorbar
    color: str
    dash: str = "-"
    alpha: float = 1.0
    hatch: bool = False


@dataclass
class Axes:
    """One plot: marks in data coordinates, the axes' labels and ticks, and a legend; `svg()` renders it."""

    width: float
    height: float
    marks: list[Mark] = field(default_factory=list)
    legend: list[LegendEntry] = field(default_factory=list)
    legend_at: str = "best"  # best | above
    xlabel: str = ""
    ylabel: str = ""
    xlim: list[float | None] = field(default_factory=lambda: [None, None])
    ylim: list[float | None] = field(default_factory=lambda: [None, None])
    xticks: list[tuple[float, str]] | None = None
    yticks: list[tuple[float, str]] | None = None
    xtick_rotation: float = 0.0
    x_margin: float = 0.05
    y_margin: float = 0.05
    invert_y: bool = False
    left_px: float | None = None  # a fixed left margin, so panels stacked by `stack` share their x axis
    ids: str = ""  # a prefix for the clip and pattern ids, unique per panel of one SVG

    # -- marks (x, y in data coordinates) ------------------------------------------------------------
    def line(self, xs: Sequence[float], ys: Sequence[float], color: str, *, dash: str = "-", width: float = 1.3,
             alpha: float = 1.0, marker: bool = False, z: int = 2) -> None:
        self.marks.append(Mark("line", {"xs": list(xs), "ys": list(ys), "color": color, "dash": dash,
                                        "width": width, "alpha": alpha, "marker": marker}, z))

    def points(self, xy: Sequence[tuple[float, float]], color: str, *, radius: float = 4.0,
               hollow_cross: bool = False, alpha: float = 1.0, z: int = 3) -> None:
        self.marks.append(Mark("points", {"xy": list(xy), "color": color, "r": radius, "cross": hollow_cross,
                                          "alpha": alpha}, z))

    def hline(self, y: float, color: str, *, dash: str = "-", width: float = 1.0, z: int = 2) -> None:
        self.marks.append(Mark("hline", {"y": y, "color": color, "dash": dash, "width": width}, z))

    def vline(self, x: float, color: str, *, dash: str = "-", width: float = 1.0, z: int = 2) -> None:
        self.marks.append(Mark("vline", {"x": x, "color": color, "dash": dash, "width": width}, z))

    def hspan(self, y0: float, y1: float, color: str, alpha: float, z: int = 1) -> None:
        self.marks.append(Mark("hspan", {"y0": y0, "y1": y1, "color": color, "alpha": alpha}, z))

    def rect(self, x0: float, x1: float, y0: float, y1: float, color: str, *, alpha: float = 1.0,
             hatch: bool = False, z: int = 1) -> None:
        self.marks.append(Mark("rect", {"x0": x0, "x1": x1, "y0": y0, "y1": y1, "color": color, "alpha": alpha,
                                        "hatch": hatch}, z))

    def xerror(self, y: float, x0: float, x1: float, color: str, *, cap_px: float = 4.0, z: int = 2) -> None:
        self.marks.append(Mark("xerror", {"y": y, "x0": x0, "x1": x1, "color": color, "cap": cap_px}, z))

    def text(self, x: float, y: float, text: str, *, dx: float = 0.0, dy: float = 0.0, anchor: str = "start",
             size: float = NOTE_PX, color: str = TEXT, dodge: bool = False, z: int = 4) -> None:
        """A label at (x, y) offset by (dx, dy) px (dy up, as matplotlib's offset points), vertically centred.
        With dodge, a label that would print over an earlier dodging label moves down a line until it does not."""
        self.marks.append(Mark("text", {"x": x, "y": y, "text": text, "dx": dx, "dy": dy, "anchor": anchor,
                                        "size": size, "color": color, "dodge": dodge}, z))

    def add_legend(self, label: str, kind: str, color: str, **style: Any) -> None:
        self.legend.append(LegendEntry(label, kind, color, **style))

    # -- layout ----------------------------------------------------------------------------------------
    def _extent(self, axis: str) -> tuple[float, float]:
        values = [value for mark in self.marks for value in _data_values(mark, axis)]
        ticks = self.xticks if axis == "x" else self.yticks
        values += [position for position, _ in ticks or ()]
        finite = [float(v) for v in values if math.isfinite(v)]
        if not finite:
            return 0.0, 1.0
        low, high = min(finite), max(finite)
        if high == low:
            pad = abs(low) * 0.05 or 0.5
            return low - pad, high + pad
        margin = (high - low) * (self.x_margin if axis == "x" else self.y_margin)
        return low - margin, high + margin

    def _limits(self, axis: str) -> tuple[float, float]:
        low, high = self._extent(axis)
        fixed = self.xlim if axis == "x" else self.ylim
        low = fixed[0] if fixed[0] is not None else low
        high = fixed[1] if fixed[1] is not None else high
        if high <= low:
            high = low + 1.0
        return low, high

    def _ticks(self, axis: str, low: float, high: float) -> list[tuple[float, str]]:
        given = self.xticks if axis == "x" else self.yticks
        if given is not None:
            return [(p, t) for p, t in given if low <= p <= high]
        values = [v for v in nice_ticks(low, high, 7 if axis == "x" else 6) if low - 1e-9 <= v <= high + 1e-9]
        return list(zip(values, tick_text(values)))

    def _legend_size(self) -> tuple[float, float]:
        widest = max((text_width(e.label, LEGEND_PX) for e in self.legend), default=0.0)
        return widest + 40.0, 8.0 + len(self.legend) * (LEGEND_PX + 5.0)

    def natural_left(self) -> float:
        """The left margin this plot's y tick labels and label need."""
        y_low, y_high = self._limits("y")
        widest_y = max((text_width(t, TICK_PX) for _, t in self._ticks("y", y_low, y_high)), default=0.0)
        return 10.0 + (LABEL_PX + 8.0 if self.ylabel else 0.0) + widest_y + 8.0

    def svg(self) -> bytes:
        x_low, x_high = self._limits("x")
        y_low, y_high = self._limits("y")
        x_ticks, y_ticks = self._ticks("x", x_low, x_high), self._ticks("y", y_low, y_high)
        left = self.left_px if self.left_px is not None else self.natural_left()
        rotation = math.radians(self.xtick_rotation)
        widest_x = max((text_width(t, TICK_PX) for _, t in x_ticks), default=0.0)
        x_tick_height = TICK_PX + widest_x * math.sin(rotation)
        bottom = 8.0 + x_tick_height + 6.0 + (LABEL_PX + 6.0 if self.xlabel else 0.0)
        top = 10.0 + (LEGEND_PX + 10.0 if self.legend and self.legend_at == "above" else 0.0)
        plot_w, plot_h = self.width - left - 16.0, max(30.0, self.height - top - bottom)
        for mark in self.marks:  # narrow the axes so that labels after a line's end stay inside the figure
            d = mark.data
            share = (d["x"] - x_low) / (x_high - x_low) if mark.kind == "text" else 0.0
            if mark.kind == "text" and d["anchor"] == "start" and share > 0:
                room = self.width - 4.0 - left - d["dx"] - text_width(str(d["text"]), d["size"])
                plot_w = min(plot_w, room / share)
        plot_w = max(plot_w, 0.6 * (self.width - left))  # a very long label may be cut, never squeeze the axes

        def px(x: float) -> float:
            return left + (x - x_low) / (x_high - x_low) * plot_w

        def py(y: float) -> float:
            share = (y - y_low) / (y_high - y_low)
            return top + (share if self.invert_y else 1.0 - share) * plot_h

        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(self.width)}" height="{num(self.height)}" '
               f'viewBox="0 0 {num(self.width)} {num(self.height)}" font-family="{FONT}" fill="{TEXT}">',
               '<rect width="100%" height="100%" fill="#fff"/>']
        if any(m.kind == "rect" and m.data["hatch"] for m in self.marks):
            out.append(f'<defs><pattern id="{self.ids}hatch" width="6" height="6" patternUnits="userSpaceOnUse">'
                       '<path d="M0,6L6,0M-1,1L1,-1M5,7L7,5" stroke="#000" stroke-width="0.8"/></pattern></defs>')
        out.append(f'<clipPath id="{self.ids}plot"><rect x="{num(left)}" y="{num(top)}" width="{num(plot_w)}" '
                   f'height="{num(plot_h)}"/></clipPath>')
        # grid first (below everything), then the marks by z, then the axes and their labels
        grid = [f'<line x1="{num(px(v))}" y1="{num(top)}" x2="{num(px(v))}" y2="{num(top + plot_h)}"/>'
                for v, _ in x_ticks]
        grid += [f'<line x1="{num(left)}" y1="{num(py(v))}" x2="{num(left + plot_w)}" y2="{num(py(v))}"/>'
                 for v, _ in y_ticks]
        out.append(f'<g class="grid" stroke="{GRID}" stroke-width="0.8">{"".join(grid)}</g>')
        _dodge([m for m in self.marks if m.kind == "text" and m.data.get("dodge")], px, py, top, top + plot_h)
        body: list[str] = []
        for mark in sorted(self.marks, key=lambda m: m.z):
            body.append(_draw(mark, px, py, left, top, plot_w, plot_h, self.ids))
        out.append(f'<g clip-path="url(#{self.ids}plot)">{"".join(b for b in body if b and not b.startswith("<text"))}</g>')
        out += [b for b in body if b.startswith("<text")]  # labels may reach past the axes, as in matplotlib
        bottom_y = top + plot_h
        out.append(f'<g stroke="{AXIS}" stroke-width="0.8"><line x1="{num(left)}" y1="{num(top)}" '
                   f'x2="{num(left)}" y2="{num(bottom_y)}"/><line x1="{num(left)}" y1="{num(bottom_y)}" '
                   f'x2="{num(left + plot_w)}" y2="{num(bottom_y)}"/></g>')
        labels = []
        for v, t in x_ticks:
            x = px(v)
            labels.append(f'<line x1="{num(x)}" y1="{num(bottom_y)}" x2="{num(x)}" y2="{num(bottom_y + 4)}" '
                          f'stroke="{AXIS}" stroke-width="0.8"/>')
            if self.xtick_rotation:
                labels.append(f'<text x="{num(x)}" y="{num(bottom_y + 8 + TICK_PX * 0.8)}" font-size="{TICK_PX}" '
                              f'text-anchor="end" transform="rotate(-{num(self.xtick_rotation)} {num(x)} '
                              f'{num(bottom_y + 8)})">{esc(t)}</text>')
            else:
                labels.append(f'<text x="{num(x)}" y="{num(bottom_y + 6 + TICK_PX)}" font-size="{TICK_PX}" '
                              f'text-anchor="middle">{esc(t)}</text>')
        for v, t in y_ticks:
            y = py(v)
            labels.append(f'<line x1="{num(left - 4)}" y1="{num(y)}" x2="{num(left)}" y2="{num(y)}" '
                          f'stroke="{AXIS}" stroke-width="0.8"/>')
            labels.append(f'<text x="{num(left - 7)}" y="{num(y + TICK_PX * 0.35)}" font-size="{TICK_PX}" '
                          f'text-anchor="end">{esc(t)}</text>')
        if self.xlabel:
            labels.append(f'<text x="{num(left + plot_w / 2)}" y="{num(self.height - 8)}" font-size="{LABEL_PX}" '
                          f'text-anchor="middle">{esc(self.xlabel)}</text>')
        if self.ylabel:
            cx, cy = 10.0 + LABEL_PX * 0.8, top + plot_h / 2
            labels.append(f'<text x="{num(cx)}" y="{num(cy)}" font-size="{LABEL_PX}" text-anchor="middle" '
                          f'transform="rotate(-90 {num(cx)} {num(cy)})">{esc(self.ylabel)}</text>')
        out.append(f'<g class="axes">{"".join(labels)}</g>')
        if self.legend:
            out.append(self._legend_svg(px, py, left, top, plot_w, plot_h))
        out.append("</svg>\n")
        return "".join(out).encode("utf-8")

    def _legend_svg(self, px: Any, py: Any, left: float, top: float, plot_w: float, plot_h: float) -> str:
        row = LEGEND_PX + 5.0
        if self.legend_at == "above":
            widths = [text_width(e.label, LEGEND_PX) + 34.0 for e in self.legend]
            x = left + (plot_w - sum(widths)) / 2
            parts = []
            for entry, w in zip(self.legend, widths):
                parts.append(_legend_entry(entry, x, 6.0 + row / 2))
                x += w
            return f'<g class="legend">{"".join(parts)}</g>'
        width, height = self._legend_size()
        pad = 6.0
        # matplotlib's "best": the first of its nine places (in its order) that covers the fewest data points
        x_right, x_left, x_mid = left + plot_w - width - pad, left + pad, left + (plot_w - width) / 2
        y_top, y_bottom, y_mid = top + pad, top + plot_h - height - pad, top + (plot_h - height) / 2
        places = [(x_right, y_top), (x_left, y_top), (x_left, y_bottom), (x_right, y_bottom), (x_right, y_mid),
                  (x_left, y_mid), (x_mid, y_bottom), (x_mid, y_top), (x_mid, y_mid)]
        drawn = _drawn_points(self.marks, px, py)
        x0, y0 = min(places, key=lambda c: sum(1 for (x, y) in drawn
                                               if c[0] <= x <= c[0] + width and c[1] <= y <= c[1] + height))
        parts = [f'<rect x="{num(x0)}" y="{num(y0)}" width="{num(width)}" height="{num(height)}" rx="3" '
                 f'fill="#fff" fill-opacity="0.9" stroke="#d1d5db" stroke-width="0.8"/>']
        for k, entry in enumerate(self.legend):
            parts.append(_legend_entry(entry, x0 + 6.0, y0 + 4.0 + row * k + row / 2))
        return f'<g class="legend">{"".join(parts)}</g>'


DODGE_LINES = (0, -1, 1, -2, 2, -3, 3, -4, 4)  # label lines a dodging label may move: below, above, ...


def stack(panels: Sequence[Axes]) -> bytes:
    """Panels one above the other in one SVG, sharing the widest left margin (so a shared x axis lines up)."""
    left = max(panel.natural_left() for panel in panels)
    width, parts, y = max(panel.width for panel in panels), [], 0.0
    for k, panel in enumerate(panels):
        panel.left_px, panel.ids = left, f"p{k}-"
        inner = panel.svg().decode("utf-8").rstrip("\n")
        parts.append(inner.replace("<svg ", f'<svg x="0" y="{num(y)}" ', 1))
        y += panel.height
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(width)}" height="{num(y)}" '
            f'viewBox="0 0 {num(width)} {num(y)}">{"".join(parts)}</svg>\n').encode("utf-8")


def _dodge(labels: Sequence[Mark], px: Any, py: Any, top: float, bottom: float) -> None:
    """Move each dodging label the fewest lines up or down (its dy), staying between top and bottom, so that its
    box overlaps none placed before it; where no such place is within four lines, it stays where it was."""
    placed: list[tuple[float, float, float, float]] = []
    for mark in labels:
        d = mark.data
        width, size = text_width(str(d["text"]), d["size"]), d["size"]
        x0 = px(d["x"]) + d["dx"] - (width if d["anchor"] == "end" else width / 2 if d["anchor"] == "middle" else 0)

        def box(lines: int) -> tuple[float, float, float, float]:
            y0 = py(d["y"]) - d["dy"] - size / 2 - lines * (size + 1.0)
            return x0, y0, x0 + width, y0 + size

        free = next((lines for lines in DODGE_LINES if top <= box(lines)[1] and box(lines)[3] <= bottom
                     and not any(box(lines)[0] < b[2] and b[0] < box(lines)[2] and box(lines)[1] < b[3]
                                and b[1] < box(lines)[3] for b in placed)), 0)
        d["dy"] += free * (size + 1.0)
        placed.append(box(0))


# the data coordinates each kind of mark spans, on the x and on the y axis (a line across the axes spans none)
_X_KEYS = {"line": "xs", "vline": "x", "rect": ("x0", "x1"), "xerror": ("x0", "x1"), "text": "x"}
_Y_KEYS = {"line": "ys", "hline": "y", "hspan": ("y0", "y1"), "rect": ("y0", "y1"), "xerror": "y", "text": "y"}


def _data_values(mark: Mark, axis: str) -> list[float]:
    """The data coordinates a mark spans on one axis, for the axis limits."""
    d = mark.data
    if mark.kind == "points":
        return [point[0 if axis == "x" else 1] for point in d["xy"]]
    keys = (_X_KEYS if axis == "x" else _Y_KEYS).get(mark.kind, ())
    if isinstance(keys, str):
        value = d[keys]
        return list(value) if isinstance(value, list) else [value]
    return [d[key] for key in keys]


def _stroke(color: str, width: float, dash: str, alpha: float = 1.0) -> str:
    text = f'stroke="{color}" stroke-width="{num(width)}"'
    if DASHES.get(dash):
        text += f' stroke-dasharray="{DASHES[dash]}"'
    if alpha < 1.0:
        text += f' stroke-opacity="{num(alpha)}"'
    return text


def _cross(x: float, y: float, r: float) -> str:
    """matplotlib's filled X marker as an outline: a cross of two bars of width r/2."""
    a, b = r, r * 0.35
    points = [(0, b), (a - b, a), (a, a - b), (b, 0), (a, b - a), (a - b, -a), (0, -b), (b - a, -a), (-a, b - a),
              (-b, 0), (-a, a - b), (b - a, a)]
    return "M" + "L".join(f"{num(x + dx)},{num(y - dy)}" for dx, dy in points) + "Z"


def _draw(mark: Mark, px: Any, py: Any, left: float, top: float, plot_w: float, plot_h: float, ids: str) -> str:
    d = mark.data
    if mark.kind == "line":
        points = [(px(x), py(y)) for x, y in zip(d["xs"], d["ys"])]
        if not points:
            return ""
        text = ""
        if len(points) > 1:
            path = "M" + "L".join(f"{num(x)},{num(y)}" for x, y in points)
            text = (f'<path class="series" d="{path}" fill="none" {_stroke(d["color"], d["width"], d["dash"], d["alpha"])} '
                    'stroke-linejoin="round"/>')
        if d["marker"] or len(points) == 1:
            text += "".join(f'<circle cx="{num(x)}" cy="{num(y)}" r="2.2" fill="{d["color"]}"/>' for x, y in points)
        return text
    if mark.kind == "points":
        if d["cross"]:
            return "".join(f'<path d="{_cross(px(x), py(y), d["r"] + 1)}" fill="#fff" stroke="{d["color"]}" '
                           'stroke-width="1.2"/>' for x, y in d["xy"])
        opacity = f' fill-opacity="{num(d["alpha"])}"' if d["alpha"] < 1.0 else ""
        return "".join(f'<circle cx="{num(px(x))}" cy="{num(py(y))}" r="{num(d["r"])}" fill="{d["color"]}"{opacity}/>'
                       for x, y in d["xy"])
    if mark.kind == "hline":
        y = py(d["y"])
        return (f'<line x1="{num(left)}" y1="{num(y)}" x2="{num(left + plot_w)}" y2="{num(y)}" '
                f'{_stroke(d["color"], d["width"], d["dash"])}/>')
    if mark.kind == "vline":
        x = px(d["x"])
        return (f'<line x1="{num(x)}" y1="{num(top)}" x2="{num(x)}" y2="{num(top + plot_h)}" '
                f'{_stroke(d["color"], d["width"], d["dash"])}/>')
    if mark.kind == "hspan":
        y0, y1 = sorted((py(d["y0"]), py(d["y1"])))
        return (f'<rect x="{num(left)}" y="{num(y0)}" width="{num(plot_w)}" height="{num(y1 - y0)}" '
                f'fill="{d["color"]}" fill-opacity="{num(d["alpha"])}"/>')
    if mark.kind == "rect":
        x0, x1 = sorted((px(d["x0"]), px(d["x1"])))
        y0, y1 = sorted((py(d["y0"]), py(d["y1"])))
        shape = f'x="{num(x0)}" y="{num(y0)}" width="{num(x1 - x0)}" height="{num(y1 - y0)}"'
        text = f'<rect {shape} fill="{d["color"]}" fill-opacity="{num(d["alpha"])}"/>'
        if d["hatch"]:
            text += f'<rect {shape} fill="url(#{ids}hatch)" stroke="#000" stroke-width="0.8"/>'
        return text
    if mark.kind == "xerror":
        x0, x1, y, cap = px(d["x0"]), px(d["x1"]), py(d["y"]), d["cap"]
        return (f'<path d="M{num(x0)},{num(y)}L{num(x1)},{num(y)}M{num(x0)},{num(y - cap)}L{num(x0)},{num(y + cap)}'
                f'M{num(x1)},{num(y - cap)}L{num(x1)},{num(y + cap)}" {_stroke(d["color"], 1.3, "-")}/>')
    if mark.kind == "text":
        x, y = px(d["x"]) + d["dx"], py(d["y"]) - d["dy"]
        return (f'<text x="{num(x)}" y="{num(y + d["size"] * 0.35)}" font-size="{num(d["size"])}" '
                f'text-anchor="{d["anchor"]}" fill="{d["color"]}">{esc(d["text"])}</text>')
    raise ValueError(f"unknown mark {mark.kind}")


def _drawn_points(marks: Sequence[Mark], px: Any, py: Any) -> list[tuple[float, float]]:
    """Where the data is drawn (points, line vertices, bar ends, labels), for placing the legend clear of it."""
    found: list[tuple[float, float]] = []
    for mark in marks:
        d = mark.data
        if mark.kind == "line":  # its vertices and points every ~10 px along its segments
            vertices = [(px(x), py(y)) for x, y in zip(d["xs"], d["ys"])]
            found += vertices
            for (x0, y0), (x1, y1) in zip(vertices, vertices[1:]):
                steps = min(100, int(math.hypot(x1 - x0, y1 - y0) / 10.0))
                found += [(x0 + (x1 - x0) * k / steps, y0 + (y1 - y0) * k / steps) for k in range(1, steps)]
        elif mark.kind in ("hline", "vline"):
            continue  # spans the whole axes: no place avoids it
        elif mark.kind == "points":
            found += [(px(x), py(y)) for x, y in d["xy"]]
        elif mark.kind == "rect":
            found += [(px(x), py(y)) for x in (d["x0"], (d["x0"] + d["x1"]) / 2, d["x1"])
                      for y in (d["y0"], d["y1"])]
        elif mark.kind == "text":
            found.append((px(d["x"]) + d["dx"], py(d["y"]) - d["dy"]))
        elif mark.kind == "xerror":
            found += [(px(d["x0"]), py(d["y"])), (px(d["x1"]), py(d["y"]))]
    return found


def _legend_entry(entry: LegendEntry, x: float, y: float) -> str:
    """One legend row: its key (a short line, a point, a patch ...) at x, its label after it, centred on y."""
    if entry.kind == "line":
        key = (f'<line x1="{num(x)}" y1="{num(y)}" x2="{num(x + 22)}" y2="{num(y)}" '
               f'{_stroke(entry.color, 1.5, entry.dash)}/>')
    elif entry.kind == "point":
        opacity = f' fill-opacity="{num(entry.alpha)}"' if entry.alpha < 1.0 else ""
        key = f'<circle cx="{num(x + 11)}" cy="{num(y)}" r="4" fill="{entry.color}"{opacity}/>'
    elif entry.kind == "cross":
        key = f'<path d="{_cross(x + 11, y, 5)}" fill="#fff" stroke="{entry.color}" stroke-width="1.2"/>'
    elif entry.kind == "errorbar":
        key = (f'<path d="M{num(x)},{num(y)}L{num(x + 22)},{num(y)}M{num(x)},{num(y - 4)}L{num(x)},{num(y + 4)}'
               f'M{num(x + 22)},{num(y - 4)}L{num(x + 22)},{num(y + 4)}" {_stroke(entry.color, 1.3, "-")}/>')
    else:  # patch or band
        key = (f'<rect x="{num(x)}" y="{num(y - 5)}" width="22" height="10" fill="{entry.color}" '
               f'fill-opacity="{num(entry.alpha)}"/>')
    return key + f'<text x="{num(x + 28)}" y="{num(y + LEGEND_PX * 0.35)}" font-size="{LEGEND_PX}">{esc(entry.label)}</text>'

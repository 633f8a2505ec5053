"""SVG charts drawn on the server (no JavaScript): a metric's curve with an optional target line and the other
ranks' curves beside it, and points with one marked (a search's trials). Every text in them comes from a job (metric names) or a person (trial
parameters) and is escaped: a name such as ``<script>`` is shown as text."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT, PAD = 520, 220, 44


def _ticks(low: float, high: float, whole: bool) -> list[float]:
    """About five round tick values from ``low`` to ``high`` (whole numbers for steps and epochs)."""
    if high <= low:
        return [low]
    raw = (high - low) / 5
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if raw <= step * m)
    if whole:
        step = max(1.0, round(step))
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _label(value: float, whole: bool) -> str:
    return str(int(value)) if whole else f"{value:.4g}"


PALETTE = ("#d4380d", "#389e0d", "#722ed1", "#d48806", "#08979c", "#c41d7f", "#595959")  # the other ranks' curves


def _finite(series: Sequence[Sequence[float]]) -> list[tuple[float, float]]:
    return [(x, y) for _, x, y in _finite_at(series)]


def _finite_at(series: Sequence[Sequence[float]]) -> list[tuple[int, float, float]]:
    """The finite points, each with its index in ``series``."""
    return [(i, float(x), float(y)) for i, (x, y) in enumerate(series)
            if math.isfinite(float(x)) and math.isfinite(float(y))]


def line_chart(title: str, series: Sequence[Sequence[float]], target: float | None = None,
               x_label: str = "step", marked: int | None = None, connect: bool = True,
               others: Sequence[tuple[str, Sequence[Sequence[float]]]] = (), label: str = "",
               hrefs: Sequence[str | None] = ()) -> str:
    """``series``: ``[x, y]`` points. ``target``: a dashed horizontal line (a gate's threshold); ``marked``:
    the index of a point drawn larger (the best trial); ``connect``: a line through the points, else dots;
    ``others``: ``(name, points)`` curves drawn beside it (the other ranks'), with a legend naming ``label`` (the
    followed curve's source) and each of them; ``hrefs``: a link for each point of ``series`` (a trial's page),
    the point drawn inside it."""
    indexed = _finite_at(series)
    points = [(x, y) for _, x, y in indexed]
    others = [(name, found) for name, curve in others[:len(PALETTE)] if (found := _finite(curve))]
    ys = [y for _, y in points] + [y for _, curve in others for _, y in curve] + ([target] if target is not None else [])
    if not points:
        return f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" role="img"><text x="{PAD}" y="{HEIGHT / 2}">' \
               f'{escape(title)}: no points yet</text></svg>'
    xs = [x for x, _ in points] + [x for _, curve in others for x, _ in curve]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    whole_x = all(x.is_integer() for x in xs)

    def sx(x: float) -> float:
        return PAD + (x - x0) / (x1 - x0) * (WIDTH - 2 * PAD)

    def sy(y: float) -> float:
        return HEIGHT - PAD + (y0 - y) / (y1 - y0) * (HEIGHT - 2 * PAD)

    parts = [f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(title)}">',
             f'<text x="{PAD}" y="16" class="title">{escape(title)}</text>',
             f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="axis"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" class="axis"/>']
    for tick in _ticks(x0, x1, whole_x):
        parts.append(f'<text x="{sx(tick):.1f}" y="{HEIGHT - PAD + 14}" class="tick" text-anchor="middle">'
                     f'{_label(tick, whole_x)}</text>')
    for tick in _ticks(y0, y1, False):
        parts.append(f'<text x="{PAD - 4}" y="{sy(tick) + 4:.1f}" class="tick" text-anchor="end">'
                     f'{_label(tick, False)}</text>')
    parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 8}" class="tick" text-anchor="middle">{escape(x_label)}</text>')
    if target is not None:
        parts.append(f'<line x1="{PAD}" y1="{sy(target):.1f}" x2="{WIDTH - PAD}" y2="{sy(target):.1f}" '
                     f'class="target"><title>target {target:.4g}</title></line>'
                     f'<text x="{WIDTH - PAD}" y="{sy(target) - 4:.1f}" class="tick" text-anchor="end">'
                     f'target {target:.4g}</text>')
    for (name, curve), color in zip(others, PALETTE):
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in curve)
        parts.append(f'<polyline points="{path}" class="curve" style="stroke:{color}"><title>{escape(name)}</title>'
                     "</polyline>")
    if others:
        legend = [(label or "followed", "#1f6feb"), *((name, color) for (name, _), color in zip(others, PALETTE))]
        x = WIDTH - PAD
        for i, (name, color) in enumerate(legend):
            parts.append(f'<text x="{x}" y="{16 + 11 * i}" class="tick" text-anchor="end" style="fill:{color}">'
                         f'{escape(name[:32])}</text>')
    if connect:
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" class="curve"/>')
    for at, x, y in indexed:
        best = at == marked
        circle = (f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{6 if best else 2.5}" '
                  f'class="{"best" if best else "point"}"><title>{_label(x, whole_x)}: {y:.6g}</title></circle>')
        href = hrefs[at] if at < len(hrefs) else None
        parts.append(f'<a href="{escape(href, quote=True)}">{circle}</a>' if href else circle)
    parts.append("</svg>")
    return "".join(parts)

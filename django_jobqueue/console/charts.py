"""Server-rendered SVG bar charts: no script, no CDN, readable without JavaScript.

Only numbers and fixed strings go into the markup; labels are escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

__all__ = ["bar_chart"]

WIDTH = 720
HEIGHT = 180
PAD_LEFT = 44
PAD_BOTTOM = 22


def bar_chart(
    labels: Sequence[str],
    series: Sequence[tuple[str, str, Sequence[int]]],
    *,
    title: str,
) -> SafeString:
    """Return an inline ``<svg>`` of stacked bars, one per label.

    Parameters
    ----------
    labels
        One label per bar (e.g. ``"10:42"``); every sixth is printed under the axis.
    series
        ``(name, css colour, values)`` per stacked series, values as many as labels;
        a bar's class is ``jq-`` and the name, spaces as hyphens (``jq-dead-letters``).
    title
        The chart's accessible name (``<title>``).
    """
    count = max(1, len(labels))
    totals = [sum(values[i] for _, _, values in series) for i in range(len(labels))]
    top = max([1, *totals])
    plot_w = WIDTH - PAD_LEFT - 4
    plot_h = HEIGHT - PAD_BOTTOM - 8
    bar_w = plot_w / count
    parts: list[str] = [
        format_html(
            '<svg class="jq-chart" role="img" viewBox="0 0 {} {}" width="100%" '
            'preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg">'
            "<title>{}</title>",
            WIDTH,
            HEIGHT,
            title,
        ),
        format_html(
            '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999"/>',
            PAD_LEFT,
            8 + plot_h,
            WIDTH - 4,
            8 + plot_h,
        ),
        format_html(
            '<text x="{}" y="16" font-size="11" text-anchor="end">{}</text>', PAD_LEFT - 4, top
        ),
        format_html(
            '<text x="{}" y="{}" font-size="11" text-anchor="end">0</text>',
            PAD_LEFT - 4,
            8 + plot_h,
        ),
    ]
    for i, label in enumerate(labels):
        x = PAD_LEFT + i * bar_w
        y = float(8 + plot_h)
        for name, colour, values in series:
            value = values[i]
            if value <= 0:
                continue
            h = plot_h * value / top
            y -= h
            parts.append(
                format_html(
                    '<rect class="jq-bar jq-{}" x="{}" y="{}" width="{}" height="{}" '
                    'fill="{}"><title>{} {}: {}</title></rect>',
                    name.replace(" ", "-"),
                    f"{x + 0.5:.1f}",
                    f"{y:.1f}",
                    f"{max(0.5, bar_w - 1):.1f}",
                    f"{h:.1f}",
                    colour,
                    label,
                    name,
                    value,
                )
            )
        if i % 6 == 0:
            parts.append(
                format_html(
                    '<text x="{}" y="{}" font-size="10">{}</text>', f"{x:.1f}", HEIGHT - 6, label
                )
            )
    legend_x = PAD_LEFT + 8
    for name, colour, values in series:
        parts.append(
            format_html(
                '<rect x="{}" y="4" width="10" height="10" fill="{}"/>'
                '<text x="{}" y="13" font-size="11">{} ({})</text>',
                legend_x,
                colour,
                legend_x + 14,
                name,
                sum(values),
            )
        )
        legend_x += 110
    parts.append("</svg>")
    # Every part above is format_html output (escaped) or a fixed string.
    return mark_safe("".join(str(p) for p in parts))  # noqa: S308

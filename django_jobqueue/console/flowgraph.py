"""A workflow's graph as server-rendered SVG (docs/console.md "Batches and workflows").

Like :mod:`.charts`: no script, no CDN, readable without JavaScript; only numbers,
fixed strings and escaped names go into the markup. Steps are laid out in columns by
depth (a step's column is one more than its deepest upstream step's), left to right,
so every edge points rightwards; within a column, steps keep their creation order.
Each node is a link to its job's page, filled by its state word, and carries
``data-step`` and ``data-state`` (what the browser test reads).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from ..flows.reading import GraphStep

__all__ = ["EDGE_COLOURS", "STATE_COLOURS", "layers", "workflow_svg"]

#: Fill of a node by its state word (docs/console.md "State words", and ``blocked``).
STATE_COLOURS = {
    "blocked": "#d8d8d8",
    "scheduled": "#c8dcf0",
    "waiting": "#a9cce3",
    "running": "#f0c040",
    "done": "#7fbf7f",
    "failed": "#e06060",
    "cancelled": "#b0a090",
}
#: Stroke of an edge by its state (``pending``, ``done``, ``failed``).
EDGE_COLOURS = {"pending": "#999999", "done": "#3c8d3c", "failed": "#ba2121"}

NODE_W = 150
NODE_H = 40
GAP_X = 60
GAP_Y = 18
PAD = 12
#: Characters of a step's name shown in its node (the whole name is in its title).
NAME_CHARS = 20


def layers(steps: Sequence[GraphStep]) -> list[list[int]]:
    """Return the indexes of ``steps`` by column: each step one column after its deepest
    upstream step (an upstream step missing from ``steps`` counts as column -1)."""
    index = {step.name: i for i, step in enumerate(steps)}
    depth: dict[int, int] = {}
    for start in range(len(steps)):
        if start in depth:
            continue
        stack = [start]
        while stack:  # iterative: a long chain must not reach Python's recursion limit
            node = stack[-1]
            pending = [
                index[name]
                for name in steps[node].after
                if name in index and index[name] not in depth and index[name] not in stack
            ]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            ups = [depth.get(index[name], -1) for name in steps[node].after if name in index]
            depth[node] = 1 + max(ups, default=-1)
    columns: list[list[int]] = [[] for _ in range(1 + max(depth.values(), default=-1))]
    for i in range(len(steps)):
        columns[depth[i]].append(i)
    return columns


def workflow_svg(
    steps: Sequence[GraphStep], state_of: Callable[[GraphStep], str], job_url: Callable[[str], str]
) -> SafeString:
    """Return an inline ``<svg>`` of the workflow's graph.

    Parameters
    ----------
    steps
        The workflow's steps with their edges
        (:func:`~django_jobqueue.flows.reading.workflow_graph`).
    state_of
        A step's state word (``blocked``, ``waiting``, ``running``, ``done``, ...).
    job_url
        The console's page of a job, by jid.
    """
    columns = layers(steps)
    rows = max((len(column) for column in columns), default=1)
    width = PAD * 2 + len(columns) * NODE_W + max(len(columns) - 1, 0) * GAP_X
    height = PAD * 2 + rows * NODE_H + max(rows - 1, 0) * GAP_Y
    where: dict[str, tuple[float, float]] = {}
    for c, column in enumerate(columns):
        # Centre a shorter column against the tallest one.
        top = PAD + (rows - len(column)) * (NODE_H + GAP_Y) / 2
        for r, i in enumerate(column):
            where[steps[i].name] = (PAD + c * (NODE_W + GAP_X), top + r * (NODE_H + GAP_Y))
    parts: list[str] = [
        format_html(
            '<svg class="jq-graph" role="img" viewBox="0 0 {} {}" width="{}" height="{}" '
            'xmlns="http://www.w3.org/2000/svg"><title>{}</title>'
            '<defs><marker id="jq-arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" '
            'markerHeight="8" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#666"/></marker>'
            "</defs>",
            width,
            height,
            width,
            height,
            f"Workflow graph: {len(steps)} steps",
        )
    ]
    for step in steps:
        x2, y2 = where[step.name]
        for upstream, state, policy in step.edges:
            x1, y1 = where[upstream]
            sx, sy, ex, ey = x1 + NODE_W, y1 + NODE_H / 2, x2, y2 + NODE_H / 2
            mid = (sx + ex) / 2
            parts.append(
                format_html(
                    '<path class="jq-edge jq-edge-{}" data-from="{}" data-to="{}" '
                    'd="M{},{} C{},{} {},{} {},{}" fill="none" stroke="{}" stroke-width="1.5" '
                    'marker-end="url(#jq-arrow)"><title>{} → {}: {} (on upstream failure: {})'
                    "</title></path>",
                    state,
                    upstream,
                    step.name,
                    f"{sx:.1f}",
                    f"{sy:.1f}",
                    f"{mid:.1f}",
                    f"{sy:.1f}",
                    f"{mid:.1f}",
                    f"{ey:.1f}",
                    f"{ex:.1f}",
                    f"{ey:.1f}",
                    EDGE_COLOURS.get(state, "#999999"),
                    upstream,
                    step.name,
                    state,
                    policy,
                )
            )
    for step in steps:
        x, y = where[step.name]
        state = state_of(step)
        name = step.name if len(step.name) <= NAME_CHARS else step.name[: NAME_CHARS - 1] + "…"
        parts.append(
            format_html(
                '<a class="jq-node" href="{}" data-step="{}" data-state="{}" data-jid="{}">'
                "<title>{}: {} ({})</title>"
                '<rect x="{}" y="{}" width="{}" height="{}" rx="6" fill="{}" stroke="#555"/>'
                '<text x="{}" y="{}" font-size="12" text-anchor="middle" '
                'font-weight="bold">{}</text>'
                '<text class="jq-node-state" x="{}" y="{}" font-size="11" '
                'text-anchor="middle">{}</text></a>',
                job_url(step.job.jid),
                step.name,
                state,
                step.job.jid,
                step.name,
                state,
                step.job.job_type,
                f"{x:.1f}",
                f"{y:.1f}",
                NODE_W,
                NODE_H,
                STATE_COLOURS.get(state, "#ffffff"),
                f"{x + NODE_W / 2:.1f}",
                f"{y + 16:.1f}",
                name,
                f"{x + NODE_W / 2:.1f}",
                f"{y + 32:.1f}",
                state,
            )
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every piece above is format_html-escaped

"""Template filters of the console and the admin: ``{% load jobqueue %}``.

- ``{{ t|jq_time }}``: ``2026-12-03 11:05:21 UTC, 27 s ago`` in a ``<time>`` element
  whose ``datetime`` and ``title`` hold the ISO 8601 time to the millisecond;
- ``{{ t|jq_time_ms }}``: the same with milliseconds (timelines);
- ``{{ job|jq_state }}``: the state word with the stored status where they differ,
  ``failed (max_retry)`` (docs/design.md#states);
- ``{{ seconds|jq_duration }}``: ``850 ms``, ``12.3 s``, ``4 min 5 s``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..core.times import format_duration, format_time
from ..store.states import state_label

register = template.Library()

__all__ = ["jq_duration", "jq_state", "jq_time", "jq_time_ms", "time_html"]


def time_html(value: Any, *, ms: bool = False) -> SafeString:
    """Render an aware datetime (or ISO 8601 text, as stored in JSON logs) as a
    ``<time>`` element; ``-`` for anything else."""
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return format_html("{}", value)
        value = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    if not isinstance(value, datetime):
        return format_html("{}", "-")
    iso = timezone.localtime(value).isoformat(timespec="milliseconds")
    return format_html(
        '<time class="jq-time" datetime="{}" title="{}">{}</time>',
        iso,
        iso,
        format_time(value, ms=ms),
    )


@register.filter
def jq_time(value: Any) -> SafeString:
    """``2026-12-03 11:05:21 UTC, 27 s ago`` (:func:`~django_jobqueue.core.times.format_time`)."""
    return time_html(value)


@register.filter
def jq_time_ms(value: Any) -> SafeString:
    """``2026-12-03 11:05:21.879 UTC, 27 s ago``."""
    return time_html(value, ms=True)


@register.filter
def jq_state(job: Any) -> str:
    """The state word of ``job`` now, with its stored status where they differ."""
    return state_label(job, timezone.now())


@register.filter
def jq_duration(value: Any) -> str:
    """A duration (timedelta or seconds) as people read it; ``-`` for None."""
    if value is None or isinstance(value, timedelta | int | float):
        return format_duration(value)
    return "-"

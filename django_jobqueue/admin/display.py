"""How the admin renders stored values: escaped JSON, hidden secure data, times."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from ..core.times import age, stamp
from ..models import Job
from ..templatetags.jobqueue import time_html

__all__ = ["error_time", "hidden", "pretty", "time_display", "when"]


def pretty(value: Any) -> SafeString:
    """Render a JSON value indented, escaped, in a ``<pre>``."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="jq-json">{}</pre>', text)


def hidden(value: Any) -> SafeString:
    return format_html("<em>{}</em> ({})", value, _("secure job type: not shown"))


def when(value: datetime | None, *, stacked: bool = False) -> SafeString:
    """Render a time as the console does: ``2026-12-03 11:05:21 UTC, 27 s ago``.

    Parameters
    ----------
    value
        An aware datetime, or None (rendered "-").
    stacked
        False: the time and its age on one line (a job's page), by
        :func:`~django_jobqueue.core.times.format_time`; True: the age first, the
        time under it (a narrow changelist cell).

    Returns
    -------
    SafeString
        A ``<time>`` element whose ``datetime`` and ``title`` hold the ISO 8601
        time to the millisecond, in the current time zone.
    """
    if value is None:
        return format_html("{}", "-")
    if not stacked:
        return time_html(value)
    iso = timezone.localtime(value).isoformat(timespec="milliseconds")
    return format_html(
        '<time class="jq-time" datetime="{}" title="{}">{}<br>'
        '<span class="jq-stamp">{}</span></time>',
        iso,
        iso,
        age(value, timezone.now()),
        stamp(value),
    )


def time_display(
    field: str, *, stacked: bool = False, model: type[Model] = Job
) -> Callable[[Any, Any], SafeString]:
    """Return an admin display method that renders ``<model>.<field>`` with :func:`when`.

    ``model`` is :class:`Job` unless given (schedules and tokens show their times the
    same way).
    """

    @admin.display(description=model._meta.get_field(field).verbose_name)  # type: ignore[union-attr]
    def show(model_admin: Any, obj: Any) -> SafeString:
        return when(getattr(obj, field), stacked=stacked)

    show.__name__ = f"{field}_display"
    return show


def error_time(text: Any) -> Any:
    """Render a failed attempt's ISO ``at`` with :func:`when`; other text as it is."""
    try:
        value = datetime.fromisoformat(str(text))
    except ValueError:
        return text
    return when(value) if timezone.is_aware(value) else text

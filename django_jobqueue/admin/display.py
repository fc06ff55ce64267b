"""How the admin renders stored values: escaped JSON, hidden secure data, times."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..models import Job

__all__ = ["error_time", "hidden", "pretty", "time_display", "when"]


def pretty(value: Any) -> SafeString:
    """Render a JSON value indented, escaped, in a ``<pre>``."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="jq-json">{}</pre>', text)


def hidden(value: Any) -> SafeString:
    return format_html("<em>{}</em> ({})", value, _("secure job type: not shown"))


def _age(value: datetime, now: datetime) -> str:
    """Return how long ago ``value`` was, or how soon it comes: "3 s ago", "in 2 hours".

    Under a minute in seconds; beyond, Django's ``timesince``/``timeuntil`` to its
    largest unit.
    """
    # Truncated toward zero, as timesince truncates to its unit: 59.9 s is "59 s".
    seconds = int((now - value).total_seconds())
    if 0 <= seconds < 60:
        return ngettext("%(n)d s ago", "%(n)d s ago", seconds) % {"n": seconds}
    if -60 < seconds < 0:
        return ngettext("in %(n)d s", "in %(n)d s", -seconds) % {"n": -seconds}
    if seconds > 0:
        return _("%(age)s ago") % {"age": timesince(value, now, depth=1)}
    return _("in %(age)s") % {"age": timeuntil(value, now, depth=1)}


def when(value: datetime | None, *, stacked: bool = False) -> SafeString:
    """Render a time to the second, in the current time zone, with its age.

    Parameters
    ----------
    value
        An aware datetime, or None (rendered "-").
    stacked
        False: ``12/01/2026 08:00:33 (3 s ago)`` on one line (a job's page);
        True: the age first, the time under it (a changelist cell).

    Returns
    -------
    SafeString
        A ``<time>`` element whose ``datetime`` and ``title`` hold the ISO 8601
        time to the millisecond; the date is in the locale's ``SHORT_DATE_FORMAT``.
    """
    if value is None:
        return format_html("{}", "-")
    local = timezone.localtime(value)
    iso = local.isoformat(timespec="milliseconds")
    stamp = "{} {}".format(
        formats.date_format(local, "SHORT_DATE_FORMAT"), formats.time_format(local, "H:i:s")
    )
    age = _age(value, timezone.now())
    if stacked:
        return format_html(
            '<time class="jq-time" datetime="{}" title="{}">{}<br>'
            '<span class="jq-stamp">{}</span></time>',
            iso,
            iso,
            age,
            stamp,
        )
    return format_html(
        '<span class="jq-time"><time datetime="{}" title="{}">{}</time> '
        '<span class="jq-stamp">({})</span></span>',
        iso,
        iso,
        stamp,
        age,
    )


def time_display(field: str, *, stacked: bool = False) -> Callable[[Any, Job], SafeString]:
    """Return an admin display method that renders ``Job.<field>`` with :func:`when`."""

    @admin.display(description=Job._meta.get_field(field).verbose_name)  # type: ignore[union-attr]
    def show(model_admin: Any, obj: Job) -> SafeString:
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

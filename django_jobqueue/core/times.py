"""The one way a time is shown to people (docs/console.md "Times").

ISO 8601 order, to the second, in the project's time zone (``TIME_ZONE``) with the
zone's name, then the age: ``2026-12-03 11:05:21 UTC, 27 s ago``. A timeline shows
milliseconds: ``2026-12-03 11:05:21.879 UTC``. The console, the admin and the CLI
all call :func:`format_time` (templates through the ``jq_time`` filter of the
``jobqueue`` template library).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

__all__ = ["age", "format_duration", "format_time", "stamp"]


def stamp(value: datetime, *, ms: bool = False) -> str:
    """Return ``value`` as ``2026-12-03 11:05:21 UTC`` in the current time zone.

    Parameters
    ----------
    value
        An aware datetime (a naive one is taken as UTC).
    ms
        Add milliseconds: ``11:05:21.879``.
    """
    if timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    local = timezone.localtime(value)
    text = local.strftime("%Y-%m-%d %H:%M:%S")
    if ms:
        text += f".{local.microsecond // 1000:03d}"
    return f"{text} {local.tzname() or timezone.get_current_timezone_name()}"


def age(value: datetime, now: datetime | None = None) -> str:
    """Return how long ago ``value`` was, or how soon it comes: ``27 s ago``, ``in 3 hours``.

    Under a minute in whole seconds; beyond, Django's ``timesince``/``timeuntil`` to
    its largest unit ("2 hours ago").
    """
    now = now or timezone.now()
    seconds = int((now - value).total_seconds())  # toward zero: 59.9 s is "59 s"
    if 0 <= seconds < 60:
        return f"{seconds} s ago"
    if -60 < seconds < 0:
        return f"in {-seconds} s"
    if seconds > 0:
        return f"{timesince(value, now, depth=1)} ago"
    return f"in {timeuntil(value, now, depth=1)}"


def format_time(
    value: datetime | None, *, now: datetime | None = None, ms: bool = False, with_age: bool = True
) -> str:
    """Return ``2026-12-03 11:05:21 UTC, 27 s ago``; ``-`` for None.

    Parameters
    ----------
    value
        An aware datetime, or None.
    now
        The time the age is counted to; None: now.
    ms
        Show milliseconds (a timeline).
    with_age
        Add the age after a comma.
    """
    if value is None:
        return "-"
    text = stamp(value, ms=ms)
    return f"{text}, {age(value, now)}" if with_age else text


def format_duration(delta: timedelta | float | None) -> str:
    """Return a duration as people read it: ``850 ms``, ``12.3 s``, ``4 min 5 s``, ``2 h 3 min``.

    ``delta`` is a timedelta or seconds; None gives ``-``.
    """
    if delta is None:
        return "-"
    seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
    if seconds < 0:
        return "-"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"

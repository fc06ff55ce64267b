"""Cron and daylight-saving arithmetic of schedules: valid expressions, next ticks, tick ids.

Stored times are UTC. A cron expression (five fields, or six with seconds last,
croniter's convention; ``@daily`` and friends work) is evaluated on the wall clock of
the plan's time zone (zoneinfo), with the daylight-saving rule that
:mod:`django_jobqueue.schedules` states: a skipped wall time runs once when the clock
jumps; a repeated one runs at its first occurrence only, unless the hour field is ``*``.
Nothing here touches the database.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from ..core.exceptions import InvalidOption

__all__ = ["next_tick", "tick_job_id", "validate_cron", "validate_timezone"]

_TINY = timedelta(microseconds=1)


def validate_cron(expr: Any) -> str:
    """Return ``expr`` if croniter accepts it as a cron expression, else raise.

    Raises
    ------
    InvalidOption
        If ``expr`` is not a string of 5 fields, 6 with seconds last, or an alias
        such as ``@daily``.
    """
    if not isinstance(expr, str) or not expr.strip() or not croniter.is_valid(expr):
        raise InvalidOption(f"cron must be a cron expression such as '0 3 * * *': got {expr!r}.")
    return expr.strip()


def validate_timezone(name: Any) -> str:
    """Return ``name`` if it is an IANA time zone zoneinfo knows, else raise.

    Raises
    ------
    InvalidOption
        If ``name`` is not a known time zone such as ``"Europe/Paris"`` or ``"UTC"``.
    """
    try:
        if not isinstance(name, str) or not name:
            raise ValueError(name)
        ZoneInfo(name)
    except (ValueError, ZoneInfoNotFoundError) as exc:
        raise InvalidOption(
            f"timezone must be an IANA time zone such as 'Europe/Paris': got {name!r}."
        ) from exc
    return name


def _offset(instant: datetime, tz: ZoneInfo) -> timedelta:
    offset = instant.astimezone(tz).utcoffset()
    assert offset is not None
    return offset


def _wall(instant: datetime, offset: timedelta) -> datetime:
    """Return the naive wall time of ``instant`` on a clock ``offset`` from UTC."""
    return (instant.astimezone(UTC) + offset).replace(tzinfo=None)


def _instant(wall: datetime, offset: timedelta) -> datetime:
    return (wall - offset).replace(tzinfo=UTC)


def _find_transition(
    start: datetime, end: datetime, tz: ZoneInfo, offset: timedelta
) -> datetime | None:
    """Return the first instant in (start, end] whose UTC offset is not ``offset``.

    Samples every 7 days (zones never change offset twice in a week), then bisects
    to the second (transitions fall on whole seconds).
    """
    low = start
    while low < end:
        high = min(low + timedelta(days=7), end)
        if _offset(high, tz) != offset:
            lo_s = int(low.timestamp() // 1)
            hi_s = -int(-high.timestamp() // 1)
            while hi_s - lo_s > 1:
                mid = (lo_s + hi_s) // 2
                if _offset(datetime.fromtimestamp(mid, UTC), tz) == offset:
                    lo_s = mid
                else:
                    hi_s = mid
            return datetime.fromtimestamp(hi_s, UTC)
        low = high
    return None


def _cron_after(expr: str, wall: datetime) -> datetime | None:
    """Return the first naive wall time strictly after ``wall`` that ``expr`` matches."""
    try:
        result = croniter(expr, wall).get_next(datetime)
    except CroniterBadDateError:
        return None
    assert isinstance(result, datetime)
    return result


@functools.lru_cache(maxsize=256)
def _repeats_in_overlap(expr: str) -> bool:
    """Whether the plan runs every hour (hour field ``*``): it runs in both passes."""
    return croniter(expr).expanded[1] == ["*"]


def next_tick(cron: str, tz_name: str, after: datetime) -> datetime | None:
    """Return the first tick of ``cron`` in zone ``tz_name`` strictly after ``after``.

    Parameters
    ----------
    cron:
        A cron expression (see :func:`validate_cron`), read on the zone's wall clock.
    tz_name:
        An IANA time zone, such as ``"Europe/Paris"``.
    after:
        An aware datetime.

    Returns
    -------
    datetime | None
        The tick, aware in UTC; None if the expression never matches again (such
        as ``0 0 30 2 *``). Daylight-saving gaps and overlaps follow the module's
        rule: a skipped wall time runs when the clock jumps; a repeated one runs
        once, at its first occurrence, unless the hour field is ``*``.

    Implements: docs/design.md#plans.
    """
    tz = ZoneInfo(tz_name)
    repeat = _repeats_in_overlap(cron)
    t = after.astimezone(UTC)
    offset = _offset(t, tz)
    start_wall = _wall(t, offset)
    for _step in range(64):
        wall = _cron_after(cron, start_wall)
        if wall is None:
            return None
        candidate = _instant(wall, offset)
        change = _find_transition(t, candidate, tz, offset)
        if change is None:
            if not repeat:
                first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
                second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
                if first < second and candidate == second:
                    # Second pass of a repeated wall time: skip to the overlap's end.
                    before = _offset(first, tz)
                    shift = _find_transition(first, second, tz, before)
                    assert shift is not None
                    t = shift + (before - offset)
                    start_wall = _wall(t, offset) - _TINY
                    continue
            return candidate
        new_offset = _offset(change, tz)
        if new_offset > offset:  # spring forward: walls [change+offset, change+new) skipped
            if wall < _wall(change, new_offset):
                return change
            t, offset = change, new_offset
        elif repeat:  # fall back, hourly plan: walls from the jump run again
            t, offset = change, new_offset
        else:  # fall back: skip the walls already seen before the jump
            t, offset = change + (offset - new_offset), new_offset
        start_wall = _wall(t, offset) - _TINY
    raise InvalidOption(f"cron {cron!r} in {tz_name!r}: no tick found after {after.isoformat()}.")


def tick_job_id(name: str, tick: datetime) -> str:
    """Return the job id (docs/design.md#ids) of plan ``name``'s run at ``tick``.

    ``schedule:<name>:<tick in UTC, ISO 8601>``, e.g.
    ``schedule:digest:2026-03-29T01:00:00Z``: one tick, one id, on every host.
    """
    tick = tick.astimezone(UTC)
    spec = "seconds" if tick.microsecond == 0 else "microseconds"
    return f"schedule:{name}:{tick.replace(tzinfo=None).isoformat(timespec=spec)}Z"

"""Durations: the one parser for every option and setting that takes one.

A duration is a ``timedelta``, a number of seconds (int or float), or a string made
of a number and a unit: ``"500ms"``, ``"5s"``, ``"1m"``, ``"1h"``, ``"7d"``. A bare
numeric string is seconds. Negative durations are refused unless asked for.
"""

from __future__ import annotations

import re
from datetime import timedelta

from .exceptions import InvalidOption

__all__ = ["Duration", "parse_duration", "to_ms"]

Duration = timedelta | int | float | str

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: Duration, *, name: str = "duration") -> timedelta:
    """Parse a duration into a ``timedelta``.

    Parameters
    ----------
    value:
        A ``timedelta``; an int or float number of seconds; or a string such as
        ``"500ms"``, ``"5s"``, ``"1m"``, ``"1h"``, ``"7d"`` (a bare number is seconds).
    name:
        The option's name, used in the error message.

    Returns
    -------
    timedelta
        The duration, never negative.

    Raises
    ------
    InvalidOption
        If ``value`` is negative, not finite, of another type, or an unparsable string.

    Implements: DESIGN.md "Public API" (durations).
    """
    if isinstance(value, bool):
        raise InvalidOption(f"{name} must be a duration, not a boolean: got {value!r}.")
    try:
        result = _to_timedelta(value, name)
    except OverflowError as exc:
        raise InvalidOption(
            f"{name} is longer than 999,999,999 days: got {value!r}; use a shorter duration."
        ) from exc
    if result < timedelta(0):
        raise InvalidOption(f"{name} must not be negative: got {value!r}.")
    return result


def _to_timedelta(value: Duration, name: str) -> timedelta:
    """Return ``value`` as a ``timedelta``; OverflowError if it is too long for one."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidOption(f"{name} must be a finite number of seconds: got {value!r}.")
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None and _PATTERN.match(value.strip().removeprefix("-")):
            raise InvalidOption(f"{name} must not be negative: got {value!r}.")
        if match is None:
            raise InvalidOption(
                f"{name} {value!r} is not a duration; use seconds or a string like "
                f"'500ms', '5s', '1m', '1h' or '7d'."
            )
        number, unit = match.groups()
        result = timedelta(milliseconds=float(number) * _UNITS_MS[unit or "s"])
    else:
        raise InvalidOption(
            f"{name} must be a timedelta, a number of seconds or a string like '5s': "
            f"got {type(value).__name__}."
        )
    return result


def to_ms(value: timedelta) -> int:
    """Return ``value`` in whole milliseconds (rounded down)."""
    return value // timedelta(milliseconds=1)

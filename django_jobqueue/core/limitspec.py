"""The shape of a flow-control limit (docs/limits.md), parsed and checked in one place.

A limit is a dict with any of these keys, the same on every surface (``@job(limits=)``,
a ``JOBQUEUE["JOB_TYPES"]`` or ``JOBQUEUE["QUEUES"]`` entry, ``jobqueue limits set``,
the gateway, the console):

- ``concurrency``: int from 1 to 1,000,000, at most that many jobs of the target
  ``processing`` at once, fleet-wide (per key with a ``partition``);
- ``rate``: ``"N/s"``, ``"N/m"`` or ``"N/h"`` (N an integer from 1 to 1,000,000): starts
  per window, enforced by a token bucket (docs/limits.md "Rate");
- ``burst``: int from 1 to 1,000,000, the token bucket's capacity; default: one second's
  worth of the rate, at least 1;
- ``partition``: ``"payload.<field>[.<field>...]"`` (at most 200 characters), ``"key"``
  (only the ``limit_key=`` given at enqueue) or, in code only, a callable
  ``f(payload) -> str``: the limits apply per key instead of globally;
- ``fair``: bool, with a partition: claims rotate across the keys with due jobs.

Every error is an :class:`InvalidLimit` naming the key at fault (``field``), so the
gateway's 422 and the console's message point at it.

This module is a leaf: it reads no settings and no table.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .exceptions import InvalidOption
from .validation import text_problem

__all__ = [
    "KEYS",
    "MAX_COUNT",
    "MAX_KEY_LENGTH",
    "MAX_PARTITION_LENGTH",
    "InvalidLimit",
    "Limit",
    "Rate",
    "parse_limit",
    "parse_rate",
    "parse_target",
]

#: The keys a limit dict may have.
KEYS = frozenset({"concurrency", "rate", "burst", "partition", "fair"})
#: Longest partition key stored on a job (characters); longer ones are refused.
MAX_KEY_LENGTH = 200
#: Largest concurrency, burst and rate count: what every surface and column takes.
MAX_COUNT = 1_000_000
#: Longest ``partition`` (characters): ``LimitOverride.partition``'s column.
MAX_PARTITION_LENGTH = 200
#: Longest name of a target's job type and queue (the jobs' columns).
_TARGET_LENGTHS = {"type": 200, "queue": 100}
_WINDOWS_S = {"s": 1, "m": 60, "h": 3600}
# ASCII digits only (``\d`` takes every script's), at most 7: MAX_COUNT is checked after.
_RATE = re.compile(r"\A\s*([0-9]{1,7})\s*/\s*([smh])\s*\Z")
_FIELD = re.compile(r"\Apayload(\.[A-Za-z0-9_\-]+)+\Z")


class InvalidLimit(InvalidOption):
    """A limit or a target is invalid; ``field`` names the key at fault (``"rate"``,
    ``"target"``, ...; None: the limit as a whole). Nothing was written."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        #: The limit's key at fault (``concurrency``, ``rate``, ``burst``,
        #: ``partition``, ``fair``, ``target``), or None.
        self.field = field


@dataclass(frozen=True)
class Rate:
    """A rate of starts: ``count`` per ``window_s`` seconds, as given (``"100/m"``)."""

    #: Starts allowed per window.
    count: int
    #: The window, in seconds (1, 60 or 3600).
    window_s: int

    @property
    def per_s(self) -> float:
        """Tokens added per second."""
        return self.count / self.window_s

    def __str__(self) -> str:
        unit = {1: "s", 60: "m", 3600: "h"}[self.window_s]
        return f"{self.count}/{unit}"


@dataclass(frozen=True)
class Limit:
    """One target's limit (see the module docstring); every field None/False: no limit."""

    #: Most jobs ``processing`` at once (per key with a partition); None: no cap.
    concurrency: int | None = None
    #: Most starts per window (per key with a partition); None: no cap.
    rate: Rate | None = None
    #: The token bucket's capacity; None: :attr:`bucket` picks one second's worth.
    burst: int | None = None
    #: ``"payload.a.b"``, ``"key"``, a callable, or None: one global limit.
    partition: str | Callable[[Any], Any] | None = None
    #: Rotate claims across the keys with due jobs (with a partition only).
    fair: bool = False

    @property
    def active(self) -> bool:
        """Whether it caps anything (a concurrency or a rate)."""
        return self.concurrency is not None or self.rate is not None

    @property
    def partitioned(self) -> bool:
        """Whether it applies per key."""
        return self.partition is not None

    @property
    def bucket(self) -> int:
        """The token bucket's capacity: ``burst``, else one second of the rate, >= 1."""
        if self.burst is not None:
            return self.burst
        if self.rate is None:
            return 1
        return max(1, math.ceil(self.rate.per_s))

    def as_dict(self) -> dict[str, Any]:
        """The limit as the dict it was declared with (a callable partition by name)."""
        out: dict[str, Any] = {}
        if self.concurrency is not None:
            out["concurrency"] = self.concurrency
        if self.rate is not None:
            out["rate"] = str(self.rate)
        if self.burst is not None:
            out["burst"] = self.burst
        if self.partition is not None:
            partition = self.partition
            if not isinstance(partition, str):
                module = getattr(partition, "__module__", "?")
                partition = f"{module}.{getattr(partition, '__qualname__', '?')}"
            out["partition"] = partition
        if self.fair:
            out["fair"] = True
        return out


def parse_rate(value: Any) -> Rate:
    """Parse ``"N/s"``, ``"N/m"`` or ``"N/h"`` (N an integer from 1 to 1,000,000).

    Raises
    ------
    InvalidLimit
        If ``value`` is not such a string (``field`` ``"rate"``).
    """
    match = _RATE.match(value) if isinstance(value, str) else None
    if match is None or not 1 <= int(match.group(1)) <= MAX_COUNT:
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        raise InvalidLimit(
            "A rate must be 'N/s', 'N/m' or 'N/h' with N an integer >= 1 "
            f"(at most {MAX_COUNT:,}): got {shown!r}.",
            field="rate",
        )
    return Rate(count=int(match.group(1)), window_s=_WINDOWS_S[match.group(2)])


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:40] + "..."
        raise InvalidLimit(
            f"A limit's {name} must be an integer from 1 to {MAX_COUNT:,}: got {shown}.",
            field=name,
        )
    return value


def parse_limit(raw: Any, *, allow_callable: bool = True) -> Limit:
    """Parse and check one limit dict (see the module docstring).

    Parameters
    ----------
    raw:
        The dict, or a :class:`Limit` (returned as is).
    allow_callable:
        Whether ``partition`` may be a callable (code only; settings and the
        run-time table take strings).

    Raises
    ------
    InvalidLimit
        If ``raw`` is not a dict of the known keys, or a value is out of range
        (``field`` names the key).
    """
    if isinstance(raw, Limit):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidLimit(f"limits must be a dict with keys among {sorted(KEYS)}: got {raw!r}.")
    unknown = sorted(set(raw) - KEYS, key=repr)
    if unknown:
        raise InvalidLimit(
            f"Unknown limit keys {unknown}; the keys are {sorted(KEYS)}.", field=str(unknown[0])
        )
    concurrency = raw.get("concurrency")
    if concurrency is not None:
        concurrency = _positive_int(concurrency, "concurrency")
    rate = raw.get("rate")
    parsed_rate = None if rate is None else parse_rate(rate)
    burst = raw.get("burst")
    if burst is not None:
        burst = _positive_int(burst, "burst")
        if parsed_rate is None:
            raise InvalidLimit("A limit's burst needs a rate.", field="burst")
    partition = raw.get("partition")
    if partition is not None:
        if callable(partition) and not isinstance(partition, str):
            if not allow_callable:
                raise InvalidLimit(
                    "A partition given here must be 'payload.<field>' or 'key'; "
                    "a callable is only taken by @job(limits=...).",
                    field="partition",
                )
        elif (
            not isinstance(partition, str)
            or len(partition) > MAX_PARTITION_LENGTH
            or not (partition == "key" or _FIELD.match(partition))
        ):
            shown = repr(partition)
            shown = shown if len(shown) <= 60 else shown[:60] + "..."
            raise InvalidLimit(
                "A limit's partition must be 'payload.<field>[.<field>...]' (fields of "
                f"letters, digits, '_' and '-'; at most {MAX_PARTITION_LENGTH} characters), "
                f"'key' or a callable: got {shown}.",
                field="partition",
            )
    fair = raw.get("fair", False)
    if not isinstance(fair, bool):
        raise InvalidLimit(f"A limit's fair must be True or False: got {fair!r}.", field="fair")
    if fair and partition is None:
        raise InvalidLimit(
            "A limit's fair needs a partition: it rotates across keys.", field="fair"
        )
    limit = Limit(
        concurrency=concurrency, rate=parsed_rate, burst=burst, partition=partition, fair=fair
    )
    if not limit.active and raw:
        raise InvalidLimit("A limit needs a concurrency or a rate (or both).")
    return limit


def parse_target(value: Any) -> tuple[str, str]:
    """Parse a limit's target, ``"type:<job type>"`` or ``"queue:<queue>"``.

    Returns
    -------
    tuple of str
        (``"type"`` or ``"queue"``, the name).

    Raises
    ------
    InvalidLimit
        If ``value`` is neither form, or the name is empty, too long (200
        characters for a job type, 100 for a queue) or not storable text (a NUL);
        ``field`` ``"target"``.
    """
    if isinstance(value, str):
        kind, _sep, name = value.partition(":")
        longest = _TARGET_LENGTHS.get(kind)
        if longest is not None and 0 < len(name) <= longest and text_problem(name) is None:
            return kind, name
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:60] + "..."
    raise InvalidLimit(
        "A limit's target must be 'type:<job type>' or 'queue:<queue>' (a job type of at "
        f"most 200 characters, a queue of at most 100, no NUL): got {shown}.",
        field="target",
    )

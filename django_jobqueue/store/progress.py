"""A running job's progress (docs/console.md "Progress"): checked, then coalesced.

A handler may report progress as often as it likes (``ctx.progress(done, total)``);
only the latest report is kept in memory and the worker's heartbeat batch stores it,
at most once a second per job (:data:`MIN_INTERVAL_S`), in the statement that extends
the leases: no report costs a statement of its own.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..core.exceptions import InvalidRequest
from ..core.validation import text_problem

__all__ = ["MAX_MESSAGE", "MIN_INTERVAL_S", "ProgressSlot", "progress_value"]

#: The longest progress message kept, characters (a longer one is cut).
MAX_MESSAGE = 200
#: The shortest time between two stored reports of one job, s.
MIN_INTERVAL_S = 1.0


def progress_value(done: Any, total: Any, message: Any = None) -> dict[str, Any]:
    """Return the stored form ``{"done", "total", "message"}`` of one report.

    Parameters
    ----------
    done
        Units of work done, an int >= 0.
    total
        Units of work in all, an int >= 0 (0: unknown), at least ``done`` when known.
    message
        A short text or None; cut to :data:`MAX_MESSAGE` characters.

    Raises
    ------
    InvalidRequest
        If ``done`` or ``total`` is not a non-negative int, ``done`` exceeds a known
        ``total``, or ``message`` is neither a string nor None, or holds a NUL or a
        lone surrogate (no database stores those).
    """
    for name, number in (("done", done), ("total", total)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise InvalidRequest(f"progress {name} must be an integer >= 0, got {number!r}.")
    if total and done > total:
        raise InvalidRequest(f"progress done ({done}) must not exceed total ({total}).")
    if message is not None and not isinstance(message, str):
        raise InvalidRequest(f"progress message must be a string or None, got {message!r}.")
    problem = text_problem(message) if message else None
    if problem is not None:
        raise InvalidRequest(f"progress message {problem}; remove that character.")
    return {"done": done, "total": total, "message": message[:MAX_MESSAGE] if message else None}


class ProgressSlot:
    """The latest unstored report of one job, and when one was last handed out.

    Thread-safe: the handler's thread :meth:`put`\\ s, the heartbeat thread
    :meth:`take`\\ s (and :meth:`put_back`\\ s a report whose write failed).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, Any] | None = None
        self._taken_at = float("-inf")

    def put(self, value: dict[str, Any]) -> None:
        """Keep ``value`` (from :func:`progress_value`) as the latest report."""
        with self._lock:
            self._pending = value

    def ready(self, now: float | None = None) -> bool:
        """Whether a report waits and the last one was handed out a second ago or more."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return self._pending is not None and now - self._taken_at >= MIN_INTERVAL_S

    def take(self, now: float | None = None) -> dict[str, Any] | None:
        """Hand out the waiting report if :meth:`ready`, else None."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._pending is None or now - self._taken_at < MIN_INTERVAL_S:
                return None
            value, self._pending, self._taken_at = self._pending, None, now
            return value

    def put_back(self, value: dict[str, Any]) -> None:
        """Return a report whose write failed, unless a newer one came meanwhile."""
        with self._lock:
            if self._pending is None:
                self._pending = value
            self._taken_at = float("-inf")

"""The entries of a job's ``errors`` list: one per failed attempt
(docs/design.md#execution), with its message, exception class and traceback, each
made storable on every database."""

from __future__ import annotations

import traceback as tb
from typing import TYPE_CHECKING, Any

from django.utils import timezone

if TYPE_CHECKING:
    from ..models import Job

__all__ = ["describe", "error_entry", "escaped"]


def escaped(text: str) -> str:
    """Return ``text`` with NUL and lone surrogates escaped, so every database stores it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def describe(exc: BaseException) -> str:
    """Return ``"Class: message"`` of ``exc``, even when its ``str()`` raises."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 (a handler's error whose __str__ is broken)
        text = "<str() failed>"
    return f"{type(exc).__name__}: {text}"


def error_entry(
    job: Job, exc: BaseException | None, message: str, exception_class: str = ""
) -> dict[str, Any]:
    """Return the entry a failed attempt of ``job`` adds to its ``errors`` list.

    Parameters
    ----------
    job:
        The job, at the attempt that failed (``job.attempt``).
    exc:
        The handler's exception, or None (a lost lease, a timeout, a gateway report).
    message:
        The text shown for the attempt; ``"<secure>"`` is stored instead for a
        secure job, which keeps no traceback either.
    exception_class:
        The class's dotted name when there is no ``exc`` (a gateway worker's
        report); cut to 200 characters.

    Returns
    -------
    dict
        ``attempt``, ``at`` (ISO 8601), ``message``, ``exception_class``,
        ``traceback`` and ``worker`` (the lease owner that ran the attempt, "" when
        none held it), every text escaped so that every database stores it.
    """
    entry: dict[str, Any] = {
        "attempt": job.attempt,
        "at": timezone.now().isoformat(),
        "message": "<secure>" if job.secure else message,
        "exception_class": escaped(exception_class[:200]),
        "traceback": "",
        "worker": escaped(str(job.lease_owner or "")[:200]),
    }
    if exc is not None:
        cls = type(exc)  # a class made at run time may carry any text in its name
        entry["exception_class"] = escaped(f"{cls.__module__}.{cls.__qualname__}")
        if not job.secure:
            entry["traceback"] = escaped("".join(tb.format_exception(exc)))
    return entry

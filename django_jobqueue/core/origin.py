"""Who enqueued a job: the short text stored in ``Job.origin`` when the job is made.

The job page shows it as "enqueued by" (docs/console.md "A job's story"). Its forms:

- ``code:<module>.<function>``: the first caller outside this package (and outside
  Django, django-tasks, asgiref and the web framework of the gateway), read from the
  call stack: a few frame lookups, no query, no I/O.
- ``gateway:<token name>``: a job enqueued through the HTTP gateway.
- ``schedule:<plan name>``: a run of a schedule.
- ``batch:<batch pk>:<kind>``: a batch's callback (:data:`BATCH_CALLBACK`).
- ``console:<user>``, ``admin:<user>``, ``cli:<user>``: an operator's surface.
- ``code``: the caller could not be told (an async twin's worker thread).

A surface says who it is with :func:`enqueued_by`, a context manager over a
``ContextVar``, so threads and asyncio tasks never see another's origin.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from types import FrameType

__all__ = ["BATCH_CALLBACK", "MAX_LENGTH", "current_origin", "enqueued_by"]

#: Characters of ``Job.origin``; a longer origin is cut.
MAX_LENGTH = 200
#: The origin's prefix of a batch's callback, ``batch:<batch pk>:<kind>``.
BATCH_CALLBACK = "batch:"

_origin: ContextVar[str | None] = ContextVar("django_jobqueue_origin", default=None)

#: Modules whose frames are machinery, not the caller who enqueued.
_MACHINERY = (
    "django_jobqueue",
    "django.",
    "django_tasks",
    "asgiref",
    "ninja",
    "contextlib",
    "functools",
    "concurrent.",
    "threading",
    "asyncio",
)
#: How many frames are looked at, at most, before giving up ("code").
_MAX_FRAMES = 40


@contextlib.contextmanager
def enqueued_by(origin: str) -> Iterator[None]:
    """Stamp every job made inside the block with ``origin`` (cut to 200 characters).

    Parameters
    ----------
    origin
        Such as ``"gateway:billing-api"`` or ``"schedule:nightly"``; see the module
        docstring for the forms the console knows.
    """
    token = _origin.set(origin[:MAX_LENGTH])
    try:
        yield
    finally:
        _origin.reset(token)


def _code_path(frame: FrameType | None) -> str:
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        module = str(frame.f_globals.get("__name__", ""))
        if module and not module.startswith(_MACHINERY) and module != "django":
            name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
            return f"code:{module}.{name}"[:MAX_LENGTH]
        frame = frame.f_back
    return "code"


def current_origin() -> str:
    """Return the origin of a job being made now: the :func:`enqueued_by` block's, else
    the calling code's path (``code:<module>.<function>``)."""
    given = _origin.get()
    if given is not None:
        return given
    getframe = getattr(sys, "_getframe", None)
    return _code_path(getframe(1)) if getframe is not None else "code"

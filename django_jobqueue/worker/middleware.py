"""Worker middleware (docs/design.md#execution): callables that wrap every handler.

A middleware is ``middleware(handler) -> handler`` where a handler is
``(payload, ctx) -> result``. ``JOBQUEUE["MIDDLEWARE"]`` lists dotted paths; the
first listed is the outermost, so it runs first and sees the result last::

    JOBQUEUE = {"MIDDLEWARE": ["myapp.jobs.timing", "myapp.jobs.tenant"]}
    # timing(tenant(handler))(payload, ctx)

A middleware is applied once per job type (not per job). ``async def`` handlers run
on the foreman's event loop only when every listed middleware has
``async_capable = True``: it is then also given async handlers, and must return an
async handler for them (docs/design.md#execution).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from django.utils.module_loading import import_string

from ..core.exceptions import ImproperlyConfiguredJobQueue

__all__ = ["Handler", "Middleware", "apply_middleware", "load_middleware"]

#: ``(payload, ctx) -> result``.
Handler = Callable[[Any, Any], Any]
#: ``(handler) -> handler`` (docs/design.md#execution).
Middleware = Callable[[Handler], Handler]


@functools.cache
def _load(paths: tuple[str, ...]) -> tuple[Middleware, ...]:
    loaded = []
    for path in paths:
        try:
            middleware = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfiguredJobQueue(
                f"JOBQUEUE['MIDDLEWARE'] entry {path!r} cannot be imported ({exc}); "
                "fix the dotted path."
            ) from exc
        if not callable(middleware):
            raise ImproperlyConfiguredJobQueue(
                f"JOBQUEUE['MIDDLEWARE'] entry {path!r} is not callable; give a "
                "function middleware(handler) -> handler."
            )
        loaded.append(middleware)
    return tuple(loaded)


def load_middleware(paths: Sequence[str]) -> tuple[Middleware, ...]:
    """Import the middleware at ``paths`` (cached per list).

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If a path cannot be imported or is not callable.

    Implements: docs/design.md#execution.
    """
    return _load(tuple(paths))


def apply_middleware(handler: Handler, middleware: Sequence[Middleware]) -> Handler:
    """Wrap ``handler`` in ``middleware``, the first item outermost.

    Implements: docs/design.md#execution.
    """
    for wrap in reversed(middleware):
        handler = wrap(handler)
    return handler

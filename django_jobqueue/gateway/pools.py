"""The gateway's thread pools under ASGI: its queries run here, never in a request's thread.

Under ASGI a request's database work has to run in some thread. Django runs a sync
view (and each sync middleware, and the token check of an ``async`` view) in a thread
made for that request, whose connection dies with it; a burst of waiting claims then
makes as many threads and takes as many pooled connections, and producers queue
behind them for both. The gateway runs its queries in two fixed pools instead:

- :data:`claim_pool` (:data:`CLAIM_THREADS`): the claim route's token check, worker
  name check, claims and ``last_seen_at`` writes;
- :data:`request_pool` (:data:`REQUEST_THREADS`): every other route, as a whole sync
  view, when served by :func:`django_jobqueue.gateway.asgi.gateway_application`.

So claims never take a producer's thread, and a process holds at most
``CLAIM_THREADS + REQUEST_THREADS`` database connections for the gateway (plus the
claim watcher's, :mod:`.waiting`), whatever the number of requests in flight. Each
thread keeps its connection open for its life, whatever ``CONN_MAX_AGE``; one left
unusable by an error is closed before the next call (:func:`fresh`), so a database
restart costs each thread one failed request at most (``503``, docs/gateway.md).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import connections

__all__ = [
    "CLAIM_THREADS",
    "REQUEST_THREADS",
    "claim_pool",
    "fresh",
    "in_pool",
    "request_pool",
    "served_by_gateway_entry",
]

T = TypeVar("T")

#: Threads that run the claim route's queries (per process).
CLAIM_THREADS = 8
#: Threads that run the other routes' views under the gateway's ASGI entry (per process).
REQUEST_THREADS = 8

#: True while a request is served by the gateway's own ASGI handler
#: (:mod:`.asgi`), which runs no site middleware; False under Django's handler.
served_by_gateway_entry: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "served_by_gateway_entry", default=False
)

claim_pool = ThreadPoolExecutor(CLAIM_THREADS, thread_name_prefix="jq-claim")
request_pool = ThreadPoolExecutor(REQUEST_THREADS, thread_name_prefix="jq-gateway")


def fresh(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``func(*args, **kwargs)`` in a pool thread, after closing any of the
    thread's connections that an earlier error left unusable."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()
    return func(*args, **kwargs)


async def in_pool(pool: ThreadPoolExecutor, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Await ``func(*args, **kwargs)`` run in a thread of ``pool`` (:func:`fresh`).

    The caller's context variables (Django's URLconf and script prefix, say) are
    copied into the call, as ``sync_to_async`` does. Raises what ``func`` raises.
    """
    context = contextvars.copy_context()
    call = functools.partial(context.run, fresh, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(pool, call)

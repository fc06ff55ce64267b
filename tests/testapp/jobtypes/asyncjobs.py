"""``async def`` job types of the worker tests (tests/worker/test_async_handlers.py)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from asgiref.sync import sync_to_async

from django_jobqueue import NonRetryableError, job

from .worker import record

#: Per run: (thread name, id of the running event loop), in run order.
runs: list[tuple[str, int]] = []
_lock = threading.Lock()
_active = 0
#: Most aio.* handlers seen running at once in this process.
most_at_once = 0


async def _enter() -> None:
    global _active, most_at_once
    with _lock:
        _active += 1
        most_at_once = max(most_at_once, _active)
        runs.append((threading.current_thread().name, id(asyncio.get_running_loop())))


def _leave() -> None:
    global _active
    with _lock:
        _active -= 1


def reset() -> None:
    """Forget the runs seen so far."""
    global most_at_once
    with _lock:
        runs.clear()
        most_at_once = 0


@job("aio.record", max_retry=0)
async def record_async(payload: Any, ctx: Any) -> dict[str, Any]:
    """Wait ``payload["s"]`` seconds (default 0), record the run through
    ``sync_to_async``, and return the context's view of the job."""
    await _enter()
    try:
        await asyncio.sleep(float((payload or {}).get("s", 0)))
        await sync_to_async(record)(ctx, "aio")
        return {"jid": ctx.jid, "attempt": ctx.attempt, "worker": ctx.worker}
    finally:
        _leave()


@job("aio.fail", max_retry=1)
async def fail_async(payload: Any, ctx: Any) -> None:
    """Fail: retryable unless ``payload["fatal"]``."""
    await asyncio.sleep(0)
    if (payload or {}).get("fatal"):
        raise NonRetryableError("fatal async failure")
    raise ValueError("async failure")


@job("aio.sleep", max_retry=0)
async def sleep_async(payload: Any, ctx: Any) -> str:
    """Record the run, then sleep ``payload["s"]`` seconds at one ``await`` (a cancel
    or a timeout cancels it there); with ``beat``, call ``ctx.aheartbeat()`` first."""
    await sync_to_async(record)(ctx, "aio-sleep")
    if (payload or {}).get("beat") and not await ctx.aheartbeat():
        return "lease lost"
    await asyncio.sleep(float(payload["s"]))
    return "slept"


@job("aio.noop", max_retry=0)
async def noop_async(payload: Any, ctx: Any) -> None:
    """Do nothing."""


#: Set to let aio.stubborn handlers end (tests/worker/test_async_hostile.py).
stubborn_release = threading.Event()


@job("aio.stubborn", max_retry=0)
async def stubborn_async(payload: Any, ctx: Any) -> str:
    """Record the run, then ignore every cancellation (a timeout's, a cancel
    request's, the worker's stop) until :data:`stubborn_release` is set; with
    ``payload["give_up"]``, return at the first one instead."""
    await sync_to_async(record)(ctx, "aio-stubborn")
    while not stubborn_release.is_set():
        try:
            await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            if (payload or {}).get("give_up"):
                return "gave up"
    return "ignored"


@job("aio.raise_cancelled", max_retry=1)
async def raise_cancelled_async(payload: Any, ctx: Any) -> None:
    """Raise ``CancelledError`` itself (an inner task that was cancelled), unasked."""
    await sync_to_async(record)(ctx, "aio-raise-cancelled")
    raise asyncio.CancelledError("an inner task was cancelled")


@job("aio.raise_base", max_retry=0)
async def raise_base_async(payload: Any, ctx: Any) -> None:
    """Raise a ``BaseException`` that is no ``Exception`` (``payload["kind"]``)."""
    await sync_to_async(record)(ctx, "aio-raise-base")
    kinds = {"exit": SystemExit, "interrupt": KeyboardInterrupt, "base": BaseException}
    raise kinds[payload["kind"]]("raised by the handler")


@job("aio.not_json", max_retry=0)
async def not_json_async(payload: Any, ctx: Any) -> Any:
    """Return something JSON cannot encode."""
    await asyncio.sleep(0)
    return {"when": object()}


@job("aio.block_loop", max_retry=0)
async def block_loop_async(payload: Any, ctx: Any) -> str:
    """Record the run, then block the event loop (no ``await``) until
    :data:`stubborn_release` is set."""
    await sync_to_async(record)(ctx, "aio-block-loop")
    stubborn_release.wait()
    return "blocked"


def sync_only_middleware(handler: Any) -> Any:
    """A middleware that cannot wrap async handlers (no ``async_capable``): async
    handlers then run in their runner's thread through ``async_to_sync``."""

    def wrapped(payload: Any, ctx: Any) -> Any:
        return handler(payload, ctx)

    return wrapped

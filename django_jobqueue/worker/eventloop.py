"""The foreman's event loop for ``async def`` handlers (docs/design.md#execution):
one loop in a thread of its own, run under asgiref's ``async_to_sync`` so that the
handlers' thread-sensitive ``sync_to_async`` calls run in one sync thread the foreman
closes. :mod:`.aio` hands jobs to it; this module knows nothing of jobs.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.sync import async_to_sync
from django.db import connections

__all__ = ["ForemanLoop"]

logger = logging.getLogger(__name__)

#: Seconds the loop's last tasks get at its stop before they are cancelled.
_STOP_GRACE_S = 5.0


def _stop_under_shutdown(loop: asyncio.AbstractEventLoop) -> None:
    """Stop ``loop`` once it runs again, and again every 0.1 s until it is closed:
    the run that ``asyncio.run`` makes at its end to wait for the tasks it cancels
    then raises ``RuntimeError`` instead of waiting for ever."""

    def stop() -> None:
        loop.stop()
        loop.call_later(0.1, stop)

    loop.call_later(0.1, stop)


class ForemanLoop:
    """One event loop in its own thread, run under ``async_to_sync``.

    Parameters
    ----------
    name:
        The loop thread's name; its sync thread is named ``<name>-sync``.
    """

    def __init__(self, name: str = "jq-loop") -> None:
        self.name = name
        self.loop: asyncio.AbstractEventLoop | None = None
        self._context: contextvars.Context | None = None
        self._stop: asyncio.Future[None] | None = None
        self._ready = threading.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Tasks that ignored their cancellation at the stop, left running.
        self._left_running = 0
        self._thread = threading.Thread(target=self._run, name=f"{name}-sync", daemon=True)

    def start(self) -> None:
        """Start the loop; return once it runs."""
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        # This thread serves the loop's thread-sensitive sync_to_async calls while
        # async_to_sync runs the loop in a thread of asgiref's.
        try:
            async_to_sync(self._main)()
        except Exception:
            if not self._left_running:
                logger.exception("the event loop of async handlers failed")
        finally:
            self._ready.set()
            connections.close_all()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._context = contextvars.copy_context()
        self._stop = self.loop.create_future()
        threading.current_thread().name = self.name
        self._ready.set()
        await self._stop
        if self._tasks:
            _done, pending = await asyncio.wait(list(self._tasks), timeout=_STOP_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                _done, pending = await asyncio.wait(pending, timeout=1.0)
            if pending:
                # They ignore their cancellation: asyncio.run, under async_to_sync,
                # would cancel and wait for them at its end, for ever, in a thread
                # the interpreter joins at exit, so the process would never exit
                # after a SIGTERM. Stop the loop under that wait instead.
                self._left_running = len(pending)
                logger.warning(
                    "async handlers still running at the stop ignore their "
                    "cancellation; left unfinished tasks=%d",
                    len(pending),
                )
                _stop_under_shutdown(self.loop)

    def submit(self, factory: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Run the coroutine ``factory()`` makes as a task of the loop (thread-safe)."""
        assert self.loop is not None and self._context is not None
        self.loop.call_soon_threadsafe(self.spawn, factory, context=self._context)

    def spawn(self, factory: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """In the loop's thread: run the coroutine ``factory()`` makes as a task."""
        task = asyncio.ensure_future(factory())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def call(self, func: Callable[[], Any]) -> None:
        """Call ``func()`` in the loop's thread soon (thread-safe); never raises."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(func)
            except RuntimeError:  # closed meanwhile
                pass

    def stop(self, timeout_s: float = _STOP_GRACE_S + 2) -> None:
        """Let running tasks end (cancelled after a grace), stop the loop, and wait up
        to ``timeout_s`` seconds for its threads (and their connections) to close."""
        stop = self._stop

        def finish() -> None:
            if stop is not None and not stop.done():
                stop.set_result(None)

        self.call(finish)
        self._thread.join(timeout_s)

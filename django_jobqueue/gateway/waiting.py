"""The long-poll of ``POST /sdk/worker/claim``: wait for a wake-up or the next poll.

A waiting claim polls every ``JOBQUEUE["GATEWAY"]["CLAIM_POLL_MS"]`` (on every
database: polling alone finds every job). On PostgreSQL a listener thread, shared by
the waiting claims of the process and running only while one waits, ``LISTEN``\\s with
the workers' own :func:`django_jobqueue.worker.wakeup.listen` and wakes them as soon
as a job is committed, so they claim it at once.

A claim waits with :func:`wait_async` (the claim view is ``async``): under ASGI it
holds no thread while it waits, only an event the listener sets from its thread.
Under WSGI every request holds a thread all along, so :func:`wsgi_slot` caps the
claims that wait at once per process (``JOBQUEUE["GATEWAY"]["MAX_WAITING_CLAIMS"]``):
one over the cap answers at once, so producers keep the other threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.db import connections

from ..core.conf import get_config
from ..worker import wakeup

__all__ = [
    "generation",
    "registered",
    "stop_listening",
    "wait",
    "wait_async",
    "waiting_claims",
    "wsgi_slot",
]

_cond = threading.Condition()
_generation = 0
_waiters = 0
_listener: tuple[threading.Thread, threading.Event] | None = None
#: Every listener started, so :func:`stop_listening` can wait for the stopped ones too.
_started: list[threading.Thread] = []
#: The claims waiting in :func:`wait_async`: their event loop, event and queues.
_async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event, frozenset[str]]] = set()
#: Wake-ups per queue name, for :func:`generation` of given queues.
_by_queue: dict[str, int] = {}
#: Wake-ups of every queue (``on_wakeup("")``: a catch-up, or a lost session).
_every = 0
#: Claims waiting under WSGI now, in this process (:func:`wsgi_slot`).
_wsgi_waiting = 0


def _woken(queue: str) -> None:
    global _generation, _every
    with _cond:
        _generation += 1
        if queue:
            if len(_by_queue) >= 10_000 and queue not in _by_queue:
                _by_queue.clear()  # bounded; a cleared count reads as a change: a re-claim
                _every += 1
            _by_queue[queue] = _by_queue.get(queue, 0) + 1
        else:
            _every += 1
        _cond.notify_all()
        # Only the claims of that queue: a producer's enqueue must not wake all of them.
        woken = [w for w in _async_waiters if not queue or queue in w[2]]
    for loop, event, _queues in woken:
        try:
            loop.call_soon_threadsafe(event.set)
        except RuntimeError:  # its loop closed: the claim is gone
            pass


def generation(queues: Iterable[str] | None = None) -> int:
    """Return the wake-up count; pass it to :func:`wait` after a claim found nothing.

    With ``queues``: the count of wake-ups of those queues (and of every queue), for
    :func:`wait_async` with the same queues.
    """
    with _cond:
        if queues is None:
            return _generation
        return _every + sum(_by_queue.get(queue, 0) for queue in queues)


def wait(since: int, timeout_s: float) -> None:
    """Wait until a wake-up after ``generation() == since``, or ``timeout_s`` seconds."""
    with _cond:
        _cond.wait_for(lambda: _generation != since, timeout=max(0.0, timeout_s))


async def wait_async(since: int, timeout_s: float, queues: Iterable[str]) -> None:
    """As :func:`wait`, awaiting an event: no thread is held while it waits.

    Woken by a wake-up of one of ``queues`` (or of every queue) only.

    Parameters
    ----------
    since
        :func:`generation` of ``queues`` before the claim that found nothing.
    timeout_s
        Longest wait, seconds.
    queues
        The claim's queue names.
    """
    event = asyncio.Event()
    names = frozenset(queues)
    entry = (asyncio.get_running_loop(), event, names)
    with _cond:
        if _every + sum(_by_queue.get(queue, 0) for queue in names) != since:
            return
        _async_waiters.add(entry)
    try:
        await asyncio.wait_for(event.wait(), timeout=max(0.0, timeout_s))
    except TimeoutError:
        pass
    finally:
        with _cond:
            _async_waiters.discard(entry)


def waiting_claims() -> int:
    """Return how many claims wait under WSGI in this process now."""
    with _cond:
        return _wsgi_waiting


@contextmanager
def wsgi_slot() -> Iterator[bool]:
    """Take one of the process's ``MAX_WAITING_CLAIMS`` slots while the block runs.

    Yields
    ------
    bool
        True if a slot was free (the claim may wait); False if the cap is reached
        (answer at once, with no jobs and ``Retry-After``).
    """
    global _wsgi_waiting
    cap = get_config().GATEWAY.MAX_WAITING_CLAIMS
    with _cond:
        free = _wsgi_waiting < cap
        if free:
            _wsgi_waiting += 1
    try:
        yield free
    finally:
        if free:
            with _cond:
                _wsgi_waiting -= 1


@contextmanager
def registered(using: str) -> Iterator[None]:
    """Count the caller among the waiters of ``using`` while the block runs.

    The first waiter on PostgreSQL (with ``JOBQUEUE["NOTIFY"]``) starts the listener;
    the last one to leave stops it.
    """
    global _waiters, _listener
    with _cond:
        _waiters += 1
        if _listener is None and connections[using].vendor == "postgresql" and get_config().NOTIFY:
            stop = threading.Event()
            thread = threading.Thread(
                target=wakeup.listen,
                args=(using, _woken, stop),
                name="jq-gateway-listen",
                daemon=True,
            )
            _listener = (thread, stop)
            _started[:] = [t for t in _started if t.is_alive()]
            _started.append(thread)
            thread.start()
    try:
        yield
    finally:
        with _cond:
            _waiters -= 1
            if _waiters == 0 and _listener is not None:
                _listener[1].set()
                _listener = None


def stop_listening(timeout_s: float = 5.0) -> None:
    """Stop the listener now and wait for every listener's connection to close (tests)."""
    global _listener
    with _cond:
        listener, _listener = _listener, None
        threads = list(_started)
    if listener is not None:
        listener[1].set()
    for thread in threads:
        thread.join(timeout_s)

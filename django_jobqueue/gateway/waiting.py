"""The long-poll of ``POST /sdk/worker/claim``: wait for a due job without querying.

A claim that found nothing waits on an event (:func:`wait_async`; the claim view is
``async``, so under ASGI it holds no thread) and runs no query of its own while it
waits. One watcher per process, running only while claims wait, does the database
work for all of them:

- on PostgreSQL (with ``JOBQUEUE["NOTIFY"]``) a listener thread ``LISTEN``\\s with the
  workers' own :func:`django_jobqueue.worker.wakeup.listen`: a wake-up of a queue
  that claims wait on makes the watcher look at that queue at once;
- every ``JOBQUEUE["GATEWAY"]["CLAIM_POLL_MS"]`` it looks at every queue that claims
  wait on (on every database: this alone finds every job, including those that
  become due with time: delays, retries' backoff, reaped leases, resumed queues).

To look at a queue is one query, whatever the number of claims waiting on it: up to
*n* due jobs' types (*n*: the claims waiting on it; paused queues are skipped, and
the types are limited to those the claims run). Each job found wakes one claim that
runs its type, which then claims as usual (:func:`django_jobqueue.storage.claim`,
so pauses, leases and filters hold as for any claim). So 200 claims waiting on an
idle queue cost one query per ``CLAIM_POLL_MS`` per process, not 400 a second; a job
enqueued wakes one claim, not all of them.

Under WSGI every request holds a thread all along, so :func:`wsgi_slot` caps the
claims that wait at once per process (``JOBQUEUE["GATEWAY"]["MAX_WAITING_CLAIMS"]``):
one over the cap answers at once, so producers keep the other threads.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.db import connections

from ..core.conf import get_config
from ..core.dbclock import Now
from ..core.reconnect import log_failure
from ..models import Job
from ..store.pauses import paused_queues
from ..worker import wakeup

__all__ = [
    "LINGER_S",
    "claimed",
    "generation",
    "registered",
    "stop_listening",
    "wait_async",
    "waiters",
    "waiting_claims",
    "wsgi_slot",
]

logger = logging.getLogger(__name__)

#: How long (s) the watcher stays up after the last claim stopped waiting, so a
#: worker's next claim finds its ``LISTEN`` session open.
LINGER_S = 5.0


class _Waiter:
    """One waiting claim: its event loop and event, its queues and job types."""

    __slots__ = ("event", "job_types", "loop", "queues", "woken_for")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        queues: frozenset[str],
        job_types: frozenset[str],
    ) -> None:
        self.loop = loop
        self.event = asyncio.Event()
        self.queues = queues
        self.job_types = job_types  # empty: every type
        self.woken_for: str | None = None  # the queue of the job that woke it

    def runs(self, job_type: str) -> bool:
        return not self.job_types or job_type in self.job_types

    def wake(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:  # its loop closed: the claim is gone
            pass


_lock = threading.Lock()
#: The claims waiting in :func:`wait_async`, by queue name (in the order they came).
_by_queue: dict[str, dict[_Waiter, None]] = {}
#: Wake-ups per queue name (a notification, or a poll that found a job), for
#: :func:`generation`; ``_every``: of every queue (when counts were dropped).
_generations: dict[str, int] = {}
_every = 0
#: Claims woken for a job of the queue that have not finished their claim yet: the
#: watcher does not wake another claim for the same job meanwhile.
_pending: dict[str, int] = {}
#: Claims inside :func:`registered` (waiting, or claiming between two waits), and
#: how many of them name each queue: a wake-up of another queue is ignored.
_registered = 0
_interest: dict[str, int] = {}
_idle_since = 0.0
_watcher: _Watcher | None = None
#: Every watcher thread started, so :func:`stop_listening` can wait for them.
_started: list[threading.Thread] = []
#: Claims waiting under WSGI now, in this process (:func:`wsgi_slot`).
_wsgi_waiting = 0


def _bump(queue: str) -> None:
    """Count a wake-up of ``queue`` ("" every queue); the caller holds ``_lock``."""
    global _every
    if not queue:
        _every += 1
    elif queue in _interest:
        _generations[queue] = _generations.get(queue, 0) + 1
        if len(_generations) > 10_000:  # bounded: keep the queues waited on now
            for name in [name for name in _generations if name not in _interest]:
                del _generations[name]
            _every += 1  # a dropped count reads as a change: a claim looks again


def generation(queues: Iterable[str]) -> int:
    """Return the wake-up count of ``queues``; pass it to :func:`wait_async` after a
    claim of those queues found nothing, so a wake-up in between is not missed."""
    with _lock:
        return _every + sum(_generations.get(queue, 0) for queue in queues)


async def wait_async(
    since: int, timeout_s: float, queues: Iterable[str], job_types: Iterable[str] = ()
) -> str | None:
    """Wait until the watcher finds a job for this claim, or ``timeout_s`` passed.

    Call it inside :func:`registered` (which runs the watcher). No thread is held
    and no query is run while it waits.

    Parameters
    ----------
    since
        :func:`generation` of ``queues`` taken before the claim that found nothing.
    timeout_s
        Longest wait, seconds.
    queues
        The claim's queue names.
    job_types
        The job types the claim runs; empty: every type.

    Returns
    -------
    str or None
        None when ``timeout_s`` passed with no job found for it. Else claim again:
        the queue whose job woke it (then call :func:`claimed` with it once that
        claim is done, found it a job or not), or ``""`` when a wake-up came
        since ``since``.
    """
    waiter = _Waiter(asyncio.get_running_loop(), frozenset(queues), frozenset(job_types))
    with _lock:
        if _every + sum(_generations.get(queue, 0) for queue in waiter.queues) != since:
            return ""
        for queue in waiter.queues:
            _by_queue.setdefault(queue, {})[waiter] = None
    try:
        await asyncio.wait_for(waiter.event.wait(), timeout=max(0.0, timeout_s))
    except TimeoutError:
        pass
    finally:
        with _lock:
            for queue in waiter.queues:
                entries = _by_queue.get(queue)
                if entries is not None:
                    entries.pop(waiter, None)
                    if not entries:
                        del _by_queue[queue]
            woken_for = waiter.woken_for
    return woken_for


def claimed(queue: str) -> None:
    """A claim woken for a job of ``queue`` (:func:`wait_async`) finished its claim."""
    with _lock:
        left = _pending.get(queue, 0) - 1
        if left > 0:
            _pending[queue] = left
        else:
            _pending.pop(queue, None)


def _wake(queue: str, job_types: list[str]) -> None:
    """Wake one claim waiting on ``queue`` per job found (of type ``job_types[i]``)."""
    with _lock:
        _bump(queue)
        chosen: list[_Waiter] = []
        candidates = [w for w in _by_queue.get(queue, ()) if w.woken_for is None]
        for job_type in job_types:
            for waiter in candidates:
                if waiter.woken_for is None and waiter.runs(job_type):
                    waiter.woken_for = queue
                    chosen.append(waiter)
                    break
        if chosen:
            _pending[queue] = _pending.get(queue, 0) + len(chosen)
    for waiter in chosen:
        waiter.wake()


class _Watcher:
    """The process's watcher: the listener thread and the poller thread."""

    def __init__(self, using: str) -> None:
        self.using = using
        self.stop = threading.Event()
        self.kick = threading.Event()
        #: Queues to look at now (a wake-up came).
        self.dirty: set[str] = set()
        threads = [threading.Thread(target=self._poll, name="jq-gateway-poll", daemon=True)]
        if connections[using].vendor == "postgresql" and get_config().NOTIFY:
            threads.append(
                threading.Thread(
                    target=wakeup.listen,
                    args=(using, self._notified, self.stop),
                    name="jq-gateway-listen",
                    daemon=True,
                )
            )
        self.threads = threads

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _notified(self, queue: str) -> None:
        """The listener's callback (its thread): look at ``queue`` at once.

        ``""`` (a catch-up after a new ``LISTEN``, a lost session, or the pooler's
        stand-in every ``MIN_SLEEP_MS``) is left to the poll every
        ``CLAIM_POLL_MS``, which finds what a lost wake-up missed: a pooler's ticks
        do not turn into a query per tick, nor make claims claim again.
        """
        if not queue:
            return
        with _lock:
            if queue not in _interest:
                return  # no claim waits on it here (a producer's queue, say)
            _bump(queue)
            self.dirty.add(queue)
        self.kick.set()

    def _poll(self) -> None:
        global _watcher
        next_full = 0.0
        try:
            while not self.stop.is_set():
                interval_s = get_config().GATEWAY.CLAIM_POLL_MS / 1000
                self.kick.wait(max(0.0, next_full - time.monotonic()))
                if self.stop.is_set():
                    break
                self.kick.clear()
                now = time.monotonic()
                with _lock:
                    if _registered == 0 and now - _idle_since >= LINGER_S:
                        if _watcher is self:
                            _watcher = None
                        self.stop.set()
                        break
                    dirty, self.dirty = self.dirty, set()
                    if now >= next_full:
                        look_at = set(_by_queue)
                        next_full = now + interval_s
                    else:
                        look_at = {queue for queue in dirty if queue in _by_queue}
                if look_at:
                    self._look(sorted(look_at))
        finally:
            self.stop.set()
            connections.close_all()

    def _look(self, queues: list[str]) -> None:
        """One query per queue of ``queues``: wake a claim per due job found."""
        try:
            paused = paused_queues(self.using)
            for queue in queues:
                if queue in paused:
                    continue
                with _lock:
                    waiters = [w for w in _by_queue.get(queue, ()) if w.woken_for is None]
                    pending = _pending.get(queue, 0)
                if not waiters:
                    continue
                due = Job.objects.using(self.using).filter(
                    waiting=True, queue=queue, run_at__lte=Now()
                )
                if all(waiter.job_types for waiter in waiters):
                    due = due.filter(
                        job_type__in=sorted(set().union(*(w.job_types for w in waiters)))
                    )
                # The first ``pending`` jobs are those the claims woken before take now.
                found = list(due.values_list("job_type", flat=True)[: pending + len(waiters)])
                if len(found) > pending:
                    _wake(queue, found[pending:])
        except Exception:  # the database is away: claims end at their deadline
            log_failure(
                logger, self.using, "the gateway's claim watcher could not poll; again soon"
            )
            conn = connections[self.using]
            if conn.connection is not None and not conn.is_usable():
                conn.close()


def waiting_claims() -> int:
    """Return how many claims wait under WSGI in this process now."""
    with _lock:
        return _wsgi_waiting


def waiters() -> int:
    """Return how many claims wait in :func:`wait_async` in this process now."""
    with _lock:
        return len(set().union(*_by_queue.values())) if _by_queue else 0


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
    with _lock:
        free = _wsgi_waiting < cap
        if free:
            _wsgi_waiting += 1
    try:
        yield free
    finally:
        if free:
            with _lock:
                _wsgi_waiting -= 1


@contextmanager
def registered(using: str, queues: Iterable[str]) -> Iterator[None]:
    """Count the caller among the claims that wait on ``using`` while the block runs.

    ``queues``: the claim's queue names; wake-ups of them count in :func:`generation`
    from now on, so one that comes while the claim queries is not missed.

    The first one starts the watcher (its poller, and its listener on PostgreSQL
    with ``JOBQUEUE["NOTIFY"]``); it stops :data:`LINGER_S` seconds after the last
    one left.
    """
    global _registered, _watcher, _idle_since
    names = frozenset(queues)
    with _lock:
        _registered += 1
        for queue in names:
            _interest[queue] = _interest.get(queue, 0) + 1
        if _watcher is not None and (_watcher.stop.is_set() or _watcher.using != using):
            _watcher.stop.set()
            _watcher.kick.set()
            _watcher = None
        if _watcher is None:
            _watcher = _Watcher(using)
            _started[:] = [t for t in _started if t.is_alive()] + _watcher.threads
            _watcher.start()
    try:
        yield
    finally:
        with _lock:
            _registered -= 1
            for queue in names:
                _interest[queue] -= 1
                if not _interest[queue]:
                    del _interest[queue]
            if _registered == 0:
                _idle_since = time.monotonic()


def stop_listening(timeout_s: float = 5.0) -> None:
    """Stop the watcher now and wait until its threads closed their connections."""
    global _watcher
    with _lock:
        watcher, _watcher = _watcher, None
        threads = list(_started)
    if watcher is not None:
        watcher.stop.set()
        watcher.kick.set()
    for thread in threads:
        thread.join(timeout_s)

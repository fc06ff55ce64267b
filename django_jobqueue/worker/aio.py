"""``async def`` handlers on the foreman's event loop (docs/design.md#execution).

A foreman whose registry has a job type with an ``async def`` handler runs one event
loop, in a thread of its own (``jq-loop``). A runner that takes a job of such a type
does what it does for any job up to the handler (the start, the expiry and job type
checks: :func:`executor.begin`), then hands the job to the loop as a task and goes
on to its next job. No thread waits for an async job:

- the job keeps its worker slot until its handler returns (a foreman runs at most
  ``concurrency`` jobs, sync and async together: a runner waits for a free slot
  before it takes or claims the next job), and the governor adds no runner thread
  while one is free to hand jobs over (:meth:`ForemanAsync._threads_wanted`);
- its timeout is watched by one task of the loop (every 50 ms): past ``timeout_ms``
  the handler's task is cancelled (``CancelledError`` at its ``await``) and the
  attempt is stored as timed out, as a sync one is, also when the handler caught
  the cancellation and returned. A handler still running :data:`_ABANDON_S` after
  that cancellation (it ignores it, or waits in a long ``sync_to_async`` call) is
  abandoned as a stuck sync handler's thread is: its time-out is stored, its slot
  freed, and whatever it returns later is not stored;
- a cancel request seen by a heartbeat cancels its task the same way, and the
  attempt is stored ``cancelled`` (``ctx.cancelled`` is set first, as for sync
  handlers); a lost lease drops its outcome, as for sync handlers;
- an exception the handler raises is its attempt's failure, ``BaseException``s
  too (``SystemExit``, ``KeyboardInterrupt``, a ``CancelledError`` nobody asked
  for, as an inner task's): raised on, they would end its task unstored or stop
  the loop of every async job;
- its success goes to the completer from the loop (no database on the way); any
  other outcome, and the handler's own ``sync_to_async`` ORM calls, run in the
  loop's *sync thread* (``jq-loop-sync``): the loop runs under asgiref's
  ``async_to_sync`` in that thread, so Django's thread-sensitive ``sync_to_async``
  calls of every task run there, one at a time, on connections this foreman closes.

Middleware wraps async handlers only when every listed middleware says it can
(``middleware.async_capable = True``: it takes an async handler and returns one);
with any other middleware listed, async handlers run as before, each in its
runner's thread through ``async_to_sync``.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from .. import reaping
from ..core.exceptions import UnknownJobType
from ..core.reconnect import log_failure
from ..core.signals import job_started
from ..store.registry import JobDescription, get_job_description, registered_job_types
from . import executor
from .completer import Completer
from .connections import recycle_connections
from .eventloop import ForemanLoop
from .governor import Governor
from .middleware import Middleware
from .options import _Running

__all__ = ["ForemanAsync", "async_capable", "is_async_handler"]

logger = logging.getLogger(__name__)

#: How often (s) the loop looks for async jobs past their timeout.
_WATCH_S = 0.05
#: Seconds an async handler has to end after its timeout cancelled it; still
#: running then, it is abandoned (:meth:`ForemanAsync._abandon`).
_ABANDON_S = 1.0


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` is an ``async def`` function (it runs on the event loop)."""
    return inspect.iscoroutinefunction(handler)


def async_capable(middleware: Sequence[Middleware]) -> bool:
    """Whether every item of ``middleware`` wraps async handlers
    (``async_capable = True``, as Django's middleware flags say it)."""
    return all(getattr(item, "async_capable", False) for item in middleware)


@functools.lru_cache(maxsize=1024)
def _wrapped_async(
    func: Callable[..., Awaitable[Any]], middleware: tuple[Middleware, ...]
) -> Callable[[Any, Any], Awaitable[Any]]:
    """The async handler ``func`` wrapped in ``middleware`` (all async-capable), built
    once per pair, not per job."""
    handler: Callable[[Any, Any], Awaitable[Any]] = func
    for wrap in reversed(middleware):
        handler = wrap(handler)
    return handler


def _closing(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` that closes its thread's connections after each call (for a
    ``sync_to_async(thread_sensitive=False)`` call: nobody else closes them there)."""

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        finally:
            connections.close_all()

    return call


class ForemanAsync:
    """The async side of a foreman: hands ``async def`` jobs to its loop."""

    using: str
    concurrency: int
    governor: Governor
    completer: Completer | None
    middleware: tuple[Middleware, ...]
    log_success: bool
    recent_run_ms: float
    _busy: int
    _busy_lock: threading.Lock
    _stopping: threading.Event

    name: str
    _inbox: collections.deque[_Running]
    _held_lock: threading.Lock
    _taken_count: int
    _prefetched_taken: int
    _claim_lock: threading.Lock
    _last_claim_short: bool

    # Of the Foreman and the other mixins (annotations only).
    _take_held: Callable[[], _Running | None]
    _claim_batch: Callable[..., _Running | None]
    _wake_runners: Callable[[int], None]
    is_short: Callable[[str], bool]
    _outcome: Callable[[_Running, str], None]
    _stored: Callable[[_Running, str | None], None]
    _unregister: Callable[[_Running], None]
    _record_run: Callable[[str, float], None]

    def _init_async(self) -> None:
        """Set up the async side: a loop only when a job type is ``async def`` and
        the middleware can wrap async handlers."""
        self.aio: ForemanLoop | None = None
        self._async_types: dict[str, bool] = {}
        #: Async jobs handed to the loop whose handler has not returned yet.
        self._async_running = 0
        #: Runners inside a sync job now (from its start to its outcome).
        self._sync_running = 0
        #: Async jobs running, by job pk: (deadline by ``time.monotonic()``, task, job).
        self._async_deadlines: dict[int, tuple[float, asyncio.Task[Any], _Running]] = {}
        #: Pks of async jobs whose task the timeout watch cancelled.
        self._timed_out: set[int] = set()
        #: By job pk: how many times its task was cancelled for that job (its
        #: timeout, a cancel request, a lost lease); any other cancellation of a
        #: task is the loop's stop.
        self._job_cancels: dict[int, int] = {}
        self._watchdog: asyncio.Future[None] | None = None
        #: Slots reserved by runners on their way to a job (:meth:`_take_slot`).
        self._reserved = 0
        #: Notified when a slot frees (an async job ended) or at a stop.
        self._slot_free = threading.Condition(self._busy_lock)
        #: The thread of the loop's claims ahead, and whether one is under way.
        self._loop_claimer: executor.Runner | None = None
        self._loop_claiming = False
        #: The share of async jobs among the recent ones (a moving average over
        #: about the last 20): how many runner threads the sync ones need.
        self.async_share = 0.0
        if not async_capable(self.middleware):
            return
        if any(is_async_handler(desc.handler) for desc in registered_job_types().values()):
            self.aio = ForemanLoop()
            self._loop_claimer = executor.Runner("jq-loop-claim")

    def _is_async(self, job_type: str) -> bool:
        """Whether jobs of ``job_type`` run on the loop (cached per type)."""
        known = self._async_types.get(job_type)
        if known is None:
            try:
                handler = get_job_description(job_type).handler
            except UnknownJobType:
                known = False  # the sync path stores the error
            else:
                known = self.aio is not None and is_async_handler(handler)
            self._async_types[job_type] = known
        return known

    def _take_slot(self) -> bool:
        """In a runner, before it takes or claims a job: wait for a free worker slot
        and reserve it; False: the foreman stops. Only async jobs, which hold a
        slot but no runner, ever make a runner wait here: without a loop a runner is
        its slot, and nothing is reserved."""
        if self.aio is None:
            return True
        with self._slot_free:
            while self._busy + self._reserved >= self.concurrency:
                if self._stopping.is_set():
                    return False
                self._slot_free.wait(0.1)
            self._reserved += 1
            return True

    def _use_slot(self, running: _Running | None) -> None:
        """The reserved slot is ``running``'s (counted in ``_busy`` from now), or goes
        back (None: the claim found nothing)."""
        if self.aio is None:  # nothing reserved, nobody waits for a slot
            if running is not None:
                with self._busy_lock:
                    running.holds_slot = True
                    self._busy += 1
            return
        with self._slot_free:
            self._reserved -= 1
            if running is not None:
                running.holds_slot = True
                self._busy += 1
            else:
                self._slot_free.notify()

    def _release_slot(self, running: _Running) -> None:
        """Give back ``running``'s slot, once (its runner's end, or its timeout)."""
        if self.aio is None:
            with self._busy_lock:
                if running.holds_slot:
                    running.holds_slot = False
                    self._busy -= 1
            return
        with self._slot_free:
            if running.holds_slot:
                running.holds_slot = False
                self._busy -= 1
                self._slot_free.notify()

    def _threads_wanted(self) -> bool:
        """Whether another runner thread may help: only as many as the recent sync
        jobs fill (their share of the slots) and one more, and while async jobs run,
        only when every runner is inside a sync job. An async job needs no thread:
        more runners would only contend for the claim lock."""
        if self.aio is None:
            return True
        need = 1 + math.ceil(self.concurrency * (1.0 - self.async_share))
        if self.governor.workers >= need:
            return False
        return not self._async_running or self._sync_running >= self.governor.workers

    def _note_kind(self, *, is_async: bool) -> None:
        """Count one job taken into :attr:`async_share` (races lose an update only)."""
        self.async_share += ((1.0 if is_async else 0.0) - self.async_share) / 20

    def _hand_to_loop(self, running: _Running) -> bool:
        """In a runner, its slot reserved and the job started: begin the attempt and
        hand its handler to the loop; return False when it ended before any handler
        (expired, or an unknown job type: stored, the slot not kept)."""
        assert self.aio is not None
        job, ctx = running.job, running.ctx
        started, desc, status = executor.begin(job, ctx, self.log_success)
        if desc is None:
            if status is not None:
                self._outcome(running, status)
            return False
        running.started = started
        running.deadline = started + job.timeout_ms / 1000  # the heartbeat's look
        with self._busy_lock:
            self._async_running += 1
        aio = self.aio
        self.aio.submit(lambda: self._run_async(running, desc, started, aio))
        return True

    async def _run_async(
        self, running: _Running, desc: JobDescription, started: float, aio: ForemanLoop
    ) -> None:
        """On the loop: run one async job, then, in the same task, each next held job
        the loop can begin (:meth:`_next_on_loop`); the slot passes from one to the
        next, and goes back when none follows. A task per job and a timer per job
        (``asyncio.timeout``) were a sixth of an async no-op job's CPU: the timeouts
        are watched by one task (:meth:`_watch_timeouts`)."""
        task = asyncio.current_task()
        assert task is not None
        if self._watchdog is None:
            self._watchdog = asyncio.ensure_future(self._watch_timeouts())
        current = running
        try:
            while True:
                await self._run_one(current, desc, started, aio, task)
                following = self._next_on_loop() if current.holds_slot else None
                if following is None:
                    return
                with self._slot_free:  # the slot (and the async count) pass on
                    current.holds_slot = False
                    following[0].holds_slot = True
                current, desc, started = following
                await asyncio.sleep(0)  # the loop's other tasks and callbacks first
        finally:
            if not current.abandoned:  # else _abandon gave its slot and count back
                self._leave_loop(current)

    def _leave_loop(self, running: _Running) -> None:
        """An async job leaves the loop (its chain ended, or it was abandoned): one
        fewer async job runs, and its slot, if it still holds one, goes back."""
        with self._slot_free:
            self._async_running -= 1
            if running.holds_slot:
                running.holds_slot = False
                self._busy -= 1
            self._slot_free.notify()

    async def _watch_timeouts(self) -> None:
        """On the loop: every :data:`_WATCH_S` seconds, cancel the task of each async
        job past its ``timeout_ms`` (its attempt is then stored as timed out); ends
        once the foreman stops and no async job runs."""
        while not self._stopping.is_set() or self._async_deadlines:
            await asyncio.sleep(_WATCH_S)
            now = time.monotonic()
            for pk, (deadline, task, running) in list(self._async_deadlines.items()):
                if now < deadline:
                    continue
                if pk not in self._timed_out:
                    self._timed_out.add(pk)
                    self._cancel_for_job(pk, task)
                elif now >= deadline + _ABANDON_S:
                    self._abandon(running)

    def _cancel_for_job(self, pk: int, task: asyncio.Task[Any]) -> None:
        """On the loop: cancel ``task`` for its job ``pk`` (counted, see :meth:`_run_one`)."""
        self._job_cancels[pk] = self._job_cancels.get(pk, 0) + 1
        task.cancel()

    def _cancel_job(self, pk: int) -> None:
        """On the loop: cancel the task of async job ``pk`` if its handler still runs
        (a late request finds the task running the next job of its chain: left be)."""
        entry = self._async_deadlines.get(pk)
        if entry is not None:
            self._cancel_for_job(pk, entry[1])

    def _abandon(self, running: _Running) -> None:
        """On the loop: give up on an async job whose handler ignored its timeout's
        cancellation for :data:`_ABANDON_S` seconds, as the slot's supervisor gives up
        on a stuck sync handler: its late outcome is dropped (its lease flagged lost),
        its slot and its place among the running jobs go now, and its time-out is
        stored in a thread of its own (the loop's sync thread may be the one stuck,
        in the handler's ``sync_to_async`` call)."""
        job = running.job
        self._async_deadlines.pop(job.pk, None)
        running.abandoned = True
        running.ctx.mark_lease_lost(timed_out=True)
        self._leave_loop(running)
        self._unregister(running)
        logger.error(
            "async handler ignored its timeout's cancellation, abandoned jid=%s type=%s",
            job.jid,
            job.job_type,
        )
        assert self.aio is not None
        self.aio.spawn(lambda: self._store_abandoned(running))

    async def _store_abandoned(self, running: _Running) -> None:
        """On the loop: store the time-out of an abandoned job (:meth:`_abandon`)."""
        try:
            status = await sync_to_async(_closing(executor.time_out), thread_sensitive=False)(
                running.job, running.ctx, started=running.started
            )
            if status is not None:
                self._outcome(running, status)
        except Exception:
            # Left processing: its lease expires and the reaper takes it back.
            logger.exception("storing an abandoned job's time-out failed jid=%s", running.job.jid)

    async def _run_one(
        self,
        running: _Running,
        desc: JobDescription,
        started: float,
        aio: ForemanLoop,
        task: asyncio.Task[Any],
    ) -> None:
        """Run ``running``'s handler in ``task`` (this one), then store (or hand to
        the completer) its outcome."""
        job, ctx = running.job, running.ctx
        ctx.on_cancel = functools.partial(aio.call, functools.partial(self._cancel_job, job.pk))
        self._async_deadlines[job.pk] = (started + job.timeout_ms / 1000, task, running)
        status: str | None = None
        pending = False
        try:
            handler = _wrapped_async(desc.handler, self.middleware)
            error: BaseException | None = None
            result: Any = None
            try:
                result = await handler(job.payload, ctx)
            except asyncio.CancelledError as exc:
                # This job's cancellations are handled here (the task runs on); any
                # other is the loop's stop: not this job's outcome.
                if self._uncancel(task, job.pk):
                    raise
                if not (job.pk in self._timed_out or ctx.cancelled or ctx.lease_lost):
                    error = exc  # raised by the handler unasked (an inner task's)
                # Else timed out, a cancel request or a lost lease: stored as such below.
            except GeneratorExit:
                raise  # the coroutine is closed (a task left running at the stop)
            except BaseException as exc:  # noqa: BLE001 (stored as the attempt's failure)
                # SystemExit, KeyboardInterrupt too: raised on, they stop the loop.
                self._uncancel(task, job.pk)
                error = exc
            else:
                self._uncancel(task, job.pk)
            finally:
                ctx.on_cancel = None
                if not running.abandoned:
                    self._async_deadlines.pop(job.pk, None)
                # Cancelled by its timeout: stored as timed out, whatever it did then.
                timed_out = job.pk in self._timed_out and not running.abandoned
                self._timed_out.discard(job.pk)
                self._job_cancels.pop(job.pk, None)
            if running.abandoned:
                return  # its time-out was stored by _abandon's task
            run_ms = (time.monotonic() - started) * 1000
            self.recent_run_ms += (run_ms - self.recent_run_ms) / 20
            self._record_run(job.job_type, run_ms)
            if timed_out:
                status = await sync_to_async(executor.time_out)(job, ctx, started=started)
            elif (
                self.completer is not None
                and error is None
                and not (ctx.cancelled or ctx.lease_lost)
                and executor.result_problem(result) is None
            ):
                # A success: to the completer from here, no database on the way.
                status = executor.store_outcome(
                    job,
                    ctx,
                    started=started,
                    error=None,
                    result=result,
                    completer=self.completer,
                    on_stored=lambda stored: self._stored(running, stored),
                    log_success=self.log_success,
                    on_loop=True,
                )
                if status == executor.OFF_LOOP:
                    # The completer closed meanwhile (a stop): stored from the loop's
                    # sync thread, where the ORM may run. Written on the loop, it was
                    # refused (SynchronousOnlyOperation) and the job left processing.
                    status = await sync_to_async(executor.store_outcome)(
                        job, ctx, started=started, error=None, result=result,
                        log_success=self.log_success,
                    )  # fmt: skip
            else:
                status = await sync_to_async(executor.store_outcome)(
                    job,
                    ctx,
                    started=started,
                    error=error,
                    result=result,
                    completer=self.completer,
                    on_stored=lambda stored: self._stored(running, stored),
                    log_success=self.log_success,
                )
            if status == executor.PENDING:
                pending = running.storing = True
            elif status is not None:
                self._outcome(running, status)
        except Exception:
            logger.exception("async job failed in the worker jid=%s", job.jid)
        finally:
            if not pending:
                self._unregister(running)

    def _uncancel(self, task: asyncio.Task[Any], pk: int) -> int:
        """Take back ``task``'s cancellations made for job ``pk``; return how many
        other cancellations it still has (the loop's stop)."""
        for _ in range(self._job_cancels.pop(pk, 0)):
            if task.uncancel() <= 0:
                break
        return task.cancelling()

    def _next_on_loop(self) -> tuple[_Running, JobDescription, float] | None:
        """On the loop, as an async job ends: take the next held job if the loop can
        start it with no database (an async type that starts without a write, not
        expired, no ``job_started`` receiver), and begin it; None: the slot goes
        back. A held job the loop cannot start goes back to the head of the inbox
        for a runner. Taking the last held job claims the next batch ahead, in the
        loop's claim thread."""
        if self._stopping.is_set():
            return None
        running = self._take_held()
        if running is None or not self._inbox:
            self._claim_ahead_for_loop()
        if running is None:
            return None
        if not self._starts_on_loop(running):
            self._put_back(running)
            return None
        job = running.job
        self._note_kind(is_async=True)
        if job.started_at is None:
            running.start_unrecorded = True  # stored by the next heartbeat or the outcome
            job.started_at = job.heartbeat_at
        running.ctx.worker = f"{self.name}:jq-loop"
        started, desc, _status = executor.begin(job, running.ctx, self.log_success)
        assert desc is not None  # neither expired nor unknown: _starts_on_loop
        running.started = started
        running.deadline = started + job.timeout_ms / 1000  # the heartbeat's look
        return running, desc, started

    def _starts_on_loop(self, running: _Running) -> bool:
        """Whether the loop may begin ``running`` itself: what :meth:`_start` and
        :func:`executor.begin` do for it reads and writes no database."""
        job = running.job
        if running.ctx.lease_lost or not self._is_async(job.job_type):
            return False
        if job.started_at is None and not (
            self.is_short(job.job_type) and not reaping.expired_before_start(job)
        ):
            return False  # its start is stored first, by a runner
        started_at = job.started_at or job.heartbeat_at
        if job.expires_at is not None and started_at is not None and job.expires_at < started_at:
            return False  # expired: a runner stores it so
        # ``receivers`` first, as executor.begin does: ``has_listeners`` walks the
        # receivers for this sender, 2.5% of an async no-op drain's GIL time with none.
        return not (job_started.receivers and job_started.has_listeners(job.job_type))

    def _put_back(self, running: _Running) -> None:
        """Return a held job the loop took to the head of the inbox, for a runner (not
        counted as taken: the runner's take counts it)."""
        with self._held_lock:
            running.taken = False
            self._taken_count -= 1
            if running.hold_until:
                self._prefetched_taken -= 1
        self._inbox.appendleft(running)
        self._wake_runners(1)

    def _claim_ahead_for_loop(self) -> None:
        """Claim the next batch in the loop's claim thread, unless one is under way or
        the last claim found the queue drained."""
        if self._loop_claiming or self._last_claim_short or self._stopping.is_set():
            return
        assert self._loop_claimer is not None
        self._loop_claiming = True
        self._loop_claimer.submit(self._claim_for_loop)

    def _claim_for_loop(self) -> None:
        """In the loop's claim thread: a claim ahead (no slot of its own), skipped while
        a runner claims."""
        try:
            if self._claim_lock.acquire(blocking=False):
                try:
                    self._claim_batch(f"{self.name}:jq-loop", keep_first=False)
                finally:
                    self._claim_lock.release()
        except Exception:
            # The runners' next claim meets the error again, where their loop backs off.
            log_failure(logger, self.using, "claiming ahead for the event loop failed")
        finally:
            self._loop_claiming = False
            recycle_connections()

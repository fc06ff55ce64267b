"""The worker slots of a foreman (see :mod:`.foreman`): each a supervising thread and
a runner thread that takes or claims a job, runs it and stores its outcome, then the
next, without a hand-off between jobs while any are due.

The supervising thread watches the running job's ``timeout_ms``: past it, the attempt
is stored as failed and the slot gets a fresh runner (Python cannot kill the stuck
thread; it is abandoned and its late outcome is not stored). An ``async def`` job is
handed to the foreman's event loop instead (:mod:`.aio`), which watches its timeout.

Not used alone: :class:`~.foreman.Foreman` sets the attributes annotated here.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import InterfaceError, OperationalError, connections

from .. import storage, storage_limits
from . import executor
from .completer import Completer
from .connections import recycle_connections
from .governor import Governor
from .middleware import Middleware
from .options import _Running, _Slot

__all__ = ["ForemanSlots"]

#: The foreman's logger: the slots are part of it, and a project's LOGGING (and
#: runworkers -v 2's "job claimed" lines) name it.
logger = logging.getLogger("django_jobqueue.worker.foreman")


class ForemanSlots:
    """The worker slots of a foreman: :meth:`_start_slot` and what its threads run."""

    name: str
    using: str
    concurrency: int
    break_time_ms: int
    min_sleep_ms: int
    max_sleep_ms: int
    burst: bool
    governor: Governor
    middleware: tuple[Middleware, ...]
    completer: Completer | None
    log_success: bool
    recent_run_ms: float
    aio: Any
    listener: Any
    _busy: int
    _busy_lock: threading.Lock
    _sync_running: int
    _inbox: Any
    _stopping: threading.Event
    _idle_exit: threading.Event
    _dispatch_wake: threading.Event
    _wake_gen: int
    _threads: list[threading.Thread]
    _slot_seq: int
    _running: dict[int, _Running]
    _running_lock: threading.Lock
    abandoned_runners: list[executor.Runner]

    # Of the Foreman and the other mixins (annotations only).
    _wait: Callable[..., None]
    _wait_for_work: Callable[[float, int], None]
    _kick: Callable[[], None]
    _slot_wanted: Callable[[], bool]
    _next_job: Callable[[str], _Running | None]
    _start: Callable[[_Running], bool]
    _record_run: Callable[[str, float], None]
    _outcome: Callable[[_Running, str], None]
    _take_slot: Callable[[], bool]
    _use_slot: Callable[[_Running | None], None]
    _release_slot: Callable[[_Running], None]
    _is_async: Callable[[str], bool]
    _note_kind: Callable[..., None]
    _hand_to_loop: Callable[[_Running], bool]

    def _start_slot(self) -> None:
        self._slot_seq += 1
        name = f"jq-worker-{self._slot_seq}"
        thread = threading.Thread(target=self._slot_loop, args=(name,), name=name, daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _slot_loop(self, name: str) -> None:
        slot = _Slot()
        runner = executor.Runner(f"{name}-runner")
        counted = True
        # The idle sleep before a cycle, in seconds, and the wake-up generation it
        # waits past: slept in the runner's own thread, so a wake-up goes straight to
        # the thread that claims (no hand-off from this one on the way).
        sleep: tuple[float, int] | None = None
        try:
            while not self._stopping.is_set():
                halt = threading.Event()
                call = runner.submit(functools.partial(self._cycles, slot, name, halt, sleep))
                sleep = None
                timed_out = self._supervise(call, slot, halt)
                if timed_out:
                    runner.abandon()
                    self.abandoned_runners.append(runner)
                    runner = executor.Runner(f"{name}-runner")
                    continue
                if call.error is not None:
                    if isinstance(call.error, (OperationalError, InterfaceError)):
                        # The database is unreachable: its first line says it, once a try.
                        first = str(call.error).strip() or type(call.error).__name__
                        logger.warning(
                            "worker cycle failed worker=%s (%s)", name, first.splitlines()[0]
                        )
                    else:
                        logger.error("worker cycle failed worker=%s", name, exc_info=call.error)
                    self._wait(self.max_sleep_ms / 1000)
                    continue
                if call.value:
                    if self.break_time_ms:
                        self._stopping.wait(self.break_time_ms / 1000)
                    continue
                # Found nothing.
                sleep_ms = self.governor.no_job()
                # Due jobs held back by a rate (docs/limits.md): sleep until the next
                # start it allows; a --burst run waits for them rather than ending.
                throttled_ms = storage_limits.throttled_ms(self.using)
                if throttled_ms is not None:
                    sleep_ms = min(sleep_ms, throttled_ms)
                # A claim that started at its floor and came back short proved
                # nothing below it (docs/horizon.md): sleep only until a look below
                # the floor has been there; a --burst run ends only after one did.
                recheck_ms = storage.claim_recheck_ms(self.using)
                if recheck_ms is not None:
                    sleep_ms = min(sleep_ms, recheck_ms)
                if self.burst and throttled_ms is None and recheck_ms is None:
                    self._idle_exit.set()
                    break
                # While the listener is down every idle slot polls (none retires):
                # with one poller busy, a job would wait out its whole run.
                if recheck_ms is None and self.listener.healthy and self.governor.retire():
                    counted = False
                    break
                if not self.listener.healthy:  # wake-ups may be lost: poll
                    # ... but no longer than a rate or the floor's recheck allows.
                    sleep_ms = min(sleep_ms, self.min_sleep_ms)
                sleep = (sleep_ms / 1000, slot.gen)
        finally:
            # Wait for the runner to close its connections before the slot ends, so
            # a returning foreman leaves no session open.
            runner.stop(timeout_s=5)
            connections.close_all()  # this thread's own (a timed-out job's outcome)
            if counted:
                self.governor.worker_exited()
            self._kick()

    def _supervise(self, call: Any, slot: _Slot, halt: threading.Event) -> bool:
        """Wait for ``call``; return True if its job ran past its timeout (stored so,
        and ``halt`` set: the stuck runner claims nothing more). A job whose handler
        returned and whose outcome is being stored (through an outage, until a
        second before its lease ends) is not timed out."""
        while not call.done.wait(0.25):
            with slot.lock:
                running = slot.current
            if running is None or running.ctx.storing or time.monotonic() < running.deadline:
                continue
            with slot.lock:
                if slot.current is not running:
                    continue
                slot.current = None
                halt.set()
            self._unregister(running)
            self._release_slot(running)  # the stuck runner's slot is its successor's
            status = executor.time_out(running.job, running.ctx, started=running.started)
            if status is not None:
                self._outcome(running, status)
            recycle_connections()
            return True
        return False

    def _busy_count(self) -> int:
        """Handlers running now, and claimed jobs waiting for a slot."""
        return self._busy + len(self._inbox)

    def _cycles(
        self,
        slot: _Slot,
        name: str,
        halt: threading.Event,
        sleep: tuple[float, int] | None = None,
    ) -> bool:
        """In the runner thread: sleep ``sleep`` (seconds, or until a wake-up after
        that generation) if given, then run jobs one after another while there are
        any; return False once a claim found nothing (the slot then decides the
        next sleep), True after a job when ``break_time_ms`` is due.

        The runner keeps claiming without going back to its slot's thread between
        jobs: two thread hand-offs per job were a drain's largest cost. The slot's
        thread still watches each job's deadline through ``slot.current``; ``halt``
        is set when it gave up on this runner (a timeout), so a stuck handler's
        thread claims nothing more once it returns. With a break time, one job per
        call, so the slot sleeps between jobs.
        """
        if sleep is not None:
            self._wait_for_work(*sleep)
        found = False
        while not (halt.is_set() or self._stopping.is_set()):
            slot.gen = self._wake_gen  # a wake-up during the cycle is not slept through
            if not self._cycle(slot, name):
                return False
            found = True
            if self.break_time_ms:
                break
        return found

    def _cycle(self, slot: _Slot, name: str) -> bool:
        """In the runner thread: take or claim one job and run it; return whether one was found.

        The thread's connections are recycled once per job: by :func:`executor.execute`
        after the handler, else (no handler ran) on the way out.
        """
        worker = f"{self.name}:{name}"
        if not self._take_slot():
            return False
        running: _Running | None = None
        try:
            running = self._next_job(worker)
        finally:
            self._use_slot(running)
        if running is None:
            return False
        job = running.job
        running.ctx.worker = worker
        logger.debug(
            "job claimed jid=%s type=%s queue=%s attempt=%s worker=%s",
            job.jid,
            job.job_type,
            job.queue,
            job.attempt,
            worker,
        )
        self.governor.found_job()
        if self.governor.workers < self.concurrency and self._slot_wanted():
            self._dispatch_wake.set()  # demand: the dispatcher may spawn a slot
        now = time.monotonic()
        running.started, running.deadline = now, now + job.timeout_ms / 1000
        pending = executed = handed = counted = False
        try:
            if running.ctx.lease_lost:  # lost while it waited for a slot: not ours to run
                logger.warning("lease lost before the job started jid=%s", job.jid)
                return True
            if self._stopping.is_set():
                # Claimed while shutting down: give it back unrun.
                running.ctx.mark_lease_lost()
                storage.hand_back(job, message="handed back at worker shutdown")
                return True
            if not self._start(running):
                return True
            if self.aio is not None:
                is_async = self._is_async(job.job_type)
                self._note_kind(is_async=is_async)
                if is_async:
                    # On the loop, its slot kept until its handler returns; this
                    # runner goes on to its next job.
                    handed = self._hand_to_loop(running)
                    return True
                with self._busy_lock:
                    self._sync_running += 1
                counted = True
            now = time.monotonic()  # the run time and the deadline count from the start
            running.started, running.deadline = now, now + job.timeout_ms / 1000
            with slot.lock:
                slot.current = running
            executed = True
            status = executor.execute(
                job,
                running.ctx,
                middleware=self.middleware,
                completer=self.completer,
                on_stored=lambda status: self._stored(running, status),
                log_success=self.log_success,
            )
            # A running average over about the last 20 jobs (a race between
            # runners may lose an update: it only steers the prefetch).
            run_ms = (time.monotonic() - running.started) * 1000
            self.recent_run_ms += (run_ms - self.recent_run_ms) / 20
            self._record_run(job.job_type, run_ms)
            if status == executor.PENDING:
                pending = running.storing = True
            elif status is not None:
                self._outcome(running, status)
            return True
        finally:
            if counted:
                with self._busy_lock:
                    self._sync_running -= 1
            if not handed:
                self._release_slot(running)
            with slot.lock:
                if slot.current is running:
                    slot.current = None
            if not (pending or handed):
                self._unregister(running)
            if not executed:
                recycle_connections()

    def _stored(self, running: _Running, status: str | None) -> None:
        """In the completer's thread: a batched success was written (or its lease lost)."""
        if status is not None:
            self._outcome(running, status)
        self._unregister(running)

    def _unregister(self, running: _Running) -> None:
        with self._running_lock:
            if self._running.get(running.job.pk) is running:
                del self._running[running.job.pk]
                self.governor.del_job(running.job.job_type)

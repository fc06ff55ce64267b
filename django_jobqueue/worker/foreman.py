"""The foreman: the worker threads of one process (docs/design.md#execution).

One foreman runs in the thread that calls :meth:`Foreman.run` and owns:

- **worker slots**, spawned on demand up to ``concurrency`` by the
  :class:`~django_jobqueue.worker.governor.Governor`. A slot is a supervising
  thread plus a *runner* thread that claims a job, runs its handler and stores
  the outcome, then the next, without a hand-off between jobs while any are due.
  The supervisor watches the job's ``timeout_ms``: past it, the
  attempt is stored as failed and the slot gets a fresh runner (Python cannot
  kill the stuck thread; it is abandoned and its late outcome is not stored).
  Idle slots sleep the governor's adaptive sleep, or until a wake-up.
- **a heartbeat thread** that extends the leases of running jobs every
  ``heartbeat_ms``, flags lost leases and cancel requests on their contexts, and
  keeps the foreman's :class:`~django_jobqueue.models.Worker` row (named
  ``host:pid``) live, idle or not;
- **a housekeeping thread** that returns expired leases to the queue
  (:func:`reaping.reap_expired`, every ``lease_ms / 2``), turns due schedules
  into jobs (``django_jobqueue.schedules.materialize_due``, about every second,
  when that module exists), writes the outcome counters every few seconds and
  prunes gone workers and old statistics;
- **a listener thread** (PostgreSQL) that ``LISTEN``\\s for wake-ups (while its
  session is down, idle slots poll at ``min_sleep_ms``), and a relay of the
  in-process :data:`~django_jobqueue.worker.wakeup.local_event`.

The slots' threads are in :mod:`.slots`, the claims in :mod:`.claims`, the helper
threads, the wake-ups and the outcome counting in :mod:`.housekeeping`;
``async def`` handlers run on the foreman's event loop (:mod:`.aio`): a runner hands
such a job over and goes on to its next one.
Paused queues (:mod:`django_jobqueue.store.pauses`) are left out by :func:`storage.claim`.

Shutdown (docs/design.md#execution): :meth:`Foreman.stop` (the first SIGTERM/SIGINT) stops
claiming and lets running jobs finish for up to ``shutdown_timeout_ms``; then the
unfinished ones are handed back to the queue (:func:`storage.hand_back`). A second
call (signal) hands them back at once. No job is lost either way, and a job whose
worker died is taken back by any foreman once its lease expires.

Burst mode drains what is due now and returns when nothing is due and nothing runs.
"""

from __future__ import annotations

import collections
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from django.db import connections

from ..core.conf import get_config
from ..core.reconnect import log_failure, retry_on_disconnect
from ..core.stopsignals import SignalRelay
from ..models import Job
from ..store.jobstats import process_stats
from ..store.pauses import paused_queues
from ..store.registry import registered_job_types
from . import wakeup
from .aio import ForemanAsync
from .claims import ForemanClaims
from .completer import Completer, max_batch_for
from .governor import Governor
from .housekeeping import ForemanThreads
from .middleware import Middleware, load_middleware
from .options import (
    HOLD_FACTOR,
    MIN_HOLD_MS,
    SHORT_JOB_MS,
    ForemanOptions,
    _Running,
)
from .slots import ForemanSlots

__all__ = ["Foreman", "ForemanOptions"]

logger = logging.getLogger(__name__)


class Foreman(ForemanSlots, ForemanClaims, ForemanThreads, ForemanAsync):
    """Run worker threads that claim and run jobs until stopped (or drained).

    Parameters
    ----------
    options:
        A :class:`ForemanOptions`; any field left None takes its ``JOBQUEUE`` value.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If ``JOBQUEUE`` or a middleware path is invalid.

    Implements: docs/design.md#execution.
    """

    def __init__(self, options: ForemanOptions | None = None) -> None:
        from ..enqueue import jobs_database

        options = options or ForemanOptions()
        config = get_config()

        def pick(value: int | None, default: int) -> int:
            return default if value is None else value

        self.using = options.using or jobs_database()
        self.queues = tuple(options.queues) if options.queues else None
        self.concurrency = pick(options.concurrency, config.CONCURRENCY)
        self.break_time_ms = pick(options.break_time_ms, config.BREAK_TIME_MS)
        self.ramp_time_ms = pick(options.ramp_time_ms, config.RAMP_TIME_MS)
        self.min_sleep_ms = pick(options.min_sleep_ms, config.MIN_SLEEP_MS)
        self.max_sleep_ms = max(self.min_sleep_ms, pick(options.max_sleep_ms, config.MAX_SLEEP_MS))
        self.lease_ms = pick(options.lease_ms, config.LEASE_MS)
        self.heartbeat_ms = max(
            10, min(pick(options.heartbeat_ms, config.HEARTBEAT_MS), self.lease_ms // 3)
        )
        self.shutdown_timeout_ms = pick(options.shutdown_timeout_ms, config.SHUTDOWN_TIMEOUT_MS)
        self.burst = options.burst
        #: Whether each success gets its "job finished" INFO line (README "Speed").
        self.log_success = (
            config.LOG_SUCCESS if options.log_success is None else options.log_success
        )
        paths = config.MIDDLEWARE if options.middleware is None else options.middleware
        self.middleware: tuple[Middleware, ...] = load_middleware(paths)
        limits = {
            name: desc.concurrent
            for name, desc in registered_job_types().items()
            if desc.concurrent is not None
        }
        self.governor = Governor(
            self.concurrency,
            min_sleep_ms=self.min_sleep_ms,
            max_sleep_ms=self.max_sleep_ms,
            ramp_time_ms=self.ramp_time_ms,
            concurrent=limits,
        )
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self.prefetch = max(0, options.prefetch or 0)
        self.prefetch_ms = pick(options.prefetch_ms, config.PREFETCH_MS)
        #: With the default prefetch a claim may take more jobs while recent jobs
        #: were short (:data:`~.options.HOLD_MS`): they wait about a claim round
        #: trip in memory, and each claim feeds every slot for longer (a no-op drain
        #: at 1 x 4 here: 2,100 -> 5,700 jobs/s steady). A set prefetch is a most;
        #: both are bounded by the take rate (docs/prefetch.md, "The pace").
        self._adaptive_prefetch = options.prefetch is None
        if self._adaptive_prefetch and not self.prefetch_ms:
            self._adaptive_prefetch, self.prefetch = False, 0  # PREFETCH_MS 0: off
        #: How long (ms) a prefetched job may wait for a slot before it goes back.
        self.hold_ms = max(MIN_HOLD_MS, HOLD_FACTOR * self.prefetch_ms)
        #: Moving average of this foreman's handler run times, ms.
        self.recent_run_ms = float(SHORT_JOB_MS)
        #: Per job type that ran here, the median of its last run times, ms: which
        #: types are short (:meth:`is_short`).
        self.type_run_ms: dict[str, float] = {}
        self._type_runs: dict[str, tuple[float, ...]] = {}
        #: How fast (jobs per ms, a moving average) runners and the loop took
        #: jobs from the inbox: bounds either prefetch by the hold time
        #: (:meth:`~.claims.ForemanClaims._starts_within_hold`); 0.0: not known yet.
        self.take_rate = 0.0
        #: (when the last claim landed, :attr:`_taken_count` and
        #: :attr:`_prefetched_taken` then), for :attr:`take_rate`.
        self._take_mark: tuple[float, int, int] | None = None
        #: Jobs taken from the inbox so far, and how many of them were prefetched.
        self._taken_count = 0
        self._prefetched_taken = 0
        #: Gateway job types (``JOBQUEUE["GATEWAY"]["JOB_TYPES"]``): they have no
        #: Python handler, so this foreman never claims them; gateway workers do.
        self.external_types = frozenset(get_config().GATEWAY.JOB_TYPES)
        self.completer = (
            Completer(
                busy=self._busy_count,
                max_batch=max_batch_for(connections[self.using].vendor),
            )
            if options.batch_completions
            else None
        )
        #: Claimed jobs no slot took yet, in claim order (the in-memory hand-off).
        self._inbox: collections.deque[_Running] = collections.deque()
        #: Taking a held job and withdrawing it (to go back) exclude each other.
        self._held_lock = threading.Lock()
        #: Prefetched jobs by claim, (hold deadline, jobs), for the hold thread.
        self._held_batches: collections.deque[tuple[float, list[_Running]]] = collections.deque()
        self._hold_cond = threading.Condition()
        self._claim_lock = threading.Lock()
        self._claim_seq = 0
        self._last_claim_short = False
        #: Worker slots taken: by a runner from its claim to its job's end, and by
        #: an async job until its handler returns (:mod:`.aio`).
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._init_async()
        #: Claims made and the largest one, by jobs (tests and benchmarks).
        self.claims = 0
        self.largest_claim = 0
        self._stopping = threading.Event()
        self._forced = threading.Event()
        self._done = threading.Event()
        lock = threading.RLock()
        #: Waited on by stops, slot ends and back-offs; notified by :meth:`_kick`.
        self._cond = threading.Condition(lock)
        #: Idle runners wait on this one (:meth:`_wait_for_work`), so a wake-up can
        #: wake as many as there are jobs (:meth:`_wake_runners`), not all of them.
        self._work = threading.Condition(lock)
        self._wake_gen = 0
        #: Runners asleep in :meth:`_wait_for_work` now: while one is, a wake-up or a
        #: found job is its to take, and the dispatcher spawns no slot for it.
        self._idle_runners = 0
        #: When (``time.monotonic()``) a wake-up found no idle runner for its jobs,
        #: else 0.0: a slot is wanted once the ask is a dispatcher tick old, whatever
        #: the last claim found (cleared by the next claim, idle runner or slot).
        self._slot_asked = 0.0
        #: Wakes the dispatcher (the main thread) only when it has something to do:
        #: a slot to spawn, a stop. Every claim of several jobs kicks the idle slots,
        #: and waking the dispatcher there too cost a tenth of a drain's GIL time.
        self._dispatch_wake = threading.Event()
        self._running: dict[int, _Running] = {}
        self._running_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        #: Runners given up on at their job's timeout (:meth:`stuck_handlers`).
        self.abandoned_runners: list[Any] = []
        self._slot_seq = 0
        self._idle_exit = threading.Event()
        #: Held while a reap or a materialising pass writes due work, so a burst's
        #: last look for due jobs waits for the housekeeping thread's pass to commit.
        self._making_due = threading.RLock()
        #: Down while the listener has no LISTEN session: idle slots then poll at
        #: min_sleep_ms, since a wake-up sent meanwhile is lost.
        self.listener = wakeup.ListenerHealth()
        #: Jobs this foreman ran to a stored outcome, by status (for summaries and tests).
        self.stats: dict[str, int] = {}
        self._stats_lock = threading.Lock()

    # Control -------------------------------------------------------------------

    def stop(self, *, force: bool = False) -> None:
        """Stop claiming; running jobs get ``shutdown_timeout_ms`` (none if ``force``).

        A second call forces. Thread- and signal-safe.

        Implements: docs/design.md#execution.
        """
        if self._stopping.is_set() or force:
            self._forced.set()
        self._stopping.set()
        self._kick()

    def _wait(self, seconds: float, gen: int | None = None) -> None:
        """Sleep up to ``seconds``, or until a wake-up after generation ``gen``
        (None: from now), or a stop."""
        with self._cond:
            if gen is None:
                gen = self._wake_gen
            self._cond.wait_for(
                lambda: self._wake_gen != gen or self._stopping.is_set(), timeout=seconds
            )

    def _wait_for_work(self, seconds: float, gen: int) -> None:
        """An idle runner's sleep: up to ``seconds``, or until a wake-up after
        generation ``gen``, a stop, or jobs left by another runner's claim."""
        with self._work:
            self._idle_runners += 1
            self._slot_asked = 0.0  # a runner to spare: no slot wanted
            try:
                self._work.wait_for(
                    lambda: self._wake_gen != gen or self._stopping.is_set() or bool(self._inbox),
                    timeout=seconds,
                )
            finally:
                self._idle_runners -= 1

    def _handle_signal(self, signum: int) -> None:
        """SIGTERM/SIGINT, relayed by :class:`.stopsignals.SignalRelay` (its thread,
        not the signal handler: :meth:`stop` takes locks)."""
        name = signal.Signals(signum).name
        if self._stopping.is_set():
            logger.warning("%s again: handing running jobs back now", name)
        else:
            logger.warning(
                "%s: stopping; running jobs get %d ms to finish (send it again to force)",
                name,
                self.shutdown_timeout_ms,
            )
        self.stop()

    # Main loop -----------------------------------------------------------------

    def run(self, *, install_signals: bool = True) -> dict[str, int]:
        """Run until :meth:`stop` (or, in burst mode, until nothing is due or running).

        Parameters
        ----------
        install_signals:
            Handle SIGTERM/SIGINT (first: drain, second: force) when called from the
            main thread.

        Returns
        -------
        dict[str, int]
            Jobs this foreman stored an outcome for, by status.

        Implements: docs/design.md#execution.
        """
        relay = SignalRelay(self._handle_signal)
        try:
            if install_signals:
                relay.install()  # only from the main thread
            return self._serve()
        finally:
            relay.close()  # also when the start failed (a bad SCHEDULES, say)

    def stuck_handlers(self, grace_s: float = 5.0) -> int:
        """After :meth:`run`: wait up to ``grace_s`` seconds for the runner threads
        given up on at their job's timeout to end; return how many still run.

        Such a runner may hold a thread the interpreter joins at exit: an async
        handler run through ``async_to_sync`` (a middleware that cannot wrap async
        handlers, a sync function returning an awaitable) runs its event loop in
        one, so the process would never exit (:func:`exit_past_stuck_handlers`).
        """
        deadline = time.monotonic() + grace_s
        for runner in self.abandoned_runners:
            runner.join(max(0.0, deadline - time.monotonic()))
        return sum(1 for runner in self.abandoned_runners if runner.alive)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called: the foreman drains, or has stopped."""
        return self._stopping.is_set()

    def _serve(self) -> dict[str, int]:
        """:meth:`run`'s body, signals handled or not."""
        logger.info(
            "foreman started name=%s queues=%s concurrency=%d lease_ms=%d burst=%s",
            self.name,
            ",".join(self.queues) if self.queues else "*",
            self.concurrency,
            self.lease_ms,
            self.burst,
        )
        self._register(socket.gethostname(), os.getpid())
        self._sync_schedules()
        helpers = [
            threading.Thread(target=self._heartbeat_loop, name="jq-heartbeat", daemon=True),
            threading.Thread(target=self._housekeeping_loop, name="jq-housekeeping", daemon=True),
            threading.Thread(target=self._relay_local_wakeups, name="jq-relay", daemon=True),
            threading.Thread(target=self._hold_loop, name="jq-hold", daemon=True),
            threading.Thread(
                target=wakeup.listen,
                args=(self.using, self.wake, self._done, self.listener),
                name="jq-listen",
                daemon=True,
            ),
        ]
        for thread in helpers:
            thread.start()
        if self.completer is not None:
            self.completer.start()
        if self.aio is not None:
            self.aio.start()
        process_stats.hold_timer(self.using)  # the housekeeping thread writes the counts
        try:
            if self.burst:
                self._reap()
                self._materialize_schedules()  # due plans are due work too
            self._dispatch()
            self._drain()
        finally:
            # A crash of the loop too: held jobs go back now, not at their lease's end.
            try:
                self._hand_back_held("handed back at worker shutdown")
            except Exception:
                log_failure(logger, self.using, "handing back held jobs failed")
            if self.aio is not None:
                self.aio.stop()  # its last tasks were handed back by _drain
                if self._loop_claimer is not None:
                    self._loop_claimer.stop(timeout_s=5)
            if self.completer is not None:
                self.completer.close()
            self._done.set()
            with self._hold_cond:
                self._hold_cond.notify_all()
            for thread in helpers:
                thread.join(timeout=2)
            self._finish_threads()
            process_stats.release_timer(self.using)
            connections.close_all()
        logger.info("foreman stopped name=%s stats=%s", self.name, self.stats)
        return dict(self.stats)

    @property
    def _dispatch_tick_s(self) -> float:
        """The dispatcher's period, in seconds: the ramp time, at least 10 ms."""
        return max(self.ramp_time_ms, 10) / 1000

    def _dispatch(self) -> None:
        tick = self._dispatch_tick_s
        while not self._stopping.is_set():
            if (
                self.burst
                and self._idle_exit.is_set()
                and self.governor.workers == 0
                and not self._async_running
            ):
                # Every worker went idle: done unless something became due meanwhile
                # (an expired lease, or a plan whose earlier pass failed and is due).
                with self._making_due:  # no reap or pass of the housekeeping in flight
                    if self.completer is not None:
                        # A stored done may make work due: a batch's callback, a
                        # dependent (docs/workflows.md).
                        self.completer.flush()
                    self._reap()
                    self._materialize_schedules()
                    if not self._anything_due():
                        return
                self._idle_exit.clear()
                self.governor.found_job()
            while not self._stopping.is_set() and self._slot_wanted() and self.governor.spawn():
                self._slot_asked = 0.0
                self._start_slot()
            self._dispatch_wake.wait(tick)
            self._dispatch_wake.clear()

    def _slot_wanted(self) -> bool:
        """Whether a slot more would find work (the governor still decides when).

        Not while a runner sleeps idle: a lone job's wake-up is that runner's, and a
        slot started for it (a thread and a database session) would find nothing
        and retire, at every job of a trickle. Else when none runs yet, jobs are
        held, the last claim took all it asked for (more may be due), a wake-up
        found no idle runner a dispatcher tick ago and no claim or idle runner
        since, or wake-ups may be lost (the listener is down: then every found job
        may mean more, as the governor has it (docs/design.md#glossary)). The tick's wait lets a
        busy
        runner's next claim take the job of a wake-up: on PostgreSQL an in-process
        enqueue wakes twice (its event, its NOTIFY), and the second finds the first's
        runner awake with that very job.
        """
        if self._idle_runners or not self._threads_wanted():
            return False
        asked = self._slot_asked
        return (
            self.governor.workers == 0
            or bool(self._inbox)
            or not self._last_claim_short
            or (asked > 0 and time.monotonic() - asked >= self._dispatch_tick_s)
            or not self.listener.healthy
        )

    def _anything_due(self) -> bool:
        return retry_on_disconnect(self.using, self._due_exists)

    def _due_exists(self) -> bool:
        due = Job.objects.using(self.using).due()
        if self.queues:
            due = due.filter(queue__in=self.queues)
        paused = paused_queues(self.using)
        if paused:  # never claimed: a burst does not wait for them
            due = due.exclude(queue__in=sorted(paused))
        if self.external_types:  # the gateway's workers run these
            due = due.exclude(job_type__in=sorted(self.external_types))
        return due.exists()


def exit_past_stuck_handlers(foreman: Foreman, code: int = 0) -> None:
    """End the process now (``os._exit(code)``, logs and streams flushed) when
    ``foreman``, stopped, still has handlers it gave up on at their timeout running
    (:meth:`Foreman.stuck_handlers`); else return. For ``runworkers`` and its
    children only: a worker process must exit once its jobs are stored or handed
    back, as it does past a stuck sync handler (its thread is a daemon).
    """
    stuck = foreman.stuck_handlers()
    if not stuck:
        return
    logger.warning(
        "handlers given up on at their timeout still run: exiting without them handlers=%d",
        stuck,
    )
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def run_foreman(
    *, queues: Sequence[str] | None = None, burst: bool = False, **options: Any
) -> dict[str, int]:
    """Build a :class:`Foreman` from keyword options and run it; return its stats."""
    foreman = Foreman(
        ForemanOptions(queues=tuple(queues) if queues else None, burst=burst, **options)
    )
    return foreman.run()

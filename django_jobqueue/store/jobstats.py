"""The job statistics: one path for every worker, buffered per process.

Policy
------
- **What is counted, and where.** :mod:`django_jobqueue.storage` counts each outcome
  it stores (``done``; ``retried``: an attempt failed and another comes; ``failed``:
  the attempt made a dead letter) with the attempt's run time, and each claim's
  pickup latency (``run_at`` to ``started_at``, both by the database clock). Every
  worker stores its outcomes through it: ``runworkers`` and the ``django.tasks``
  jobs it runs, and gateway workers in any language (their complete and fail
  routes), so their statistics are the same numbers. The create path counts each
  enqueue it turns away as ``deduplicated`` (:func:`count_deduplicated`).
- **Buffered, never one write per job.** Counts go to the process's
  :data:`process_stats` (a :class:`ProcessStats`: one
  :class:`~django_jobqueue.store.statbuffer.StatsBuffer` per database, keyed by (UTC
  minute, queue, job type)). Its flush adds them, in one transaction of two upserts,
  to the per-minute rows of :class:`~django_jobqueue.models.JobStat` (charts, the
  overview, ``jobqueue status``) and the cumulative rows of
  :class:`~django_jobqueue.models.JobTotal` (the Prometheus counters, never pruned,
  so they never go down); any number of processes flushing the same rows sum
  correctly (:mod:`django_jobqueue.store.statbuffer`, which holds the buffer, the
  upserts and the histogram columns; their names are re-exported here).
- **When a process writes.** A ``runworkers`` foreman's housekeeping thread flushes
  every ``STATS_FLUSH_S`` (2 s) while it runs (:meth:`ProcessStats.hold_timer`). Any
  other process (a web process serving the
  gateway, a shell) flushes from a timer thread :data:`FLUSH_S` seconds after its
  first unwritten count, on its own connection, so the last counts of a burst are
  written without waiting for more traffic; and at exit. A forked child drops the
  counts it inherited (its parent writes them).
- **Retention.** :func:`prune_stats` deletes JobStat rows older than
  ``STATS_RETENTION``; it never touches JobTotal.

Implements: docs/metrics.md.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connections, transaction

from ..core.conf import get_config
from ..core.reconnect import in_one_line, unreachable
from .statbuffer import (
    BUCKET_FIELDS,
    COUNTERS,
    OUTCOMES,
    PICKUP_FIELDS,
    StatsBuffer,
    bucket_of,
    pickup_bucket_of,
)
from .statmodels import JobStat

__all__ = [
    "BUCKET_FIELDS",
    "COUNTERS",
    "FLUSH_S",
    "OUTCOMES",
    "PICKUP_FIELDS",
    "ProcessStats",
    "StatsBuffer",
    "bucket_of",
    "count_deduplicated",
    "count_done",
    "count_outcome",
    "count_pickups",
    "pickup_bucket_of",
    "process_stats",
    "prune_stats",
]

logger = logging.getLogger(__name__)

#: Seconds the process's counts wait before they are written (timer, or next count).
FLUSH_S = 2.0


def prune_stats(using: str, *, now: datetime | None = None) -> int:
    """Delete :class:`JobStat` rows older than ``STATS_RETENTION``; return how many.

    The cumulative :class:`JobTotal` rows are never pruned: the counters the
    Prometheus endpoint exports never go down (docs/metrics.md).
    """
    cutoff = (now or datetime.now(UTC)) - get_config().STATS_RETENTION
    deleted, _ = JobStat.objects.using(using).filter(minute__lt=cutoff).delete()
    return deleted


class ProcessStats:
    """The counts of one process, per database, until written.

    Thread-safe. Counts are written ``flush_s`` seconds after the oldest of them:
    with ``flush_timer`` (the process's :data:`process_stats`) by a timer thread on
    its own connection, else by the first count after that (in autocommit now,
    inside the caller's transaction after its commit: writing there would hold the
    stats rows' locks to the caller's end and lose the counts with a rollback).
    Never one write per count. ``clock`` (monotonic seconds, for the age) and
    ``wall`` (epoch seconds, for the minute) are for tests.
    """

    def __init__(
        self,
        *,
        flush_s: float = FLUSH_S,
        flush_timer: bool = False,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.flush_s = flush_s
        #: Whether a timer thread writes the counts (else the next count does).
        self.flush_timer = flush_timer
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._buffers: dict[str, StatsBuffer] = {}
        self._since: dict[str, float] = {}  # clock of the oldest count not written
        self._asked: dict[str, float] = {}  # clock of the last on_commit flush asked for
        self._timers: dict[str, threading.Timer] = {}
        self._held: Counter[str] = Counter()  # aliases a foreman's housekeeping writes

    def hold_timer(self, using: str) -> None:
        """Leave the counts of ``using`` to a caller that flushes them itself (a
        foreman's housekeeping thread, every ``STATS_FLUSH_S``) until
        :meth:`release_timer`: no timer thread, no connection of its own."""
        with self._lock:
            self._held[using] += 1

    def release_timer(self, using: str) -> None:
        """End one :meth:`hold_timer` of ``using``; its later counts are timed again."""
        with self._lock:
            self._held[using] -= 1
            if self._held[using] <= 0:
                del self._held[using]
        if self.pending(using):
            self._due(using, self._clock())

    def pending(self, using: str) -> int:
        """Return how many (minute, queue, job type) rows of ``using`` wait to be written."""
        with self._lock:
            buffer = self._buffers.get(using)
        return 0 if buffer is None else len(buffer)

    def _buffer(self, using: str) -> tuple[StatsBuffer, float]:
        now = self._clock()
        with self._lock:
            buffer = self._buffers.get(using)
            if buffer is None:
                buffer = self._buffers[using] = StatsBuffer(clock=self._wall)
            return buffer, self._since.setdefault(using, now)

    def record_outcome(
        self,
        using: str,
        queue: str,
        job_type: str,
        outcome: str,
        *,
        duration_ms: int | None = None,
        count: int = 1,
    ) -> None:
        """Count ``count`` outcomes (:meth:`StatsBuffer.record`) of ``job_type`` in ``queue``
        on the database ``using``; written later (see the class).

        Raises
        ------
        InvalidOption
            If ``outcome`` is not one of :data:`OUTCOMES` (nothing is counted).
        """
        buffer, since = self._buffer(using)
        buffer.record(queue, job_type, outcome, duration_ms, count=count)
        self._due(using, since)

    def record_counts(
        self, using: str, changes: Mapping[tuple[str, str], Mapping[str, int]]
    ) -> None:
        """Add counts of many jobs at once: ``changes`` maps (queue, job type) to
        counter column -> amount (:data:`COUNTERS`); one buffer look-up and one
        flush check for them all (a claim's batch, a batched completion)."""
        if not changes:
            return
        buffer, since = self._buffer(using)
        for (queue, job_type), change in changes.items():
            buffer.add(queue, job_type, change)
        self._due(using, since)

    def record_pickup(self, using: str, queue: str, job_type: str, pickup_ms: int) -> None:
        """Count one claim's pickup latency in ms (:meth:`StatsBuffer.record_pickup`)."""
        buffer, since = self._buffer(using)
        buffer.record_pickup(queue, job_type, pickup_ms)
        self._due(using, since)

    def record(self, using: str, queue: str, job_type: str, count: int = 1) -> None:
        """Count ``count`` enqueues of ``job_type`` into ``queue`` turned away as deduplicated.

        Parameters
        ----------
        using
            Database alias of the jobs.
        queue, job_type
            The turned-away job's queue and job type (never its payload or key).
        count
            How many, >= 1.

        Never raises for a failed write (it is logged, the counts kept).
        """
        self.record_outcome(using, queue, job_type, "deduplicated", count=count)

    def _due(self, using: str, since: float) -> None:
        if self.flush_timer:
            with self._lock:
                held = self._held.get(using, 0) > 0
            if not held:
                self._schedule(using)
            return
        now = self._clock()
        if now - since < self.flush_s:
            return
        if not connections[using].in_atomic_block:
            self.flush(using)
            return
        with self._lock:
            asked = self._asked.get(using)
            if asked is not None and now - asked < self.flush_s:
                return  # one commit hook per flush_s, however many counts a transaction makes
            self._asked[using] = now
        transaction.on_commit(lambda: self.flush(using), using=using)

    def _schedule(self, using: str) -> None:
        with self._lock:
            if using in self._timers:
                return
            timer = threading.Timer(self.flush_s, self._timed_flush, args=(using,))
            timer.name = "jq-stats-flush"
            timer.daemon = True
            self._timers[using] = timer
        timer.start()

    def _timed_flush(self, using: str) -> None:
        """In the timer's thread: write the counts of ``using``, then close its connection.

        The timer stays in ``_timers`` until its write ended, so :meth:`clear` waits
        for a write under way; counts that came meanwhile are scheduled after it."""
        try:
            self.flush(using)
        finally:
            connections[using].close()
            with self._lock:
                if self._timers.get(using) is threading.current_thread():
                    del self._timers[using]
        if self.pending(using) and self.flush_timer:
            self._schedule(using)  # the write failed: try again in flush_s

    def flush(self, using: str, *, quiet: bool = False) -> int:
        """Write the counts of ``using`` (:meth:`StatsBuffer.flush`); return the rows written.

        Returns 0, writing nothing, when there is nothing to write or the connection
        is inside a transaction (the counts wait: see the class). A failed write is
        logged (not with ``quiet``: the caller reports it) and returns 0; its counts
        stay for the next flush.
        """
        if connections[using].in_atomic_block:
            return 0
        with self._lock:
            buffer = self._buffers.get(using)
            self._since.pop(using, None)
            self._asked.pop(using, None)
        if buffer is None:
            return 0
        try:
            return buffer.flush(using)
        except Exception as exc:  # never fail a job's outcome or a request for a counter
            if not quiet and unreachable(exc, using):
                # Unreachable (an outage, a stop during one): one line, no traceback.
                logger.warning(
                    "writing job statistics failed using=%s: database unreachable (%s); "
                    "the next flush tries again",
                    using,
                    in_one_line(exc),
                )
            elif not quiet:
                logger.warning("writing job statistics failed using=%s", using, exc_info=True)
            if len(buffer):
                with self._lock:
                    self._since.setdefault(using, self._clock())
            return 0

    def flush_all(self) -> int:
        """Write the counts of every database (:meth:`flush`); return the rows written."""
        with self._lock:
            aliases = list(self._buffers)
        return sum(self.flush(using) for using in aliases)

    def discard(self, using: str) -> int:
        """Drop the counts of ``using`` not written (a process exiting without its
        database); return how many rows they were."""
        with self._lock:
            buffer = self._buffers.pop(using, None)
            self._since.pop(using, None)
            self._asked.pop(using, None)
        return 0 if buffer is None else len(buffer)

    def flush_at_exit(self) -> None:
        """The exit hook: write what is left; a failure is one warning line per
        database, without a traceback (the process is exiting), and never raises."""
        with self._lock:
            aliases = list(self._buffers)
        for using in aliases:
            buffer = None
            try:
                with self._lock:
                    buffer = self._buffers.pop(using, None)
                if buffer is not None and len(buffer):
                    buffer.flush(using)
            except Exception as exc:  # noqa: BLE001 (an exit hook never raises)
                logger.warning(
                    "job statistics not written at exit using=%s rows=%d (%s)",
                    using,
                    len(buffer) if buffer is not None else 0,
                    in_one_line(exc),
                )

    def clear(self) -> None:
        """Drop every count not written and every pending timer (tests, between cases)."""
        with self._lock:
            timers = list(self._timers.values())
            self._timers.clear()
            for buffer in self._buffers.values():
                buffer.clear()
            self._since.clear()
            self._asked.clear()
        for timer in timers:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join(10)  # a flush under way ends before the counts are gone

    def after_fork(self) -> None:
        """In a forked child: drop the inherited counts (the parent writes them) and
        the timers, which did not survive the fork."""
        self._lock = threading.Lock()
        self._timers = {}
        self._held = Counter()
        self._buffers = {}
        self._since = {}
        self._asked = {}


#: The process's counts: every outcome, pickup and deduplicated enqueue it stores.
process_stats = ProcessStats(flush_timer=True)
atexit.register(process_stats.flush_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=process_stats.after_fork)


def count_outcome(job: Any, outcome: str, *, run_ms: int | None = None, timed: bool = True) -> None:
    """Count one stored outcome of a claimed ``job`` in :data:`process_stats`.

    Parameters
    ----------
    job
        The :class:`~django_jobqueue.models.Job` read from its database (its
        ``queue``, ``job_type`` and ``started_at`` are used).
    outcome
        ``done``, ``retried`` or ``failed`` (:data:`OUTCOMES`).
    run_ms
        The attempt's run time in ms as the worker measured it; None: from the
        claim's ``started_at`` (database clock) to now by this host's clock, so a
        remote worker's includes its report's trip, and a skew of the two clocks
        shifts it (clamped at 0).
    timed
        False when the run time is unknown (a reaped lease): counted, not timed.

    Implements: docs/metrics.md.
    """
    duration_ms: int | None = None
    if timed and run_ms is not None:
        duration_ms = max(0, int(run_ms))
    elif timed:
        started = job.started_at
        elapsed_s = 0.0 if started is None else (datetime.now(UTC) - started).total_seconds()
        duration_ms = max(0, int(elapsed_s * 1000))
    process_stats.record_outcome(
        job._state.db or "default", job.queue, job.job_type, outcome, duration_ms=duration_ms
    )


def count_pickups(using: str, jobs: Sequence[Any]) -> None:
    """Count each claimed job's wait from ``run_at`` to its claim (both by the
    database clock, as the claim read them back) in :data:`process_stats`.

    The claim's time is ``started_at`` where the claim stored the start, else
    ``heartbeat_at`` (a foreman's claim stores the start later, as that same time).
    """
    changes: defaultdict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for job in jobs:
        claimed_at = job.started_at or job.heartbeat_at
        if claimed_at is not None and job.run_at is not None:
            wait = max(0, int((claimed_at - job.run_at).total_seconds() * 1000))
            change = changes[(job.queue, job.job_type)]
            change["pickup_ms_sum"] += wait
            change[pickup_bucket_of(wait)] += 1
    process_stats.record_counts(using, changes)


def count_done(using: str, done: Sequence[tuple[Any, int | None]]) -> None:
    """Count each (job, run time in ms) of ``done`` as ``done`` in :data:`process_stats`
    (a run time of None: from the job's ``started_at`` to now, as :func:`count_outcome`
    times it), grouped by queue and job type: what :func:`count_outcome` counts for
    each, with one buffer update per group."""
    changes: defaultdict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    now: datetime | None = None
    for job, ms in done:
        if ms is None:
            now = now or datetime.now(UTC)
            started = job.started_at
            ms = 0 if started is None else int((now - started).total_seconds() * 1000)
        duration = max(0, int(ms))
        change = changes[(job.queue, job.job_type)]
        change["done"] += 1
        change["duration_ms_sum"] += duration
        change[bucket_of(duration)] += 1
    process_stats.record_counts(using, changes)


def count_deduplicated(specs: Sequence[Any], answers: Sequence[Any]) -> None:
    """Count each enqueue of ``specs`` that its answer turned away, in :data:`process_stats`.

    Parameters
    ----------
    specs
        The jobs asked for, each with ``using``, ``queue`` and ``job_type`` (a
        :class:`~django_jobqueue.store.managers.JobSpec`).
    answers
        One per spec, in order: an ``EnqueueResult`` (counted when its status is
        ``deduplicated``) or the bool of ``Queue.add`` (counted when False).

    A held id that *raises* ``DuplicateJob`` (``enqueue_job(job_id=...)``) is an
    error, not an answer, and is not counted.

    Implements: docs/design.md#execution.
    """
    turned_away: Counter[tuple[str, str, str]] = Counter()
    for spec, answer in zip(specs, answers, strict=True):
        if answer is False or getattr(answer, "deduplicated", False) is True:
            turned_away[(spec.using, spec.queue, spec.job_type)] += 1
    for (using, queue, job_type), number in sorted(turned_away.items()):
        process_stats.record(using, queue, job_type, number)

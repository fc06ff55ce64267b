"""A foreman's helper threads and wake-ups (see :mod:`.foreman`).

:class:`ForemanThreads` is the base of :class:`~.foreman.Foreman`; it holds what runs
beside the worker slots:

- **the heartbeat thread**: every ``heartbeat_ms`` (at most ``HEARTBEAT_MS``) it
  flushes batched completions, extends the leases of running jobs (flagging lost
  leases and cancel requests on their contexts) and refreshes the foreman's
  :class:`~django_jobqueue.models.Worker` row
  (:func:`~django_jobqueue.store.workerstats.beat_worker`: busy slots, jobs done and failed
  for good since start), idle or not, so the registry shows idle workers live.
  Each write that meets a dead connection reconnects and repeats once
  (:mod:`django_jobqueue.core.reconnect`), a lease beat that still failed is tried again
  after :data:`_BEAT_RETRY_S`, and no error ends the thread while the foreman runs;
- **the housekeeping thread**: returns expired leases to the queue
  (:func:`reaping.reap_expired`, every ``lease_ms / 2``), turns due schedules into
  jobs (about every second), writes the process's job statistics
  (:data:`~django_jobqueue.store.jobstats.process_stats`, every :data:`STATS_FLUSH_S`:
  storage counts each outcome and claim there, docs/metrics.md) and prunes
  long-gone workers and old statistics (every :data:`PRUNE_EVERY_S`), and repairs
  stranded batches and workflows (every ``REPAIR_EVERY_S``, docs/workflows.md
  "Repair"), and, first at its start, then every ``tablestats.CHECK_EVERY_S``,
  analyzes the job table when its statistics no longer know the backlog
  (:func:`~django_jobqueue.store.tablestats.analyze_if_stale`, docs/design.md#claim-plan);
- **the relay** of the in-process :data:`~.wakeup.local_event`.

Implements: docs/design.md#execution.
"""

from __future__ import annotations

import logging
import threading
import time
from importlib import metadata

from django.db import connections

from .. import reaping, storage
from ..core.conf import get_config
from ..core.reconnect import close_dead, in_one_line, log_failure, retry_on_disconnect
from ..flows.repair import REPAIR_EVERY_S, repair
from ..models import JobStatus
from ..store import tablestats
from ..store.jobstats import process_stats, prune_stats
from ..store.progress import MIN_INTERVAL_S
from ..store.workerstats import beat_worker, prune_workers, register_worker, stop_worker
from . import wakeup
from .completer import Completer
from .connections import recycle_connections
from .governor import Governor
from .options import _Running

__all__ = ["PRUNE_EVERY_S", "STATS_FLUSH_S", "ForemanThreads", "package_version", "unreachable"]

logger = logging.getLogger(__name__)

_SCHEDULE_EVERY_S = 1.0
#: Pause (s) before a failed heartbeat is tried again (at most the beat interval).
_BEAT_RETRY_S = 0.5
#: Seconds past its ``timeout_ms`` after which a job still among the running ones
#: (its outcome not waiting to be written) has its lease no longer extended: its
#: handler could not be ended there (an ``async def`` one that blocks the event
#: loop, which then can neither cancel nor abandon it), so the reaper takes the job
#: back once the lease runs out, rather than it staying processing for ever.
OVERDUE_S = 5.0
#: How often the heartbeat thread looks for progress reports to store between rounds, s.
PROGRESS_TICK_S = MIN_INTERVAL_S
#: How often (s) the housekeeping thread writes the process's job statistics.
STATS_FLUSH_S = 2.0
#: How often (s) the housekeeping thread prunes gone workers and old statistics.
PRUNE_EVERY_S = 300.0


def unreachable(using: str) -> str | None:
    """Return why the database ``using`` cannot be reached now (the error's first
    line), or None when this thread's connection to it answers; never raises."""
    conn = connections[using]
    try:
        if conn.connection is not None and not conn.is_usable():
            close_dead(using)
        conn.ensure_connection()
    except Exception as exc:  # noqa: BLE001 (the answer is the reason)
        return in_one_line(exc)
    return None


def package_version() -> str:
    """Return the installed django-jobqueue version, or "" when it is not installed."""
    try:
        return metadata.version("django-jobqueue")
    except metadata.PackageNotFoundError:
        return ""


class ForemanThreads:
    """Wake-ups, outcome counting and the helper threads of a foreman.

    Not used alone: :class:`~.foreman.Foreman` sets the attributes annotated here.
    """

    using: str
    name: str
    queues: tuple[str, ...] | None
    concurrency: int
    lease_ms: int
    heartbeat_ms: int
    governor: Governor
    completer: Completer | None
    stats: dict[str, int]
    _stats_lock: threading.Lock
    _busy: int
    _cond: threading.Condition
    _work: threading.Condition
    _wake_gen: int
    _idle_runners: int
    _slot_asked: float
    _dispatch_wake: threading.Event
    _stopping: threading.Event
    _making_due: threading.RLock
    _done: threading.Event
    _running: dict[int, _Running]
    _running_lock: threading.Lock

    # Wake-ups ------------------------------------------------------------------

    def wake(self, queue: str = "") -> None:
        """Wake idle workers now: a job was enqueued on ``queue``, or (``""``) jobs of
        any queue may be due.

        A queue's wake-up (a NOTIFY: one transaction's jobs) wakes one idle runner,
        which claims what is due and wakes as many more as it left jobs; ``""``
        (the listener's catch-up or a change of its health, a reap, due schedules)
        wakes every idle runner, since it may stand for many jobs or a change of
        how they wait.
        """
        if self.queues and queue and queue not in self.queues:
            return
        if queue:
            self._wake_one()
        else:
            self.governor.woken()
            self._kick()

    def _wake_one(self) -> None:
        """Wake one idle runner (a queue's NOTIFY, an in-process enqueue): it claims
        what is due, and wakes more if it found more."""
        self.governor.woken()
        self._wake_runners(1)

    def _wake_runners(self, count: int) -> None:
        """Wake up to ``count`` idle runners (a runner about to sleep does not)."""
        with self._work:
            self._wake_gen += 1
            self._work.notify(count)
            idle = self._idle_runners
        if self.governor.workers < self.concurrency and idle < count:
            # More jobs than idle runners: a slot is wanted, unless a claim or an
            # idle runner says otherwise within a dispatcher tick (Foreman._slot_wanted).
            if not self._slot_asked:
                self._slot_asked = time.monotonic()

    def _kick(self) -> None:
        """Wake every waiting thread: idle runners, back-offs, the dispatcher."""
        with self._cond:
            self._wake_gen += 1
            self._cond.notify_all()
            self._work.notify_all()
        if self._stopping.is_set() or self.governor.workers < self.concurrency:
            self._dispatch_wake.set()  # a slot to spawn (or gone), or a stop

    def _relay_local_wakeups(self) -> None:
        while not self._done.is_set():
            if wakeup.local_event.wait(0.5):
                wakeup.local_event.clear()
                self._wake_one()

    # Outcomes ------------------------------------------------------------------

    def _snapshot(self) -> list[_Running]:
        with self._running_lock:
            return list(self._running.values())

    def _count(self, status: str) -> None:
        with self._stats_lock:
            self.stats[str(status)] = self.stats.get(str(status), 0) + 1

    def _outcome(self, running: _Running, status: str) -> None:
        """Count a stored outcome of ``running`` in :attr:`stats` (the Worker row's
        done and failed); storage counted it in the job statistics."""
        self._count(status)

    def _totals(self) -> tuple[int, int]:
        """(jobs done, jobs failed for good) since start."""
        with self._stats_lock:
            done = self.stats.get(JobStatus.DONE, 0)
            failed = self.stats.get(JobStatus.ERROR, 0) + self.stats.get(JobStatus.MAX_RETRY, 0)
        return done, failed

    # Registry ------------------------------------------------------------------

    def _register(self, host: str, pid: int) -> None:
        """Write this foreman's Worker row; a failure is logged (the beats retry it)."""
        try:
            retry_on_disconnect(
                self.using,
                register_worker,
                self.using,
                self.name,
                kind="runworkers",
                host=host,
                pid=pid,
                queues=self.queues or (),
                concurrency=self.concurrency,
                version=package_version(),
            )
        except Exception:
            log_failure(logger, self.using, "registering the worker failed name=%s", self.name)
            recycle_connections()

    def _beat_registry(self) -> None:
        done, failed = self._totals()
        try:
            retry_on_disconnect(
                self.using,
                beat_worker,
                self.using,
                self.name,
                busy=self._busy,
                done=done,
                failed=failed,
            )
        except Exception:
            log_failure(logger, self.using, "worker heartbeat failed name=%s", self.name)
            recycle_connections()

    def _flush_stats(self) -> None:
        try:
            # Outcomes, pickups and deduplicated enqueues of this process's jobs;
            # a failed write is logged there and its counts kept for the next flush.
            retry_on_disconnect(self.using, process_stats.flush, self.using)
        except Exception:
            log_failure(logger, self.using, "flushing job statistics failed")
            recycle_connections()

    def _prune(self) -> None:
        try:
            workers = retry_on_disconnect(self.using, prune_workers, self.using)
            stats = retry_on_disconnect(self.using, prune_stats, self.using)
        except Exception:
            log_failure(logger, self.using, "pruning workers and statistics failed")
            recycle_connections()
            return
        if workers or stats:
            logger.info("pruned gone workers=%s stats rows=%s", workers, stats)

    # Helper threads ------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        # live_workers() counts three missed beats of JOBQUEUE's HEARTBEAT_MS: a longer
        # --heartbeat must not make a running worker look gone.
        every_s = min(self.heartbeat_ms, get_config().HEARTBEAT_MS) / 1000
        wait_s = every_s
        due = time.monotonic() + wait_s
        try:
            # Between two rounds, every second, the jobs with a progress report
            # waiting are beaten alone (one statement for all of them), so a bar
            # moves each second while a round stays every ``every_s``.
            while not self._done.wait(max(0.0, min(due - time.monotonic(), PROGRESS_TICK_S))):
                if time.monotonic() < due:
                    try:
                        self._beat_progress()
                    except Exception:
                        log_failure(logger, self.using, "progress beat failed")
                    continue
                # A beat that failed (the database was unreachable even after one
                # reconnect) is tried again soon, not a whole interval later; no
                # error ends this loop while the foreman runs.
                try:
                    beaten = self._beat()
                except Exception:
                    logger.exception("heartbeat round failed")
                    beaten = False
                wait_s = every_s if beaten else min(every_s, _BEAT_RETRY_S)
                due = time.monotonic() + wait_s
        finally:
            connections.close_all()

    def _beat(self) -> bool:
        """One heartbeat round; return whether the leases were extended (or none run)."""
        if self.completer is not None:
            # Results and unique-key releases land before the next beat.
            try:
                self.completer.flush()
            except Exception:
                log_failure(logger, self.using, "flushing completions failed")
        beaten = self._beat_leases(self._leases_to_extend())
        self._beat_registry()
        recycle_connections()
        return beaten

    def _leases_to_extend(self) -> list[_Running]:
        """The running jobs whose lease the next beat extends: all but those
        :data:`OVERDUE_S` seconds past their timeout (logged once each)."""
        now = time.monotonic()
        extend = []
        for running in self._snapshot():
            # ctx.storing: its handler returned; its outcome (batched or not) is on its way.
            if running.ctx.storing or now < running.deadline + OVERDUE_S:
                extend.append(running)
            elif not running.overdue:
                running.overdue = True
                logger.error(
                    "job still running %.0f s past its timeout_ms=%d and its handler "
                    "could not be ended (an async handler blocking the event loop?): "
                    "its lease is no longer extended, the reaper takes it back "
                    "jid=%s type=%s",
                    now - running.deadline,
                    running.job.timeout_ms,
                    running.job.jid,
                    running.job.job_type,
                )
        return extend

    def _beat_progress(self) -> None:
        """Beat the running jobs whose progress report is ready (none: no statement)."""
        now = time.monotonic()
        ready = [r for r in self._snapshot() if r.ctx.progress_ready(now)]
        if ready:
            self._beat_leases(ready)

    def _beat_leases(self, running: list[_Running]) -> bool:
        """Extend the leases of ``running`` and store their waiting progress; False if
        the write failed."""
        if not running:
            return True
        started = [r for r in running if r.start_unrecorded]
        reports = {r.job.pk: (r, r.ctx.take_progress()) for r in running}
        try:
            alive, cancel = storage.heartbeat(
                [r.job for r in running],
                lease_ms=self.lease_ms,
                started=[r.job.pk for r in started],
                progress={pk: report for pk, (_r, report) in reports.items() if report},
            )
        except Exception:
            log_failure(logger, self.using, "heartbeat failed")
            for r, report in reports.values():
                if report:
                    r.ctx.put_back_progress(report)
            recycle_connections()
            return False
        for r in started:
            r.start_unrecorded = False
        for r in running:
            if r.job.pk in cancel:
                r.ctx.mark_cancelled()
            if r.job.pk not in alive and not r.ctx.lease_lost:
                # A beat that crossed the job's own outcome write found it no longer
                # processing: not a lost lease. Were the lease lost, that write says
                # so itself (storage logs "lease lost, ... not stored").
                if r.ctx.storing:
                    continue
                with self._running_lock:
                    finished = self._running.get(r.job.pk) is not r
                if finished:
                    continue  # its outcome was stored since the snapshot
                r.ctx.mark_lease_lost()
                logger.warning(
                    "lease lost jid=%s type=%s attempt=%s",
                    r.job.jid,
                    r.job.job_type,
                    r.job.attempt,
                )
        return True

    def _reap(self) -> int:
        try:
            with self._making_due:
                reaped = reaping.reap_expired(self.using)
        except Exception:
            log_failure(logger, self.using, "reaping expired leases failed")
            return 0
        if reaped:
            self.wake()
        return reaped

    def _sync_schedules(self) -> None:
        """Write the declared plans once at start (schedules.on_foreman_start)."""
        from ..core.exceptions import ImproperlyConfiguredJobQueue
        from ..schedules import on_foreman_start

        try:
            on_foreman_start(self.using)
        except ImproperlyConfiguredJobQueue:
            raise  # a bad declaration stops the foreman at once, loudly
        except Exception:
            log_failure(logger, self.using, "syncing declared schedules failed")

    def _repair(self) -> None:
        """Make right the batches and workflows left stranded (docs/workflows.md
        "Repair"); each finding logs its own line."""
        try:
            retry_on_disconnect(self.using, repair, self.using)
        except Exception:
            log_failure(logger, self.using, "batch and workflow repair pass failed")

    def _materialize_schedules(self) -> None:
        try:
            from ..schedules import materialize_due
        except ImportError:
            return
        try:
            with self._making_due:
                made = retry_on_disconnect(self.using, materialize_due, self.using)
        except Exception:
            log_failure(logger, self.using, "materializing due schedules failed")
            return
        if made:
            self.wake()

    def _analyze(self) -> float:
        """Analyze the job table if stale; return the seconds until the next check
        (longer after a failure: one warning each ``RETRY_AFTER_FAILURE_S``, not each
        ``CHECK_EVERY_S``)."""
        try:
            retry_on_disconnect(self.using, tablestats.analyze_if_stale, self.using)
        except Exception:
            log_failure(
                logger,
                self.using,
                "analyzing the job table failed (next try in %.0f s)",
                tablestats.RETRY_AFTER_FAILURE_S,
            )
            recycle_connections()
            return tablestats.RETRY_AFTER_FAILURE_S
        return tablestats.CHECK_EVERY_S

    def _housekeeping_loop(self) -> None:
        reap_every = max(self.lease_ms / 2000, 0.1)
        now = time.monotonic()
        next_reap, next_flush, next_prune = now + reap_every, now + STATS_FLUSH_S, now
        next_repair, next_analyze = now + REPAIR_EVERY_S, now
        try:
            while not self._done.is_set():
                now = time.monotonic()
                try:
                    if not self._stopping.is_set():
                        if now >= next_analyze:  # first: the claim's plan needs it
                            next_analyze = time.monotonic() + self._analyze()
                        self._materialize_schedules()
                        if now >= next_reap:
                            self._reap()
                            next_reap = time.monotonic() + reap_every
                        if now >= next_prune:
                            self._prune()
                            next_prune = time.monotonic() + PRUNE_EVERY_S
                        if now >= next_repair:
                            self._repair()
                            next_repair = time.monotonic() + REPAIR_EVERY_S
                    if now >= next_flush:
                        self._flush_stats()
                        next_flush = time.monotonic() + STATS_FLUSH_S
                    recycle_connections()
                except Exception:  # each step logs its own; this keeps the loop alive
                    logger.exception("housekeeping round failed")
                self._done.wait(min(_SCHEDULE_EVERY_S, reap_every))
        finally:
            connections.close_all()

    def _finish_threads(self) -> None:
        """At shutdown, after the helper threads stopped: the last counts, then stopped.

        When the database cannot be reached (down, partitioned, dropped) or refuses
        these writes, one warning says what was not written, without a traceback:
        the process exits, and the error's first line says all there is.
        """
        reason = unreachable(self.using)
        if reason is None:
            done, failed = self._totals()
            try:
                process_stats.flush(self.using, quiet=True)
                retry_on_disconnect(
                    self.using, stop_worker, self.using, self.name, done=done, failed=failed
                )
            except Exception as exc:  # noqa: BLE001 (reported below, in one line)
                reason = in_one_line(exc)
        rows = process_stats.discard(self.using)
        if reason is not None or rows:
            logger.warning(
                "job statistics not written at exit rows=%d, nor the worker's stopped "
                "mark name=%s (%s)",
                rows,
                self.name,
                reason or "the database refused them",
            )

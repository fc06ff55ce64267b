"""The worker registry and the per-minute job statistics.

Policy
------
- **Registry.** A worker process registers a :class:`~django_jobqueue.models.Worker`
  row when it starts (:func:`register_worker`) and refreshes it on each heartbeat
  (:func:`beat_worker`, an upsert: a row pruned meanwhile comes back). It is *live*
  while ``last_seen_at`` is within three heartbeats (``3 * HEARTBEAT_MS``) of the
  database clock, *gone* after that, and deleted by :func:`prune_workers` once
  unseen for ``older_than``.
- **Statistics.** Outcomes are counted in memory by a :class:`StatsBuffer`, keyed by
  (UTC minute, queue, job type), and written by :meth:`StatsBuffer.flush` as one
  ``INSERT ... ON CONFLICT DO UPDATE`` (PostgreSQL, SQLite) or ``INSERT ... ON
  DUPLICATE KEY UPDATE`` (MySQL/MariaDB) that *adds* to the stored counters, so any
  number of processes flushing the same minute sum correctly. Never one write per
  job: the caller flushes every few seconds. Rows are written in key order, so two
  flushes lock shared rows in the same order; a deadlock or "database is locked" is
  retried a few times, then the counts go back into the buffer for the next flush.
- **Deduplicated enqueues.** The create path (``enqueue_job``, ``enqueue_many``,
  ``Queue.add``) counts each enqueue it turns away with :func:`count_deduplicated`
  into the process's :data:`create_stats` (a :class:`CreateStats`: one
  :class:`StatsBuffer` per database). A web process has no foreman to flush it, so
  it flushes itself: the first count after :data:`CREATE_STATS_FLUSH_S` seconds
  writes them all in one upsert, never inside the caller's transaction (there it
  waits for the commit, and a rollback leaves the counts for the next time: a
  deduplicated answer wrote nothing, so counting it later is right); a foreman's
  housekeeping flushes it too, and so does the process's exit.
- **Retention.** :func:`prune_stats` deletes rows older than ``STATS_RETENTION``.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DatabaseError, OperationalError, connections, transaction
from django.db.models import Q

from ..core.conf import get_config
from ..core.dbclock import Now
from ..core.exceptions import InvalidOption
from ..core.reconnect import is_disconnect
from ..models import DURATION_BUCKETS_MS, JobStat, Worker

__all__ = [
    "BUCKET_FIELDS",
    "CREATE_STATS_FLUSH_S",
    "OUTCOMES",
    "CreateStats",
    "StatsBuffer",
    "beat_worker",
    "bucket_of",
    "count_deduplicated",
    "create_stats",
    "gone_workers",
    "live_workers",
    "prune_stats",
    "prune_workers",
    "register_worker",
    "stop_worker",
]

logger = logging.getLogger(__name__)

#: What :meth:`StatsBuffer.record` counts: a column of :class:`JobStat` each.
OUTCOMES = ("done", "failed", "retried", "deduplicated")
#: The histogram columns, in bucket order (the last one is ``+Inf``).
BUCKET_FIELDS = (*(f"le_{bound}" for bound in DURATION_BUCKETS_MS), "le_inf")
_COUNTERS = (*OUTCOMES, "duration_ms_sum", *BUCKET_FIELDS)
_FLUSH_ATTEMPTS = 3
#: Seconds the process's deduplicated counts wait before a later count writes them.
CREATE_STATS_FLUSH_S = 5.0


def _heartbeat_window() -> timedelta:
    return timedelta(milliseconds=3 * get_config().HEARTBEAT_MS)


def register_worker(
    using: str,
    name: str,
    *,
    kind: str = "runworkers",
    host: str = "",
    pid: int | None = None,
    queues: Iterable[str] = (),
    job_types: Iterable[str] = (),
    languages: Iterable[str] = (),
    concurrency: int = 1,
    version: str = "",
) -> Worker:
    """Create or restart the registry row of worker ``name``; return it.

    Parameters
    ----------
    using
        Database alias of the jobs.
    name
        The worker's unique name (``host:pid`` for a foreman), 1 to 200 characters.
    kind
        ``runworkers`` or ``gateway``.
    host, pid, queues, job_types, languages, concurrency, version
        What the row shows; ``queues`` empty means every queue.

    Returns
    -------
    Worker
        The row, its ``started_at`` and ``last_seen_at`` now (database clock) and its
        counters (busy, done, failed) back at zero.

    Raises
    ------
    InvalidOption
        If ``name`` is empty or longer than 200 characters, or ``concurrency`` < 1.

    Implements: docs/design.md#execution.
    """
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise InvalidOption(f"A worker name must be 1 to 200 characters: got {name!r}.")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidOption(f"A worker's concurrency must be an integer >= 1: got {concurrency!r}.")
    values: dict[str, Any] = {
        "kind": kind,
        "host": host,
        "pid": pid,
        "queues": sorted(queues),
        "job_types": sorted(job_types),
        "languages": sorted(languages),
        "concurrency": concurrency,
        "version": version,
        "started_at": Now(),
        "last_seen_at": Now(),
        "busy": 0,
        "done": 0,
        "failed": 0,
        "stopped_at": None,
    }
    workers = Worker.objects.using(using)
    with transaction.atomic(using=using):
        if not workers.filter(name=name).update(**values):
            try:
                with transaction.atomic(using=using):
                    workers.create(name=name, **values)
            except DatabaseError:  # another process registered the same name first
                workers.filter(name=name).update(**values)
    logger.info(
        "worker registered name=%s kind=%s queues=%s",
        name,
        kind,
        ",".join(values["queues"]) or "*",  # as the foreman's start line: * is every queue
    )
    return workers.get(name=name)


def beat_worker(using: str, name: str, *, busy: int, done: int, failed: int) -> bool:
    """Mark worker ``name`` seen now with its current counters (a heartbeat).

    Parameters
    ----------
    using
        Database alias of the jobs.
    name
        The name given to :func:`register_worker`.
    busy
        Slots running a job now.
    done, failed
        Jobs done and failed since the worker started (totals, not increments).

    Returns
    -------
    bool
        True if the row existed; False if it had been pruned and was made again (an
        upsert: the worker shows as live either way).

    Implements: docs/design.md#execution.
    """
    values = {"last_seen_at": Now(), "busy": busy, "done": done, "failed": failed}
    workers = Worker.objects.using(using)
    if workers.filter(name=name).update(**values):
        return True
    try:
        with transaction.atomic(using=using):
            workers.create(name=name, **values)
    except DatabaseError:  # made meanwhile by a concurrent beat
        workers.filter(name=name).update(**values)
    return False


def stop_worker(
    using: str,
    name: str,
    *,
    done: int | None = None,
    failed: int | None = None,
    kind: str | None = None,
) -> bool:
    """Mark worker ``name`` stopped now (a clean stop), with its final counters when
    given (a gateway worker's are counted as it reports, so it gives none).

    A stopped worker is gone at once, not three heartbeats later. ``kind``: only a
    row of that kind. Returns False if no such row is running (pruned, or already
    stopped: nothing is written then).
    """
    values: dict[str, Any] = {"last_seen_at": Now(), "stopped_at": Now(), "busy": 0}
    if done is not None:
        values["done"] = done
    if failed is not None:
        values["failed"] = failed
    rows = Worker.objects.using(using).filter(name=name, stopped_at__isnull=True)
    if kind is not None:
        rows = rows.filter(kind=kind)
    return bool(rows.update(**values))


def live_workers(using: str) -> list[Worker]:
    """Return the workers seen within three heartbeats (database clock) and not stopped.

    Implements: docs/design.md#execution.
    """
    since = Now() - _heartbeat_window()
    live = Worker.objects.using(using).filter(last_seen_at__gte=since, stopped_at__isnull=True)
    return list(live.order_by("name"))


def gone_workers(using: str, *, limit: int = 100) -> list[Worker]:
    """Return up to ``limit`` workers stopped or unseen for three heartbeats, last seen first."""
    since = Now() - _heartbeat_window()
    gone = Worker.objects.using(using).filter(
        Q(last_seen_at__lt=since) | Q(stopped_at__isnull=False)
    )
    return list(gone.order_by("-last_seen_at")[:limit])


def prune_workers(using: str, *, older_than: timedelta = timedelta(days=1)) -> int:
    """Delete workers unseen for ``older_than`` (database clock); return how many."""
    deleted, _ = Worker.objects.using(using).filter(last_seen_at__lt=Now() - older_than).delete()
    return deleted


def prune_stats(using: str, *, now: datetime | None = None) -> int:
    """Delete :class:`JobStat` rows older than ``STATS_RETENTION``; return how many.

    Implements: docs/design.md#execution.
    """
    cutoff = (now or datetime.now(UTC)) - get_config().STATS_RETENTION
    deleted, _ = JobStat.objects.using(using).filter(minute__lt=cutoff).delete()
    return deleted


def bucket_of(duration_ms: int) -> str:
    """Return the histogram column that counts a run of ``duration_ms`` milliseconds."""
    for bound, column in zip(DURATION_BUCKETS_MS, BUCKET_FIELDS, strict=False):
        if duration_ms <= bound:
            return column
    return "le_inf"


@dataclass
class _Counts:
    values: dict[str, int]

    @classmethod
    def zero(cls) -> _Counts:
        return cls(dict.fromkeys(_COUNTERS, 0))

    def add(self, other: Mapping[str, int]) -> None:
        for key, number in other.items():
            self.values[key] += number


_Key = tuple[datetime, str, str]


class StatsBuffer:
    """Outcome counters held in memory until :meth:`flush` writes them in one upsert.

    Thread-safe: a foreman's worker threads share one buffer. ``clock`` (seconds
    since the epoch) is for tests.
    """

    def __init__(self, clock: Any = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: dict[_Key, _Counts] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def record(
        self,
        queue: str,
        job_type: str,
        outcome: str,
        duration_ms: int | None = None,
        *,
        count: int = 1,
    ) -> None:
        """Count ``count`` outcomes of jobs of ``job_type`` in ``queue``, this minute.

        Parameters
        ----------
        queue, job_type
            The job's queue and job type (never its payload).
        outcome
            One of :data:`OUTCOMES`: ``done``, ``failed`` (dead letter), ``retried``
            (an attempt failed, another comes) or ``deduplicated`` (an enqueue
            turned away).
        duration_ms
            The attempt's run time in ms, counted in the sum and the histogram;
            None for ``deduplicated``.
        count
            How many such outcomes (``deduplicated`` of a batch); 1 by default.

        Raises
        ------
        InvalidOption
            If ``outcome`` is not one of :data:`OUTCOMES`.
        """
        if outcome not in OUTCOMES:
            raise InvalidOption(f"A stats outcome must be one of {OUTCOMES}: got {outcome!r}.")
        seconds = int(self._clock()) // 60 * 60
        key = (datetime.fromtimestamp(seconds, UTC), queue, job_type)
        change = {outcome: count}
        if duration_ms is not None:
            duration = max(0, int(duration_ms))
            change["duration_ms_sum"] = duration * count
            change[bucket_of(duration)] = count
        with self._lock:
            self._rows.setdefault(key, _Counts.zero()).add(change)

    def _take(self) -> dict[_Key, _Counts]:
        with self._lock:
            rows, self._rows = self._rows, {}
        return rows

    def _give_back(self, rows: Mapping[_Key, _Counts]) -> None:
        with self._lock:
            for key, counts in rows.items():
                self._rows.setdefault(key, _Counts.zero()).add(counts.values)

    def flush(self, using: str) -> int:
        """Add the buffered counts to :class:`JobStat` in one statement; return rows.

        Parameters
        ----------
        using
            Database alias of the jobs.

        Returns
        -------
        int
            How many (minute, queue, job type) rows the statement wrote; 0 when the
            buffer was empty (no statement is sent).

        Raises
        ------
        DatabaseError
            If the upsert kept failing (its counts are back in the buffer, for the
            next flush).

        Implements: docs/design.md#execution.
        """
        rows = self._take()
        if not rows:
            return 0
        ordered = sorted(rows.items(), key=lambda item: item[0])
        for attempt in range(1, _FLUSH_ATTEMPTS + 1):
            try:
                _upsert(using, ordered)
            except OperationalError as exc:
                # Deadlocks, lock waits and "database is locked" are OperationalError;
                # inside the caller's transaction a retry cannot help.
                # A dead connection is not retried here (the caller reconnects).
                if (
                    attempt == _FLUSH_ATTEMPTS
                    or connections[using].in_atomic_block
                    or is_disconnect(exc, using)
                ):
                    self._give_back(rows)
                    raise
                logger.warning("stats flush retried attempt=%s rows=%s", attempt, len(rows))
                time.sleep(0.01 * attempt)
            except DatabaseError:
                self._give_back(rows)
                raise
            else:
                return len(ordered)
        return 0  # pragma: no cover (the loop returns or raises)


def _upsert(using: str, rows: list[tuple[_Key, _Counts]]) -> None:
    connection = connections[using]
    table = connection.ops.quote_name(JobStat._meta.db_table)
    quote = connection.ops.quote_name
    columns = ["minute", "queue", "job_type", *_COUNTERS]
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    params: list[Any] = []
    for (minute, queue, job_type), counts in rows:
        params.append(connection.ops.adapt_datetimefield_value(minute))
        params.extend([queue, job_type])
        params.extend(counts.values[name] for name in _COUNTERS)
    # Only quoted column names of the model go into the text; every value is a parameter.
    names = ", ".join(quote(c) for c in columns)
    values = ", ".join([placeholders] * len(rows))
    head = f"INSERT INTO {table} ({names}) VALUES {values}"  # noqa: S608
    if connection.vendor == "mysql":
        sets = ", ".join(f"{quote(c)} = {quote(c)} + VALUES({quote(c)})" for c in _COUNTERS)
        sql = f"{head} ON DUPLICATE KEY UPDATE {sets}"
    else:
        sets = ", ".join(
            f"{quote(c)} = {table}.{quote(c)} + excluded.{quote(c)}" for c in _COUNTERS
        )
        conflict = ", ".join(quote(c) for c in ("minute", "queue", "job_type"))
        sql = f"{head} ON CONFLICT ({conflict}) DO UPDATE SET {sets}"
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute(sql, params)


class CreateStats:
    """The deduplicated enqueues of one process, per database, until written.

    Thread-safe. :meth:`record` writes the counts itself once the oldest of them is
    ``flush_s`` seconds old (the first record after that), so a web process needs
    no thread and no foreman; never one write per enqueue. Inside the caller's
    transaction the write waits for its commit (``transaction.on_commit``): writing
    there would hold the stats rows' locks to the caller's end and lose the counts
    with a rollback. ``clock`` (monotonic seconds, for the age) and ``wall`` (epoch
    seconds, for the minute) are for tests.
    """

    def __init__(
        self,
        *,
        flush_s: float = CREATE_STATS_FLUSH_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.flush_s = flush_s
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._buffers: dict[str, StatsBuffer] = {}
        self._since: dict[str, float] = {}  # clock of the oldest count not written
        self._asked: dict[str, float] = {}  # clock of the last on_commit flush asked for

    def pending(self, using: str) -> int:
        """Return how many (minute, queue, job type) rows of ``using`` wait to be written."""
        with self._lock:
            buffer = self._buffers.get(using)
        return 0 if buffer is None else len(buffer)

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

        Writes the buffered counts of ``using`` (:meth:`flush`) when the oldest is
        ``flush_s`` seconds old: now in autocommit, after the commit inside a
        transaction. Never raises for a failed write (it is logged, the counts kept).
        """
        now = self._clock()
        with self._lock:
            buffer = self._buffers.get(using)
            if buffer is None:
                buffer = self._buffers[using] = StatsBuffer(clock=self._wall)
            since = self._since.setdefault(using, now)
        buffer.record(queue, job_type, "deduplicated", count=count)
        if now - since < self.flush_s:
            return
        if not connections[using].in_atomic_block:
            self.flush(using)
            return
        with self._lock:
            asked = self._asked.get(using)
            if asked is not None and now - asked < self.flush_s:
                return  # one commit hook per flush_s, however many enqueues a transaction makes
            self._asked[using] = now
        transaction.on_commit(lambda: self.flush(using), using=using)

    def flush(self, using: str, *, quiet: bool = False) -> int:
        """Write the counts of ``using`` in one upsert; return the rows written.

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
        except Exception:  # never fail an enqueue or a request for a counter
            if not quiet:
                logger.warning("writing deduplicated counts failed using=%s", using, exc_info=True)
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
            try:
                with self._lock:
                    buffer = self._buffers.pop(using, None)
                if buffer is not None and len(buffer):
                    buffer.flush(using)
            except Exception as exc:  # noqa: BLE001 (an exit hook never raises)
                text = str(exc).strip()
                logger.warning(
                    "deduplicated counts not written at exit using=%s rows=%d (%s)",
                    using,
                    len(buffer) if buffer is not None else 0,
                    text.splitlines()[0] if text else type(exc).__name__,
                )

    def clear(self) -> None:
        """Drop every count not written (tests, between cases)."""
        with self._lock:
            self._buffers.clear()
            self._since.clear()
            self._asked.clear()


#: The process's deduplicated counts; written at exit too.
create_stats = CreateStats()
atexit.register(create_stats.flush_at_exit)


def count_deduplicated(specs: Sequence[Any], answers: Sequence[Any]) -> None:
    """Count each enqueue of ``specs`` that its answer turned away, in :data:`create_stats`.

    Parameters
    ----------
    specs
        The jobs asked for, each with ``using``, ``queue`` and ``job_type`` (a
        :class:`~django_jobqueue.store.managers.JobSpec`).
    answers
        One per spec, in order: an ``EnqueueResult`` (counted when its status is
        ``deduplicated``) or the bool of ``Queue.add`` (counted when False).

    A held id that *raises* ``DuplicateJob`` (``enqueue_job(job_id=...)``) is an
    error, not an answer, and is not counted. Writes nothing now unless the
    process's counts are due (:meth:`CreateStats.record`).

    Implements: docs/design.md#execution.
    """
    turned_away: Counter[tuple[str, str, str]] = Counter()
    for spec, answer in zip(specs, answers, strict=True):
        if answer is False or getattr(answer, "deduplicated", False) is True:
            turned_away[(spec.using, spec.queue, spec.job_type)] += 1
    for (using, queue, job_type), number in sorted(turned_away.items()):
        create_stats.record(using, queue, job_type, number)

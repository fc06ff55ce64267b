"""One database's job statistics, buffered in memory and written by an upsert.

Policy
------
- **One row per (UTC minute, queue, job type).** :class:`StatsBuffer` adds each
  count to the row of the minute it happened in, in memory; nothing is written per
  job. The columns are those of :class:`~django_jobqueue.store.statmodels.StatCounters`
  (:data:`COUNTERS`): outcomes (:data:`OUTCOMES`), a run-time histogram
  (:data:`BUCKET_FIELDS`, :func:`bucket_of`) and a pickup-latency histogram
  (:data:`PICKUP_FIELDS`, :func:`pickup_bucket_of`).
- **Written by adding.** :meth:`StatsBuffer.flush` writes the rows in one
  transaction of two upserts that *add* to the stored counters: the per-minute rows
  of :class:`~django_jobqueue.models.JobStat` and the cumulative rows of
  :class:`~django_jobqueue.models.JobTotal`. ``INSERT ... ON CONFLICT DO UPDATE``
  (PostgreSQL, SQLite) or ``INSERT ... ON DUPLICATE KEY UPDATE`` (MySQL/MariaDB):
  any number of processes flushing the same rows sum correctly. Rows are written in
  key order, so two flushes lock shared rows in the same order; a deadlock or
  "database is locked" is retried a few times, then the counts go back into the
  buffer for the next flush.

When a process flushes, and the counting of each outcome, are
:mod:`django_jobqueue.store.jobstats`' (which re-exports these names).

Implements: docs/metrics.md.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import DatabaseError, OperationalError, connections, transaction

from ..core.exceptions import InvalidOption
from ..core.reconnect import is_disconnect
from .statmodels import DURATION_BUCKETS_MS, PICKUP_BUCKETS_MS, JobStat, JobTotal

__all__ = [
    "BUCKET_FIELDS",
    "COUNTERS",
    "OUTCOMES",
    "PICKUP_FIELDS",
    "StatsBuffer",
    "bucket_of",
    "pickup_bucket_of",
]

logger = logging.getLogger(__name__)


#: What :meth:`StatsBuffer.record` counts: a column of :class:`JobStat` each.
OUTCOMES = ("done", "failed", "retried", "deduplicated")
#: The run-time histogram columns, in bucket order (the last one is ``+Inf``).
BUCKET_FIELDS = (*(f"le_{bound}" for bound in DURATION_BUCKETS_MS), "le_inf")
#: The pickup-latency histogram columns, in bucket order (the last one is ``+Inf``).
PICKUP_FIELDS = (*(f"pickup_le_{bound}" for bound in PICKUP_BUCKETS_MS), "pickup_le_inf")
#: Every counter column of JobStat and JobTotal, as the flush writes them.
COUNTERS = (*OUTCOMES, "duration_ms_sum", *BUCKET_FIELDS, "pickup_ms_sum", *PICKUP_FIELDS)
_FLUSH_ATTEMPTS = 3


def bucket_of(duration_ms: int) -> str:
    """Return the histogram column that counts a run of ``duration_ms`` milliseconds:
    the first whose bound is at least it (``le_inf`` past the last); a bisection,
    as it runs once per job."""
    return BUCKET_FIELDS[bisect_left(DURATION_BUCKETS_MS, duration_ms)]


def pickup_bucket_of(pickup_ms: int) -> str:
    """Return the pickup histogram column that counts a wait of ``pickup_ms`` ms (as
    :func:`bucket_of`)."""
    return PICKUP_FIELDS[bisect_left(PICKUP_BUCKETS_MS, pickup_ms)]


@dataclass
class _Counts:
    values: dict[str, int]

    @classmethod
    def zero(cls) -> _Counts:
        return cls(dict.fromkeys(COUNTERS, 0))

    def add(self, other: Mapping[str, int]) -> None:
        for key, number in other.items():
            self.values[key] += number


_Key = tuple[datetime, str, str]


class StatsBuffer:
    """Counters held in memory until :meth:`flush` writes them in one transaction.

    Thread-safe: a process's threads share one buffer per database. ``clock``
    (seconds since the epoch) is for tests.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: dict[_Key, _Counts] = {}
        #: The last minute counted in, (epoch seconds, its datetime): one datetime
        #: per minute, not per count.
        self._minute: tuple[int, datetime] = (-1, datetime.min.replace(tzinfo=UTC))

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def add(self, queue: str, job_type: str, change: Mapping[str, int]) -> None:
        """Add ``change`` (counter column -> amount, :data:`COUNTERS`) to the row of
        ``queue`` and ``job_type`` this minute: the counts of many jobs at once."""
        seconds = int(self._clock()) // 60 * 60
        minute = self._minute
        if minute[0] != seconds:
            minute = self._minute = (seconds, datetime.fromtimestamp(seconds, UTC))
        key = (minute[1], queue, job_type)
        with self._lock:
            counts = self._rows.get(key)
            if counts is None:
                counts = self._rows[key] = _Counts.zero()
            counts.add(change)

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
            None when it is not known (``deduplicated``, a reaped lease).
        count
            How many such outcomes (``deduplicated`` of a batch); 1 by default.

        Raises
        ------
        InvalidOption
            If ``outcome`` is not one of :data:`OUTCOMES`.
        """
        if outcome not in OUTCOMES:
            raise InvalidOption(f"A stats outcome must be one of {OUTCOMES}: got {outcome!r}.")
        change = {outcome: count}
        if duration_ms is not None:
            duration = max(0, int(duration_ms))
            change["duration_ms_sum"] = duration * count
            change[bucket_of(duration)] = count
        self.add(queue, job_type, change)

    def record_pickup(self, queue: str, job_type: str, pickup_ms: int) -> None:
        """Count one claim of a job of ``job_type`` in ``queue`` that waited ``pickup_ms``
        ms (negative counts as 0) since its ``run_at``."""
        wait = max(0, int(pickup_ms))
        self.add(queue, job_type, {"pickup_ms_sum": wait, pickup_bucket_of(wait): 1})

    def _take(self) -> dict[_Key, _Counts]:
        with self._lock:
            rows, self._rows = self._rows, {}
        return rows

    def _give_back(self, rows: Mapping[_Key, _Counts]) -> None:
        with self._lock:
            for key, counts in rows.items():
                mine = self._rows.get(key)
                if mine is None:
                    self._rows[key] = counts
                else:
                    mine.add(counts.values)

    def clear(self) -> None:
        """Drop every count not written."""
        self._take()

    def flush(self, using: str) -> int:
        """Add the buffered counts to JobStat and JobTotal in one transaction; return
        the JobStat rows written.

        Parameters
        ----------
        using
            Database alias of the jobs.

        Returns
        -------
        int
            How many (minute, queue, job type) rows the per-minute upsert wrote; 0
            when the buffer was empty (no statement is sent).

        Raises
        ------
        DatabaseError
            If the upserts kept failing (their counts are back in the buffer, for
            the next flush).

        Implements: docs/metrics.md.
        """
        rows = self._take()
        if not rows:
            return 0
        ordered = sorted(rows.items(), key=lambda item: item[0])
        for attempt in range(1, _FLUSH_ATTEMPTS + 1):
            try:
                _write(using, ordered)
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


def _upsert_sql(using: str, table: str, keys: Sequence[str], rows: int) -> str:
    """The text of one upsert of ``rows`` rows into ``table`` that adds every counter."""
    connection = connections[using]
    quote = connection.ops.quote_name
    columns = [*keys, *COUNTERS]
    placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
    # Only quoted column names of the models go into the text; every value is a parameter.
    names = ", ".join(quote(c) for c in columns)
    values = ", ".join([placeholders] * rows)
    head = f"INSERT INTO {quote(table)} ({names}) VALUES {values}"  # noqa: S608
    if connection.vendor == "mysql":
        sets = ", ".join(f"{quote(c)} = {quote(c)} + VALUES({quote(c)})" for c in COUNTERS)
        return f"{head} ON DUPLICATE KEY UPDATE {sets}"
    sets = ", ".join(
        f"{quote(c)} = {quote(table)}.{quote(c)} + excluded.{quote(c)}" for c in COUNTERS
    )
    conflict = ", ".join(quote(c) for c in keys)
    return f"{head} ON CONFLICT ({conflict}) DO UPDATE SET {sets}"


def _write(using: str, rows: list[tuple[_Key, _Counts]]) -> None:
    """Add ``rows`` to the per-minute rows, and their sums to the cumulative rows."""
    connection = connections[using]
    minute_params: list[Any] = []
    totals: dict[tuple[str, str], _Counts] = {}
    for (minute, queue, job_type), counts in rows:
        minute_params.append(connection.ops.adapt_datetimefield_value(minute))
        minute_params.extend([queue, job_type])
        minute_params.extend(counts.values[name] for name in COUNTERS)
        totals.setdefault((queue, job_type), _Counts.zero()).add(counts.values)
    total_params: list[Any] = []
    for (queue, job_type), counts in sorted(totals.items()):
        total_params.extend([queue, job_type])
        total_params.extend(counts.values[name] for name in COUNTERS)
    minute_sql = _upsert_sql(
        using, JobStat._meta.db_table, ("minute", "queue", "job_type"), len(rows)
    )
    total_sql = _upsert_sql(using, JobTotal._meta.db_table, ("queue", "job_type"), len(totals))
    with transaction.atomic(using=using), connection.cursor() as cursor:
        cursor.execute(minute_sql, minute_params)
        cursor.execute(total_sql, total_params)

"""The queues at a glance, cheap on a big job table.

No full-table count: waiting and scheduled jobs are counted over the claim index
(``waiting`` leads it), running ones over the lease index, dead letters over the
partial index of dead rows (PostgreSQL; the status index elsewhere); finished work
comes from :class:`~django_jobqueue.models.JobStat`.
The console's overview and the Prometheus endpoint both read :func:`overview`.

:func:`stat_totals` (the Prometheus counters) sums every kept JobStat row, a week of
minutes per (queue, job type) by default: it sums the closed hours once per
:data:`TOTALS_REFRESH_S` per process and reads only the open hours at each call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import router
from django.db.models import Case, Count, Min, Sum, Value, When

from .core.conf import get_config
from .core.dbclock import Now
from .models import DEAD_STATUSES, Job, JobStat, JobStatus
from .store.pauses import paused_queues
from .store.workerstats import BUCKET_FIELDS, OUTCOMES

__all__ = [
    "STAT_COUNTERS",
    "TOTALS_REFRESH_S",
    "QueueRow",
    "clear_totals_cache",
    "jobs_database",
    "overview",
    "stat_totals",
]

#: The JobStat columns :func:`stat_totals` sums.
STAT_COUNTERS = (*OUTCOMES, "duration_ms_sum", *BUCKET_FIELDS)
#: Seconds a process keeps the sums of the closed hours before it reads them again.
TOTALS_REFRESH_S = 600.0
#: Hours before the current one still read at each call: late flushes land there.
_OPEN_HOURS = 1

_Totals = dict[tuple[str, str], dict[str, int]]
_closed_lock = threading.Lock()
#: alias -> (monotonic expiry, start of the open hours, sums of the rows before it)
_closed: dict[str, tuple[float, datetime, _Totals]] = {}


def jobs_database() -> str:
    """Return the database alias of the jobs (``JOBQUEUE["DATABASE"]``, else routers)."""
    return get_config().DATABASE or router.db_for_write(Job)


@dataclass
class QueueRow:
    """One queue on the overview."""

    queue: str
    waiting: int = 0
    scheduled: int = 0
    retrying: int = 0
    running: int = 0
    dead: int = 0
    done_last_hour: int = 0
    failed_last_hour: int = 0
    oldest_waiting_s: float | None = None
    paused: bool = False


def overview(using: str, now: datetime | None = None) -> list[QueueRow]:
    """Return every known queue's counts, oldest waiting age and pause state."""
    now = now or datetime.now(UTC)
    rows: dict[str, QueueRow] = {}

    def row(name: str) -> QueueRow:
        return rows.setdefault(name, QueueRow(queue=name))

    jobs = Job.objects.using(using).order_by()
    waiting = (
        jobs.filter(waiting=True)
        .annotate(
            due=Case(When(run_at__lte=Now(), then=Value(1)), default=Value(0)),
        )
        .values_list("queue", "status", "due")
        .annotate(n=Count("pk"))
    )
    for queue, status, due, number in waiting:
        target = row(queue)
        if status == JobStatus.RETRY:
            target.retrying += number
        elif due:
            target.waiting += number
        else:
            target.scheduled += number
    oldest = (
        jobs.filter(waiting=True, run_at__lte=Now()).values_list("queue").annotate(m=Min("run_at"))
    )
    for queue, run_at in oldest:
        row(queue).oldest_waiting_s = max(0.0, (now - run_at).total_seconds())
    for queue, number in (
        jobs.filter(status=JobStatus.PROCESSING).values_list("queue").annotate(n=Count("pk"))
    ):
        row(queue).running = number
    # COUNT(*), not COUNT(id): PostgreSQL answers it from jq_job_dead_idx alone
    # (migration 0004), an index-only scan of the dead rows.
    for queue, number in (
        jobs.filter(status__in=DEAD_STATUSES).values_list("queue").annotate(n=Count("*"))
    ):
        row(queue).dead = number
    stats = (
        JobStat.objects.using(using)
        .filter(minute__gte=now - timedelta(hours=1))
        .values_list("queue")
        .annotate(done=Sum("done"), failed=Sum("failed"))
    )
    for queue, done, failed in stats:
        row(queue).done_last_hour = done or 0
        row(queue).failed_last_hour = failed or 0
    for queue in get_config().QUEUES:
        row(queue)
    paused = paused_queues(using, max_age_s=0)
    for queue in paused:
        row(queue).paused = True
    return [rows[name] for name in sorted(rows)]


def _sums(rows: Iterable[Mapping[str, Any]]) -> _Totals:
    totals: _Totals = {}
    for row in rows:
        totals[(row["queue"], row["job_type"])] = {c: row[f"s_{c}"] or 0 for c in STAT_COUNTERS}
    return totals


def _stat_rows(using: str, **where: datetime) -> _Totals:
    sums = {f"s_{name}": Sum(name) for name in STAT_COUNTERS}
    rows = (
        JobStat.objects.using(using)
        .filter(**where)
        .order_by()
        .values("queue", "job_type")
        .annotate(**sums)
    )
    return _sums(rows)


def stat_totals(using: str, *, now: datetime | None = None) -> _Totals:
    """Return every JobStat counter summed per (queue, job type) over the kept rows.

    Parameters
    ----------
    using
        Database alias of the jobs.
    now
        The current time (tests); the open hours start an hour before its hour.

    Returns
    -------
    dict
        ``{(queue, job_type): {"done": n, "failed": n, ..., "le_inf": n}}`` with
        every column of :data:`STAT_COUNTERS`.

    The rows before the open hours are summed at most once per
    :data:`TOTALS_REFRESH_S` seconds per process (the read that would otherwise
    cost about 70 ms at a week of 20 pairs); the open hours are read at each call
    over the (minute, queue, job type) index. A count flushed later than an hour
    after its minute, and the rows :func:`~django_jobqueue.store.workerstats.prune_stats`
    deletes, show at the next refresh.
    """
    now = now or datetime.now(UTC)
    clock = time.monotonic()
    with _closed_lock:
        cached = _closed.get(using)
    if cached is None or cached[0] <= clock:
        start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=_OPEN_HOURS)
        cached = (clock + TOTALS_REFRESH_S, start, _stat_rows(using, minute__lt=start))
        with _closed_lock:
            _closed[using] = cached
    _expires, start, closed = cached
    totals = {key: dict(values) for key, values in closed.items()}
    for key, values in _stat_rows(using, minute__gte=start).items():
        into = totals.setdefault(key, dict.fromkeys(STAT_COUNTERS, 0))
        for name, number in values.items():
            into[name] += number
    return totals


def clear_totals_cache() -> None:
    """Forget the cached sums of the closed hours (tests; after a bulk change of stats)."""
    with _closed_lock:
        _closed.clear()

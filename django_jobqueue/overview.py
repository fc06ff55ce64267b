"""The queues at a glance, cheap on a big job table.

No full-table count: waiting and scheduled jobs are counted over the claim index
(``waiting`` leads it), running ones and dead letters over the partial indexes of
their rows (PostgreSQL, index-only scans; the status indexes elsewhere); finished work
comes from :class:`~django_jobqueue.models.JobStat` (the last hour's minutes, over
its (minute, queue, job type) index), which every worker's outcomes reach through
storage (docs/metrics.md). The console's overview, ``jobqueue status`` and the
Prometheus endpoint all read :func:`overview`.

:func:`stat_totals` (the Prometheus counters) reads
:class:`~django_jobqueue.models.JobTotal`: one row per (queue, job type), counted
since install by the same upsert as the per-minute rows and never pruned, so the
counters never go down.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import router
from django.db.models import Case, Count, Min, Sum, Value, When

from .core.conf import get_config
from .core.dbclock import Now
from .models import DEAD_STATUSES, Job, JobStat, JobStatus, JobTotal
from .store import states
from .store.jobstats import COUNTERS
from .store.pauses import paused_queues

__all__ = [
    "STATS_WINDOW",
    "STAT_COUNTERS",
    "QueueRow",
    "jobs_database",
    "overview",
    "stat_totals",
]

#: The counters :func:`stat_totals` returns (every JobTotal counter column).
STAT_COUNTERS = COUNTERS
#: The window of the overview's finished-work figures.
STATS_WINDOW = timedelta(hours=1)

_Totals = dict[tuple[str, str], dict[str, int]]


def jobs_database() -> str:
    """Return the database alias of the jobs (``JOBQUEUE["DATABASE"]``, else routers)."""
    return get_config().DATABASE or router.db_for_write(Job)


@dataclass
class QueueRow:
    """One queue on the overview: jobs now, and finished work over :data:`STATS_WINDOW`."""

    queue: str
    #: Jobs due now, waiting for a worker, that never failed (stored status ``init``).
    waiting: int = 0
    #: Jobs waiting for a ``run_at`` in the future that never failed (``init``).
    scheduled: int = 0
    #: Jobs waiting for their next attempt after a failed one (stored status ``retry``),
    #: due now or not.
    retrying: int = 0
    #: Of :attr:`retrying`, the ones due now.
    retrying_due: int = 0
    #: Jobs held by a worker now.
    running: int = 0
    #: Dead letters kept now (``error``, ``max_retry``).
    dead: int = 0
    #: Attempts that ended ``done`` in the last hour.
    done_last_hour: int = 0
    #: Attempts that failed in the last hour, retried or not (a reaped lease too).
    failed_attempts_last_hour: int = 0
    #: Of those, the ones that made a dead letter.
    dead_letters_last_hour: int = 0
    #: Seconds the oldest due waiting job has waited since its ``run_at``; None: none.
    oldest_waiting_s: float | None = None
    paused: bool = False

    @property
    def by_state(self) -> dict[str, int]:
        """The jobs now by state word (docs/console.md#states): ``scheduled`` and
        ``waiting`` count ``init`` and ``retry`` jobs alike, by their ``run_at``."""
        return {
            states.SCHEDULED: self.scheduled + self.retrying - self.retrying_due,
            states.WAITING: self.waiting + self.retrying_due,
            states.RUNNING: self.running,
            states.FAILED: self.dead,
        }

    @property
    def retrying_scheduled(self) -> int:
        """Of :attr:`retrying`, the ones whose ``run_at`` (their backoff) is ahead."""
        return self.retrying - self.retrying_due

    def as_dict(self) -> dict[str, object]:
        """Return the row as JSON-ready data (``jobqueue status --json``)."""
        return {
            "queue": self.queue,
            "waiting": self.waiting,
            "scheduled": self.scheduled,
            "retrying": self.retrying,
            "retrying_due": self.retrying_due,
            "running": self.running,
            "dead": self.dead,
            "done_last_hour": self.done_last_hour,
            "failed_attempts_last_hour": self.failed_attempts_last_hour,
            "dead_letters_last_hour": self.dead_letters_last_hour,
            "oldest_waiting_s": self.oldest_waiting_s,
            "paused": self.paused,
        }


def overview(using: str, now: datetime | None = None) -> list[QueueRow]:
    """Return every known queue's counts, oldest waiting age and pause state.

    A queue is known while it has waiting, running or dead jobs, statistics in the
    last hour, a pause, or a ``JOBQUEUE["QUEUES"]`` entry: a queue whose jobs are all
    done stays while it has statistics in the window. ``now``: tests.
    """
    now = now or datetime.now(UTC)
    rows: dict[str, QueueRow] = {}

    def row(name: str) -> QueueRow:
        return rows.setdefault(name, QueueRow(queue=name))

    jobs = Job.objects.using(using).order_by()
    waiting = (
        jobs.filter(states.is_waiting())
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
            if due:
                target.retrying_due += number
        elif due:
            target.waiting += number
        else:
            target.scheduled += number
    oldest = (
        jobs.filter(states.is_waiting(), run_at__lte=Now())
        .values_list("queue")
        .annotate(m=Min("run_at"))
    )
    for queue, run_at in oldest:
        row(queue).oldest_waiting_s = max(0.0, (now - run_at).total_seconds())
    # COUNT(*), not COUNT(id): PostgreSQL answers these from jq_job_running_idx
    # (migration 0023) and jq_job_dead_idx (migration 0004) alone, index-only scans
    # of the running and of the dead rows.
    for queue, number in (
        jobs.filter(status=JobStatus.PROCESSING).values_list("queue").annotate(n=Count("*"))
    ):
        row(queue).running = number
    for queue, number in (
        jobs.filter(status__in=DEAD_STATUSES).values_list("queue").annotate(n=Count("*"))
    ):
        row(queue).dead = number
    stats = (
        JobStat.objects.using(using)
        .filter(minute__gte=now - STATS_WINDOW)
        .order_by()
        .values_list("queue")
        .annotate(done=Sum("done"), failed=Sum("failed"), retried=Sum("retried"))
    )
    for queue, done, failed, retried in stats:
        target = row(queue)
        target.done_last_hour = done or 0
        target.dead_letters_last_hour = failed or 0
        target.failed_attempts_last_hour = (failed or 0) + (retried or 0)
    for queue in get_config().QUEUES:
        row(queue)
    paused = paused_queues(using, max_age_s=0)
    for queue in paused:
        row(queue).paused = True
    return [rows[name] for name in sorted(rows)]


def stat_totals(using: str) -> _Totals:
    """Return the cumulative counters per (queue, job type), counted since install.

    Parameters
    ----------
    using
        Database alias of the jobs.

    Returns
    -------
    dict
        ``{(queue, job_type): {"done": n, "failed": n, ..., "pickup_le_inf": n}}``
        with every column of :data:`STAT_COUNTERS`; a pair never counted is absent.

    One read of :class:`~django_jobqueue.models.JobTotal` (a row per pair, however
    many jobs ran). Counts still buffered in a process (at most a flush interval,
    docs/metrics.md) are not in it yet; :func:`~django_jobqueue.store.jobstats.prune_stats`
    never lowers it.
    """
    columns = ("queue", "job_type", *STAT_COUNTERS)
    rows = JobTotal.objects.using(using).order_by("queue", "job_type").values_list(*columns)
    return {
        (row[0], row[1]): {name: int(n) for name, n in zip(STAT_COUNTERS, row[2:], strict=True)}
        for row in rows
    }

"""The queues at a glance, cheap on a big job table (issue 13 items 4, 8 and 9).

No full-table count: waiting and scheduled jobs are counted over the claim index
(``waiting`` leads it), running ones over the lease index, dead letters over the
partial index of dead rows (PostgreSQL; the status index elsewhere); finished work
comes from :class:`~django_jobqueue.models.JobStat`.
The console's overview and the Prometheus endpoint both read :func:`overview`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import router
from django.db.models import Case, Count, Min, Sum, Value, When

from .conf import get_config
from .dbclock import Now
from .models import DEAD_STATUSES, Job, JobStat, JobStatus
from .pauses import paused_queues

__all__ = ["QueueRow", "jobs_database", "overview"]


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

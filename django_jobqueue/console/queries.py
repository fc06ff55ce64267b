"""What the console pages read, each query bounded on a big job table.

No full-table count: waiting and scheduled jobs are counted over the claim index
(``waiting`` leads it), running ones over the lease index, dead letters over the
status index; finished work comes from :class:`~django_jobqueue.models.JobStat`.
Filters and sorts from the URL go through :class:`JobFilter`, a form whose choices
are the only values that reach a query.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.db.models import Q, QuerySet, Sum

from ..core.dbclock import Now
from ..models import DEAD_STATUSES, Job, JobStat, JobStatus
from ..overview import QueueRow, overview
from ..store.managers import hold_hash

__all__ = [
    "PAGE_SIZE",
    "STATES",
    "JobFilter",
    "QueueRow",
    "chart_series",
    "dedupe_series",
    "filtered_jobs",
    "job_page",
    "overview",
]

#: Jobs per page of the jobs list (and the most a Core selection action takes).
PAGE_SIZE = 50

#: The state filter's values and what each selects.
STATES: dict[str, Q] = {
    "waiting": Q(waiting=True, status=JobStatus.INIT, run_at__lte=Now()),
    "scheduled": Q(waiting=True, status=JobStatus.INIT, run_at__gt=Now()),
    "retrying": Q(waiting=True, status=JobStatus.RETRY),
    "running": Q(status=JobStatus.PROCESSING),
    "dead": Q(status__in=DEAD_STATUSES),
    "done": Q(status=JobStatus.DONE),
    "cancelled": Q(status=JobStatus.CANCELLED),
}


def chart_series(
    using: str, *, hours: int, step_minutes: int, now: datetime | None = None
) -> tuple[list[str], dict[str, list[int]]]:
    """Return labels and the finished attempts per ``step_minutes`` over the last ``hours``.

    ``step_minutes`` divides an hour (1 or 60); labels are UTC ``HH:MM``. The
    series, one value per label: ``done``, ``retried`` (failed, another attempt
    comes) and ``failed`` (failed into a dead letter), every worker's
    (docs/metrics.md).
    """
    now = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    steps = hours * 60 // step_minutes
    start = now - timedelta(minutes=step_minutes * (steps - 1))
    start = start.replace(minute=start.minute - start.minute % step_minutes)
    series = {name: [0] * steps for name in ("done", "retried", "failed")}
    stats = (
        JobStat.objects.using(using)
        .filter(minute__gte=start)
        .order_by()
        .values_list("minute")
        .annotate(done=Sum("done"), retried=Sum("retried"), failed=Sum("failed"))
    )
    for minute, done, retried, failed in stats:
        index = int((minute - start).total_seconds() // 60) // step_minutes
        if 0 <= index < steps:
            series["done"][index] += done or 0
            series["retried"][index] += retried or 0
            series["failed"][index] += failed or 0
    fmt = "%H:%M"
    labels = [(start + timedelta(minutes=step_minutes * i)).strftime(fmt) for i in range(steps)]
    return labels, series


def dedupe_series(
    using: str, *, now: datetime | None = None
) -> tuple[list[str], list[tuple[str, str, list[int]]]]:
    """Return hourly deduplicated counts over the last day per (queue, job type)."""
    now = (now or datetime.now(UTC)).replace(minute=0, second=0, microsecond=0)
    start = now - timedelta(hours=23)
    per_key: dict[tuple[str, str], list[int]] = {}
    stats = (
        JobStat.objects.using(using)
        .filter(minute__gte=start, deduplicated__gt=0)
        .values_list("minute", "queue", "job_type")
        .annotate(n=Sum("deduplicated"))
    )
    for minute, queue, job_type, number in stats:
        index = int((minute - start).total_seconds() // 3600)
        if 0 <= index < 24:
            per_key.setdefault((queue, job_type), [0] * 24)[index] += number
    labels = [(start + timedelta(hours=i)).strftime("%H:%M") for i in range(24)]
    return labels, [(q, t, values) for (q, t), values in sorted(per_key.items())]


class JobFilter(forms.Form):
    """The jobs list's filters, search and cursor; only valid values reach a query."""

    state = forms.ChoiceField(
        required=False, choices=[("", "any state"), *((s, s) for s in STATES)]
    )
    queue = forms.CharField(required=False, max_length=100)
    job_type = forms.CharField(required=False, max_length=200)
    since = forms.DateTimeField(required=False, help_text="created at or after (UTC)")
    until = forms.DateTimeField(required=False, help_text="created before (UTC)")
    q = forms.CharField(required=False, max_length=1024, label="jid or id")
    sort = forms.ChoiceField(
        required=False, choices=[("-id", "newest first"), ("id", "oldest first")]
    )
    after = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    #: Other names of a state: ``failed`` is what the ids API (``Queue.list``) says.
    STATE_ALIASES = {"failed": "dead"}

    def __init__(self, data: Any = None, *args: Any, **kwargs: Any) -> None:
        if data is not None and data.get("state") in self.STATE_ALIASES:
            data = data.copy()
            data["state"] = self.STATE_ALIASES[data["state"]]
        super().__init__(data, *args, **kwargs)


def filtered_jobs(using: str, data: dict[str, Any]) -> QuerySet[Job]:
    """Return the jobs that a valid :class:`JobFilter`'s ``cleaned_data`` selects."""
    jobs = Job.objects.using(using).all()
    if data.get("state"):
        jobs = jobs.filter(STATES[data["state"]])
    if data.get("queue"):
        jobs = jobs.filter(queue=data["queue"])
    if data.get("job_type"):
        jobs = jobs.filter(job_type=data["job_type"])
    if data.get("since"):
        jobs = jobs.filter(created_at__gte=data["since"])
    if data.get("until"):
        jobs = jobs.filter(created_at__lt=data["until"])
    if data.get("q"):
        text = data["q"].strip()
        match = Q(jid=text) | Q(job_id_hash=hold_hash(text))
        if text.isdigit() and len(text) < 19:
            match |= Q(pk=int(text))
        jobs = jobs.filter(match)
    return jobs


def job_page(jobs: QuerySet[Job], data: dict[str, Any]) -> tuple[list[Job], int | None]:
    """Return one page of ``jobs`` after the cursor, and the next cursor (None: last).

    Keyset pagination on the primary key: never OFFSET, so page 1,000 costs what
    page 1 does.
    """
    ascending = data.get("sort") == "id"
    after = data.get("after")
    if after:
        jobs = jobs.filter(pk__gt=after) if ascending else jobs.filter(pk__lt=after)
    page = list(
        jobs.order_by("pk" if ascending else "-pk").defer("payload", "result", "errors")[
            : PAGE_SIZE + 1
        ]
    )
    next_cursor = page[PAGE_SIZE - 1].pk if len(page) > PAGE_SIZE else None
    return page[:PAGE_SIZE], next_cursor

"""The console's read-only pages: overview, jobs, a job, workers, schedules."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from ..models import Job, ScheduleJob
from ..overview import jobs_database
from ..store.licence import is_pro
from ..store.workerstats import gone_workers, live_workers
from . import queries
from .access import PERMISSIONS, staff_required
from .charts import bar_chart

__all__ = ["job_detail", "job_list", "overview", "schedules", "using", "workers"]

DONE_COLOUR = "#417690"
FAILED_COLOUR = "#ba2121"
RETRIED_COLOUR = "#e0a030"
#: Seconds between the overview's own refreshes (a ``<meta http-equiv=refresh>``).
REFRESH_S = 5


def using() -> str:
    """Return the database alias of the jobs (``JOBQUEUE["DATABASE"]``, else routers)."""
    return jobs_database()


def context(request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
    """Return the template context every console page shares."""
    user = request.user
    return {
        "title": title,
        "site_header": "django-jobqueue",
        "has_permission": True,
        "is_pro": is_pro(),
        "can": {name: user.has_perm(perm) for name, perm in PERMISSIONS.items()},
        **extra,
    }


def _attempts(series: dict[str, list[int]]) -> list[tuple[str, str, list[int]]]:
    """The charts' stacked series: done, failed and retried, failed into a dead letter."""
    return [
        ("done", DONE_COLOUR, series["done"]),
        ("retried", RETRIED_COLOUR, series["retried"]),
        ("dead letters", FAILED_COLOUR, series["failed"]),
    ]


@staff_required()
def overview(request: HttpRequest) -> HttpResponse:
    """Show every queue at a glance and the throughput charts; refreshes itself."""
    alias = using()
    labels, by_minute = queries.chart_series(alias, hours=1, step_minutes=1)
    hour_labels, by_hour = queries.chart_series(alias, hours=24, step_minutes=60)
    minute_chart = bar_chart(labels, _attempts(by_minute), title="Attempts per minute, last hour")
    hour_chart = bar_chart(hour_labels, _attempts(by_hour), title="Attempts per hour, last day")
    return render(
        request,
        "django_jobqueue/console/overview.html",
        context(
            request,
            "Queues",
            queues=queries.overview(alias),
            minute_chart=minute_chart,
            hour_chart=hour_chart,
            live=len(live_workers(alias)),
            refresh_s=REFRESH_S,
        ),
    )


@staff_required()
def job_list(request: HttpRequest) -> HttpResponse:
    """List jobs by filter and search, one keyset page at a time."""
    form = queries.JobFilter(request.GET or None)
    jobs: list[Job] = []
    next_url = ""
    if not request.GET or form.is_valid():
        data = form.cleaned_data if request.GET else {}
        page, cursor = queries.job_page(queries.filtered_jobs(using(), data), data)
        jobs = page
        if cursor is not None:
            query = request.GET.copy()
            query["after"] = str(cursor)
            next_url = "?" + query.urlencode()
    first_query = request.GET.copy()
    first_query.pop("after", None)
    return render(
        request,
        "django_jobqueue/console/jobs.html",
        context(
            request,
            "Jobs",
            form=form,
            jobs=jobs,
            next_url=next_url,
            first_url="?" + first_query.urlencode(),
            filter_query=first_query.urlencode(),
            page_size=queries.PAGE_SIZE,
        ),
    )


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def _when(value: Any) -> datetime | None:
    """An attempt's ``at`` (ISO text in the errors list) as an aware datetime, if it is one."""
    if isinstance(value, datetime):
        return value
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def timeline(job: Job) -> list[tuple[Any, str]]:
    """Return ``(when, what)`` events of ``job``: created, each attempt, finished.

    In time order; an attempt whose time is unreadable comes first.
    """
    events: list[tuple[Any, str]] = [(job.created_at, "created")]
    for entry in job.errors or []:
        if isinstance(entry, dict):
            events.append(
                (
                    _when(entry.get("at")),
                    f"attempt {entry.get('attempt')} failed: {entry.get('exception_class', '')}",
                )
            )
    if job.started_at:
        events.append((job.started_at, f"attempt {job.attempt} started"))
    if job.finished_at:
        events.append((job.finished_at, f"finished: {job.status}"))
    # Datetimes, not their text: the errors' ISO "T" and str()'s space sort apart.
    earliest = datetime.min.replace(tzinfo=UTC)
    return sorted(events, key=lambda e: e[0] or earliest)


@staff_required()
def job_detail(request: HttpRequest, jid: str) -> HttpResponse:
    """Show one job: payload and result (hidden when secure), attempts, holds, timeline."""
    job = Job.objects.using(using()).filter(jid=jid).first()
    if job is None:
        raise Http404("No such job.")
    return render(
        request,
        "django_jobqueue/console/job.html",
        context(
            request,
            f"Job {job.jid}",
            job=job,
            payload="hidden: the job type is secure" if job.secure else _pretty(job.payload),
            result="hidden: the job type is secure" if job.secure else _pretty(job.result),
            attempts=[e for e in job.errors or [] if isinstance(e, dict)],
            timeline=timeline(job),
            id_held=job.job_id_hash is not None,
            unique_held=job.unique_key_hash is not None,
        ),
    )


@staff_required()
def workers(request: HttpRequest) -> HttpResponse:
    """List live workers and the gone ones the registry still holds."""
    alias = using()
    return render(
        request,
        "django_jobqueue/console/workers.html",
        context(request, "Workers", live=live_workers(alias), gone=gone_workers(alias)),
    )


@staff_required()
def schedules(request: HttpRequest) -> HttpResponse:
    """List schedules with their next run and recent outcomes (payloads not shown)."""
    plans = list(ScheduleJob.objects.using(using()).order_by("name")[:500])
    rows = [(plan, list(reversed((plan.log or [])[-5:]))) for plan in plans]
    return render(
        request,
        "django_jobqueue/console/schedules.html",
        context(request, "Schedules", rows=rows, now=datetime.now(UTC)),
    )

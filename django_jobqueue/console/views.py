"""The console's read-only pages: overview, jobs, a job, workers, schedules, audit log."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from ..models import Job, ScheduleJob
from ..overview import jobs_database
from ..store import audit
from ..store.licence import is_pro
from ..store.states import state_label
from ..store.workerstats import gone_workers, live_workers
from . import queries, story
from .access import PERMISSIONS, staff_required
from .charts import bar_chart

__all__ = ["audit_log", "job_detail", "job_list", "overview", "schedules", "using", "workers"]

DONE_COLOUR = "#417690"
FAILED_COLOUR = "#ba2121"
RETRIED_COLOUR = "#e0a030"
#: Audit rows per page of the audit log.
AUDIT_PAGE = 50
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
            known_queues=queries.known_queues(alias),
        ),
    )


@staff_required()
def job_list(request: HttpRequest) -> HttpResponse:
    """List jobs by filter and search, one keyset page at a time."""
    form = queries.JobFilter(request.GET or None, using=using())
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


@staff_required()
def job_detail(request: HttpRequest, jid: str) -> HttpResponse:
    """Show one job's whole story: who enqueued it, which worker ran it, when it
    started and finished, each failed attempt, every operator action on it, one
    timeline to the millisecond; payload and result (hidden when secure), holds; and
    the actions that apply to it now."""
    job = Job.objects.using(using()).filter(jid=jid).first()
    if job is None:
        raise Http404("No such job.")
    now = timezone.now()
    audit = story.operator_actions(job)
    return render(
        request,
        "django_jobqueue/console/job.html",
        context(
            request,
            f"Job {job.jid}",
            job=job,
            state=state_label(job, now),
            origin=story.origin_text(job.origin),
            claimed=story.claimed_by(job),
            duration=story.duration(job),
            payload="hidden: the job type is secure" if job.secure else _pretty(job.payload),
            result="hidden: the job type is secure" if job.secure else _pretty(job.result),
            attempts=story.attempts_of(job),
            audit=audit,
            timeline=story.timeline(job, audit, now),
            why_waiting=story.why_waiting(job, now),
            actions=story.actions_for(job, now),
            id_held=job.job_id_hash is not None,
            unique_held=job.unique_key_hash is not None,
        ),
    )


@staff_required()
def audit_log(request: HttpRequest) -> HttpResponse:
    """List the operators' actions newest first, one keyset page at a time (no count)."""
    try:
        before = int(request.GET.get("before", ""))
    except ValueError:
        before = None
    rows = audit.audit_page(using(), before=before, limit=AUDIT_PAGE + 1)
    next_url = f"?before={rows[AUDIT_PAGE - 1].pk}" if len(rows) > AUDIT_PAGE else ""
    return render(
        request,
        "django_jobqueue/console/audit.html",
        context(
            request,
            "Audit log",
            # A row on one job links to its page.
            rows=[(row, row.jids if "," not in row.jids else "") for row in rows[:AUDIT_PAGE]],
            next_url=next_url,
            first=before,
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

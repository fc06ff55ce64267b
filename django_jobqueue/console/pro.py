"""The console's Pro pages: 404 without a valid licence (docs/design.md#core-and-pro).

- Unique locks: the jobs holding a unique key, with mode and expiry; release one.
- Dedupe audit: enqueues turned away per (queue, job type) per hour over a day,
  from :class:`~django_jobqueue.models.JobStat` (kept per queue and job type, not
  per key: a key dimension would make the stats table as big as the keys).
- Bulk: retry, cancel or delete every job a filter selects, beyond one page.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from .. import maintenance
from ..models import Job
from ..store.audit import run_audited
from . import queries
from .access import log_action, pro_only, staff_required
from .actions import JOB_ACTIONS, confirm_or_run, console_actor, require_permission
from .charts import bar_chart
from .views import context, using

__all__ = ["BULK_COUNT_LIMIT", "bulk", "dedupe", "locks", "release_lock"]

#: A bulk selection's count stops at this many (a count over a big filter is bounded).
BULK_COUNT_LIMIT = 100_000
COLOURS = ("#417690", "#ba2121", "#5b80b2", "#e0a030", "#6aa84f", "#8e7cc3")


@pro_only
@staff_required()
def locks(request: HttpRequest) -> HttpResponse:
    """List the jobs holding a unique key: key, mode, expiry (up to 200).

    Their ids first, from the ``(queue, unique_key_hash)`` index alone, then their rows:
    MariaDB, asked for the rows at once, read each job's row to test its hash, the
    jobs holding none included (docs/console.md "Speed at a million jobs").
    """
    jobs = Job.objects.using(using())
    ids = list(
        jobs.filter(unique_key_hash__isnull=False)
        .order_by("queue", "unique_key_hash")
        .values_list("pk", flat=True)[:200]
    )
    order = {pk: n for n, pk in enumerate(ids)}
    holders = sorted(
        jobs.filter(pk__in=ids).only(
            "jid",
            "queue",
            "job_type",
            "status",
            "waiting",
            "run_at",
            "unique_key",
            "unique_mode",
            "unique_expires_at",
        ),
        key=lambda job: order[job.pk],
    )
    return render(
        request,
        "django_jobqueue/console/locks.html",
        context(request, "Unique locks", holders=holders),
    )


@pro_only
@require_POST
@staff_required("release")
def release_lock(request: HttpRequest, jid: str) -> HttpResponse:
    """Release the unique key held by job ``jid`` (the job itself is left as it is)."""
    alias = using()
    released = run_audited(
        alias,
        lambda: maintenance.release_unique_keys(Job.objects.using(alias).filter(jid=jid)),
        console_actor(request),
        "release",
        target=f"unique key of job {jid}",
        counts=lambda released: {"released": released},
        jids=[jid],
    )
    if not released:
        raise Http404("That job holds no unique key.")
    log_action(request, Job, f"console: released the unique key of {jid}")
    messages.info(request, f"Released the unique key of {jid}.")
    return HttpResponseRedirect(reverse("django_jobqueue_console:locks"))


@pro_only
@staff_required()
def dedupe(request: HttpRequest) -> HttpResponse:
    """Chart the enqueues turned away per (queue, job type), per hour over a day."""
    labels, per_key = queries.dedupe_series(using())
    series = [
        (f"{queue}/{job_type}", COLOURS[i % len(COLOURS)], values)
        for i, (queue, job_type, values) in enumerate(per_key[:6])
    ]
    chart = bar_chart(labels, series, title="Enqueues turned away per hour") if series else None
    rows = [(queue, job_type, sum(values)) for queue, job_type, values in per_key]
    return render(
        request,
        "django_jobqueue/console/dedupe.html",
        context(request, "Dedupe audit", chart=chart, rows=rows),
    )


@pro_only
@staff_required()
def bulk(request: HttpRequest) -> HttpResponse:
    """Act on every job a filter selects: count first, confirm, then in batches."""
    source = request.POST if request.method == "POST" else request.GET
    form = queries.JobFilter(source)
    if not form.is_valid():
        return render(
            request, "django_jobqueue/console/bulk.html", context(request, "Bulk", form=form)
        )
    data = {k: v for k, v in form.cleaned_data.items() if k not in ("after", "sort")}
    action = source.get("action", "")
    if request.method != "POST" or action not in JOB_ACTIONS:
        return render(
            request, "django_jobqueue/console/bulk.html", context(request, "Bulk", form=form)
        )
    require_permission(request, action)
    jobs = queries.filtered_jobs(using(), data)
    count = jobs.order_by()[: BULK_COUNT_LIMIT + 1].count()
    hidden = [
        ("action", action),
        *((k, str(v)) for k, v in source.items() if k in form.fields and v),
    ]
    hidden = [
        (k, v) for k, v in hidden if k not in ("after", "sort", "confirm", "csrfmiddlewaretoken")
    ]
    described = ", ".join(f"{k}={v}" for k, v in sorted(data.items()) if v) or "every job"
    return confirm_or_run(
        request, jobs, action, count=count, hidden=hidden, target=f"jobs matching {described}"
    )

"""The console's actions: retry, cancel, delete (one job or a selection), pause and
resume a queue, enable, disable and run a schedule. POST only, CSRF-checked, each
behind its own permission, each written to Django's admin log."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.admin.models import CHANGE, DELETION
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from .. import maintenance, schedules
from ..core.exceptions import InvalidOption
from ..models import Job, QueuePause, ScheduleJob
from ..store import pauses
from . import queries
from .access import PERMISSIONS, log_action, staff_required
from .views import context, using

__all__ = [
    "BATCH_SIZE",
    "JOB_ACTIONS",
    "confirm_or_run",
    "require_permission",
    "job_action",
    "queue_action",
    "run_in_batches",
    "schedule_action",
    "selection",
]

#: Jobs per statement of an action on a selection.
BATCH_SIZE = 500

JOB_ACTIONS: dict[str, Callable[[QuerySet[Job]], Any]] = {
    "retry": maintenance.retry_jobs,
    "cancel": maintenance.cancel_jobs,
    "delete": lambda jobs: maintenance.delete_jobs(jobs, batch_size=BATCH_SIZE),
}


def require_permission(request: HttpRequest, action: str) -> None:
    """Raise PermissionDenied unless the user holds the permission of ``action``."""
    if not request.user.has_perm(PERMISSIONS[action]):
        raise PermissionDenied(f"This needs the {PERMISSIONS[action]} permission.")


def run_in_batches(
    jobs: QuerySet[Job], action: str, *, batch_size: int = BATCH_SIZE
) -> dict[str, int]:
    """Apply ``action`` (retry, cancel, delete) to ``jobs``, ``batch_size`` at a time.

    Walks the primary keys in order (keyset), so no statement ever names more than
    ``batch_size`` jobs; returns the summed counts of the maintenance function.
    """
    work = JOB_ACTIONS[action]
    totals: dict[str, int] = {}
    last = 0
    while True:
        pks = list(
            jobs.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:batch_size]
        )
        if not pks:
            return totals
        outcome = work(Job.objects.using(jobs.db).filter(pk__in=pks))
        for key, number in dataclasses.asdict(outcome).items():
            totals[key] = totals.get(key, 0) + number
        last = pks[-1]


def _summary(totals: dict[str, int]) -> str:
    return ", ".join(f"{key} {number}" for key, number in sorted(totals.items())) or "nothing"


@require_POST
@staff_required()
def job_action(request: HttpRequest, jid: str, action: str) -> HttpResponse:
    """Retry, cancel or delete the job ``jid``; back to its page (or the list)."""
    if action not in JOB_ACTIONS:
        raise Http404("No such action.")
    require_permission(request, action)
    jobs = Job.objects.using(using()).filter(jid=jid)
    job = jobs.first()
    if job is None:
        raise Http404("No such job.")
    totals = run_in_batches(jobs, action)
    log_action(
        request,
        Job,
        f"console: {action} ({_summary(totals)})",
        obj=job,
        flag=DELETION if action == "delete" else CHANGE,
    )
    messages.info(request, f"{action}: {_summary(totals)}")
    if action == "delete" and totals.get("deleted"):
        return HttpResponseRedirect(reverse("django_jobqueue_console:jobs"))
    return HttpResponseRedirect(reverse("django_jobqueue_console:job", args=[jid]))


def confirm_or_run(
    request: HttpRequest,
    jobs: QuerySet[Job],
    action: str,
    *,
    count: int,
    hidden: list[tuple[str, str]],
) -> HttpResponse:
    """Show the selection's count and a confirm form; with ``confirm`` set, run it."""
    if request.POST.get("confirm") != "yes":
        return render(
            request,
            "django_jobqueue/console/confirm.html",
            context(request, f"Confirm {action}", action=action, count=count, hidden=hidden),
        )
    totals = run_in_batches(jobs, action)
    log_action(
        request,
        Job,
        f"console: {action} on a selection of {count} ({_summary(totals)})",
        flag=DELETION if action == "delete" else CHANGE,
    )
    messages.info(request, f"{action} on {count} jobs: {_summary(totals)}")
    return HttpResponseRedirect(reverse("django_jobqueue_console:jobs"))


@require_POST
@staff_required()
def selection(request: HttpRequest) -> HttpResponse:
    """Retry, cancel or delete the jobs ticked on one page (at most one page of them)."""
    action = request.POST.get("action", "")
    if action not in JOB_ACTIONS:
        messages.error(request, "Choose an action.")
        return HttpResponseRedirect(reverse("django_jobqueue_console:jobs"))
    require_permission(request, action)
    try:
        pks = sorted({int(pk) for pk in request.POST.getlist("pk")})
    except ValueError:
        pks = []
    if not pks or len(pks) > queries.PAGE_SIZE:
        messages.error(request, f"Tick 1 to {queries.PAGE_SIZE} jobs.")
        return HttpResponseRedirect(reverse("django_jobqueue_console:jobs"))
    jobs = Job.objects.using(using()).filter(pk__in=pks)
    hidden = [("action", action), *(("pk", str(pk)) for pk in pks)]
    return confirm_or_run(request, jobs, action, count=jobs.count(), hidden=hidden)


@require_POST
@staff_required("pause")
def queue_action(request: HttpRequest, queue: str, action: str) -> HttpResponse:
    """Pause or resume ``queue``."""
    try:
        if action == "pause":
            changed = pauses.pause_queue(using(), queue, by=request.user.get_username())
        elif action == "resume":
            changed = pauses.resume_queue(using(), queue)
        else:
            raise Http404("No such action.")
    except InvalidOption as exc:
        raise Http404(str(exc)) from exc
    log_action(request, QueuePause, f"console: {action} queue {queue} (changed: {changed})")
    messages.info(request, f"Queue {queue}: {action}d" if changed else f"Queue {queue}: no change")
    return HttpResponseRedirect(reverse("django_jobqueue_console:overview"))


@require_POST
@staff_required("schedule")
def schedule_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """Enable, disable or run now the schedule ``name``."""
    alias = using()
    plan = ScheduleJob.objects.using(alias).filter(name=name).first()
    if plan is None:
        raise Http404("No such schedule.")
    if action in ("enable", "disable"):
        done = f"changed {schedules.set_enabled(alias, [name], enabled=action == 'enable')}"
    elif action == "run":
        done = f"job {schedules.run_now(alias, name)}"
    else:
        raise Http404("No such action.")
    log_action(request, ScheduleJob, f"console: {action} ({done})", obj=plan)
    messages.info(request, f"Schedule {name}: {action}, {done}")
    return HttpResponseRedirect(reverse("django_jobqueue_console:schedules"))

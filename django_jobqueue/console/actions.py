"""The console's actions: retry, cancel, delete (one job or a selection), pause and
resume a queue, enable, disable and run a schedule. POST only, CSRF-checked, each
behind its own permission, each written to the audit log in its own transaction
(:mod:`django_jobqueue.store.audit`) and to Django's admin log. What an action did
is told in one sentence ("Retried 1 dead job.")."""

from __future__ import annotations

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

from .. import operations, schedules
from ..core.exceptions import InvalidOption
from ..models import Job, QueuePause, ScheduleJob
from ..store import pauses
from ..store.audit import Actor, run_audited
from . import queries
from .access import PERMISSIONS, log_action, staff_required
from .views import context, using

__all__ = [
    "BATCH_SIZE",
    "JOB_ACTIONS",
    "confirm_or_run",
    "console_actor",
    "sentence",
    "require_permission",
    "job_action",
    "pause_named",
    "queue_action",
    "run_in_batches",
    "schedule_action",
    "selection",
]

#: Jobs per statement of an action on a selection.
BATCH_SIZE = 500

#: The job actions of the console (each runs :data:`operations.OPERATOR_ACTIONS`).
JOB_ACTIONS: dict[str, Callable[[QuerySet[Job]], Any]] = operations.OPERATOR_ACTIONS


def require_permission(request: HttpRequest, action: str) -> None:
    """Raise PermissionDenied unless the user holds the permission of ``action``."""
    if not request.user.has_perm(PERMISSIONS[action]):
        raise PermissionDenied(f"This needs the {PERMISSIONS[action]} permission.")


def console_actor(request: HttpRequest) -> Actor:
    """Return who acts in the console: ``console`` and the user name."""
    return Actor("console", request.user.get_username())


def run_in_batches(
    jobs: QuerySet[Job],
    action: str,
    *,
    actor: Actor,
    target: str,
    batch_size: int | None = None,
) -> dict[str, int]:
    """Apply ``action`` (retry, cancel, delete) to ``jobs`` in audited batches of
    :data:`BATCH_SIZE`; see :func:`django_jobqueue.operations.act_in_batches`."""
    return operations.act_in_batches(
        jobs, action, actor, target=target, batch_size=batch_size or BATCH_SIZE
    )


def _jobs(count: int, kind: str = "") -> str:
    """``1 dead job``, ``3 jobs``."""
    words = f"{kind} job" if kind else "job"
    return f"{count} {words}" if count == 1 else f"{count} {words}s"


def sentence(action: str, totals: dict[str, int]) -> str:
    """Return what an action did as one sentence: ``Retried 1 dead job.``

    Parameters
    ----------
    action
        retry, cancel or delete.
    totals
        The counts of :func:`run_in_batches`.
    """
    if action == "retry":
        dead, waiting = totals.get("dead", 0), totals.get("waiting", 0)
        parts = []
        if dead:
            parts.append(f"retried {_jobs(dead, 'dead')}")
        if waiting:
            parts.append(f"made {_jobs(waiting, 'scheduled')} due now")
        if not parts:
            return "Nothing was retried: only dead and scheduled jobs can be."
    elif action == "cancel":
        cancelled, requested = totals.get("cancelled", 0), totals.get("requested", 0)
        parts = []
        if cancelled:
            parts.append(f"cancelled {_jobs(cancelled, 'waiting')}")
        if requested:
            parts.append(f"asked the workers of {_jobs(requested, 'running')} to stop")
        if not parts:
            return "Nothing was cancelled: only waiting and running jobs can be."
    else:
        deleted, running = totals.get("deleted", 0), totals.get("running", 0)
        parts = [f"deleted {_jobs(deleted)}"]
        if running:
            parts.append(f"kept {_jobs(running, 'running')} (cancel them first)")
    text = " and ".join(parts)
    return text[0].upper() + text[1:] + "."


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
    totals = run_in_batches(jobs, action, actor=console_actor(request), target=f"job {jid}")
    log_action(
        request,
        Job,
        f"console: {action} ({_summary(totals)})",
        obj=job,
        flag=DELETION if action == "delete" else CHANGE,
    )
    changed = sum(number for key, number in totals.items() if key != "running")
    (messages.success if changed else messages.warning)(request, sentence(action, totals))
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
    target: str = "",
) -> HttpResponse:
    """Show the selection's count and a confirm form; with ``confirm`` set, run it."""
    if request.POST.get("confirm") != "yes":
        return render(
            request,
            "django_jobqueue/console/confirm.html",
            context(request, f"Confirm {action}", action=action, count=count, hidden=hidden),
        )
    totals = run_in_batches(
        jobs, action, actor=console_actor(request), target=target or f"a selection of {count}"
    )
    log_action(
        request,
        Job,
        f"console: {action} on a selection of {count} ({_summary(totals)})",
        flag=DELETION if action == "delete" else CHANGE,
    )
    changed = sum(number for key, number in totals.items() if key != "running")
    (messages.success if changed else messages.warning)(request, sentence(action, totals))
    return HttpResponseRedirect(reverse("django_jobqueue_console:jobs"))


#: The largest primary key a job can have (a signed 64-bit BigAutoField).
_MAX_PK = 2**63 - 1


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
    if any(not 1 <= pk <= _MAX_PK for pk in pks):
        pks = []  # no row has it (SQLite cannot even bind one past 64 bits)
    if not pks or len(pks) > queries.PAGE_SIZE:
        messages.error(request, f"Tick 1 to {queries.PAGE_SIZE} jobs.")
        return HttpResponseRedirect(reverse("django_jobqueue_console:jobs"))
    jobs = Job.objects.using(using()).filter(pk__in=pks)
    hidden = [("action", action), *(("pk", str(pk)) for pk in pks)]
    return confirm_or_run(request, jobs, action, count=jobs.count(), hidden=hidden)


@require_POST
@staff_required("pause")
def queue_action(request: HttpRequest, queue: str, action: str) -> HttpResponse:
    """Pause or resume ``queue``; a queue need not have jobs to be paused."""
    if action not in ("pause", "resume"):
        raise Http404("No such action.")
    return _pause_or_resume(request, queue, action)


@require_POST
@staff_required("pause")
def pause_named(request: HttpRequest) -> HttpResponse:
    """Pause the queue named by the form's ``queue`` field (the overview's "Pause a
    queue" form): a queue with no jobs yet, not listed on the overview."""
    return _pause_or_resume(request, request.POST.get("queue", ""), "pause")


def _pause_or_resume(request: HttpRequest, queue: str, action: str) -> HttpResponse:
    alias = using()
    actor = console_actor(request)
    try:
        if action == "pause":
            changed = run_audited(
                alias,
                lambda: pauses.pause_queue(alias, queue, by=request.user.get_username()),
                actor,
                "pause",
                target=f"queue {queue}",
                counts=lambda changed: {"changed": int(changed)},
            )
        else:
            changed = run_audited(
                alias,
                lambda: pauses.resume_queue(alias, queue),
                actor,
                "resume",
                target=f"queue {queue}",
                counts=lambda changed: {"changed": int(changed)},
            )
    except InvalidOption as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(reverse("django_jobqueue_console:overview"))
    log_action(request, QueuePause, f"console: {action} queue {queue} (changed: {changed})")
    if action == "pause":
        text = f"Paused queue {queue}." if changed else f"Queue {queue} was already paused."
    else:
        text = f"Resumed queue {queue}." if changed else f"Queue {queue} was not paused."
    (messages.success if changed else messages.info)(request, text)
    return HttpResponseRedirect(reverse("django_jobqueue_console:overview"))


@require_POST
@staff_required("schedule")
def schedule_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """Enable, disable or run now the schedule ``name``."""
    alias = using()
    plan = ScheduleJob.objects.using(alias).filter(name=name).first()
    if plan is None:
        raise Http404("No such schedule.")
    actor = console_actor(request)
    if action in ("enable", "disable"):
        changed = run_audited(
            alias,
            lambda: schedules.set_enabled(alias, [name], enabled=action == "enable"),
            actor,
            action,
            target=f"schedule {name}",
            counts=lambda changed: {"changed": changed},
        )
        done = f"changed {changed}"
        text = (
            f"{action.capitalize()}d schedule {name}."
            if changed
            else f"Schedule {name} was already {action}d."
        )
    elif action == "run":
        jid = run_audited(
            alias,
            lambda: schedules.run_now(alias, name),
            actor,
            "run",
            target=f"schedule {name}",
            counts=lambda jid: {"enqueued": 1},
        )
        done = f"job {jid}"
        text = f"Ran schedule {name} now: job {jid}."
    else:
        raise Http404("No such action.")
    log_action(request, ScheduleJob, f"console: {action} ({done})", obj=plan)
    messages.success(request, text)
    return HttpResponseRedirect(reverse("django_jobqueue_console:schedules"))

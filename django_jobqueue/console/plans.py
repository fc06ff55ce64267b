"""The console's schedule pages: a plan (preview, history, edit, delete) and a new plan.

A plan's page (``schedule/<name>``) shows its next :data:`~django_jobqueue.schedules.
editing.PREVIEW_SIZE` runs, its run history (the jobs it made, newest first, at most
:data:`~django_jobqueue.schedules.editing.HISTORY_SIZE`) and, to users holding the
schedule permission, a form to change its cron, time zone, payload and queue, and a
delete button. A plan declared in code or settings shows no form: it says where it
is declared and offers pause only. A bad cron, time zone, queue or payload comes back
as the form's error naming the value (status 400), never a 500. Each change writes
its audit row in its own transaction (:mod:`django_jobqueue.schedules.editing`).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin.models import ADDITION, DELETION
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse

from .. import schedules
from ..core.exceptions import DuplicateJob, InvalidRequest
from ..models import ScheduleJob
from ..schedules.editing import HISTORY_SIZE, DeclaredPlan, refuse_declared
from ..schedules.plans import DECLARED_SOURCES, validate_plan_name
from ..store.registry import registered_job_types
from .access import PERMISSIONS, log_action, staff_required
from .actions import console_actor
from .views import context, using

__all__ = ["NewPlanForm", "PlanForm", "schedule_detail", "schedule_new"]


def _check(validate: Any, value: Any) -> Any:
    try:
        return validate(value)
    except InvalidRequest as exc:
        raise forms.ValidationError(str(exc)) from exc


class PlanForm(forms.Form):
    """The editable fields of a plan made at run time."""

    cron = forms.CharField(max_length=200, help_text="Such as 0 3 * * * (five fields).")
    timezone = forms.CharField(max_length=64, initial="UTC", help_text="Such as Europe/Paris.")
    queue = forms.CharField(max_length=100, required=False, help_text="Empty: the job type's.")
    payload = forms.JSONField(required=False, help_text="JSON; empty: null.")

    def clean_cron(self) -> str:
        return str(_check(schedules.validate_cron, self.cleaned_data["cron"]))

    def clean_timezone(self) -> str:
        return str(_check(schedules.validate_timezone, self.cleaned_data["timezone"]))


class NewPlanForm(PlanForm):
    """A new cron plan: its name and job type, then the editable fields."""

    name = forms.CharField(max_length=200)
    job_type = forms.ChoiceField(choices=())

    field_order = ["name", "job_type", "cron", "timezone", "queue", "payload"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = sorted(registered_job_types())
        self.fields["job_type"].choices = [(name, name) for name in names]  # type: ignore[attr-defined]

    def clean_name(self) -> str:
        return str(_check(validate_plan_name, self.cleaned_data["name"]))


def _secure(plan: ScheduleJob) -> bool:
    """Whether the plan's job type hides its payload (``secure``): never shown or edited here."""
    description = registered_job_types().get(plan.job_type)
    return bool(getattr(description, "secure", False))


def _plan_form(plan: ScheduleJob, data: Any = None) -> PlanForm:
    form = PlanForm(
        data,
        initial={
            "cron": plan.cron,
            "timezone": plan.timezone,
            "queue": plan.queue,
            "payload": plan.payload,
        },
    )
    if _secure(plan):
        del form.fields["payload"]
    return form


def _may_change(request: HttpRequest) -> None:
    if not request.user.has_perm(PERMISSIONS["schedule"]):
        raise PermissionDenied(f"This needs the {PERMISSIONS['schedule']} permission.")


def _page(
    request: HttpRequest,
    plan: ScheduleJob,
    form: PlanForm | None,
    *,
    status: int = 200,
    error: str = "",
) -> HttpResponse:
    alias = using()
    declared = plan.source in DECLARED_SOURCES
    if form is None and not declared:
        form = _plan_form(plan)
    preview = schedules.preview_runs(plan.cron, plan.timezone) if plan.cron else []
    return render(
        request,
        "django_jobqueue/console/schedule.html",
        context(
            request,
            f"Schedule {plan.name}",
            plan=plan,
            form=form if plan.cron and not declared else None,
            declared=declared,
            preview=preview,
            history=schedules.plan_history(alias, plan.name),
            history_size=HISTORY_SIZE,
            error=error,
        ),
        status=status,
    )


@staff_required()
def schedule_detail(request: HttpRequest, name: str) -> HttpResponse:
    """Show plan ``name``; POST ``action=save`` edits it, ``action=delete`` deletes it."""
    alias = using()
    plan = ScheduleJob.objects.using(alias).filter(name=name).first()
    if plan is None:
        raise Http404("No such schedule.")
    if request.method != "POST":
        return _page(request, plan, None)
    _may_change(request)
    actor = console_actor(request)
    if request.POST.get("action") == "delete":
        try:
            schedules.delete_plan(alias, name, actor=actor)
        except ScheduleJob.DoesNotExist as exc:
            raise Http404("No such schedule.") from exc
        except InvalidRequest as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(reverse("django_jobqueue_console:schedule", args=[name]))
        log_action(request, ScheduleJob, f"console: delete schedule {name}", flag=DELETION)
        messages.success(request, f"Deleted schedule {name}; the jobs it made stay.")
        return HttpResponseRedirect(reverse("django_jobqueue_console:schedules"))
    if plan.source in DECLARED_SOURCES:
        try:
            refuse_declared(plan, "edited")
        except DeclaredPlan as exc:
            return _page(request, plan, None, status=400, error=str(exc))
    if not plan.cron:
        error = f"Schedule {name} runs once: only cron plans are edited here."
        return _page(request, plan, None, status=400, error=error)
    form = _plan_form(plan, request.POST)
    if not form.is_valid():
        return _page(request, plan, form, status=400)
    try:
        diff = schedules.edit_plan(
            alias,
            name,
            actor=actor,
            cron=form.cleaned_data["cron"],
            timezone=form.cleaned_data["timezone"],
            queue=form.cleaned_data["queue"] or None,
            payload=form.cleaned_data.get("payload", plan.payload),
        )
    except ScheduleJob.DoesNotExist as exc:
        raise Http404("No such schedule.") from exc
    except InvalidRequest as exc:
        form.add_error(None, str(exc))
        return _page(request, plan, form, status=400)
    log_action(request, ScheduleJob, f"console: edit ({', '.join(diff) or 'no change'})", obj=plan)
    if diff:
        messages.success(request, f"Saved schedule {name}: {', '.join(diff)} changed.")
    else:
        messages.info(request, f"Schedule {name} was unchanged.")
    return HttpResponseRedirect(reverse("django_jobqueue_console:schedule", args=[name]))


@staff_required("schedule")
def schedule_new(request: HttpRequest) -> HttpResponse:
    """A form for a new cron plan; POST creates it (audited) and opens its page."""
    form = NewPlanForm(request.POST or None, initial={"timezone": "UTC"})
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            data = form.cleaned_data
            try:
                plan = schedules.create_cron_plan(
                    using(),
                    data["name"],
                    data["job_type"],
                    cron=data["cron"],
                    tz_name=data["timezone"],
                    payload=data["payload"],
                    queue=data["queue"] or None,
                    actor=console_actor(request),
                )
            except (InvalidRequest, DuplicateJob) as exc:
                form.add_error(None, str(exc))
            else:
                log_action(request, ScheduleJob, "console: create", obj=plan, flag=ADDITION)
                messages.success(request, f"Created schedule {plan.name}.")
                return HttpResponseRedirect(
                    reverse("django_jobqueue_console:schedule", args=[plan.name])
                )
    return render(
        request,
        "django_jobqueue/console/schedule_new.html",
        context(request, "New schedule", form=form),
        status=status,
    )

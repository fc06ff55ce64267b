"""The "Retry now" and "Cancel" buttons of a job's admin page, and their confirmations.

Each button asks "Are you sure?" (GET), then calls the same
:mod:`~django_jobqueue.operations` function as the changelist's action (POST),
audited, and leaves an admin ``LogEntry`` when it changed the job.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..models import Job, JobStatus
from ..operations import act_in_batches
from ..store.audit import Actor

__all__ = ["JobButtons", "admin_actor"]


def admin_actor(request: HttpRequest) -> Actor:
    """Return who acts in the admin: ``admin`` and the user name."""
    return Actor("admin", request.user.get_username())


#: The texts of a job page's buttons and their confirmation pages.
_JOB_ACTIONS: dict[str, dict[str, Any]] = {
    "retry": {
        "button": _("Retry now"),
        "title": _("Retry the job now?"),
        "question": _("The job will be due now instead of at its run time."),
        "question_dead": _("The job will run again from attempt 1, due now."),
        "confirm": _("Yes, retry now"),
        "stale": _("The job cannot be retried now: it is no longer waiting or dead."),
    },
    "cancel": {
        "button": _("Cancel"),
        "title": _("Cancel the job?"),
        "question": _(
            "A waiting job is cancelled and will not run; the worker of a running job is "
            "asked to stop it."
        ),
        "question_dead": "",
        "confirm": _("Yes, cancel the job"),
        "stale": _("The job cannot be cancelled: it has finished or was asked to stop."),
    },
}


class JobButtons(admin.ModelAdmin):
    """The buttons of a job's page; :class:`~django_jobqueue.admin.jobs.JobAdmin` is one."""

    def get_urls(self) -> list[URLPattern]:
        """Add the confirmations of a job's "Retry now" and "Cancel" buttons.

        They come before the admin's own URLs, whose ``<object_id>/`` catch-all
        would take them otherwise.
        """
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path(
                "<path:object_id>/retry/",
                self.admin_site.admin_view(self.retry_view),
                name=f"{info}_retry",
            ),
            path(
                "<path:object_id>/cancel/",
                self.admin_site.admin_view(self.cancel_view),
                name=f"{info}_cancel",
            ),
            *super().get_urls(),
        ]

    def job_buttons(self, request: HttpRequest, obj: Job) -> list[str]:
        """Return the buttons of ``obj``'s page: a sublist of ``["retry", "cancel"]``.

        Both need the permission of the changelist actions (change). "retry" applies
        to a dead letter and to a job waiting for a later ``run_at``; "cancel" to a
        waiting job and to a running one not yet asked to stop: the jobs that
        :func:`~django_jobqueue.maintenance.retry_jobs` and
        :func:`~django_jobqueue.maintenance.cancel_jobs` change.
        """
        if not self.has_change_permission(request):
            return []
        buttons = []
        if obj.is_dead or (obj.waiting and obj.run_at > timezone.now()):
            buttons.append("retry")
        if obj.waiting or (obj.status == JobStatus.PROCESSING and not obj.cancel_requested):
            buttons.append("cancel")
        return buttons

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,  # noqa: FBT001, FBT002 (Django's signature)
        change: bool = False,  # noqa: FBT001, FBT002 (Django's signature)
        form_url: str = "",
        obj: Job | None = None,
    ) -> HttpResponse:
        """Render a job's page with the buttons that apply to it."""
        if obj is not None:
            context["job_buttons"] = [
                {
                    "name": name,
                    "label": _JOB_ACTIONS[name]["button"],
                    "url": self._job_url(name, obj),
                }
                for name in self.job_buttons(request, obj)
            ]
        return super().render_change_form(request, context, add, change, form_url, obj)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET), then retry one job now (POST); see :meth:`job_action_view`."""
        return self.job_action_view(request, object_id, "retry")

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Confirm (GET), then cancel one job (POST); see :meth:`job_action_view`."""
        return self.job_action_view(request, object_id, "cancel")

    def job_action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        """Ask "Are you sure?" (GET), then run ``action`` on the job (POST).

        Parameters
        ----------
        request
            A GET shows the confirmation page; a POST (with Django's CSRF token)
            calls :func:`~django_jobqueue.maintenance.retry_jobs` or
            :func:`~django_jobqueue.maintenance.cancel_jobs` on this one job, logs
            an admin ``LogEntry`` when it changed the job, and redirects to the
            job's page.
        object_id
            The job's primary key, as in the admin's URLs.
        action
            ``"retry"`` or ``"cancel"``.

        Raises
        ------
        PermissionDenied
            The user lacks the change permission (HTTP 403).
        """
        if not self.has_change_permission(request):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            self.message_user(
                request, _("No job with key %(key)s.") % {"key": object_id}, messages.WARNING
            )
            return HttpResponseRedirect(self._job_url("changelist"))
        texts = _JOB_ACTIONS[action]
        if action not in self.job_buttons(request, obj):
            self.message_user(request, texts["stale"], messages.WARNING)
            return HttpResponseRedirect(self._job_url("change", obj))
        if request.method == "POST":
            self._run_job_action(request, obj, action)
            return HttpResponseRedirect(self._job_url("change", obj))
        request.current_app = self.admin_site.name
        context = {
            **self.admin_site.each_context(request),
            "title": texts["title"],
            "opts": self.opts,
            "object": obj,
            "action": action,
            "question": texts["question_dead" if obj.is_dead else "question"],
            "button": texts["confirm"],
        }
        return TemplateResponse(request, "django_jobqueue/admin/job_confirm_action.html", context)

    def _run_job_action(self, request: HttpRequest, obj: Job, action: str) -> None:
        """Run ``action`` on ``obj`` (audited), tell the user, log it."""
        jobs = self.get_queryset(request).filter(pk=obj.pk)
        counts = act_in_batches(jobs, action, admin_actor(request), target=f"job {obj.jid}")
        if action == "retry":
            changed = counts.get("dead", 0) + counts.get("waiting", 0)
            text = _("Retried now: runs again from attempt 1.") if counts.get("dead") else None
            text = text or _("Retried now: due now.")
        else:
            changed = counts.get("cancelled", 0) + counts.get("requested", 0)
            text = (
                _("Cancelled: it will not run.")
                if counts.get("cancelled")
                else _("Cancel requested: its worker is asked to stop it.")
            )
        if not changed:
            self.message_user(request, _JOB_ACTIONS[action]["stale"], messages.WARNING)
            return
        self.log_change(request, obj, str(text))
        self.message_user(request, text, messages.SUCCESS)

    def _job_url(self, name: str, obj: Job | None = None) -> str:
        """Return the admin URL ``name`` (changelist, change, retry, cancel) of ``obj``."""
        args = [] if obj is None else [quote(obj.pk)]
        return reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}",
            args=args,
            current_app=self.admin_site.name,
        )

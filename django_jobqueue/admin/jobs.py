"""The Django admin of jobs: the changelist and a job's page (its buttons: ``jobbuttons``).

Jobs are read-only: the admin shows them and acts on them (retry now, cancel,
delete) through :mod:`django_jobqueue.operations`: the
:mod:`~django_jobqueue.maintenance` functions that ``manage.py jobqueue`` uses too,
each batch written to the audit log. As changelist actions, and as buttons on a
job's page (retry now, cancel) that ask for confirmation and leave an admin log
entry.
A job's page shows only the sections that apply to it (no id section without an
id, no unique key section without a key).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..enqueue import jobs_database
from ..models import Job, JobStatus
from ..operations import act_in_batches
from ..store.states import state_label
from .changelist import (
    BatchFilter,
    EstimatedCountPaginator,
    JobTypeFilter,
    QueueFilter,
    StatusFilter,
    UniqueKeyHeldFilter,
    WorkflowFilter,
)
from .display import error_time, hidden, pretty, time_display
from .jobbuttons import JobButtons, admin_actor

__all__ = ["JobAdmin"]

#: What a jid looks like (uuid4 hex).
_JID = re.compile(r"[0-9a-f]{32}")


#: A job's page, section by section, before :meth:`JobAdmin.get_fieldsets` drops
#: what does not apply to the job shown. Times use the ``*_display`` methods.
JOB_FIELDSETS: Any = (
    (
        None,
        {
            "fields": (
                "jid",
                "queue",
                "job_type",
                "state_display",
                "priority",
                ("attempt", "max_retry"),
                "timeout_ms",
                "secure",
                "message_display",
            )
        },
    ),
    (
        _("Times"),
        {
            "fields": (
                "created_at_display",
                "run_at_display",
                "started_at_display",
                "finished_at_display",
                "updated_at_display",
                "expires_at_display",
            )
        },
    ),
    (_("Payload and result"), {"fields": ("payload_display", "result_display")}),
    (_("Failed attempts"), {"fields": ("errors_display",)}),
    (
        _("Lease"),
        {
            "fields": (
                "lease_owner",
                "lease_expires_at_display",
                "heartbeat_at_display",
                "cancel_requested",
            )
        },
    ),
    (
        _("Id"),
        {
            "fields": (
                "job_id",
                "id_held",
                "id_held_until_display",
                "rerun",
                "rerun_at_display",
                "rerun_display",
            )
        },
    ),
    (
        _("Unique key"),
        {
            "fields": (
                "unique_key",
                "unique_mode",
                "unique_expires_at_display",
                "unique_key_held",
            )
        },
    ),
)

#: Fields of a job's page left out when empty: a time that has not happened, a
#: next run nobody asked for.
_OPTIONAL_FIELDS = {
    "started_at_display": "started_at",
    "finished_at_display": "finished_at",
    "expires_at_display": "expires_at",
    "id_held_until_display": "id_held_until",
    "rerun_at_display": "rerun_at",
    "rerun_display": "rerun",
}


#: The sections of a job's page shown only to some jobs, by their first field.
_SECTION_APPLIES: dict[str, Callable[[Job], bool]] = {
    "errors_display": lambda job: bool(job.errors),
    "lease_owner": lambda job: bool(
        job.lease_owner or job.lease_expires_at or job.heartbeat_at or job.cancel_requested
    ),
    "job_id": lambda job: job.job_id is not None,
    "unique_key": lambda job: job.unique_key is not None,
}


def _flat(fields: Iterable[Any]) -> list[str]:
    return [name for entry in fields for name in (entry if isinstance(entry, tuple) else (entry,))]


#: The audit log's target of a changelist action.
_SELECTED = "jobs selected in the admin"


def _dotted(obj: Job) -> list[str]:
    """Split the job type after each dot, the dots kept: ``["newsletter.", "welcome"]``."""
    parts = obj.job_type.split(".")
    return [part + "." for part in parts[:-1]] + parts[-1:]


@admin.register(Job)
class JobAdmin(JobButtons):
    """Jobs: read-only, with actions to retry now, cancel and delete.

    A job's page has "Retry now" and "Cancel" buttons when they apply to the job
    and the user may run the changelist actions (the change permission); each asks
    for confirmation, then calls the same :mod:`~django_jobqueue.maintenance`
    function as the action and logs an admin ``LogEntry``.
    """

    #: Fits a 1,280 px window with both sidebars open: the jid's first 8 characters,
    #: one time (run at: when it ran, or is due); the rest is on the job's page.
    list_display = (
        "short_jid",
        "job_type_list",
        "queue",
        "state_list",
        "attempt",
        "run_at_list",
    )
    list_filter = (
        StatusFilter,
        QueueFilter,
        JobTypeFilter,
        UniqueKeyHeldFilter,
        BatchFilter,
        WorkflowFilter,
    )
    search_fields = ("jid", "job_id")
    search_help_text = _("An exact jid or job id.")
    #: Newest first, by the primary key's index; no column sorts (each would sort the
    #: whole table: 1.3 s over a million jobs for run_at).
    ordering = ("-pk",)
    sortable_by = ()
    list_per_page = 100
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    paginator = EstimatedCountPaginator
    actions = ("retry_now", "cancel", "delete_jobs")
    fieldsets = JOB_FIELDSETS
    change_form_template = "django_jobqueue/admin/job_change_form.html"

    class Media:
        css = {"all": ("django_jobqueue/admin/jobs.css",)}

    run_at_list = time_display("run_at", stacked=True)
    created_at_display = time_display("created_at")
    run_at_display = time_display("run_at")
    started_at_display = time_display("started_at")
    finished_at_display = time_display("finished_at")
    updated_at_display = time_display("updated_at")
    expires_at_display = time_display("expires_at")
    lease_expires_at_display = time_display("lease_expires_at")
    heartbeat_at_display = time_display("heartbeat_at")
    id_held_until_display = time_display("id_held_until")
    rerun_at_display = time_display("rerun_at")
    unique_expires_at_display = time_display("unique_expires_at")

    @admin.display(description=_("jid"))
    def short_jid(self, obj: Job) -> SafeString:
        """The jid's first 8 characters (the full jid in the tooltip and on the page)."""
        return format_html('<span title="{}">{}…</span>', obj.jid, obj.jid[:8])

    @admin.display(description=_("job type"))
    def job_type_list(self, obj: Job) -> SafeString:
        """The job type, breakable after each dot so a long dotted path wraps."""
        return format_html_join(mark_safe("<wbr>"), "{}", ((part,) for part in _dotted(obj)))

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> list[Any]:
        """Return the sections of :data:`JOB_FIELDSETS` that apply to ``obj``.

        No failed attempts section without errors, no lease section for a job never
        leased, no id section without an id, no unique key section without a key;
        times that have not happened and an unrequested next run are left out.
        """
        if obj is None:
            return list(self.fieldsets)
        sections = []
        for title, options in self.fieldsets:
            applies = _SECTION_APPLIES.get(options["fields"][0])
            if applies is not None and not applies(obj):
                continue
            fields = tuple(
                entry
                for entry in options["fields"]
                if entry not in _OPTIONAL_FIELDS or getattr(obj, _OPTIONAL_FIELDS[entry])
            )
            sections.append((title, {**options, "fields": fields}))
        return sections

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        """Every field shown is read-only."""
        return [name for _title, options in self.fieldsets for name in _flat(options["fields"])]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        """Jobs on the jobs' database."""
        return super().get_queryset(request).using(jobs_database())

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[Any]:
        """A changelist that does not load payloads, results and tracebacks."""
        base = super().get_changelist(request, **kwargs)

        class JobChangeList(base):  # type: ignore[misc, valid-type]
            def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
                queryset = super().get_queryset(request, exclude_parameters)
                return queryset.defer("payload", "result", "errors", "rerun_payload")

        return JobChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """Match a jid, else a job id, exactly (byte for byte, no ``LIKE`` scan).

        A jid is looked up alone first (its unique index answers at once); only
        when no job has that jid is the term matched against job ids.
        """
        term = search_term.strip()
        if not term:
            return queryset, False
        if _JID.fullmatch(term) and queryset.filter(jid=term).exists():
            return queryset.filter(jid=term), False
        return queryset.filter(job_id=term), False

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Jobs are made by enqueueing, never in the admin."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        """A job's page is read-only; the list's actions need the change permission."""
        if obj is not None:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        """A running job is not deleted (cancel it first), from its page as from the list."""
        if obj is not None and obj.status == JobStatus.PROCESSING:
            return False
        return super().has_delete_permission(request, obj)

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        """Delete one job from its page's "Delete" link, audited as the list's action is."""
        act_in_batches(
            Job.objects.using(obj._state.db).filter(pk=obj.pk),
            "delete",
            admin_actor(request),
            target=f"job {obj.jid}",
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        """Delete the jobs in batches, audited, keeping running ones (as :meth:`delete_jobs`)."""
        act_in_batches(queryset, "delete", admin_actor(request), target=_SELECTED)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        """Our batched delete replaces Django's, which loads every selected row.

        ``action_location`` exists from Django 6.1 on (actions on the change form).
        """
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location=action_location)
        actions.pop("delete_selected", None)
        return actions

    # Detail rendering ----------------------------------------------------------

    @admin.display(description=_("state"))
    def state_list(self, obj: Job) -> str:
        """The state word, with the stored status where they differ (docs/design.md#states)."""
        return state_label(obj, timezone.now())

    state_display = state_list

    @admin.display(description=_("message"))
    def message_display(self, obj: Job) -> SafeString:
        """The last message, escaped, line breaks kept."""
        return format_html('<pre class="jq-message">{}</pre>', obj.message or "-")

    @admin.display(description=_("payload"))
    def payload_display(self, obj: Job) -> SafeString:
        """The payload, pretty-printed; hidden for a ``secure`` job type."""
        value = obj.shown_payload()
        return hidden(value) if obj.secure else pretty(value)

    @admin.display(description=_("result"))
    def result_display(self, obj: Job) -> SafeString:
        """The result, pretty-printed; hidden for a ``secure`` job type."""
        value = obj.shown_result()
        return hidden(value) if obj.secure else pretty(value)

    @admin.display(description=_("payload of the next run"))
    def rerun_display(self, obj: Job) -> SafeString:
        """The payload of the run asked for while this one runs (docs/design.md#ids)."""
        if not obj.rerun:
            return format_html("{}", "-")
        return hidden("<secure>") if obj.secure else pretty(obj.rerun_payload)

    @admin.display(description=_("failed attempts"))
    def errors_display(self, obj: Job) -> SafeString:
        """Each failed attempt: when, the exception and its traceback."""
        entries = [entry for entry in obj.errors or [] if isinstance(entry, dict)]
        if not entries:
            return format_html("{}", "-")
        return format_html_join(
            "\n",
            '<div class="jq-error"><p><strong>{} {}</strong> · {} · {}</p>'
            "<p>{}</p><pre>{}</pre></div>",
            (
                (
                    _("Attempt"),
                    entry.get("attempt", "?"),
                    error_time(entry.get("at", "")),
                    entry.get("exception_class") or "-",
                    entry.get("message", ""),
                    entry.get("traceback") or _("(no traceback)"),
                )
                for entry in entries
            ),
        )

    @admin.display(description=_("id held now"), boolean=True)
    def id_held(self, obj: Job) -> bool | None:
        """Whether the job holds its id now (docs/design.md#ids): None when it has none."""
        if obj.job_id is None:
            return None
        return obj.job_id_hash is not None and (
            obj.id_held_until is None or obj.id_held_until > timezone.now()
        )

    @admin.display(description=_("unique key held now"), boolean=True)
    def unique_key_held(self, obj: Job) -> bool | None:
        """Whether the job holds its unique key lock now (docs/design.md#unique-keys): None without
        a key."""
        if obj.unique_key is None:
            return None
        return (
            obj.unique_key_hash is not None
            and obj.unique_expires_at is not None
            and obj.unique_expires_at > timezone.now()
        )

    # Actions -----------------------------------------------------------------------

    @admin.action(
        description=_("Retry now (dead letters and waiting jobs)"), permissions=["change"]
    )
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        """Run the selected dead letters again from attempt 1; make waiting ones due now."""
        counts = act_in_batches(queryset, "retry", admin_actor(request), target=_SELECTED)
        self.message_user(
            request,
            _("%(dead)d dead letter(s) will run again; %(waiting)d waiting job(s) are due now.")
            % {"dead": counts.get("dead", 0), "waiting": counts.get("waiting", 0)},
            messages.SUCCESS if sum(counts.values()) else messages.WARNING,
        )

    @admin.action(description=_("Cancel"), permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        """Cancel the selected waiting jobs; ask the workers of running ones to stop."""
        counts = act_in_batches(queryset, "cancel", admin_actor(request), target=_SELECTED)
        cancelled, requested = counts.get("cancelled", 0), counts.get("requested", 0)
        self.message_user(
            request,
            _("%(cancelled)d waiting job(s) cancelled; %(requested)d running job(s) asked to stop.")
            % {"cancelled": cancelled, "requested": requested},
            messages.SUCCESS if cancelled or requested else messages.WARNING,
        )

    @admin.action(description=_("Delete selected jobs"), permissions=["delete"])
    def delete_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> TemplateResponse | None:
        """Ask for confirmation, then delete the selected jobs that are not running."""
        if request.POST.get("post") != "yes":
            selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
            context = {
                **self.admin_site.each_context(request),
                "title": _("Delete jobs?"),
                "opts": self.model._meta,
                "selected": selected,
                "select_across": request.POST.get("select_across") == "1",
                "count": len(selected),
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
                "action": "delete_jobs",
            }
            request.current_app = self.admin_site.name
            return TemplateResponse(
                request, "django_jobqueue/admin/delete_confirmation.html", context
            )
        counts = act_in_batches(queryset, "delete", admin_actor(request), target=_SELECTED)
        deleted, running = counts.get("deleted", 0), counts.get("running", 0)
        message = ngettext("%(count)d job deleted.", "%(count)d jobs deleted.", deleted) % {
            "count": deleted
        }
        if running:
            message += " " + ngettext(
                "%(count)d running job kept: cancel it first.",
                "%(count)d running jobs kept: cancel them first.",
                running,
            ) % {"count": running}
        self.message_user(request, message, messages.SUCCESS)
        return None

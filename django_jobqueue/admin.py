"""The Django admin for jobs and schedules.

Jobs are read-only: the admin shows them and acts on them (retry now, cancel,
delete) through :mod:`django_jobqueue.maintenance`, the functions that
``manage.py jobqueue`` uses too. Stored data (payloads, results, messages,
tracebacks) is rendered with ``format_html`` only, so it is always escaped; a
``secure`` job type's payload and result are never shown.

The changelist stays fast on big tables: no full-table ``COUNT`` (the paginator
reads the planner's estimate on PostgreSQL when nothing is filtered, else counts
at most :attr:`EstimatedCountPaginator.count_limit` + 1 rows), no facet counts, and
the queue and job type filters list the values known to the registry and the
settings plus those of the latest jobs instead of a ``DISTINCT`` over the table.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from . import maintenance
from .conf import get_config
from .dbclock import Now
from .exceptions import UnknownJobType
from .models import Job, ScheduleJob

__all__ = ["EstimatedCountPaginator", "JobAdmin", "ScheduleJobAdmin"]

logger = logging.getLogger(__name__)

#: What a jid looks like (uuid4 hex).
_JID = re.compile(r"[0-9a-f]{32}")

#: How many of the latest jobs the queue and job type filters look at for values.
FILTER_SAMPLE_ROWS = 10_000


class EstimatedCountPaginator(Paginator):
    """A paginator that never counts a whole big table.

    Unfiltered, on PostgreSQL, the count is the planner's row estimate (from
    ``pg_class.reltuples``, read through ``EXPLAIN``) when that is above
    :attr:`count_limit`. Otherwise the count is exact up to ``count_limit`` and
    capped at ``count_limit + 1`` (a ``COUNT`` over a ``LIMIT`` subquery).
    """

    #: Exact counts up to this many rows.
    count_limit = 10_000

    @cached_property
    def count(self) -> int:
        """Return the (estimated or capped) number of rows."""
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        queryset = queryset.order_by()
        if not queryset.query.where and not queryset.query.is_sliced:
            estimate = _planner_rows(queryset)
            if estimate is not None and estimate > self.count_limit:
                return estimate
        return queryset[: self.count_limit + 1].count()


def _planner_rows(queryset: QuerySet[Any]) -> int | None:
    """Return the PostgreSQL planner's row estimate of ``queryset``; None elsewhere."""
    if connections[queryset.db].vendor != "postgresql":
        return None
    try:
        plan = json.loads(queryset.explain(format="json"))
        return int(plan[0]["Plan"]["Plan Rows"])
    except (ValueError, KeyError, IndexError, TypeError):  # an unexpected plan shape
        logger.warning("no planner estimate for the job changelist", exc_info=True)
        return None


def _pretty(value: Any) -> SafeString:
    """Render a JSON value indented, escaped, in a ``<pre>``."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="jq-json">{}</pre>', text)


def _hidden(value: Any) -> SafeString:
    return format_html("<em>{}</em> ({})", value, _("secure job type: not shown"))


def _sample_values(jobs: QuerySet[Job], field: str) -> set[str]:
    """Return the ``field`` values of the latest jobs (bounded, by primary key)."""
    rows = jobs.order_by("-pk").values_list(field, flat=True)[:FILTER_SAMPLE_ROWS]
    return set(rows)


def _known_job_types() -> dict[str, str | None]:
    """Return {job type: its queue} of the registry and ``JOBQUEUE["JOB_TYPES"]``."""
    from .registry import registered_job_types

    try:
        return {name: desc.queue for name, desc in registered_job_types().items()}
    except Exception:  # a broken declaration must not break the admin
        logger.warning("job types could not be listed for the admin filter", exc_info=True)
        return {}


class _ValueFilter(admin.SimpleListFilter):
    """Filter on one text field by exact value; values listed without a table scan."""

    field_name = ""

    def known_values(self) -> Iterable[str]:
        """Values known without reading the job table."""
        return ()

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[Any]:
        """List the known values, the latest jobs' values and the chosen one."""
        jobs = model_admin.get_queryset(request)
        values = set(self.known_values()) | _sample_values(jobs, self.field_name)
        if self.value():
            values.add(self.value())
        return [(value, value) for value in sorted(v for v in values if v)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the jobs with the chosen value."""
        if self.value():
            return queryset.filter(**{self.field_name: self.value()})
        return queryset


class QueueFilter(_ValueFilter):
    """Jobs of one queue."""

    title = _("queue")
    parameter_name = "queue"
    field_name = "queue"

    def known_values(self) -> Iterable[str]:
        """The default queue, the configured queues and the job types' queues."""
        config = get_config()
        queues = {config.DEFAULT_QUEUE, *config.QUEUES}
        queues.update(queue for queue in _known_job_types().values() if queue)
        return queues


class JobTypeFilter(_ValueFilter):
    """Jobs of one job type."""

    title = _("job type")
    parameter_name = "job_type"
    field_name = "job_type"

    def known_values(self) -> Iterable[str]:
        """The registered and declared job types."""
        return _known_job_types().keys()


class UniqueKeyHeldFilter(admin.SimpleListFilter):
    """Jobs that hold a unique key lock now (seed 000), or not."""

    title = _("holds a unique key")
    parameter_name = "unique_held"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[Any]:
        """Yes or no."""
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the holders (hash set, not expired by the database clock), or the others."""
        held = Q(unique_key_hash__isnull=False, unique_expires_at__gt=Now())
        if self.value() == "yes":
            return queryset.filter(held)
        if self.value() == "no":
            return queryset.exclude(held)
        return queryset


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Jobs: read-only, with actions to retry now, cancel and delete."""

    list_display = ("jid", "queue", "job_type", "status", "attempt", "run_at", "updated_at")
    list_filter = ("status", QueueFilter, JobTypeFilter, UniqueKeyHeldFilter)
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
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "jid",
                    "queue",
                    "job_type",
                    "status",
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
                    "created_at",
                    "run_at",
                    "started_at",
                    "finished_at",
                    "updated_at",
                    "expires_at",
                )
            },
        ),
        (_("Payload and result"), {"fields": ("payload_display", "result_display")}),
        (_("Failed attempts"), {"fields": ("errors_display",)}),
        (
            _("Lease"),
            {"fields": ("lease_owner", "lease_expires_at", "heartbeat_at", "cancel_requested")},
        ),
        (
            _("Id"),
            {
                "fields": (
                    "job_id",
                    "id_held",
                    "id_held_until",
                    "rerun",
                    "rerun_at",
                    "rerun_display",
                )
            },
        ),
        (
            _("Unique key"),
            {"fields": ("unique_key", "unique_mode", "unique_expires_at", "unique_key_held")},
        ),
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        """Every field shown is read-only."""
        return [
            name
            for _title, options in self.fieldsets
            for entry in options["fields"]
            for name in (entry if isinstance(entry, tuple) else (entry,))
        ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        """Jobs on the jobs' database."""
        from .enqueue import jobs_database

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

    @admin.display(description=_("message"))
    def message_display(self, obj: Job) -> SafeString:
        """The last message, escaped, line breaks kept."""
        return format_html('<pre class="jq-message">{}</pre>', obj.message or "-")

    @admin.display(description=_("payload"))
    def payload_display(self, obj: Job) -> SafeString:
        """The payload, pretty-printed; hidden for a ``secure`` job type."""
        value = obj.shown_payload()
        return _hidden(value) if obj.secure else _pretty(value)

    @admin.display(description=_("result"))
    def result_display(self, obj: Job) -> SafeString:
        """The result, pretty-printed; hidden for a ``secure`` job type."""
        value = obj.shown_result()
        return _hidden(value) if obj.secure else _pretty(value)

    @admin.display(description=_("payload of the next run"))
    def rerun_display(self, obj: Job) -> SafeString:
        """The payload of the run asked for while this one runs (seed 002 ``set``)."""
        if not obj.rerun:
            return format_html("{}", "-")
        return _hidden("<secure>") if obj.secure else _pretty(obj.rerun_payload)

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
                    entry.get("at", ""),
                    entry.get("exception_class") or "-",
                    entry.get("message", ""),
                    entry.get("traceback") or _("(no traceback)"),
                )
                for entry in entries
            ),
        )

    @admin.display(description=_("id held now"), boolean=True)
    def id_held(self, obj: Job) -> bool | None:
        """Whether the job holds its id now (seed 002): None when it has none."""
        if obj.job_id is None:
            return None
        return obj.job_id_hash is not None and (
            obj.id_held_until is None or obj.id_held_until > timezone.now()
        )

    @admin.display(description=_("unique key held now"), boolean=True)
    def unique_key_held(self, obj: Job) -> bool | None:
        """Whether the job holds its unique key lock now (seed 000): None without a key."""
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
        count = maintenance.retry_jobs(queryset)
        self.message_user(
            request,
            _("%(dead)d dead letter(s) will run again; %(waiting)d waiting job(s) are due now.")
            % {"dead": count.dead, "waiting": count.waiting},
            messages.SUCCESS if count.total else messages.WARNING,
        )

    @admin.action(description=_("Cancel"), permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        """Cancel the selected waiting jobs; ask the workers of running ones to stop."""
        count = maintenance.cancel_jobs(queryset)
        self.message_user(
            request,
            _("%(cancelled)d waiting job(s) cancelled; %(requested)d running job(s) asked to stop.")
            % {"cancelled": count.cancelled, "requested": count.requested},
            messages.SUCCESS if count.cancelled or count.requested else messages.WARNING,
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
        count = maintenance.delete_jobs(queryset)
        message = ngettext("%(count)d job deleted.", "%(count)d jobs deleted.", count.deleted) % {
            "count": count.deleted
        }
        if count.running:
            message += " " + ngettext(
                "%(count)d running job kept: cancel it first.",
                "%(count)d running jobs kept: cancel them first.",
                count.running,
            ) % {"count": count.running}
        self.message_user(request, message, messages.SUCCESS)
        return None


def _schedule_is_secure(obj: ScheduleJob) -> bool:
    from .registry import get_job_description

    try:
        return get_job_description(obj.job_type).secure
    except UnknownJobType:
        return False


@admin.register(ScheduleJob)
class ScheduleJobAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Schedules: read-only here, with actions to enable, disable and run now."""

    list_display = (
        "name",
        "job_type",
        "cron",
        "timezone",
        "enabled",
        "schedule_at",
        "execute_id",
    )
    list_filter = ("enabled", "source")
    search_fields = ("name", "job_type")
    ordering = ("name",)
    show_full_result_count = False
    actions = ("enable", "disable", "run_now")
    fields = (
        "name",
        "queue",
        "job_type",
        "payload_display",
        "priority",
        "status",
        "cron",
        "timezone",
        "enabled",
        "catch_up",
        "schedule_at",
        "last_run_at",
        "execute_id",
        "log_display",
        "source",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Schedules come from code and settings."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: ScheduleJob | None = None) -> bool:
        """A schedule's page is read-only; the list's actions need the change permission."""
        if obj is not None:
            return False
        return super().has_change_permission(request, obj)

    @admin.display(description=_("payload"))
    def payload_display(self, obj: ScheduleJob) -> SafeString:
        """The payload of the jobs it makes; hidden for a ``secure`` job type."""
        return _hidden("<secure>") if _schedule_is_secure(obj) else _pretty(obj.payload)

    @admin.display(description=_("log"))
    def log_display(self, obj: ScheduleJob) -> SafeString:
        """The last outcomes, newest last."""
        return _pretty(obj.log)

    @admin.action(description=_("Enable"), permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet[ScheduleJob]) -> None:
        """Enable the selected schedules."""
        count = maintenance.enable_schedules(queryset)
        self.message_user(request, _("%(count)d schedule(s) enabled.") % {"count": count})

    @admin.action(description=_("Disable"), permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[ScheduleJob]) -> None:
        """Disable the selected schedules."""
        count = maintenance.disable_schedules(queryset)
        self.message_user(request, _("%(count)d schedule(s) disabled.") % {"count": count})

    @admin.action(description=_("Run now"), permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[ScheduleJob]) -> None:
        """Make the selected schedules due now; the scheduler makes their next job."""
        count = maintenance.run_schedules_now(queryset)
        self.message_user(request, _("%(count)d schedule(s) due now.") % {"count": count})

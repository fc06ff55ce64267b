"""The Django admin of schedules: read-only, with actions to enable, disable, run now;
a plan made at run time can be deleted, as from the console. Every action is audited."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from .. import maintenance
from ..core.exceptions import UnknownJobType
from ..models import ScheduleJob
from ..schedules.editing import delete_plan
from ..schedules.plans import DECLARED_SOURCES
from ..store.audit import run_audited
from ..store.registry import get_job_description
from .display import hidden, pretty, time_display
from .jobbuttons import admin_actor

__all__ = ["ScheduleJobAdmin"]


def _audited(
    request: HttpRequest,
    queryset: QuerySet[ScheduleJob],
    action: str,
    work: Callable[[QuerySet[ScheduleJob]], int],
) -> int:
    """Run ``work(queryset)`` with its audit row in one transaction; return its count."""
    names = sorted(queryset.values_list("name", flat=True)[:20])
    target = "schedules " + ", ".join(names) + (" and more" if len(names) == 20 else "")
    return run_audited(
        queryset.db,
        lambda: work(queryset),
        admin_actor(request),
        action,
        target=target,
        counts=lambda count: {"changed": count},
    )


def _schedule_is_secure(obj: ScheduleJob) -> bool:
    try:
        return get_job_description(obj.job_type).secure
    except UnknownJobType:
        return False


@admin.register(ScheduleJob)
class ScheduleJobAdmin(admin.ModelAdmin):
    """Schedules: read-only here, with actions to enable, disable and run now, and the
    delete of a plan made at run time (a declared one is paused, not deleted)."""

    list_display = (
        "name",
        "job_type",
        "cron",
        "timezone",
        "enabled",
        "schedule_at_list",
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
        "schedule_at_display",
        "last_run_at_display",
        "execute_id",
        "log_display",
        "source",
        "created_at_display",
        "updated_at_display",
    )
    readonly_fields = fields

    schedule_at_list = time_display("schedule_at", stacked=True, model=ScheduleJob)
    schedule_at_display = time_display("schedule_at", model=ScheduleJob)
    last_run_at_display = time_display("last_run_at", model=ScheduleJob)
    created_at_display = time_display("created_at", model=ScheduleJob)
    updated_at_display = time_display("updated_at", model=ScheduleJob)

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Schedules come from code and settings."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: ScheduleJob | None = None) -> bool:
        """A schedule's page is read-only; the list's actions need the change permission."""
        if obj is not None:
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: ScheduleJob | None = None) -> bool:
        """A plan declared in code or settings is not deleted here: its declaration
        would bring it back at the next foreman start (pause it instead)."""
        if obj is not None and obj.source in DECLARED_SOURCES:
            return False
        return super().has_delete_permission(request, obj)

    def delete_model(self, request: HttpRequest, obj: ScheduleJob) -> None:
        """Delete the plan as the console and the CLI do: audited, the jobs it made stay."""
        delete_plan(obj._state.db or "default", obj.name, actor=admin_actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ScheduleJob]) -> None:
        """Delete the selected plans ("Delete selected"), one audited delete each.

        A selection with a declared plan never gets here: Django's delete asks
        :meth:`has_delete_permission` of every selected row first and refuses (403).
        """
        for plan in queryset.exclude(source__in=DECLARED_SOURCES).order_by("name"):
            self.delete_model(request, plan)

    @admin.display(description=_("payload"))
    def payload_display(self, obj: ScheduleJob) -> SafeString:
        """The payload of the jobs it makes; hidden for a ``secure`` job type."""
        return hidden("<secure>") if _schedule_is_secure(obj) else pretty(obj.payload)

    @admin.display(description=_("log"))
    def log_display(self, obj: ScheduleJob) -> SafeString:
        """The last outcomes, newest last."""
        return pretty(obj.log)

    @admin.action(description=_("Enable"), permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet[ScheduleJob]) -> None:
        """Enable the selected schedules."""
        count = _audited(request, queryset, "enable", maintenance.enable_schedules)
        self.message_user(request, _("%(count)d schedule(s) enabled.") % {"count": count})

    @admin.action(description=_("Disable"), permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[ScheduleJob]) -> None:
        """Disable the selected schedules."""
        count = _audited(request, queryset, "disable", maintenance.disable_schedules)
        self.message_user(request, _("%(count)d schedule(s) disabled.") % {"count": count})

    @admin.action(description=_("Run now"), permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[ScheduleJob]) -> None:
        """Make the selected schedules due now; the scheduler makes their next job."""
        count = _audited(request, queryset, "run", maintenance.run_schedules_now)
        self.message_user(request, _("%(count)d schedule(s) due now.") % {"count": count})

"""Declared plans: ``@job(..., cron=...)`` and ``JOBQUEUE["SCHEDULES"]``, written on start.

``@job(..., cron=...)`` (source ``code``, named after the job type) and
``JOBQUEUE["SCHEDULES"]`` (source ``settings``) are written to the table by
:func:`sync_declared_plans`, which each foreman runs once at start
(:func:`on_foreman_start`). A declared plan that is no longer declared is retired
(disabled, status ``retired``, no next run), so a renamed or removed plan stops.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..core.conf import get_config
from ..core.dbclock import Now
from ..core.exceptions import ImproperlyConfiguredJobQueue, JobQueueError
from ..models import ScheduleJob
from ..store import locks
from ..store.registry import get_job_description, registered_job_types
from .cron import next_tick, validate_cron, validate_timezone
from .plans import DECLARED_SOURCES, ScheduleSource, ScheduleStatus, resolve_plan_job

__all__ = ["declared_plans", "on_foreman_start", "sync_declared_plans"]

logger = logging.getLogger(__name__)

_SCHEDULE_KEYS = frozenset(
    {"job_type", "cron", "timezone", "payload", "queue", "priority", "catch_up", "enabled"}
)


def declared_plans() -> dict[str, dict[str, Any]]:
    """Return every declared plan by name: ``@job(cron=...)`` then ``JOBQUEUE["SCHEDULES"]``.

    A settings plan with the name of a code plan (its job type) replaces it.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If a declaration has an unknown key, a bad cron or time zone, an unknown
        job type or a payload that is not JSON.
    """
    config = get_config()
    plans: dict[str, dict[str, Any]] = {}
    for desc in registered_job_types().values():
        cron = getattr(desc, "cron", None)
        if cron:
            plans[desc.name] = {
                "job_type": desc.name,
                "cron": cron,
                "timezone": getattr(desc, "timezone", "UTC"),
                "catch_up": bool(getattr(desc, "catch_up", False)),
                "payload": None,
                "queue": None,
                "priority": None,
                "source": ScheduleSource.CODE,
            }
    for name, options in config.SCHEDULES.items():
        where = f"JOBQUEUE['SCHEDULES'][{name!r}]"
        if not isinstance(name, str) or not 0 < len(name) <= 200:
            raise ImproperlyConfiguredJobQueue(f"{where}: a plan name must be 1 to 200 characters.")
        if not isinstance(options, Mapping) or set(options) - _SCHEDULE_KEYS:
            raise ImproperlyConfiguredJobQueue(
                f"{where} must be a dict with keys among {sorted(_SCHEDULE_KEYS)}: got {options!r}."
            )
        if "job_type" not in options or "cron" not in options:
            raise ImproperlyConfiguredJobQueue(f"{where} needs a 'job_type' and a 'cron'.")
        if not isinstance(options.get("catch_up", False), bool):
            raise ImproperlyConfiguredJobQueue(f"{where}['catch_up'] must be True or False.")
        plan = {
            "job_type": options["job_type"],
            "cron": options["cron"],
            "timezone": options.get("timezone", "UTC"),
            "catch_up": options.get("catch_up", False),
            "payload": options.get("payload"),
            "queue": options.get("queue"),
            "priority": options.get("priority"),
            "source": ScheduleSource.SETTINGS,
        }
        if "enabled" in options:
            plan["enabled"] = bool(options["enabled"])
        plans[name] = plan
    for name, plan in plans.items():
        try:
            plan["cron"] = validate_cron(plan["cron"])
            validate_timezone(plan["timezone"])
            get_job_description(plan["job_type"])
            spec = resolve_plan_job(
                plan["job_type"], plan["payload"], plan["queue"], plan["priority"]
            )
        except JobQueueError as exc:
            raise ImproperlyConfiguredJobQueue(f"Schedule {name!r}: {exc}") from exc
        plan["queue"], plan["priority"] = spec.queue, spec.priority
    return plans


def _sync_one(using: str, name: str, plan: Mapping[str, Any], now: datetime) -> str:
    fields = {
        "job_type": plan["job_type"],
        "cron": plan["cron"],
        "timezone": plan["timezone"],
        "catch_up": plan["catch_up"],
        "payload": plan["payload"],
        "queue": plan["queue"],
        "priority": plan["priority"],
        "source": plan["source"],
    }
    with transaction.atomic(using=using):
        row = ScheduleJob.objects.using(using).select_for_update().filter(name=name).first()
        if row is None:
            enabled = plan.get("enabled", True)
            ScheduleJob.objects.using(using).create(
                name=name,
                status=ScheduleStatus.ACTIVE,
                enabled=enabled,
                schedule_at=next_tick(plan["cron"], plan["timezone"], now),
                **fields,
            )
            return "created"
        if row.source not in DECLARED_SOURCES:
            logger.warning(
                "schedule name=%s source=%s is now declared in %s; the declaration wins",
                name,
                row.source,
                plan["source"],
            )
        changes = {key: value for key, value in fields.items() if getattr(row, key) != value}
        retired = row.status == ScheduleStatus.RETIRED
        if retired:
            changes["status"] = ScheduleStatus.ACTIVE
            changes["enabled"] = True
        if "enabled" in plan and plan["enabled"] != row.enabled:
            changes["enabled"] = plan["enabled"]
        if retired or "cron" in changes or "timezone" in changes or row.schedule_at is None:
            changes["schedule_at"] = next_tick(plan["cron"], plan["timezone"], now)
        if not changes:
            return "unchanged"
        ScheduleJob.objects.using(using).filter(pk=row.pk).update(**changes, updated_at=Now())
        return "updated"


def sync_declared_plans(using: str, *, now: datetime | None = None) -> dict[str, int]:
    """Write the declared plans to the table; retire those no longer declared.

    Idempotent, and safe when several foremen start at once.

    Parameters
    ----------
    using:
        Database alias of the jobs.
    now:
        Aware datetime the first ticks are computed from; None: now.

    Returns
    -------
    dict[str, int]
        Counts: ``created``, ``updated``, ``unchanged``, ``retired``.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If a declaration is invalid (see :func:`declared_plans`). Nothing is written.

    Implements: docs/design.md#plans.
    """
    now = now or timezone.now()
    plans = declared_plans()
    counts = {"created": 0, "updated": 0, "unchanged": 0, "retired": 0}
    for name, plan in plans.items():
        for attempt in range(3):
            try:
                counts[locks.retry_when_locked(using, _sync_one, using, name, plan, now)] += 1
                break
            except IntegrityError:  # another foreman created it first
                if attempt == 2:
                    raise
    stale = ScheduleJob.objects.using(using).filter(source__in=DECLARED_SOURCES)
    stale = stale.exclude(status=ScheduleStatus.RETIRED)
    if plans:
        stale = stale.exclude(name__in=list(plans))
    counts["retired"] = locks.retry_when_locked(
        using,
        lambda: stale.update(
            enabled=False, status=ScheduleStatus.RETIRED, schedule_at=None, updated_at=Now()
        ),
    )
    logger.info(
        "schedules synced created=%s updated=%s unchanged=%s retired=%s",
        counts["created"],
        counts["updated"],
        counts["unchanged"],
        counts["retired"],
    )
    return counts


def on_foreman_start(using: str) -> dict[str, int]:
    """Run once when a foreman starts: sync the declared plans (see :func:`sync_declared_plans`).

    Implements: docs/design.md#plans.
    """
    return sync_declared_plans(using)

"""Schedule plans: their statuses and sources, creation, enable and disable, run now.

A plan is one ``ScheduleJob`` row: a one-off (``at``) or a cron plan. This module makes
and changes plans on an operator's or a program's request; :mod:`.materialize` turns
due plans into jobs and :mod:`.declared` writes the plans declared in code and
settings.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from ..core.dbclock import Now
from ..core.exceptions import DuplicateJob, InvalidOption
from ..core.origin import enqueued_by
from ..core.validation import text_problem
from ..enqueue import build_job, create_job
from ..models import ScheduleJob
from ..store.managers import JobSpec
from .cron import next_tick

__all__ = [
    "DECLARED_SOURCES",
    "LOG_SIZE",
    "ScheduleSource",
    "ScheduleStatus",
    "aadd_job_with_schedule",
    "add_job_with_schedule",
    "append_log",
    "get_scheduled_jobs",
    "iso_utc",
    "plan_summary",
    "resolve_plan_job",
    "run_now",
    "set_enabled",
    "set_enabled_plans",
    "validate_plan_name",
]

logger = logging.getLogger(__name__)

#: Outcomes a plan's ``log`` keeps, newest last.
LOG_SIZE = 20


class ScheduleStatus:
    """Values of ``ScheduleJob.status``."""

    #: The plan will run at ``schedule_at`` (when enabled).
    ACTIVE = "active"
    #: A one-off plan that made its job.
    DONE = "done"
    #: A declared plan no longer declared: disabled for good until declared again.
    RETIRED = "retired"
    #: A one-off plan whose job could not be made (see its log).
    ERROR = "error"


class ScheduleSource:
    """Values of ``ScheduleJob.source``: who owns the plan."""

    #: ``@job(..., cron=...)``; synced on foreman start.
    CODE = "code"
    #: ``JOBQUEUE["SCHEDULES"]``; synced on foreman start.
    SETTINGS = "settings"
    #: :func:`add_job_with_schedule` / ``send.schedule``.
    API = "api"
    #: Made by hand (the admin); never touched by the sync.
    MANUAL = "manual"


#: Sources the sync owns: plans of these sources that are not declared are retired.
DECLARED_SOURCES = (ScheduleSource.CODE, ScheduleSource.SETTINGS)


def resolve_plan_job(
    job_type: str, payload: Any, queue: str | None, priority: int | None
) -> JobSpec:
    """Validate a plan's job through ``build_job`` (nothing is written); return its spec.

    Raises
    ------
    UnknownJobType, InvalidPayload, InvalidOption
        As :func:`django_jobqueue.enqueue.build_job`.
    """
    return build_job(queue, job_type, payload, priority=priority)


def validate_plan_name(name: Any) -> str:
    """Return ``name`` if it can name a plan (1 to 200 characters, printable), else raise.

    Raises
    ------
    InvalidOption
        Naming the bad value.
    """
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise InvalidOption(f"name must be 1 to 200 characters: got {name!r}.")
    problem = text_problem(name)
    if problem is not None:
        raise InvalidOption(f"The schedule name {problem}: got {name!r}; remove that character.")
    return name


def add_job_with_schedule(
    job_type: str,
    payload: Any = None,
    *,
    at: datetime,
    queue: str | None = None,
    priority: int | None = None,
    name: str | None = None,
) -> ScheduleJob:
    """Plan one job of ``job_type`` at ``at``: a one-off schedule.

    The plan joins the caller's open transaction on the jobs' database. A foreman
    makes its job once ``at`` has come; a time in the past runs at the next
    foreman pass (about a second), once.

    Parameters
    ----------
    job_type:
        A registered job type, such as ``"emails.send"``.
    payload:
        Any JSON value; the job's payload.
    at:
        When the job should run: an aware datetime (stored in UTC).
    queue:
        The job's queue; None: the job type's, else ``JOBQUEUE["DEFAULT_QUEUE"]``.
    priority:
        The job's priority (int >= 1, 1 runs first); None: the job type's default.
    name:
        The plan's unique name (1 to 200 characters); None: ``once:<job_type>:<uuid>``.

    Returns
    -------
    ScheduleJob
        The stored plan (source ``api``).

    Raises
    ------
    InvalidOption
        If ``at`` is not an aware datetime, or ``name``/``queue``/``priority`` is bad.
    UnknownJobType, InvalidPayload
        As :func:`django_jobqueue.enqueue.enqueue_job`. Nothing is written.
    DuplicateJob
        If a plan with this ``name`` exists already.

    Implements: docs/design.md#plans.
    """
    if not isinstance(at, datetime) or timezone.is_naive(at):
        raise InvalidOption(f"at must be an aware datetime (with tzinfo): got {at!r}.")
    spec = resolve_plan_job(job_type, payload, queue, priority)
    if name is None:
        name = f"once:{job_type}:{uuid.uuid4().hex}"
    validate_plan_name(name)
    plan = ScheduleJob.objects.create_plan(
        spec.using,
        name=name,
        queue=spec.queue,
        job_type=job_type,
        payload=payload,
        priority=spec.priority,
        status=ScheduleStatus.ACTIVE,
        cron="",
        timezone="UTC",
        enabled=True,
        catch_up=False,
        schedule_at=at.astimezone(UTC),
        source=ScheduleSource.API,
    )
    logger.debug("schedule added name=%s type=%s at=%s", name, job_type, plan.schedule_at)
    return plan


async def aadd_job_with_schedule(job_type: str, payload: Any = None, **options: Any) -> Any:
    """Async twin of :func:`add_job_with_schedule`."""
    return await sync_to_async(add_job_with_schedule)(job_type, payload, **options)


def get_scheduled_jobs(
    using: str, from_at: datetime, to_at: datetime, *, enabled_only: bool = True
) -> list[ScheduleJob]:
    """Return the plans whose next run falls in [from_at, to_at), soonest first.

    Parameters
    ----------
    using:
        Database alias of the jobs.
    from_at, to_at:
        Aware datetimes bounding the next run.
    enabled_only:
        Leave out disabled plans.

    Implements: docs/design.md#plans.
    """
    plans = ScheduleJob.objects.using(using).filter(schedule_at__gte=from_at, schedule_at__lt=to_at)
    if enabled_only:
        plans = plans.filter(enabled=True)
    return list(plans.order_by("schedule_at", "pk"))


def append_log(plan: ScheduleJob, *entries: dict[str, Any]) -> list[dict[str, Any]]:
    """Return ``plan``'s log with ``entries`` appended, cut to its last :data:`LOG_SIZE`."""
    log = list(plan.log) if isinstance(plan.log, list) else []
    return [*log, *entries][-LOG_SIZE:]


def iso_utc(when: datetime) -> str:
    """Return the aware datetime ``when`` in UTC, ISO 8601, as a plan's log writes it."""
    return when.astimezone(UTC).isoformat()


# Operators: enable, disable, run now ----------------------------------------------


def set_enabled(using: str, names: Iterable[str], *, enabled: bool) -> int:
    """Enable or disable the plans named ``names``; see :func:`set_enabled_plans`.

    Implements: docs/design.md#plans.
    """
    plans = ScheduleJob.objects.using(using).filter(name__in=list(names))
    return set_enabled_plans(plans, enabled=enabled)


def set_enabled_plans(plans: QuerySet[ScheduleJob], *, enabled: bool) -> int:
    """Enable or disable ``plans`` (a queryset); return how many changed.

    Enabling a cron plan starts it at its next tick from now: ticks that passed
    while it was disabled are not missed ticks and never run, even with
    ``catch_up``. A retired plan comes back as active. A one-off plan keeps its
    time (a time in the past runs at the next pass).

    Implements: docs/design.md#plans.
    """
    now = timezone.now()
    changed = 0
    for plan in plans.filter(enabled=not enabled):
        fields: dict[str, Any] = {"enabled": enabled}
        if enabled and plan.cron:
            fields["schedule_at"] = next_tick(plan.cron, plan.timezone, now)
        if enabled and plan.status == ScheduleStatus.RETIRED:
            fields["status"] = ScheduleStatus.ACTIVE
        changed += (
            type(plan)
            .objects.using(plans.db)
            .filter(pk=plan.pk, enabled=plan.enabled)
            .update(**fields, updated_at=Now())
        )
    return changed


def run_now(using: str, name: str) -> str:
    """Make one job of plan ``name`` now, apart from its ticks; return the jid.

    Its id is ``schedule:<name>:run-now:<second>``, so a double click within the
    same second makes one job (the holder's jid is returned). The plan's next run
    does not move.

    Raises
    ------
    ScheduleJob.DoesNotExist
        If no plan has this name.

    Implements: docs/design.md#plans.
    """
    now = timezone.now().replace(microsecond=0)
    with transaction.atomic(using=using):
        plan = ScheduleJob.objects.using(using).select_for_update().get(name=name)
        with enqueued_by(f"schedule:{name}"):
            spec = build_job(
                plan.queue,
                plan.job_type,
                plan.payload,
                priority=plan.priority,
                job_id=f"schedule:{name}:run-now:{now.replace(tzinfo=None).isoformat()}Z",
            )
        try:
            jid = create_job(spec).jid
        except DuplicateJob as exc:
            assert exc.holder_jid is not None
            return exc.holder_jid
        entry = {"at": iso_utc(now), "outcome": "run_now", "jid": jid}
        ScheduleJob.objects.using(using).filter(pk=plan.pk).update(
            execute_id=jid, last_run_at=now, log=append_log(plan, entry), updated_at=Now()
        )
    return jid


def plan_summary(plan: ScheduleJob) -> dict[str, Any]:
    """Return a plan's operator view: name, kind, next run, last job and last outcome."""
    last = plan.log[-1] if isinstance(plan.log, list) and plan.log else {}
    return {
        "name": plan.name,
        "job_type": plan.job_type,
        "queue": plan.queue,
        "when": plan.cron and f"{plan.cron} ({plan.timezone})" or "once",
        "enabled": plan.enabled,
        "status": plan.status,
        "source": plan.source,
        "next_run_at": plan.schedule_at,
        "last_run_at": plan.last_run_at,
        "execute_id": plan.execute_id,
        "last_outcome": last.get("outcome"),
    }

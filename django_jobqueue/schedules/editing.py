"""Plans changed at run time: create, edit, delete, preview the next runs, run history.

Operators make and change cron plans from the console and ``manage.py jobqueue
schedules`` (docs/console.md "Schedules"). Every function here validates first and
writes nothing on bad input: a bad cron or time zone is an ``InvalidOption`` naming
the value. A plan declared in code or settings (source ``code``/``settings``) is
owned by its declaration, which every foreman start writes back
(:mod:`.declared`): it may be paused and run now, never edited or deleted here
(:class:`DeclaredPlan`).

Each change takes the acting :class:`~django_jobqueue.store.audit.Actor` and writes
its audit row (who, what, from where; the fields changed, old and new, in its
target) in the change's own write transaction: both commit or neither does. The plan's
row is locked for the change's length (``SELECT ... FOR UPDATE``), and a SQLite
"database is locked" retries the whole transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from ..core.dbclock import Now
from ..core.exceptions import InvalidOption
from ..models import Job, ScheduleJob
from ..store import locks
from ..store.audit import Actor, record
from .cron import next_tick, validate_cron, validate_timezone
from .plans import (
    DECLARED_SOURCES,
    ScheduleSource,
    ScheduleStatus,
    resolve_plan_job,
    validate_plan_name,
)

__all__ = [
    "EDITABLE_FIELDS",
    "HISTORY_SIZE",
    "PREVIEW_SIZE",
    "DeclaredPlan",
    "create_cron_plan",
    "delete_plan",
    "edit_plan",
    "plan_history",
    "preview_runs",
    "refuse_declared",
]

#: Runs :func:`preview_runs` shows by default.
PREVIEW_SIZE = 5
#: Jobs :func:`plan_history` reads at most.
HISTORY_SIZE = 50
#: What an operator may change on a plan made at run time.
EDITABLE_FIELDS = ("cron", "timezone", "payload", "queue")


class DeclaredPlan(InvalidOption):
    """The plan is declared in code or settings: pause it here, change it there."""


def refuse_declared(plan: ScheduleJob, verb: str) -> None:
    """Raise :class:`DeclaredPlan` if ``plan`` is declared in code or settings.

    ``verb`` ("edited", "deleted") is what the message says cannot be done.
    """
    if plan.source in DECLARED_SOURCES:
        where = "code (@job cron=...)" if plan.source == ScheduleSource.CODE else "settings"
        place = "JOBQUEUE['SCHEDULES']" if plan.source == ScheduleSource.SETTINGS else "its @job"
        raise DeclaredPlan(
            f"Schedule {plan.name!r} is declared in {where}: it cannot be {verb} here "
            f"(change {place} instead); it can be paused."
        )


def preview_runs(
    cron: str, tz_name: str, *, after: datetime | None = None, count: int = PREVIEW_SIZE
) -> list[datetime]:
    """Return the next ``count`` ticks of ``cron`` in ``tz_name`` after ``after`` (UTC).

    Parameters
    ----------
    cron, tz_name:
        A cron expression and an IANA time zone; both validated.
    after:
        Aware datetime; None: now.
    count:
        Runs wanted (1 to 100); fewer come back when the expression stops matching.

    Raises
    ------
    InvalidOption
        If the cron expression or the time zone is bad (the message names the value).
    """
    cron = validate_cron(cron)
    validate_timezone(tz_name)
    when = after or timezone.now()
    runs: list[datetime] = []
    for _ in range(max(1, min(count, 100))):
        tick = next_tick(cron, tz_name, when)
        if tick is None:
            break
        runs.append(tick)
        when = tick
    return runs


def create_cron_plan(
    using: str,
    name: str,
    job_type: str,
    *,
    cron: str,
    tz_name: str = "UTC",
    payload: Any = None,
    queue: str | None = None,
    priority: int | None = None,
    actor: Actor,
) -> ScheduleJob:
    """Create the cron plan ``name`` (source ``manual``, enabled, first run at its next tick).

    ``tz_name`` is an IANA time zone; ``actor`` is written to the audit row.

    Raises
    ------
    InvalidOption
        Bad name, cron, time zone, queue or priority; nothing is written.
    UnknownJobType, InvalidPayload
        As :func:`django_jobqueue.enqueue.build_job`.
    DuplicateJob
        If a plan named ``name`` exists already.
    """
    validate_plan_name(name)
    cron = validate_cron(cron)
    validate_timezone(tz_name)
    spec = resolve_plan_job(job_type, payload, queue, priority)

    def once() -> ScheduleJob:
        with locks.write_transaction(using):
            plan = _create(using, name, job_type, cron, tz_name, payload, spec.queue, spec.priority)
            record(using, actor, "create", target=f"schedule {name}: {cron} ({tz_name})", count=1)
            return plan

    return locks.retry_when_locked(using, once)


def _create(
    using: str,
    name: str,
    job_type: str,
    cron: str,
    tz_name: str,
    payload: Any,
    queue: str,
    priority: int,
) -> ScheduleJob:
    return ScheduleJob.objects.create_plan(
        using,
        name=name,
        queue=queue,
        job_type=job_type,
        payload=payload,
        priority=priority,
        status=ScheduleStatus.ACTIVE,
        cron=cron,
        timezone=tz_name,
        enabled=True,
        catch_up=False,
        schedule_at=next_tick(cron, tz_name, timezone.now()),
        source=ScheduleSource.MANUAL,
    )


def edit_plan(using: str, name: str, *, actor: Actor, **changes: Any) -> dict[str, tuple[Any, Any]]:
    """Change ``changes`` (keys among :data:`EDITABLE_FIELDS`) of plan ``name``.

    The audit row (action ``edit``, written even when nothing changed) names each
    field changed with its old and new value; a payload is named, never shown.

    A new cron or time zone moves the next run to the new expression's next tick
    from now (an enabled plan; a paused one gets it when enabled). A one-off plan
    takes no cron here.

    Returns
    -------
    dict[str, tuple[Any, Any]]
        What changed: field -> (old, new); empty if nothing did.

    Raises
    ------
    ScheduleJob.DoesNotExist
        If no plan has this name.
    DeclaredPlan
        If the plan is declared in code or settings.
    InvalidOption
        An unknown field, a bad cron, time zone or queue; nothing is written.
    InvalidPayload
        As :func:`django_jobqueue.enqueue.build_job`.
    """
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise InvalidOption(
            f"Only {', '.join(EDITABLE_FIELDS)} can be edited: got {sorted(unknown)}."
        )

    def once() -> dict[str, tuple[Any, Any]]:
        with locks.write_transaction(using):
            diff = _edit(using, name, changes)
            record(using, actor, "edit", target=_describe(name, diff), count=len(diff))
            return diff

    return locks.retry_when_locked(using, once)


def _describe(name: str, diff: dict[str, tuple[Any, Any]]) -> str:
    parts = [
        "payload changed" if field == "payload" else f"{field} {old!r} -> {new!r}"
        for field, (old, new) in diff.items()
    ]
    return f"schedule {name}: " + ("; ".join(parts) or "no change")


def _edit(using: str, name: str, changes: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    plan = ScheduleJob.objects.using(using).select_for_update().get(name=name)
    refuse_declared(plan, "edited")
    new = {field: changes.get(field, getattr(plan, field)) for field in EDITABLE_FIELDS}
    if not plan.cron and new["cron"]:
        raise InvalidOption(f"Schedule {name!r} runs once: it takes no cron.")
    if plan.cron:
        new["cron"] = validate_cron(new["cron"])
    new["timezone"] = validate_timezone(new["timezone"])
    spec = resolve_plan_job(plan.job_type, new["payload"], new["queue"], plan.priority)
    new["queue"] = spec.queue
    diff = {
        field: (getattr(plan, field), value)
        for field, value in new.items()
        if getattr(plan, field) != value
    }
    if not diff:
        return {}
    fields = {field: value for field, (_old, value) in diff.items()}
    if plan.cron and ("cron" in diff or "timezone" in diff) and plan.enabled:
        fields["schedule_at"] = next_tick(new["cron"], new["timezone"], timezone.now())
    ScheduleJob.objects.using(using).filter(pk=plan.pk).update(**fields, updated_at=Now())
    return diff


def delete_plan(using: str, name: str, *, actor: Actor) -> None:
    """Delete plan ``name``; the jobs it made stay. ``actor`` is written to the audit row.

    Raises
    ------
    ScheduleJob.DoesNotExist
        If no plan has this name.
    DeclaredPlan
        If the plan is declared in code or settings (its declaration would bring it
        back at the next foreman start): pause it instead.
    """

    def once() -> None:
        with locks.write_transaction(using):
            plan = ScheduleJob.objects.using(using).select_for_update().get(name=name)
            refuse_declared(plan, "deleted")
            ScheduleJob.objects.using(using).filter(pk=plan.pk).delete()
            record(
                using, actor, "delete", target=f"schedule {name}: {plan.cron or 'once'}", count=1
            )

    locks.retry_when_locked(using, once)


def plan_history(using: str, name: str, *, limit: int = HISTORY_SIZE) -> list[Job]:
    """Return up to ``limit`` jobs plan ``name`` made, newest first.

    Read by ``Job.origin`` (``schedule:<name>``) over its index; jobs pruned or
    deleted since are gone from it.
    """
    jobs = Job.objects.using(using).filter(origin=f"schedule:{name}")
    return list(jobs.order_by("-created_at", "-pk")[:limit])

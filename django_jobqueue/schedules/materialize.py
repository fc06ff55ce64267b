"""Materialising due plans: each (plan, tick) makes at most one job (docs/design.md#plans).

Each foreman calls :func:`materialize_due` about once a second; the module docstring
of :mod:`django_jobqueue.schedules` states the guarantees (one job per tick, late and
missed ticks, ``catch_up``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from ..core.dbclock import Now
from ..core.exceptions import DuplicateJob, InvalidOption, JobQueueError, LockTimeout, WrongDatabase
from ..core.origin import enqueued_by
from ..core.reconnect import unreachable
from ..enqueue import build_job, create_job
from ..models import ScheduleJob
from ..store import locks
from .cron import next_tick, tick_job_id, validate_cron, validate_timezone
from .plans import ScheduleStatus, append_log, iso_utc

__all__ = ["MAX_JOBS_PER_CALL", "MAX_PLANS_PER_CALL", "ON_TIME_GRACE", "materialize_due"]

logger = logging.getLogger(__name__)

#: How late a tick may be materialised and still count as on time.
ON_TIME_GRACE = timedelta(seconds=60)
#: Most jobs one plan makes in one :func:`materialize_due` call (the rest: next call).
MAX_JOBS_PER_CALL = 100
#: Most due plans one :func:`materialize_due` call handles.
MAX_PLANS_PER_CALL = 100
#: Missed ticks counted one by one for the log; beyond this the log says "at least".
_MISSED_COUNT_CAP = 1_000
_TINY = timedelta(microseconds=1)
#: Errors that roll a plan's pass back, to be tried again on the next pass.
_TRANSIENT = (LockTimeout, WrongDatabase)


class _LostRace(Exception):
    """Another process advanced the plan first; roll back what this one made."""


def _make_job(plan: ScheduleJob, tick: datetime, entries: list[dict[str, Any]]) -> str | None:
    """Create the job of ``plan``'s ``tick``; return its jid, or None if not made."""
    job_id = tick_job_id(plan.name, tick)
    try:
        with enqueued_by(f"schedule:{plan.name}"):
            spec = build_job(
                plan.queue, plan.job_type, plan.payload, priority=plan.priority, job_id=job_id
            )
        result = create_job(spec)
    except DuplicateJob as exc:
        entries.append({"tick": iso_utc(tick), "outcome": "duplicate", "jid": exc.holder_jid})
        return None
    except JobQueueError as exc:
        if isinstance(exc, _TRANSIENT):
            raise
        logger.error("schedule name=%s tick=%s: job not made: %s", plan.name, iso_utc(tick), exc)
        entries.append({"tick": iso_utc(tick), "outcome": "error", "message": str(exc)})
        return None
    entries.append({"tick": iso_utc(tick), "outcome": "enqueued", "jid": result.jid})
    return result.jid


def _materialize_plan(plan: ScheduleJob, now: datetime) -> tuple[int, dict[str, Any]]:
    """Make the due jobs of a locked ``plan``; return (jobs made, field updates)."""
    entries: list[dict[str, Any]] = []
    made: list[str] = []
    old = plan.schedule_at
    assert old is not None
    fields: dict[str, Any] = {}
    if not plan.cron:  # one-off: once, however late
        jid = _make_job(plan, old, entries)
        if jid:
            made.append(jid)
        failed = any(entry["outcome"] == "error" for entry in entries)
        fields["status"] = ScheduleStatus.ERROR if failed else ScheduleStatus.DONE
        fields["schedule_at"] = None
    else:
        tick: datetime | None = old
        on_time_from = now - ON_TIME_GRACE
        if old < on_time_from:
            missed = 0
            while tick is not None and tick < on_time_from and missed < _MISSED_COUNT_CAP:
                missed += 1
                tick = next_tick(plan.cron, plan.timezone, tick)
            at_least = tick is not None and tick < on_time_from
            if at_least:
                tick = next_tick(plan.cron, plan.timezone, on_time_from - _TINY)
            summary = {
                "ticks": missed,
                "at_least": at_least,
                "first": iso_utc(old),
            }
            if plan.catch_up:
                jid = _make_job(plan, old, entries)
                if jid:
                    made.append(jid)
                    entries[-1] = {**entries[-1], "outcome": "caught_up", **summary}
            else:
                entries.append({"tick": iso_utc(old), "outcome": "skipped", **summary})
            logger.info(
                "schedule name=%s missed_ticks=%s%s catch_up=%s",
                plan.name,
                missed,
                "+" if at_least else "",
                plan.catch_up,
            )
        while tick is not None and tick <= now and len(made) < MAX_JOBS_PER_CALL:
            jid = _make_job(plan, tick, entries)
            if jid:
                made.append(jid)
            tick = next_tick(plan.cron, plan.timezone, tick)
        fields["schedule_at"] = tick
        if tick is None:
            entries.append({"outcome": "finished", "message": "the cron never matches again"})
    for entry in entries:
        entry.setdefault("at", iso_utc(now))
    fields["log"] = append_log(plan, *entries)
    if made:
        fields["execute_id"] = made[-1]
        fields["last_run_at"] = now
    return len(made), fields


def _materialize_one(using: str, pk: int, now: datetime) -> int:
    try:
        with transaction.atomic(using=using):
            plans = ScheduleJob.objects.using(using).filter(
                pk=pk, enabled=True, schedule_at__lte=now
            )
            if connections[using].features.has_select_for_update_skip_locked:
                plans = plans.select_for_update(skip_locked=True)
            plan = plans.first()
            if plan is None:  # another process has it, or did it
                return 0
            read_at = plan.schedule_at
            assert read_at is not None  # the filter above: schedule_at__lte=now
            count, fields = _materialize_plan(plan, now)
            # Guarded advance: only if no other process moved the plan meanwhile.
            if not ScheduleJob.objects.advance(using, pk, read_at, **fields):
                raise _LostRace
    except _LostRace:
        logger.debug("schedule pk=%s advanced by another process; rolled back", pk)
        return 0
    if count:
        logger.debug("schedule name=%s made=%s next=%s", plan.name, count, fields["schedule_at"])
    return count


def _arm_new_plans(using: str, now: datetime) -> None:
    """Give enabled cron plans without a next run (made in the admin) their first tick."""
    fresh = ScheduleJob.objects.using(using).filter(
        enabled=True, schedule_at__isnull=True, status=ScheduleStatus.ACTIVE
    )
    for pk, cron, tz_name in fresh.exclude(cron="").values_list("pk", "cron", "timezone")[:100]:
        try:
            tick = next_tick(validate_cron(cron), validate_timezone(tz_name), now)
        except InvalidOption as exc:
            logger.error("schedule pk=%s cannot run: %s", pk, exc)
            ScheduleJob.objects.using(using).filter(pk=pk, schedule_at__isnull=True).update(
                status=ScheduleStatus.ERROR, updated_at=Now()
            )
            continue
        ScheduleJob.objects.using(using).filter(pk=pk, schedule_at__isnull=True).update(
            schedule_at=tick, updated_at=Now()
        )


def materialize_due(using: str, *, now: datetime | None = None) -> int:
    """Make the jobs of every due plan; each (plan, tick) makes at most one job.

    Safe to call from any number of processes and hosts at once; foremen call it
    about once a second.

    Parameters
    ----------
    using:
        Database alias of the jobs (and plans).
    now:
        The time to materialise at, an aware datetime; None: the database clock.
        Tests inject it.

    Returns
    -------
    int
        The number of jobs made by this call.

    Raises
    ------
    django.db.OperationalError, django.db.InterfaceError
        The database is out of reach (before or during the pass): the plans not
        made yet are due at the next call. A plan that fails otherwise is logged with
        its traceback and skipped until the next call.

    Implements: docs/design.md#plans.
    """

    def due_plans() -> list[tuple[int, datetime]]:
        plans = ScheduleJob.objects.using(using).filter(enabled=True, schedule_at__isnull=False)
        if now is None:
            rows = (
                plans.filter(schedule_at__lte=Now())
                .annotate(db_now=Now())
                .order_by("schedule_at", "pk")
                .values_list("pk", "db_now")[:MAX_PLANS_PER_CALL]
            )
            return list(rows)
        pks = plans.filter(schedule_at__lte=now).order_by("schedule_at", "pk")
        return [(pk, now) for pk in pks.values_list("pk", flat=True)[:MAX_PLANS_PER_CALL]]

    locks.retry_when_locked(using, _arm_new_plans, using, now or timezone.now())
    made = 0
    for pk, plan_now in locks.retry_when_locked(using, due_plans):
        try:
            made += locks.retry_when_locked(using, _materialize_one, using, pk, plan_now)
        except Exception as exc:
            if unreachable(exc, using):
                raise  # every plan left would fail the same: the pass ends, in one line
            logger.exception("schedule pk=%s: materialising failed; retried next pass", pk)
    return made

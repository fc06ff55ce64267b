"""Schedules: plans that make jobs, once at a time or on a cron expression (seed 004).

Seed 004's schedule store maps onto this module once, here:

==============================  ===============================================
seed 004                        here
==============================  ===============================================
``Foreman.AddJobWithSchedule``  :func:`add_job_with_schedule`, ``send.schedule``
``CreateScheduleJob``           :func:`add_job_with_schedule`, :func:`sync_declared_plans`
``GetScheduledJob(from, to)``   :func:`get_scheduled_jobs`
``UpdateScheduledJob``          the guarded advance inside :func:`materialize_due`
``Schedule`` / ``ExecuteID``    ``ScheduleJob.schedule_at`` / ``execute_id``
``Log``                         ``ScheduleJob.log``: the last :data:`LOG_SIZE` outcomes
==============================  ===============================================

**Exactly one job per (plan, tick).** Each foreman calls :func:`materialize_due`
about once a second. For each due plan it opens one transaction, locks the plan's
row (``FOR UPDATE SKIP LOCKED``: a plan another process is materialising is left to
it; on SQLite its one writer serialises instead, and a transaction that meets
"database is locked" is rolled back and retried whole, from outside it, within
``LOCK_TIMEOUT_MS``, which is what a connection without ``transaction_mode``
``IMMEDIATE`` needs), creates the tick's job
through the no-duplicate path with the id ``schedule:<name>:<tick in UTC>``, and
advances ``schedule_at`` with an ``UPDATE`` guarded on the old ``schedule_at``. The
job and the advance commit together or not at all, so a crash between them loses
no tick, and a second foreman that read the same plan either finds the row locked,
finds ``schedule_at`` moved (its transaction rolls back, job included), or meets
the tick's id held (``DuplicateJob``). The id alone would not be enough: a done job
frees its id at once unless ``DEDUPE`` is set, so the guarded advance is what stops
a late second creator.

**Time.** Stored times are UTC. A cron expression (five fields, or six with seconds
last, croniter's convention; ``@daily`` and friends work) is evaluated on the wall
clock of the plan's time zone (zoneinfo), with this rule on daylight-saving days:

- *Spring forward (gap)*: wall times the clock skips run once, at the instant the
  clock jumps (a 02:30 daily plan runs at 03:00 in Paris on that day). Several
  skipped wall times still make one run.
- *Fall back (overlap)*: a wall time that occurs twice runs at its first occurrence
  only (a 02:30 daily plan runs once, at 02:30 summer time), unless the plan's hour
  field is ``*`` (hourly or finer plans such as ``*/15 * * * *``), which keep their
  rhythm and run in both passes of the repeated hour.

**Late and missed ticks.** A tick at most :data:`ON_TIME_GRACE` (60 s) late is on
time: it gets its own job (a slow database or a restart of a few seconds loses
nothing). Older ticks were missed (every foreman was down): with ``catch_up=True``
they make **one** job together, whatever their number; with ``catch_up=False`` (the
default) they are skipped, and the log says how many. A one-off plan runs once
whenever a foreman first sees it, however late.

**Declared plans.** ``@job(..., cron=...)`` (source ``code``, named after the job
type) and ``JOBQUEUE["SCHEDULES"]`` (source ``settings``) are written to the table by
:func:`sync_declared_plans`, which each foreman runs once at start
(:func:`on_foreman_start`). A declared plan that is no longer declared is retired
(disabled, status ``retired``, no next run), so a renamed or removed plan stops.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter
from django.db import IntegrityError, connections, transaction
from django.utils import timezone

from . import locks
from .conf import get_config
from .dbclock import Now
from .exceptions import (
    DuplicateJob,
    ImproperlyConfiguredJobQueue,
    InvalidOption,
    JobQueueError,
    LockTimeout,
    WrongDatabase,
)
from .validation import text_problem

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from .models import ScheduleJob

__all__ = [
    "LOG_SIZE",
    "ON_TIME_GRACE",
    "ScheduleSource",
    "ScheduleStatus",
    "aadd_job_with_schedule",
    "add_job_with_schedule",
    "declared_plans",
    "get_scheduled_jobs",
    "materialize_due",
    "next_tick",
    "on_foreman_start",
    "plan_summary",
    "run_now",
    "set_enabled",
    "set_enabled_plans",
    "sync_declared_plans",
    "tick_job_id",
    "validate_cron",
    "validate_timezone",
]

logger = logging.getLogger(__name__)

#: Outcomes a plan's ``log`` keeps, newest last.
LOG_SIZE = 20
#: How late a tick may be materialised and still count as on time.
ON_TIME_GRACE = timedelta(seconds=60)
#: Most jobs one plan makes in one :func:`materialize_due` call (the rest: next call).
MAX_JOBS_PER_CALL = 100
#: Most due plans one :func:`materialize_due` call handles.
MAX_PLANS_PER_CALL = 100
#: Missed ticks counted one by one for the log; beyond this the log says "at least".
_MISSED_COUNT_CAP = 1_000
_SCHEDULE_KEYS = frozenset(
    {"job_type", "cron", "timezone", "payload", "queue", "priority", "catch_up", "enabled"}
)
_TINY = timedelta(microseconds=1)
#: Errors that roll a plan's pass back, to be tried again on the next pass.
_TRANSIENT = (LockTimeout, WrongDatabase)


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


class _LostRace(Exception):
    """Another process advanced the plan first; roll back what this one made."""


# Cron evaluation --------------------------------------------------------------


def validate_cron(expr: Any) -> str:
    """Return ``expr`` if croniter accepts it as a cron expression, else raise.

    Raises
    ------
    InvalidOption
        If ``expr`` is not a string of 5 fields, 6 with seconds last, or an alias
        such as ``@daily``.
    """
    if not isinstance(expr, str) or not expr.strip() or not croniter.is_valid(expr):
        raise InvalidOption(f"cron must be a cron expression such as '0 3 * * *': got {expr!r}.")
    return expr.strip()


def validate_timezone(name: Any) -> str:
    """Return ``name`` if it is an IANA time zone zoneinfo knows, else raise.

    Raises
    ------
    InvalidOption
        If ``name`` is not a known time zone such as ``"Europe/Paris"`` or ``"UTC"``.
    """
    try:
        if not isinstance(name, str) or not name:
            raise ValueError(name)
        ZoneInfo(name)
    except (ValueError, ZoneInfoNotFoundError) as exc:
        raise InvalidOption(
            f"timezone must be an IANA time zone such as 'Europe/Paris': got {name!r}."
        ) from exc
    return name


def _offset(instant: datetime, tz: ZoneInfo) -> timedelta:
    offset = instant.astimezone(tz).utcoffset()
    assert offset is not None
    return offset


def _wall(instant: datetime, offset: timedelta) -> datetime:
    """Return the naive wall time of ``instant`` on a clock ``offset`` from UTC."""
    return (instant.astimezone(UTC) + offset).replace(tzinfo=None)


def _instant(wall: datetime, offset: timedelta) -> datetime:
    return (wall - offset).replace(tzinfo=UTC)


def _find_transition(
    start: datetime, end: datetime, tz: ZoneInfo, offset: timedelta
) -> datetime | None:
    """Return the first instant in (start, end] whose UTC offset is not ``offset``.

    Samples every 7 days (zones never change offset twice in a week), then bisects
    to the second (transitions fall on whole seconds).
    """
    low = start
    while low < end:
        high = min(low + timedelta(days=7), end)
        if _offset(high, tz) != offset:
            lo_s = int(low.timestamp() // 1)
            hi_s = -int(-high.timestamp() // 1)
            while hi_s - lo_s > 1:
                mid = (lo_s + hi_s) // 2
                if _offset(datetime.fromtimestamp(mid, UTC), tz) == offset:
                    lo_s = mid
                else:
                    hi_s = mid
            return datetime.fromtimestamp(hi_s, UTC)
        low = high
    return None


def _cron_after(expr: str, wall: datetime) -> datetime | None:
    """Return the first naive wall time strictly after ``wall`` that ``expr`` matches."""
    try:
        result = croniter(expr, wall).get_next(datetime)
    except CroniterBadDateError:
        return None
    assert isinstance(result, datetime)
    return result


@functools.lru_cache(maxsize=256)
def _repeats_in_overlap(expr: str) -> bool:
    """Whether the plan runs every hour (hour field ``*``): it runs in both passes."""
    return croniter(expr).expanded[1] == ["*"]


def next_tick(cron: str, tz_name: str, after: datetime) -> datetime | None:
    """Return the first tick of ``cron`` in zone ``tz_name`` strictly after ``after``.

    Parameters
    ----------
    cron:
        A cron expression (see :func:`validate_cron`), read on the zone's wall clock.
    tz_name:
        An IANA time zone, such as ``"Europe/Paris"``.
    after:
        An aware datetime.

    Returns
    -------
    datetime | None
        The tick, aware in UTC; None if the expression never matches again (such
        as ``0 0 30 2 *``). Daylight-saving gaps and overlaps follow the module's
        rule: a skipped wall time runs when the clock jumps; a repeated one runs
        once, at its first occurrence, unless the hour field is ``*``.

    Implements: issue 6, "Time is UTC inside; cron in the plan's time zone".
    """
    tz = ZoneInfo(tz_name)
    repeat = _repeats_in_overlap(cron)
    t = after.astimezone(UTC)
    offset = _offset(t, tz)
    start_wall = _wall(t, offset)
    for _step in range(64):
        wall = _cron_after(cron, start_wall)
        if wall is None:
            return None
        candidate = _instant(wall, offset)
        change = _find_transition(t, candidate, tz, offset)
        if change is None:
            if not repeat:
                first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
                second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
                if first < second and candidate == second:
                    # Second pass of a repeated wall time: skip to the overlap's end.
                    before = _offset(first, tz)
                    shift = _find_transition(first, second, tz, before)
                    assert shift is not None
                    t = shift + (before - offset)
                    start_wall = _wall(t, offset) - _TINY
                    continue
            return candidate
        new_offset = _offset(change, tz)
        if new_offset > offset:  # spring forward: walls [change+offset, change+new) skipped
            if wall < _wall(change, new_offset):
                return change
            t, offset = change, new_offset
        elif repeat:  # fall back, hourly plan: walls from the jump run again
            t, offset = change, new_offset
        else:  # fall back: skip the walls already seen before the jump
            t, offset = change + (offset - new_offset), new_offset
        start_wall = _wall(t, offset) - _TINY
    raise InvalidOption(f"cron {cron!r} in {tz_name!r}: no tick found after {after.isoformat()}.")


def tick_job_id(name: str, tick: datetime) -> str:
    """Return the job id (seed 002) of plan ``name``'s run at ``tick``.

    ``schedule:<name>:<tick in UTC, ISO 8601>``, e.g.
    ``schedule:digest:2026-03-29T01:00:00Z``: one tick, one id, on every host.
    """
    tick = tick.astimezone(UTC)
    spec = "seconds" if tick.microsecond == 0 else "microseconds"
    return f"schedule:{name}:{tick.replace(tzinfo=None).isoformat(timespec=spec)}Z"


# Creating plans ----------------------------------------------------------------


def _resolve(job_type: str, payload: Any, queue: str | None, priority: int | None) -> Any:
    """Validate a plan's job through build_job (nothing is written); return the spec."""
    from .enqueue import build_job

    return build_job(queue, job_type, payload, priority=priority)


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

    Implements: seed 004 Foreman.AddJobWithSchedule, JobStorage.CreateScheduleJob.
    """
    from .models import ScheduleJob

    if not isinstance(at, datetime) or timezone.is_naive(at):
        raise InvalidOption(f"at must be an aware datetime (with tzinfo): got {at!r}.")
    spec = _resolve(job_type, payload, queue, priority)
    if name is None:
        name = f"once:{job_type}:{uuid.uuid4().hex}"
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise InvalidOption(f"name must be 1 to 200 characters: got {name!r}.")
    problem = text_problem(name)
    if problem is not None:
        raise InvalidOption(f"The schedule name {problem}: got {name!r}; remove that character.")
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
    from asgiref.sync import sync_to_async

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

    Implements: seed 004 JobStorage.GetScheduledJob(from, to).
    """
    from .models import ScheduleJob

    plans = ScheduleJob.objects.using(using).filter(schedule_at__gte=from_at, schedule_at__lt=to_at)
    if enabled_only:
        plans = plans.filter(enabled=True)
    return list(plans.order_by("schedule_at", "pk"))


# Materialising due plans ------------------------------------------------------------


def _log(plan: ScheduleJob, entry: dict[str, Any]) -> list[dict[str, Any]]:
    log = list(plan.log) if isinstance(plan.log, list) else []
    log.append(entry)
    return log[-LOG_SIZE:]


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat()


def _make_job(plan: ScheduleJob, tick: datetime, entries: list[dict[str, Any]]) -> str | None:
    """Create the job of ``plan``'s ``tick``; return its jid, or None if not made."""
    from .enqueue import build_job, create_job

    job_id = tick_job_id(plan.name, tick)
    try:
        spec = build_job(
            plan.queue, plan.job_type, plan.payload, priority=plan.priority, job_id=job_id
        )
        result = create_job(spec)
    except DuplicateJob as exc:
        entries.append({"tick": _iso(tick), "outcome": "duplicate", "jid": exc.holder_jid})
        return None
    except JobQueueError as exc:
        if isinstance(exc, _TRANSIENT):
            raise
        logger.error("schedule name=%s tick=%s: job not made: %s", plan.name, _iso(tick), exc)
        entries.append({"tick": _iso(tick), "outcome": "error", "message": str(exc)})
        return None
    entries.append({"tick": _iso(tick), "outcome": "enqueued", "jid": result.jid})
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
        if tick < on_time_from:
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
                "first": _iso(old),
            }
            if plan.catch_up:
                jid = _make_job(plan, old, entries)
                if jid:
                    made.append(jid)
                    entries[-1] = {**entries[-1], "outcome": "caught_up", **summary}
            else:
                entries.append({"tick": _iso(old), "outcome": "skipped", **summary})
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
        entry.setdefault("at", _iso(now))
    log = plan.log if isinstance(plan.log, list) else []
    fields["log"] = [*log, *entries][-LOG_SIZE:]
    if made:
        fields["execute_id"] = made[-1]
        fields["last_run_at"] = now
    return len(made), fields


def _materialize_one(using: str, pk: int, now: datetime) -> int:
    from .models import ScheduleJob

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
            count, fields = _materialize_plan(plan, now)
            # Guarded advance: only if no other process moved the plan meanwhile.
            if not ScheduleJob.objects.advance(using, pk, plan.schedule_at, **fields):
                raise _LostRace
    except _LostRace:
        logger.debug("schedule pk=%s advanced by another process; rolled back", pk)
        return 0
    if count:
        logger.debug("schedule name=%s made=%s next=%s", plan.name, count, fields["schedule_at"])
    return count


def _arm_new_plans(using: str, now: datetime) -> None:
    """Give enabled cron plans without a next run (made in the admin) their first tick."""
    from .models import ScheduleJob

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

    Implements: seed 004 JobStorage.GetScheduledJob + UpdateScheduledJob; issue 6,
    "each (plan, tick) makes at most one job".
    """
    from .models import ScheduleJob

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
        rows = plans.filter(schedule_at__lte=now).order_by("schedule_at", "pk")
        return [(pk, now) for pk in rows.values_list("pk", flat=True)[:MAX_PLANS_PER_CALL]]

    locks.retry_when_locked(using, _arm_new_plans, using, now or timezone.now())
    made = 0
    for pk, plan_now in locks.retry_when_locked(using, due_plans):
        try:
            made += locks.retry_when_locked(using, _materialize_one, using, pk, plan_now)
        except Exception:
            logger.exception("schedule pk=%s: materialising failed; retried next pass", pk)
    return made


# Operators: enable, disable, run now ----------------------------------------------


def set_enabled(using: str, names: Iterable[str], *, enabled: bool) -> int:
    """Enable or disable the plans named ``names``; see :func:`set_enabled_plans`.

    Implements: issue 6, "enable/disable".
    """
    from .models import ScheduleJob

    plans = ScheduleJob.objects.using(using).filter(name__in=list(names))
    return set_enabled_plans(plans, enabled=enabled)


def set_enabled_plans(plans: QuerySet[ScheduleJob], *, enabled: bool) -> int:
    """Enable or disable ``plans`` (a queryset); return how many changed.

    Enabling a cron plan starts it at its next tick from now: ticks that passed
    while it was disabled are not missed ticks and never run, even with
    ``catch_up``. A retired plan comes back as active. A one-off plan keeps its
    time (a time in the past runs at the next pass).

    Implements: issue 6, "enable/disable".
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

    Implements: issue 6, "run now".
    """
    from .enqueue import build_job, create_job
    from .models import ScheduleJob

    now = timezone.now().replace(microsecond=0)
    with transaction.atomic(using=using):
        plan = ScheduleJob.objects.using(using).select_for_update().get(name=name)
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
        entry = {"at": _iso(now), "outcome": "run_now", "jid": jid}
        ScheduleJob.objects.using(using).filter(pk=plan.pk).update(
            execute_id=jid, last_run_at=now, log=_log(plan, entry), updated_at=Now()
        )
    return jid


# Declared plans ---------------------------------------------------------------------


def declared_plans() -> dict[str, dict[str, Any]]:
    """Return every declared plan by name: ``@job(cron=...)`` then ``JOBQUEUE["SCHEDULES"]``.

    A settings plan with the name of a code plan (its job type) replaces it.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If a declaration has an unknown key, a bad cron or time zone, an unknown
        job type or a payload that is not JSON.
    """
    from .registry import get_job_description, registered_job_types

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
            spec = _resolve(plan["job_type"], plan["payload"], plan["queue"], plan["priority"])
        except JobQueueError as exc:
            raise ImproperlyConfiguredJobQueue(f"Schedule {name!r}: {exc}") from exc
        plan["queue"], plan["priority"] = spec.queue, spec.priority
    return plans


def _sync_one(using: str, name: str, plan: Mapping[str, Any], now: datetime) -> str:
    from .models import ScheduleJob

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

    Implements: issue 6, "declarative periodic plans synced on start".
    """
    from .models import ScheduleJob

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

    Implements: issue 6, "synced on start".
    """
    return sync_declared_plans(using)


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

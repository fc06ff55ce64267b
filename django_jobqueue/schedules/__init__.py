"""Schedules: plans that make jobs, once at a time or on a cron expression (docs/design.md#plans).

The design's schedule store (docs/design.md#plans) maps onto this package once, here:

==============================  ===============================================
design word                     here
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

The package's parts:

- :mod:`.cron`: cron expressions, time zones, the next tick across daylight saving,
  and a tick's job id; no database;
- :mod:`.plans`: plan statuses and sources, one-off plans, enable and disable, run now;
- :mod:`.editing`: create, edit and delete plans at run time, preview runs, history;
- :mod:`.declared`: the plans declared in code and settings, synced on foreman start;
- :mod:`.materialize`: due plans into jobs, one per (plan, tick), under the plan's lock.
"""

from __future__ import annotations

from .cron import next_tick, tick_job_id, validate_cron, validate_timezone
from .declared import declared_plans, on_foreman_start, sync_declared_plans
from .editing import (
    DeclaredPlan,
    create_cron_plan,
    delete_plan,
    edit_plan,
    plan_history,
    preview_runs,
)
from .materialize import MAX_JOBS_PER_CALL, MAX_PLANS_PER_CALL, ON_TIME_GRACE, materialize_due
from .plans import (
    DECLARED_SOURCES,
    LOG_SIZE,
    ScheduleSource,
    ScheduleStatus,
    aadd_job_with_schedule,
    add_job_with_schedule,
    get_scheduled_jobs,
    plan_summary,
    run_now,
    set_enabled,
    set_enabled_plans,
)

__all__ = [
    "DECLARED_SOURCES",
    "LOG_SIZE",
    "MAX_JOBS_PER_CALL",
    "MAX_PLANS_PER_CALL",
    "ON_TIME_GRACE",
    "ScheduleSource",
    "ScheduleStatus",
    "DeclaredPlan",
    "aadd_job_with_schedule",
    "add_job_with_schedule",
    "create_cron_plan",
    "declared_plans",
    "delete_plan",
    "edit_plan",
    "get_scheduled_jobs",
    "materialize_due",
    "next_tick",
    "on_foreman_start",
    "plan_history",
    "plan_summary",
    "preview_runs",
    "run_now",
    "set_enabled",
    "set_enabled_plans",
    "sync_declared_plans",
    "tick_job_id",
    "validate_cron",
    "validate_timezone",
]

"""Helpers of the schedule tests (tests/test_schedules*.py): times, plans, their jobs."""

from __future__ import annotations

from datetime import UTC, datetime

from django_jobqueue.models import Job, ScheduleJob
from django_jobqueue.schedules import materialize_due

DB = "default"

PARIS, NEW_YORK = "Europe/Paris", "America/New_York"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def cron_plan(
    name: str, cron: str, *, now: datetime, tz: str = "UTC", **fields: object
) -> ScheduleJob:
    """Create a cron plan by hand (as the admin would) and arm it at ``now``."""
    plan = ScheduleJob.objects.create(
        name=name, queue="default", job_type="schedules.tick", cron=cron, timezone=tz, **fields
    )
    materialize_due(DB, now=now)  # arms it: its first tick after now
    plan.refresh_from_db()
    return plan


def jobs_of(name: str) -> list[Job]:
    return list(Job.objects.filter(job_id__startswith=f"schedule:{name}:").order_by("job_id"))


def ticks_of(name: str) -> list[str]:
    return [job.job_id.removeprefix(f"schedule:{name}:") for job in jobs_of(name)]

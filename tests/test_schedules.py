"""Schedules (docs/design.md#plans): one job per (plan, tick) across
processes, downtime with catch_up on and off, DST, and one-off plans.

Declared plans, the operators' calls, the command, the admin's actions and the
foreman's start are in tests/test_schedules_manage.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from django_jobqueue import schedules
from django_jobqueue.core.exceptions import DuplicateJob, InvalidOption, UnknownJobType
from django_jobqueue.enqueue import build_job, create_job
from django_jobqueue.models import Job, JobStatus, ScheduleJob
from django_jobqueue.schedules import (
    ScheduleSource,
    ScheduleStatus,
    add_job_with_schedule,
    materialize_due,
    next_tick,
    tick_job_id,
)
from tests.schedules_helpers import DB, NEW_YORK, PARIS, cron_plan, jobs_of, ticks_of, utc
from tests.testapp.jobtypes.schedules import digest, tick

pytestmark = pytest.mark.django_db(transaction=True)


# Many processes, one job per tick ------------------------------------------------


def test_materialize__four_processes_make_one_job_per_tick(subprocess_env):
    """4 processes calling materialize_due in a loop for 10 s share an every-second plan."""
    plan = ScheduleJob.objects.create(
        name="every-second",
        queue="default",
        job_type="schedules.tick",
        cron="* * * * * *",  # croniter: seconds are the sixth field
        schedule_at=next_tick("* * * * * *", "UTC", datetime.now(UTC)),
    )
    first_tick = plan.schedule_at
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.schedules.materialize_loop", "10"],
            env=subprocess_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))

    jobs = jobs_of("every-second")
    ticks = [datetime.fromisoformat(t) for t in ticks_of("every-second")]
    assert len(ticks) == len(set(ticks)), "a tick made two jobs"
    assert sum(report["made"] for report in reports) == len(jobs)
    assert min(ticks) == first_tick
    span = int((max(ticks) - min(ticks)).total_seconds()) + 1
    assert len(ticks) == span, "a tick was skipped"
    assert len(ticks) >= 5  # the processes ran for 10 s after the first tick
    plan.refresh_from_db()
    assert plan.schedule_at == max(ticks) + timedelta(seconds=1)
    assert plan.execute_id in {job.jid for job in jobs}
    assert all(job.status == JobStatus.INIT and job.job_type == "schedules.tick" for job in jobs)


def test_runworkers__four_foreman_processes_make_one_job_per_tick():
    """4 real runworkers processes share an every-second plan for about 10 s."""
    import time

    from tests.workers_helpers import StartedWorkers, stop_all

    plan = ScheduleJob.objects.create(
        name="every-second",
        queue="default",
        job_type="schedules.tick",
        cron="* * * * * *",
        schedule_at=next_tick("* * * * * *", "UTC", datetime.now(UTC)),
    )
    first_tick = plan.schedule_at
    foremen = [StartedWorkers("--queues", "default", "--concurrency", "2") for _ in range(4)]
    try:
        for foreman in foremen:
            foreman.wait_started()
        time.sleep(10)
    finally:
        outcomes = stop_all(foremen)
    for code, err in outcomes:
        assert code == 0, err

    jobs = jobs_of("every-second")
    ticks = [datetime.fromisoformat(t) for t in ticks_of("every-second")]
    assert len(ticks) == len(set(ticks)), "a tick made two jobs"
    assert min(ticks) == first_tick
    span = int((max(ticks) - min(ticks)).total_seconds()) + 1
    assert len(ticks) == span, "a tick was skipped"
    assert len(ticks) >= 5
    plan.refresh_from_db()
    assert plan.schedule_at == max(ticks) + timedelta(seconds=1)
    assert all(job.job_type == "schedules.tick" for job in jobs)


def test_materialize__second_pass_on_same_tick_makes_nothing():
    plan = cron_plan("hourly", "0 * * * *", now=utc(2026, 1, 5, 9, 30))
    assert plan.schedule_at == utc(2026, 1, 5, 10)
    assert materialize_due(DB, now=utc(2026, 1, 5, 10, 0, 1)) == 1
    assert materialize_due(DB, now=utc(2026, 1, 5, 10, 0, 2)) == 0
    assert ticks_of("hourly") == ["2026-01-05T10:00:00Z"]
    plan.refresh_from_db()
    assert plan.schedule_at == utc(2026, 1, 5, 11)
    assert plan.log[-1]["outcome"] == "enqueued"
    assert plan.log[-1]["jid"] == plan.execute_id
    assert plan.last_run_at == utc(2026, 1, 5, 10, 0, 1)


def test_materialize__tick_id_held_already_is_answered_as_duplicate():
    plan = cron_plan("held", "0 * * * *", now=utc(2026, 1, 5, 9, 30))
    holder = create_job(
        build_job("default", "schedules.tick", job_id=tick_job_id("held", plan.schedule_at))
    )
    assert materialize_due(DB, now=utc(2026, 1, 5, 10, 0, 1)) == 0
    plan.refresh_from_db()
    assert plan.schedule_at == utc(2026, 1, 5, 11)
    assert plan.log[-1]["outcome"] == "duplicate"
    assert plan.log[-1]["jid"] == holder.jid
    assert Job.objects.count() == 1


def test_materialize__log_keeps_the_last_twenty_outcomes():
    cron_plan("minutely", "* * * * *", now=utc(2026, 1, 5, 10))
    now = utc(2026, 1, 5, 10, 0, 30)
    for _ in range(25):
        now += timedelta(minutes=1)
        assert materialize_due(DB, now=now) == 1
    plan = ScheduleJob.objects.get(name="minutely")
    assert len(plan.log) == schedules.LOG_SIZE
    assert plan.log[-1]["tick"] == "2026-01-05T10:25:00+00:00"
    assert len(jobs_of("minutely")) == 25


# Downtime: catch_up on and off ------------------------------------------------------


@pytest.mark.parametrize(("catch_up", "made_after_downtime"), [(True, 1), (False, 0)])
def test_materialize__one_hour_of_downtime(catch_up, made_after_downtime):
    """Every 5 min; the foremen are down from 10:05:30 to 11:07: 12 ticks are missed."""
    name = f"five-min-{catch_up}"
    cron_plan(name, "*/5 * * * *", now=utc(2026, 1, 5, 10, 0, 30), catch_up=catch_up)
    assert materialize_due(DB, now=utc(2026, 1, 5, 10, 5, 1)) == 1

    assert materialize_due(DB, now=utc(2026, 1, 5, 11, 7)) == made_after_downtime
    plan = ScheduleJob.objects.get(name=name)
    assert plan.schedule_at == utc(2026, 1, 5, 11, 10)
    entry = plan.log[-1]
    assert entry["ticks"] == 12
    assert entry["first"] == "2026-01-05T10:10:00+00:00"
    if catch_up:
        assert entry["outcome"] == "caught_up"
        assert ticks_of(name) == ["2026-01-05T10:05:00Z", "2026-01-05T10:10:00Z"]
    else:
        assert entry["outcome"] == "skipped"
        assert ticks_of(name) == ["2026-01-05T10:05:00Z"]

    assert materialize_due(DB, now=utc(2026, 1, 5, 11, 10, 1)) == 1
    assert ticks_of(name)[-1] == "2026-01-05T11:10:00Z"


def test_materialize__late_ticks_within_grace_each_run():
    """A tick up to ON_TIME_GRACE late is on time; older ones are missed."""
    cron_plan("per-10s", "* * * * * */10", now=utc(2026, 1, 5, 10))
    # 10:00:10 .. 10:01:30: 10:00:10 .. 10:00:20 are > 60 s late, 10:00:30 .. 10:01:30 are not.
    assert materialize_due(DB, now=utc(2026, 1, 5, 10, 1, 30)) == 7
    plan = ScheduleJob.objects.get(name="per-10s")
    assert plan.log[0]["outcome"] == "skipped"
    assert plan.log[0]["ticks"] == 2
    assert ticks_of("per-10s")[0] == "2026-01-05T10:00:30Z"
    assert ticks_of("per-10s")[-1] == "2026-01-05T10:01:30Z"


# DST ------------------------------------------------------------------------------


def local_ticks(cron: str, tz: str, start: datetime, end: datetime) -> list[str]:
    out, t = [], start
    while True:
        t = next_tick(cron, tz, t)
        if t is None or t >= end:
            return out
        out.append(t.astimezone(ZoneInfo(tz)).isoformat())


@pytest.mark.parametrize(
    ("tz", "day", "expected"),
    [
        # Spring forward: 02:30 does not exist; it runs when the clock jumps.
        (PARIS, (2026, 3, 29), ["2026-03-29T03:00:00+02:00"]),
        (NEW_YORK, (2026, 3, 8), ["2026-03-08T03:00:00-04:00"]),
        # Fall back: Paris repeats 02:00-03:00, 02:30 runs at its first occurrence.
        (PARIS, (2026, 10, 25), ["2026-10-25T02:30:00+02:00"]),
        # New York repeats 01:00-02:00: 02:30 happens once, as any day.
        (NEW_YORK, (2026, 11, 1), ["2026-11-01T02:30:00-05:00"]),
    ],
)
def test_next_tick__daily_0230_runs_once_on_dst_days(tz, day, expected):
    zone = ZoneInfo(tz)
    start = datetime(*day, tzinfo=zone)
    end = start + timedelta(days=1)
    assert local_ticks("30 2 * * *", tz, start, end) == expected
    # The days around run at 02:30 as usual.
    assert local_ticks("30 2 * * *", tz, start - timedelta(days=1), start) == [
        (start - timedelta(days=1)).replace(hour=2, minute=30).isoformat()
    ]


def test_next_tick__repeated_wall_time_runs_once_at_first_occurrence():
    assert local_ticks(
        "30 1 * * *",
        NEW_YORK,
        datetime(2026, 11, 1, tzinfo=UTC),
        datetime(2026, 11, 2, 12, tzinfo=UTC),
    ) == ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]


@pytest.mark.parametrize(
    ("tz", "start", "expected"),
    [
        (
            PARIS,
            utc(2026, 3, 29, 0, 15),
            ["01:30+01:00", "03:00+02:00", "03:30+02:00"],  # 02:00 and 02:30 skipped: one run
        ),
        (
            PARIS,
            utc(2026, 10, 24, 23, 15),
            ["01:30+02:00", "02:00+02:00", "02:30+02:00", "02:00+01:00", "02:30+01:00"],
        ),
        (NEW_YORK, utc(2026, 3, 8, 6, 15), ["01:30-05:00", "03:00-04:00", "03:30-04:00"]),
        (
            NEW_YORK,
            utc(2026, 11, 1, 4, 45),
            ["01:00-04:00", "01:30-04:00", "01:00-05:00", "01:30-05:00"],
        ),
    ],
)
def test_next_tick__hourly_plans_keep_their_rhythm_on_dst_days(tz, start, expected):
    got = [
        text[11:16] + text[19:]
        for text in local_ticks("*/30 * * * *", tz, start, start + timedelta(minutes=150))
    ]
    assert got[: len(expected)] == expected
    assert len(got) == len(set(got))


@pytest.mark.parametrize(
    ("tz", "day", "expected_local"),
    [
        (PARIS, (2026, 3, 29), "2026-03-29T03:00:00+02:00"),
        (PARIS, (2026, 10, 25), "2026-10-25T02:30:00+02:00"),
        (NEW_YORK, (2026, 3, 8), "2026-03-08T03:00:00-04:00"),
        (NEW_YORK, (2026, 11, 1), "2026-11-01T02:30:00-05:00"),
    ],
)
def test_materialize__daily_plan_on_dst_day_makes_one_job(tz, day, expected_local):
    """A foreman polling across the DST day makes one job for it.

    It polls every hour, and one second after each next run (standing for
    its once-a-second passes, which would all find nothing due in between).
    """
    zone = ZoneInfo(tz)
    now = datetime(*day, tzinfo=zone) - timedelta(hours=12)
    plan = cron_plan("nightly", "30 2 * * *", now=now, tz=tz)
    end = now + timedelta(hours=40)
    while now < end:
        now = min(now + timedelta(hours=1), plan.schedule_at + timedelta(seconds=1))
        materialize_due(DB, now=now)
        plan.refresh_from_db()
    made = [datetime.fromisoformat(t).astimezone(zone) for t in ticks_of("nightly")]
    assert [t.isoformat() for t in made if t.date() == datetime(*day).date()] == [expected_local]
    assert len(made) == 2  # the DST day's and the next day's


# One-off plans -----------------------------------------------------------------------


def test_one_off_plan_in_the_past_runs_once_promptly():
    plan = add_job_with_schedule(
        "schedules.tick", {"n": 1}, at=datetime.now(UTC) - timedelta(days=3)
    )
    assert plan.source == ScheduleSource.API
    assert plan.queue == "default"
    assert materialize_due(DB) == 1  # the next foreman pass, by the database clock
    assert materialize_due(DB) == 0
    (job,) = Job.objects.all()
    assert job.payload == {"n": 1}
    assert Job.objects.due().filter(pk=job.pk).exists()  # runs now, not at the old time
    plan.refresh_from_db()
    assert (plan.status, plan.schedule_at, plan.execute_id) == (ScheduleStatus.DONE, None, job.jid)


def test_one_off_plan_in_the_future_waits_for_its_time():
    at = utc(2030, 1, 1, 12)
    plan = tick.schedule({"n": 2}, at=at, name="new-year", priority=3)
    assert plan.priority == 3
    assert materialize_due(DB, now=at - timedelta(seconds=1)) == 0
    assert materialize_due(DB, now=at) == 1
    assert ticks_of("new-year") == ["2030-01-01T12:00:00Z"]
    assert schedules.get_scheduled_jobs(DB, at - timedelta(days=1), at + timedelta(days=1)) == []


def test_add_job_with_schedule__bad_input_writes_nothing():
    with pytest.raises(InvalidOption, match="aware datetime"):
        add_job_with_schedule("schedules.tick", at=datetime(2030, 1, 1))  # noqa: DTZ001
    with pytest.raises(UnknownJobType):
        add_job_with_schedule("schedules.nope", at=utc(2030, 1, 1))
    with pytest.raises(InvalidOption, match="priority"):
        add_job_with_schedule("schedules.tick", at=utc(2030, 1, 1), priority=0)
    assert not ScheduleJob.objects.exists()
    digest.schedule(at=utc(2030, 1, 1), name="taken")
    with pytest.raises(DuplicateJob, match="'taken' exists already"):
        add_job_with_schedule("schedules.tick", at=utc(2030, 1, 1), name="taken")
    assert ScheduleJob.objects.get().queue == "digests"

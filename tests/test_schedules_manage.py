"""Schedules (docs/design.md#plans) managed: plans declared in settings or by
``@job(cron=...)`` and synced, the operators' enable, disable and run now (the API,
``manage.py jobqueue schedules`` and the admin's actions), broken plans, and the
foreman's sync at start.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from django_jobqueue import handle, schedules
from django_jobqueue.core.exceptions import ImproperlyConfiguredJobQueue
from django_jobqueue.models import Job, JobStatus, ScheduleJob
from django_jobqueue.schedules import (
    ScheduleSource,
    ScheduleStatus,
    add_job_with_schedule,
    materialize_due,
    sync_declared_plans,
)
from django_jobqueue.store import registry
from tests.schedules_helpers import DB, NEW_YORK, PARIS, cron_plan, jobs_of, ticks_of, utc
from tests.testapp.jobtypes.schedules import tick  # noqa: F401  (registers schedules.*)

pytestmark = pytest.mark.django_db(transaction=True)


# Declared plans ----------------------------------------------------------------------


def declared(**plans: dict[str, object]) -> override_settings:
    return override_settings(JOBQUEUE={"SCHEDULES": plans})


DIGEST = {"job_type": "schedules.digest", "cron": "0 3 * * *", "timezone": PARIS}


def test_sync__removing_a_declared_plan_stops_it_after_the_next_start():
    t0 = utc(2026, 1, 5, 12)
    with declared(digest={**DIGEST, "payload": {"to": "all"}}):
        assert sync_declared_plans(DB, now=t0)["created"] == 1
    plan = ScheduleJob.objects.get(name="digest")
    assert (plan.source, plan.queue, plan.schedule_at) == (
        "settings",
        "digests",
        utc(2026, 1, 6, 2),
    )
    assert materialize_due(DB, now=utc(2026, 1, 6, 2, 0, 1)) == 1

    with declared():  # the next start: no longer declared
        assert sync_declared_plans(DB, now=utc(2026, 1, 6, 12))["retired"] == 1
    plan.refresh_from_db()
    assert (plan.enabled, plan.status, plan.schedule_at) == (False, ScheduleStatus.RETIRED, None)
    assert materialize_due(DB, now=utc(2026, 1, 7, 2, 0, 1)) == 0
    assert len(jobs_of("digest")) == 1

    with declared(digest=DIGEST):  # declared again: it comes back
        assert sync_declared_plans(DB, now=utc(2026, 1, 7, 12))["updated"] == 1
    plan.refresh_from_db()
    assert (plan.enabled, plan.status, plan.schedule_at) == (True, "active", utc(2026, 1, 8, 2))


def test_sync__renamed_plan_retires_the_old_name():
    with declared(digest=DIGEST):
        sync_declared_plans(DB, now=utc(2026, 1, 5, 12))
    with declared(**{"daily-digest": DIGEST}):
        assert sync_declared_plans(DB, now=utc(2026, 1, 5, 13)) == {
            "created": 1,
            "updated": 0,
            "unchanged": 0,
            "retired": 1,
        }
    assert list(ScheduleJob.objects.filter(enabled=True).values_list("name", flat=True)) == [
        "daily-digest"
    ]
    assert materialize_due(DB, now=utc(2026, 1, 6, 2, 0, 1)) == 1
    assert len(jobs_of("daily-digest")) == 1


def test_sync__is_idempotent_and_keeps_an_operators_disable():
    with declared(digest=DIGEST):
        sync_declared_plans(DB, now=utc(2026, 1, 5, 12))
        schedules.set_enabled(DB, ["digest"], enabled=False)
        assert sync_declared_plans(DB, now=utc(2026, 1, 5, 13))["unchanged"] == 1
    assert not ScheduleJob.objects.get(name="digest").enabled


def test_sync__a_changed_cron_moves_the_next_run():
    with declared(digest=DIGEST):
        sync_declared_plans(DB, now=utc(2026, 1, 5, 12))
    with declared(digest={**DIGEST, "cron": "0 4 * * *", "catch_up": True}):
        assert sync_declared_plans(DB, now=utc(2026, 1, 5, 13))["updated"] == 1
    plan = ScheduleJob.objects.get(name="digest")
    assert (plan.cron, plan.catch_up, plan.schedule_at) == ("0 4 * * *", True, utc(2026, 1, 6, 3))


def test_sync__leaves_hand_made_and_api_plans_alone():
    ScheduleJob.objects.create(
        name="by-hand", queue="default", job_type="schedules.tick", cron="0 * * * *"
    )
    add_job_with_schedule("schedules.tick", at=utc(2030, 1, 1), name="once")
    with declared():
        assert sync_declared_plans(DB)["retired"] == 0
    assert ScheduleJob.objects.filter(enabled=True).count() == 2
    assert ScheduleJob.objects.get(name="by-hand").source == ScheduleSource.MANUAL


def test_sync__job_decorator_with_cron_declares_a_plan(monkeypatch):
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))

    @handle.job("schedules.nightly", cron="30 2 * * *", timezone=NEW_YORK, catch_up=True)
    def nightly(payload, ctx):
        return None

    assert sync_declared_plans(DB, now=utc(2026, 3, 7, 12))["created"] == 1
    plan = ScheduleJob.objects.get(name="schedules.nightly")
    assert (plan.source, plan.catch_up, plan.timezone) == ("code", True, NEW_YORK)
    assert plan.schedule_at == utc(2026, 3, 8, 7)  # 02:30 skipped: 03:00 EDT

    monkeypatch.setattr(
        registry,
        "_registry",
        {k: v for k, v in registry._registry.items() if k != "schedules.nightly"},
    )
    assert sync_declared_plans(DB)["retired"] == 1


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({**DIGEST, "cron": "61 * * * *"}, "cron must be a cron expression"),
        ({**DIGEST, "timezone": "Mars/Olympus"}, "IANA time zone"),
        ({**DIGEST, "job_type": "schedules.nope"}, "Unknown job type"),
        ({**DIGEST, "every": "1h"}, "keys among"),
        ({"cron": "0 3 * * *"}, "needs a 'job_type'"),
    ],
)
def test_sync__bad_declaration_raises_and_writes_nothing(plan, message):
    with declared(digest=plan), pytest.raises(ImproperlyConfiguredJobQueue, match=message):
        sync_declared_plans(DB)
    assert not ScheduleJob.objects.exists()


def test_job_decorator__bad_cron_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    with pytest.raises(ImproperlyConfiguredJobQueue, match="cron must be"):
        handle.job("schedules.bad", cron="every day")(lambda payload, ctx: None)


# Operators ---------------------------------------------------------------------------


def test_set_enabled__ticks_passed_while_disabled_never_run():
    cron_plan("hourly", "0 * * * *", now=utc(2026, 1, 5, 9, 30), catch_up=True)
    assert schedules.set_enabled(DB, ["hourly"], enabled=False) == 1
    assert materialize_due(DB, now=utc(2026, 1, 5, 10, 0, 1)) == 0
    assert schedules.set_enabled(DB, ["hourly"], enabled=True) == 1
    plan = ScheduleJob.objects.get(name="hourly")
    assert plan.schedule_at > datetime.now(UTC)  # its next tick from now
    assert not Job.objects.exists()


def test_run_now__makes_one_job_and_keeps_the_next_run():
    plan = cron_plan("hourly", "0 * * * *", now=utc(2026, 1, 5, 9, 30))
    jid = schedules.run_now(DB, "hourly")
    again = schedules.run_now(DB, "hourly")  # the same second: the same job
    assert Job.objects.count() == len({jid, again})
    assert Job.objects.filter(jid=jid, job_id__contains=":run-now:").exists()
    fresh = ScheduleJob.objects.get(pk=plan.pk)
    assert (fresh.schedule_at, fresh.execute_id) == (plan.schedule_at, again)


def test_run_now__double_click_in_one_second_makes_one_job(monkeypatch):
    cron_plan("hourly", "0 * * * *", now=utc(2026, 1, 5, 9, 30))
    monkeypatch.setattr(schedules.plans.timezone, "now", lambda: utc(2026, 1, 5, 9, 40, 0))
    jid = schedules.run_now(DB, "hourly")
    assert schedules.run_now(DB, "hourly") == jid
    assert ticks_of("hourly") == ["run-now:2026-01-05T09:40:00Z"]


def test_materialize__hand_made_plan_with_bad_cron_is_marked_error():
    ScheduleJob.objects.create(name="bad", queue="default", job_type="schedules.tick", cron="nope")
    assert materialize_due(DB, now=utc(2026, 1, 5)) == 0
    assert ScheduleJob.objects.get(name="bad").status == ScheduleStatus.ERROR


def test_materialize__unknown_job_type_is_logged_and_the_plan_moves_on():
    plan = cron_plan("gone", "0 * * * *", now=utc(2026, 1, 5, 9, 30))
    ScheduleJob.objects.filter(pk=plan.pk).update(job_type="schedules.removed")
    assert materialize_due(DB, now=utc(2026, 1, 5, 10, 0, 1)) == 0
    plan.refresh_from_db()
    assert plan.schedule_at == utc(2026, 1, 5, 11)
    assert plan.log[-1]["outcome"] == "error"
    assert "Unknown job type" in plan.log[-1]["message"]


# manage.py jobqueue schedules ----------------------------------------------------------


def jobqueue(*args: str) -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("jobqueue", "schedules", *args, stdout=out)
    return out.getvalue()


def test_command__lists_plans_with_their_next_run():
    assert jobqueue() == "No schedules.\n"
    cron_plan("hourly", "0 * * * *", now=utc(2026, 1, 5, 9, 30), tz=PARIS)
    lines = jobqueue().splitlines()
    assert lines[0].split() == [
        "name", "when", "enabled", "status", "source", "next_run_at", "last_outcome"
    ]  # fmt: skip
    assert lines[1].split() == [
        "hourly", "0", "*", "*", "*", "*", "(Europe/Paris)", "True", "active", "manual",
        "2026-01-05T10:00:00+00:00", "-",
    ]  # fmt: skip
    (row,) = json.loads(jobqueue("--json"))
    assert (row["name"], row["next_run_at"]) == ("hourly", "2026-01-05 10:00:00+00:00")


def test_command__disable_enable_run_now():
    cron_plan("hourly", "0 * * * *", now=utc(2026, 1, 5, 9, 30))
    assert jobqueue("--disable", "hourly") == "Disabled 1 schedule(s).\n"
    assert not ScheduleJob.objects.get().enabled
    assert jobqueue("--enable", "hourly") == "Enabled 1 schedule(s).\n"
    assert ScheduleJob.objects.get().enabled
    out = jobqueue("--run-now", "hourly")
    (job,) = Job.objects.all()
    assert out == f"hourly: job {job.jid}\n"


def test_command__unknown_name_is_a_command_error():
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="^No schedule is named nope; run 'jobqueue schedules'"):
        jobqueue("--enable", "nope")


def test_command__sync_writes_the_declared_plans():
    with declared(digest=DIGEST):
        assert jobqueue("--sync") == "created 1, updated 0, unchanged 0, retired 0.\n"
    assert ScheduleJob.objects.get().name == "digest"


def test_admin_actions_share_the_schedule_logic():
    """The admin's enable/disable/run-now (maintenance.*) leave plans our logic runs."""
    from django_jobqueue import maintenance

    plan = cron_plan("hourly", "0 * * * *", now=utc(2026, 1, 5, 9, 30))
    plans = ScheduleJob.objects.filter(pk=plan.pk)
    assert maintenance.disable_schedules(plans) == 1
    assert materialize_due(DB, now=utc(2026, 1, 5, 10, 0, 1)) == 0
    assert maintenance.enable_schedules(plans) == 1
    assert maintenance.run_schedules_now(plans) == 1
    assert materialize_due(DB) == 1  # run now: one job at once
    assert materialize_due(DB) == 0
    plan.refresh_from_db()
    assert plan.schedule_at > datetime.now(UTC) - timedelta(seconds=5)  # back on its cron
    assert plan.schedule_at.minute == 0 and plan.schedule_at.second == 0


# The foreman ------------------------------------------------------------------------


def test_foreman__syncs_declared_plans_at_start_and_runs_a_one_off():
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    add_job_with_schedule("schedules.tick", at=datetime.now(UTC) - timedelta(hours=1), name="once")
    with declared(digest=DIGEST):
        Foreman(ForemanOptions(burst=True)).run(install_signals=False)
    assert ScheduleJob.objects.get(name="digest").source == ScheduleSource.SETTINGS
    assert ScheduleJob.objects.get(name="once").status == ScheduleStatus.DONE
    (job,) = jobs_of("once")
    assert job.status == JobStatus.DONE


def test_foreman__bad_declaration_stops_it_at_start():
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    with (
        declared(digest={**DIGEST, "cron": "nope"}),
        pytest.raises(ImproperlyConfiguredJobQueue, match="'digest'"),
    ):
        Foreman(ForemanOptions(burst=True)).run(install_signals=False)

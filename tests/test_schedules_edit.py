"""Plans changed at run time (docs/console.md "Schedules"): create, edit, pause, delete
and show through ``manage.py jobqueue schedules`` and the API, each audited in its
own transaction; bad input is a CommandError naming the value, and nothing is written.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_jobqueue import schedules
from django_jobqueue.models import AuditEntry, Job, ScheduleJob
from django_jobqueue.schedules import (
    DeclaredPlan,
    materialize_due,
    sync_declared_plans,
    tick_job_id,
)
from django_jobqueue.store.audit import Actor
from tests.schedules_helpers import DB, PARIS, utc
from tests.testapp.jobtypes.schedules import tick  # noqa: F401  (registers schedules.*)

pytestmark = pytest.mark.django_db(transaction=True)

OPS = Actor("console", "ops")


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobqueue", "schedules", *args, stdout=out)
    return out.getvalue()


def audit_rows() -> list[tuple[str, str, str, int]]:
    return list(
        AuditEntry.objects.order_by("pk").values_list("source", "action", "target", "count")
    )


def test_preview__five_runs_across_the_spring_forward():
    runs = schedules.preview_runs("30 2 * * *", PARIS, after=utc(2026, 3, 27, 12))
    # 02:30 Paris does not exist on 29 March 2026: it runs when the clock jumps (01:00 UTC).
    assert runs == [
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 30),
        utc(2026, 3, 31, 0, 30),
        utc(2026, 4, 1, 0, 30),
    ]
    assert schedules.preview_runs("0 0 30 2 *", "UTC") == []  # never matches


def test_cli__create_edit_pause_delete_each_audited():
    out = run("--create", "nightly", "--job-type", "schedules.tick", "--cron", "0 3 * * *",
              "--timezone", PARIS, "--payload", '{"n": 1}')  # fmt: skip
    assert "next runs:" in out
    plan = ScheduleJob.objects.get(name="nightly")
    assert (plan.cron, plan.timezone, plan.payload, plan.source, plan.queue) == (
        "0 3 * * *", PARIS, {"n": 1}, "manual", "default",
    )  # fmt: skip
    assert plan.schedule_at is not None and plan.schedule_at.astimezone(UTC).minute == 0

    out = run("--edit", "nightly", "--cron", "*/15 * * * *", "--queue", "other")
    assert out.startswith("nightly: cron, queue changed.")
    plan.refresh_from_db()
    assert (plan.cron, plan.queue) == ("*/15 * * * *", "other")
    assert plan.schedule_at is not None and plan.schedule_at.minute % 15 == 0
    assert run("--edit", "nightly", "--queue", "other").startswith("nightly: unchanged.")

    assert "Disabled 1 schedule(s)." in run("--disable", "nightly")
    assert "Deleted schedule nightly" in run("--delete", "nightly")
    assert not ScheduleJob.objects.filter(name="nightly").exists()

    rows = audit_rows()
    assert [(source, action) for source, action, _t, _c in rows] == [
        ("cli", "create"), ("cli", "edit"), ("cli", "edit"), ("cli", "disable"), ("cli", "delete"),
    ]  # fmt: skip
    assert (
        rows[1][2]
        == "schedule nightly: cron '0 3 * * *' -> '*/15 * * * *'; queue 'default' -> 'other'"
    )
    assert (rows[1][3], rows[2][3]) == (2, 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--create", "p", "--job-type", "schedules.tick", "--cron", "0 3 * *"],
            "cron must be a cron expression such as '0 3 * * *': got '0 3 * *'.",
        ),
        (
            ["--create", "p", "--job-type", "schedules.tick", "--cron", "0 3 * * *",
             "--timezone", "Europe/Pariss"],
            "timezone must be an IANA time zone such as 'Europe/Paris': got 'Europe/Pariss'.",
        ),
        (
            ["--create", "p", "--job-type", "schedules.tick", "--cron", "0 3 * * *",
             "--payload", "{nope"],
            "--payload must be JSON: got '{nope' "
            "(Expecting property name enclosed in double quotes).",
        ),
        (["--create", "p", "--cron", "0 3 * * *"], "--create needs --job-type and --cron."),
        (["--edit", "kept", "--cron", "61 * * * *"],
         "cron must be a cron expression such as '0 3 * * *': got '61 * * * *'."),
        (["--edit", "kept", "--timezone", "Mars/Olympus"],
         "timezone must be an IANA time zone such as 'Europe/Paris': got 'Mars/Olympus'."),
        (["--edit", "kept"], "--edit needs one of --cron, --timezone, --payload, --queue."),
        (["--edit", "ghost", "--cron", "* * * * *"],
         "No schedule is named ghost; run 'jobqueue schedules' to list them."),
        (["--delete", "ghost"],
         "No schedule is named ghost; run 'jobqueue schedules' to list them."),
        (["--create", "kept", "--job-type", "schedules.tick", "--cron", "* * * * *"],
         "A schedule named 'kept' exists already; choose another name or change it."),
    ],
)  # fmt: skip
def test_cli__bad_input_is_a_command_error_naming_it_and_writes_nothing(args, message):
    schedules.create_cron_plan(DB, "kept", "schedules.tick", cron="0 3 * * *", actor=OPS)
    before = (list(ScheduleJob.objects.values()), audit_rows())
    with pytest.raises(CommandError) as caught:
        run(*args)
    assert str(caught.value) == message
    assert (list(ScheduleJob.objects.values()), audit_rows()) == before


DECLARED = {"digest": {"job_type": "schedules.digest", "cron": "0 3 * * *", "timezone": PARIS}}


def test_cli__a_declared_plan_refuses_edit_and_delete_but_pauses():
    with override_settings(JOBQUEUE={"SCHEDULES": DECLARED}):
        sync_declared_plans(DB)
        for args in (["--edit", "digest", "--cron", "* * * * *"], ["--delete", "digest"]):
            with pytest.raises(CommandError) as caught:
                run(*args)
            verb = "edited" if args[0] == "--edit" else "deleted"
            assert str(caught.value) == (
                f"Schedule 'digest' is declared in settings: it cannot be {verb} here "
                "(change JOBQUEUE['SCHEDULES'] instead); it can be paused."
            )
        assert "Disabled 1 schedule(s)." in run("--disable", "digest")
        assert "declared in settings" in run("--show", "digest")
    plan = ScheduleJob.objects.get(name="digest")
    assert (plan.cron, plan.enabled) == ("0 3 * * *", False)
    assert [action for _s, action, _t, _c in audit_rows()] == ["disable"]
    with pytest.raises(DeclaredPlan):
        schedules.edit_plan(DB, "digest", actor=OPS, payload={"x": 1})


def test_history__the_jobs_a_plan_made_newest_first_bounded():
    schedules.create_cron_plan(DB, "every", "schedules.tick", cron="* * * * *", actor=OPS)
    schedules.create_cron_plan(DB, "other", "schedules.tick", cron="* * * * *", actor=OPS)
    first = ScheduleJob.objects.get(name="every").schedule_at
    assert first is not None
    for minute in range(4):
        assert materialize_due(DB, now=first + timedelta(minutes=minute, seconds=1)) == 2
    history = schedules.plan_history(DB, "every")
    ticks = [first + timedelta(minutes=minute) for minute in range(4)]
    assert [job.job_id for job in history] == [tick_job_id("every", t) for t in reversed(ticks)]
    assert [job.job_id for job in schedules.plan_history(DB, "every", limit=2)] == [
        tick_job_id("every", ticks[3]), tick_job_id("every", ticks[2]),
    ]  # fmt: skip
    shown = run("--show", "every")
    assert "last jobs (newest first):" in shown and history[0].jid in shown
    assert Job.objects.filter(origin="schedule:other").count() == 4  # not in every's history

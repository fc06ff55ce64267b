"""The console's schedule pages (docs/console.md "Schedules"): create, edit, pause and
delete plans, bad cron or time zone refused with the form's error, declared plans
paused but never edited, the next five runs and the run history shown.
"""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.test import override_settings
from django.urls import reverse
from django.utils.html import escape

from django_jobqueue import schedules
from django_jobqueue.models import AuditEntry, ScheduleJob
from django_jobqueue.schedules import materialize_due, sync_declared_plans
from django_jobqueue.store.audit import Actor
from tests.testapp.jobtypes.schedules import tick  # noqa: F401  (registers schedules.*)

pytestmark = pytest.mark.django_db

DB = "default"
PARIS = "Europe/Paris"


def url(name, *args):
    return reverse(f"django_jobqueue_console:{name}", args=args)


def actions():
    return list(AuditEntry.objects.order_by("pk").values_list("source", "actor", "action"))


@pytest.fixture
def nightly():
    return schedules.create_cron_plan(
        DB, "nightly/reports", "schedules.tick", cron="0 3 * * *", tz_name=PARIS,
        payload={"kind": "full"}, actor=Actor("cli", "setup"),
    )  # fmt: skip


def form(**fields):
    data = {"action": "save", "cron": "0 3 * * *", "timezone": PARIS, "queue": "default"}
    data["payload"] = '{"kind": "full"}'
    data.update(fields)
    return data


def test_create__from_the_form_audited(clients):
    client = clients["permitted"]
    assert client.get(url("schedule_new")).status_code == 200
    response = client.post(
        url("schedule_new"),
        {"name": "hourly", "job_type": "schedules.tick", "cron": "5 * * * *",
         "timezone": "UTC", "queue": "", "payload": '{"a": [1]}'},
    )  # fmt: skip
    assert response.status_code == 302 and response["Location"] == url("schedule", "hourly")
    plan = ScheduleJob.objects.get(name="hourly")
    assert (plan.cron, plan.payload, plan.queue, plan.source) == (
        "5 * * * *", {"a": [1]}, "default", "manual",
    )  # fmt: skip
    assert actions() == [("console", "permitted", "create")]
    assert LogEntry.objects.get().change_message == "console: create"


@pytest.mark.parametrize("role", ["anonymous", "nonstaff", "staff"])
def test_create_edit_delete__need_manage_schedule(clients, nightly, role):
    client = clients[role]
    assert client.post(url("schedule_new"), {"name": "x"}).status_code in (302, 403)
    assert client.post(url("schedule", nightly.name), form(cron="* * * * *")).status_code in (
        302, 403,
    )  # fmt: skip
    assert client.post(url("schedule", nightly.name), {"action": "delete"}).status_code in (
        302, 403,
    )  # fmt: skip
    assert ScheduleJob.objects.get().cron == "0 3 * * *"
    assert [action for _s, _a, action in actions()] == ["create"]


def test_edit__changes_the_plan_and_its_next_five_runs(clients, nightly):
    client = clients["permitted"]
    page = client.get(url("schedule", nightly.name)).content.decode()
    before = schedules.preview_runs("0 3 * * *", PARIS)
    assert all(run.isoformat(timespec="milliseconds")[:19] in page for run in before)
    response = client.post(
        url("schedule", nightly.name),
        form(cron="*/10 * * * *", timezone="UTC", queue="other", payload='{"kind": "delta"}'),
    )
    assert response.status_code == 302
    plan = ScheduleJob.objects.get()
    assert (plan.cron, plan.timezone, plan.queue, plan.payload) == (
        "*/10 * * * *", "UTC", "other", {"kind": "delta"},
    )  # fmt: skip
    assert plan.schedule_at is not None and plan.schedule_at.minute % 10 == 0
    page = client.get(url("schedule", nightly.name)).content.decode()
    assert "Saved schedule nightly/reports: cron, timezone, payload, queue changed." in page
    after = schedules.preview_runs("*/10 * * * *", "UTC")
    assert page.count("<li><time") == 5
    assert all(run.astimezone(UTC).minute % 10 == 0 for run in after)
    entry = AuditEntry.objects.order_by("pk").last()
    assert (entry.source, entry.actor, entry.action, entry.count) == (
        "console",
        "permitted",
        "edit",
        4,
    )
    assert entry.target == (
        "schedule nightly/reports: cron '0 3 * * *' -> '*/10 * * * *'; timezone "
        "'Europe/Paris' -> 'UTC'; payload changed; queue 'default' -> 'other'"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cron": "0 3 * *"},
         "cron must be a cron expression such as '0 3 * * *': got '0 3 * *'."),
        ({"cron": "0 25 * * *"}, "got '0 25 * * *'."),
        ({"timezone": "Europe/Pariss"}, "such as 'Europe/Paris': got 'Europe/Pariss'."),
        ({"payload": "{nope"}, "Enter a valid JSON."),
        ({"queue": "a/b"}, "contains '/'"),
    ],
)  # fmt: skip
def test_edit__bad_input_is_the_forms_error_and_writes_nothing(clients, nightly, fields, message):
    before = list(ScheduleJob.objects.values())
    response = clients["permitted"].post(url("schedule", nightly.name), form(**fields))
    assert response.status_code == 400
    assert escape(message) in response.content.decode()
    assert 'class="errorlist' in response.content.decode()
    assert list(ScheduleJob.objects.values()) == before
    assert [action for _s, _a, action in actions()] == ["create"]


def test_create__bad_cron_or_name_taken_is_the_forms_error(clients, nightly):
    client = clients["permitted"]
    base = {"name": "p", "job_type": "schedules.tick", "cron": "0 3 * * *", "timezone": "UTC"}
    response = client.post(url("schedule_new"), {**base, "cron": "every day"})
    assert response.status_code == 400
    assert escape("got 'every day'") in response.content.decode()
    response = client.post(url("schedule_new"), {**base, "timezone": "Nowhere/Town"})
    assert response.status_code == 400
    assert escape("got 'Nowhere/Town'") in response.content.decode()
    response = client.post(url("schedule_new"), {**base, "name": nightly.name})
    assert response.status_code == 400
    assert escape("A schedule named 'nightly/reports' exists already") in response.content.decode()
    assert ScheduleJob.objects.count() == 1


def test_pause_and_delete(clients, nightly):
    client = clients["permitted"]
    assert client.post(url("schedule_action", nightly.name, "disable")).status_code == 302
    assert ScheduleJob.objects.get().enabled is False
    assert "no (paused)" in client.get(url("schedule", nightly.name)).content.decode()
    response = client.post(url("schedule", nightly.name), {"action": "delete"})
    assert response.status_code == 302 and response["Location"] == url("schedules")
    assert not ScheduleJob.objects.exists()
    assert [action for _s, _a, action in actions()] == ["create", "disable", "delete"]
    assert client.get(url("schedule", nightly.name)).status_code == 404


def test_declared_plan__refuses_edit_and_delete_accepts_pause(clients):
    declared = {"digest": {"job_type": "schedules.digest", "cron": "0 3 * * *"}}
    with override_settings(JOBQUEUE={"SCHEDULES": declared}):
        sync_declared_plans(DB)
    client = clients["permitted"]
    page = client.get(url("schedule", "digest")).content.decode()
    assert "Declared in settings" in page and 'id="edit-plan"' not in page
    response = client.post(url("schedule", "digest"), form(cron="* * * * *"))
    assert response.status_code == 400
    assert "is declared in settings: it cannot be edited here" in response.content.decode()
    response = client.post(url("schedule", "digest"), {"action": "delete"}, follow=True)
    assert "is declared in settings: it cannot be deleted here" in response.content.decode()
    assert ScheduleJob.objects.get().cron == "0 3 * * *"
    assert client.post(url("schedule_action", "digest", "disable")).status_code == 302
    assert ScheduleJob.objects.get().enabled is False
    assert [action for _s, _a, action in actions()] == ["disable"]
    assert "(in settings)" in client.get(url("schedules")).content.decode()


def test_history__the_jobs_it_made_newest_first(clients, nightly):
    plan = schedules.create_cron_plan(
        DB, "minutely", "schedules.tick", cron="* * * * *", actor=Actor("cli", "")
    )
    first = plan.schedule_at
    for minute in range(3):
        materialize_due(DB, now=first + timedelta(minutes=minute, seconds=1))
    page = clients["staff"].get(url("schedule", "minutely")).content.decode()
    jids = [job.jid for job in schedules.plan_history(DB, "minutely")]
    assert len(jids) == 3
    positions = [page.index(jid) for jid in jids]
    assert positions == sorted(positions)  # newest first
    assert 'id="edit-plan"' not in page  # staff without the permission: read only
    assert "No job yet." in clients["staff"].get(url("schedule", nightly.name)).content.decode()


def test_secure_job_type__payload_never_shown_and_kept_on_edit(clients):
    from tests.testapp.jobtypes.maintenance import secret  # noqa: F401  (maint.secret)

    schedules.create_cron_plan(
        DB, "vault", "maint.secret", cron="0 3 * * *", payload={"pin": "4242-SECRET"},
        actor=Actor("cli", ""),
    )  # fmt: skip
    client = clients["permitted"]
    page = client.get(url("schedule", "vault")).content.decode()
    assert "4242-SECRET" not in page and 'name="payload"' not in page
    data = {"action": "save", "cron": "0 4 * * *", "timezone": "UTC", "queue": ""}
    assert client.post(url("schedule", "vault"), data).status_code == 302
    plan = ScheduleJob.objects.get(name="vault")
    assert (plan.cron, plan.payload) == ("0 4 * * *", {"pin": "4242-SECRET"})


def test_one_off_plan__is_not_edited_here(clients):
    from datetime import datetime

    plan = schedules.add_job_with_schedule(
        "schedules.tick", at=datetime.now(UTC) + timedelta(days=1), name="once"
    )
    response = clients["permitted"].post(url("schedule", plan.name), form())
    assert response.status_code == 400
    assert "runs once: only cron plans are edited here" in response.content.decode()
    assert ScheduleJob.objects.get(name="once").cron == ""


def test_list__shows_every_kind_of_log_entry(clients, nightly):
    # A run now is logged with its time ("at"), a tick with the tick's, a plan whose
    # cron never matches again with neither: the list shows each (it raised on the
    # first and the last, a filter argument that was not there).
    client = clients["permitted"]
    assert client.post(url("schedule_action", nightly.name, "run")).status_code == 302
    plan = ScheduleJob.objects.get()
    assert [entry["outcome"] for entry in plan.log] == ["run_now"]
    plan.log = [*plan.log, {"outcome": "finished", "message": "the cron never matches again"}]
    plan.save(update_fields=["log"])
    response = client.get(url("schedules"))
    assert response.status_code == 200
    page = response.content.decode()
    assert "run_now" in page and "finished" in page

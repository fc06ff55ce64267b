"""The admin's actions, through the test client as a superuser: the changelist's
actions on jobs, the retry and cancel buttons of a job's page with their permissions
and log entries, and the schedules' admin and its actions.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_jobqueue.models import Job, JobStatus, ScheduleJob
from tests import admin_helpers
from tests.admin_helpers import CHANGELIST, XSS, detail
from tests.maintenance_helpers import make_job, make_jobs, running

pytestmark = pytest.mark.django_db

#: A superuser's client (tests/admin_helpers.py), found by the tests under this name.
admin_client = admin_helpers.admin_client


def act(client: Client, action: str, jobs: list[Job], **extra: str) -> Any:
    data = {"action": action, "_selected_action": [job.pk for job in jobs], **extra}
    return client.post(reverse(CHANGELIST), data)


# Actions ---------------------------------------------------------------------------


def test_action__retry_now(admin_client: Client) -> None:
    dead = make_job(status=JobStatus.MAX_RETRY, attempt=4, age=timedelta(hours=1))
    later = make_job(status=JobStatus.RETRY, attempt=1, run_at=timezone.now() + timedelta(1))
    job = running()

    response = act(admin_client, "retry_now", [dead, later, job])

    assert response.status_code == 302
    dead.refresh_from_db()
    assert (dead.status, dead.attempt, dead.waiting, dead.finished_at) == (
        JobStatus.INIT,
        0,
        True,
        None,
    )
    later.refresh_from_db()
    assert later.run_at <= timezone.now()
    job.refresh_from_db()
    assert (job.status, job.attempt) == (JobStatus.PROCESSING, 1)
    messages = [str(m) for m in response.wsgi_request._messages]
    assert messages == ["1 dead letter(s) will run again; 1 waiting job(s) are due now."]


def test_action__cancel(admin_client: Client) -> None:
    waiting = make_job(status=JobStatus.INIT)
    job = running()
    done = make_job(status=JobStatus.DONE)

    response = act(admin_client, "cancel", [waiting, job, done])

    assert response.status_code == 302
    waiting.refresh_from_db()
    assert (waiting.status, waiting.waiting) == (JobStatus.CANCELLED, False)
    job.refresh_from_db()
    assert (job.status, job.cancel_requested) == (JobStatus.PROCESSING, True)
    done.refresh_from_db()
    assert done.status == JobStatus.DONE


def test_action__delete_asks_then_deletes_all_but_running(admin_client: Client) -> None:
    old = make_jobs(3, status=JobStatus.DONE)
    job = running()

    response = act(admin_client, "delete_jobs", [*old, job])
    assert response.status_code == 200
    assert "Delete the 4 selected jobs?" in response.content.decode()
    assert Job.objects.count() == 4

    response = act(admin_client, "delete_jobs", [*old, job], post="yes")
    assert response.status_code == 302
    assert list(Job.objects.values_list("pk", flat=True)) == [job.pk]
    messages = [str(m) for m in response.wsgi_request._messages]
    assert messages == ["3 jobs deleted. 1 running job kept: cancel it first."]


def test_action__select_across_the_filtered_list(admin_client: Client) -> None:
    dead = make_jobs(3, queue="emails", status=JobStatus.ERROR)
    other = make_job(queue="reports", status=JobStatus.ERROR)

    response = admin_client.post(
        reverse(CHANGELIST) + "?queue=emails",
        {"action": "retry_now", "select_across": "1", "_selected_action": [dead[0].pk]},
    )

    assert response.status_code == 302
    assert Job.objects.filter(pk__in=[j.pk for j in dead], status=JobStatus.INIT).count() == 3
    other.refresh_from_db()
    assert other.status == JobStatus.ERROR


def test_actions__need_the_change_permission(db: None) -> None:
    user = User.objects.create_user("viewer", password=None, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client = Client()
    client.force_login(user)
    dead = make_job(status=JobStatus.MAX_RETRY)

    assert client.get(reverse(CHANGELIST)).status_code == 200
    act(client, "retry_now", [dead])
    act(client, "delete_jobs", [dead], post="yes")

    dead.refresh_from_db()
    assert dead.status == JobStatus.MAX_RETRY


# Buttons on a job's page -------------------------------------------------------------


def button_url(name: str, job: Job) -> str:
    return reverse(f"admin:django_jobqueue_job_{name}", args=[job.pk])


def buttons(client: Client, job: Job) -> set[str]:
    html = detail(client, job)
    return {name for name in ("retry", "cancel") if f'href="{button_url(name, job)}"' in html}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"status": JobStatus.INIT}, {"cancel"}),  # due now: nothing to retry
        ({"status": JobStatus.INIT, "run_at": timedelta(hours=1)}, {"retry", "cancel"}),
        ({"status": JobStatus.RETRY, "run_at": timedelta(minutes=5)}, {"retry", "cancel"}),
        ({"status": JobStatus.ERROR}, {"retry"}),
        ({"status": JobStatus.MAX_RETRY}, {"retry"}),
        ({"status": JobStatus.DONE}, set()),
        ({"status": JobStatus.CANCELLED}, set()),
    ],
)
def test_buttons__per_state(
    admin_client: Client, fields: dict[str, Any], expected: set[str]
) -> None:
    if isinstance(fields.get("run_at"), timedelta):
        fields = {**fields, "run_at": timezone.now() + fields["run_at"]}
    job = make_job(**fields)

    assert buttons(admin_client, job) == expected


def test_buttons__running_job_cancel_until_asked(admin_client: Client) -> None:
    assert buttons(admin_client, running()) == {"cancel"}
    assert buttons(admin_client, running(owner="host:1:worker-2", cancel_requested=True)) == set()


def test_retry_button__asks_then_retries_and_logs(db: None) -> None:
    user = User.objects.create_superuser("boss", "boss@example.com", None)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    dead = make_job(status=JobStatus.MAX_RETRY, attempt=4, message="boom")
    url = button_url("retry", dead)

    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Retry the job now?" in html
    assert "The job will run again from attempt 1, due now." in html
    assert 'name="csrfmiddlewaretoken"' in html
    dead.refresh_from_db()
    assert dead.status == JobStatus.MAX_RETRY  # a GET changes nothing
    assert client.post(url).status_code == 403  # no CSRF token

    response = client.post(url, {"csrfmiddlewaretoken": page.context["csrf_token"]})

    assert response.status_code == 302
    assert response["Location"] == reverse("admin:django_jobqueue_job_change", args=[dead.pk])
    dead.refresh_from_db()
    assert (dead.status, dead.attempt, dead.waiting) == (JobStatus.INIT, 0, True)
    [entry] = LogEntry.objects.all()
    assert (entry.user, entry.object_id, entry.action_flag) == (user, str(dead.pk), CHANGE)
    assert entry.get_change_message() == "Retried now: runs again from attempt 1."
    assert [str(m) for m in response.wsgi_request._messages] == [entry.change_message]


def test_retry_button__scheduled_job_is_due_now(admin_client: Client) -> None:
    later = make_job(status=JobStatus.RETRY, attempt=1, run_at=timezone.now() + timedelta(1))

    assert "due now instead of" in admin_client.get(button_url("retry", later)).content.decode()
    response = admin_client.post(button_url("retry", later))

    assert response.status_code == 302
    later.refresh_from_db()
    assert (later.status, later.attempt) == (JobStatus.RETRY, 1)
    assert later.run_at <= timezone.now()
    assert LogEntry.objects.get().change_message == "Retried now: due now."


def test_cancel_button__waiting_and_running_jobs(admin_client: Client) -> None:
    waiting = make_job(status=JobStatus.INIT, job_id="draft:1")
    job = running()

    assert "Cancel the job?" in admin_client.get(button_url("cancel", waiting)).content.decode()
    assert admin_client.post(button_url("cancel", waiting)).status_code == 302
    assert admin_client.post(button_url("cancel", job)).status_code == 302

    waiting.refresh_from_db()
    assert (waiting.status, waiting.waiting, waiting.job_id_hash) == (
        JobStatus.CANCELLED,
        False,
        None,
    )
    job.refresh_from_db()
    assert (job.status, job.cancel_requested) == (JobStatus.PROCESSING, True)
    assert sorted(LogEntry.objects.values_list("object_id", "change_message")) == sorted(
        [
            (str(waiting.pk), "Cancelled: it will not run."),
            (str(job.pk), "Cancel requested: its worker is asked to stop it."),
        ]
    )


def test_buttons__a_job_in_another_state_is_left_alone(admin_client: Client) -> None:
    done = make_job(status=JobStatus.DONE)

    for name in ("retry", "cancel"):
        for method in (admin_client.get, admin_client.post):
            response = method(button_url(name, done))
            assert response.status_code == 302
            assert response["Location"] == reverse(
                "admin:django_jobqueue_job_change", args=[done.pk]
            )

    done.refresh_from_db()
    assert done.status == JobStatus.DONE
    assert not LogEntry.objects.exists()
    missing = admin_client.get(reverse("admin:django_jobqueue_job_retry", args=[10**9]))
    assert missing["Location"] == reverse(CHANGELIST)


def test_buttons__need_the_change_permission(db: None) -> None:
    viewer = User.objects.create_user("viewer", password=None, is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    operator = User.objects.create_user("operator", password=None, is_staff=True)
    operator.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_job", "change_job"])
    )
    dead = make_job(status=JobStatus.MAX_RETRY)
    client = Client()
    client.force_login(viewer)

    assert buttons(client, dead) == set()
    assert client.get(button_url("retry", dead)).status_code == 403
    assert client.post(button_url("retry", dead)).status_code == 403
    assert client.post(button_url("cancel", make_job())).status_code == 403
    dead.refresh_from_db()
    assert dead.status == JobStatus.MAX_RETRY
    assert not LogEntry.objects.exists()

    client.force_login(operator)
    assert buttons(client, dead) == {"retry"}
    assert client.post(button_url("retry", dead)).status_code == 302
    dead.refresh_from_db()
    assert dead.status == JobStatus.INIT


# Schedules -------------------------------------------------------------------------


def test_schedules__changelist_detail_and_actions(admin_client: Client) -> None:
    later = timezone.now() + timedelta(days=1)
    plan = ScheduleJob.objects.create(
        name="digest",
        queue="emails",
        job_type="maint.noop",
        cron="0 9 * * *",
        payload={"kind": XSS},
        schedule_at=later,
    )
    secret = ScheduleJob.objects.create(
        name="rotate", queue="vault", job_type="maint.secret", payload={"key": "hunter2"}
    )
    url = reverse("admin:django_jobqueue_schedulejob_changelist")

    html = admin_client.get(url).content.decode()
    assert "digest" in html and "0 9 * * *" in html
    html = admin_client.get(
        reverse("admin:django_jobqueue_schedulejob_change", args=[plan.pk])
    ).content.decode()
    assert "<script>alert(" not in html and "&lt;script&gt;" in html
    html = admin_client.get(
        reverse("admin:django_jobqueue_schedulejob_change", args=[secret.pk])
    ).content.decode()
    assert "hunter2" not in html

    admin_client.post(url, {"action": "disable", "_selected_action": [plan.pk]})
    plan.refresh_from_db()
    assert plan.enabled is False
    admin_client.post(url, {"action": "enable", "_selected_action": [plan.pk]})
    plan.refresh_from_db()
    assert plan.enabled is True
    admin_client.post(url, {"action": "run_now", "_selected_action": [plan.pk]})
    plan.refresh_from_db()
    assert plan.schedule_at <= timezone.now()

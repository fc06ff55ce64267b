"""The admin of jobs and schedules, through the test client as a superuser."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_jobqueue.admin import EstimatedCountPaginator, _planner_rows
from django_jobqueue.models import Job, JobStatus, ScheduleJob
from tests.maintenance_helpers import make_job, make_jobs, running

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_jobqueue_job_changelist"
XSS = "<script>alert('pwned')</script>"


@pytest.fixture
def admin_client(db: None) -> Client:
    # No password: force_login needs none, and hashing one takes a second.
    user = User.objects.create_superuser("boss", "boss@example.com", None)
    client = Client()
    client.force_login(user)
    return client


def changelist(client: Client, **params: Any) -> Any:
    response = client.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return response


def listed(response: Any) -> set[str]:
    return {job.jid for job in response.context["cl"].result_list}


def detail(client: Client, job: Job) -> str:
    response = client.get(reverse("admin:django_jobqueue_job_change", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def icon(html: str, field: str) -> str:
    """Return the alt text of the boolean icon in the read-only field ``field``."""
    row = html.split(f"field-{field}", 1)[1].split("field-", 1)[0]
    return row.split('alt="', 1)[1].split('"', 1)[0]


def act(client: Client, action: str, jobs: list[Job], **extra: str) -> Any:
    data = {"action": action, "_selected_action": [job.pk for job in jobs], **extra}
    return client.post(reverse(CHANGELIST), data)


# Changelist ------------------------------------------------------------------------


def test_changelist__columns_and_no_full_count(admin_client: Client) -> None:
    jobs = make_jobs(3, queue="emails", job_type="maint.noop")

    with CaptureQueriesContext(connection) as queries:
        response = changelist(admin_client)

    html = response.content.decode()
    for job in jobs:
        assert job.jid in html
    for header in ("Jid", "Queue", "Job type", "Status", "Attempt", "Run at", "Updated at"):
        assert f">{header}<" in html
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts, "the paginator counts (capped)"
    assert all("LIMIT" in sql.upper() for sql in counts), counts
    assert response.context["cl"].result_count == 3


def test_changelist__filters(admin_client: Client) -> None:
    now = timezone.now()
    done = make_job(queue="emails", job_type="maint.noop", status=JobStatus.DONE)
    dead = make_job(queue="reports", job_type="maint.secret", status=JobStatus.MAX_RETRY)
    locked = make_job(
        queue="reports",
        unique_key="report:7",
        unique_expires_at=now + timedelta(hours=1),
    )
    stale = make_job(queue="reports", unique_key="report:8", unique_expires_at=now - timedelta(1))

    assert listed(changelist(admin_client, status="done")) == {done.jid}
    assert listed(changelist(admin_client, queue="reports")) == {dead.jid, locked.jid, stale.jid}
    assert listed(changelist(admin_client, job_type="maint.secret")) == {dead.jid}
    assert listed(changelist(admin_client, unique_held="yes")) == {locked.jid}
    assert listed(changelist(admin_client, unique_held="no")) == {done.jid, dead.jid, stale.jid}


def test_changelist__filter_choices_come_from_registry_and_latest_jobs(
    admin_client: Client,
) -> None:
    make_job(queue="adhoc", job_type="gone.type")

    response = changelist(admin_client)

    choices = {
        spec.parameter_name: {value for value, _label in spec.lookup_choices}
        for spec in response.context["cl"].filter_specs
        if hasattr(spec, "lookup_choices") and hasattr(spec, "parameter_name")
    }
    # Seen in the latest jobs, declared by @job (tests.testapp.jobtypes.maintenance),
    # and the default queue.
    assert {"adhoc", "vault", "default"} <= choices["queue"]
    assert {"gone.type", "maint.secret", "maint.noop"} <= choices["job_type"]
    assert choices["unique_held"] == {"yes", "no"}


def test_changelist__search_exact_jid_or_job_id(admin_client: Client) -> None:
    a = make_job(job_id="invoice:42")
    b = make_job()
    make_job(job_id="invoice:420")

    assert listed(changelist(admin_client, q=b.jid)) == {b.jid}
    assert listed(changelist(admin_client, q="invoice:42")) == {a.jid}
    assert listed(changelist(admin_client, q=b.jid[:8])) == set()
    # A job id that looks like a jid is still found as a job id.
    hexy = make_job(job_id="0123456789abcdef0123456789abcdef")
    assert listed(changelist(admin_client, q=hexy.job_id)) == {hexy.jid}


def test_changelist__changelist_does_not_load_payloads(admin_client: Client) -> None:
    make_job(payload={"big": "x" * 1000})

    with CaptureQueriesContext(connection) as queries:
        changelist(admin_client)

    selects = [q["sql"] for q in queries.captured_queries if "django_jobqueue_job" in q["sql"]]
    listing = [sql for sql in selects if "ORDER BY" in sql.upper() and "COUNT(" not in sql.upper()]
    assert listing
    assert all('"payload"' not in sql and "`payload`" not in sql for sql in listing), listing


def test_no_add_page(admin_client: Client) -> None:
    response = admin_client.get(reverse("admin:django_jobqueue_job_add"))
    assert response.status_code == 403


# Paginator -------------------------------------------------------------------------


def test_paginator__capped_count() -> None:
    make_jobs(8)
    paginator = EstimatedCountPaginator(Job.objects.filter(queue="default").order_by("pk"), 2)
    paginator.count_limit = 5

    with CaptureQueriesContext(connection) as queries:
        assert paginator.count == 6

    [sql] = [q["sql"] for q in queries.captured_queries]
    assert "LIMIT 6" in sql.upper()


def test_paginator__exact_below_the_cap() -> None:
    make_jobs(4)
    assert EstimatedCountPaginator(Job.objects.order_by("-pk"), 2).count == 4


@pytest.mark.vendor("postgresql")
def test_paginator__unfiltered_uses_the_planner_estimate_on_postgresql() -> None:
    make_jobs(8)
    estimate = _planner_rows(Job.objects.all())
    assert isinstance(estimate, int) and estimate >= 0
    paginator = EstimatedCountPaginator(Job.objects.order_by("-pk"), 2)
    paginator.count_limit = -1  # any estimate is "big"

    with CaptureQueriesContext(connection) as queries:
        count = paginator.count

    assert count == _planner_rows(Job.objects.all())
    assert [q["sql"].split()[0].upper() for q in queries.captured_queries] == ["EXPLAIN"]


@pytest.mark.vendor("mysql", "sqlite")
def test_paginator__no_planner_estimate_elsewhere() -> None:
    assert _planner_rows(Job.objects.all()) is None


# Detail ----------------------------------------------------------------------------


def test_detail__pretty_payload_result_message_and_tracebacks(admin_client: Client) -> None:
    job = make_job(
        status=JobStatus.MAX_RETRY,
        payload={"to": "a@example.com", "n": 2},
        result={"sent": True},
        message="ValueError: boom",
        errors=[
            {
                "attempt": 1,
                "at": "2030-01-01T00:00:00+00:00",
                "exception_class": "builtins.ValueError",
                "message": "ValueError: first",
                "traceback": "Traceback (most recent call last):\n  File 'x.py'\nValueError: first",
            },
            {
                "attempt": 2,
                "at": "2030-01-01T00:01:00+00:00",
                "exception_class": "builtins.ValueError",
                "message": "ValueError: boom",
                "traceback": "Traceback (most recent call last):\nValueError: boom",
            },
        ],
    )

    html = detail(admin_client, job)

    assert "&quot;to&quot;: &quot;a@example.com&quot;" in html  # indented JSON, escaped
    assert "&quot;sent&quot;: true" in html
    assert "ValueError: boom" in html
    assert "Attempt 1" in html and "Attempt 2" in html
    assert "File &#x27;x.py&#x27;" in html
    assert 'name="_save"' not in html  # read-only


def test_detail__secure_job_never_shows_payload_or_result(admin_client: Client) -> None:
    job = make_job(
        job_type="maint.secret",
        secure=True,
        payload={"card": "4111-1111-1111-1111"},
        result={"token": "tok_live_secret"},
        rerun=True,
        rerun_payload={"card": "5500-0000-0000-0004"},
    )

    html = detail(admin_client, job)

    assert "4111-1111-1111-1111" not in html
    assert "tok_live_secret" not in html
    assert "5500-0000-0000-0004" not in html
    assert "secure job type: not shown" in html


def test_detail__stored_html_is_escaped(admin_client: Client) -> None:
    job = make_job(
        queue=XSS,
        payload={"name": XSS},
        result=XSS,
        message=XSS,
        job_id=XSS,
        unique_key=XSS,
        unique_expires_at=timezone.now() + timedelta(hours=1),
        errors=[{"attempt": 1, "message": XSS, "traceback": XSS, "exception_class": XSS}],
    )

    html = detail(admin_client, job)

    assert "<script>alert(" not in html
    assert "&lt;script&gt;alert(" in html


def test_changelist__stored_html_is_escaped(admin_client: Client) -> None:
    make_job(queue=XSS, job_type=XSS)

    html = changelist(admin_client).content.decode()

    assert "<script>alert(" not in html
    assert "&lt;script&gt;alert(" in html


def test_detail__unique_key_and_id_holds(admin_client: Client) -> None:
    until = timezone.now() + timedelta(hours=1)
    held = make_job(
        job_id="draft:1",
        unique_key="report:team-7",
        unique_mode="until_executed",
        unique_expires_at=until,
    )
    freed = make_job(
        job_id="draft:2",
        job_id_hash=None,
        unique_key="report:team-8",
        unique_key_hash=None,
        unique_expires_at=until,
    )

    html = detail(admin_client, held)
    assert "report:team-7" in html
    assert "until executed" in html.lower()
    assert icon(html, "id_held") == icon(html, "unique_key_held") == "True"
    html = detail(admin_client, freed)
    assert "report:team-8" in html
    assert icon(html, "id_held") == icon(html, "unique_key_held") == "False"


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

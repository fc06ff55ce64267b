"""The console's pages and actions, as every kind of user."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_jobqueue.models import Job, JobStatus, QueuePause, ScheduleJob
from django_jobqueue.store.workerstats import StatsBuffer, register_worker
from tests.maintenance_helpers import make_job, make_jobs

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "nonstaff", "staff", "permitted", "superuser")


def url(name, *args):
    return reverse(f"django_jobqueue_console:{name}", args=args)


@pytest.fixture
def dead():
    return make_job(
        status=JobStatus.MAX_RETRY,
        attempt=4,
        payload={"to": "<script>alert(1)</script>"},
        errors=[
            {
                "attempt": 4,
                "exception_class": "ValueError",
                "message": "boom",
                "traceback": "Traceback <b>x</b>",
                "at": "2026-12-01T10:00:00Z",
            }
        ],
    )


def pages(job):
    return [url("overview"), url("jobs"), url("job", job.jid), url("workers"), url("schedules")]


@pytest.mark.parametrize("role", ROLES)
def test_pages__staff_only(clients, dead, role):
    expected = {"anonymous": 302, "nonstaff": 403}.get(role, 200)
    for page in pages(dead):
        response = clients[role].get(page)
        assert response.status_code == expected, page
        if role == "anonymous":
            assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.parametrize(
    ("action", "after"), [("retry", JobStatus.INIT), ("cancel", None), ("delete", "gone")]
)
@pytest.mark.parametrize("role", ROLES)
def test_job_actions__need_their_permission(clients, role, action, after):
    job = make_job(status=JobStatus.MAX_RETRY if action != "cancel" else JobStatus.INIT)
    response = clients[role].post(url("job_action", job.jid, action))
    allowed = role in ("permitted", "superuser")
    expected = 302 if role == "anonymous" or allowed else 403
    assert response.status_code == expected
    row = Job.objects.filter(pk=job.pk).first()
    if not allowed:
        assert row is not None and row.status == job.status
        assert not LogEntry.objects.exists()
        return
    if after == "gone":
        assert row is None
    else:
        assert row.status == (after or JobStatus.CANCELLED)
    entry = LogEntry.objects.get()
    assert entry.change_message.startswith(f"console: {action}")


@pytest.mark.parametrize("role", ROLES)
def test_pause_and_resume__need_pause_queue(clients, role):
    allowed = role in ("permitted", "superuser")
    response = clients[role].post(url("queue_action", "emails", "pause"))
    assert response.status_code == (302 if role == "anonymous" or allowed else 403)
    assert QueuePause.objects.filter(queue="emails").exists() is allowed
    if allowed:
        assert b"paused" in clients[role].get(url("overview")).content
        clients[role].post(url("queue_action", "emails", "resume"))
        assert not QueuePause.objects.exists()
        assert LogEntry.objects.count() == 2


@pytest.mark.parametrize("role", ROLES)
def test_schedule_actions__need_manage_schedule(clients, role):
    ScheduleJob.objects.create(
        name="nightly", queue="default", job_type="maint.noop", cron="0 3 * * *"
    )
    allowed = role in ("permitted", "superuser")
    response = clients[role].post(url("schedule_action", "nightly", "disable"))
    assert response.status_code == (302 if role == "anonymous" or allowed else 403)
    assert ScheduleJob.objects.get().enabled is not allowed


def test_selection__shows_the_count_then_works_in_batches(clients, monkeypatch):
    from django_jobqueue.console import actions

    monkeypatch.setattr(actions, "BATCH_SIZE", 2)
    jobs = make_jobs(5, status=JobStatus.ERROR)
    pks = [str(j.pk) for j in jobs]
    client = clients["permitted"]
    response = client.post(url("selection"), {"action": "retry", "pk": pks})
    assert response.status_code == 200 and b"Retry 5 jobs" in response.content
    assert Job.objects.filter(status=JobStatus.ERROR).count() == 5  # nothing yet
    response = client.post(url("selection"), {"action": "retry", "pk": pks, "confirm": "yes"})
    assert response.status_code == 302
    assert Job.objects.filter(status=JobStatus.INIT).count() == 5
    assert "selection of 5 (dead 5, waiting 0)" in LogEntry.objects.get().change_message


def test_selection__refuses_more_than_a_page_and_needs_the_permission(clients):
    response = clients["staff"].post(url("selection"), {"action": "delete", "pk": ["1"]})
    assert response.status_code == 403
    pks = [str(n) for n in range(1, 52)]
    response = clients["superuser"].post(
        url("selection"), {"action": "delete", "pk": pks}, follow=True
    )
    assert b"Tick 1 to 50 jobs" in response.content


def test_forms__are_csrf_checked(clients, dead):
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.get(username="root"))
    assert client.post(url("job_action", dead.jid, "retry")).status_code == 403
    assert Job.objects.get(pk=dead.pk).status == JobStatus.MAX_RETRY


def test_job_page__escapes_payload_and_traceback(clients, dead):
    body = clients["staff"].get(url("job", dead.jid)).content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "Traceback &lt;b&gt;x&lt;/b&gt;" in body
    assert "attempt 4 failed: ValueError" in body


def test_secure_payload__shown_nowhere(clients):
    job = make_job(
        secure=True,
        payload={"card": "4111-SECRET"},
        result={"token": "SECRET-RESULT"},
        status=JobStatus.DONE,
    )
    for page in pages(job):
        body = clients["superuser"].get(page).content.decode()
        assert "SECRET" not in body, page
    assert (
        "hidden: the job type is secure"
        in clients["superuser"].get(url("job", job.jid)).content.decode()
    )


def test_jobs_list__filters_keyset_pages_and_rejects_bad_values(clients):
    make_jobs(60, queue="a")
    make_jobs(3, queue="b", status=JobStatus.ERROR)
    client = clients["staff"]
    first = client.get(url("jobs"), {"queue": "a"})
    assert len(first.context["jobs"]) == 50 and first.context["next_url"]
    second = client.get(url("jobs") + first.context["next_url"])
    assert len(second.context["jobs"]) == 10 and not second.context["next_url"]
    assert {j.pk for j in first.context["jobs"]}.isdisjoint({j.pk for j in second.context["jobs"]})
    assert len(client.get(url("jobs"), {"state": "dead"}).context["jobs"]) == 3
    # The ids API calls dead letters "failed"; the console takes that name too.
    assert len(client.get(url("jobs"), {"state": "failed"}).context["jobs"]) == 3
    bad = client.get(url("jobs"), {"sort": "payload; DROP TABLE", "state": "nope"})
    assert bad.status_code == 200 and bad.context["jobs"] == []
    assert "sort" in bad.context["form"].errors and "state" in bad.context["form"].errors
    target = first.context["jobs"][0]
    found = client.get(url("jobs"), {"q": target.jid}).context["jobs"]
    assert [j.pk for j in found] == [target.pk]


def test_overview__counts_and_charts(clients):
    make_jobs(2, queue="mail")
    make_job(queue="mail", status=JobStatus.ERROR)
    buffer = StatsBuffer()
    for _ in range(3):
        buffer.record("mail", "maint.noop", "done", 20)
    buffer.record("mail", "maint.noop", "failed", 20)
    buffer.record("mail", "maint.noop", "retried", 20)
    buffer.record("mail", "maint.noop", "retried", 20)
    buffer.flush("default")
    response = clients["staff"].get(url("overview"))
    row = next(q for q in response.context["queues"] if q.queue == "mail")
    assert (row.waiting, row.dead, row.done_last_hour) == (2, 1, 3)
    # Every failed attempt (two retried, one dead letter), and the dead letters apart.
    assert (row.failed_attempts_last_hour, row.dead_letters_last_hour) == (3, 1)
    body = response.content.decode()
    assert "Failed attempts (1 h)" in body and "Dead letters (1 h)" in body
    assert body.count('class="jq-bar jq-done"') == 2 and "done (3)" in body
    assert body.count('class="jq-bar jq-dead-letters"') == 2 and "dead letters (1)" in body
    assert "retried (2)" in body
    assert '<meta http-equiv="refresh"' in body


def test_overview__columns_use_the_state_words(clients):
    """docs/console.md#states: Scheduled and Waiting count init and retry jobs alike by
    their run_at, the retry ones named beside; Failed is the dead letters."""
    later = timezone.now() + timedelta(hours=1)
    make_jobs(2, queue="mail")
    make_job(queue="mail", status=JobStatus.RETRY)
    make_jobs(3, queue="mail", status=JobStatus.RETRY, run_at=later)
    make_job(queue="mail", status=JobStatus.INIT, run_at=later)
    make_job(queue="mail", status=JobStatus.MAX_RETRY)
    make_job(queue="mail", status=JobStatus.ERROR)
    response = clients["staff"].get(url("overview"))
    row = next(q for q in response.context["queues"] if q.queue == "mail")
    assert row.by_state == {"scheduled": 4, "waiting": 3, "running": 0, "failed": 2}
    assert (row.retrying, row.retrying_due, row.retrying_scheduled) == (4, 1, 3)
    body = response.content.decode()
    head = body[body.index("<thead>") : body.index("</thead>")]
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", head)
    assert headers[:5] == ["Queue", "Waiting", "Scheduled", "Running", "Failed"]
    assert "Retrying" not in head and "Dead<" not in head
    cells = body[body.index('data-queue="mail"') :]
    assert "3 <span" in cells and "(1 retry)" in cells  # waiting: 2 init + 1 retry
    assert "4 <span" in cells and "(3 retry)" in cells  # scheduled: 1 init + 3 retry
    assert "state=failed" in cells and "state=dead" not in cells


def test_workers_page__lists_live_workers(clients):
    register_worker("default", "host-a:42", host="host-a", pid=42, concurrency=4)
    body = clients["staff"].get(url("workers")).content.decode()
    assert "host-a:42" in body and "Live (1)" in body


def test_unknown_action__is_404(clients, dead):
    assert clients["superuser"].post(url("job_action", dead.jid, "explode")).status_code == 404
    assert clients["superuser"].get(url("job_action", dead.jid, "retry")).status_code == 405

"""The example project's newsletter app: sign-up view, signal and job handlers.

The app (``example_project.newsletter``) is in ``tests.settings.INSTALLED_APPS`` so its
tables exist in the test database; its URLs and the top-level ``templates/`` folder
are switched on per test with ``override_settings``.
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import django
import pytest
from django.conf import settings
from django.core import mail
from django.db import transaction
from django.test import Client, override_settings

from django_jobqueue.models import Job, JobStatus
from example_project.newsletter import jobs
from example_project.newsletter.models import Delivery, Issue, Subscriber
from example_project.newsletter.services import AlreadySubscribed, subscribe

#: Mail into django.core.mail.outbox. Django 6.1 wants MAILERS (and warns, an error
#: here, when a project sends mail without it); older versions know EMAIL_BACKEND.
LOCMEM_MAIL = (
    {"MAILERS": {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}}
    if django.VERSION >= (6, 1)
    else {"EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend"}
)

SITE = override_settings(
    ROOT_URLCONF="example_project.urls",
    TEMPLATES=[
        {
            **settings.TEMPLATES[0],
            "DIRS": [settings.BASE_DIR / "templates"],
        }
    ],
    **LOCMEM_MAIL,
)


def ctx(attempt: int = 1) -> SimpleNamespace:
    """A stand-in for the worker's JobContext: handlers here read only ``attempt``."""
    return SimpleNamespace(attempt=attempt, jid="test", queue="test")


@pytest.fixture
def client_site():
    with SITE:
        yield Client()


@pytest.mark.django_db(transaction=True)
def test_signup__saves_subscriber_and_welcome_job_together(client_site):
    response = client_site.post("/", {"email": " Ada@Example.com ", "name": "Ada"})

    assert response.status_code == 302
    assert response["Location"] == "/thanks/"
    subscriber = Subscriber.objects.get()
    assert subscriber.email == "ada@example.com"
    job = Job.objects.get()
    assert job.job_type == "newsletter.welcome"
    assert job.queue == "emails"
    assert job.status == JobStatus.INIT
    assert job.payload == {"subscriber_id": subscriber.pk}
    assert subscriber.welcome_jid == job.jid


@pytest.mark.django_db(transaction=True)
def test_signup__get_shows_the_form(client_site):
    response = client_site.get("/")

    assert response.status_code == 200
    assert b'name="email"' in response.content


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("email", ["not-an-address", ""])
def test_signup__invalid_form_writes_neither(client_site, email):
    response = client_site.post("/", {"email": email})

    assert response.status_code == 200
    assert response.context["form"].errors["email"]
    assert Subscriber.objects.count() == 0
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_signup__already_subscribed_writes_nothing_more(client_site):
    client_site.post("/", {"email": "ada@example.com"})

    response = client_site.post("/", {"email": "ADA@example.com"})

    assert response.status_code == 200
    assert "already subscribed" in str(response.context["form"].errors["email"])
    assert Subscriber.objects.count() == 1
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_signup__error_after_the_enqueue_rolls_back_subscriber_and_job(client_site):
    # The last statement of the sign-up transaction (storing the welcome jid on the
    # subscriber) fails after the job was enqueued: both must roll back.
    real_save = Subscriber.save

    def failing_save(self, *args, **kwargs):
        if kwargs.get("update_fields"):
            raise RuntimeError("disk full")
        return real_save(self, *args, **kwargs)

    with mock.patch.object(Subscriber, "save", failing_save):
        with pytest.raises(RuntimeError, match="disk full"):
            client_site.post("/", {"email": "ada@example.com"})

    assert Subscriber.objects.count() == 0
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_subscribe__duplicate_that_passed_the_form_leaves_one_subscriber_and_one_job():
    subscribe("ada@example.com")

    with pytest.raises(AlreadySubscribed):
        subscribe("ada@example.com")

    assert Subscriber.objects.count() == 1
    assert Job.objects.filter(job_type="newsletter.welcome").count() == 1


@pytest.mark.django_db(transaction=True)
def test_publishing_an_issue__signal_enqueues_its_announcement_once():
    issue = Issue.objects.create(title="Draft")
    assert Job.objects.count() == 0

    issue.publish()
    issue.title = "Issue 1"
    issue.save()  # saved again while published: no second announcement

    job = Job.objects.get()
    assert job.job_type == "newsletter.announce_issue"
    assert job.queue == "newsletter"
    assert job.payload == {"issue_id": issue.pk}
    issue.refresh_from_db()
    assert issue.announce_jid == job.jid
    assert issue.published_at is not None


@pytest.mark.django_db(transaction=True)
def test_publishing_an_issue__rolled_back_leaves_no_job():
    issue = Issue.objects.create(title="Draft")

    with pytest.raises(RuntimeError), transaction.atomic():
        issue.published = True
        issue.save()
        raise RuntimeError("editor changed their mind")

    assert Job.objects.count() == 0
    assert not Issue.objects.get().published


@pytest.mark.django_db(transaction=True)
def test_announce_issue__fans_out_one_delivery_per_subscriber_once():
    for n in range(3):
        subscribe(f"reader-{n}@example.com")
    issue = Issue.objects.create(title="Issue 1", published=True)

    first = jobs.announce_issue({"issue_id": issue.pk}, ctx())
    again = jobs.announce_issue({"issue_id": issue.pk}, ctx())  # at-least-once: a rerun

    assert first == {"deliveries_enqueued": 3}
    assert again == {"deliveries_enqueued": 0}
    assert Job.objects.filter(job_type="newsletter.deliver_issue").count() == 3


@pytest.mark.django_db(transaction=True)
def test_deliver_issue__relay_failure_raises_and_success_mails_once():
    with SITE:
        subscriber = subscribe("ada@example.com")
        issue = Issue.objects.create(title="Issue 1", published=True)
        payload = {"issue_id": issue.pk, "subscriber_id": subscriber.pk}
        key = f"{issue.pk}:{subscriber.pk}"
        refused = [a for a in range(1, 50) if jobs.relay_refuses(key, a)]
        accepted = [a for a in range(1, 50) if not jobs.relay_refuses(key, a)]

        with pytest.raises(jobs.RelayUnavailable):
            jobs.deliver_issue(payload, ctx(attempt=refused[0]))
        assert Delivery.objects.count() == 0
        assert jobs.deliver_issue(payload, ctx(attempt=accepted[0])) == {
            "sent_to": "ada@example.com"
        }
        assert jobs.deliver_issue(payload, ctx(attempt=accepted[0])) == {
            "skipped": "already delivered"
        }

        assert Delivery.objects.count() == 1
        assert [m.subject for m in mail.outbox] == ["Issue 1"]


def test_relay_refuses__about_thirty_percent_deterministically():
    verdicts = [jobs.relay_refuses(f"1:{n}", 1) for n in range(2_000)]

    assert 0.25 < sum(verdicts) / len(verdicts) < 0.35
    assert verdicts == [jobs.relay_refuses(f"1:{n}", 1) for n in range(2_000)]


@pytest.mark.django_db(transaction=True)
def test_welcome__mails_once_and_skips_unknown_subscribers():
    with SITE:
        subscriber = subscribe("ada@example.com", "Ada")

        assert jobs.send_welcome({"subscriber_id": subscriber.pk}, ctx()) == {
            "sent_to": "ada@example.com"
        }
        assert jobs.send_welcome({"subscriber_id": subscriber.pk}, ctx()) == {
            "skipped": "already welcomed"
        }
        assert jobs.send_welcome({"subscriber_id": 999_999}, ctx()) == {"skipped": "unsubscribed"}

        assert len(mail.outbox) == 1
        assert Subscriber.objects.get().welcomed_at is not None


@pytest.mark.django_db(transaction=True)
def test_send_test_copy__django_task_becomes_a_job():
    from example_project.newsletter.tasks import send_test_copy

    issue = Issue.objects.create(title="Issue 1")

    result = send_test_copy.enqueue(issue.pk, "editor@example.com")

    job = Job.objects.get()
    assert job.jid == result.id
    assert job.job_type == "example_project.newsletter.tasks.send_test_copy"
    assert job.payload["args"] == [issue.pk, "editor@example.com"]


def test_example_settings__jobqueue_and_schedule_are_valid():
    from django_jobqueue.core.conf import validate_settings
    from django_jobqueue.schedules import validate_cron, validate_timezone
    from example_project import settings as example

    with override_settings(JOBQUEUE=example.JOBQUEUE):
        assert validate_settings() == []
    plan = example.JOBQUEUE["SCHEDULES"]["daily-digest"]
    assert plan["job_type"] == jobs.daily_digest.name
    validate_cron(plan["cron"])
    validate_timezone(plan["timezone"])


@pytest.mark.django_db(transaction=True)
def test_demo_summary__columns_say_what_they_count():
    """No column is headed by a status name that reads like a setting (max_retry)."""
    from io import StringIO

    from django.core.management import call_command

    from tests.maintenance_helpers import make_job

    make_job(job_type="t.a", status=JobStatus.DONE)
    make_job(job_type="t.a", status=JobStatus.DONE, errors=[{"error": "x"}])
    make_job(job_type="t.a", status=JobStatus.MAX_RETRY, errors=[{"error": "x"}] * 4)
    make_job(job_type="t.b", status=JobStatus.DONE)
    out = StringIO()
    call_command("demo_summary", stdout=out)
    lines = out.getvalue().splitlines()

    assert lines[0].split() == [
        "job",
        "type",
        "done",
        "retried",
        "failed",
        "attempts",
        "dead",
        "total",
    ]
    assert lines[2].split() == ["t.a", "2", "2", "5", "1", "3"]
    assert lines[3].split() == ["t.b", "1", "0", "0", "0", "1"]
    assert lines[5].split() == ["all", "3", "2", "5", "1", "4"]
    assert any("every job in the demo database" in text for text in lines)
    # How to start afresh: cleaning var/ empties SQLite only.
    from django.db import connection

    afresh = (
        "git clean -fdX example_project/var" if connection.vendor == "sqlite" else "empty database"
    )
    assert any(afresh in text for text in lines), lines
    assert lines[-1].startswith("3 done, 2 retried (5 failed attempts), 1 dead")


@pytest.mark.django_db(transaction=True)
def test_example_logging__one_line_per_failed_attempt_and_the_traceback_in_the_file(tmp_path):
    """The demo's terminal: one line per failure; WORKERS_LOG: the traceback."""
    import re

    from django_jobqueue import enqueue_job
    from tests.workers_helpers import run_workers

    issue = Issue.objects.create(title="Issue 1", published=False)  # no announcement
    for number in range(100):  # about 30 % are refused: find one refused at attempt 1
        subscriber = Subscriber.objects.create(email=f"reader-{number}@example.com")
        if jobs.relay_refuses(f"{issue.pk}:{subscriber.pk}", 1):
            break
    else:
        pytest.fail("no subscriber's delivery is refused at attempt 1")
    payload = {"issue_id": issue.pk, "subscriber_id": subscriber.pk}
    jid = enqueue_job(None, jobs.deliver_issue.name, payload, max_retry=0)["jid"]
    log = tmp_path / "workers.log"

    proc = run_workers(
        "--burst",
        env={"DJANGO_SETTINGS_MODULE": "example_project.settings", "WORKERS_LOG": str(log)},
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = [line for line in proc.stderr.splitlines() if "job failed" in line]
    assert len(failed) == 1, proc.stderr[-3000:]
    assert re.fullmatch(
        rf"\d\d:\d\d:\d\d ERROR job failed jid={jid} type=newsletter\.deliver_issue "
        r"attempt=1 status=max_retry error=RelayUnavailable: The mail relay refused "
        rf"issue {issue.pk} for {re.escape(subscriber.email)} \(attempt 1\)\.",
        failed[0],
    ), failed[0]
    assert "Traceback" not in proc.stderr
    text = log.read_text()
    assert re.search(
        rf"INFO \[\d+\] django_jobqueue\.worker\.executor: job finished jid={jid} ", text
    )
    assert "Traceback (most recent call last):" in text
    assert f"RelayUnavailable: The mail relay refused issue {issue.pk}" in text


@pytest.mark.django_db(transaction=True)
def test_demo_token__prints_a_curl_line_the_gateway_accepts(client_site, tmp_path, monkeypatch):
    """make demo's banner: demo_token's curl line enqueues a job through the example
    project's sdk/ with the token it printed; a second run reuses that token."""
    import re
    import shlex
    from io import StringIO

    from django.core.management import call_command

    from django_jobqueue.store.apitokens import authenticate
    from example_project.newsletter.management.commands import demo_token

    monkeypatch.setattr(demo_token, "token_file", lambda: tmp_path / "var" / "demo-token")
    out = StringIO()
    call_command("demo_token", "--port", "8123", stdout=out)
    again = StringIO()
    call_command("demo_token", "--port", "8123", stdout=again)

    words = shlex.split(out.getvalue())
    assert words[0] == "curl"
    assert words[-1] == "http://127.0.0.1:8123/sdk/jobs"
    token = re.fullmatch(r"Authorization: Bearer (\S+)", words[2]).group(1)
    assert (tmp_path / "var" / "demo-token").read_text().strip() == token
    assert again.getvalue() == out.getvalue()
    assert sorted(authenticate(token).scopes) == ["produce", "read"]
    body = words[words.index("-d") + 1]

    response = client_site.post(
        "/sdk/jobs",
        data=body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )

    assert response.status_code == 201, response.content
    job = Job.objects.get(jid=response.json()["jid"])
    assert (job.queue, job.job_type, job.status) == ("emails", "newsletter.daily_digest", "init")

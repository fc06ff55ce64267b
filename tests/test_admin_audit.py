"""The admin's actions write audit rows (docs/console.md "Audit log"), and its
schedules and tokens show times in the one format (docs/console.md "Times")."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_jobqueue.models import ApiToken, AuditEntry, Job, JobStatus, ScheduleJob
from django_jobqueue.store.apitokens import issue_token
from tests import admin_helpers
from tests.admin_helpers import CHANGELIST
from tests.maintenance_helpers import make_job

pytestmark = pytest.mark.django_db

admin_client = admin_helpers.admin_client

#: The one time format, to the second with the zone's name and the age.
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"


def act(client: Client, action: str, jobs: list[Job]) -> Any:
    data = {"action": action, "_selected_action": [job.pk for job in jobs]}
    return client.post(reverse(CHANGELIST), data)


def test_changelist_actions__write_audit_rows(admin_client: Client) -> None:
    dead = make_job(status=JobStatus.MAX_RETRY)
    waiting = make_job(status=JobStatus.INIT)
    act(admin_client, "retry_now", [dead])
    act(admin_client, "cancel", [waiting])
    rows = list(AuditEntry.objects.order_by("pk").values_list("source", "action", "count", "jids"))
    assert rows == [
        ("admin", "retry", 1, dead.jid),
        ("admin", "cancel", 1, waiting.jid),
    ]
    assert set(AuditEntry.objects.values_list("actor", flat=True)) == {"boss"}


def test_job_page_button__writes_an_audit_row(admin_client: Client) -> None:
    dead = make_job(status=JobStatus.ERROR)
    url = reverse("admin:django_jobqueue_job_retry", args=[dead.pk])
    assert admin_client.post(url).status_code == 302
    entry = AuditEntry.objects.get()
    assert (entry.source, entry.action, entry.target) == ("admin", "retry", f"job {dead.jid}")


def test_schedule_and_token_actions__write_audit_rows(admin_client: Client) -> None:
    ScheduleJob.objects.create(
        name="nightly", queue="default", job_type="maint.noop", cron="1 * * * *"
    )
    issue_token("ci", queues=["*"], scopes=["read"])
    admin_client.post(
        reverse("admin:django_jobqueue_schedulejob_changelist"),
        {"action": "disable", "_selected_action": [ScheduleJob.objects.get().pk]},
    )
    admin_client.post(
        reverse("admin:django_jobqueue_apitoken_changelist"),
        {"action": "revoke", "_selected_action": [ApiToken.objects.get().pk]},
    )
    rows = list(AuditEntry.objects.order_by("pk").values_list("action", "target", "count"))
    assert rows == [("disable", "schedules nightly", 1), ("token_revoke", "tokens ci", 1)]


def test_schedules_and_tokens__times_in_the_one_format(admin_client: Client) -> None:
    ScheduleJob.objects.create(
        name="nightly", queue="default", job_type="maint.noop", cron="1 * * * *"
    )
    issue_token("ci", queues=["*"], scopes=["read"])
    for name in ("schedulejob", "apitoken"):
        html = admin_client.get(reverse(f"admin:django_jobqueue_{name}_changelist")).content
        assert not re.search(rb"\d\d/\d\d/\d{4}|a\.m\.|p\.m\.", html), name
    token = ApiToken.objects.get()
    html = admin_client.get(
        reverse("admin:django_jobqueue_apitoken_change", args=[token.pk])
    ).content.decode()
    assert re.search(STAMP + r", \d+ s ago</time>", html)  # created


def test_changelist__state_filter_in_state_words(admin_client: Client) -> None:
    dead = make_job(status=JobStatus.MAX_RETRY)
    make_job(status=JobStatus.DONE)
    html = admin_client.get(reverse(CHANGELIST)).content.decode()
    assert "failed (max_retry)" in html and "waiting (retry)" in html  # the filter's choices
    response = admin_client.get(reverse(CHANGELIST), {"status": "max_retry"})
    assert [job.jid for job in response.context["cl"].result_list] == [dead.jid]

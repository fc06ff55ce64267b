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


def test_token_add_form__writes_a_token_create_row(admin_client: Client) -> None:
    response = admin_client.post(
        reverse("admin:django_jobqueue_apitoken_add"),
        {"name": "deploy", "queues_text": "emails,reports*", "scope_choices": ["produce"]},
    )
    assert response.status_code == 302, response.content
    token = ApiToken.objects.get()
    entry = AuditEntry.objects.get()
    assert (entry.source, entry.actor, entry.action, entry.target, entry.count) == (
        "admin",
        "boss",
        "token_create",
        "token deploy",
        1,
    )
    assert token.prefix not in entry.target  # never the token's text, nor its prefix


def test_token_deletes__write_token_delete_rows(admin_client: Client) -> None:
    issue_token("one", queues=["*"], scopes=["read"])
    issue_token("two", queues=["*"], scopes=["read"])
    one = ApiToken.objects.get(name="one")
    url = reverse("admin:django_jobqueue_apitoken_delete", args=[one.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    admin_client.post(
        reverse("admin:django_jobqueue_apitoken_changelist"),
        {
            "action": "delete_selected",
            "_selected_action": [ApiToken.objects.get().pk],
            "post": "yes",
        },
    )
    assert not ApiToken.objects.exists()
    rows = list(AuditEntry.objects.order_by("pk").values_list("action", "target", "count"))
    assert rows == [("token_delete", "tokens one", 1), ("token_delete", "tokens two", 1)]


def test_job_page_delete__writes_a_delete_row_and_spares_a_running_job(
    admin_client: Client,
) -> None:
    dead = make_job(status=JobStatus.MAX_RETRY)
    url = reverse("admin:django_jobqueue_job_delete", args=[dead.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert not Job.objects.filter(pk=dead.pk).exists()
    entry = AuditEntry.objects.get()
    assert (entry.source, entry.action, entry.target, entry.count, entry.jids) == (
        "admin",
        "delete",
        f"job {dead.jid}",
        1,
        dead.jid,
    )

    running = make_job(status=JobStatus.PROCESSING)
    url = reverse("admin:django_jobqueue_job_delete", args=[running.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert Job.objects.filter(pk=running.pk).exists()
    assert AuditEntry.objects.count() == 1


def test_schedule_delete__audited_and_refused_for_a_declared_plan(admin_client: Client) -> None:
    made = ScheduleJob.objects.create(
        name="adhoc", queue="default", job_type="maint.noop", cron="1 * * * *", source="api"
    )
    declared = ScheduleJob.objects.create(
        name="nightly", queue="default", job_type="maint.noop", cron="0 3 * * *", source="code"
    )
    url = reverse("admin:django_jobqueue_schedulejob_delete", args=[made.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    url = reverse("admin:django_jobqueue_schedulejob_delete", args=[declared.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert list(ScheduleJob.objects.values_list("name", flat=True)) == ["nightly"]
    rows = list(AuditEntry.objects.values_list("source", "actor", "action", "target", "count"))
    assert rows == [("admin", "boss", "delete", "schedule adhoc: 1 * * * *", 1)]


def test_schedule_delete_selected__audited_and_refused_with_a_declared_plan(
    admin_client: Client,
) -> None:
    for name, source in (("a", "api"), ("b", "manual"), ("c", "settings")):
        ScheduleJob.objects.create(
            name=name, queue="default", job_type="maint.noop", cron="1 * * * *", source=source
        )
    changelist = reverse("admin:django_jobqueue_schedulejob_changelist")

    def delete_selected(names: list[str]) -> int:
        pks = ScheduleJob.objects.filter(name__in=names).values_list("pk", flat=True)
        data = {"action": "delete_selected", "_selected_action": list(pks), "post": "yes"}
        return admin_client.post(changelist, data).status_code

    assert delete_selected(["a", "c"]) == 403
    assert not AuditEntry.objects.exists()
    assert delete_selected(["a", "b"]) == 302
    assert list(ScheduleJob.objects.values_list("name", flat=True)) == ["c"]
    rows = list(AuditEntry.objects.order_by("pk").values_list("action", "target"))
    assert rows == [("delete", "schedule a: 1 * * * *"), ("delete", "schedule b: 1 * * * *")]

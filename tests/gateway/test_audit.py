"""The gateway's operator routes write one audit row each: who (the token's name),
what, how many (docs/console.md "Audit log")."""

from __future__ import annotations

import pytest

from django_jobqueue.models import AuditEntry, Job, JobStatus
from tests.maintenance_helpers import make_job, make_jobs

from .conftest import Api

pytestmark = pytest.mark.django_db


@pytest.fixture
def ops_api(make_token) -> Api:
    return Api(make_token(scopes=("admin", "produce", "read"), name="ops-bot"))


def only_row(action: str) -> AuditEntry:
    rows = list(AuditEntry.objects.filter(action=action))
    assert len(rows) == 1, rows
    return rows[0]


def test_cancel_and_retry_routes__write_an_audit_row(ops_api):
    waiting = make_job(status=JobStatus.INIT)
    dead = make_job(status=JobStatus.MAX_RETRY)

    assert ops_api.post(f"/sdk/jobs/{waiting.jid}/cancel").json()["cancelled"] is True
    assert ops_api.post(f"/sdk/jobs/{dead.jid}/retry").json() == {"retried": True}

    cancel = only_row("cancel")
    assert (cancel.source, cancel.actor, cancel.target, cancel.count, cancel.jids) == (
        "gateway",
        "ops-bot",
        f"job {waiting.jid}",
        1,
        waiting.jid,
    )
    retry = only_row("retry")
    assert (retry.source, retry.actor, retry.count, retry.detail) == (
        "gateway",
        "ops-bot",
        1,
        {"dead": 1, "waiting": 0},
    )
    assert Job.objects.get(pk=dead.pk).status == JobStatus.INIT


def test_pause_and_resume_routes__write_an_audit_row(ops_api):
    ops_api.post("/sdk/queues/mail/pause")
    ops_api.post("/sdk/queues/mail/pause")  # no change, still an action taken
    ops_api.post("/sdk/queues/mail/resume")
    rows = list(AuditEntry.objects.order_by("pk").values_list("action", "target", "count"))
    assert rows == [
        ("pause", "queue mail", 1),
        ("pause", "queue mail", 0),
        ("resume", "queue mail", 1),
    ]
    assert set(AuditEntry.objects.values_list("source", "actor")) == {("gateway", "ops-bot")}


def test_bulk_route__one_row_for_every_batch(ops_api, pro, monkeypatch):
    from django_jobqueue import operations

    jobs = make_jobs(7, queue="big", status=JobStatus.ERROR)
    response = ops_api.post("/sdk/jobs/bulk", {"queue": "big", "action": "retry"})
    assert response.json()["changed"] == 7
    row = only_row("retry")
    assert (row.count, row.detail) == (7, {"dead": 7, "waiting": 0})
    assert set(row.jids.split(",")) == {job.jid for job in jobs}
    assert row.target == "jobs matching queue=big"
    assert operations.OPERATOR_ACTIONS  # the same batches as the console's


def test_refused_route__writes_no_row(api):
    dead = make_job(status=JobStatus.MAX_RETRY)
    assert api.post(f"/sdk/jobs/{dead.jid}/retry").status_code == 403  # no admin scope
    assert api.post("/sdk/queues/mail/pause").status_code == 403
    assert not AuditEntry.objects.exists()

"""``POST /sdk/jobs/bulk`` with a ``filter`` (docs/gateway.md, docs/console.md "Search
syntax"): counts on success, 422 on a bad filter, 403 without the admin scope or on a
queue the token may not use, 402 without Pro; one audit row per call."""

from __future__ import annotations

import pytest

from django_jobqueue.models import AuditEntry, Job, JobStatus
from tests.maintenance_helpers import make_job, make_jobs

from .conftest import Api

pytestmark = pytest.mark.django_db


def test_retry_by_payload_filter__answers_counts_and_audits(admin_api: Api, pro):
    wanted = make_jobs(3, queue="mail", status=JobStatus.MAX_RETRY, payload={"customer_id": 42})
    other = make_job(queue="mail", status=JobStatus.MAX_RETRY, payload={"customer_id": 7})

    response = admin_api.post(
        "/sdk/jobs/bulk", {"action": "retry", "filter": "state:failed payload.customer_id:42"}
    )

    assert response.status_code == 200, response.json()
    assert response.json() == {
        "action": "retry",
        "changed": 3,
        "detail": {"dead": 3, "waiting": 0},
    }
    assert set(Job.objects.filter(status=JobStatus.INIT).values_list("jid", flat=True)) == {
        job.jid for job in wanted
    }
    assert Job.objects.get(pk=other.pk).status == JobStatus.MAX_RETRY
    (row,) = AuditEntry.objects.all()
    assert (row.source, row.action, row.count) == ("gateway", "retry", 3)
    assert "payload.customer_id=42" in row.target


def test_delete_by_filter__leaves_running_jobs(admin_api: Api, pro):
    make_jobs(2, queue="old", status=JobStatus.DONE)
    make_job(queue="old", status=JobStatus.PROCESSING)
    response = admin_api.post("/sdk/jobs/bulk", {"action": "delete", "filter": "queue:old"})
    assert response.json() == {
        "action": "delete",
        "changed": 2,
        "detail": {"deleted": 2, "running": 1},
    }


def test_bad_filter__422_naming_the_term(admin_api: Api, pro):
    make_job(queue="mail", status=JobStatus.MAX_RETRY)
    response = admin_api.post("/sdk/jobs/bulk", {"action": "retry", "filter": "colour:red"})
    assert response.status_code == 422
    body = response.json()
    assert (body["error"], body["field"], body["reason"]) == (
        "invalid_request",
        "filter",
        "invalid_filter",
    )
    assert "colour:red" in body["detail"]
    assert not AuditEntry.objects.exists()


def test_without_admin_scope__403(api: Api, pro):
    response = api.post("/sdk/jobs/bulk", {"action": "retry", "filter": "queue:mail"})
    assert response.status_code == 403


def test_without_pro__402(admin_api: Api):
    response = admin_api.post("/sdk/jobs/bulk", {"action": "retry", "filter": "queue:mail"})
    assert response.status_code == 402
    assert response.json()["error"] == "pro_required"


def test_queue_limited_token__acts_on_its_queues_only(make_token, pro):
    limited = Api(make_token(scopes=("admin",), queues=("mail*",)))
    mine = make_job(queue="mail-eu", status=JobStatus.ERROR)
    theirs = make_job(queue="billing", status=JobStatus.ERROR)

    assert (
        limited.post("/sdk/jobs/bulk", {"action": "retry", "filter": "queue:billing"}).status_code
        == 403
    )
    response = limited.post("/sdk/jobs/bulk", {"action": "retry", "filter": "state:failed"})
    assert response.json()["changed"] == 1
    assert Job.objects.get(pk=mine.pk).status == JobStatus.INIT
    assert Job.objects.get(pk=theirs.pk).status == JobStatus.ERROR

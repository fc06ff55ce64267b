"""The worker protocol's heartbeat stores an optional ``progress`` member with the lease
(docs/gateway.md, docs/console.md "Progress"); a bad one is 422 and changes nothing."""

from __future__ import annotations

import pytest

from django_jobqueue.enqueue import enqueue_job
from django_jobqueue.models import Job

from .conftest import Api

pytestmark = pytest.mark.django_db


def _claimed(api: Api) -> tuple[str, str]:
    api.post("/sdk/worker/register", {"name": "node-1", "host": "h", "queues": ["gw"]})
    jid = enqueue_job("gw", "gw.echo", {"n": 1})["jid"]
    [job] = api.post("/sdk/worker/claim", {"queues": ["gw"], "worker": "node-1"}).json()["jobs"]
    return jid, job["lease_token"]


def test_gateway_heartbeat__stores_progress(make_token):
    api = Api(make_token())
    jid, token = _claimed(api)
    beat = api.post(
        f"/sdk/worker/jobs/{jid}/heartbeat",
        {"lease_token": token, "progress": {"done": 3, "total": 7, "message": "pages"}},
    )
    assert beat.json() == {"cancel_requested": False}
    assert Job.objects.get(jid=jid).progress == {"done": 3, "total": 7, "message": "pages"}

    bad = api.post(
        f"/sdk/worker/jobs/{jid}/heartbeat",
        {"lease_token": token, "progress": {"done": 9, "total": 7}},
    )
    assert bad.status_code == 422
    assert bad.json()["field"] == "progress"
    assert Job.objects.get(jid=jid).progress["done"] == 3

"""The worker fail route's error and exception_class: odd text is a 422, never a 500."""

from __future__ import annotations

import pytest

from django_jobqueue.enqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus


def _claimed(api) -> tuple[str, str]:
    jid = enqueue_job("gw", "gw.echo", None)["jid"]
    response = api.post("/sdk/worker/claim", {"queues": ["gw"]})
    assert response.status_code == 200, response.content
    [job] = response.json()["jobs"]
    return jid, job["lease_token"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "extra",
    [
        {"exception_class": "bad\x00Class"},
        {"exception_class": "lone\udc80"},
        {"exception_class": "x" * 201},
        {"exception_class": 42},
        {"exception_class": None},
        {"exception_class": ["ValueError"]},
        {"error": "boom\x00tail"},
        {"error": "boom\ud800"},
        {"error": 7},
    ],
)
def test_fail__unstorable_or_wrong_typed_text_is_422_and_the_lease_holds(api, extra):
    jid, token = _claimed(api)
    response = api.post(f"/sdk/worker/jobs/{jid}/fail", {"lease_token": token, **extra})
    assert response.status_code == 422, response.content
    assert response.json()["error"] == "invalid_request"
    assert Job.objects.get(jid=jid).status == JobStatus.PROCESSING  # nothing stored
    ok = api.post(f"/sdk/worker/jobs/{jid}/fail", {"lease_token": token, "retry": False})
    assert ok.json() == {"status": "error"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "name",
    ["a.b.c.d.e.f.g.h.i.j.K", "ÜnicodeÉrror", "Weird Name With Spaces", "", ".", "x" * 200],
)
def test_fail__odd_but_storable_class_names_are_stored(api, name):
    jid, token = _claimed(api)
    response = api.post(
        f"/sdk/worker/jobs/{jid}/fail",
        {"lease_token": token, "error": "e" * 10_000, "exception_class": name, "retry": False},
    )
    assert response.status_code == 200, response.content
    stored = Job.objects.get(jid=jid)
    assert stored.errors[-1]["exception_class"] == name

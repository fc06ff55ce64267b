"""Flow-control limits over the gateway (docs/limits.md): ``limit_key`` on an enqueue,
``GET/POST /sdk/limits`` and ``POST /sdk/limits/clear`` (admin scope), and a gateway
worker's claim held to a limit."""

from __future__ import annotations

from typing import Any

import pytest

from django_jobqueue.models import AuditEntry, Job, LimitOverride
from django_jobqueue.store import limits

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_limits() -> Any:
    limits.clear_cache()
    yield
    limits.clear_cache()


def test_enqueue__stores_limit_key_and_names_it_when_bad(api):
    body = {"job_type": "limits.run", "queue": "lim", "payload": {}, "limit_key": "tenant-1"}
    response = api.post("/sdk/jobs", body)
    assert response.status_code == 201, response.json()
    assert Job.objects.get(jid=response.json()["jid"]).limit_key == "tenant-1"
    bad = api.post("/sdk/jobs", {**body, "limit_key": "k" * 201})
    assert bad.status_code == 422
    assert bad.json()["field"] == "limit_key"
    assert Job.objects.count() == 1


def test_limits__set_list_clear_with_an_admin_token(admin_api):
    response = admin_api.post(
        "/sdk/limits", {"target": "type:limits.run", "concurrency": 2, "partition": "key"}
    )
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "target": "type:limits.run",
        "effective": {"concurrency": 2, "partition": "key"},
    }
    (row,) = admin_api.get("/sdk/limits").json()["limits"]
    assert row["target"] == "type:limits.run"
    assert row["override"] == {"concurrency": 2, "partition": "key"}
    assert row["in_flight"] == 0
    assert admin_api.post("/sdk/limits/clear", {"target": "type:limits.run"}).json() == {
        "cleared": True
    }
    assert admin_api.get("/sdk/limits").json() == {"limits": []}
    assert list(AuditEntry.objects.values_list("source", "action")) == [
        ("gateway", "limit_set"),
        ("gateway", "limit_clear"),
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"target": "sms", "concurrency": 1}, "target"),
        ({"target": "queue:sms", "rate": "fast"}, None),
        ({"target": "queue:sms", "concurrency": 1, "fair": True}, None),
        ({"target": "queue:sms", "concurrency": 0}, "concurrency"),
        ({"target": "queue:sms", "concurrency": 1, "extra": 1}, "extra"),
    ],
)
def test_limits__bad_input_is_422_and_writes_nothing(admin_api, body, field):
    response = admin_api.post("/sdk/limits", body)
    assert response.status_code == 422, response.json()
    assert response.json()["error"] == "invalid_request"
    if field is not None:
        assert field in (response.json()["field"] or "")
    assert not LimitOverride.objects.exists()


def test_limits__refused_without_the_admin_scope(api):
    assert api.get("/sdk/limits").status_code == 403
    assert api.post("/sdk/limits", {"target": "queue:x", "concurrency": 1}).status_code == 403
    assert not LimitOverride.objects.exists()


def test_worker_claim__holds_to_the_limit(api):
    for _ in range(4):
        api.post("/sdk/jobs", {"job_type": "limits.run", "queue": "lim", "payload": {}})
    limits.set_limit("default", "type:limits.run", {"concurrency": 1})
    claim = {"queues": ["lim"], "limit": 10}
    first = api.post("/sdk/worker/claim", claim)
    assert first.status_code == 200, first.json()
    assert len(first.json()["jobs"]) == 1
    second = api.post("/sdk/worker/claim", claim)
    assert second.json()["jobs"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"target": "queue:sms", "rate": "0/s"}, "rate"),
        ({"target": "queue:sms", "rate": "-1/m"}, "rate"),
        ({"target": "queue:sms", "rate": "100/x"}, "rate"),
        ({"target": "queue:sms", "rate": "99999999999/s"}, "rate"),
        ({"target": "queue:sms", "rate": 5}, "rate"),
        ({"target": "queue:sms", "rate": "1/s", "burst": 10**12}, "burst"),
        ({"target": "queue:sms", "concurrency": "3"}, "concurrency"),
        ({"target": "queue:sms", "concurrency": 1.5}, "concurrency"),
        ({"target": "queue:sms", "burst": 5}, "burst"),
        ({"target": "queue:sms", "concurrency": 1, "fair": "yes"}, "fair"),
        ({"target": "queue:sms", "concurrency": 1, "partition": "payload"}, "partition"),
        ({"target": "queue:sms", "concurrency": 1, "partition": "payload.a\x00"}, "partition"),
        ({"target": "type:a\x00b", "concurrency": 1}, "target"),
        ({"target": "type:" + "t" * 10_000, "concurrency": 1}, "target"),
        ({"target": "queue:" + "q" * 101, "concurrency": 1}, "target"),
        ({"target": "type:", "concurrency": 1}, "target"),
        ({"target": 7, "concurrency": 1}, "target"),
        ({"concurrency": 1}, "target"),
        ({"target": "queue:sms", "rate": "1/s" + "x" * 10_000}, "rate"),
    ],
)
def test_limits__every_bad_field_is_a_422_naming_it(admin_api, body, field):
    response = admin_api.post("/sdk/limits", body)
    assert response.status_code == 422, response.json()
    assert response.json()["error"] == "invalid_request"
    assert field in (response.json()["field"] or ""), response.json()
    assert not LimitOverride.objects.exists()


@pytest.mark.parametrize(
    "body", [{"target": "type:a\x00"}, {"target": "x" * 10_000}, {}, {"target": "sms"}]
)
def test_limits_clear__a_bad_target_is_a_422_naming_it(admin_api, body):
    response = admin_api.post("/sdk/limits/clear", body)
    assert response.status_code == 422, response.json()
    assert response.json()["field"] == "target"


@pytest.mark.parametrize("raw", ["[]", '"queue:sms"', "{", "null", '{"target": "queue:\\ud800"}'])
def test_limits__a_body_that_is_no_limit_object_is_a_4xx(admin_api, raw):
    response = admin_api.client.post(
        "/sdk/limits",
        data=raw,
        content_type="application/json",
        headers=admin_api._headers(None),
    )
    assert 400 <= response.status_code < 500, response.content
    assert not LimitOverride.objects.exists()


@pytest.mark.parametrize("key", [7, "", "k\x00", ["k"], {"k": 1}, "k" * 10_000])
def test_enqueue__a_bad_limit_key_is_a_422_naming_it(api, key):
    body = {"job_type": "limits.run", "queue": "lim", "payload": {}, "limit_key": key}
    response = api.post("/sdk/jobs", body)
    assert response.status_code == 422, response.json()
    assert response.json()["field"] == "limit_key"
    assert not Job.objects.exists()

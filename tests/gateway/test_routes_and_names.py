"""Gateway answers to unknown routes, empty bodies and queue names off the rule.

Unknown paths under ``/sdk/`` answer the JSON 404 for every method, with CSRF
enforced as a browser-facing site has it; an empty body is ``415 not_json``; a
queue name that breaks the rule of docs/gateway.md "Queue names" is a 422 that
states the rule, on every route that takes one.
"""

from __future__ import annotations

import pytest
from django.test import Client

from django_jobqueue.core.validation import QUEUE_NAME_RULE
from django_jobqueue.models import Job

pytestmark = pytest.mark.django_db(transaction=False)

METHODS = ("get", "post", "put", "patch", "delete", "head", "options")
PATHS = ("/sdk/nope", "/sdk/jobs/x/y/z", "/sdk/", "/sdk/worker/nope/", "/sdk/%2F")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", METHODS)
def test_unknown_route_is_json_404_for_every_method(api, method, path):
    client = Client(enforce_csrf_checks=True)
    response = getattr(client, method)(
        path,
        data="{}" if method not in ("get", "head") else None,
        content_type="application/json",
        headers={"Authorization": f"Bearer {api.token}"},
    )
    assert response.status_code == 404, (method, path, response.content[:200])
    assert response["Content-Type"] == "application/json"
    if method != "head":
        assert response.json()["error"] == "not_found"


@pytest.mark.parametrize("path", ["/sdk/jobs", "/sdk/jobs/batch", "/sdk/worker/claim"])
def test_empty_body_is_415_not_json(api, path):
    for content_type in ("application/json", ""):
        response = api.client.generic(
            "POST",
            path,
            data=b"",
            content_type=content_type,
            headers={"Authorization": f"Bearer {api.token}"},
        )
        assert response.status_code == 415, (path, content_type, response.content)
        assert response.json()["error"] == "not_json"
    assert Job.objects.count() == 0


BAD_QUEUES = ("reports/daily", "back\\slash", ".", "..", "tab\there", "new\nline", "x" * 101)


@pytest.mark.parametrize("queue", BAD_QUEUES)
def test_queue_name_off_the_rule_is_422_naming_it(api, queue):
    job = {"job_type": "gw.echo", "payload": {}, "queue": queue}
    for path, body in (
        ("/sdk/jobs", job),
        ("/sdk/jobs/batch", {"jobs": [job]}),
        ("/sdk/worker/claim", {"queues": [queue], "worker": "w1"}),
    ):
        response = api.post(path, body)
        assert response.status_code == 422, (path, response.content)
        assert "no '/'" in response.json()["detail"] or "100" in response.json()["detail"]
    assert Job.objects.count() == 0


def test_rule_is_stated_in_the_python_error():
    from django_jobqueue.core.exceptions import InvalidOption
    from django_jobqueue.core.validation import check_queue

    with pytest.raises(InvalidOption) as caught:
        check_queue("reports/daily")
    assert QUEUE_NAME_RULE in str(caught.value)

"""A job waiting for its upstream jobs reads as ``blocked`` through the gateway
(docs/workflows.md), never as an error of the response's schema."""

from __future__ import annotations

import pytest

from django_jobqueue import enqueue_job

pytestmark = pytest.mark.django_db


def test_get_a_blocked_job__state_blocked(api):
    upstream = enqueue_job("gw", "gw.echo", {"n": 1})
    dependent = enqueue_job("gw", "gw.echo", {"n": 2}, after=[upstream])
    response = api.get(f"/sdk/jobs/{dependent.jid}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["status"], body["state"]) == ("blocked", "blocked")

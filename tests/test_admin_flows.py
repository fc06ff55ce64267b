"""The jobs changelist's filters by batch and by workflow (docs/workflows.md "Where
to see them"), and its state filter with blocked jobs."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

import django_jobqueue as jq
from tests import admin_helpers
from tests.admin_helpers import CHANGELIST

pytestmark = pytest.mark.django_db

admin_client = admin_helpers.admin_client


def changelist(client: Client, **params: Any) -> Any:
    return client.get(reverse(CHANGELIST), params)


def listed(response: Any) -> set[str]:
    assert response.status_code == 200
    return {job.jid for job in response.context["cl"].result_list}


def test_the_changelist_filters_by_batch_and_by_workflow(admin_client: Client) -> None:
    with jq.batch() as first:
        a = jq.enqueue_job(None, "flows.noop")
        b = jq.enqueue_job(None, "flows.noop")
    with jq.batch() as second:
        c = jq.enqueue_job(None, "flows.noop")
    w = (
        jq.Workflow("nightly <import>")
        .add("fetch", "flows.noop")
        .add("load", "flows.noop", after=["fetch"])
    )
    flow = w.enqueue()
    plain = jq.enqueue_job(None, "flows.noop")

    everything = listed(changelist(admin_client))
    assert everything == {a.jid, b.jid, c.jid, flow["fetch"], flow["load"], plain.jid}
    assert listed(changelist(admin_client, batch=first.id)) == {a.jid, b.jid}
    assert listed(changelist(admin_client, batch=second.id)) == {c.jid}
    assert listed(changelist(admin_client, workflow=flow.id)) == {flow["fetch"], flow["load"]}
    assert listed(changelist(admin_client, workflow=flow.id, status="blocked")) == {flow["load"]}
    assert listed(changelist(admin_client, batch=999_999)) == set()

    html = changelist(admin_client).content.decode()
    assert f"?batch={first.id}" in html and f"?batch={second.id}" in html
    assert f"?workflow={flow.id}" in html
    assert f"nightly &lt;import&gt; {flow.id} (0/2)" in html  # escaped
    assert "?status=blocked" in html


@pytest.mark.parametrize("bad", ["abc", "-1", "0", str(2**70)])
def test_a_bad_batch_or_workflow_parameter_is_the_admins_error_notice(
    admin_client: Client, bad: str
) -> None:
    with jq.batch():
        jq.enqueue_job(None, "flows.noop")
    jq.Workflow("w").add("only", "flows.noop").enqueue()
    for name in ("batch", "workflow"):
        response = changelist(admin_client, **{name: bad})
        # The admin answers an incorrect lookup by redirecting to ?e=1, never a 500.
        assert response.status_code == 302, (name, bad)
        assert response["Location"].endswith("?e=1")

"""The Python client's producer calls against a live gateway (a runserver process):
every call, its typed answer, and each error code mapped to its exception class."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from jobqueue_client import (
    AsyncClient,
    Client,
    DuplicateJob,
    Forbidden,
    GatewayError,
    InvalidRequest,
    LeaseLost,
    NotFound,
    ProRequired,
    RateLimited,
    Unauthorized,
    errors,
)

from django_jobqueue.gateway.errors import STATUS_BY_CODE
from django_jobqueue.models import Job, JobStatus

from .live import live_gateway

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "gw"


def test_enqueue__every_option_reaches_the_job(client):
    run_at = datetime.now(UTC) + timedelta(hours=1)

    answer = client.enqueue(
        "gw.echo",
        {"n": 1},
        queue=QUEUE,
        priority=3,
        run_at=run_at,
        expires_ms=3_600_000,
        timeout_ms=5_000,
        max_retry=7,
    )

    assert answer.status == "enqueued"
    assert not answer.deduplicated
    job = client.get_job(answer.jid)
    assert (job.jid, job.queue, job.job_type, job.state) == (
        answer.jid,
        QUEUE,
        "gw.echo",
        "scheduled",
    )
    assert (job.priority, job.max_retry, job.payload) == (3, 7, {"n": 1})
    assert abs(job.run_at - run_at) < timedelta(seconds=1)
    stored = Job.objects.get(jid=answer.jid)
    assert (stored.timeout_ms, stored.priority) == (5_000, 3)


def test_enqueue__a_unique_key_deduplicates_to_the_holder(client):
    first = client.enqueue("gw.echo", {}, queue=QUEUE, unique_key="k1", delay="1m")
    second = client.enqueue("gw.echo", {}, queue=QUEUE, unique_key="k1", delay="1m")

    assert first.status == "enqueued"
    assert second.deduplicated
    assert second.jid == first.jid


def test_enqueue_batch__answers_each_slot_in_order(client):
    results = client.enqueue_batch(
        [
            {"job_type": "gw.echo", "payload": 1, "queue": QUEUE, "unique_key": "b"},
            {"job_type": "gw.echo", "payload": 2, "queue": QUEUE, "unique_key": "b"},
            {"job_type": "gw.echo", "payload": 3, "queue": QUEUE},
        ]
    )

    assert [r.status for r in results] == ["enqueued", "deduplicated", "enqueued"]
    assert results[1].jid == results[0].jid
    assert Job.objects.filter(queue=QUEUE).count() == 2


def test_enqueue_batch__an_invalid_job_raises_invalid_request_naming_it(client):
    with pytest.raises(InvalidRequest) as raised:
        client.enqueue_batch(
            [
                {"job_type": "gw.echo", "queue": QUEUE},
                {"job_type": "gw.echo", "queue": QUEUE, "priority": 0},
            ]
        )

    assert raised.value.status == 422
    assert raised.value.code == "invalid_request"
    assert raised.value.index == 1
    assert raised.value.field == "jobs[1].priority"
    assert Job.objects.count() == 0


def test_errors__each_refusal_is_its_own_class(client, gateway_url, make_token):
    with pytest.raises(ProRequired) as pro:
        client.enqueue("gw.echo", {}, queue=QUEUE, unique_key="p", unique_mode="until_executed")
    assert (pro.value.status, pro.value.code) == (402, "pro_required")

    with pytest.raises(NotFound) as missing:
        client.get_job("0" * 26)
    assert missing.value.status == 404

    with Client(gateway_url, "jqt_" + "x" * 43) as stranger, pytest.raises(Unauthorized) as bad:
        stranger.enqueue("gw.echo", {}, queue=QUEUE)
    assert bad.value.status == 401

    with Client(gateway_url, make_token(queues=("other",))) as narrow:
        with pytest.raises(Forbidden) as forbidden:
            narrow.enqueue("gw.echo", {}, queue=QUEUE)
        assert forbidden.value.status == 403
        with pytest.raises(Forbidden) as no_scope:
            narrow.retry("0" * 26)
        assert no_scope.value.scope == "admin"

    client.enqueue("gw.echo", {}, queue=QUEUE, id="order-1", delay="1m")
    with pytest.raises(DuplicateJob) as duplicate:
        client.enqueue("gw.echo", {}, queue=QUEUE, id="order-1")
    assert duplicate.value.status == 409
    assert duplicate.value.jid == Job.objects.get(job_id="order-1").jid

    assert Job.objects.count() == 1


def test_errors__a_report_under_a_stale_lease_token_is_lease_lost(client):
    jid = client.enqueue("gw.echo", {"x": 1}, queue=QUEUE).jid
    (claimed,) = client.claim([QUEUE], job_types=["gw.echo"])
    assert claimed.jid == jid

    with pytest.raises(LeaseLost) as lost:
        client.complete(jid, "not-the-lease-token", {"x": 1})

    assert (lost.value.status, lost.value.code) == (409, "lease_lost")
    assert client.complete(jid, claimed.lease_token, {"ok": True}) == "done"
    assert client.get_job(jid).result == {"ok": True}


def test_errors__over_the_rate_is_rate_limited_with_retry_after(make_token):
    with live_gateway({"GATEWAY": {"RATE_PER_MINUTE": 2}}) as url, Client(url, make_token()) as jq:
        jq.enqueue("gw.echo", {}, queue=QUEUE)
        jq.enqueue("gw.echo", {}, queue=QUEUE)
        with pytest.raises(RateLimited) as limited:
            jq.enqueue("gw.echo", {}, queue=QUEUE)

    assert limited.value.status == 429
    assert limited.value.retry_after is not None and limited.value.retry_after > 0
    assert Job.objects.count() == 2


def test_errors__every_gateway_code_has_a_class_of_its_status():
    """Each code the server may answer maps to a client class of the same status
    (the package's own invalid_* codes travel as invalid_request)."""
    answered = {
        code for code in STATUS_BY_CODE if not code.startswith(("invalid_", "unknown_"))
    } - {"wrong_database", "improperly_configured"}
    for code in sorted(answered):
        status = STATUS_BY_CODE[code]
        error = errors.error_from_response(
            status, {"error": code, "detail": "d"}, {"Retry-After": "3"}
        )
        assert type(error) is not GatewayError, code
        assert error.code == code
        assert error.status == status
    fallback = errors.error_from_response(503, {"error": "wrong_database", "detail": "d"}, {})
    assert isinstance(fallback, errors.ServiceUnavailable)


def test_cancel_and_retry(client, gateway_url, make_token):
    waiting = client.enqueue("gw.echo", {}, queue=QUEUE).jid
    scheduled = client.enqueue("gw.echo", {}, queue=QUEUE, delay="1h").jid

    cancelled = client.cancel(waiting)

    assert (cancelled.cancelled, cancelled.cancel_requested) == (True, False)
    assert client.get_job(waiting).state == "cancelled"
    with Client(gateway_url, make_token(scopes=("admin",))) as admin:
        assert admin.retry(scheduled) is True
    assert Job.objects.get(jid=scheduled).run_at <= datetime.now(UTC)


def test_id_verbs__add_set_update_get_list_cancel(client):
    assert client.add(QUEUE, "user/1", {"v": 1}, job_type="gw.echo", delay="1h") is True
    assert client.add(QUEUE, "user/1", {"v": 2}, job_type="gw.echo") is False
    assert client.set(QUEUE, "user/2", {"v": 3}, job_type="gw.echo", delay="1h") is True
    assert client.update(QUEUE, "user/1", {"v": 4}, job_type="gw.echo") is True
    assert client.update(QUEUE, "user/9", {"v": 5}, job_type="gw.echo") is False

    got = client.get(QUEUE, "user/1")
    assert got is not None
    assert (got.id, got.value, got.queue, got.job_type) == ("user/1", {"v": 4}, QUEUE, "gw.echo")
    first = client.list(QUEUE, prefix="user/", limit=1)
    assert [j.id for j in first.jobs] == ["user/1"]
    assert first.next is not None
    second = client.list(QUEUE, prefix="user/", limit=1, cursor=first.next)
    assert [j.id for j in second.jobs] == ["user/2"]

    assert client.cancel_id(QUEUE, "user/1") is True
    assert client.get(QUEUE, "user/1") is None
    assert client.cancel_id(QUEUE, "user/1") is False


def test_async_client__the_same_calls_awaited(gateway_url, make_token):
    token = make_token()

    async def produce():
        async with AsyncClient(gateway_url, token) as jq:
            one = await jq.enqueue("gw.echo", {"a": 1}, queue=QUEUE)
            batch = await jq.enqueue_batch([{"job_type": "gw.echo", "queue": QUEUE}] * 2)
            job = await jq.get_job(one.jid)
            added = await jq.add(QUEUE, "a-1", 1, job_type="gw.echo")
            page = await jq.list(QUEUE, prefix="a-")
            cancelled = await jq.cancel(batch[0].jid)
            with pytest.raises(InvalidRequest) as invalid:
                await jq.enqueue("gw.echo", {}, queue=QUEUE, max_retry=-1)
            return one, batch, job, added, page, cancelled, invalid.value

    one, batch, job, added, page, cancelled, invalid = asyncio.run(produce())

    assert one.status == "enqueued"
    assert [r.status for r in batch] == ["enqueued", "enqueued"]
    assert (job.jid, job.payload, job.state) == (one.jid, {"a": 1}, "waiting")
    assert added is True
    assert [j.id for j in page.jobs] == ["a-1"]
    assert cancelled.cancelled is True
    assert invalid.field == "max_retry"
    assert Job.objects.filter(status=JobStatus.CANCELLED).count() == 1
    assert Job.objects.count() == 4

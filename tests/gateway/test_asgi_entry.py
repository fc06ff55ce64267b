"""The gateway's ASGI entry (``gateway_application``): claims wait on no thread, and a
producer is served while more claims wait than the gateway's pools have threads.

Driven as ASGI by httpx's ASGITransport, in one event loop, against the real database.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.asgi import get_asgi_application
from django.db import connections

from django_jobqueue import enqueue_job
from django_jobqueue.gateway import pools, waiting
from django_jobqueue.gateway.asgi import gateway_application
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import apitokens

pytestmark = pytest.mark.django_db(transaction=True)

#: More claims than the claim pool, the request pool and their sum have threads.
CLAIMS = pools.CLAIM_THREADS + pools.REQUEST_THREADS + 24


def _client(token: str | None, app: Any = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    transport = httpx.ASGITransport(app=app or gateway_application(prefix="/sdk/"))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers)


async def _until_waiting(count: int) -> None:
    for _ in range(6000):
        if waiting.waiters() == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{waiting.waiters()} claims waiting, not {count}, after 60 s")


def _close_pool_connections() -> None:
    """Close the connections the pools' threads keep (each thread runs one close)."""
    for pool, size in (
        (pools.claim_pool, pools.CLAIM_THREADS),
        (pools.request_pool, pools.REQUEST_THREADS),
    ):
        barrier = threading.Barrier(size)

        def close(barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait(10)
            finally:
                connections.close_all()

        for future in [pool.submit(close) for _ in range(size)]:
            future.result(30)


@pytest.fixture(autouse=True)
def _pool_connections_closed() -> Any:
    yield
    _close_pool_connections()


def test_a_producer_is_served_while_more_claims_wait_than_there_are_threads(
    make_token, monkeypatch
):
    token = make_token()
    checked_in: list[str] = []  # the thread each token check ran in
    real_authenticate = apitokens.authenticate

    def authenticate(text: str, **kwargs: Any) -> Any:
        checked_in.append(threading.current_thread().name.split("_")[0])
        return real_authenticate(text, **kwargs)

    monkeypatch.setattr(apitokens, "authenticate", authenticate)

    async def scenario() -> dict[str, Any]:
        async with _client(token) as http:
            # Warm up: the pools' threads exist before the count is taken.
            for _ in range(3):
                assert (
                    await http.post("/sdk/jobs", json={"job_type": "gw.echo", "queue": "warm"})
                ).status_code == 201
            assert (
                await http.post("/sdk/worker/claim", json={"queues": ["warm"], "limit": 3})
            ).status_code == 200
            threads_before = threading.active_count()
            claims = [
                asyncio.ensure_future(
                    http.post(
                        "/sdk/worker/claim",
                        json={"queues": ["gw"], "wait_ms": 30_000, "worker": f"w{n}"},
                        timeout=60,
                    )
                )
                for n in range(CLAIMS)
            ]
            await _until_waiting(CLAIMS)
            threads_waiting = threading.active_count()
            produced = await http.post("/sdk/jobs", json={"job_type": "gw.echo", "queue": "gw"})
            refused = await http.post("/sdk/jobs", json={"job_type": "gw.echo", "queue": 5})
            read = await http.get(f"/sdk/jobs/{produced.json()['jid']}")
            pending_after_producer = sum(not claim.done() for claim in claims)
            jids = [produced.json()["jid"]]
            for n in range(CLAIMS - 1):
                jids.append((await sync_to_async(enqueue_job)("gw", "gw.echo", {"n": n}))["jid"])
            answers = await asyncio.gather(*claims)
        return {
            "threads": (threads_before, threads_waiting),
            "produced": produced.status_code,
            "refused": (refused.status_code, refused.json()["error"]),
            "read": (read.status_code, read.json()["jid"] == produced.json()["jid"]),
            "pending": pending_after_producer,
            "jids": jids,
            "answers": [(a.status_code, a.json()) for a in answers],
        }

    got = asyncio.run(scenario())
    before, while_waiting = got["threads"]
    # The claims wait on events: threads grow by at most the pools', never per claim.
    assert while_waiting - before <= pools.CLAIM_THREADS + pools.REQUEST_THREADS + 3 < CLAIMS
    assert got["produced"] == 201
    assert got["refused"] == (422, "invalid_request")  # bad input: a 422, never a 500
    # The producer's job, read back (a woken claim may have taken it already).
    assert got["read"] == (200, True)
    assert got["pending"] in (CLAIMS, CLAIMS - 1)  # served while the claims waited
    assert all(status == 200 for status, _ in got["answers"])
    claimed = [job["jid"] for _, body in got["answers"] for job in body["jobs"]]
    assert sorted(claimed) == sorted(got["jids"])  # each job once, each claim one job
    assert Job.objects.filter(queue="gw", status=JobStatus.PROCESSING).count() == CLAIMS
    assert waiting.waiters() == 0
    # Claims' token checks ran in the claim pool, the other routes in the request
    # pool: none in a thread made for a request, nor in asgiref's one shared thread.
    assert checked_in.count("jq-claim") == CLAIMS + 1
    assert checked_in.count("jq-gateway") == 6
    assert len(checked_in) == CLAIMS + 7


def test_the_entry_answers_the_gateway_errors_and_hands_other_paths_to_the_site(make_token):
    token = make_token()

    async def scenario() -> dict[str, Any]:
        async with _client(token) as http:
            unknown = await http.delete("/sdk/no/such/route")
            not_allowed = await http.delete("/sdk/jobs")
            empty = await http.post("/sdk/jobs", content=b"")
            schema = await http.get("/sdk/openapi.json")
        async with _client(None) as anonymous:
            no_token = await anonymous.post("/sdk/jobs", json={"job_type": "gw.echo"})
            site = await anonymous.get("/admin/login/")
        return {
            "unknown": (unknown.status_code, unknown.json()["error"]),
            "not_allowed": (not_allowed.status_code, not_allowed.json()["error"]),
            "empty": (empty.status_code, empty.json()["error"]),
            "schema": schema.json(),
            "no_token": (no_token.status_code, no_token.json()["error"]),
            "site": (site.status_code, site.headers["content-type"], site.text),
        }

    got = asyncio.run(scenario())
    assert got["unknown"] == (404, "not_found")
    assert got["not_allowed"] == (405, "method_not_allowed")
    assert got["empty"] == (415, "not_json")
    assert got["no_token"] == (401, "unauthorized")
    assert "/sdk/worker/claim" in got["schema"]["paths"]
    assert "/sdk/jobs" in got["schema"]["paths"]
    status, content_type, text = got["site"]  # Django's own handler, the site's middleware
    assert status == 200 and content_type.startswith("text/html") and "csrfmiddlewaretoken" in text


def test_the_schema_served_by_the_entry_is_the_wsgi_one(make_token):
    from django.test import Client

    wsgi = Client().get("/sdk/openapi.json").json()

    async def fetch() -> Any:
        async with _client(None) as http:
            return (await http.get("/sdk/openapi.json")).json()

    assert asyncio.run(fetch()) == wsgi


def test_a_prefix_without_slashes_is_refused():
    with pytest.raises(ValueError, match="start and end with '/'"):
        gateway_application(get_asgi_application(), prefix="sdk")


def _scope(path: str, token: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"authorization", f"Bearer {token}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


def test_a_waiting_claim_whose_client_left_ends_and_claims_nothing(make_token):
    token = make_token()

    async def scenario() -> tuple[list, int]:
        app = gateway_application(prefix="/sdk/")
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        inbox.put_nowait({"type": "http.request", "body": b'{"queues": ["gw"], "wait_ms": 30000}'})
        sent: list = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        served = asyncio.ensure_future(app(_scope("/sdk/worker/claim", token), inbox.get, send))
        await _until_waiting(1)
        inbox.put_nowait({"type": "http.disconnect"})
        await asyncio.wait_for(served, 30)
        left = waiting.waiters()
        return sent, left

    sent, left = asyncio.run(scenario())
    assert sent == [] and left == 0  # no answer to a gone client, no claim left waiting
    jid = enqueue_job("gw", "gw.echo", {})["jid"]
    assert Job.objects.get(jid=jid).status == JobStatus.INIT  # nobody claimed it


def test_a_site_receiver_of_request_finished_still_runs(make_token):
    from django.core.signals import request_finished

    token = make_token()
    calls: list[str] = []

    def receiver(sender: type, **kwargs: Any) -> None:
        calls.append(threading.current_thread().name)

    request_finished.connect(receiver)
    try:

        async def scenario() -> int:
            async with _client(token) as http:
                return (await http.get("/sdk/openapi.json")).status_code

        assert asyncio.run(scenario()) == 200
    finally:
        request_finished.disconnect(receiver)
    assert len(calls) == 1 and calls[0] != threading.main_thread().name  # not in the loop

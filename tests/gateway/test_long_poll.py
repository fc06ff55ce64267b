"""Waiting claims: no thread held under ASGI, a per-process cap under WSGI.

Under ASGI (Django's AsyncClient drives the ASGI handler) many claims wait at once
on events, and a producer's enqueue is served while they wait; the job it enqueues
wakes one of them. Under WSGI (the test Client) at most
``JOBQUEUE["GATEWAY"]["MAX_WAITING_CLAIMS"]`` claims wait per process: one over the
cap answers at once with no jobs and ``Retry-After``. Each waits on conditions.
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import AsyncClient, override_settings

from django_jobqueue import enqueue_job
from django_jobqueue.gateway import waiting
from tests.gateway.conftest import Api

pytestmark = pytest.mark.django_db(transaction=True)

CLAIM = "/sdk/worker/claim"


def _until(condition, what: str, bound_s: float = 60) -> None:
    done = threading.Event()
    for _ in range(int(bound_s / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError(f"not {what} within {bound_s} s")


def test_asgi_claims_wait_without_threads_and_a_producer_is_served(make_token):
    token = make_token()
    headers = {"Authorization": f"Bearer {token}"}
    client = AsyncClient()
    count = 20

    async def scenario() -> tuple[list, int]:
        waits = [
            asyncio.ensure_future(
                client.post(
                    CLAIM,
                    {"queues": ["gw"], "wait_ms": 30_000, "worker": f"w{n}"},
                    content_type="application/json",
                    headers=headers,
                )
            )
            for n in range(count)
        ]
        # Every claim waits on an event (none holds a thread) before the producer runs.
        for _ in range(6000):
            if len(waiting._async_waiters) == count:
                break
            await asyncio.sleep(0.01)
        assert len(waiting._async_waiters) == count
        produced = await client.post(
            "/sdk/jobs",
            {"job_type": "gw.echo", "payload": {}, "queue": "gw"},
            content_type="application/json",
            headers=headers,
        )
        assert all(not w.done() for w in waits)  # served while every claim waited
        # One job: one claim gets it; the rest end once more jobs come.
        for n in range(count - 1):
            await sync_to_async(enqueue_job)("gw", "gw.echo", {"n": n})
        answers = await asyncio.gather(*waits)
        return answers, produced.status_code

    answers, status = asyncio.run(scenario())
    assert status == 201
    assert all(answer.status_code == 200 for answer in answers)
    assert sum(len(answer.json()["jobs"]) for answer in answers) == count
    assert not waiting._async_waiters


def test_wsgi_claims_over_the_cap_answer_at_once_with_retry_after(make_token):
    api = Api(make_token())
    got: list = []

    def wait_for_job() -> None:
        try:
            got.append(api.post(CLAIM, {"queues": ["gw"], "wait_ms": 30_000}))
        finally:
            connections.close_all()

    with override_settings(JOBQUEUE={"GATEWAY": {"MAX_WAITING_CLAIMS": 1}}):
        thread = threading.Thread(target=wait_for_job)
        thread.start()
        _until(lambda: waiting.waiting_claims() == 1, "one claim waiting")
        over = api.post(CLAIM, {"queues": ["gw"], "wait_ms": 30_000})
        assert over.status_code == 200
        assert over.json() == {"jobs": []}
        assert over["Retry-After"] == "1"
        assert waiting.waiting_claims() == 1  # the first still waits
        # A claim that does not wait is not capped.
        assert api.post(CLAIM, {"queues": ["gw"], "wait_ms": 0}).json() == {"jobs": []}
        jid = enqueue_job("gw", "gw.echo", {})["jid"]
        thread.join(60)
    assert not thread.is_alive()
    assert [job["jid"] for job in got[0].json()["jobs"]] == [jid]
    assert "Retry-After" not in got[0]
    assert waiting.waiting_claims() == 0


def test_max_waiting_claims_zero_never_waits_under_wsgi(make_token):
    api = Api(make_token())
    with override_settings(JOBQUEUE={"GATEWAY": {"MAX_WAITING_CLAIMS": 0}}):
        answer = api.post(CLAIM, {"queues": ["gw"], "wait_ms": 30_000})
    assert answer.json() == {"jobs": []} and answer["Retry-After"] == "1"


@pytest.mark.django_db(transaction=False)
def test_a_wake_up_wakes_only_the_claims_of_its_queue():
    async def scenario() -> tuple[bool, bool, bool]:
        since_a = waiting.generation(["a"])
        since_b = waiting.generation(["b"])
        wait_a = asyncio.ensure_future(waiting.wait_async(since_a, 30, ["a"]))
        wait_b = asyncio.ensure_future(waiting.wait_async(since_b, 30, ["b"]))
        while len(waiting._async_waiters) < 2:
            await asyncio.sleep(0.01)
        await asyncio.to_thread(waiting._woken, "a")  # as the listener thread does
        await asyncio.wait_for(wait_a, 30)
        b_waits_on = not wait_b.done()
        await asyncio.to_thread(waiting._woken, "")  # every queue
        await asyncio.wait_for(wait_b, 30)
        stale = waiting.generation(["a"]) != since_a
        return wait_a.done(), b_waits_on, stale

    woke_a, b_kept_waiting, counted = asyncio.run(scenario())
    assert woke_a and b_kept_waiting and counted
    assert not waiting._async_waiters

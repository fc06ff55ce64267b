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

from django_jobqueue import enqueue_job, storage
from django_jobqueue.gateway import waiting
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import pauses
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
            if waiting.waiters() == count:
                break
            await asyncio.sleep(0.01)
        assert waiting.waiters() == count
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
    assert waiting.waiters() == 0


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
        assert over["Retry-After"] == "30"  # its wait_ms, s: back at a long-poll's pace
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
    assert answer.json() == {"jobs": []} and answer["Retry-After"] == "30"


def _claims_in(*queues_of_claims: list[str], wait_ms: int, headers: dict) -> list:
    """Start one ASGI claim per entry (its queues) that waits up to ``wait_ms``."""
    client = AsyncClient()
    return [
        asyncio.ensure_future(
            client.post(
                CLAIM,
                {"queues": queues, "wait_ms": wait_ms, "worker": f"w{n}"},
                content_type="application/json",
                headers=headers,
            )
        )
        for n, queues in enumerate(queues_of_claims)
    ]


async def _until_waiting(count: int) -> None:
    for _ in range(6000):
        if waiting.waiters() == count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not {count} claims waiting within 60 s")


def test_a_job_wakes_one_claim_of_its_queue_and_waiting_claims_run_no_claim(
    make_token, monkeypatch
):
    """While claims wait they run no claim query (the watcher polls for them); a job
    wakes one claim of its queue, not every claim, nor a claim of another queue."""
    headers = {"Authorization": f"Bearer {make_token()}"}
    claims: list[list[str]] = []
    real_claim = storage.claim

    def counting_claim(using: str, **kwargs):
        claims.append(list(kwargs["queues"]))
        return real_claim(using, **kwargs)

    monkeypatch.setattr(storage, "claim", counting_claim)

    async def scenario() -> tuple[list, list, int]:
        waits = _claims_in(*([["a"]] * 10 + [["b"]] * 10), wait_ms=30_000, headers=headers)
        await _until_waiting(20)
        before = len(claims)
        await asyncio.sleep(1.0)  # 20 polls of the watcher at CLAIM_POLL_MS 50
        idle = len(claims) - before
        jid = (await sync_to_async(enqueue_job)("a", "gw.echo", {}))["jid"]
        for _ in range(6000):
            if any(w.done() for w in waits):
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # any other claim it woke would have claimed by now
        woken = [c for c in claims[before:] if c]
        done = [w for w in waits if w.done()]
        for _ in range(19):  # end the others
            await sync_to_async(enqueue_job)("a", "gw.echo", {})
            await sync_to_async(enqueue_job)("b", "gw.echo", {})
        answers = await asyncio.gather(*waits)
        return [jid], [d.result().json()["jobs"] for d in done], idle, woken, answers

    with override_settings(JOBQUEUE={"GATEWAY": {"CLAIM_POLL_MS": 50}}):
        jids, done, idle, woken, answers = asyncio.run(scenario())
    assert idle == 0  # 20 claims waited 1 s: no claim query among them
    assert [[job["jid"] for job in jobs] for jobs in done] == [jids]  # one claim ended
    assert woken == [["a"]]  # and only one claim (of queue a) was woken to claim
    assert all(answer.status_code == 200 for answer in answers)
    assert waiting.waiters() == 0


def test_a_claim_waiting_on_a_paused_queue_gets_no_job(make_token):
    """A pause holds for a claim that waits: the job enqueued meanwhile stays."""
    headers = {"Authorization": f"Bearer {make_token()}"}

    async def scenario() -> tuple[int, list]:
        (wait,) = _claims_in(["held"], wait_ms=1_500, headers=headers)
        await _until_waiting(1)
        await sync_to_async(pauses.pause_queue)("default", "held")
        jid = (await sync_to_async(enqueue_job)("held", "gw.echo", {}))["jid"]
        answer = await wait
        return jid, answer.json()["jobs"]

    with override_settings(JOBQUEUE={"GATEWAY": {"CLAIM_POLL_MS": 50}}):
        jid, jobs = asyncio.run(scenario())
    assert jobs == []
    assert Job.objects.get(jid=jid).status == JobStatus.INIT
    pauses.resume_queue("default", "held")


def test_a_job_that_becomes_due_wakes_a_waiting_claim(make_token):
    """No wake-up is sent when a delayed job becomes due: the watcher's poll finds it."""
    api = Api(make_token())
    jid = enqueue_job("gw", "gw.echo", {}, delay="1s")["jid"]
    with override_settings(JOBQUEUE={"GATEWAY": {"CLAIM_POLL_MS": 50}}):
        answer = api.post(CLAIM, {"queues": ["gw"], "wait_ms": 20_000})
    assert [job["jid"] for job in answer.json()["jobs"]] == [jid]


def test_the_watcher_wakes_only_claims_that_run_the_job_type(make_token):
    headers = {"Authorization": f"Bearer {make_token()}"}
    client = AsyncClient()

    async def scenario() -> tuple[list, list]:
        def claim(job_types: list[str]):
            return asyncio.ensure_future(
                client.post(
                    CLAIM,
                    {"queues": ["gw"], "job_types": job_types, "wait_ms": 20_000},
                    content_type="application/json",
                    headers=headers,
                )
            )

        other, echo = claim(["pdf.render"]), claim(["gw.echo"])
        await _until_waiting(2)
        jid = (await sync_to_async(enqueue_job)("gw", "gw.echo", {}))["jid"]
        got = (await echo).json()["jobs"]
        assert not other.done()
        other.cancel()
        return [jid], [job["jid"] for job in got]

    external = {"GATEWAY": {"CLAIM_POLL_MS": 50, "JOB_TYPES": {"pdf.render": {"queue": "gw"}}}}
    with override_settings(JOBQUEUE=external):
        expected, got = asyncio.run(scenario())
    assert got == expected

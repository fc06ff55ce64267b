"""A paused queue hands out no job to the Python client worker, whatever the timing.

The pause is made here, in another process than the gateway's (as ``manage.py jobqueue
pause`` or the console of another server is), so the gateway's process-local cache of
pauses (up to half a second old) is stale when the job arrives: a job enqueued right
after the pause must still wait until the resume (docs/design.md#execution). The
worker keeps a long-poll claim waiting the whole time, which the enqueue wakes.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from jobqueue_client import Client, Worker

from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import pauses
from tests.workers_helpers import ROOT, worker_env

from .test_worker import Running, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "gw-paused"
#: Pause, enqueue at once, look, resume: this many times (each would have a good chance
#: to meet a stale cache of pauses).
ROUNDS = 4


class CountingClient(Client):
    """A client that counts the claims answered (the worker's only claim path)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.claims = 0
        self._lock = threading.Lock()

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        jobs = super().claim(*args, **kwargs)
        with self._lock:
            self.claims += 1
        return jobs


def _claims_answered_after(client: CountingClient, count: int) -> None:
    """Wait until ``count`` claims more than now were answered: the worker asked the
    gateway (and was woken, or polled) that many times since."""
    start = client.claims
    wait_until(lambda: client.claims >= start + count, what=f"{count} more claims")


def test_pause__a_job_enqueued_just_after_a_pause_waits_for_the_resume(gateway_url, make_token):
    ran: list[str] = []

    def echo(payload: Any, ctx: Any) -> Any:
        ran.append(ctx.jid)
        return payload

    with CountingClient(gateway_url, make_token()) as client:
        worker = Worker(
            {"gw.echo": echo},
            client=client,
            queues=[QUEUE],
            concurrency=4,
            wait_ms=1_000,
            install_signals=False,
        )
        with Running(worker):
            _claims_answered_after(client, 1)  # registered and claiming
            for n in range(ROUNDS):
                assert pauses.pause_queue("default", QUEUE, by="test")
                jids = [
                    client.enqueue("gw.echo", {"round": n, "i": i}, queue=QUEUE).jid
                    for i in range(2)
                ]
                # Two claims begun after the enqueue came back: each saw the jobs due.
                _claims_answered_after(client, 3)
                assert ran == [], f"round {n}: run during the pause"
                assert set(Job.objects.filter(jid__in=jids).values_list("status", flat=True)) == {
                    JobStatus.INIT
                }
                assert pauses.resume_queue("default", QUEUE)
                wait_until(
                    lambda jids=jids: (
                        Job.objects.filter(jid__in=jids, status=JobStatus.DONE).count() == 2
                    ),
                    what=f"round {n}: both jobs done after the resume",
                )
                assert sorted(ran) == sorted(jids)
                ran.clear()


def test_pause__from_the_command_line_holds_for_jobs_enqueued_after_it(gateway_url, make_token):
    """The operator's steps: ``manage.py jobqueue pause``, then jobs a second later."""
    ran: list[str] = []
    with CountingClient(gateway_url, make_token()) as client:
        worker = Worker(
            {"gw.echo": lambda payload, ctx: ran.append(ctx.jid)},
            client=client,
            queues=[QUEUE],
            wait_ms=1_000,
            install_signals=False,
        )
        with Running(worker):
            _claims_answered_after(client, 1)
            paused = subprocess.run(  # noqa: S603
                [sys.executable, "-m", "django", "jobqueue", "pause", QUEUE],
                cwd=ROOT,
                env=worker_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert paused.returncode == 0, paused.stderr
            assert f"Queue {QUEUE} paused." in paused.stdout
            time.sleep(1)  # the operator's second, not a bound on anything
            jids = [client.enqueue("gw.echo", {"i": i}, queue=QUEUE).jid for i in range(2)]
            _claims_answered_after(client, 3)
            assert ran == []
            resumed = subprocess.run(  # noqa: S603
                [sys.executable, "-m", "django", "jobqueue", "resume", QUEUE],
                cwd=ROOT,
                env=worker_env(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert resumed.returncode == 0, resumed.stderr
            wait_until(
                lambda: Job.objects.filter(jid__in=jids, status=JobStatus.DONE).count() == 2,
                what="both jobs done after the resume",
            )
    assert sorted(ran) == sorted(jids)


def test_pause__a_long_poll_claim_waiting_during_a_pause_returns_no_job(client):
    answer: list[Any] = []
    claiming = threading.Thread(
        target=lambda: answer.append(client.claim([QUEUE], wait_ms=3_000, limit=5))
    )
    claiming.start()
    time.sleep(0.3)  # the claim is on its way (its answer is checked, not this time)
    pauses.pause_queue("default", QUEUE, by="test")
    jid = client.enqueue("gw.echo", {}, queue=QUEUE).jid
    claiming.join(60)

    assert answer == [[]]
    assert Job.objects.get(jid=jid).status == JobStatus.INIT
    pauses.resume_queue("default", QUEUE)
    claimed = client.claim([QUEUE], wait_ms=3_000, limit=5)
    assert [job.jid for job in claimed] == [jid]

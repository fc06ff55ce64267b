"""The client's worker loop against a live gateway: it runs jobs, reports failures
with or without retry, honours a cancel request and stops gracefully on SIGTERM."""

from __future__ import annotations

import threading
import time

import pytest
from jobqueue_client import Cancelled, NoRetry, Worker

from django_jobqueue.models import Job, JobStatus
from django_jobqueue.models import Worker as WorkerRow

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "gw"


def wait_until(predicate, timeout_s=30.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Running:
    """A Worker run in a thread of this process (no signals)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.stats: dict[str, int] = {}
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        self.stats = self.worker.run()

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive()


def test_worker__runs_jobs_and_reports_results(client, gateway_url, caplog):
    jids = [
        r.jid
        for r in client.enqueue_batch(
            [{"job_type": "gw.echo", "payload": {"n": n}, "queue": QUEUE} for n in range(20)]
        )
    ]
    seen: list[str] = []
    lock = threading.Lock()

    def echo(payload, ctx):
        with lock:
            seen.append(ctx.jid)
        return {"double": payload["n"] * 2, "attempt": ctx.attempt}

    worker = Worker(
        {"gw.echo": echo},
        client=client,
        queues=[QUEUE],
        concurrency=4,
        wait_ms=200,
        install_signals=False,
        name="py-test-worker",
    )
    with Running(worker) as running:
        wait_until(
            lambda: Job.objects.filter(status=JobStatus.DONE).count() == 20, what="20 jobs done"
        )

    assert sorted(seen) == sorted(jids)
    for jid in jids:
        job = Job.objects.get(jid=jid)
        assert job.result == {"double": job.payload["n"] * 2, "attempt": 1}
    assert running.stats["completed"] == 20
    # A heartbeat that crossed its job's report (answered 409 because the job is
    # done) is not a lost lease: nothing was lost, nothing is said.
    assert running.stats.get("lost", 0) == 0
    assert not [r for r in caplog.records if "lost" in r.getMessage()], caplog.text
    row = WorkerRow.objects.get(name="py-test-worker")
    assert (row.kind, row.languages, row.queues) == ("gateway", ["python"], [QUEUE])
    assert row.stopped_at is not None  # its clean stop was reported: gone from the console
    assert row.done == 20


def test_worker__a_failure_retries_and_no_retry_dead_letters(client):
    retried = client.enqueue("gw.echo", {"mode": "flaky"}, queue=QUEUE, max_retry=3).jid
    final = client.enqueue("gw.echo", {"mode": "fatal"}, queue=QUEUE, max_retry=3).jid

    def handler(payload, ctx):
        if payload["mode"] == "fatal":
            raise NoRetry("bad address")
        raise ValueError(f"flaky attempt {ctx.attempt}")

    worker = Worker(
        {"gw.echo": handler}, client=client, queues=[QUEUE], wait_ms=200, install_signals=False
    )
    with Running(worker):
        wait_until(lambda: Job.objects.get(jid=final).status == JobStatus.ERROR, what="fatal")
        wait_until(
            lambda: (
                Job.objects.get(jid=retried).attempt >= 1
                and Job.objects.get(jid=retried).status == JobStatus.RETRY
            ),
            what="retry",
        )

    fatal = client.get_job(final)
    # The gateway stores "<exception_class>: <error>" as the message.
    assert (fatal.state, fatal.status, fatal.last_error.message) == (
        "failed",
        "error",
        "NoRetry: bad address",
    )
    # ... and the class the client reported in the attempt's entry, as a worker in
    # process does (module and qualified name).
    assert fatal.last_error.exception_class == "jobqueue_client.worker.NoRetry"
    flaky = Job.objects.get(jid=retried)
    # On a loaded machine the first backoff can end before the worker stops, so a
    # second attempt may have failed too: the last entry is the last attempt's.
    assert flaky.errors[-1]["message"] == f"ValueError: flaky attempt {len(flaky.errors)}"
    assert flaky.errors[-1]["exception_class"] == "builtins.ValueError"
    assert flaky.run_at > flaky.updated_at  # backoff before the next attempt


def test_worker__a_cancel_request_reaches_the_handler(client):
    jid = client.enqueue("gw.echo", {}, queue=QUEUE).jid
    started = threading.Event()

    def patient(payload, ctx):
        started.set()
        deadline = time.monotonic() + 20
        while not ctx.cancelled:
            if time.monotonic() > deadline:
                return "never cancelled"
            time.sleep(0.05)
        raise Cancelled("asked to stop")

    worker = Worker(
        {"gw.echo": patient}, client=client, queues=[QUEUE], wait_ms=200, install_signals=False
    )
    with Running(worker) as running:
        assert started.wait(20)
        answer = client.cancel(jid)
        assert (answer.cancelled, answer.cancel_requested) == (False, True)
        wait_until(lambda: Job.objects.get(jid=jid).status == JobStatus.CANCELLED, what="cancelled")

    assert running.stats["cancelled"] == 1
    assert client.get_job(jid).state == "cancelled"

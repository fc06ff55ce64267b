"""The outage retry of a job's outcome follows the lease the database holds.

A batched ``done`` write that meets an unreachable database is tried again until
just before the batch's earliest lease expires. That expiry is the job's
``lease_expires_at``, which each heartbeat moves to the one its row then holds: a
job that ran past its claim's lease keeps its outage retry, and one whose lease
was shortened has none past it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from django_jobqueue import enqueue_job, storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.worker import executor
from django_jobqueue.worker.completer import Completer
from django_jobqueue.worker.context import JobContext
from tests.worker.test_reconnect import backend_id, in_thread, kill_session

pytestmark = pytest.mark.django_db(transaction=True)


def test_heartbeat__the_workers_job_takes_the_lease_its_row_now_holds() -> None:
    enqueue_job(None, "worker.record", {"label": "x"})
    (job,) = storage.claim("default", owner="w", limit=1, lease_ms=1000)
    claimed_until = job.lease_expires_at
    assert storage.heartbeat([job], lease_ms=60_000) == ({job.pk}, set())
    row = Job.objects.get(pk=job.pk)
    assert job.lease_expires_at == row.lease_expires_at
    assert claimed_until is not None and row.lease_expires_at is not None
    assert (row.lease_expires_at - claimed_until).total_seconds() > 50


def test_heartbeat__a_lost_lease_leaves_the_workers_expiry_alone() -> None:
    enqueue_job(None, "worker.record", {"label": "x"})
    (job,) = storage.claim("default", owner="w", limit=1, lease_ms=1000)
    claimed_until = job.lease_expires_at
    Job.objects.filter(pk=job.pk).update(lease_token="someone-else")
    assert storage.heartbeat([job], lease_ms=60_000) == (set(), set())
    assert job.lease_expires_at == claimed_until


def flush_in_outage(completer: Completer, *, outage_s: float | None) -> None:
    """Kill this thread's session and refuse new ones while ``completer`` flushes here:
    for ``outage_s`` seconds, or (None) until the flush returns."""
    session = backend_id()
    in_thread(lambda: kill_session(session))
    port = connection.settings_dict["PORT"]
    connection.settings_dict["PORT"] = "1"  # nothing listens: a connect is refused

    def reopen() -> None:
        connection.settings_dict["PORT"] = port

    timer = None
    if outage_s is not None:
        timer = threading.Timer(outage_s, reopen)
        timer.start()
    try:
        completer.flush()
    finally:
        if timer is not None:
            timer.join()
        reopen()


def retries(caplog: pytest.LogCaptureFixture) -> int:
    """How many times the completer said it would store its results again."""
    return sum(
        "again" in r.getMessage()
        for r in caplog.records
        if r.name == "django_jobqueue.worker.completer"
    )


def claimed_and_beaten(claim_ms: int, beat_ms: int) -> Job:
    (job,) = storage.claim("default", owner="w", limit=1, lease_ms=claim_ms)
    assert storage.heartbeat([job], lease_ms=beat_ms)[0] == {job.pk}
    return job


def in_outage(scenario: Callable[[Completer, Job], Any], job_of: Callable[[], Job]) -> Any:
    def run() -> tuple[list[bool], Job]:
        job = job_of()
        flags: list[bool] = []
        completer = Completer(busy=lambda: 0)  # not started: flush() writes in this thread
        completer.submit(job, {"ok": 1}, flags.append)
        scenario(completer, job)
        return flags, job

    return in_thread(run)


@pytest.mark.vendor("postgresql", "mysql")
def test_short_outage__a_job_past_its_claims_lease_stores_its_result_once_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Claimed with a 1 s lease (so the claim's own expiry leaves no time to retry),
    # then heartbeated to 60 s as a foreman does for a job that runs long.
    caplog.set_level(logging.WARNING, logger="django_jobqueue.worker.completer")
    enqueue_job(None, "worker.record", {"label": "x"})
    flags, job = in_outage(
        lambda completer, _job: flush_in_outage(completer, outage_s=0.6),
        lambda: claimed_and_beaten(1000, 60_000),
    )
    row = Job.objects.get(pk=job.pk)
    assert (flags, row.status, row.result, row.attempt) == ([True], JobStatus.DONE, {"ok": 1}, 1)
    assert retries(caplog) >= 1


@pytest.mark.vendor("postgresql", "mysql")
def test_outage__no_retry_past_a_lease_a_heartbeat_shortened(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Claimed for 60 s, then beaten to a 1 s lease: the write gives up at once (the
    # claim's expiry would have it retry for a minute), and the job stays processing
    # under its token, for the reaper once its lease expires.
    caplog.set_level(logging.WARNING, logger="django_jobqueue.worker.completer")
    enqueue_job(None, "worker.record", {"label": "x"})
    flags, job = in_outage(
        lambda completer, _job: flush_in_outage(completer, outage_s=None),
        lambda: claimed_and_beaten(60_000, 1000),
    )
    row = Job.objects.get(pk=job.pk)
    assert (flags, row.status, row.lease_token) == ([False], JobStatus.PROCESSING, job.lease_token)
    assert retries(caplog) == 0


@pytest.mark.vendor("postgresql", "mysql")
def test_short_outage__a_failure_written_by_its_runner_is_stored_once_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A handler's failure is written by its runner, not batched: through an outage
    shorter than the lease it is tried again, and stored once the server answers, with
    the job's start (a claim that did not start it, as a prefetch's), so the attempt
    counts and the job is not left to the reaper."""
    caplog.set_level(logging.WARNING, logger="django_jobqueue.worker.executor")
    enqueue_job(None, "worker.record", {"label": "x"})

    def run() -> tuple[str | None, Job]:
        (job,) = storage.claim("default", owner="w", limit=1, lease_ms=60_000, started=False)
        session = backend_id()
        in_thread(lambda: kill_session(session))
        port = connection.settings_dict["PORT"]
        connection.settings_dict["PORT"] = "1"  # nothing listens: a connect is refused
        timer = threading.Timer(0.6, lambda: connection.settings_dict.update(PORT=port))
        timer.start()
        try:
            status = executor.store_outcome(
                job, JobContext(job, worker="w"), started=time.monotonic(),
                error=RuntimeError("boom"), result=None,
            )  # fmt: skip
        finally:
            timer.join()
            connection.settings_dict["PORT"] = port
        return status, job

    status, job = in_thread(run)
    row = Job.objects.get(pk=job.pk)
    assert (status, row.status, row.attempt) == (JobStatus.RETRY, JobStatus.RETRY, 1)
    assert row.started_at is not None
    assert [e["attempt"] for e in row.errors] == [1]
    assert "RuntimeError" in row.errors[0]["exception_class"]
    again = [r for r in caplog.records if "again in" in r.getMessage()]
    assert again and all(f"jid={job.jid}" in r.getMessage() for r in again)

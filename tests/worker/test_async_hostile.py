"""Hostile ``async def`` handlers on the foreman's event loop (django_jobqueue/worker/aio.py,
docs/design.md#execution): handlers that ignore their cancellation, raise
``BaseException``\\s or a ``CancelledError`` nobody asked for."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from tests.testapp.jobtypes import asyncjobs
from tests.testapp.models import RunRecord
from tests.workers_helpers import abort_process, drain, run_workers

pytestmark = pytest.mark.django_db(transaction=True)


def job_of(result: dict[str, str]) -> Job:
    return Job.objects.get(jid=result["jid"])


@pytest.fixture
def stubborn() -> Iterator[None]:
    """aio.stubborn handlers ignore cancellation until the test ends."""
    asyncjobs.stubborn_release.clear()
    try:
        yield
    finally:
        asyncjobs.stubborn_release.set()


@pytest.mark.usefixtures("stubborn")
def test_a_handler_ignoring_its_timeout__is_abandoned_timed_out_and_frees_its_slot():
    # One slot: without the abandonment the other jobs never ran, the stubborn one
    # stayed processing (heartbeated) and the burst never ended.
    slow = job_of(enqueue_job(None, "aio.stubborn", {}, timeout_ms=300))
    others = [enqueue_job(None, "aio.noop", {})["jid"] for _ in range(5)]
    assert drain(concurrency=1, shutdown_timeout_ms=1000) == {"max_retry": 1, "done": 5}
    slow.refresh_from_db()
    assert slow.status == JobStatus.MAX_RETRY
    assert "TimeoutError" in slow.message
    assert slow.lease_token == ""
    assert Job.objects.filter(jid__in=others, status=JobStatus.DONE).count() == 5


@pytest.mark.usefixtures("stubborn")
def test_a_handler_returning_after_its_timeouts_cancellation__is_stored_timed_out():
    slow = job_of(enqueue_job(None, "aio.stubborn", {"give_up": True}, timeout_ms=300))
    assert drain(concurrency=1) == {"max_retry": 1}
    slow.refresh_from_db()
    assert slow.status == JobStatus.MAX_RETRY  # not done with "gave up"
    assert slow.result is None
    assert "TimeoutError" in slow.message


@pytest.mark.parametrize(
    ("kind", "name"),
    [("exit", "SystemExit"), ("interrupt", "KeyboardInterrupt"), ("base", "BaseException")],
)
def test_a_handler_raising_a_base_exception__fails_its_attempt_and_the_loop_runs_on(kind, name):
    # Raised on, it stopped the event loop: every later async job of the foreman
    # failed to start ("Event loop is closed") and went round through the reaper.
    failing = job_of(enqueue_job(None, "aio.raise_base", {"kind": kind}))
    others = [enqueue_job(None, "aio.noop", {})["jid"] for _ in range(5)]
    assert drain(concurrency=2) == {"max_retry": 1, "done": 5}
    failing.refresh_from_db()
    assert failing.status == JobStatus.MAX_RETRY
    assert name in failing.message
    assert Job.objects.filter(jid__in=others, status=JobStatus.DONE).count() == 5


@pytest.mark.usefixtures("no_backoff")
def test_a_handler_raising_cancelled_error_unasked__fails_its_attempt():
    # An inner task's cancellation, say: it was taken for the loop's stop, the job
    # left processing with no heartbeat until the reaper took it back.
    job = job_of(enqueue_job(None, "aio.raise_cancelled", {}))
    assert drain(concurrency=2) == {"retry": 1, "max_retry": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.MAX_RETRY
    assert job.attempt == 2
    assert "CancelledError" in job.message
    assert RunRecord.objects.filter(jid=job.jid).count() == 2


@pytest.mark.usefixtures("stubborn")
def test_sigterm__a_handler_ignoring_cancellation_does_not_keep_the_process_alive():
    # asyncio.run under async_to_sync waited for ever for the task at its end, in a
    # thread the interpreter joins at exit: the worker said "foreman stopped" and
    # never exited.
    job = job_of(enqueue_job(None, "aio.stubborn", {}))
    proc = run_workers("--concurrency", "2", "--shutdown-timeout", "200", wait=False)
    try:
        deadline = time.monotonic() + 60
        while not RunRecord.objects.filter(jid=job.jid).exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=90)
    finally:
        abort_process(proc)  # only if stuck: its stacks go to its stderr
    assert proc.returncode == 0, err[-3000:]
    assert "ignore their cancellation" in err
    job.refresh_from_db()
    assert job.status in (JobStatus.INIT, JobStatus.RETRY)  # handed back, not lost
    assert job.lease_token == ""


@pytest.mark.usefixtures("stubborn")
def test_a_handler_blocking_the_loop__is_no_longer_heartbeated_and_the_reaper_takes_it():
    # The loop can neither cancel nor abandon it: the heartbeat stops extending its
    # lease OVERDUE_S after its timeout, so it does not stay processing for ever.
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    job = job_of(enqueue_job(None, "aio.block_loop", {}, timeout_ms=300))
    foreman = Foreman(
        ForemanOptions(
            concurrency=2,
            lease_ms=1_000,
            heartbeat_ms=100,
            shutdown_timeout_ms=200,
            min_sleep_ms=5,
            max_sleep_ms=50,
        )
    )
    thread = threading.Thread(target=lambda: foreman.run(install_signals=False))
    thread.start()
    try:
        deadline = time.monotonic() + 90
        while Job.objects.filter(pk=job.pk, status=JobStatus.PROCESSING).exists() or (
            not RunRecord.objects.filter(jid=job.jid).exists()
        ):
            assert time.monotonic() < deadline, "still processing: heartbeated for ever"
            time.sleep(0.05)
    finally:
        asyncjobs.stubborn_release.set()
        foreman.stop()
        thread.join(timeout=60)
    assert not thread.is_alive()
    job.refresh_from_db()
    assert job.status == JobStatus.MAX_RETRY
    assert "lease expired" in job.errors[0]["message"]


def test_a_handler_returning_what_json_cannot_encode__fails_for_good():
    # Checked on the loop before the completer takes it: never a done row without
    # its result.
    job = job_of(enqueue_job(None, "aio.not_json", {}))
    assert drain(concurrency=2) == {"error": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.ERROR
    assert "not JSON" in job.message


@pytest.mark.usefixtures("stubborn")
@pytest.mark.parametrize("processes", ["1", "2"])
def test_burst__a_handler_given_up_on_at_its_timeout_does_not_keep_the_process_alive(processes):
    # With a middleware that cannot wrap async handlers, one runs in its runner's
    # thread under async_to_sync, whose event loop runs in a thread the interpreter
    # joins at exit: the worker said "foreman stopped" and never exited.
    job = job_of(enqueue_job(None, "aio.stubborn", {}, timeout_ms=300))
    middleware = {"MIDDLEWARE": ["tests.testapp.jobtypes.asyncjobs.sync_only_middleware"]}
    with override_settings(JOBQUEUE=middleware):
        proc = run_workers("--burst", "--processes", processes, wait=False)
    try:
        _out, err = proc.communicate(timeout=90)
    finally:
        abort_process(proc)  # only if stuck: its stacks go to its stderr
    assert proc.returncode == 0, err[-3000:]
    assert "exiting without them handlers=1" in err, err[-3000:]
    job.refresh_from_db()
    assert job.status == JobStatus.MAX_RETRY
    assert "TimeoutError" in job.message

"""``async def`` handlers on the foreman's event loop (django_jobqueue/worker/aio.py)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from tests.testapp.jobtypes import asyncjobs
from tests.testapp.models import RunRecord
from tests.workers_helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)


def job_of(result: dict[str, str]) -> Job:
    return Job.objects.get(jid=result["jid"])


def test_async_jobs__run_on_one_loop_thread_within_the_slots():
    asyncjobs.reset()
    jids = [enqueue_job(None, "aio.record", {"s": 0.05})["jid"] for _ in range(30)]
    threads_before = threading.active_count()
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], threading.active_count())
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert drain(concurrency=8) == {"done": 30}
    finally:
        stop.set()
        watcher.join()
    # One event loop, in one thread, ran every handler: no thread per job.
    assert {name for name, _loop in asyncjobs.runs} == {"jq-loop"}
    assert len({loop for _name, loop in asyncjobs.runs}) == 1
    assert asyncjobs.most_at_once <= 8
    assert asyncjobs.most_at_once >= 2  # they overlapped on the loop
    # 30 jobs of 50 ms at 8 slots: far fewer threads than jobs (the foreman's helpers,
    # its runners, the loop and its sync thread).
    assert peak[0] - threads_before < 30
    for jid in jids:
        job = Job.objects.get(jid=jid)
        assert job.status == JobStatus.DONE
        assert job.result["jid"] == jid
        assert job.result["attempt"] == 1
        assert job.started_at is not None
    assert RunRecord.objects.filter(label="aio").count() == 30


def test_async_failures__retry_then_dead_letter(no_backoff):
    retried = job_of(enqueue_job(None, "aio.fail", {}))
    fatal = job_of(enqueue_job(None, "aio.fail", {"fatal": True}))
    assert drain(concurrency=4) == {"retry": 1, "max_retry": 1, "error": 1}
    retried.refresh_from_db()
    fatal.refresh_from_db()
    assert retried.status == JobStatus.MAX_RETRY
    assert retried.attempt == 2
    assert "async failure" in retried.message
    assert fatal.status == JobStatus.ERROR
    assert "fatal async failure" in fatal.message


def test_async_timeout__cancels_the_task_and_counts_the_attempt():
    slow = job_of(enqueue_job(None, "aio.sleep", {"s": 30}, timeout_ms=300))
    others = [enqueue_job(None, "aio.noop", {}) for _ in range(5)]
    started = time.monotonic()
    assert drain(concurrency=1) == {"max_retry": 1, "done": 5}
    # The task was cancelled at its timeout, not waited for (30 s).
    assert time.monotonic() - started < 20
    slow.refresh_from_db()
    assert slow.status == JobStatus.MAX_RETRY
    assert "TimeoutError" in slow.message
    assert "300 ms" in slow.message
    assert Job.objects.filter(jid__in=[o["jid"] for o in others], status="done").count() == 5


def test_async_cancel__a_cancel_request_cancels_the_task():
    job = job_of(enqueue_job(None, "aio.sleep", {"s": 60}))
    result: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: result.update(drain(concurrency=2, lease_ms=30_000, heartbeat_ms=50))
    )
    thread.start()
    deadline = time.monotonic() + 60
    while not RunRecord.objects.filter(jid=job.jid).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    Job.objects.filter(pk=job.pk).update(cancel_requested=True)
    thread.join(timeout=30)  # well before the handler's 60 s sleep
    assert not thread.is_alive()
    assert result == {"cancelled": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


def test_async_lease__heartbeats_keep_a_job_longer_than_its_lease():
    # A lease of 1 s, heartbeats every 200 ms and ctx.aheartbeat(): the 2.5 s job
    # keeps its lease and ends done at its first attempt (the reaper would take it
    # back after 1 s without them).
    job = job_of(enqueue_job(None, "aio.sleep", {"s": 2.5, "beat": True}))
    assert drain(concurrency=2, lease_ms=1_000, heartbeat_ms=200) == {"done": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.DONE
    assert job.result == "slept"
    assert job.attempt == 1
    assert RunRecord.objects.filter(jid=job.jid).count() == 1


def test_async_and_sync_jobs__drain_together():
    asyncjobs.reset()
    jids = [enqueue_job(None, "aio.record", {})["jid"] for _ in range(20)]
    jids += [enqueue_job(None, "worker.record", {"label": str(i)})["jid"] for i in range(20)]
    assert drain(concurrency=3) == {"done": 40}
    assert Job.objects.filter(jid__in=jids, status=JobStatus.DONE).count() == 40
    assert RunRecord.objects.count() == 40


def test_job_started__sent_once_for_every_async_job():
    # The loop begins held async jobs itself only while nobody listens for
    # job_started; a receiver gets each start once.
    from django_jobqueue.core.signals import job_started

    asyncjobs.reset()
    jids = [enqueue_job(None, "aio.record", {})["jid"] for _ in range(60)]
    seen: list[str] = []

    def started(sender: Any, job: Job, **_kw: Any) -> None:
        seen.append(job.jid)

    job_started.connect(started, weak=False)
    try:
        assert drain(concurrency=4) == {"done": 60}
    finally:
        job_started.disconnect(started)
    assert sorted(seen) == sorted(jids)


def test_async_stop__a_running_async_job_is_handed_back_unlost():
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    job = job_of(enqueue_job(None, "aio.sleep", {"s": 60}))
    foreman = Foreman(
        ForemanOptions(concurrency=2, shutdown_timeout_ms=200, min_sleep_ms=5, max_sleep_ms=50)
    )
    thread = threading.Thread(target=lambda: foreman.run(install_signals=False))
    thread.start()
    deadline = time.monotonic() + 60
    while not RunRecord.objects.filter(jid=job.jid).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    foreman.stop()
    thread.join(timeout=30)
    assert not thread.is_alive()
    job.refresh_from_db()
    # Back in the queue for another worker (its attempt spent: it started).
    assert job.status in (JobStatus.INIT, JobStatus.RETRY)
    assert job.lease_token == ""
    assert foreman.stats.get("handed_back") == 1


def test_a_sync_handler_returning_a_coroutine__is_awaited_and_its_value_stored():
    jid = enqueue_job(None, "worker.returns_awaitable", {"n": 7})["jid"]
    assert drain(concurrency=2) == {"done": 1}
    assert Job.objects.get(jid=jid).result == {"awaited": 7}

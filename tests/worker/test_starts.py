"""An attempt is spent only by a start (docs/design.md#execution), in storage and in a
foreman: a claim that does not start its jobs, the start stored by a write or a
heartbeat, the reaper that returns a never-started job unspent, the prefetch rule
and the hold time (README "Prefetch", docs/prefetch.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections

from django_jobqueue import enqueue_job, reaping, storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.worker.foreman import Foreman, ForemanOptions
from tests.testapp.models import RunRecord

pytestmark = pytest.mark.django_db(transaction=True)


def expire(jid: str) -> None:
    """Make the lease of ``jid`` expired (its holder stopped heartbeating)."""
    Job.objects.filter(jid=jid).update(lease_expires_at="2000-01-01T00:00:00Z")


def wait_for(condition: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_claim_not_started__the_reaper_returns_it_unspent_in_its_place() -> None:
    first = enqueue_job(None, "starts.quick")["jid"]
    enqueue_job(None, "starts.quick")
    (job,) = storage.claim("default", owner="dead", limit=1, started=False)
    assert job.jid == first and job.attempt == 1 and job.started_at is None
    before = Job.objects.get(jid=first).run_at
    expire(first)
    assert reaping.reap_expired("default") == 1
    row = Job.objects.get(jid=first)
    assert (row.status, row.waiting, row.attempt) == (JobStatus.INIT, True, 0)
    assert [entry["exception_class"] for entry in row.errors] == [reaping.UNSTARTED_EXPIRY]
    assert row.run_at == before  # no backoff, its place in claim order kept
    assert row.lease_token == ""
    # The next claim takes it first, as its first attempt, and knows its start must
    # be stored before it runs (a short type's unstored start may have killed it).
    (again,) = storage.claim("default", owner="w", limit=1, started=False)
    assert (again.jid, again.attempt) == (first, 1)
    assert reaping.expired_before_start(again)
    assert not reaping.expired_before_start(Job.objects.exclude(jid=first).get())


def test_claim_not_started__a_retry_goes_back_as_a_retry_with_its_attempts() -> None:
    jid = enqueue_job(None, "starts.quick")["jid"]
    (job,) = storage.claim("default", owner="w", limit=1)
    assert storage.fail(job, RuntimeError("first")) == JobStatus.RETRY
    Job.objects.filter(jid=jid).update(run_at="2000-01-01T00:00:00Z")
    (job,) = storage.claim("default", owner="dead", limit=1, started=False)
    assert job.attempt == 2
    expire(jid)
    assert reaping.reap_expired("default") == 1
    row = Job.objects.get(jid=jid)
    assert (row.status, row.attempt) == (JobStatus.RETRY, 1)
    # The failed attempt's entry, then the unstarted expiry's (no attempt spent).
    assert [e["exception_class"] for e in row.errors][1:] == [reaping.UNSTARTED_EXPIRY]


def test_started__by_a_write__the_reaper_spends_the_attempt() -> None:
    jid = enqueue_job(None, "starts.quick")["jid"]
    (job,) = storage.claim("default", owner="dead", limit=1, started=False)
    assert storage.mark_started(job)
    assert Job.objects.get(jid=jid).started_at is not None
    expire(jid)
    assert reaping.reap_expired("default") == 1
    row = Job.objects.get(jid=jid)
    assert (row.status, row.attempt, len(row.errors)) == (JobStatus.RETRY, 1, 1)
    assert "lease expired" in row.message


def test_started__by_the_heartbeat__only_the_jobs_named_started() -> None:
    a = enqueue_job(None, "starts.quick")["jid"]
    b = enqueue_job(None, "starts.quick")["jid"]
    jobs = storage.claim("default", owner="w", limit=2, started=False)
    ja, jb = sorted(jobs, key=lambda j: j.jid != a)
    alive, _cancel = storage.heartbeat(jobs, started=[ja.pk])
    assert alive == {ja.pk, jb.pk}
    assert Job.objects.get(jid=a).started_at is not None
    assert Job.objects.get(jid=b).started_at is None
    # An outcome stores the start of a job started without a write of its own.
    assert storage.complete(jb, None)
    row = Job.objects.get(jid=b)
    assert row.started_at is not None and row.started_at <= row.finished_at


def test_started__a_lost_lease_refuses_the_start() -> None:
    jid = enqueue_job(None, "starts.quick")["jid"]
    (job,) = storage.claim("default", owner="dead", limit=1, started=False)
    expire(jid)
    assert reaping.reap_expired("default") == 1
    assert not storage.mark_started(job)  # the job is not this worker's to run


def test_claim_started__as_a_gateway_worker_claims__spends_the_attempt() -> None:
    jid = enqueue_job(None, "starts.quick")["jid"]
    (job,) = storage.claim("default", owner="gw", limit=1)
    assert job.started_at is not None
    expire(jid)
    assert reaping.reap_expired("default") == 1
    assert Job.objects.get(jid=jid).attempt == 1


def test_batched_done__stores_the_start_of_a_job_started_without_a_write() -> None:
    jids = {enqueue_job(None, "starts.quick")["jid"] for _ in range(3)}
    jobs = storage.claim("default", owner="w", limit=3, started=False)
    assert storage.complete_many([(job, {"n": 1}) for job in jobs]) == [True] * 3
    rows = Job.objects.filter(jid__in=jids)
    assert all(row.status == JobStatus.DONE and row.started_at is not None for row in rows)


def foreman(**options: Any) -> Foreman:
    options.setdefault("min_sleep_ms", 5)
    options.setdefault("max_sleep_ms", 50)
    options.setdefault("ramp_time_ms", 0)
    options.setdefault("lease_ms", 60_000)
    return Foreman(ForemanOptions(**options))


def test_foreman__no_prefetch_of_a_job_type_not_known_short() -> None:
    for _ in range(4):
        enqueue_job(None, "starts.nap", {"s": 0})
    run = foreman(concurrency=1, prefetch=3)
    first = run._next_job("w")
    assert first is not None and not run._inbox
    assert Job.objects.filter(status=JobStatus.PROCESSING).count() == 1
    # Once the type ran short here, the same claim holds the prefetch.
    assert storage.complete(first.job, None)
    run._unregister(first)
    run.type_run_ms["starts.nap"] = 1.0
    second = run._next_job("w")
    assert second is not None and len(run._inbox) == 2  # the other two


@pytest.mark.parametrize(
    ("prefetch", "prefetch_ms", "held", "hold_ms"), [(2, 0, 2, 10), (0, 20, 0, 100)]
)
def test_foreman__a_set_prefetch_outlives_prefetch_ms_0_and_prefetch_0_turns_it_off(
    prefetch: int, prefetch_ms: int, held: int, hold_ms: int
) -> None:
    """As README "Prefetch" says: ``--prefetch-ms 0`` turns off the budget's prefetch,
    not a ``--prefetch N`` given with it (held for the least hold time, 10 ms); only
    ``--prefetch 0`` turns off any prefetch."""
    for _ in range(4):
        enqueue_job(None, "starts.nap", {"s": 0})
    run = foreman(concurrency=1, prefetch=prefetch, prefetch_ms=prefetch_ms)
    run.type_run_ms["starts.nap"] = 1.0  # known short: the claim may prefetch
    first = run._next_job("w")
    assert first is not None and len(run._inbox) == held and run.hold_ms == hold_ms
    assert Job.objects.filter(status=JobStatus.PROCESSING).count() == 1 + held


def test_foreman__a_prefetched_job_of_another_type_goes_back_unspent_in_place() -> None:
    quick = enqueue_job(None, "starts.quick")["jid"]
    slow = enqueue_job(None, "starts.nap", {"s": 0})["jid"]
    run = foreman(concurrency=1, prefetch=1)
    run.type_run_ms["starts.quick"] = 1.0  # a short type is known: the claim prefetches
    first = run._next_job("w")
    assert first is not None and first.job.jid == quick and not run._inbox
    row = Job.objects.get(jid=slow)
    assert (row.status, row.waiting, row.attempt) == (JobStatus.INIT, True, 0)


def test_foreman__a_held_job_not_started_within_the_hold_goes_to_another_foreman() -> None:
    """A is stuck in a long job of a type it knew short, with one job prefetched behind
    it: that job goes back within the hold time, unspent, and B (idle) runs it while A
    still runs its long job."""
    long_jid = enqueue_job(None, "starts.nap", {"s": 30})["jid"]
    behind = enqueue_job(None, "starts.nap", {"s": 0})["jid"]
    a = foreman(concurrency=1, prefetch=1)
    a.type_run_ms["starts.nap"] = 1.0
    b = foreman(concurrency=1, prefetch=0, queues=("nowhere",))  # idle until let in
    threads = [threading.Thread(target=f.run, kwargs={"install_signals": False}) for f in (a, b)]
    threads[0].start()
    try:
        wait_for(lambda: RunRecord.objects.filter(jid=long_jid).exists())
        wait_for(lambda: Job.objects.get(jid=behind).waiting)  # went back, unspent
        row = Job.objects.get(jid=behind)
        assert (row.status, row.attempt) == (JobStatus.INIT, 0)
        assert not RunRecord.objects.filter(jid=behind).exists()
        b.queues = None  # B takes work now
        threads[1].start()
        wait_for(lambda: Job.objects.get(jid=behind).status == JobStatus.DONE)
        (run,) = RunRecord.objects.filter(jid=behind)
        assert run.worker.startswith(b.name) and run.attempt == 1
        assert Job.objects.get(jid=long_jid).status == JobStatus.PROCESSING  # A still busy
    finally:
        a.stop(force=True)
        b.stop(force=True)
        for thread in threads:
            if thread.is_alive():
                thread.join(60)
        connections.close_all()


def test_foreman__stop_hands_held_jobs_back_at_once_unspent() -> None:
    enqueue_job(None, "starts.nap", {"s": 30})
    held = [enqueue_job(None, "starts.nap", {"s": 0})["jid"] for _ in range(2)]
    run = foreman(concurrency=1, prefetch=2, prefetch_ms=2_000, shutdown_timeout_ms=60_000)
    run.type_run_ms["starts.nap"] = 1.0  # known short, and a hold (10 s) this test outlasts
    thread = threading.Thread(target=run.run, kwargs={"install_signals": False})
    thread.start()
    try:
        wait_for(lambda: RunRecord.objects.exists())
        assert Job.objects.filter(jid__in=held, status=JobStatus.PROCESSING).count() == 2
        run.stop()  # graceful: the running job has a minute, the held ones go back now
        wait_for(lambda: Job.objects.filter(jid__in=held, waiting=True).count() == 2)
        assert thread.is_alive()  # still draining its running job
        assert set(Job.objects.filter(jid__in=held).values_list("attempt", flat=True)) == {0}
    finally:
        run.stop(force=True)
        thread.join(60)
        connections.close_all()

"""The job statistics' one path (django_jobqueue.store.jobstats, docs/metrics.md):
storage counts every stored outcome once, whoever the worker; the process's buffer
writes them by timer, at a foreman's flush and at exit; JobTotal only goes up."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest
from django.db import connection, models
from django.test.utils import CaptureQueriesContext

from django_jobqueue import reaping, storage
from django_jobqueue.models import Job, JobStat, JobStatus, JobTotal
from django_jobqueue.store.jobstats import ProcessStats, pickup_bucket_of, process_stats
from tests.maintenance_helpers import make_job, running

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def written(monkeypatch):
    """Write the process's counts only when the test says (no timer thread)."""
    monkeypatch.setattr(process_stats, "flush_timer", False)

    def totals(queue: str = "q") -> dict[str, int]:
        process_stats.flush("default")
        rows = JobTotal.objects.filter(queue=queue).values("done", "retried", "failed")
        out = {"done": 0, "retried": 0, "failed": 0}
        for row in rows:
            for key in out:
                out[key] += row[key]
        return out

    return totals


def stat_of(queue: str) -> SimpleNamespace:
    """``queue``'s JobStat rows summed field by field: a test that crosses a minute's
    boundary writes two rows, one per minute."""
    rows = list(JobStat.objects.filter(queue=queue))
    assert rows, f"no statistics for queue {queue!r}"
    names = [
        f.attname
        for f in JobStat._meta.concrete_fields
        if isinstance(f, (models.IntegerField, models.BigIntegerField)) and not f.primary_key
    ]
    return SimpleNamespace(**{name: sum(getattr(row, name) for row in rows) for name in names})


def claim_one(**fields) -> Job:
    make_job(queue="q", **fields)
    (job,) = storage.claim("default", owner="test:1", queues=["q"])
    return job


def test_storage__counts_each_stored_outcome_once(written):
    assert storage.complete(claim_one(), {"ok": 1})
    assert storage.fail(claim_one(max_retry=3), None, message="again") == JobStatus.RETRY
    assert storage.fail(claim_one(max_retry=0), None, message="spent") == JobStatus.MAX_RETRY
    assert storage.fail(claim_one(), None, retryable=False) == JobStatus.ERROR
    batch = [(claim_one(), None), (claim_one(), None)]
    assert storage.complete_many(batch, run_ms=[3, 4]) == [True, True]
    assert storage.finish_cancelled(claim_one())  # a cancelled run counts in none
    assert written() == {"done": 3, "retried": 1, "failed": 2}
    # A report under a lost lease stores nothing and counts nothing.
    job = claim_one()
    Job.objects.filter(pk=job.pk).update(lease_token="taken-by-another")
    assert not storage.complete(job, None)
    assert storage.fail(job, None, message="late") is None
    assert written() == {"done": 3, "retried": 1, "failed": 2}
    stat = stat_of("q")
    assert (stat.done, stat.retried, stat.failed) == (3, 1, 2)
    # Every timed attempt is in the run-time histogram; every claim in the pickup one.
    timed = sum(getattr(stat, f"le_{b}") for b in ("10", "100", "1000", "10000")) + stat.le_inf
    assert timed >= 6
    assert stat.pickup_le_100 + stat.pickup_le_1000 + stat.pickup_le_10000 >= 8


def test_claim__a_foremans_claim_not_started_yet_counts_its_pickup(written):
    # runworkers claims with started=False (its start is stored later): the pickup
    # is still the wait from run_at to the claim.
    make_job(queue="q")
    (job,) = storage.claim("default", owner="test:1", queues=["q"], started=False)
    assert job.started_at is None
    assert storage.complete(job, None)
    written()
    stat = stat_of("q")
    assert stat.pickup_le_100 + stat.pickup_le_1000 + stat.pickup_le_10000 == 1


def test_reaper__counts_an_expired_lease_as_a_failed_attempt(written):
    running(queue="q", lease_s=-5, max_retry=2)  # retries left: back to the queue
    running(queue="q", lease_s=-5, max_retry=0)  # none left: a dead letter
    assert reaping.reap_expired("default") == 2
    assert written() == {"done": 0, "retried": 1, "failed": 1}
    stat = stat_of("q")
    assert stat.duration_ms_sum == 0 and stat.le_inf == 0  # counted, not timed


def test_process_stats__a_timer_writes_the_last_counts_without_more_traffic():
    stats = ProcessStats(flush_s=0.2, flush_timer=True)
    try:
        with CaptureQueriesContext(connection) as queries:
            for _ in range(5):
                stats.record_outcome("default", "q", "t", "done", duration_ms=5)
        assert not queries.captured_queries  # the caller's thread writes nothing
        deadline = time.monotonic() + 60
        while not JobTotal.objects.filter(queue="q", done=5).exists():
            assert time.monotonic() < deadline, "the timer never wrote the counts"
            time.sleep(0.05)
        assert stats.pending("default") == 0
        assert stat_of("q").done == 5
    finally:
        stats.clear()


def test_process_stats__a_forked_child_drops_the_counts_it_inherited(monkeypatch):
    monkeypatch.setattr(process_stats, "flush_timer", False)
    process_stats.record_outcome("default", "q", "t", "done", duration_ms=5)
    pid = os.fork()
    if pid == 0:  # the child: its parent writes these counts, never it too
        os._exit(0 if process_stats.pending("default") == 0 else 1)
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert process_stats.pending("default") == 1  # the parent's are still there
    process_stats.flush("default")
    assert JobTotal.objects.get(queue="q").done == 1


def test_totals__add_up_across_flushes_and_minutes(written):
    clock = [1_800_000_000.0]
    stats = ProcessStats(wall=lambda: clock[0])
    stats.record_outcome("default", "q", "t", "done", duration_ms=5)
    stats.flush("default")
    clock[0] += 120  # another minute: another JobStat row, the same JobTotal row
    stats.record_outcome("default", "q", "t", "done", duration_ms=5)
    stats.record_pickup("default", "q", "t", 90_000)
    stats.flush("default")
    assert JobStat.objects.filter(queue="q").count() == 2
    total = JobTotal.objects.get(queue="q")
    assert (total.done, total.duration_ms_sum, total.le_10) == (2, 10, 2)
    assert (total.pickup_le_300000, total.pickup_ms_sum) == (1, 90_000)


def test_pickup_bucket_of__bounds_are_inclusive():
    assert [pickup_bucket_of(ms) for ms in (0, 100, 101, 3_600_000, 3_600_001)] == [
        "pickup_le_100",
        "pickup_le_100",
        "pickup_le_1000",
        "pickup_le_3600000",
        "pickup_le_inf",
    ]


def test_fail__a_failed_attempt_timed_by_the_worker(written):
    job = claim_one(max_retry=3)
    assert storage.fail(job, None, message="slow", run_ms=120_000) == JobStatus.RETRY
    written()
    assert stat_of("q").le_300000 == 1


def test_process_stats__no_timer_while_a_foreman_writes_the_counts():
    stats = ProcessStats(flush_s=0.05, flush_timer=True)
    stats.hold_timer("default")
    try:
        stats.record_outcome("default", "q", "t", "done", duration_ms=5)
        time.sleep(0.3)
        assert stats.pending("default") == 1  # left to the foreman's housekeeping
        assert not JobTotal.objects.exists()
        stats.release_timer("default")  # the foreman stopped: the timer takes over
        deadline = time.monotonic() + 60
        while not JobTotal.objects.filter(queue="q", done=1).exists():
            assert time.monotonic() < deadline, "the timer never wrote the counts"
            time.sleep(0.05)
    finally:
        stats.clear()


def test_batches__counted_per_queue_and_job_type_as_one_by_one(written):
    # A claim's pickups and a batched completion's outcomes are counted per (queue,
    # job type) group of the batch: the same counts as job by job.
    for queue, job_type in [("qa", "maint.noop"), ("qa", "maint.other"), ("qb", "maint.noop")]:
        for _ in range(2):
            make_job(queue=queue, job_type=job_type)
    claimed = storage.claim("default", owner="test:1", limit=6, queues=["qa", "qb"])
    assert len(claimed) == 6
    run_ms = [5, 50, 500, 5000, None, 7]
    assert storage.complete_many([(job, None) for job in claimed], run_ms=run_ms) == [True] * 6
    process_stats.flush("default")
    rows = {
        (row.queue, row.job_type): row for row in JobStat.objects.filter(queue__in=["qa", "qb"])
    }
    assert sorted(rows) == [("qa", "maint.noop"), ("qa", "maint.other"), ("qb", "maint.noop")]
    for job, ms in zip(claimed, run_ms, strict=True):
        row = rows[(job.queue, job.job_type)]
        assert row.done == 2
        assert row.pickup_le_100 + row.pickup_le_1000 + row.pickup_le_10000 == 2
        if ms is not None and ms >= 1000:
            assert row.le_10000 >= 1 and row.duration_ms_sum >= ms
    timed = [
        row.le_10 + row.le_100 + row.le_1000 + row.le_10000 + row.le_inf for row in rows.values()
    ]
    assert sum(timed) == 6  # a None run time is timed from the row's start, as one by one
    assert sum(row.duration_ms_sum for row in rows.values()) >= 5 + 50 + 500 + 5000 + 7

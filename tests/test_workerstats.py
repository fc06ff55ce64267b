"""The worker registry and the per-minute stats buffer (django_jobqueue.store.workerstats)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections
from django.db.models import F
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.models import JobStat, JobTotal, Worker
from django_jobqueue.store import workerstats
from django_jobqueue.store.workerstats import StatsBuffer

T0 = datetime(2026, 12, 1, 10, 0, 30, tzinfo=UTC).timestamp()


@pytest.mark.django_db
def test_register_worker__restarts_counters_and_beat_updates_them():
    worker = workerstats.register_worker("default", "h:1", host="h", pid=1, queues=["b", "a"])
    assert (worker.queues, worker.busy, worker.done) == (["a", "b"], 0, 0)
    assert workerstats.beat_worker("default", "h:1", busy=2, done=5, failed=1) is True
    worker.refresh_from_db()
    assert (worker.busy, worker.done, worker.failed) == (2, 5, 1)
    again = workerstats.register_worker("default", "h:1", host="h", pid=1)
    assert (again.pk, again.done, again.queues) == (worker.pk, 0, [])


@pytest.mark.django_db
def test_beat_worker__makes_a_pruned_row_again():
    assert workerstats.beat_worker("default", "gone:9", busy=0, done=3, failed=0) is False
    assert Worker.objects.get(name="gone:9").done == 3


@pytest.mark.django_db
def test_register_worker__rejects_bad_names():
    with pytest.raises(InvalidOption, match="1 to 200 characters"):
        workerstats.register_worker("default", "")
    with pytest.raises(InvalidOption, match="concurrency"):
        workerstats.register_worker("default", "w", concurrency=0)


@pytest.mark.django_db
# Three heartbeats are 30 s: a stall of the test between registering "live:1" and
# asking must not make it gone (it was 3 s).
@override_settings(JOBQUEUE={"HEARTBEAT_MS": 10_000, "LEASE_MS": 30_000})
def test_live_workers__gone_after_three_heartbeats_and_pruned_later():
    workerstats.register_worker("default", "live:1")
    workerstats.register_worker("default", "late:2")
    workerstats.register_worker("default", "old:3")
    Worker.objects.filter(name="late:2").update(
        last_seen_at=F("last_seen_at") - timedelta(seconds=31)
    )
    Worker.objects.filter(name="old:3").update(last_seen_at=F("last_seen_at") - timedelta(days=2))
    assert [w.name for w in workerstats.live_workers("default")] == ["live:1"]
    assert [w.name for w in workerstats.gone_workers("default")] == ["late:2", "old:3"]
    assert workerstats.prune_workers("default") == 1
    assert sorted(Worker.objects.values_list("name", flat=True)) == ["late:2", "live:1"]


def test_bucket_of__bounds_are_inclusive():
    assert [workerstats.bucket_of(ms) for ms in (0, 10, 11, 300_000, 300_001)] == [
        "le_10",
        "le_10",
        "le_100",
        "le_300000",
        "le_inf",
    ]


def test_record__rejects_unknown_outcomes():
    with pytest.raises(InvalidOption, match="outcome"):
        StatsBuffer().record("q", "t", "exploded")


@pytest.mark.django_db
def test_flush__upserts_one_row_per_minute_queue_and_type():
    clock = [T0]
    buffer = StatsBuffer(clock=lambda: clock[0])
    buffer.record("q", "t", "done", 5)
    buffer.record("q", "t", "done", 50)
    buffer.record("q", "t", "failed", 70_000)
    buffer.record("q", "u", "deduplicated")
    clock[0] += 60
    buffer.record("q", "t", "retried", 1)
    assert len(buffer) == 3
    with CaptureQueriesContext(connection) as ctx:
        assert buffer.flush("default") == 3
    # One statement per table: the minutes, then the totals (inside a savepoint when
    # the test's transaction is open).
    assert [q["sql"].split()[0] for q in ctx.captured_queries if "SAVEPOINT" not in q["sql"]] == [
        "INSERT",
        "INSERT",
    ]
    assert len(buffer) == 0 and buffer.flush("default") == 0
    buffer.record("q", "t", "done", 2_000)  # same minute again: adds up
    buffer.flush("default")
    rows = {(r.minute.minute, r.job_type): r for r in JobStat.objects.all()}
    first = rows[(0, "t")]
    assert (first.done, first.failed, first.duration_ms_sum) == (2, 1, 70_055)
    assert (first.le_10, first.le_100, first.le_300000) == (1, 1, 1)
    later = rows[(1, "t")]
    assert (later.retried, later.done, later.le_10, later.le_10000) == (1, 1, 1, 1)
    assert rows[(0, "u")].deduplicated == 1
    totals = {r.job_type: r for r in JobTotal.objects.all()}
    assert (totals["t"].done, totals["t"].failed, totals["t"].retried) == (3, 1, 1)
    assert totals["t"].duration_ms_sum == 70_055 + 1 + 2_000
    assert totals["u"].deduplicated == 1


@pytest.mark.django_db
@override_settings(JOBQUEUE={"STATS_RETENTION": "1h"})
def test_prune_stats__deletes_rows_past_the_retention():
    now = datetime.fromtimestamp(T0, UTC)
    buffer = StatsBuffer(clock=lambda: T0 - 7200)
    buffer.record("q", "t", "done", 1)
    buffer.flush("default")
    buffer = StatsBuffer(clock=lambda: T0)
    buffer.record("q", "t", "done", 1)
    buffer.flush("default")
    assert workerstats.prune_stats("default", now=now) == 1
    assert JobStat.objects.count() == 1


@pytest.mark.vendor("postgresql", "mysql")
@pytest.mark.django_db(transaction=True)
def test_flush__two_threads_flushing_the_same_minute_sum_correctly():
    rounds = 20
    barrier = threading.Barrier(2)
    errors = []

    def flusher():
        try:
            for _ in range(rounds):
                buffer = StatsBuffer(clock=lambda: T0)
                for job_type in ("a", "b", "c"):
                    buffer.record("q", job_type, "done", 20)
                barrier.wait()
                buffer.flush("default")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=flusher) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(JobStat.objects.values_list("job_type", "done", "le_100")) == [
        (t, 2 * rounds, 2 * rounds) for t in ("a", "b", "c")
    ]
    assert connection.vendor in ("postgresql", "mysql")


@pytest.mark.django_db(transaction=True)
def test_clean_stop__is_gone_at_once_with_its_final_counts():
    """A foreman that stops cleanly is gone at once, not three heartbeats later, and its
    row keeps what it did (a burst may end before its first heartbeat)."""
    from django_jobqueue import enqueue_job
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    for n in range(5):
        enqueue_job(None, "worker.record", {"label": str(n)})
    foreman = Foreman(ForemanOptions(burst=True, min_sleep_ms=5, max_sleep_ms=50, ramp_time_ms=0))
    foreman.run(install_signals=False)

    assert workerstats.live_workers("default") == []
    (gone,) = workerstats.gone_workers("default")
    assert gone.name == foreman.name
    assert gone.stopped_at is not None
    assert (gone.done, gone.failed, gone.busy) == (5, 0, 0)
    again = workerstats.register_worker("default", foreman.name)
    assert again.stopped_at is None
    assert [w.name for w in workerstats.live_workers("default")] == [foreman.name]

"""The foreman in-process (``drain``): outcomes, order, retries, timeouts, middleware."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.db.models.functions import Now
from django.test import override_settings

from django_jobqueue import enqueue_job, storage
from django_jobqueue.core.signals import job_finished, job_started
from django_jobqueue.models import Job, JobStatus
from tests.testapp.jobtypes import worker as worker_jobs
from tests.testapp.models import RunRecord
from tests.workers_helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)


def job_of(result: dict[str, str]) -> Job:
    return Job.objects.get(jid=result["jid"])


def test_drain__runs_every_due_job_once():
    jids = [enqueue_job(None, "worker.record", {"label": str(i)})["jid"] for i in range(30)]
    stats = drain(concurrency=4)
    assert stats == {"done": 30}
    assert sorted(RunRecord.objects.values_list("jid", flat=True)) == sorted(jids)
    assert Job.objects.filter(status=JobStatus.DONE).count() == 30
    assert not Job.objects.processing().exists()
    assert job_of({"jid": jids[0]}).result == {"label": "0"}


def test_rolled_back_enqueue__never_runs():
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        enqueue_job(None, "worker.record", {"label": "rolled back"})
        raise Boom
    kept = enqueue_job(None, "worker.record", {"label": "kept"})
    assert drain(concurrency=2) == {"done": 1}
    assert list(RunRecord.objects.values_list("label", "jid")) == [("kept", kept["jid"])]
    assert Job.objects.count() == 1


def test_priority__one_runs_first_then_run_at_then_age():
    for label, priority in [("p5", 5), ("p1-a", 1), ("p3", 3), ("p1-b", 1), ("p100", 100)]:
        enqueue_job(None, "worker.record", {"label": label}, priority=priority)
    drain(concurrency=1)
    assert list(RunRecord.objects.values_list("label", flat=True)) == [
        "p1-a",
        "p1-b",
        "p3",
        "p5",
        "p100",
    ]


def test_backoff__failed_attempt_waits_before_its_retry():
    with override_settings(JOBQUEUE={"BACKOFF_BASE_MS": 10_000, "BACKOFF_JITTER": 0}):
        job = job_of(enqueue_job(None, "worker.fail", {}))
        assert drain(concurrency=1) == {"retry": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.RETRY
    assert job.attempt == 1
    # Stored by the database clock: run_at is the failure time plus the backoff.
    assert job.run_at - job.updated_at >= timedelta(seconds=9)
    assert job.errors[0]["exception_class"] == "builtins.RuntimeError"
    assert not Job.objects.due().exists()


def test_max_retry__after_its_retries_the_job_is_a_dead_letter(no_backoff):
    job = job_of(enqueue_job(None, "worker.fail", {}))  # max_retry=2: three attempts
    assert drain(concurrency=2) == {"retry": 2, "max_retry": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.MAX_RETRY
    assert job.attempt == 3
    assert [e["attempt"] for e in job.errors] == [1, 2, 3]
    assert list(RunRecord.objects.values_list("attempt", flat=True)) == [1, 2, 3]
    assert "boom" in job.message


def test_non_retryable_error__is_error_at_once(no_backoff):
    job = job_of(enqueue_job(None, "worker.fatal", {}))
    assert drain(concurrency=1) == {"error": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.ERROR
    assert job.attempt == 1
    assert RunRecord.objects.count() == 1


def test_expired_job__is_never_run():
    expired = job_of(enqueue_job(None, "worker.record", {"label": "late"}, expires_ms=60_000))
    Job.objects.filter(pk=expired.pk).update(expires_at=Now() - timedelta(hours=1))
    fresh = enqueue_job(None, "worker.record", {"label": "fresh"}, expires_ms=3_600_000)
    assert drain(concurrency=1) == {"error": 1, "done": 1}
    expired.refresh_from_db()
    assert expired.status == JobStatus.ERROR
    assert "expired" in expired.message
    assert list(RunRecord.objects.values_list("jid", flat=True)) == [fresh["jid"]]


def test_timeout__counts_as_a_failed_attempt_and_the_slot_is_not_lost(caplog):
    caplog.set_level(logging.DEBUG, logger="django_jobqueue.worker.executor")
    slow = job_of(
        enqueue_job(None, "worker.sleep", {"s": 30}, timeout_ms=300, max_retry=0, priority=1)
    )
    others = [enqueue_job(None, "worker.record", {"label": str(i)}) for i in range(3)]
    # One worker slot: the jobs after the timeout run only if the slot survived it.
    stats = drain(concurrency=1)
    assert stats == {"max_retry": 1, "done": 3}
    slow.refresh_from_db()
    assert slow.status == JobStatus.MAX_RETRY
    assert "TimeoutError" in slow.message
    assert "300 ms" in slow.message
    done = Job.objects.filter(jid__in=[r["jid"] for r in others], status=JobStatus.DONE)
    assert done.count() == 3
    # The handler sees the lost lease and returns; its dropped outcome is no warning,
    # since the timeout was stored and logged as an error already.
    deadline = time.monotonic() + 30
    while "job outcome dropped" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.05)
    dropped = [r for r in caplog.records if "job outcome dropped" in r.getMessage()]
    assert [r.levelno for r in dropped] == [logging.DEBUG]


def test_timeout__the_abandoned_runner_claims_nothing_once_its_handler_returns():
    # A runner runs job after job without going back to its slot; the slot abandons
    # it at a timeout. Its handler returns soon after (it sees the lost lease): that
    # thread must then stop, not claim the next jobs beside the slot's new runner.
    slow = enqueue_job(None, "worker.sleep", {"s": 30}, timeout_ms=300, max_retry=0, priority=1)
    others = [enqueue_job(None, "worker.record", {"label": str(i)}) for i in range(40)]
    threads: dict[str, int] = {}

    def started(sender: Any, job: Job, **kwargs: Any) -> None:
        threads[job.jid] = threading.get_ident()

    job_started.connect(started)
    try:
        assert drain(concurrency=1) == {"max_retry": 1, "done": 40}
    finally:
        job_started.disconnect(started)
    stuck = threads[slow["jid"]]
    assert [r["jid"] for r in others if threads[r["jid"]] == stuck] == []


def test_timeout__is_retried_when_retries_are_left(no_backoff):
    job = job_of(
        enqueue_job(None, "worker.sleep", {"s": 30, "once": True}, timeout_ms=300, max_retry=1)
    )
    assert drain(concurrency=1) == {"retry": 1, "done": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.DONE
    assert job.attempt == 2


def test_unknown_job_type_at_run_time__is_error_not_a_crash():
    job = job_of(enqueue_job(None, "worker.record", {"label": "gone"}))
    Job.objects.filter(pk=job.pk).update(job_type="worker.no_longer_deployed")
    after = enqueue_job(None, "worker.record", {"label": "after"})
    assert drain(concurrency=1) == {"error": 1, "done": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.ERROR
    assert "worker.no_longer_deployed" in job.message
    assert job_of(after).status == JobStatus.DONE


calls: list[str] = []


def outer(handler: Any) -> Any:
    def wrapped(payload: Any, ctx: Any) -> Any:
        calls.append("outer:before")
        result = handler(payload, ctx)
        calls.append("outer:after")
        return {"outer": result}

    return wrapped


def inner(handler: Any) -> Any:
    def wrapped(payload: Any, ctx: Any) -> Any:
        calls.append("inner:before")
        result = handler(payload, ctx)
        calls.append("inner:after")
        return {"inner": result}

    return wrapped


def test_middleware__first_listed_is_outermost():
    calls.clear()
    job = job_of(enqueue_job(None, "worker.record", {"label": "m"}))
    paths = [f"{__name__}.outer", f"{__name__}.inner"]
    with override_settings(JOBQUEUE={"MIDDLEWARE": paths}):
        assert drain(concurrency=1) == {"done": 1}
    assert calls == ["outer:before", "inner:before", "inner:after", "outer:after"]
    job.refresh_from_db()
    assert job.result == {"outer": {"inner": {"label": "m"}}}


def test_lost_lease__cannot_overwrite_the_new_owners_result():
    job_of(enqueue_job(None, "worker.record", {"label": "x"}))
    [stale] = storage.claim("default", owner="paused-worker", lease_ms=1000)
    # The paused worker's lease runs out; the reaper gives the job to another worker.
    Job.objects.filter(pk=stale.pk).update(lease_expires_at=Now() - timedelta(seconds=1))
    assert drain(concurrency=1) == {"done": 1}
    assert not storage.complete(stale, {"stale": True})
    assert storage.fail(stale, RuntimeError("late")) is None
    assert not storage.hand_back(stale)
    fresh = Job.objects.get(pk=stale.pk)
    assert fresh.status == JobStatus.DONE
    assert fresh.result == {"label": "x"}
    assert fresh.attempt == 2


def test_async_handler__runs_in_its_own_event_loop():
    job = job_of(enqueue_job(None, "worker.async", {}))
    assert drain(concurrency=1) == {"done": 1}
    job.refresh_from_db()
    assert job.result == "async-ok"
    assert RunRecord.objects.get().label == "async"


def test_per_type_concurrency__limit_holds_in_one_foreman():
    worker_jobs.limited_max = 0
    for _ in range(6):
        enqueue_job(None, "worker.limited", {"s": 0.05})
    for i in range(6):
        enqueue_job(None, "worker.record", {"label": str(i)})
    assert drain(concurrency=4) == {"done": 12}
    assert worker_jobs.limited_max == 1


def test_context__enqueue_job_from_a_handler():
    parent = job_of(enqueue_job(None, "worker.spawn", {}))
    assert drain(concurrency=2) == {"done": 2}
    parent.refresh_from_db()
    child = Job.objects.get(jid=parent.result)
    assert child.status == JobStatus.DONE
    assert sorted(RunRecord.objects.values_list("label", flat=True)) == ["child", "parent"]


def test_cancel_requested__running_job_stops_as_cancelled():
    job = job_of(enqueue_job(None, "worker.sleep", {"s": 30}))
    result: dict[str, Any] = {}
    # Heartbeats bring the cancel in 50 ms; the lease is long so a loaded machine that
    # starves the heartbeat thread for a second does not lose it ("lease lost").
    thread = threading.Thread(
        target=lambda: result.update(drain(concurrency=1, lease_ms=30_000, heartbeat_ms=50))
    )
    thread.start()
    deadline = time.monotonic() + 60
    while not RunRecord.objects.filter(jid=job.jid).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    Job.objects.filter(pk=job.pk).update(cancel_requested=True)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert result == {"cancelled": 1}
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


def test_signals__started_and_finished_are_sent():
    seen: list[tuple[str, str]] = []

    def started(sender: str, job: Job, **kwargs: Any) -> None:
        seen.append(("started", sender))

    def finished(sender: str, job: Job, status: str, **kwargs: Any) -> None:
        seen.append((status, sender))

    job_started.connect(started)
    job_finished.connect(finished)
    try:
        enqueue_job(None, "worker.record", {})
        drain(concurrency=1)
    finally:
        job_started.disconnect(started)
        job_finished.disconnect(finished)
    assert seen == [("started", "worker.record"), ("done", "worker.record")]


def test_queues__only_the_named_queues_are_drained():
    a = enqueue_job("a", "worker.record", {"label": "a"})
    b = enqueue_job("b", "worker.record", {"label": "b"})
    assert drain(queues=["a"], concurrency=2) == {"done": 1}
    assert job_of(a).status == JobStatus.DONE
    assert job_of(b).status == JobStatus.INIT


@pytest.mark.vendor("postgresql")
def test_foreman__leaves_no_database_session_open():
    from django.db import connection

    def others() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0]

    before = others()
    for _ in range(20):
        enqueue_job(None, "worker.record", {"label": "x"})
    enqueue_job(None, "worker.async", {})
    assert drain(concurrency=4) == {"done": 21}
    # Worker threads, runners, the heartbeat and the LISTEN connection are all closed
    # by the time run() returns. A backend leaves pg_stat_activity a moment after its
    # client closed it, so wait for that (a session still open stays and fails).
    deadline = time.monotonic() + 30
    while others() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert others() == before


def test_no_event_loop__busy_slots_are_counted_and_all_given_back():
    # A middleware that cannot wrap async handlers leaves the foreman without an event
    # loop: a runner is its slot, and the busy count is kept without reservations.
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    for n in range(150):
        enqueue_job(None, "worker.record", {"label": str(n)})
    for _ in range(3):  # past their timeout: the slot's thread gives up on them
        enqueue_job(None, "worker.sleep", {"s": 2}, timeout_ms=200, max_retry=0)
    busiest: list[int] = []
    with override_settings(JOBQUEUE={"MIDDLEWARE": [f"{__name__}.inner"]}):
        foreman = Foreman(
            ForemanOptions(
                concurrency=4, burst=True, min_sleep_ms=5, max_sleep_ms=50, ramp_time_ms=0
            )
        )

        def watch() -> None:
            while not foreman._done.is_set():
                busiest.append(foreman._busy)
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            stats = foreman.run(install_signals=False)
        finally:
            foreman._done.set()
            watcher.join(10)
    assert foreman.aio is None
    assert stats.get("done") == 150 and sum(stats.values()) == 153
    assert foreman._busy == 0
    assert busiest and 0 <= min(busiest) and max(busiest) <= 4

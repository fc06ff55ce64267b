"""How many done outcomes one completer write takes, by vendor
(django_jobqueue/worker/completer.py, ``MAX_BATCH``)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection
from django.db import connections as db_connections

from django_jobqueue import enqueue_many, storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.worker.completer import Completer, max_batch_for
from django_jobqueue.worker.foreman import Foreman
from django_jobqueue.worker.options import ForemanOptions

pytestmark = pytest.mark.django_db(transaction=True)

#: PostgreSQL's write binds arrays: a larger batch; the others' statements grow per job.
EXPECTED = {"postgresql": 256, "mysql": 64, "sqlite": 64}


def test_foreman__its_completer_takes_its_vendors_batch() -> None:
    run = Foreman(ForemanOptions(burst=True))
    assert run.completer is not None
    assert run.completer.max_batch == max_batch_for(connection.vendor)
    assert max_batch_for(connection.vendor) == EXPECTED[connection.vendor]


def test_completer__writes_a_full_batch_at_once_then_the_rest_when_closed() -> None:
    # With a handler still running (busy 1) and a wait longer than the test, the
    # completer's thread writes only when a whole batch waits; close() writes the rest.
    size = max_batch_for(connection.vendor)
    count = size + 40
    enqueue_many([{"job_type": "maint.noop"}] * count)
    jobs = storage.claim("default", owner="w", limit=count, lease_ms=60_000)
    assert len(jobs) == count
    running = threading.Event()
    running.set()
    completer = Completer(
        busy=lambda: 1 if running.is_set() else 0, max_batch=size, max_wait_ms=60_000
    )
    completer.start()
    stored: list[bool] = []
    for job in jobs:
        completer.submit(job, None, stored.append)
    deadline = time.monotonic() + 30
    while completer.written < size and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (completer.flushes, completer.written) == (1, size)
    running.clear()
    completer.close()
    assert (completer.flushes, completer.written) == (2, count)
    assert stored == [True] * count
    assert Job.objects.filter(status=JobStatus.DONE).count() == count


def test_completer__a_flush_writes_at_most_a_batch_at_a_time() -> None:
    # A heartbeat's flush of a large prefetch's ends: max_batch a write, as the
    # thread writes (MySQL's and SQLite's statements grow by the job).
    enqueue_many([{"job_type": "maint.noop"}] * 10)
    jobs = storage.claim("default", owner="w", limit=10, lease_ms=60_000)
    completer = Completer(busy=lambda: 0, max_batch=4)  # not started: flush writes here
    stored: list[bool] = []
    for job in jobs:
        completer.submit(job, None, stored.append)
    completer.flush()
    assert (completer.flushes, completer.written) == (3, 10)
    assert stored == [True] * 10


def test_a_success_from_the_event_loop_after_the_completer_closed__is_stored_off_the_loop() -> None:
    # A stop closes the completer while async jobs may still end. Such a success was
    # written on the event loop's thread, where Django refuses the ORM
    # (SynchronousOnlyOperation, logged as "database unreachable"): not stored, and the
    # job left processing until its lease ran out. On the loop the closed completer
    # now writes nothing and says so (OFF_LOOP); the async path stores it in the
    # loop's sync thread (django_jobqueue/worker/aio.py), as done here.
    import asyncio

    from asgiref.sync import sync_to_async

    from django_jobqueue.worker import executor
    from django_jobqueue.worker.context import JobContext

    enqueue_many([{"job_type": "maint.noop"}])
    [job] = storage.claim("default", owner="w", limit=1, lease_ms=60_000)
    completer = Completer(busy=lambda: 0)
    completer.start()
    completer.close()
    callbacks: list[str | None] = []

    async def end_on_the_loop() -> tuple[str | None, str | None]:
        ctx = JobContext(job, worker="w", lease_ms=60_000)
        first = executor.store_outcome(
            job,
            ctx,
            started=time.monotonic(),
            error=None,
            result={"ok": 1},
            completer=completer,
            on_stored=callbacks.append,
            on_loop=True,
        )
        second = await sync_to_async(store_and_close)(ctx)
        return first, second

    def store_and_close(ctx: JobContext) -> str | None:
        # In asgiref's shared thread: its session must not outlive this test, for
        # a later async test to meet it dead.
        try:
            return executor.store_outcome(
                job, ctx, started=time.monotonic(), error=None, result={"ok": 1}
            )
        finally:
            db_connections.close_all()

    assert asyncio.run(end_on_the_loop()) == (executor.OFF_LOOP, JobStatus.DONE)
    assert callbacks == []  # nothing was written by the completer, nor refused
    job.refresh_from_db()
    assert job.status == JobStatus.DONE
    assert job.result == {"ok": 1}

"""Ends and enqueues of linked jobs racing each other, with real threads on PostgreSQL
and MariaDB (docs/workflows.md "Guarantees", "Lock order"): no dependent is left
blocked, and no path deadlocks another."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction

import django_jobqueue as jq
from django_jobqueue import storage
from django_jobqueue.flows import hooks
from django_jobqueue.models import Batch, Job, JobStatus

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.vendor("postgresql", "mysql"),  # SQLite runs one writer at a time
]


def lock_waits() -> int:
    """Return how many other sessions of this test database wait for a row lock."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
        else:
            # MariaDB lists a lock wait met while the optimizer reads a const row
            # ("Statistics") nowhere in innodb_trx: a statement of another session
            # of this database running for 200 ms is the test's waiting one.
            cursor.execute(
                "SELECT count(*) FROM information_schema.processlist"
                " WHERE db = DATABASE() AND id <> CONNECTION_ID()"
                " AND command = 'Query' AND time_ms > 200"
            )
        return int(cursor.fetchone()[0])


def until_a_lock_wait(errors: list[BaseException], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while lock_waits() == 0:
        assert not errors, errors
        assert time.monotonic() < deadline, "no session ever waited for a lock"
        time.sleep(0.01)


def run(target: Callable[[], Any], errors: list[BaseException]) -> threading.Thread:
    def body() -> None:
        try:
            target()
        except BaseException as error:  # reported by the test's assertion
            errors.append(error)
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


@pytest.fixture
def a_table_of_many_ended_jobs() -> Iterator[None]:
    """Fill the job table with 2,000 done jobs (its usual state) and analyse it.

    On a table of a few dozen rows InnoDB's plans scan the primary key, which locks
    in pk order whatever the statement asks; on this one they take the ``jid`` and
    lease indexes, as in production (docs/workflows.md "Lock order"). Afterwards the
    jobs are deleted and the table analysed again: statistics of 2,000 rows left
    behind would scale with the pages later tests leave, and the admin's paginator
    reads them (admin/changelist.py)."""
    jq.enqueue_many([{"queue": "ended", "job_type": "flows.noop"}] * 2000)
    Job.objects.filter(queue="ended").update(status=JobStatus.DONE, waiting=False)
    _analyze()
    yield
    Job.objects.filter(queue="ended").delete()
    _analyze()


def _analyze() -> None:
    table = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {table}")
            cursor.fetchall()
        elif connection.vendor == "postgresql":
            cursor.execute(f"VACUUM ANALYZE {table}")
        else:
            cursor.execute(f"ANALYZE {table}")


def unlocked(pks: list[int]) -> set[int]:
    """Return those of ``pks`` whose job rows no transaction holds locked (no wait)."""
    with transaction.atomic():
        rows = Job.objects.filter(pk__in=pks).select_for_update(skip_locked=True)
        return set(rows.values_list("pk", flat=True))


def hold(pk: int, errors: list[BaseException]) -> tuple[threading.Thread, threading.Event]:
    """Lock job row ``pk`` in a thread until the returned event is set."""
    held, release = threading.Event(), threading.Event()

    def body() -> None:
        try:
            with transaction.atomic():
                list(Job.objects.filter(pk=pk).select_for_update().values_list("pk"))
                held.set()
                assert release.wait(30)
        finally:
            held.set()

    thread = run(body, errors)
    assert held.wait(30)
    return thread, release


def test_two_upstream_jobs_ending_at_once_make_their_dependent_due() -> None:
    a = jq.enqueue_job("race", "flows.noop")
    b = jq.enqueue_job("race", "flows.noop")
    c = jq.enqueue_job("race", "flows.noop", after=[a.jid, b.jid])
    jobs = {job.jid: job for job in storage.claim("default", owner="w", limit=2, queues=["race"])}
    assert set(jobs) == {a.jid, b.jid}
    held, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def end_a() -> None:
        try:
            with transaction.atomic():
                assert storage.complete(jobs[a.jid], None)
                held.set()  # a's end written, c's row locked; not committed yet
                assert release.wait(30)
        finally:
            held.set()

    def end_b() -> None:
        assert held.wait(30)
        assert storage.complete(jobs[b.jid], None)  # waits for c's row

    first = run(end_a, errors)
    second = run(end_b, errors)
    until_a_lock_wait(errors)
    release.set()
    first.join()
    second.join()
    assert not errors, errors
    assert Job.objects.get(jid=c.jid).status == JobStatus.INIT


def test_an_enqueue_into_a_batch_after_its_job_racing_that_jobs_end_never_deadlocks() -> None:
    with jq.batch() as b:
        upstream = jq.enqueue_job("race", "flows.noop")
        jq.enqueue_job("later", "flows.noop")  # the batch stays open after upstream ends
    (job,) = storage.claim("default", owner="w", queues=["race"])
    locked, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    made: list[str] = []

    def end() -> None:
        try:
            with transaction.atomic():
                # An end writes its own row first, its batch's row after.
                list(Job.objects.filter(pk=job.pk).select_for_update().values_list("pk"))
                locked.set()
                assert release.wait(30)
                assert storage.complete(job, None)
        finally:
            locked.set()

    def enqueue() -> None:
        assert locked.wait(30)
        made.append(jq.enqueue_job("race", "flows.noop", batch=b.id, after=[upstream.jid]).jid)

    ender = run(end, errors)
    enqueuer = run(enqueue, errors)
    until_a_lock_wait(errors)  # the enqueue waits for the upstream row
    time.sleep(0.2)  # and, on the old order, would hold the batch's row meanwhile
    release.set()
    ender.join()
    enqueuer.join()
    assert not errors, errors
    assert Job.objects.get(jid=made[0]).status == JobStatus.INIT
    row = Batch.objects.get(pk=b.id)
    assert (row.total, row.done) == (3, 1)


def waits_holding_none_of(rest: list[int], first: int, action: Callable[[], Any]) -> None:
    """Hold row ``first``, run ``action`` in a thread until it waits for a lock, and
    check it holds none of the rows ``rest`` meanwhile (it locks in pk order)."""
    errors: list[BaseException] = []
    holder, release = hold(first, errors)
    worker = run(action, errors)
    until_a_lock_wait(errors)
    try:
        assert unlocked(rest) == set(rest)
    finally:
        release.set()
        holder.join()
        worker.join()
    assert not errors, errors


@pytest.mark.usefixtures("a_table_of_many_ended_jobs")
def test_an_enqueue_after_many_jobs_locks_them_in_pk_order() -> None:
    """While the lowest-pk upstream row is held, the enqueue waits for it holding no
    other upstream row. Scanning the ``jid`` index, InnoDB locked them in jid order
    (random) first, which deadlocked the batched ``done`` (1213)."""
    # One call: its jids share a millisecond, so their order below it is random, not
    # the pks' (jids are made in time order: one job a call would sort as its pk).
    jobs = jq.enqueue_many([{"queue": "race", "job_type": "flows.noop"}] * 30)
    pks = dict(Job.objects.filter(queue="race").values_list("jid", "pk"))
    upstream = sorted(jobs, key=lambda r: pks[r.jid])
    # The lowest pk's jid not the lowest jid: a jid-order lock takes another row first.
    while upstream[0].jid == min(r.jid for r in upstream):
        upstream = upstream[1:]
    first, rest = pks[upstream[0].jid], [pks[r.jid] for r in upstream[1:]]
    waits_holding_none_of(rest, first, lambda: jq.enqueue_job("race", "flows.noop", after=upstream))


@pytest.mark.usefixtures("a_table_of_many_ended_jobs")
def test_a_batched_done_locks_its_jobs_in_pk_order() -> None:
    """While the lowest-pk row is held, the batched ``done`` waits for it holding no
    other row of the batch, though the leases end in the opposite order (heartbeats
    extend them one by one): on MySQL it locks by the primary key, not by the lease
    index (status, lease_expires_at) InnoDB chose for it."""
    with jq.batch():
        for _ in range(30):
            jq.enqueue_job("race", "flows.noop")
    jobs = sorted(
        storage.claim("default", owner="w", limit=30, queues=["race"]), key=lambda j: j.pk
    )
    assert len(jobs) == 30
    for rank, job in enumerate(jobs):  # the lowest pk's lease ends last
        later = Job.objects.filter(pk=job.pk).values_list("lease_expires_at", flat=True)[0]
        Job.objects.filter(pk=job.pk).update(lease_expires_at=later - timedelta(seconds=rank))
    first, rest = jobs[0].pk, [job.pk for job in jobs[1:]]
    stored: list[set[int]] = []
    items = [(job, None, None) for job in jobs]
    waits_holding_none_of(rest, first, lambda: stored.append(hooks.complete_rows("default", items)))
    assert stored == [{job.pk for job in jobs}]


@pytest.mark.usefixtures("a_table_of_many_ended_jobs")
def test_an_enqueue_after_many_running_jobs_racing_their_batched_done_never_deadlocks() -> None:
    for _round in range(10):
        with jq.batch():  # linked: the batched done takes its transaction path
            jids = [jq.enqueue_job("race", "flows.noop").jid for _ in range(60)]
        upstream = jids[::2]
        jobs = storage.claim("default", owner="w", limit=60, queues=["race"])
        assert len(jobs) == 60
        # Listed in descending pk order: the batched done must not lock in list order.
        items = [(job, None, None) for job in sorted(jobs, key=lambda job: -job.pk)]
        start = threading.Barrier(2)
        errors: list[BaseException] = []
        made: list[str] = []
        stored: list[set[int]] = []

        def done(
            items: list[Any] = items, start: threading.Barrier = start, stored: Any = stored
        ) -> None:
            start.wait()
            stored.append(hooks.complete_rows("default", items))

        def enqueue(
            upstream: list[str] = upstream, start: threading.Barrier = start, made: Any = made
        ) -> None:
            start.wait()
            made.append(jq.enqueue_job("race", "flows.noop", after=upstream).jid)

        threads = [run(done, errors), run(enqueue, errors)]
        for thread in threads:
            thread.join()
        assert not errors, errors
        assert stored[0] == {job.pk for job in jobs}
        assert Job.objects.get(jid=made[0]).status == JobStatus.INIT
        Job.objects.filter(queue="race").delete()


@pytest.mark.vendor("mysql")
def test_an_enqueue_after_a_job_committed_since_a_repeatable_read_callers_snapshot() -> None:
    """The enqueue reads its upstream pks without a lock, which under REPEATABLE READ
    reads the caller's snapshot: a job committed since is found by a locking read.
    (On PostgreSQL a REPEATABLE READ snapshot hides it from every read.)"""
    jq.enqueue_job("race", "flows.noop")
    errors: list[BaseException] = []
    made: list[str] = []
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assert Job.objects.filter(queue="race").count() == 1  # the snapshot is taken
        run(lambda: made.append(jq.enqueue_job("race", "flows.noop").jid), errors).join()
        assert not errors, errors
        dependent = jq.enqueue_job("race", "flows.noop", after=made)
    assert Job.objects.get(jid=dependent.jid).status == JobStatus.BLOCKED

"""The limits' claim outside any test transaction (docs/limits.md "How a claim enforces
the limits"): on PostgreSQL its statements travel in pipelined flights
(django_jobqueue/store/flights.py), one round trip each; elsewhere one by one.

tests/test_limits.py runs the claim's decisions inside the test's transaction, where
no flight is pipelined; these run them in the worker's own shape, on every database,
and pin the round trips on PostgreSQL.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection, connections
from django.test import override_settings

from django_jobqueue import storage
from django_jobqueue import storage_limits as limits_claim
from django_jobqueue.models import Job, JobStatus, LimitState
from django_jobqueue.store import limits
from django_jobqueue.store.pauses import paused_queues
from tests.limits_helpers import _fresh_limits, enqueue  # noqa: F401 (autouse fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def claim(count: int = 10) -> list[Job]:
    return storage.claim("default", owner="t", limit=count)


class Trips:
    """Count this connection's statements and round trips (PostgreSQL): a statement
    outside a pipeline is one, a pipeline is one whatever it holds."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.round_trips = 0

    def reset(self) -> None:
        """Read the cached views (limits, pauses: half a second each) and count anew."""
        limits.active("default")
        paused_queues("default")
        self.statements.clear()
        self.round_trips = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.statements.append(sql.split(None, 1)[0].upper())
        if getattr(connection.connection, "_pipeline", None) is None:
            self.round_trips += 1
        return execute(sql, params, many, context)


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[Trips]:
    if connection.vendor != "postgresql":
        pytest.skip("pipelined flights are PostgreSQL's (psycopg 3)")
    import psycopg

    counted = Trips()
    original = psycopg.Connection.pipeline

    def pipeline(self: Any) -> Any:
        counted.round_trips += 1
        return original(self)

    monkeypatch.setattr(psycopg.Connection, "pipeline", pipeline)
    with connection.execute_wrapper(counted):
        yield counted


def test_flights__a_global_limit_with_room_claims_in_one_round_trip(trips: Trips) -> None:
    enqueue("c", 5)
    limits.set_limit("default", "type:limits.run", {"concurrency": 100})
    trips.reset()
    assert len(claim(3)) == 3
    # The limit's row locked, its jobs counted, the guarded claim: the pipeline's
    # implicit transaction, committed at its end (no BEGIN, no COMMIT).
    assert trips.statements == ["INSERT", "SELECT", "UPDATE"]
    assert trips.round_trips == 1
    assert not connection.connection.info.transaction_status  # IDLE: committed


def test_flights__a_global_limit_without_room_takes_its_free_slots(trips: Trips) -> None:
    enqueue("c", 5)
    limits.set_limit("default", "type:limits.run", {"concurrency": 2})
    trips.reset()
    first = claim(10)
    assert len(first) == 2
    # The guarded claim took nothing (no room for 10); then the claim by candidates:
    # the lock, the count and the candidates, then the update and COMMIT.
    assert trips.round_trips == 3
    assert claim(10) == []
    assert storage.complete(first[0])
    assert len(claim(10)) == 1  # the ended job's slot, once
    assert Job.objects.filter(status=JobStatus.PROCESSING).count() == 2


def test_flights__a_keyed_claim_is_two_round_trips(trips: Trips) -> None:
    enqueue("a", 3)
    enqueue("b", 3)
    limits.set_limit(
        "default", "type:limits.run", {"concurrency": 1, "partition": "payload.customer"}
    )
    trips.reset()
    jobs = claim(2)
    assert sorted(j.payload["customer"] for j in jobs) == ["a", "b"]
    # The candidates (the keys at their limit left out by their own counts); then
    # the keys' locks and the update that counts them and takes what they admit.
    assert trips.statements == ["BEGIN", "SELECT", "INSERT", "UPDATE", "COMMIT"]
    assert trips.round_trips == 2
    trips.reset()
    assert claim(2) == []
    # A short claim counts the keys afterwards (which are at their limit: a job of
    # theirs that ends wakes the idle workers), a round trip of its own.
    assert trips.statements == ["BEGIN", "SELECT", "COMMIT", "SELECT"]
    assert trips.round_trips == 3
    assert limits_claim.saturated("default", "limits.run", "default")
    assert set(LimitState.objects.values_list("limit_key", flat=True)) == {"a", "b"}


def test_flights__a_failed_flight_rolls_back_and_the_session_claims_again() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("a lock timeout of PostgreSQL's, on a pipelined flight")
    enqueue("c", 3)
    limits.set_limit("default", "type:limits.run", {"concurrency": 5})
    claim(1)  # the limit's row made
    Job.objects.filter(status=JobStatus.PROCESSING).update(status=JobStatus.DONE)
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:  # another session holds the limit's row
        other = connections.create_connection("default")
        try:
            other.set_autocommit(False)
            with other.cursor() as cursor:
                cursor.execute(
                    "SELECT 1 FROM django_jobqueue_limitstate WHERE target = %s FOR UPDATE",
                    ["type:limits.run"],
                )
                held.set()
                release.wait(30)
            other.rollback()
        finally:
            other.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '100ms'")
        with pytest.raises(OperationalError):
            claim(2)
        # Rolled back whole: nothing claimed, and no transaction left open.
        assert not Job.objects.filter(status=JobStatus.PROCESSING).exists()
        assert not connection.connection.info.transaction_status  # IDLE
    finally:
        release.set()
        holder.join(30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
    assert len(claim(2)) == 2


def test_flights__a_session_killed_mid_flight_is_repeated_on_a_new_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The claim waits in its first flight for the limit's row, held by another
    # session; its own session is terminated there. The lost flight leaves the
    # connection broken for retry_on_disconnect, which claims once more on a new one.
    if connection.vendor != "postgresql":
        pytest.skip("pipelined flights are PostgreSQL's (psycopg 3)")
    caplog.set_level(logging.WARNING, logger="django_jobqueue.core.reconnect")
    enqueue("c", 3)
    limits.set_limit("default", "type:limits.run", {"concurrency": 5})
    claim(1)  # the limit's row made
    Job.objects.filter(status=JobStatus.PROCESSING).update(status=JobStatus.DONE)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (session,) = cursor.fetchone()
    held = threading.Event()

    def hold() -> None:  # another session holds the limit's row until the kill
        other = connections.create_connection("default")
        try:
            other.set_autocommit(False)
            with other.cursor() as cursor:
                cursor.execute(
                    "SELECT 1 FROM django_jobqueue_limitstate WHERE target = %s FOR UPDATE",
                    ["type:limits.run"],
                )
                held.set()
                # The claim's session waits on this row: end it, then let go.
                for _ in range(300):
                    cursor.execute(
                        "SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted",
                        [session],
                    )
                    if cursor.fetchone()[0]:
                        break
                    time.sleep(0.01)
                cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [session])
            other.rollback()
        finally:
            other.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        limits.active("default")  # the cached views read before the kill
        paused_queues("default")
        jobs = claim(2)
    finally:
        holder.join(30)
    assert len(jobs) == 2
    assert Job.objects.filter(status=JobStatus.PROCESSING).count() == 2
    assert [r for r in caplog.records if r.name == "django_jobqueue.core.reconnect"]


def test_flights__the_claims_decisions_hold_outside_a_transaction() -> None:
    # Every database: a queue limit and a type limit, a key's limit and a rate.
    enqueue("a", 3)
    enqueue("a", 3, "limits.free")
    limits.set_limit("default", "queue:lim", {"concurrency": 3})
    limits.set_limit("default", "type:limits.run", {"concurrency": 1})
    jobs = claim(10)
    assert sorted(j.job_type for j in jobs) == ["limits.free", "limits.free", "limits.run"]
    Job.objects.all().delete()
    limits.clear_limit("default", "queue:lim")
    enqueue("a", 4)
    enqueue("b", 4)
    limits.set_limit(
        "default", "type:limits.run", {"concurrency": 2, "partition": "payload.customer"}
    )
    jobs = claim(10)
    assert sorted(j.payload["customer"] for j in jobs) == ["a", "a", "b", "b"]
    assert claim(10) == []
    Job.objects.all().delete()
    enqueue("a", 10)
    limits.set_limit("default", "type:limits.run", {"rate": "1/h", "burst": 3})
    assert len(claim(10)) == 3
    assert claim(10) == []


def test_flights__a_fair_limit_rotates_its_keys_outside_a_transaction() -> None:
    # A fair target's candidates are read in rounds over its keys (not in the locks'
    # flight): tenant B's one job is among the first claim, behind A's backlog.
    enqueue("A", 30)
    (b_jid,) = enqueue("B", 1)
    limits.set_limit(
        "default",
        "type:limits.run",
        {"concurrency": 100, "partition": "payload.customer", "fair": True},
    )
    jobs = claim(4)
    assert b_jid in {job.jid for job in jobs}
    assert sorted(job.payload["customer"] for job in jobs) == ["A", "A", "A", "B"]


@override_settings(JOBQUEUE={"LOCK_TIMEOUT_MS": 200})
def test_flights__a_claim_keeps_the_jobs_its_first_transaction_committed() -> None:
    # A global limit without room for the whole claim (PostgreSQL, SQLite): the
    # guarded claim commits the other types' jobs, and the rest of the claim is a
    # second transaction. When that one fails (its lock taken meanwhile by another
    # session, past the lock timeout), the jobs committed first are still the
    # claim's: returned, not left leased to no one until their lease expires.
    if connection.vendor == "mysql":
        pytest.skip("MariaDB's limited claim is one transaction")
    free = {job.pk for job in Job.objects.filter(jid__in=enqueue("c", 3, "limits.free"))}
    enqueue("c", 3)
    limits.set_limit("default", "type:limits.run", {"concurrency": 2})
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:  # the second transaction's lock, taken before it
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                if other.vendor == "sqlite":
                    cursor.execute("BEGIN IMMEDIATE")
                else:
                    cursor.execute("BEGIN")
                    cursor.execute(
                        "SELECT 1 FROM django_jobqueue_limitstate WHERE target = %s FOR UPDATE",
                        ["type:limits.run"],
                    )
                held.set()
                release.wait(30)
                cursor.execute("ROLLBACK")
        finally:
            other.close()

    holder = threading.Thread(target=hold)
    begins = 0

    def second_begin(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal begins
        if sql.upper().startswith("BEGIN"):
            begins += 1
            # PostgreSQL's guarded claim sends no BEGIN (one pipelined flight);
            # SQLite's is the first BEGIN IMMEDIATE.
            if begins == (2 if connection.vendor == "sqlite" else 1):
                holder.start()
                assert held.wait(30)
        return execute(sql, params, many, context)

    limits.active("default")
    paused_queues("default")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '100ms'")
    try:
        with connection.execute_wrapper(second_begin):
            jobs = claim(10)
    finally:
        release.set()
        if holder.is_alive():
            holder.join(30)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET lock_timeout = 0")
    assert holder.ident is not None  # the second transaction was met
    assert {job.pk for job in jobs} == free
    assert set(Job.objects.processing().values_list("pk", flat=True)) == free
    assert len(claim(10)) == 2  # the limit's two slots, free all along


def test_flights__a_keyed_claim_keeps_its_jobs_when_its_count_after_commit_fails() -> None:
    # A short keyed claim counts the keys after its commit (a hint for the wake-ups).
    # When that read fails (here behind a migration's table lock, past the lock
    # timeout), the claimed job is still returned, not left leased to no one.
    if connection.vendor != "postgresql":
        pytest.skip("the keyed claim's two flights are PostgreSQL's")
    enqueue("a", 3)
    limits.set_limit(
        "default", "type:limits.run", {"concurrency": 1, "partition": "payload.customer"}
    )
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:  # a migration's lock on the job table
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:
                cursor.execute("BEGIN")
                cursor.execute("LOCK TABLE django_jobqueue_job IN ACCESS EXCLUSIVE MODE")
                held.set()
                release.wait(30)
                cursor.execute("ROLLBACK")
        finally:
            other.close()

    holder = threading.Thread(target=hold)

    def count_after_commit(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        outside = getattr(connection.connection, "_pipeline", None) is None
        if outside and "COUNT(*)" in sql and not holder.is_alive():
            holder.start()
            assert held.wait(30)
        return execute(sql, params, many, context)

    limits.active("default")
    paused_queues("default")
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '100ms'")
    try:
        with connection.execute_wrapper(count_after_commit):
            jobs = claim(2)
    finally:
        release.set()
        if holder.is_alive():
            holder.join(30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
    assert holder.ident is not None  # the count after the commit was met
    assert len(jobs) == 1
    assert list(Job.objects.processing().values_list("pk", flat=True)) == [jobs[0].pk]


def test_flights__a_key_filled_by_the_claim_does_not_hold_back_the_keys_behind_it() -> None:
    # docs/limits.md "No head-of-line blocking": key a's backlog comes first in claim
    # order, more of it than the claim reads at once; the claim takes a's one slot
    # and goes on to b's job behind that backlog, on every database. (b ran before:
    # a second round locks only the keys' existing rows, without waiting.)
    limits.set_limit(
        "default", "type:limits.run", {"concurrency": 1, "partition": "payload.customer"}
    )
    enqueue("b", 1)
    assert storage.complete(claim(1)[0])
    enqueue("a", 30)
    enqueue("b", 2)
    jobs = claim(4)
    assert sorted(j.payload["customer"] for j in jobs) == ["a", "b"]
    assert claim(4) == []

"""The job table's statistics on PostgreSQL: analyzed when stale, so the claim reads by
its index (docs/design.md#claim-plan)."""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections

from django_jobqueue import enqueue_many, storage_sql
from django_jobqueue.models import Job
from django_jobqueue.store import tablestats
from django_jobqueue.store.tablestats import TableStats, analyze_if_stale, read_stats, stale
from tests.workers_helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)
postgres_only = pytest.mark.vendor("postgresql")


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        (TableStats(rows=-1, changed=999, analyzed=False, owner=True), False),
        (TableStats(rows=-1, changed=1000, analyzed=False, owner=True), True),
        (TableStats(rows=5000, changed=1000, analyzed=True, owner=True), True),
        (TableStats(rows=50_000, changed=4999, analyzed=True, owner=True), False),
        (TableStats(rows=50_000, changed=5000, analyzed=True, owner=True), True),
    ],
)
def test_stale__a_thousand_changed_rows_and_a_tenth_of_the_table(stats, expected):
    assert stale(stats) is expected


def _enqueue(count: int) -> None:
    for start in range(0, count, 500):
        enqueue_many([{"job_type": "maint.noop"}] * min(500, count - start))


def _stats_caught_up(at_least: int) -> TableStats:
    """The table's statistics once they count ``at_least`` changed rows (a backend
    reports its counts about a second after its transaction)."""
    deadline = time.monotonic() + 15
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        stats = read_stats("default")
        if stats.changed >= at_least or time.monotonic() > deadline:
            return stats
        time.sleep(0.2)


def _reltuples() -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [Job._meta.db_table]
        )
        return float(cursor.fetchone()[0])


def _claim_plan() -> str:
    """The plan of the claim's own statement (of 50 jobs, every queue), as JSON."""
    filters = storage_sql._due_filter("default", None, (), ())
    sql, params = storage_sql._claim_statement(
        "default", "w", "t", 50, filters, [], timedelta(seconds=60), True
    )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        return json.dumps(cursor.fetchone()[0])


def _other_session(*, autocommit: bool) -> psycopg.Connection:
    """A session of the test database of its own (another worker, a DBA)."""
    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"], port=settings["PORT"] or 5432, user=settings["USER"],
        dbname=settings["NAME"], autocommit=autocommit,
    )  # fmt: skip


def _analyze_in_threads(count: int, *, within_s: float) -> list[bool]:
    """Call analyze_if_stale in ``count`` threads at once; each thread's answer, once
    all returned within ``within_s`` seconds (else the test fails: one waited)."""
    barrier = threading.Barrier(count)
    answers: list[bool] = []

    def call() -> None:
        try:
            barrier.wait(10)
            answers.append(analyze_if_stale("default"))
        finally:
            connections.close_all()  # this thread's own connection

    threads = [threading.Thread(target=call) for _ in range(count)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + within_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "analyze_if_stale waited"
    return answers


@postgres_only
def test_stale_statistics__are_analyzed_and_the_claim_then_reads_by_its_index():
    _enqueue(3000)
    assert stale(_stats_caught_up(3000))
    assert analyze_if_stale("default") is True
    assert _reltuples() == 3000
    plan = _claim_plan()
    assert '"Index Name": "jq_job_claim_any_idx"' in plan
    assert '"Node Type": "Sort"' not in plan
    assert not stale(read_stats("default"))
    assert analyze_if_stale("default") is False  # fresh now: nothing to do


@postgres_only
def test_few_changed_rows__no_analyze():
    _enqueue(3000)
    _stats_caught_up(3000)
    assert analyze_if_stale("default") is True
    _enqueue(200)
    _stats_caught_up(200)
    assert analyze_if_stale("default") is False
    assert _reltuples() == 3000


@postgres_only
def test_a_role_that_does_not_own_the_table__told_once_never_analyzes(monkeypatch, caplog):
    monkeypatch.setattr(tablestats, "_not_owner", set())
    _enqueue(3000)
    _stats_caught_up(3000)
    with connection.cursor() as cursor:
        cursor.execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'jq_not_owner') "
            "THEN CREATE ROLE jq_not_owner NOLOGIN; END IF; END $$"
        )
        cursor.execute("SET ROLE jq_not_owner")
    try:
        with caplog.at_level(logging.INFO, logger="django_jobqueue.store.tablestats"):
            assert analyze_if_stale("default") is False
            assert analyze_if_stale("default") is False
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
    told = [r for r in caplog.records if "may not analyze" in r.getMessage()]
    assert len(told) == 1
    assert _reltuples() != 3000


@postgres_only
def test_a_foreman_analyzes_stale_statistics_at_its_start():
    _enqueue(2000)
    _stats_caught_up(2000)
    assert drain() == {"done": 2000}
    assert _reltuples() == 2000  # analyzed while the 2,000 jobs were there


@pytest.mark.vendor("sqlite", "mysql")
def test_other_databases__nothing_is_read():
    _enqueue(1500)
    assert analyze_if_stale("default") is False


@postgres_only
@pytest.mark.parametrize(
    "hold",
    [
        # another worker analyzes now: it holds the analyze's advisory lock
        "SELECT pg_advisory_lock({key})",
        # a manual VACUUM, CREATE INDEX (CONCURRENTLY) or ALTER holds a lock ANALYZE
        # waits for: the housekeeping thread (reaping, schedules, statistics) must not
        # wait with it for as long as that takes
        'LOCK TABLE "{table}" IN SHARE UPDATE EXCLUSIVE MODE',
    ],
)
def test_a_lock_held_elsewhere__skipped_without_waiting_then_analyzed(hold):
    _enqueue(3000)
    _stats_caught_up(3000)
    holder = _other_session(autocommit=False)
    try:
        holder.execute(hold.format(key=tablestats._LOCK_KEY, table=Job._meta.db_table))
        assert _analyze_in_threads(1, within_s=30) == [False]
    finally:
        holder.rollback()
        holder.execute("SELECT pg_advisory_unlock_all()")
        holder.close()
    assert _reltuples() != 3000  # skipped: not analyzed
    assert analyze_if_stale("default") is True


@postgres_only
def test_a_failing_analyze__one_warning_then_a_long_pause(caplog):
    # A statement timeout shorter than the analyze: the foreman warns once and checks
    # again after RETRY_AFTER_FAILURE_S, not at every CHECK_EVERY_S.
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    _enqueue(3000)
    _stats_caught_up(3000)
    foreman = Foreman(ForemanOptions(concurrency=1, burst=True))
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = 1")
    try:
        with caplog.at_level(logging.WARNING, logger="django_jobqueue.worker.housekeeping"):
            assert foreman._analyze() == tablestats.RETRY_AFTER_FAILURE_S
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")
    assert [r for r in caplog.records if "analyzing the job table failed" in r.getMessage()]
    assert foreman._analyze() == tablestats.CHECK_EVERY_S  # analyzed now
    assert _reltuples() == 3000


@postgres_only
def test_workers_racing_to_analyze__exactly_one_does():
    _enqueue(3000)
    _stats_caught_up(3000)
    assert sorted(_analyze_in_threads(4, within_s=60)) == [False, False, False, True]

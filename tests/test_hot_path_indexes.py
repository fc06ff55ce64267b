"""Migration 0027 on PostgreSQL: the indexes a job's claim and outcome need not write.

Five indexes of the job table hold only the row versions some state needs
(docs/design.md#indexes): the claim indexes the waiting rows, the lease index the
running ones, the finished index the ended and blocked ones, the origin index the
jobs a plan enqueued (``schedule:<name>``). Here: their predicates; that the
statements which read them still can, prepared generic plans included; that a
drained job leaves no entry in the claim indexes; and that the migration runs back
and forth.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobqueue import (
    enqueue_job,
    maintenance,
    storage_limits_sql,
    storage_limits_update,
    storage_sql,
)
from django_jobqueue.console import queries
from django_jobqueue.core.limitspec import Limit
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.storage_limits_sql import Target
from tests.maintenance_helpers import make_jobs
from tests.no_duplicate_helpers import JOB_TYPE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql")]

FINISHED = ("'done'", "'error'", "'max_retry'", "'cancelled'", "'blocked'")

#: name: (columns, words of its predicate); PostgreSQL's own spelling of a predicate
#: (casts, parentheses) varies with how the index was made, the words do not.
PARTIAL = {
    "jq_job_claim_idx": ("(queue, priority, run_at, id)", ("waiting",)),
    "jq_job_claim_any_idx": ("(priority, run_at, id)", ("waiting",)),
    "jq_job_lease_idx": ("(status, lease_expires_at)", ("status", "= 'processing'")),
    "jq_job_finished_idx": ("(status, finished_at)", ("status", *FINISHED)),
    "jq_job_origin_idx": ("(origin, created_at)", ("origin", ">= 'schedule:'", "< 'schedule;'")),
}


def _indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
            [Job._meta.db_table],
        )
        return dict(cursor.fetchall())


def _plan(sql: str, params: list, *, generic: bool = False, sort: bool = False) -> str:
    """EXPLAIN of ``sql`` with the table scan priced out (a test table is small enough
    that the planner would read it whole); ``generic``: as a prepared statement's
    generic plan, which never sees the parameters' values; ``sort``: a sort stays
    allowed (the plan a drained table's statistics made cheapest)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        # Nor a sort: statistics an earlier test left (a table analysed while it held
        # no waiting job) make a small index plus a sort look cheapest; the question
        # here is whether an index can give the reader its rows and order.
        if not sort:
            cursor.execute("SET LOCAL enable_sort = off")
        if generic:
            cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            cursor.execute("PREPARE jq_plan_probe AS " + _numbered(sql))
            values = ", ".join(["%s"] * len(params))
            cursor.execute(f"EXPLAIN EXECUTE jq_plan_probe({values})", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            cursor.execute("DEALLOCATE jq_plan_probe")
            return plan
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _numbered(sql: str) -> str:
    """``sql`` with psycopg's ``%s`` placeholders as PostgreSQL's ``$1, $2, ...``."""
    parts = sql.split("%s")
    return "".join(f"{part}${n}" for n, part in enumerate(parts[:-1], 1)) + parts[-1]


#: The claims' arguments here but their limit and queues.
CLAIM: dict[str, Any] = {
    "owner": "w",
    "token": "t",
    "exclude_types": (),
    "lease": timedelta(seconds=30),
}


def _claim(queues: list[str] | None) -> tuple[str, list]:
    return storage_sql.claim_statement("default", **CLAIM, limit=5, queues=queues)


def test_the_indexes_hold_only_the_rows_their_readers_read():
    indexes = _indexes()
    for name, (columns, words) in PARTIAL.items():
        definition, _, predicate = indexes[name].partition(" WHERE ")
        assert definition.endswith(f"USING btree {columns}"), indexes[name]
        assert all(word in predicate for word in words), indexes[name]
        assert "'init'" not in predicate and "'processing'" not in predicate.replace(
            "= 'processing'", ""
        ), indexes[name]
    # A queue's jobs of every state read the per-queue index: it stays whole.
    assert " WHERE " not in indexes["jq_job_queue_idx"]


@pytest.mark.parametrize("queues", [None, ["q"]], ids=["every queue", "named queue"])
def test_the_claim_reads_a_claim_index_as_a_generic_plan(queues):
    sql, params = _claim(queues)
    # The statement is the claim itself, an UPDATE: EXPLAIN without ANALYZE runs nothing.
    plan = _plan(sql, params, generic=True)
    # An index of the waiting rows only: a claim index (claim order), or, on a table
    # whose statistics say it is empty (ANALYZE after another test's rows were
    # deleted, as tests/flows/test_lock_order.py leaves it), the waiting rows' list
    # index (jq_job_waiting_idx, WHERE waiting) and a sort. The UPDATE then takes the
    # claimed rows by the primary key.
    found = set(_scanned(plan)) - {f"{Job._meta.db_table}_pkey"}
    assert found and found <= WAITING_INDEXES, plan


@pytest.mark.parametrize("queues", [None, ["q"]], ids=["every queue", "named queue"])
def test_the_claim_never_reads_the_waiting_list_index_after_an_analyze_of_a_drained_table(
    queues,
):
    # Statistics of a table with no waiting job (a drained queue, the usual state of
    # one that keeps up): the cheapest plan by them was the waiting list index and a
    # sort, which under a held snapshot reads every dead entry (docs/horizon.md). The
    # list index is partial to the statuses, which the claim does not state.
    make_jobs(2_000, queue="q", status=JobStatus.DONE)
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Job._meta.db_table}")  # noqa: S608 (a model's table)
        plan = _plan(*_claim(queues), generic=True, sort=True)
        found = set(_scanned(plan)) - {f"{Job._meta.db_table}_pkey"}
        assert found and found <= {"jq_job_claim_idx", "jq_job_claim_any_idx"}, plan
    finally:
        Job.objects.all().delete()
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Job._meta.db_table}")  # noqa: S608 (later tests' plans)


def test_the_reaper_and_prune_read_their_partial_indexes():
    now = timezone.now()
    reap = Job.objects.filter(status=JobStatus.PROCESSING, lease_expires_at__lt=now)
    # Either partial index of the running rows serves it (the other is by queue).
    assert _reads_running_rows(_plan(*reap.query.sql_with_params()))
    prune = Job.objects.filter(status=JobStatus.DONE, finished_at__lte=now).order_by("finished_at")
    assert "jq_job_finished_idx" in _plan(*prune.query.sql_with_params())
    blocked = Job.objects.filter(status=JobStatus.BLOCKED).order_by("finished_at")
    assert "jq_job_finished_idx" in _plan(*blocked.query.sql_with_params())
    history = Job.objects.filter(origin="schedule:nightly").order_by("-created_at")
    assert "jq_job_origin_idx" in _plan(*history.query.sql_with_params())


def test_a_claimed_and_finished_job_leaves_no_entry_in_the_claim_indexes():
    for _ in range(20):
        enqueue_job("q", JOB_TYPE)
    jobs = storage_sql.claim_rows("default", **CLAIM, limit=20, queues=None)
    assert len(jobs) == 20
    storage_sql.complete_rows("default", [(job, None, None) for job in jobs])
    assert Job.objects.filter(status=JobStatus.DONE).count() == 20
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM {Job._meta.db_table}")  # noqa: S608 (a model's table)
        cursor.execute(
            "SELECT relname, reltuples FROM pg_class WHERE relname IN "
            "('jq_job_claim_idx', 'jq_job_claim_any_idx', 'jq_job_lease_idx', "
            "'jq_job_finished_idx', 'jq_job_origin_idx')"
        )
        tuples = dict(cursor.fetchall())
    # Vacuum counts each index's live entries: none for the 20 done jobs in the
    # waiting and running rows' indexes, nor in the plans' (enqueued by code), one
    # each in the ended rows' index.
    assert tuples == {
        "jq_job_claim_idx": 0,
        "jq_job_claim_any_idx": 0,
        "jq_job_lease_idx": 0,
        "jq_job_finished_idx": 20,
        "jq_job_origin_idx": 0,
    }


def test_migration__runs_back_to_the_full_indexes_and_forth_again():
    try:
        call_command("migrate", "django_jobqueue", "0026", verbosity=0)
        indexes = _indexes()
        for name in PARTIAL:
            assert " WHERE " not in indexes[name], indexes[name]
        assert "(waiting, priority, run_at, id)" in indexes["jq_job_claim_any_idx"]
        assert indexes["jq_job_waiting_idx"].endswith("(id) WHERE waiting")  # 0028 back
    finally:
        call_command("migrate", "django_jobqueue", verbosity=0)
    test_the_indexes_hold_only_the_rows_their_readers_read()


# -- Readers of the states' rows that state the state (docs/design.md#indexes) --------


#: The partial indexes of the running rows (``WHERE status = 'processing'``).
RUNNING_INDEXES = ("jq_job_running_idx", "jq_job_lease_idx")


def _reads_running_rows(plan: str) -> bool:
    return any(f"using {index} on" in plan for index in RUNNING_INDEXES)


def _target(column: str, value: str, **limit: object) -> Target:
    kind = "queue" if column == "queue" else "type"
    return Target(f"{kind}:{value}", column, value, Limit(**limit))  # type: ignore[arg-type]


def _claim_of(limit: int = 2) -> dict:
    return {
        "owner": "w",
        "token": "t",
        "limit": limit,
        "queues": None,
        "exclude_types": (),
        "exclude_queues": (),
        "lease": timedelta(seconds=30),
        "started": True,
    }


@pytest.mark.parametrize("partition", [None, "payload.k"], ids=["global", "partitioned"])
def test_a_limits_count_of_running_jobs_reads_the_running_index_as_a_generic_plan(partition):
    # Prepared statements (store/flights.py): with ``status = $1`` their generic plan
    # matched no partial index and read the whole table.
    target = _target("queue", "q", concurrency=3, partition=partition)
    count = storage_limits_sql.count_statement("default", [target], {})
    assert count.prepare
    assert _reads_running_rows(_plan(count.text, count.params, generic=True))
    claim = _claim_of()
    if partition is None:
        sql, params = storage_limits_sql.guarded_claim_statement("default", [target], claim)
    else:
        keyed = storage_limits_update.keyed_claim_statement("default", target, claim, ids=[1, 2])
        sql, params = keyed.text, keyed.params
    assert _reads_running_rows(_plan(sql, params, generic=True))
    due = storage_limits_sql.candidates_statement("default", [target], 5, None, (), ())
    assert _reads_running_rows(_plan(due.text, due.params, generic=True))


def test_the_status_counts_of_one_queue_read_the_per_queue_index():
    # jobqueue status --queue Q: one GROUP BY over a small queue among many jobs.
    with CaptureQueriesContext(connection) as queries:
        maintenance.queue_status("default", queues=["q"])
    table = Job._meta.db_table
    counts = [q["sql"] for q in queries.captured_queries if "GROUP BY" in q["sql"]]
    read = [index for sql in counts if table in sql for index in _scanned(_plan(sql, None))]
    assert "jq_job_queue_idx" in read, read
    assert "table" not in read, read


def _scanned(plan: str) -> list[str]:
    """The indexes the scans of the job table in ``plan`` (EXPLAIN text) read; "table"
    for a table scan."""
    scans = re.findall(rf"Scan(?: Backward)?(?: using (\w+))? on {Job._meta.db_table}\b", plan)
    return [index or "table" for index in scans]


#: The partial indexes of the waiting rows.
WAITING_INDEXES = {"jq_job_claim_idx", "jq_job_claim_any_idx", "jq_job_waiting_idx"}


@pytest.mark.parametrize("status", [JobStatus.INIT, JobStatus.RETRY])
def test_a_list_of_a_waiting_status_reads_the_waiting_rows(status):
    # ``status:retry``, the console's state filter and the search's ``state:`` term,
    # with ``waiting`` stated, which only those statuses have: over the waiting rows'
    # indexes, under newer finished work; ``status = 'retry'`` alone walked the primary
    # key backwards through it (docs/console.md "Speed at a million jobs").
    make_jobs(30, queue="mail", status=JobStatus.INIT)
    make_jobs(30, queue="mail", status=JobStatus.RETRY)
    make_jobs(20_000, queue="mail", status=JobStatus.DONE)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")  # noqa: S608 (a model's table)
    for data in ({"state": f"status:{status}"}, {"q": f"state:status:{status}"}):
        for queue in ({}, {"queue": "mail"}):
            jobs = queries.filtered_jobs("default", {**data, **queue})
            page = jobs.order_by("-pk")[: queries.PAGE_SIZE + 1]
            sql, params = page.query.sql_with_params()
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN " + sql, params)
                plan = "\n".join(row[0] for row in cursor.fetchall())
            # Or, in one queue, the per-queue index by (queue, status): the same rows.
            allowed = WAITING_INDEXES | ({"jq_job_queue_idx"} if queue else set())
            assert _scanned(plan) and set(_scanned(plan)) <= allowed, plan
            assert {job.status for job in page} == {status} and len(page) == 30

"""Migration 0027 on PostgreSQL: the indexes a job's claim and outcome need not write.

Seven indexes of the job table hold only the row versions some state needs
(docs/design.md#indexes): the claim indexes the waiting rows, the lease index the
running ones, the finished and per-queue indexes the ended ones, the origin index
the jobs a plan enqueued (``schedule:<name>``). Here: their predicates; that the statements which read
them still can, the claim as a prepared generic plan included; that a drained job
leaves no entry in the claim indexes; and that the migration runs back and forth.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from django_jobqueue import enqueue_job, storage_sql
from django_jobqueue.models import Job, JobStatus
from tests.no_duplicate_helpers import JOB_TYPE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql")]

ENDINGS = ("'done'", "'error'", "'max_retry'", "'cancelled'")

#: name: (columns, words of its predicate); PostgreSQL's own spelling of a predicate
#: (casts, parentheses) varies with how the index was made, the words do not.
PARTIAL = {
    "jq_job_claim_idx": ("(queue, priority, run_at, id)", ("waiting",)),
    "jq_job_claim_any_idx": ("(priority, run_at, id)", ("waiting",)),
    "jq_job_lease_idx": ("(status, lease_expires_at)", ("status", "= 'processing'")),
    "jq_job_finished_idx": ("(status, finished_at)", ("status", *ENDINGS)),
    "jq_job_queue_idx": ("(queue, status, finished_at)", ("status", *ENDINGS)),
    "jq_job_origin_idx": ("(origin, created_at)", ("origin", ">= 'schedule:'", "< 'schedule;'")),
}


def _indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
            [Job._meta.db_table],
        )
        return dict(cursor.fetchall())


def _plan(sql: str, params: list, *, generic: bool = False) -> str:
    """EXPLAIN of ``sql`` with the table scan priced out (a test table is small enough
    that the planner would read it whole); ``generic``: as a prepared statement's
    generic plan, which never sees the parameters' values."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
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


def _claim(queues: list[str] | None) -> tuple[str, list]:
    return storage_sql.claim_statement(
        "default",
        owner="w",
        token="t",
        limit=5,
        queues=queues,
        exclude_types=(),
        lease=timedelta(seconds=30),
    )


def test_the_indexes_hold_only_the_rows_their_readers_read():
    indexes = _indexes()
    for name, (columns, words) in PARTIAL.items():
        definition, _, predicate = indexes[name].partition(" WHERE ")
        assert definition.endswith(f"USING btree {columns}"), indexes[name]
        assert all(word in predicate for word in words), indexes[name]
        assert "'init'" not in predicate and "'processing'" not in predicate.replace(
            "= 'processing'", ""
        ), indexes[name]


@pytest.mark.parametrize("queues", [None, ["q"]], ids=["every queue", "named queue"])
def test_the_claim_reads_a_claim_index_as_a_generic_plan(queues):
    sql, params = _claim(queues)
    # The statement is the claim itself, an UPDATE: EXPLAIN without ANALYZE runs nothing.
    plan = _plan(sql, params, generic=True)
    index = "jq_job_claim_idx" if queues else "jq_job_claim_any_idx"
    assert f"Index Scan using {index}" in plan, plan


def test_the_reaper_and_prune_read_their_partial_indexes():
    now = timezone.now()
    reap = Job.objects.filter(status=JobStatus.PROCESSING, lease_expires_at__lt=now)
    assert "jq_job_lease_idx" in _plan(*reap.query.sql_with_params())
    prune = Job.objects.filter(status=JobStatus.DONE, finished_at__lte=now).order_by("finished_at")
    assert "jq_job_finished_idx" in _plan(*prune.query.sql_with_params())
    per_queue = Job.objects.filter(queue="q", status=JobStatus.DONE, finished_at__gte=now)
    assert "jq_job_queue_idx" in _plan(*per_queue.query.sql_with_params())
    history = Job.objects.filter(origin="schedule:nightly").order_by("-created_at")
    assert "jq_job_origin_idx" in _plan(*history.query.sql_with_params())


def test_a_claimed_and_finished_job_leaves_no_entry_in_the_claim_indexes():
    for _ in range(20):
        enqueue_job("q", JOB_TYPE)
    jobs = storage_sql.claim_rows(
        "default",
        owner="w",
        token="t",
        limit=20,
        queues=None,
        exclude_types=(),
        lease=timedelta(seconds=30),
    )
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
    finally:
        call_command("migrate", "django_jobqueue", verbosity=0)
    test_the_indexes_hold_only_the_rows_their_readers_read()

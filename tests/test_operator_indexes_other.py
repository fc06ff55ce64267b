"""The indexes and query shapes that serve the console's searches, lists and counts on
MariaDB and SQLite, and the held-id index on all three (migration 0025).

Their speed is measured by bench/console_pages.py (docs/console.md "Speed at a
million jobs"); here, that the indexes exist as the migration says, that SQLite's
planner reads a held-id search over its index, and that the waiting filter selects the
waiting jobs, told rare to SQLite only.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Count

from django_jobqueue.core.validation import hold_hash
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.overview import overview
from django_jobqueue.store import states
from tests.maintenance_helpers import make_job

pytestmark = pytest.mark.django_db


@pytest.mark.vendor("mysql")
def test_mariadb_has_the_waiting_status_and_held_id_indexes() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SHOW INDEX FROM {connection.ops.quote_name(Job._meta.db_table)} "  # noqa: S608
            "WHERE Key_name IN ('jq_job_waiting_idx', 'jq_job_status_queue_idx', "
            "'jq_job_id_hash_idx')"
        )
        columns = [(row[2], row[3], row[4]) for row in cursor.fetchall()]
    found: dict[str, list[str]] = {}
    for name, _seq, column in sorted(columns):
        found.setdefault(name, []).append(column)
    assert found == {
        "jq_job_waiting_idx": ["waiting", "id"],
        "jq_job_status_queue_idx": ["status", "queue"],
        "jq_job_id_hash_idx": ["job_id_hash"],
    }


@pytest.mark.vendor("sqlite")
def test_sqlite_reads_a_held_id_over_its_partial_index() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'jq_job_id_hash_idx'"
        )
        (definition,) = cursor.fetchone()
        assert definition.endswith("WHERE job_id_hash IS NOT NULL")
        sql, params = (
            Job.objects.filter(job_id_hash__in=[hold_hash("a")])
            .values("pk")
            .query.sql_with_params()
        )
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "jq_job_id_hash_idx" in plan


@pytest.mark.vendor("postgresql")
def test_postgresql_has_the_partial_held_id_index() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname = %s",
            [Job._meta.db_table, "jq_job_id_hash_idx"],
        )
        (definition,) = cursor.fetchone()
    assert definition.endswith("(job_id_hash) WHERE (job_id_hash IS NOT NULL)")


def test_the_waiting_filter_selects_the_waiting_jobs_told_rare_to_sqlite_only() -> None:
    waiting = {make_job(queue=q, status=s).pk for q, s in [("a", "init"), ("b", "retry")]}
    make_job(queue="a", status=JobStatus.DONE, waiting=False)
    make_job(queue="b", status=JobStatus.PROCESSING, waiting=False)
    jobs = Job.objects.filter(states.is_waiting())
    assert set(jobs.values_list("pk", flat=True)) == waiting
    assert set(Job.objects.exclude(states.is_waiting()).values_list("pk", flat=True)).isdisjoint(
        waiting
    )
    assert ("unlikely(" in str(jobs.query)) == (connection.vendor == "sqlite")
    counts = dict(jobs.order_by().values_list("queue").annotate(n=Count("pk")))
    assert counts == {"a": 1, "b": 1}
    rows = {row.queue: (row.waiting, row.retrying_due, row.running) for row in overview("default")}
    assert (rows["a"], rows["b"]) == ((1, 0, 0), (0, 1, 1))

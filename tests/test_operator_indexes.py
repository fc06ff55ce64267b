"""The partial indexes that serve the operators' counts and lists on PostgreSQL
(migrations 0004, 0023, 0024).

The console's overview, ``/metrics/`` and ``jobqueue status`` count running jobs and
dead letters per queue; on PostgreSQL each count has an index that holds its rows
alone; the list of waiting jobs reads an index of the waiting jobs' ids. Their speed is
measured by bench/console_pages.py; here, that the indexes exist and that the queries
can be answered from them (with the planner told not to scan the table, which a test
table is small enough to prefer, or over a table made big enough).
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.db.models import Count

from django_jobqueue.models import DEAD_STATUSES, Job, JobStatus

pytestmark = [pytest.mark.django_db, pytest.mark.vendor("postgresql")]


def _plan(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_running_and_dead_indexes_are_partial() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
            "AND indexname IN ('jq_job_running_idx', 'jq_job_dead_idx') ORDER BY indexname",
            [Job._meta.db_table],
        )
        found = dict(cursor.fetchall())
    assert sorted(found) == ["jq_job_dead_idx", "jq_job_running_idx"]
    # (queue, id): a queue's running jobs and dead letters in id order (migration 0024).
    assert "(queue, id) WHERE ((status)::text = 'processing'::text)" in found["jq_job_running_idx"]
    assert "(queue, id) WHERE ((status)::text = ANY (" in found["jq_job_dead_idx"]


@pytest.mark.parametrize(
    ("name", "statuses"),
    [("jq_job_running_idx", [JobStatus.PROCESSING]), ("jq_job_dead_idx", DEAD_STATUSES)],
)
def test_the_counts_per_queue_are_index_only_scans(name: str, statuses: list[str]) -> None:
    jobs = Job.objects.order_by()
    status = {"status": statuses[0]} if len(statuses) == 1 else {"status__in": statuses}
    plan = _plan(jobs.filter(**status).values_list("queue").annotate(n=Count("*")))
    assert f"Index Only Scan using {name}" in plan


def test_the_waiting_index_is_partial_to_the_waiting_statuses() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname = %s",
            [Job._meta.db_table, "jq_job_waiting_idx"],
        )
        (definition,) = cursor.fetchone()
    # The statuses, not ``waiting``: the claim states only ``waiting`` and must not
    # read this index (tests/test_hot_path_indexes.py).
    assert "(id) WHERE" in definition, definition
    predicate = definition.partition(" WHERE ")[2]
    assert "status" in predicate and "'init'" in predicate and "'retry'" in predicate
    assert "waiting" not in predicate


@pytest.mark.parametrize(
    "data",
    [
        {"state": "waiting", "queue": "mail"},
        {"state": "waiting"},
        {"state": "running", "queue": "mail"},
        {"state": "failed", "queue": "mail"},
    ],
)
def test_a_state_list_reads_an_index_of_its_rows_not_the_finished_jobs(data) -> None:
    """Jobs of the state under newer finished work (the oldest rows): the console's
    page of them, newest first, reads an index that finds them (the planner may take
    any; at this size it knows their counts), never the primary key backwards through
    the finished jobs. bench/console_pages.py measures the case it misjudges."""
    from django_jobqueue.console import queries
    from tests.maintenance_helpers import make_jobs, running

    make_jobs(30, queue="mail", status=JobStatus.INIT)
    make_jobs(30, queue="mail", status=JobStatus.MAX_RETRY)
    for _ in range(30):
        running(queue="mail")
    make_jobs(20_000, queue="mail", status=JobStatus.DONE)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")
    jobs = queries.filtered_jobs("default", data)
    page = jobs.order_by("-pk").defer("payload", "result", "errors")[: queries.PAGE_SIZE + 1]
    sql, params = page.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index" in plan and "django_jobqueue_job_pkey" not in plan, plan
    shown, next_cursor = queries.job_page(jobs, data)
    assert len(shown) == 30 and next_cursor is None
    assert {job.status for job in shown} <= {JobStatus.INIT, JobStatus.MAX_RETRY, "processing"}
    assert len({job.status for job in shown}) == 1
    assert [job.pk for job in shown] == sorted((job.pk for job in shown), reverse=True)

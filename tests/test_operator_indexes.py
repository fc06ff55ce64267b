"""The partial indexes that serve the operators' counts on PostgreSQL (migrations 0004, 0023).

The console's overview, ``/metrics/`` and ``jobqueue status`` count running jobs and
dead letters per queue; on PostgreSQL each count has an index that holds its rows
alone. Their speed is measured by bench/console_pages.py; here, that the indexes
exist and that the counts' queries can be answered from them (with the planner
told not to scan the table, which a test table is small enough to prefer).
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
    assert "(queue) WHERE ((status)::text = 'processing'::text)" in found["jq_job_running_idx"]


@pytest.mark.parametrize(
    ("name", "statuses"),
    [("jq_job_running_idx", [JobStatus.PROCESSING]), ("jq_job_dead_idx", DEAD_STATUSES)],
)
def test_the_counts_per_queue_are_index_only_scans(name: str, statuses: list[str]) -> None:
    jobs = Job.objects.order_by()
    status = {"status": statuses[0]} if len(statuses) == 1 else {"status__in": statuses}
    plan = _plan(jobs.filter(**status).values_list("queue").annotate(n=Count("*")))
    assert f"Index Only Scan using {name}" in plan

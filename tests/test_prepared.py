"""Prepared statements on PostgreSQL (django_jobqueue.core.prepared).

The insert and the claim are prepared on the session once and reused; a project
that sets psycopg's ``prepare_threshold`` (None behind a transaction pooler) keeps
that choice; the claimed rows' times read as Django reads them.
"""

from __future__ import annotations

from datetime import UTC

import pytest
from django.db import connection, transaction

from django_jobqueue import enqueue_job, storage
from django_jobqueue.core import prepared
from django_jobqueue.ids import Queue
from django_jobqueue.models import Job
from tests.no_duplicate_helpers import JOB_TYPE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql")]


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_enqueue_and_claim__are_prepared_once_on_the_session() -> None:
    connection.close()
    for n in range(3):
        enqueue_job("prep", JOB_TYPE, {"n": n})
        Queue("prep", job_type=JOB_TYPE).add({"n": n}, id=f"id-{n}")
    for _ in range(3):
        assert storage.claim("default", owner="w", queues=["prep"], limit=1)

    statements = _prepared_statements()
    inserts = [s for s in statements if s.startswith("WITH j AS (INSERT")]
    held = [s for s in statements if "pg_try_advisory_xact_lock" in s]
    claims = [s for s in statements if s.startswith("UPDATE") and "SKIP LOCKED" in s]
    assert len(inserts) == 1, statements
    assert len(held) == 1, statements
    assert len(claims) == 1, statements
    assert Job.objects.filter(queue="prep").count() == 6


def test_prepare_threshold_in_options__is_the_projects_choice() -> None:
    options = connection.settings_dict["OPTIONS"]
    connection.close()
    options["prepare_threshold"] = None
    try:
        assert not prepared.prepares(connection)
        for n in range(3):
            enqueue_job("prep", JOB_TYPE, {"n": n})
        assert storage.claim("default", owner="w", queues=["prep"], limit=3)
        assert _prepared_statements() == []
    finally:
        del options["prepare_threshold"]
        connection.close()


def test_prepared_insert__joins_the_callers_transaction() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_job("prep", JOB_TYPE, {"n": 1})
        enqueue_job("prep", JOB_TYPE, {"n": 2})
        raise RuntimeError("roll back")
    assert not Job.objects.filter(queue="prep").exists()
    enqueue_job("prep", JOB_TYPE, {"n": 3})  # the prepared statement survives the rollback
    assert Job.objects.filter(queue="prep").count() == 1


def test_claimed_times__are_aware_and_match_the_orm() -> None:
    enqueue_job("prep", JOB_TYPE, {"n": 1})
    (job,) = storage.claim("default", owner="w", queues=["prep"], limit=1)
    stored = Job.objects.get(pk=job.pk)
    assert job.started_at is not None and job.started_at.utcoffset() is not None
    assert job.started_at == stored.started_at
    assert job.lease_expires_at == stored.lease_expires_at
    assert job.created_at.astimezone(UTC) == stored.created_at.astimezone(UTC)


def test_kept_cursor__one_per_session_reused_and_free_after_each_use() -> None:
    connection.close()
    with prepared.cursor(connection) as first:
        first.execute("SELECT 1")
        # A use inside the kept cursor's gets a cursor of its own.
        with prepared.cursor(connection) as inner:
            inner.execute("SELECT 2")
            assert inner is not first
            assert inner.fetchone() == (2,)
        assert first.fetchone() == (1,)
    assert not first.cursor.closed
    for n in range(3):
        enqueue_job("prep", JOB_TYPE, {"n": n})
    with prepared.cursor(connection) as again:
        assert again is first
    assert Job.objects.filter(queue="prep").count() == 3


def test_kept_cursor__an_error_closes_it_and_the_next_use_makes_another() -> None:
    from django.db import IntegrityError

    enqueue_job("prep", JOB_TYPE, {"n": 1})
    jid = Job.objects.get(queue="prep").jid
    with prepared.cursor(connection) as kept:
        pass
    with pytest.raises(IntegrityError), prepared.cursor(connection) as cursor:
        assert cursor is kept
        cursor.execute(  # the jid's unique index refuses a second row
            "INSERT INTO django_jobqueue_job (jid, queue, job_type) "
            "SELECT %s, queue, job_type FROM django_jobqueue_job WHERE jid = %s",
            [jid, jid],
        )
    assert kept.cursor.closed
    enqueue_job("prep", JOB_TYPE, {"n": 2})
    with prepared.cursor(connection) as cursor:
        assert cursor is not kept
    assert Job.objects.filter(queue="prep").count() == 2


def test_kept_cursor__a_new_session_gets_a_new_one_and_captures_still_see_statements() -> None:
    from django.test.utils import CaptureQueriesContext

    with prepared.cursor(connection) as kept:
        pass
    connection.close()
    enqueue_job("prep", JOB_TYPE, {"n": 1})
    with prepared.cursor(connection) as cursor:
        assert cursor is not kept
        assert cursor.cursor.connection is connection.connection
    with CaptureQueriesContext(connection) as captured:
        enqueue_job("prep", JOB_TYPE, {"n": 2})
    assert [q["sql"] for q in captured.captured_queries if "INSERT" in q["sql"]]
    assert Job.objects.filter(queue="prep").count() == 2

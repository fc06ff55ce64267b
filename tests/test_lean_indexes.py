"""Migration 0006 on PostgreSQL: the hold indexes are partial, the jid LIKE index gone.

A plain job writes no entry into the indexes of ids and unique keys (README,
"Speed"); the holds are still unique per queue, and the migration runs back and
forth.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job
from tests.no_duplicate_helpers import JOB_TYPE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql")]


def _indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
            [Job._meta.db_table],
        )
        return dict(cursor.fetchall())


def _constraints() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass",
            [Job._meta.db_table],
        )
        return {row[0] for row in cursor.fetchall()}


def test_hold_indexes__are_partial_and_unique__no_like_index_on_jid():
    indexes = _indexes()
    holds = (("jq_job_id_uniq", "job_id_hash"), ("jq_job_ukey_uniq", "unique_key_hash"))
    for name, column in holds:
        assert indexes[name].startswith("CREATE UNIQUE INDEX")
        assert indexes[name].endswith(f"WHERE ({column} IS NOT NULL)")
    assert not [name for name, sql in indexes.items() if "varchar_pattern_ops" in sql]
    assert "django_jobqueue_job_jid_key" in indexes  # jid stays unique


def test_hold_indexes__still_refuse_a_second_holder_in_a_queue():
    job = Job.objects.get(jid=enqueue_job("q", JOB_TYPE, unique_key="k").jid)
    other = Job.objects.get(jid=enqueue_job("q", JOB_TYPE).jid)
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=other.pk).update(unique_key_hash=job.unique_key_hash)
    # Another queue may hold the same key; any number of jobs hold none.
    enqueue_job("other", JOB_TYPE, unique_key="k")
    enqueue_job("q", JOB_TYPE)
    assert Job.objects.filter(unique_key_hash__isnull=True).count() == 2


def test_migration__runs_back_to_the_table_constraints_and_forth_again():
    try:
        call_command("migrate", "django_jobqueue", "0005", verbosity=0)
        indexes = _indexes()
        assert {"jq_job_id_uniq", "jq_job_ukey_uniq"} <= _constraints()
        assert "WHERE" not in indexes["jq_job_id_uniq"]
        assert [name for name, sql in indexes.items() if "varchar_pattern_ops" in sql]
    finally:
        call_command("migrate", "django_jobqueue", verbosity=0)
    assert not {"jq_job_id_uniq", "jq_job_ukey_uniq"} & _constraints()
    test_hold_indexes__are_partial_and_unique__no_like_index_on_jid()

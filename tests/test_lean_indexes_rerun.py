"""Migration 0006 is not atomic (CREATE INDEX CONCURRENTLY): a run that stops half
way (a statement timeout or a cancel on a big table, a killed deploy) must be
runnable again, and must not end with an invalid index left by the failed build."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection

from django_jobqueue.models import Job
from tests.test_lean_indexes import (
    _constraints,
    _indexes,
)
from tests.test_lean_indexes import (
    test_hold_indexes__are_partial_and_unique__no_like_index_on_jid as check_partial,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql")]


def _valid(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s",
            [name],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


def _run(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


def test_forwards_again_after_it_stopped_between_the_two_holds() -> None:
    """The id hold swapped, then the build of the key hold's index failed."""
    table = connection.ops.quote_name(Job._meta.db_table)
    try:
        call_command("migrate", "django_jobqueue", "0005", verbosity=0)
        _run(
            f"CREATE UNIQUE INDEX CONCURRENTLY jq_job_id_uniq_partial ON {table} "
            "(queue, job_id_hash) WHERE job_id_hash IS NOT NULL"
        )
        _run(f"ALTER TABLE {table} DROP CONSTRAINT jq_job_id_uniq")
        _run("ALTER INDEX jq_job_id_uniq_partial RENAME TO jq_job_id_uniq")
        # The key hold's build fails half way: an INVALID index stays behind under the
        # migration's temporary name (here by a statement timeout).
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 1")
            try:
                cursor.execute(
                    f"CREATE UNIQUE INDEX CONCURRENTLY jq_job_ukey_uniq_partial ON {table} "
                    "(queue, unique_key_hash) WHERE unique_key_hash IS NOT NULL "
                    "AND pg_sleep(0.05) IS NOT NULL"
                )
            except DatabaseError:
                pass
            finally:
                cursor.execute("RESET statement_timeout")
        if "jq_job_ukey_uniq_partial" in _indexes():
            assert not _valid("jq_job_ukey_uniq_partial")
        call_command("migrate", "django_jobqueue", verbosity=0)  # the deploy again
    finally:
        _run("DROP INDEX IF EXISTS jq_job_ukey_uniq_partial")
    assert not {"jq_job_id_uniq", "jq_job_ukey_uniq"} & _constraints()
    assert _valid("jq_job_id_uniq") and _valid("jq_job_ukey_uniq")
    check_partial()


def test_backwards_again_after_it_stopped_between_the_two_holds() -> None:
    """The id hold swapped back to its constraint, then the run stopped."""
    table = connection.ops.quote_name(Job._meta.db_table)
    _run(f"CREATE UNIQUE INDEX CONCURRENTLY jq_job_id_uniq_full ON {table} (queue, job_id_hash)")
    _run("DROP INDEX jq_job_id_uniq")
    _run(
        f"ALTER TABLE {table} ADD CONSTRAINT jq_job_id_uniq UNIQUE USING INDEX jq_job_id_uniq_full"
    )
    try:
        call_command("migrate", "django_jobqueue", "0005", verbosity=0)
        assert {"jq_job_id_uniq", "jq_job_ukey_uniq"} <= _constraints()
    finally:
        call_command("migrate", "django_jobqueue", verbosity=0)
    check_partial()

"""Migration 0027 is not atomic (CREATE INDEX CONCURRENTLY): a run stopped half way
(a killed deploy, a statement or lock timeout) must run again to the end, in either
direction, whatever it left behind: an invalid index under the building name, an
index dropped and its replacement not yet renamed, or the stopped run's statement
still running on the server (a killed client's session goes on with it)."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection

from django_jobqueue.models import Job
from tests.conftest import direct_postgres_url
from tests.flows.test_lock_order import run
from tests.maintenance_helpers import make_job
from tests.test_hot_path_indexes import (
    PARTIAL,
    _indexes,
)
from tests.test_hot_path_indexes import (
    test_the_indexes_hold_only_the_rows_their_readers_read as check_partial,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql")]

TABLE = Job._meta.db_table


def _valid() -> dict[str, bool]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
            "WHERE t.relname = %s",
            [TABLE],
        )
        return dict(cursor.fetchall())


def _run(sql: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql)


def _failed_build(name: str, definition: str) -> None:
    """Leave ``name`` behind INVALID, as a build stopped half way does."""
    with connection.cursor() as cursor:
        cursor.execute("SET statement_timeout = 1")
        try:
            cursor.execute(
                f"CREATE INDEX CONCURRENTLY {name} ON {TABLE} {definition} "
                "AND pg_sleep(0.05) IS NOT NULL"
            )
        except DatabaseError:
            pass
        finally:
            cursor.execute("RESET statement_timeout")


def _assert_done(*, partial: bool) -> None:
    valid = _valid()
    assert all(valid.values()), valid
    assert not [name for name in valid if name.endswith("_new")], valid
    if partial:
        check_partial()
    else:
        indexes = _indexes()
        assert all(" WHERE " not in indexes[name] for name in PARTIAL), indexes


def test_forwards_again_after_it_stopped_in_a_build_and_before_a_rename() -> None:
    make_job()
    try:
        call_command("migrate", "django_jobqueue", "0026", verbosity=0)
        # The claim index swapped, the lease index dropped and its replacement not
        # renamed, the finished index's build stopped: INVALID.
        _run(
            f"CREATE INDEX jq_job_claim_idx_new ON {TABLE} "
            "(queue, priority, run_at, id) WHERE waiting"
        )
        _run("DROP INDEX jq_job_claim_idx")
        _run("ALTER INDEX jq_job_claim_idx_new RENAME TO jq_job_claim_idx")
        _run(
            f"CREATE INDEX jq_job_lease_idx_new ON {TABLE} (status, lease_expires_at) "
            "WHERE status = 'processing'"
        )
        _run("DROP INDEX jq_job_lease_idx")
        _failed_build("jq_job_finished_idx_new", "(status, finished_at) WHERE status = 'done'")
    finally:
        call_command("migrate", "django_jobqueue", verbosity=0)  # the deploy again
    _assert_done(partial=True)


def test_backwards_again_after_it_stopped_in_a_build() -> None:
    try:
        _failed_build("jq_job_origin_idx_new", "(origin, created_at) WHERE origin <> ''")
        call_command("migrate", "django_jobqueue", "0026", verbosity=0)
        _assert_done(partial=False)
    finally:
        call_command("migrate", "django_jobqueue", verbosity=0)
    _assert_done(partial=True)


def _sessions(where: str) -> bool:
    """Whether a session of the test database other than this one matches ``where``
    (its last statement's text, its wait)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "  # noqa: S608
            f"AND pid <> pg_backend_pid() AND ({where})"
        )
        return bool(cursor.fetchone()[0])


def _until(condition: Callable[[], bool], errors: list[BaseException]) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert not errors, errors
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def test_a_run_again_while_the_stopped_runs_build_still_runs_on_the_server() -> None:
    """A killed ``migrate``'s session goes on with the statement it was in. A run
    started meanwhile waited for the table's lock that build holds, with a snapshot
    the build's last phase then waited for: a deadlock, which PostgreSQL ended by
    failing the new run. The new run waits for the old build first."""
    pk = make_job().pk
    url = direct_postgres_url()
    errors: list[BaseException] = []
    call_command("migrate", "django_jobqueue", "0026", verbosity=0)
    try:
        with psycopg.connect(url, autocommit=True) as stopped, psycopg.connect(url) as writer:
            # An open write on the table, which the stopped run's build waits for.
            writer.execute(f"UPDATE {TABLE} SET priority = priority WHERE id = %s", [pk])  # noqa: S608
            build = run(
                lambda: stopped.execute(
                    f"CREATE INDEX CONCURRENTLY jq_job_claim_idx_new ON {TABLE} "
                    "(queue, priority, run_at, id) WHERE waiting"
                ),
                errors,
            )
            _until(
                lambda: _sessions("query LIKE 'CREATE INDEX%' AND wait_event_type = 'Lock'"), errors
            )
            again = run(lambda: call_command("migrate", "django_jobqueue", verbosity=0), errors)
            # The new run waits: for the table's lock, or (fixed) for the build.
            _until(
                lambda: _sessions(
                    "(query LIKE 'DROP INDEX CONCURRENTLY%' AND wait_event_type = 'Lock') "
                    "OR query LIKE '%pg_locks%'"
                ),
                errors,
            )
            writer.commit()
            build.join()
            again.join()
    finally:
        call_command("migrate", "django_jobqueue", verbosity=0)
    assert not errors, errors
    _assert_done(partial=True)

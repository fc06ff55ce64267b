"""MySQL/MariaDB: the claim's and the batched done's START TRANSACTION ... COMMIT
(storage_sql._mysql_transaction) under errors at each statement, kills and lock waits."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import DatabaseError, OperationalError, connection, connections

from django_jobqueue import enqueue_job, storage
from django_jobqueue.models import Job, JobStatus
from tests.worker.test_reconnect import backend_id, in_thread, kill_session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("mysql")]


def in_transaction() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT @@in_transaction")
        return int(cursor.fetchone()[0])


def fail_at(prefix: str, exc: BaseException, *, times: int = 1) -> Any:
    left = [times]

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if left[0] and sql.lstrip().upper().startswith(prefix):
            left[0] -= 1
            raise exc
        return execute(sql, params, many, context)

    return wrapper


@pytest.mark.parametrize("prefix", ["UPDATE", "COMMIT"])
def test_claim__an_error_at_a_statement_leaves_no_transaction_open(prefix: str) -> None:
    enqueue_job(None, "worker.record", {"label": "a"})

    def scenario() -> tuple[str, int, int]:
        error = ""
        with connection.execute_wrapper(fail_at(prefix, OperationalError(1317, "interrupted"))):
            try:
                storage.claim("default", owner="t", limit=1, lease_ms=60_000)
            except DatabaseError as exc:
                error = type(exc).__name__
        open_after = in_transaction()
        # What a later statement of the same session does: it must not join a claim.
        claimed = storage.claim("default", owner="t2", limit=1, lease_ms=60_000)
        return error, open_after, len(claimed)

    error, open_after, claimed = in_thread(scenario)
    assert error == "OperationalError"
    assert open_after == 0, f"the session is still in the claim's transaction after {prefix} failed"
    assert claimed == 1
    assert Job.objects.get().attempt == 1
    assert Job.objects.get().lease_owner == "t2"


def test_claim__session_killed_between_select_and_update__claimed_once_on_a_new_session() -> None:
    jids = {enqueue_job(None, "worker.record", {"label": str(i)})["jid"] for i in range(3)}

    def scenario() -> list[Job]:
        session = backend_id()
        done = [False]

        def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            if not done[0] and sql.lstrip().upper().startswith("UPDATE"):
                done[0] = True
                in_thread(lambda: kill_session(session))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(wrapper):
            return storage.claim("default", owner="t", limit=2, lease_ms=60_000)

    claimed = in_thread(scenario)
    assert len(claimed) == 2 and {j.jid for j in claimed} <= jids
    assert [j.attempt for j in claimed] == [1, 1]
    processing = set(Job.objects.filter(status=JobStatus.PROCESSING).values_list("jid", flat=True))
    assert processing == {j.jid for j in claimed}


def test_complete_many__a_lock_wait_timeout_leaves_no_transaction_open() -> None:
    enqueue_job(None, "worker.record", {"label": "a"})
    [job] = storage.claim("default", owner="t", limit=1, lease_ms=60_000)
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        try:
            c = connections["default"]
            c.set_autocommit(False)
            with c.cursor() as cursor:
                cursor.execute(
                    "SELECT id FROM django_jobqueue_job WHERE id = %s FOR UPDATE", [job.pk]
                )
            held.set()
            release.wait(30)
            c.rollback()
            c.set_autocommit(True)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(10)

    def scenario() -> tuple[str, int]:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
        error = ""
        try:
            storage.complete_many([(job, {"ok": 1})])
        except Exception as exc:  # noqa: BLE001
            error = type(exc).__name__
        return error, in_transaction()

    try:
        error, open_after = in_thread(scenario)
    finally:
        release.set()
        thread.join(30)
    assert open_after == 0
    assert error in ("LockTimeout", "OperationalError", "")

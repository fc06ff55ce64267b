"""Schedules on a locked SQLite database: a plan's transaction is retried whole.

SQLite without ``transaction_mode`` ``IMMEDIATE`` (a bare ``startproject``
settings file) opens deferred transactions: one that has read fails at once with
"database is locked" when it writes after another connection wrote. The plan's
transaction must then be retried from outside it, in the same pass, without an
error in the log.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection, connections, transaction

from django_jobqueue.core.exceptions import LockTimeout
from django_jobqueue.models import Job, ScheduleJob
from django_jobqueue.schedules import (
    ScheduleStatus,
    add_job_with_schedule,
    materialize,
    materialize_due,
)
from django_jobqueue.store import locks
from django_jobqueue.store.managers import JobManager
from tests.testapp.jobtypes.schedules import tick  # noqa: F401  (registers schedules.tick)

pytestmark = pytest.mark.django_db(transaction=True)

DB = "default"


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_materialize__retries_the_plan_when_creation_meets_database_is_locked(monkeypatch, caplog):
    """The first creation raises SQLite's "database is locked" inside the plan's
    transaction; the pass retries the whole transaction and makes the job."""
    plan = add_job_with_schedule("schedules.tick", at=datetime.now(UTC) - timedelta(seconds=5))
    real_create = JobManager._create
    calls: list[int] = []

    def locked_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("database is locked")
        return real_create(*args, **kwargs)

    monkeypatch.setattr(JobManager, "_create", locked_once)
    caplog.set_level(logging.DEBUG, logger="django_jobqueue")
    assert materialize_due(DB) == 1
    assert len(calls) == 2
    assert _errors(caplog) == []
    plan.refresh_from_db()
    (job,) = Job.objects.all()
    assert (plan.status, plan.execute_id) == (ScheduleStatus.DONE, job.jid)


def test_retry_when_locked__inside_a_transaction_says_so():
    """Locked inside an open transaction: no wait, and the message says why."""

    def locked() -> None:
        raise OperationalError("database is locked")

    with transaction.atomic(using=DB), pytest.raises(LockTimeout) as info:
        locks.retry_when_locked(DB, locked, timeout_ms=10_000)
    message = str(info.value)
    assert "stayed locked" not in message
    assert "transaction was open" in message
    assert "IMMEDIATE" in message


def test_retry_when_locked__outside_a_transaction_says_how_long_it_waited():
    def locked() -> None:
        raise OperationalError("database is locked")

    with pytest.raises(LockTimeout) as info:
        locks.retry_when_locked(DB, locked, timeout_ms=50)
    assert "stayed locked for" in str(info.value)
    assert "lock timeout of 50 ms" in str(info.value)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's deferred transactions")
def test_materialize__deferred_sqlite_transaction_meets_another_writer(caplog):
    """A real SQLite connection without IMMEDIATE: another connection commits a write
    after the plan's transaction has read; the pass still makes the job, no error."""
    plan = add_job_with_schedule("schedules.tick", at=datetime.now(UTC) - timedelta(seconds=5))
    conn = connections[DB]
    conn.ensure_connection()
    mode = conn.transaction_mode
    conn.transaction_mode = None  # what a bare startproject settings file gives
    real_plan = materialize._materialize_plan
    calls: list[int] = []

    def other_writer() -> None:
        try:
            with transaction.atomic(using=DB):
                ScheduleJob.objects.create(name="other", queue="default", job_type="x")
        finally:
            connections.close_all()

    def plan_after_another_write(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # the plan's transaction has read: another connection writes
            thread = threading.Thread(target=other_writer)
            thread.start()
            thread.join()
        return real_plan(*args, **kwargs)

    caplog.set_level(logging.DEBUG, logger="django_jobqueue")
    try:
        materialize._materialize_plan = plan_after_another_write
        made = materialize_due(DB)
    finally:
        materialize._materialize_plan = real_plan
        conn.transaction_mode = mode
    assert made == 1
    assert len(calls) == 2  # the first transaction met "database is locked"
    assert _errors(caplog) == []
    plan.refresh_from_db()
    assert plan.status == ScheduleStatus.DONE
    assert Job.objects.count() == 1

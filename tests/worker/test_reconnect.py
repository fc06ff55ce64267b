"""Dead connections under a running worker, on real servers.

The server closes the worker's idle sessions (PostgreSQL ``idle_session_timeout``,
MariaDB ``wait_timeout``, set per session for every thread but the test's), or the
test kills them (``pg_terminate_backend``, ``KILL``). Each worker write meets the
dead connection, reconnects and repeats once; results are stored, each job runs
once, and the heartbeat keeps its lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections, transaction

from django_jobqueue import enqueue_job, storage
from django_jobqueue.core.reconnect import (
    is_disconnect,
    log_failure,
    mark_used,
    retry_on_disconnect,
)
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.worker.connections import check_before_handler
from django_jobqueue.worker.foreman import Foreman, ForemanOptions
from tests.testapp.jobtypes import worker as worker_jobs
from tests.testapp.models import RunRecord
from tests.worker.conftest import IDLE_S
from tests.workers_helpers import drain

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql", "mysql")]


def kill_other_sessions() -> int:
    """End every session on the test database but this thread's; return how many."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return int(cursor.fetchone()[0])
        cursor.execute(
            "SELECT id FROM information_schema.processlist "
            "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
        )
        killed = 0
        for (session,) in cursor.fetchall():
            try:
                cursor.execute(f"KILL {int(session)}")
                killed += 1
            except DatabaseError:  # gone meanwhile
                pass
        return killed


def reconnects(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Thread names of the reconnect-and-repeat warnings logged so far."""
    return [
        r.threadName or "" for r in caplog.records if r.name == "django_jobqueue.core.reconnect"
    ]


def wait_for(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def in_thread(func: Callable[[], Any]) -> Any:
    """Run ``func`` in a new thread (its own connections, closed after); return its value."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = func()
        except BaseException as exc:  # noqa: BLE001 (re-raised in the test's thread)
            box["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def backend_id() -> int:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_backend_pid()")
        else:
            cursor.execute("SELECT CONNECTION_ID()")
        return int(cursor.fetchone()[0])


def kill_session(session: int) -> None:
    """End the session ``session`` from the test's own connection, and wait for it."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_terminate_backend(%s, 5000)", [session])
        else:
            cursor.execute(f"KILL {int(session)}")
    time.sleep(0.1)  # the server closes the socket


@pytest.mark.parametrize("batched", [False, True], ids=["runner-writes", "completer-writes"])
def test_long_job_under_an_idle_timeout__result_stored_ran_once_lease_kept(
    idle_timeout: None, caplog: pytest.LogCaptureFixture, batched: bool
) -> None:
    # The lease (7.8 s) is shorter than the job (8.5 s), and each beat (1.3 s apart)
    # finds its connection closed by the 1 s idle timeout: only beats that reconnect
    # keep the job from being reaped and run again. Six beats to a lease, not three:
    # a loaded machine that stalls the heartbeat thread (and its reconnects) for a
    # couple of seconds must not lose the lease.
    caplog.set_level(logging.WARNING, logger="django_jobqueue.core.reconnect")
    quick = enqueue_job(None, "worker.record", {"label": "first"}, priority=1)["jid"]
    slow = enqueue_job(None, "worker.compute", {"s": 8.5}, priority=2)["jid"]
    stats = drain(concurrency=1, lease_ms=7800, heartbeat_ms=1300, batch_completions=batched)
    assert stats == {"done": 2}
    job = Job.objects.get(jid=slow)
    assert job.status == JobStatus.DONE
    assert job.result == {"s": 8.5}
    assert job.attempt == 1
    assert worker_jobs.computed[slow] == 1
    assert RunRecord.objects.filter(jid=quick).count() == 1
    assert job.heartbeat_at is not None and job.started_at is not None
    assert job.heartbeat_at - job.started_at > timedelta(seconds=IDLE_S)  # beat after a death
    threads = reconnects(caplog)
    assert "jq-heartbeat" in threads, threads
    if not batched:  # the runner's outcome write met its connection dead
        assert any(name.endswith("-runner") for name in threads), threads


def test_killed_sessions_between_jobs_and_during_a_heartbeat__no_result_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="django_jobqueue.core.reconnect")
    # Beats every 0.8 s; a 6 s lease, shorter than the slow job (7 s), so only a beat
    # that reconnects after the kill keeps it, yet long enough that a loaded machine
    # stalling the heartbeat thread for a few seconds does not lose it.
    foreman = Foreman(
        ForemanOptions(
            concurrency=2,
            lease_ms=6000,
            heartbeat_ms=800,
            min_sleep_ms=20,
            max_sleep_ms=100,
            ramp_time_ms=0,
            batch_completions=False,
        )
    )
    runner = threading.Thread(target=foreman.run, kwargs={"install_signals": False})
    runner.start()
    try:

        def done(jid: str) -> bool:
            return Job.objects.filter(jid=jid, status=JobStatus.DONE).exists()

        first = enqueue_job(None, "worker.record", {"label": "first"})["jid"]
        wait_for(lambda: done(first))
        time.sleep(0.3)  # idle between jobs
        assert kill_other_sessions() > 0
        # Its handler's first statement is a write: it must meet a live connection.
        second = enqueue_job(None, "worker.record", {"label": "second"})["jid"]
        wait_for(lambda: done(second))

        slow = enqueue_job(None, "worker.compute", {"s": 7})["jid"]
        wait_for(lambda: Job.objects.filter(jid=slow, status=JobStatus.PROCESSING).exists())
        time.sleep(1)  # a beat (every 0.8 s) landed; kill the heartbeat's session mid-run
        assert kill_other_sessions() > 0
        wait_for(lambda: done(slow))
    finally:
        foreman.stop(force=True)
        runner.join(30)
    assert not runner.is_alive()
    assert RunRecord.objects.filter(jid=first).count() == 1
    assert RunRecord.objects.filter(jid=second).count() == 1
    job = Job.objects.get(jid=slow)
    assert (job.status, job.result, job.attempt) == (JobStatus.DONE, {"s": 7}, 1)
    assert worker_jobs.computed[slow] == 1
    assert Job.objects.get(jid=second).attempt == 1
    threads = reconnects(caplog)
    assert "jq-heartbeat" in threads, threads
    assert any(name.endswith("-runner") for name in threads), threads


def test_check_before_handler__replaces_a_connection_killed_while_idle() -> None:
    def scenario() -> tuple[int, int, int, bool]:
        session = backend_id()
        mark_used(connection.alias)
        recent = check_before_handler()  # answered just now: taken as alive, no check
        in_thread(lambda: kill_session(session))
        closed = check_before_handler(idle_s=0)
        alive_now = check_before_handler(idle_s=0)
        return recent, closed, alive_now, backend_id() != session

    recent, closed, alive_now, new_session = in_thread(scenario)
    assert (recent, closed, alive_now) == (0, 1, 0)
    assert new_session


def test_claim_after_a_disconnect__claims_once_on_a_new_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="django_jobqueue.core.reconnect")
    jids = {enqueue_job(None, "worker.record", {"label": str(i)})["jid"] for i in range(3)}

    def scenario() -> list[Job]:
        session = backend_id()
        in_thread(lambda: kill_session(session))
        return storage.claim("default", owner="test", limit=2, lease_ms=60_000)

    claimed = in_thread(scenario)
    assert len(claimed) == 2
    assert {job.jid for job in claimed} <= jids
    assert [job.attempt for job in claimed] == [1, 1]
    tokens = {job.lease_token for job in claimed}
    assert len(tokens) == 1
    processing = Job.objects.filter(status=JobStatus.PROCESSING)
    assert sorted(processing.values_list("jid", flat=True)) == sorted(j.jid for j in claimed)
    assert [j.pk for j in storage.claimed_under("default", tokens.pop())] == [j.pk for j in claimed]
    assert len(reconnects(caplog)) == 1


def test_claimed_under__finds_a_claim_whose_reply_was_lost() -> None:
    # What a repeated claim finds when its first try committed: the rows of its token.
    for i in range(3):
        enqueue_job(None, "worker.record", {"label": str(i)})
    claimed = storage.claim("default", owner="test", limit=2, lease_ms=60_000)
    again = storage.claimed_under("default", claimed[0].lease_token)
    assert [job.pk for job in again] == [job.pk for job in claimed]
    assert storage.claimed_under("default", "no-such-token") == []


def statement_timeout(cursor: Any) -> None:
    """A statement that fails with an ``OperationalError`` on a live connection (its
    statement timeout): not a disconnect."""
    if connection.vendor == "postgresql":
        cursor.execute("SET statement_timeout = 10")
        try:
            cursor.execute("SELECT pg_sleep(1)")
        finally:
            cursor.execute("SET statement_timeout = 0")
    else:
        cursor.execute("SET STATEMENT max_statement_time = 0.01 FOR SELECT SLEEP(1)")


def test_is_disconnect__only_for_a_dead_connection() -> None:
    def flag(sql: Callable[[Any], None]) -> bool:
        # Judged at once, on the connection the statement ran on (as the wrapper does).
        try:
            with connection.cursor() as cursor:
                sql(cursor)
        except DatabaseError as exc:
            return is_disconnect(exc, "default")
        raise AssertionError("the statement did not fail")

    def scenario() -> tuple[bool, bool, bool]:
        syntax = flag(lambda cursor: cursor.execute("SELEKT 1"))
        timeout = flag(statement_timeout)
        session = backend_id()
        in_thread(lambda: kill_session(session))
        dead = flag(lambda cursor: cursor.execute("SELECT 1"))
        return syntax, timeout, dead

    assert in_thread(scenario) == (False, False, True)


def test_log_failure__one_line_for_a_dead_connection__a_traceback_otherwise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("tests.log_failure")

    def step(sql: Callable[[Any], None], name: str) -> None:
        try:
            with connection.cursor() as cursor:
                sql(cursor)
        except DatabaseError:
            log_failure(log, "default", "step failed name=%s", name, level=logging.ERROR)
            return
        raise AssertionError("the statement did not fail")

    def scenario() -> None:
        step(lambda cursor: cursor.execute("SELEKT 1"), "syntax")
        step(statement_timeout, "timeout")  # an OperationalError, the connection alive
        session = backend_id()
        in_thread(lambda: kill_session(session))
        step(lambda cursor: cursor.execute("SELECT 1"), "killed")
        connection.close()  # no connection now, as after a failed connect
        try:
            raise ValueError("not the database's")
        except ValueError:
            log_failure(log, "default", "step failed name=%s", "bug")

    with caplog.at_level(logging.WARNING, logger="tests.log_failure"):
        in_thread(scenario)
    records = {r.args[0]: r for r in caplog.records if r.name == "tests.log_failure"}
    assert list(records) == ["syntax", "timeout", "killed", "bug"]
    for name in ("syntax", "timeout", "bug"):  # not an outage: the traceback, as asked
        assert records[name].exc_info is not None, name
        assert records[name].getMessage() == f"step failed name={name}"
    assert records["syntax"].levelno == records["timeout"].levelno == logging.ERROR
    assert records["bug"].levelno == logging.WARNING  # the default level
    killed = records["killed"]
    assert killed.exc_info is None
    assert killed.levelno == logging.WARNING  # an outage: WARNING whatever was asked
    assert killed.getMessage().startswith("step failed name=killed: database unreachable (")
    assert "\n" not in killed.getMessage()


def test_retry_on_disconnect__never_inside_the_callers_transaction() -> None:
    calls: list[int] = []

    def scenario() -> None:
        with transaction.atomic():
            session = backend_id()
            in_thread(lambda: kill_session(session))
            retry_on_disconnect("default", lambda: calls.append(backend_id()))

    with pytest.raises(DatabaseError) as raised:
        in_thread(scenario)
    assert calls == []  # the one call failed, and was not repeated
    assert raised.type.__name__ in {"OperationalError", "InterfaceError"}


@pytest.mark.parametrize(
    "limit",
    [{"concurrency": 100}, {"concurrency": 1, "partition": "payload.label"}],
    ids=["global-room", "keyed"],
)
def test_limited_claim_after_a_disconnect__claims_once_on_a_new_connection(
    caplog: pytest.LogCaptureFixture, limit: dict[str, Any]
) -> None:
    # Under a limit the claim's statements travel in flights (store/flights.py),
    # pipelined on PostgreSQL: a flight that meets the dead session must leave it for
    # the repeat, as the plain claim's statement does, not fail the claim.
    from django_jobqueue.store import limits
    from django_jobqueue.store.pauses import paused_queues

    caplog.set_level(logging.WARNING, logger="django_jobqueue.core.reconnect")
    jids = {enqueue_job(None, "worker.record", {"label": str(i)})["jid"] for i in range(3)}
    limits.set_limit("default", "type:worker.record", limit)

    def scenario() -> list[Job]:
        limits.clear_cache()
        # The claim's cached views read now, so its first statement on the dead
        # session is the limited claim's own (the views are read at most every 0.5 s).
        limits.active("default")
        paused_queues("default")
        session = backend_id()
        in_thread(lambda: kill_session(session))
        return storage.claim("default", owner="test", limit=2, lease_ms=60_000)

    try:
        claimed = in_thread(scenario)
    finally:
        limits.clear_cache()
    assert len(claimed) == 2
    assert {job.jid for job in claimed} <= jids
    assert len({job.lease_token for job in claimed}) == 1
    processing = Job.objects.filter(status=JobStatus.PROCESSING)
    assert sorted(processing.values_list("jid", flat=True)) == sorted(j.jid for j in claimed)
    assert len(reconnects(caplog)) == 1

"""Callers that write nothing let go at once; lock connections end with their thread;
a cancel frees the unique key and the id; payload and result sizes.

Real threads on the real server (PostgreSQL, MariaDB, SQLite). Settle times are
printed and appended to ``tests.no_duplicate_helpers.RESULTS_FILE``, never asserted.
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.test import override_settings

from django_jobqueue import maintenance, storage
from django_jobqueue.checks import MYSQL_PACKET_OVERHEAD, check_database, check_sizes
from django_jobqueue.core.conf import get_config, validate_settings
from django_jobqueue.core.exceptions import InvalidPayload, LockTimeout
from django_jobqueue.core.validation import check_result_size, json_size
from django_jobqueue.enqueue import build_job, create_job, enqueue_job, enqueue_many
from django_jobqueue.ids import Queue
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import locks
from django_jobqueue.store.managers import hold_lock_names
from tests.no_duplicate_helpers import JOB_TYPE, advisory_locks_in_database, race_threads, record

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 30


@pytest.fixture
def queue() -> str:
    """A queue of this test alone, so its lock names meet no other test's."""
    return f"rel-{uuid.uuid4().hex[:12]}"


def _hold_s() -> float:
    # SQLite serialises whole write transactions: 30 x 1 s would only measure its
    # busy timeout, so each holds 0.2 s there.
    return 0.2 if connection.vendor == "sqlite" else 1.0


def _assert_no_advisory_lock() -> None:
    if connection.vendor == "postgresql":
        assert advisory_locks_in_database() == 0


# Item 3: a caller that writes nothing lets go at once ----------------------------


def test_30_held_open_adds_of_one_id__one_true_29_false_no_error(queue: str) -> None:
    handle = Queue(queue, job_type=JOB_TYPE)
    hold_s = _hold_s()

    def racer(i: int) -> bool:
        with transaction.atomic():
            added = handle.add({"racer": i}, id="x")
            time.sleep(hold_s)
        return added

    race = race_threads(THREADS, racer)

    assert race.errors == []
    assert Counter(race.outcomes) == {True: 1, False: THREADS - 1}
    (job,) = Job.objects.filter(queue=queue)
    assert job.job_id == "x"
    assert job.status == JobStatus.INIT
    assert job.waiting
    _assert_no_advisory_lock()
    record(f"30 add(), atomic held {hold_s:.1f} s", connection.vendor, race.settle_s, 1, THREADS)


@pytest.mark.parametrize("verb", ["update", "cancel"])
def test_30_held_open_updates_or_cancels_of_a_missing_id__all_false_no_error(
    queue: str, verb: str
) -> None:
    handle = Queue(queue, job_type=JOB_TYPE)
    hold_s = _hold_s()

    def racer(i: int) -> bool:
        with transaction.atomic():
            answer = handle.update("x", {"racer": i}) if verb == "update" else handle.cancel("x")
            time.sleep(hold_s)
        return answer

    race = race_threads(THREADS, racer)

    assert race.errors == []
    assert Counter(race.outcomes) == {False: THREADS}
    assert not Job.objects.filter(queue=queue).exists()
    _assert_no_advisory_lock()
    record(f"30 {verb}(), atomic held {hold_s:.1f} s", connection.vendor, race.settle_s, 0, THREADS)


def test_a_false_add_inside_a_transaction_holds_no_lock_while_it_stays_open(queue: str) -> None:
    if connection.vendor == "sqlite":
        pytest.skip("SQLite: the caller's open transaction holds the one write lock")
    handle = Queue(queue, job_type=JOB_TYPE)
    assert handle.add("first", id="x") is True
    with transaction.atomic():
        assert handle.add("second", id="x") is False
        # Still inside the caller's transaction: another thread takes the lock at once.
        seen: list[Any] = []

        def other() -> None:
            try:
                seen.append(handle.cancel("x"))
            finally:
                locks.close_lock_connections()
                connections.close_all()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(timeout=30)
        assert seen == [True]
    assert handle.add("third", id="x") is True


def test_a_deduplicated_batch_inside_a_transaction_frees_its_lock(queue: str) -> None:
    assert enqueue_job(queue, JOB_TYPE, {"n": 0}, unique_key="k").status == "enqueued"
    with transaction.atomic():
        results = enqueue_many([{"queue": queue, "job_type": JOB_TYPE, "unique_key": "k"}])
        assert [r.status for r in results] == ["deduplicated"]
        _assert_no_advisory_lock()


# Item 5: a cancel frees the unique key and the id ---------------------------------


def test_operator_cancel_of_a_waiting_job_frees_its_unique_key_and_id(queue: str) -> None:
    first = create_job(build_job(queue, JOB_TYPE, {"n": 1}, unique_key="digest", job_id="order-1"))
    counts = maintenance.cancel_jobs(Job.objects.filter(jid=first.jid))
    assert counts.cancelled == 1
    row = Job.objects.get(jid=first.jid)
    assert row.status == JobStatus.CANCELLED
    assert (row.unique_key_hash, row.job_id_hash) == (None, None)

    again = enqueue_job(queue, JOB_TYPE, {"n": 2}, unique_key="digest")
    assert again.status == "enqueued"
    assert again.jid != first.jid
    assert Queue(queue, job_type=JOB_TYPE).add({"n": 3}, id="order-1") is True


def test_ids_cancel_of_a_waiting_job_frees_its_unique_key_and_id(queue: str) -> None:
    handle = Queue(queue, job_type=JOB_TYPE)
    first = create_job(build_job(queue, JOB_TYPE, {"n": 1}, unique_key="digest", job_id="order-1"))
    assert handle.cancel("order-1") is True
    assert enqueue_job(queue, JOB_TYPE, {"n": 2}, unique_key="digest").status == "enqueued"
    assert handle.add({"n": 3}, id="order-1") is True
    assert not Job.objects.filter(jid=first.jid).exists()


def test_a_dead_letter_keeps_its_unique_key_until_the_ttl(queue: str) -> None:
    first = enqueue_job(queue, JOB_TYPE, {"n": 1}, unique_key="digest", max_retry=0)
    (job,) = storage.claim("default", owner="test", limit=1, queues=[queue])
    assert job.jid == first.jid
    assert storage.fail(job, RuntimeError("boom"), retryable=False) == JobStatus.ERROR
    again = enqueue_job(queue, JOB_TYPE, {"n": 2}, unique_key="digest")
    assert again.status == "deduplicated"
    assert again.jid == first.jid


# Item 4: lock connections end with their thread; 1205/1213 retried once ----------


def _server_connections() -> int:
    """Sessions on the server connected to the test database (ours included)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM information_schema.processlist WHERE db = %s",
            [connection.settings_dict["NAME"]],
        )
        return int(cursor.fetchone()[0])


@pytest.mark.skipif("connection.vendor != 'mysql'")
def test_30_short_lived_threads__their_lock_connections_close_without_gc(queue: str) -> None:
    baseline = _server_connections()
    errors: list[BaseException] = []
    during: list[int] = []

    def enqueuer(i: int) -> None:
        try:
            enqueue_job(queue, JOB_TYPE, {"n": i}, unique_key=f"k{i % 5}")
            during.append(i)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
        finally:
            # The data connection is the caller's to close (Django does at request
            # end); the lock connection is never closed by hand here.
            connections.close_all()

    gc.disable()  # nothing may rest on a garbage collection
    try:
        threads = [threading.Thread(target=enqueuer, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        deadline = time.monotonic() + 5  # the server drops a closed session at once, nearly
        now = _server_connections()
        while now > baseline and time.monotonic() < deadline:
            time.sleep(0.05)
            now = _server_connections()
    finally:
        gc.enable()

    assert errors == []
    assert len(during) == THREADS
    assert Job.objects.filter(queue=queue).count() == 5
    assert now == baseline


def _stale_key_row(queue: str, key: str) -> Job:
    """A job whose unique-key hold has expired: a creator must clear it under the lock."""
    first = enqueue_job(queue, JOB_TYPE, {"n": 0}, unique_key=key)
    Job.objects.filter(jid=first.jid).update(
        unique_expires_at=Job.objects.get(jid=first.jid).created_at
    )
    return Job.objects.get(jid=first.jid)


@pytest.mark.skipif("connection.vendor != 'mysql'")
@pytest.mark.parametrize("hold_s", [1.5, 5.0])
def test_a_lock_wait_timeout_on_create_is_retried_once_then_lock_timeout(
    queue: str, hold_s: float, caplog: pytest.LogCaptureFixture
) -> None:
    # A real InnoDB 1205, no patching: another session holds the stale holder's row
    # lock, which the creator's clearing UPDATE waits for, 1 s at most per try. Held
    # 1.5 s, the first try times out and the retry gets through; held 5 s, both
    # time out and the caller gets LockTimeout.
    stale = _stale_key_row(queue, "digest")
    other = connections.create_connection("default")
    other.connect()
    other.set_autocommit(False)
    with other.cursor() as cursor:
        cursor.execute(f"SELECT jid FROM {Job._meta.db_table} WHERE id = %s FOR UPDATE", [stale.pk])
    other.inc_thread_sharing()  # the timer's thread ends its transaction
    ender = threading.Timer(hold_s, other.rollback)
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
    caplog.set_level("WARNING", logger="django_jobqueue.store.locks")
    ender.start()
    try:
        if hold_s < 2:
            result = enqueue_job(queue, JOB_TYPE, {"n": 1}, unique_key="digest")
            assert result.status == "enqueued"
            assert Job.objects.filter(queue=queue).count() == 2
        else:
            with pytest.raises(LockTimeout, match=r"lock-wait timeout \(1205\) again"):
                enqueue_job(queue, JOB_TYPE, {"n": 1}, unique_key="digest")
            assert Job.objects.filter(queue=queue).count() == 1
    finally:
        ender.join()
        other.close()
        other.dec_thread_sharing()
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT")
    retries = [r for r in caplog.records if "retrying once" in r.getMessage()]
    assert len(retries) == 1
    assert not locks.is_lock_held("default", hold_lock_names(queue, unique_key="digest")[0])


# Item 6: sizes ---------------------------------------------------------------------


def test_a_20_mb_payload_is_invalid_payload__nothing_written__connection_intact(
    queue: str,
) -> None:
    big = {"blob": "x" * (20 * 1024 * 1024)}
    with pytest.raises(InvalidPayload, match=r"over the limit of 1048576 bytes.*MAX_PAYLOAD_BYTES"):
        enqueue_job(queue, JOB_TYPE, big)
    with pytest.raises(InvalidPayload, match="MAX_PAYLOAD_BYTES"):
        Queue(queue, job_type=JOB_TYPE).add(big, id="x")
    with pytest.raises(InvalidPayload, match="MAX_PAYLOAD_BYTES"):
        enqueue_many([{"queue": queue, "job_type": JOB_TYPE, "payload": big}])
    # The same connection answers its next query.
    assert not Job.objects.filter(queue=queue).exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone()[0] == 1
    assert enqueue_job(queue, JOB_TYPE, {"small": True}).status == "enqueued"


@override_settings(JOBQUEUE={"MAX_PAYLOAD_BYTES": 100})
def test_max_payload_bytes_counts_the_stored_json_bytes(queue: str) -> None:
    # json.dumps of {"s": "..."} is 9 bytes around the text; "é" is sent as \\u00e9.
    assert json_size({"s": "a" * 91}) == 100
    assert enqueue_job(queue, JOB_TYPE, {"s": "a" * 91}).status == "enqueued"
    with pytest.raises(InvalidPayload, match="101 bytes of JSON"):
        enqueue_job(queue, JOB_TYPE, {"s": "a" * 92})
    assert json_size({"s": "é"}) == len('{"s": "\\u00e9"}')
    assert Job.objects.filter(queue=queue).count() == 1


def test_check_result_size() -> None:
    assert check_result_size({"ok": [1, 2]}, 100) == {"ok": [1, 2]}
    with pytest.raises(InvalidPayload, match=r"result is 2000002 bytes of JSON.*MAX_RESULT_BYTES"):
        check_result_size("r" * 2_000_000, 1_048_576)
    with pytest.raises(InvalidPayload, match="not JSON"):
        check_result_size(float("nan"), 100)


def test_size_settings_default_to_1_mib_and_must_be_positive() -> None:
    config = get_config()
    assert (config.MAX_PAYLOAD_BYTES, config.MAX_RESULT_BYTES) == (1_048_576, 1_048_576)
    with override_settings(JOBQUEUE={"MAX_RESULT_BYTES": 0}):
        assert any("MAX_RESULT_BYTES" in problem for problem in validate_settings())


def test_system_check_refuses_a_limit_above_what_the_database_takes() -> None:
    assert check_sizes(databases=["default"]) == []
    with override_settings(JOBQUEUE={"MAX_PAYLOAD_BYTES": 2_000_000_000}):
        (error,) = check_sizes(databases=["default"])
    assert error.id == "django_jobqueue.E103"
    assert "MAX_PAYLOAD_BYTES" in error.msg
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@max_allowed_packet")
            packet = int(cursor.fetchone()[0])
        just_over = packet - MYSQL_PACKET_OVERHEAD + 1
        with override_settings(JOBQUEUE={"MAX_RESULT_BYTES": just_over}):
            (error,) = check_sizes(databases=["default"])
        assert "max_allowed_packet" in error.msg
        with override_settings(JOBQUEUE={"MAX_RESULT_BYTES": just_over - 1}):
            assert check_sizes(databases=["default"]) == []


def test_a_running_job_cancelled_by_its_worker_frees_its_unique_key_and_id(queue: str) -> None:
    first = create_job(build_job(queue, JOB_TYPE, {"n": 1}, unique_key="digest", job_id="order-1"))
    (job,) = storage.claim("default", owner="test", limit=1, queues=[queue])
    assert job.jid == first.jid
    assert storage.finish_cancelled(job) is True
    row = Job.objects.get(jid=first.jid)
    assert row.status == JobStatus.CANCELLED
    assert (row.unique_key_hash, row.job_id_hash) == (None, None)
    assert enqueue_job(queue, JOB_TYPE, {"n": 2}, unique_key="digest").status == "enqueued"
    assert Queue(queue, job_type=JOB_TYPE).add({"n": 3}, id="order-1") is True


@override_settings(JOBQUEUE={"MAX_RESULT_BYTES": 100})
def test_a_result_over_max_result_bytes_fails_the_attempt_with_a_clear_error() -> None:
    from django_jobqueue.worker import executor
    from django_jobqueue.worker.context import JobContext

    big = {"text": "x" * 200}  # the ids.plain handler returns its payload as result
    first = enqueue_job("ids-plain", "ids.plain", big)
    (job,) = storage.claim("default", owner="test", limit=1, queues=["ids-plain"])
    assert job.jid == first.jid
    status = executor.execute(job, JobContext(job, worker="test"))
    assert status == JobStatus.ERROR
    row = Job.objects.get(jid=first.jid)
    assert row.status == JobStatus.ERROR  # stored as a failure: not left processing
    assert row.result is None
    assert "MAX_RESULT_BYTES" in row.message


@pytest.mark.vendor("mysql")
def test_system_check_warns_of_mysql_sessions_not_read_committed() -> None:
    # docs/workflows.md "Lock order": an end reads its dependents' edges in a
    # statement after their lock, which sees the other end's commit only at READ
    # COMMITTED; at REPEATABLE READ both ends could leave their dependent blocked.
    assert check_database(databases=["default"]) == []
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    try:
        (warning,) = check_database(databases=["default"])
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    assert warning.id == "django_jobqueue.W104"
    assert "REPEATABLE-READ" in warning.msg

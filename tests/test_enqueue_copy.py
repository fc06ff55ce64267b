"""enqueue_many by COPY on PostgreSQL (django_jobqueue/store/rawcopy.py).

The COPY path must write what the unnest insert writes, column for column, answer
ids and unique keys the same way, wake the same queues only on commit, and leave
nothing in the session (a transaction pooler hands the next transaction to another
server session). As measured (bench/bulk_copy.py) no batch size takes it by default,
so the tests force it with ``COPY_MIN_ROWS = 0``; the size rule has its own tests. On
MariaDB and SQLite the path is never taken, which the last tests check.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from django_jobqueue import enqueue_many
from django_jobqueue.enqueue import build_job
from django_jobqueue.models import Job
from django_jobqueue.store import rawcopy, wakeups
from django_jobqueue.store.rawinsert import Row, new_jids
from tests.conftest import through_pgbouncer
from tests.no_duplicate_helpers import JOB_TYPE
from tests.wakeup_helpers import wakeup_listener

pytestmark = pytest.mark.django_db(transaction=True)

postgres = pytest.mark.vendor("postgresql")

_PARIS = ZoneInfo("Europe/Paris")
#: A wall time a DST change repeats: fold 0 is 00:30 UTC, fold 1 is 01:30 UTC.
_EARLY = datetime(2030, 10, 27, 2, 30, tzinfo=_PARIS)

#: Columns that differ between two enqueues of the same jobs by their nature.
_OWN = {"id", "jid", "created_at", "updated_at", "run_at", "expires_at", "unique_expires_at"}


@pytest.fixture
def copy_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every batch of two jobs or more takes the COPY path."""
    monkeypatch.setattr(rawcopy, "COPY_MIN_ROWS", 0)


def _batch(queue: str) -> list[dict[str, Any]]:
    """Jobs of every shape a row can take, and payloads COPY's text format must escape."""
    return [
        {"queue": queue, "job_type": JOB_TYPE, "payload": {"n": 1}},
        {"queue": queue, "job_type": JOB_TYPE, "payload": "tab\there\nnewline\\back\rcr"},
        {"queue": queue, "job_type": JOB_TYPE, "payload": {"é": "ü\u2603", "k": [1, 2.5, None]}},
        {"queue": queue, "job_type": JOB_TYPE, "payload": None},
        {"queue": queue, "job_type": JOB_TYPE, "payload": "\\N"},
        {"queue": queue, "job_type": JOB_TYPE, "payload": [], "priority": 7, "max_retry": 0},
        {"queue": queue, "job_type": JOB_TYPE, "payload": 3, "delay": "90s", "expires_ms": 5000},
        {"queue": queue, "job_type": JOB_TYPE, "payload": 4, "at": _EARLY},
        {"queue": queue, "job_type": JOB_TYPE, "payload": 5, "at": _EARLY.replace(fold=1)},
        {"queue": queue, "job_type": JOB_TYPE, "payload": 6, "timeout_ms": 1234},
        {"queue": queue, "job_type": JOB_TYPE, "job_id": "order\t42\\x"},
        {"queue": queue, "job_type": JOB_TYPE, "unique_key": "k\n1", "unique_ttl_ms": 60_000},
        {"queue": queue, "job_type": JOB_TYPE, "unique_key": "k2", "unique_mode": "while_locked"},
    ]


def _rows(queue: str) -> list[dict[str, Any]]:
    return list(Job.objects.filter(queue=queue).order_by("pk").values())


@postgres
def test_copy_writes_the_rows_of_the_unnest_insert(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rawcopy, "COPY_MIN_ROWS", None)
    by_insert = enqueue_many(_batch("by-insert"))
    monkeypatch.setattr(rawcopy, "COPY_MIN_ROWS", 0)
    by_copy = enqueue_many(_batch("by-copy"))

    assert [r.status for r in by_copy] == [r.status for r in by_insert] == ["enqueued"] * 13
    inserted, copied = _rows("by-insert"), _rows("by-copy")
    assert [row["jid"] for row in copied] == [r.jid for r in by_copy]  # in the batch's order
    for a, b in zip(inserted, copied, strict=True):
        assert {k: v for k, v in a.items() if k not in _OWN | {"queue"}} == {
            k: v for k, v in b.items() if k not in _OWN | {"queue"}
        }
        # Times: the statement's clock plus the job's duration, on both paths.
        for name in ("run_at", "expires_at", "unique_expires_at"):
            assert (a[name] is None) == (b[name] is None)
            if a[name] is not None:
                assert a[name] - a["created_at"] == b[name] - b["created_at"] or (
                    a[name] == b[name]  # an absolute ``at``
                )
        assert b["created_at"] == b["updated_at"]
    # One clock reading for the whole batch, as one statement has.
    assert len({row["created_at"] for row in copied}) == 1
    # The two readings of the repeated wall time stay an hour apart.
    assert copied[8]["run_at"] - copied[7]["run_at"] == timedelta(hours=1)
    assert copied[3]["payload"] is None
    # SQL NULL for a None payload (as the field stores it), not JSON null, on both.
    assert Job.objects.filter(queue="by-copy", payload__isnull=True).count() == 4
    assert Job.objects.filter(queue="by-insert", payload__isnull=True).count() == 4


@postgres
def test_copy_deduplicates_ids_and_keys_in_the_batch_and_against_the_table(
    copy_always: None,
) -> None:
    held = enqueue_many([{"queue": "d", "job_type": JOB_TYPE, "unique_key": "taken"}])[0]
    results = enqueue_many(
        [
            {"queue": "d", "job_type": JOB_TYPE, "job_id": "a"},
            {"queue": "d", "job_type": JOB_TYPE, "job_id": "a"},
            {"queue": "d", "job_type": JOB_TYPE, "unique_key": "taken"},
            {"queue": "d", "job_type": JOB_TYPE, "unique_key": "fresh"},
            {"queue": "d", "job_type": JOB_TYPE, "unique_key": "fresh"},
            {"queue": "other", "job_type": JOB_TYPE, "job_id": "a"},
        ]
    )
    assert [r.status for r in results] == [
        "enqueued", "deduplicated", "deduplicated", "enqueued", "deduplicated", "enqueued",
    ]  # fmt: skip
    assert results[1].jid == results[0].jid
    assert results[2].jid == held.jid
    assert results[4].jid == results[3].jid
    assert Job.objects.count() == 4


@postgres
def test_a_row_that_breaks_a_unique_index__fails_the_copy_whole(copy_always: None) -> None:
    """What the creation locks make rare (a holder they let through) surfaces as
    IntegrityError, as from the unnest insert, and none of the batch stays."""
    enqueue_many([{"queue": "u", "job_type": JOB_TYPE, "unique_key": "k"}])
    specs = [build_job("u", JOB_TYPE, i) for i in range(3)] + [
        build_job("u", JOB_TYPE, unique_key="k")
    ]
    rows = [Row(spec, jid) for spec, jid in zip(specs, new_jids(len(specs)), strict=True)]
    with pytest.raises(IntegrityError), transaction.atomic():
        rawcopy.copy_rows("default", rows, wake_queues=["u"])
    assert Job.objects.filter(queue="u").count() == 1


@postgres
def test_inside_a_callers_transaction_that_rolls_back__no_job_and_no_wake_up(
    copy_always: None,
) -> None:
    with wakeup_listener() as received:
        wakeups.local_event.clear()
        with transaction.atomic():
            enqueue_many([{"queue": "rb", "job_type": JOB_TYPE, "payload": i} for i in range(50)])
            enqueue_many([{"queue": "rb", "job_type": JOB_TYPE, "unique_key": "k"}] * 3)
            assert Job.objects.filter(queue="rb").count() == 51
            transaction.set_rollback(True)
        assert Job.objects.count() == 0
        assert received() == []
        assert not wakeups.local_event.is_set()
        # Committed: one wake-up per queue with a due job, none for a delayed one.
        with transaction.atomic():
            enqueue_many(
                [{"queue": "a", "job_type": JOB_TYPE}] * 3
                + [{"queue": "b", "job_type": JOB_TYPE}] * 2
                + [{"queue": "later", "job_type": JOB_TYPE, "delay": "1h"}] * 2
            )
            assert not wakeups.local_event.is_set()  # on commit only
        assert wakeups.local_event.is_set()
        assert sorted(received()) == ["a", "b"]


@postgres
def test_in_autocommit__the_clock_and_the_copy_share_one_transaction(copy_always: None) -> None:
    """A transaction pooler keeps a session only for a transaction: the statement that
    reads the clock and sends the wake-ups, and the COPY, must be one."""
    seen: list[bool] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    assert connection.get_autocommit()
    with connection.execute_wrapper(record):
        enqueue_many([{"queue": "t", "job_type": JOB_TYPE, "payload": i} for i in range(5)])
    assert seen and all(seen)
    assert Job.objects.filter(queue="t").count() == 5


def _session_state(cursor: Any) -> tuple[Any, ...]:
    """What a session keeps from one transaction to the next."""
    cursor.execute("SELECT name, setting FROM pg_settings WHERE source = 'session' ORDER BY name")
    settings = cursor.fetchall()
    cursor.execute("SELECT count(*) FROM pg_prepared_statements")
    prepared = cursor.fetchone()[0]
    cursor.execute("SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()")
    temporary = cursor.fetchone()[0]
    cursor.execute("SELECT count(*) FROM pg_listening_channels()")
    listening = cursor.fetchone()[0]
    cursor.execute("SELECT count(*) FROM pg_cursors")
    cursors = cursor.fetchone()[0]
    return settings, prepared, temporary, listening, cursors


@postgres
def test_copy_leaves_no_session_state_behind(copy_always: None) -> None:
    """No setting, prepared statement, temporary table, LISTEN or cursor outlives it."""
    enqueue_many([{"queue": "warm", "job_type": JOB_TYPE}] * 2)  # the plan, made once
    with connection.cursor() as cursor:
        before = _session_state(cursor)
    enqueue_many([{"queue": "s", "job_type": JOB_TYPE, "payload": i} for i in range(300)])
    with transaction.atomic():
        enqueue_many(
            [{"queue": "s", "job_type": JOB_TYPE, "unique_key": f"k{i}"} for i in range(9)]
        )
    with connection.cursor() as cursor:
        assert _session_state(cursor) == before
        assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert Job.objects.filter(queue="s").count() == 309


@postgres
def test_copy_works_on_a_session_reset_between_transactions(copy_always: None) -> None:
    """``DISCARD ALL`` (a pooler's reset, or another server session) between two
    batches: the second needs nothing the first left."""
    enqueue_many([{"queue": "r1", "job_type": JOB_TYPE}] * 4)
    with connection.cursor() as cursor:
        cursor.execute("DISCARD ALL")
    enqueue_many([{"queue": "r2", "job_type": JOB_TYPE}] * 4)
    assert Job.objects.filter(queue__in=["r1", "r2"]).count() == 8


@postgres
@pytest.mark.pgbouncer
def test_copy_through_pgbouncer_in_transaction_pooling(copy_always: None) -> None:
    if not through_pgbouncer():
        pytest.skip("needs PgBouncer (scripts/test's pgbouncer leg)")
    for round_ in range(5):
        enqueue_many([{"queue": "pgb", "job_type": JOB_TYPE, "payload": i} for i in range(200)])
        enqueue_many([{"queue": "pgb", "job_type": JOB_TYPE, "job_id": f"{round_}"}] * 2)
    assert Job.objects.filter(queue="pgb").count() == 1005


@postgres
def test_many_rows_go_in_several_writes_in_the_batchs_order(
    copy_always: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rawcopy, "_ROWS_PER_WRITE", 7)
    results = enqueue_many([{"queue": "w", "job_type": JOB_TYPE, "payload": i} for i in range(40)])
    stored = list(Job.objects.filter(queue="w").order_by("pk").values_list("jid", "payload"))
    assert stored == [(r.jid, i) for i, r in enumerate(results)]


@postgres
def test_the_copy_shows_in_the_captured_queries(copy_always: None) -> None:
    with CaptureQueriesContext(connection) as captured:
        enqueue_many([{"queue": "c", "job_type": JOB_TYPE}] * 3)
    copies = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("COPY ")]
    assert len(copies) == 1
    assert copies[0].endswith("-- 3 rows")


@postgres
def test_a_bad_hold_field_is_refused_before_anything_is_written(copy_always: None) -> None:
    rows = [Row(build_job("h", JOB_TYPE), jid, {"bogus": 1}) for jid in new_jids(2)]
    with pytest.raises(TypeError, match="bogus"):
        rawcopy.copy_rows("default", rows)
    assert Job.objects.count() == 0


def test_as_measured_a_big_batch_takes_the_insert() -> None:
    """bench/bulk_copy.py found the unnest insert as fast or faster at every size."""
    with CaptureQueriesContext(connection) as captured:
        enqueue_many([{"queue": "m", "job_type": JOB_TYPE, "payload": i} for i in range(1_500)])
    assert not [q for q in captured.captured_queries if q["sql"].startswith("COPY ")]
    assert Job.objects.filter(queue="m").count() == 1_500


def test_the_path_is_chosen_by_size_on_postgresql_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rawcopy, "COPY_MIN_ROWS", 100)
    assert rawcopy.uses_copy("default", 100) is (connection.vendor == "postgresql")
    assert rawcopy.uses_copy("default", 99) is False


def test_a_batch_past_the_size_is_the_same_on_every_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At a size that takes COPY on PostgreSQL (and the insert elsewhere)."""
    monkeypatch.setattr(rawcopy, "COPY_MIN_ROWS", 100)
    jobs = [{"queue": "big", "job_type": JOB_TYPE, "payload": {"i": i}} for i in range(150)]
    jobs[1] = {**jobs[1], "unique_key": "u"}
    jobs[2] = {**jobs[2], "unique_key": "u"}
    results = enqueue_many(jobs)
    assert [r.status for r in results].count("deduplicated") == 1
    stored = list(Job.objects.filter(queue="big").order_by("pk").values_list("jid", flat=True))
    assert stored == [r.jid for r in results if r.status == "enqueued"]

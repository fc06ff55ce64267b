"""enqueue_many's streamed batches under hostile conditions (bulk.create_streamed).

A streamed batch sends its chunks in one psycopg pipeline inside one transaction.
Whatever goes wrong part way (an invalid job in a later chunk, an error the server
raises for a chunk already sent, a session killed from outside, an exception out
of a payload object) must write nothing, leave no transaction and no pipeline open,
raise Django's error classes (not psycopg's), and leave the connection usable. Most
tests set ``STREAM_ROWS`` to 4 so that a batch of 19 is five chunks.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import (
    Error as DjangoError,
)
from django.db import (
    IntegrityError,
    OperationalError,
    connection,
    connections,
    transaction,
)
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_jobqueue import aenqueue_many, batch, bulk, enqueue_many, storage, wait_for
from django_jobqueue.core import prepared
from django_jobqueue.core.exceptions import (
    InvalidOption,
    InvalidPayload,
    UnknownJobType,
)
from django_jobqueue.models import Job
from django_jobqueue.store import rawinsert
from tests.conftest import direct_postgres_url, through_pgbouncer
from tests.no_duplicate_helpers import JOB_TYPE, race_threads

pytestmark = pytest.mark.django_db(transaction=True)

postgres = pytest.mark.vendor("postgresql")


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "STREAM_ROWS", 4)


def _jobs(queue: str, count: int = 19) -> list[dict[str, Any]]:
    return [{"queue": queue, "job_type": JOB_TYPE, "payload": {"i": i}} for i in range(count)]


def _streams(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record each call of create_streamed (its chunk count is not needed)."""
    calls: list[int] = []
    real = bulk.create_streamed

    def spy(specs: Any) -> Any:
        calls.append(1)
        return real(specs)

    monkeypatch.setattr(bulk, "create_streamed", spy)
    return calls


def _assert_clean() -> None:
    """No transaction, no pipeline, the connection usable, nothing written."""
    assert not connection.in_atomic_block
    raw = connection.connection
    if connection.vendor == "postgresql" and raw is not None and not raw.closed:
        import psycopg

        assert raw.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
        assert raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert Job.objects.count() == 0
    assert len(enqueue_many(_jobs("after"))) == 19
    assert Job.objects.filter(queue="after").count() == 19
    Job.objects.all().delete()


class _Boom(dict):  # type: ignore[type-arg]
    """A payload whose encoding raises something that is not a TypeError."""

    def items(self) -> Any:
        raise RuntimeError("boom from a payload")


_BAD_JOBS: dict[str, tuple[dict[str, Any], type[BaseException]]] = {
    "bad payload": ({"payload": {"x": float("nan")}}, InvalidPayload),
    "NUL in payload": ({"payload": {"x": "a\x00b"}}, InvalidPayload),
    "payload too large": ({"payload": "x" * 70_000}, InvalidPayload),
    "unknown job type": ({"job_type": "no.such.type"}, UnknownJobType),
    "unknown option": ({"bogus": 1}, InvalidOption),
    "bad option value": ({"priority": 0}, InvalidOption),
    "bad delay": ({"delay": -5}, InvalidOption),
    "naive at": ({"at": __import__("datetime").datetime(2030, 1, 1)}, InvalidOption),
    "bad limit_key": ({"limit_key": ""}, InvalidOption),
    "payload raising": ({"payload": _Boom(a=1)}, RuntimeError),
}


@pytest.mark.pgbouncer
@pytest.mark.parametrize("where", ["alone", "in a caller's savepoint"])
@pytest.mark.parametrize("kind", sorted(_BAD_JOBS))
def test_an_invalid_job_in_a_later_chunk__any_kind__leaves_nothing(
    small_chunks: None, kind: str, where: str
) -> None:
    change, error = _BAD_JOBS[kind]
    jobs = _jobs("bad")
    jobs[14] = {**jobs[14], **change}
    with override_settings(JOBQUEUE={"MAX_PAYLOAD_BYTES": 65_536}):
        if where == "alone":
            with pytest.raises(error) as info:
                enqueue_many(jobs)
        else:
            hooks: list[str] = []
            with transaction.atomic():
                transaction.on_commit(lambda: hooks.append("outer"))
                enqueue_many([{"queue": "keep", "job_type": JOB_TYPE}])
                with pytest.raises(error) as info, transaction.atomic():
                    transaction.on_commit(lambda: hooks.append("inner"))
                    enqueue_many(jobs)
            assert hooks == ["outer"]
            assert Job.objects.filter(queue="keep").count() == 1
            Job.objects.filter(queue="keep").delete()
    if isinstance(info.value, InvalidPayload | UnknownJobType | InvalidOption):
        assert info.value.index == 14  # type: ignore[attr-defined]
    _assert_clean()


def test_caller_set_rollback_after_a_streamed_batch(small_chunks: None) -> None:
    with transaction.atomic():
        enqueue_many(_jobs("x"))
        with transaction.atomic():
            enqueue_many(_jobs("y"))
            transaction.set_rollback(True)
        assert Job.objects.filter(queue="x").count() == 19
        assert Job.objects.filter(queue="y").count() == 0
    assert Job.objects.count() == 19


@postgres
def test_a_chunk_the_server_refuses__integrity_error_and_nothing_written(
    small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A jid taken already (a unique index) in the third chunk."""
    taken = enqueue_many([{"queue": "held", "job_type": JOB_TYPE}])[0].jid
    real = rawinsert.new_jids
    calls = []

    def jids(count: int) -> list[str]:
        calls.append(count)
        out = real(count)
        if len(calls) == 3:
            out[1] = taken
        return out

    monkeypatch.setattr(bulk, "new_jids", jids)
    with pytest.raises(IntegrityError):
        enqueue_many(_jobs("dup"))
    monkeypatch.setattr(bulk, "new_jids", real)
    Job.objects.filter(queue="held").delete()
    _assert_clean()


@postgres
def test_a_lock_timeout_on_a_chunk__operational_error_and_nothing_written(
    small_chunks: None,
) -> None:
    import psycopg

    table = Job._meta.db_table
    with psycopg.connect(direct_postgres_url()) as other:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        other.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
        try:
            with pytest.raises(OperationalError):
                enqueue_many(_jobs("locked"))
        finally:
            other.rollback()
    with connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = 0")
    _assert_clean()


@postgres
def test_the_session_killed_mid_batch__a_clean_error_then_a_new_connection(
    small_chunks: None,
) -> None:
    import psycopg

    if through_pgbouncer():
        pytest.skip("the server session behind the pooler is not this connection's")
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    seen = []

    def kill_on_third(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "INSERT" in sql:
            seen.append(1)
            if len(seen) == 3:
                with psycopg.connect(direct_postgres_url(), autocommit=True) as other:
                    other.execute("SELECT pg_terminate_backend(%s)", [pid])
                    for _ in range(100):
                        alive = other.execute(
                            "SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]
                        ).fetchone()
                        if not alive:
                            break
                        time.sleep(0.02)
        return execute(sql, params, many, context)

    with pytest.raises(DjangoError) as info, connection.execute_wrapper(kill_on_third):
        enqueue_many(_jobs("killed"))
    assert not isinstance(info.value, psycopg.Error)
    assert not connection.in_atomic_block
    # Django's end of request closes an unusable connection; the next query reconnects.
    connection.close_if_unusable_or_obsolete()
    _assert_clean()


@postgres
@pytest.mark.parametrize("where", ["alone", "in a caller's transaction"])
@pytest.mark.parametrize("count", [19, 3], ids=["streamed", "unstreamed"])
def test_a_prepared_insert_lost_from_the_session__the_batch_still_goes_in(
    small_chunks: None, where: str, count: int
) -> None:
    """A prepared insert lost behind psycopg's back (a pooler's reset, a raw DEALLOCATE
    ALL): the batch goes in, as a lone ``enqueue_job`` does, streamed or not."""
    if not prepared.prepares(connection):
        pytest.skip("prepared statements are off on this alias")
    connection.close()
    try:
        enqueue_many(_jobs("warm", count))  # prepares the chunk's insert
        enqueue_many(_jobs("warm", count))
        connection.connection.pgconn.exec_(b"DEALLOCATE ALL")
        if where == "alone":
            results = enqueue_many(_jobs("lost", count))
        elif count > bulk.STREAM_ROWS:
            with transaction.atomic():
                enqueue_many([{"queue": "keep", "job_type": JOB_TYPE}])
                results = enqueue_many(_jobs("lost", count))
        else:
            # Unstreamed, a statement lost inside the caller's transaction is not
            # repeated (core/prepared.py): the caller's rollback is the reset.
            with pytest.raises(DjangoError), transaction.atomic():
                enqueue_many(_jobs("keep", count))
            results = enqueue_many(_jobs("lost", count))
        stored = list(Job.objects.filter(queue="lost").order_by("pk").values_list("jid", "payload"))
        assert stored == [(r.jid, {"i": i}) for i, r in enumerate(results)]
        assert connection.connection.pgconn.pipeline_status == 0
    finally:
        prepared._pooled.clear()
        connection.close()


@postgres
def test_a_prepared_insert_lost__as_the_first_statement_of_the_callers_atomic() -> None:
    """``enqueue_job`` first in ``transaction.atomic()``: psycopg's own BEGIN precedes
    it, and the repeat must not run in the transaction the lost statement aborted."""
    from django_jobqueue import enqueue_job

    if not prepared.prepares(connection):
        pytest.skip("prepared statements are off on this alias")
    connection.close()
    try:
        enqueue_job("warm", JOB_TYPE, 1)
        enqueue_job("warm", JOB_TYPE, 2)
        connection.connection.pgconn.exec_(b"DEALLOCATE ALL")
        with transaction.atomic():
            enqueue_job("lost", JOB_TYPE, 3)
            enqueue_job("lost", JOB_TYPE, 4)
        assert Job.objects.filter(queue="lost").count() == 2
    finally:
        prepared._pooled.clear()
        connection.close()


def test_debug_query_logging_and_capture(small_chunks: None) -> None:
    with override_settings(DEBUG=True):
        connection.queries_log.clear()
        with CaptureQueriesContext(connection) as captured:
            enqueue_many(_jobs("dbg"))
        inserts = sum("INSERT" in q["sql"] for q in captured.captured_queries)
        assert inserts == (5 if connection.vendor == "postgresql" else 1)
        assert len(connection.queries) >= inserts
    assert Job.objects.filter(queue="dbg").count() == 19


def test_inside_batch_or_wait_for_blocks__not_streamed(
    small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _streams(monkeypatch)
    with batch():
        enqueue_many(_jobs("b"))
    upstream = enqueue_many([{"queue": "up", "job_type": JOB_TYPE}])[0].jid
    with wait_for(upstream):
        enqueue_many(_jobs("w"))
    assert calls == []
    assert Job.objects.filter(queue__in=["b", "w"]).count() == 38


def test_aenqueue_many_streams_and_rolls_back(small_chunks: None) -> None:
    import asyncio

    jobs = _jobs("as")
    assert len(asyncio.run(aenqueue_many(jobs))) == 19
    jobs[17]["payload"] = float("nan")
    with pytest.raises(InvalidPayload):
        asyncio.run(aenqueue_many(jobs))
    assert Job.objects.filter(queue="as").count() == 19


@postgres
def test_two_threads_stream_while_workers_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "STREAM_ROWS", 50)
    errors: list[BaseException] = []
    claimed: list[int] = []
    done = threading.Event()

    def produce(n: int) -> None:
        try:
            for _ in range(4):
                enqueue_many([{"queue": "race", "job_type": JOB_TYPE, "payload": n}] * 333)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    def consume() -> None:
        try:
            while not done.is_set() or Job.objects.filter(queue="race", status="init").exists():
                got = storage.claim("default", owner="w", queues=["race"], limit=100)
                claimed.extend(j.pk for j in got)
                if not got:
                    time.sleep(0.005)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    consumers = [threading.Thread(target=consume) for _ in range(2)]
    producers = [threading.Thread(target=produce, args=(n,)) for n in range(2)]
    for t in consumers + producers:
        t.start()
    for t in producers:
        t.join()
    done.set()
    for t in consumers:
        t.join()
    assert not errors, [repr(e) for e in errors[:3]]
    assert len(claimed) == len(set(claimed)) == 2 * 4 * 333


@postgres
@pytest.mark.pgbouncer
def test_through_pgbouncer_without_prepare_threshold__streamed_batches_from_threads(
    small_chunks: None,
) -> None:
    """A project behind PgBouncer that forgot ``prepare_threshold: None``: its
    streamed batches, whose prepared inserts land on other server sessions, all go in."""
    if not through_pgbouncer():
        pytest.skip("needs the pgbouncer leg")
    options = connection.settings_dict["OPTIONS"]
    saved = options.pop("prepare_threshold", "absent")

    def work(n: int) -> None:
        for _ in range(10):
            enqueue_many(_jobs(f"pb{n}"))

    try:
        errors = race_threads(4, work).errors
    finally:
        if saved != "absent":
            options["prepare_threshold"] = saved
        prepared._pooled.clear()
        _forget_pooled_statements()  # they keep the statements prepared here: a later
        # test's client would find another's statement under its own name
    assert not errors, [repr(e) for e in errors[:5]]
    assert Job.objects.filter(queue__startswith="pb").count() == 4 * 10 * 19


def _forget_pooled_statements() -> None:
    """Forget every statement prepared on PgBouncer's server sessions: one client per
    server session of the pool (scripts/start-pgbouncer's default_pool_size, 32),
    each holding a transaction, so that each lands on a session of its own."""
    import psycopg

    from tests.conftest import database_url

    connections.close_all()
    clients = [psycopg.connect(database_url()) for _ in range(32)]
    try:
        for client in clients:
            client.execute("DEALLOCATE ALL")
    finally:
        for client in clients:
            client.commit()
            client.close()

"""Prepared statements under schema changes, DISCARD ALL and odd payloads (PostgreSQL).

A worker's session keeps its prepared claim and insert for its whole life; a
deploy's migration that changes a returned column's type on another session, or a
``DISCARD ALL`` run through the session, must not leave it failing every claim.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from django_jobqueue import enqueue_job, enqueue_many, storage
from django_jobqueue.core import prepared
from django_jobqueue.ids import Queue
from django_jobqueue.models import Job
from tests.no_duplicate_helpers import JOB_TYPE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql")]


@pytest.fixture(autouse=True)
def _forget_pooled() -> Iterator[None]:
    yield
    prepared._pooled.clear()
    connection.close()


def _other_session() -> Any:
    import psycopg  # PostgreSQL legs only

    s = connection.settings_dict
    return psycopg.connect(
        host=s["HOST"], port=s["PORT"] or 5432, user=s["USER"], dbname=s["NAME"],
        password=s["PASSWORD"] or None, autocommit=True,
    )  # fmt: skip


def _alter_lease_owner(length: int) -> None:
    table = Job._meta.db_table
    with _other_session() as other:
        other.execute(f'ALTER TABLE "{table}" ALTER COLUMN lease_owner TYPE varchar({length})')


def test_claim__survives_a_returned_columns_type_change_on_another_session() -> None:
    connection.close()
    enqueue_job("adv", JOB_TYPE, {"n": 1})
    assert storage.claim("default", owner="w", queues=["adv"], limit=1)
    _alter_lease_owner(300)
    try:
        enqueue_job("adv", JOB_TYPE, {"n": 2})
        claimed = storage.claim("default", owner="w", queues=["adv"], limit=1)
        assert [j.payload for j in claimed] == [{"n": 2}]
    finally:
        connection.close()
        _alter_lease_owner(200)


def test_held_insert__survives_a_returned_columns_type_change_on_another_session() -> None:
    connection.close()
    Queue("adv", job_type=JOB_TYPE).add({"n": 1}, id="a")
    table = Job._meta.db_table
    with _other_session() as other:
        other.execute(f'ALTER TABLE "{table}" ALTER COLUMN status TYPE varchar(20)')
    try:
        Queue("adv", job_type=JOB_TYPE).add({"n": 2}, id="b")
        assert Job.objects.filter(queue="adv").count() == 2
    finally:
        connection.close()
        with _other_session() as other:
            other.execute(f'ALTER TABLE "{table}" ALTER COLUMN status TYPE varchar(16)')


def test_claim_and_enqueue__survive_discard_all_on_the_session() -> None:
    connection.close()
    enqueue_job("adv", JOB_TYPE, {"n": 1})
    Queue("adv", job_type=JOB_TYPE).add({"n": 1}, id="x")
    assert storage.claim("default", owner="w", queues=["adv"], limit=1)
    with connection.cursor() as cursor:
        cursor.execute("DISCARD ALL")
    enqueue_job("adv", JOB_TYPE, {"n": 2})
    Queue("adv", job_type=JOB_TYPE).add({"n": 2}, id="y")
    assert len(storage.claim("default", owner="w", queues=["adv"], limit=5)) == 3


def _enqueue_and_claim_survive(
    break_session: Callable[[], None], caplog: pytest.LogCaptureFixture
) -> None:
    """Enqueue and claim once (both statements prepared), ``break_session()`` behind
    psycopg's back, then enqueue and claim again: both run (unprepared), and the alias
    is taken for a pooler's, with the warning that says so."""
    connection.close()
    enqueue_job("adv", JOB_TYPE, {"n": 1})
    assert storage.claim("default", owner="w", queues=["adv"], limit=1)
    break_session()
    enqueue_job("adv", JOB_TYPE, {"n": 2})
    claimed = storage.claim("default", owner="w", queues=["adv"], limit=5)
    assert [j.payload for j in claimed] == [{"n": 2}]
    assert not prepared.prepares(connection)  # taken for a pooler: prepares no more
    assert "prepare_threshold None" in caplog.text
    assert Job.objects.filter(queue="adv").count() == 2


def test_claim_and_enqueue__survive_discard_all_from_outside_the_driver(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A pooler's server_reset_query, or a raw libpq call: psycopg never sees it.
    _enqueue_and_claim_survive(
        lambda: connection.connection.pgconn.exec_(b"DEALLOCATE ALL"), caplog
    )


def _prepared_names() -> list[str]:
    """The names of the statements psycopg prepared on the Django connection."""
    names = connection.connection.pgconn.exec_(b"SELECT name FROM pg_prepared_statements")
    return [names.get_value(row, 0).decode() for row in range(names.ntuples)]


def _swap_statements(count: int) -> None:
    """Behind psycopg's back, give each statement it prepared on the session another
    statement of ``count`` parameters under the same name, as a transaction pooler
    does when it lends this client a server session where another client prepared
    its own statements first."""
    raw = connection.connection.pgconn
    params = ", ".join(["int"] * count)
    values = ", ".join(f"${n}" for n in range(1, count + 1))
    for name in _prepared_names():
        raw.exec_(f'DEALLOCATE "{name}"'.encode())
        raw.exec_(f'PREPARE "{name}" ({params}) AS SELECT {values}'.encode())


def test_claim_and_enqueue__survive_a_name_taken_by_another_statement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # PostgreSQL refuses the bind (08P01: "bind message supplies 12 parameters, but
    # prepared statement ... requires 1"): the statement never ran, so it runs once
    # more, unprepared, and the alias prepares no more.
    def swap() -> None:
        assert _prepared_names()
        _swap_statements(1)

    _enqueue_and_claim_survive(swap, caplog)


def test_name_taken_by_another_statement__inside_a_transaction_rolls_it_back() -> None:
    # Inside the caller's transaction the failed bind aborted it: the error reaches
    # the caller, nothing of the transaction is kept, and the next one runs unprepared.
    connection.close()
    enqueue_job("adv", JOB_TYPE, {"n": 1})
    _swap_statements(1)
    with pytest.raises(OperationalError), transaction.atomic():
        Job.objects.filter(queue="adv").update(priority=7)  # not the job's first statement
        enqueue_job("adv", JOB_TYPE, {"n": 2})
    assert list(Job.objects.filter(queue="adv").values_list("priority", flat=True)) != [7]
    assert not prepared.prepares(connection)
    enqueue_job("adv", JOB_TYPE, {"n": 3})
    payloads = Job.objects.filter(queue="adv").values_list("payload", flat=True)
    assert sorted(p["n"] for p in payloads) == [1, 3]


def test_other_protocol_violations__are_not_taken_for_a_pooler() -> None:
    from psycopg import errors

    assert not prepared.statement_lost(errors.ProtocolViolation("invalid message format"))
    assert not prepared.statement_lost(errors.FeatureNotSupported("some other feature"))
    assert prepared.statement_lost(
        errors.ProtocolViolation(
            'bind message supplies 12 parameters, but prepared statement "_pg3_0" requires 23'
        )
    )


def test_enqueue_in_rolled_back_atomic__then_again() -> None:
    connection.close()
    for _ in range(2):
        try:
            with transaction.atomic():
                enqueue_job("adv", JOB_TYPE, {"n": 1})
                Queue("adv", job_type=JOB_TYPE).add({"n": 1}, id="r")
                raise RuntimeError
        except RuntimeError:
            pass
    enqueue_job("adv", JOB_TYPE, {"n": 2})
    Queue("adv", job_type=JOB_TYPE).add({"n": 2}, id="r")
    assert Job.objects.filter(queue="adv").count() == 2


def test_odd_payloads__round_trip_through_the_prepared_insert_and_claim() -> None:
    connection.close()
    odd = [
        {"deep": [[[[{"a": [1, {"b": None}]}]]]]},
        {"uni": "żółw 🐢 \u2028 \ufeff", "key \u00e9": "\\u0000 literal"},
        {"big": 2**70, "neg": -(2**63), "f": 1.5},
        [],
        "plain string",
        12345678901234567890,
    ]
    for n, payload in enumerate(odd):
        enqueue_job("adv", JOB_TYPE, payload, priority=n + 1)
    claimed = storage.claim("default", owner="w", queues=["adv"], limit=len(odd))
    assert [j.payload for j in claimed] == odd


def test_more_statement_shapes_than_psycopgs_prepared_max() -> None:
    connection.close()
    total = 0
    for n in range(1, 130):  # n rows, or a queue's notify, make a statement text of their own
        enqueue_many([{"queue": "adv", "job_type": JOB_TYPE, "payload": i} for i in range(n)])
        enqueue_job(f"adv{n}", JOB_TYPE, {"n": n}, at=timezone.now())  # its own text too
        total += n + 1
    assert Job.objects.filter(queue__startswith="adv").count() >= total
    for n in range(1, 130):
        assert storage.claim("default", owner="w", queues=[f"adv{n}"], limit=1)


@pytest.mark.pgbouncer
def test_through_pgbouncer_without_prepare_threshold__enqueue_and_claim_from_threads() -> None:
    """What a project that forgot ``prepare_threshold: None`` behind PgBouncer gets."""
    from django.db import connections

    from tests.conftest import through_pgbouncer

    if not through_pgbouncer():
        pytest.skip("needs the pgbouncer leg")
    options = connection.settings_dict["OPTIONS"]
    saved = options.pop("prepare_threshold", "absent")
    errors: list[BaseException] = []
    claimed: list[int] = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                enqueue_job("advpb", JOB_TYPE, {"n": n, "i": i})
                Queue("advpb", job_type=JOB_TYPE).add({"n": n}, id=f"{n}-{i}")
                claimed.extend(
                    j.pk for j in storage.claim("default", owner="w", queues=["advpb"], limit=2)
                )
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
        finally:
            connections.close_all()

    import threading

    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        if saved != "absent":
            options["prepare_threshold"] = saved
        connection.close()
    assert not errors, [repr(e) for e in errors[:5]]
    assert not prepared.prepares(connection)
    assert len(claimed) == len(set(claimed))
    assert Job.objects.filter(queue="advpb").count() == 240


@pytest.mark.parametrize(
    "use_tz, zone", [(True, "America/New_York"), (False, "Asia/Kathmandu"), (False, "UTC")]
)
def test_claimed_times__match_the_orm_under_any_time_zone_setting(use_tz, zone) -> None:
    from django.test import override_settings

    connection.close()
    with override_settings(USE_TZ=use_tz, TIME_ZONE=zone):
        connection.close()
        enqueue_job("adv", JOB_TYPE, {"n": 1})
        (job,) = storage.claim("default", owner="w", queues=["adv"], limit=1)
        stored = Job.objects.get(pk=job.pk)
        for name in ("started_at", "lease_expires_at", "run_at", "created_at", "heartbeat_at"):
            got, want = getattr(job, name), getattr(stored, name)
            assert (got, got.tzinfo is None) == (want, want.tzinfo is None), name
        connection.close()


def test_prepared_statements__pass_execute_wrappers_and_show_in_captured_queries() -> None:
    from django.test.utils import CaptureQueriesContext

    connection.close()
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):  # noqa: ANN001, ANN202 - Django's shape
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper), CaptureQueriesContext(connection) as queries:
        enqueue_job("adv", JOB_TYPE, {"n": 1})
        Queue("adv", job_type=JOB_TYPE).add({"n": 2}, id="w")
        assert len(storage.claim("default", owner="w", queues=["adv"], limit=5)) == 2
    captured = [q["sql"] for q in queries.captured_queries]
    for text in ("WITH j AS (INSERT", "pg_try_advisory_xact_lock", "SKIP LOCKED"):
        assert any(text in sql for sql in seen), text
        assert any(text in sql for sql in captured), text


@pytest.mark.parametrize(
    "limit",
    [{"concurrency": 100}, {"concurrency": 1, "partition": "payload.n"}],
    ids=["global", "keyed"],
)
def test_limited_claim__survives_a_returned_columns_type_change_on_another_session(
    limit: dict[str, Any],
) -> None:
    # The limited claim's prepared statements run inside its pipelined transaction,
    # where the cursor cannot repeat one: the claim runs once more (docs/limits.md).
    from django_jobqueue.models import LimitOverride
    from django_jobqueue.store import limits

    connection.close()
    limits.set_limit("default", f"type:{JOB_TYPE}", limit, by="test")
    limits.clear_cache()
    try:
        enqueue_job("adv", JOB_TYPE, {"n": 1})
        assert storage.claim("default", owner="w", queues=["adv"], limit=1)
        _alter_lease_owner(300)
        enqueue_job("adv", JOB_TYPE, {"n": 2})
        claimed = storage.claim("default", owner="w", queues=["adv"], limit=1)
        assert [j.payload for j in claimed] == [{"n": 2}]
    finally:
        connection.close()
        _alter_lease_owner(200)
        LimitOverride.objects.all().delete()
        limits.clear_cache()

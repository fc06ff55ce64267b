"""enqueue_many's streamed batches (django_jobqueue/bulk.py ``create_streamed``).

A list of more than ``STREAM_ROWS`` jobs without links, ids or unique keys is
validated and inserted a chunk at a time; on PostgreSQL the inserts go in one
pipeline. It must answer and store what the unstreamed path does, write nothing when
a later job is invalid or the caller rolls back, wake each queue once on commit, and
hand a batch that needs the creation locks to ``create_many`` whole. Most tests set
``STREAM_ROWS`` to 4 so that a batch of 19 is five chunks.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_jobqueue import JobHandle, bulk, enqueue_many
from django_jobqueue.core.exceptions import InvalidPayload
from django_jobqueue.enqueue import build_job
from django_jobqueue.models import Job
from django_jobqueue.store import wakeups
from django_jobqueue.store.registry import get_job_description
from tests.conftest import through_pgbouncer
from tests.no_duplicate_helpers import JOB_TYPE
from tests.wakeup_helpers import wakeup_listener

pytestmark = pytest.mark.django_db(transaction=True)

postgres = pytest.mark.vendor("postgresql")

#: Columns that differ between two enqueues of the same jobs by their nature.
_OWN = {"id", "jid", "created_at", "updated_at", "run_at", "expires_at", "unique_expires_at"}


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of more than 4 jobs stream, 4 jobs a statement."""
    monkeypatch.setattr(bulk, "STREAM_ROWS", 4)


def _jobs(queue: str, count: int = 19) -> list[dict[str, Any]]:
    """Plain jobs of two queues (``queue`` and ``queue + "-2"``), varied payloads."""
    payloads: list[Any] = [{"n": 1}, None, "tab\there", [1, 2.5], {"é": "ü"}, 7]
    return [
        {
            "queue": queue if i % 3 else f"{queue}-2",
            "job_type": JOB_TYPE,
            "payload": payloads[i % len(payloads)] if i % 5 else i,
        }
        for i in range(count)
    ]


def _rows(*queues: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in row.items() if k not in _OWN}
        for row in Job.objects.filter(queue__in=queues).order_by("pk").values()
    ]


def test_a_streamed_batch_stores_and_answers_what_the_unstreamed_one_does(
    small_chunks: None,
) -> None:
    jobs = _jobs("s")
    streamed = enqueue_many(jobs)
    unstreamed = enqueue_many(iter(_jobs("u")))  # an iterator never streams
    assert [r.status for r in streamed] == ["enqueued"] * len(jobs)
    stored = list(Job.objects.filter(queue__in=["s", "s-2"]).order_by("pk").values_list("jid"))
    assert stored == [(r.jid,) for r in streamed]
    assert len({r.jid for r in streamed}) == len(jobs)

    def renamed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**row, "queue": row["queue"].replace("u", "s", 1)} for row in rows]

    assert _rows("s", "s-2") == renamed(_rows("u", "u-2"))
    assert len(unstreamed) == len(jobs)


@postgres
def test_on_postgresql_the_chunks_go_in_one_pipeline(small_chunks: None) -> None:
    states: list[Any] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.lstrip().upper().startswith(("INSERT", "WITH")):
            states.append(connection.connection.pgconn.pipeline_status)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record), CaptureQueriesContext(connection) as queries:
        enqueue_many(_jobs("p"))
    assert states == [psycopg.pq.PipelineStatus.ON] * 5  # 19 jobs, 4 a statement
    assert sum("django_jobqueue_job" in q["sql"] for q in queries.captured_queries) == 5
    assert connection.connection.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert Job.objects.filter(queue__in=["p", "p-2"]).count() == 19


def test_an_invalid_job_in_a_later_chunk__nothing_is_written_and_the_error_names_it(
    small_chunks: None,
) -> None:
    jobs = _jobs("bad")
    jobs[13]["payload"] = {"x": float("nan")}
    with pytest.raises(InvalidPayload) as info:
        enqueue_many(jobs)
    assert info.value.index == 13  # type: ignore[attr-defined]
    assert str(info.value).startswith("jobs[13]: ")
    assert Job.objects.count() == 0
    # The connection is whole: the next batch goes in.
    assert len(enqueue_many(_jobs("after"))) == 19
    assert Job.objects.count() == 19


def test_inside_a_callers_transaction__the_batch_rolls_back_with_it(small_chunks: None) -> None:
    with transaction.atomic():
        enqueue_many([{"queue": "keep", "job_type": JOB_TYPE}])
        with pytest.raises(InvalidPayload), transaction.atomic():
            jobs = _jobs("inner")
            jobs[-1]["payload"] = float("inf")
            enqueue_many(jobs)
        enqueue_many(_jobs("later"))
    assert Job.objects.filter(queue="keep").count() == 1
    assert Job.objects.filter(queue__startswith="inner").count() == 0
    assert Job.objects.filter(queue__startswith="later").count() == 19


@postgres
def test_each_queue_is_woken_once_and_only_on_commit(small_chunks: None) -> None:
    with wakeup_listener() as received:
        wakeups.local_event.clear()
        with transaction.atomic():
            enqueue_many(_jobs("rb"))
            transaction.set_rollback(True)
        assert Job.objects.count() == 0
        assert received() == []
        assert not wakeups.local_event.is_set()
        with transaction.atomic():
            enqueue_many(
                [{"queue": "a", "job_type": JOB_TYPE}] * 7
                + [{"queue": "later", "job_type": JOB_TYPE, "delay": "1h"}] * 6
                + [{"queue": "b", "job_type": JOB_TYPE}] * 5
                + [{"queue": "a", "job_type": JOB_TYPE}] * 3
            )
            assert not wakeups.local_event.is_set()  # on commit only
        assert wakeups.local_event.is_set()
        assert sorted(received()) == ["a", "b"]  # one each, none for the delayed queue


def test_a_job_that_needs_the_locks_sends_the_whole_batch_through_them(
    small_chunks: None,
) -> None:
    """``create_streamed`` given a job with a unique key in its third chunk: what it
    sent is rolled back and ``create_many`` answers the batch (the held key
    deduplicated, every other job enqueued once)."""
    holder = enqueue_many([{"queue": "k", "job_type": JOB_TYPE, "unique_key": "key"}])[0].jid
    specs = [build_job("k", JOB_TYPE, i) for i in range(9)]
    specs.insert(10, build_job("k", JOB_TYPE, "dup", unique_key="key"))
    specs += [build_job("k", JOB_TYPE, i) for i in range(9, 14)]
    results = bulk.create_streamed(iter(specs))
    assert [r.status for r in results].count("deduplicated") == 1
    assert results[9] == {"status": "deduplicated", "jid": holder}
    payloads = list(Job.objects.filter(queue="k").order_by("pk").values_list("payload", flat=True))
    assert payloads == [None, *range(14)]
    stored = set(Job.objects.filter(queue="k").values_list("jid", flat=True))
    assert stored == {holder} | {r.jid for r in results if r.status == "enqueued"}


def test_a_handles_batch_past_the_default_chunk_streams_in_order() -> None:
    handle = JobHandle(get_job_description(JOB_TYPE))
    count = 2 * bulk.STREAM_ROWS + 7
    results = handle.enqueue_many([{"i": i} for i in range(count)])
    stored = list(Job.objects.order_by("pk").values_list("jid", "payload"))
    assert stored == [(r.jid, {"i": i}) for i, r in enumerate(results)]


@postgres
@pytest.mark.pgbouncer
def test_a_streamed_batch_through_pgbouncer_in_transaction_pooling(small_chunks: None) -> None:
    if not through_pgbouncer():
        pytest.skip("needs PgBouncer (scripts/test's pgbouncer leg)")
    for _ in range(5):
        enqueue_many(_jobs("pgb"))
        enqueue_many([{"queue": "pgb", "job_type": JOB_TYPE}] * 2)
    assert Job.objects.filter(queue__in=["pgb", "pgb-2"]).count() == 5 * 21

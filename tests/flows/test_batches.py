"""Batches (docs/workflows.md "Batches"): counts, callbacks made once, open batches,
and a batch inside the caller's transaction."""

from __future__ import annotations

import pytest
from django.db import transaction

import django_jobqueue as jq
from django_jobqueue.core.exceptions import InvalidRequest, UnknownJobType
from django_jobqueue.models import Batch, Job, JobStatus
from tests.testapp.models import RunRecord
from tests.workers_helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)


def callbacks() -> dict[str, object]:
    return {
        "on_finish": jq.signature("flows.callback", {"kind": "finish"}),
        "on_success": jq.signature("flows.callback", {"kind": "success"}),
        "on_failure": jq.signature("flows.callback", {"kind": "failure"}),
    }


def labels() -> list[str]:
    return sorted(RunRecord.objects.values_list("label", flat=True))


def test_a_batch_of_done_jobs_makes_on_finish_and_on_success_once() -> None:
    with jq.batch(**callbacks()) as b:
        jq.enqueue_job(None, "flows.step", {"label": "a"})
        jq.enqueue_many([{"job_type": "flows.step", "payload": {"label": "b"}}] * 3)
        assert isinstance(b.id, int)
    row = jq.get_batch(b.id)
    assert row is not None
    assert row.counts() == {"total": 4, "done": 0, "failed": 0, "cancelled": 0, "pending": 4}
    assert row.sealed and row.finished_at is None

    drain()

    row = jq.get_batch(b.id)
    assert row.counts() == {"total": 4, "done": 4, "failed": 0, "cancelled": 0, "pending": 0}
    assert row.finished_at is not None
    assert row.finish_jid and row.success_jid and not row.failure_jid
    assert labels() == ["a", "b", "b", "b", "callback:finish", "callback:success"]
    finish = Job.objects.get(jid=row.finish_jid)
    assert finish.status == JobStatus.DONE
    assert finish.batch_id is None  # a callback is no job of its batch
    assert finish.payload == {
        "batch": b.id,
        "counts": {"total": 4, "done": 4, "failed": 0, "cancelled": 0, "pending": 0},
        "payload": {"kind": "finish"},
    }


def test_a_dead_letter_makes_on_failure_at_once_and_no_on_success() -> None:
    with jq.batch(**callbacks()) as b:
        jq.enqueue_job(None, "flows.step", {"label": "bad", "fail": True})
        jq.enqueue_job(None, "flows.step", {"label": "good"})
    drain()
    row = jq.get_batch(b.id)
    assert row.counts()["failed"] == 1 and row.counts()["done"] == 1
    assert row.failure_jid and row.finish_jid and not row.success_jid
    assert labels() == ["bad", "callback:failure", "callback:finish", "good"]


def test_a_job_of_the_batch_adds_jobs_to_it_and_the_batch_waits_for_them() -> None:
    with jq.batch(on_finish=jq.signature("flows.callback", {"kind": "finish"})) as b:
        jq.enqueue_job(None, "flows.fan_out", {"n": 5})
    drain()
    row = jq.get_batch(b.id)
    assert row.counts() == {"total": 6, "done": 6, "failed": 0, "cancelled": 0, "pending": 0}
    callback = Job.objects.get(jid=row.finish_jid)
    assert callback.payload["counts"]["total"] == 6
    assert labels() == ["callback:finish", "fan_out"]


def test_a_batch_in_a_rolled_back_atomic_leaves_nothing() -> None:
    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        with jq.batch(on_finish="flows.callback") as b:
            jq.enqueue_many([{"job_type": "flows.noop"}] * 10)
        assert Batch.objects.filter(pk=b.id).exists()
        raise Abort
    assert not Batch.objects.exists()
    assert not Job.objects.exists()


def test_a_batch_commits_with_the_callers_transaction() -> None:
    with transaction.atomic():
        with jq.batch(on_finish="flows.callback") as b:
            jq.enqueue_job(None, "flows.noop")
        jq.enqueue_job(None, "flows.noop")  # after the block: no job of the batch
    assert Job.objects.filter(batch_id=b.id).count() == 1
    assert jq.get_batch(b.id).total == 1


def test_an_error_inside_the_block_rolls_the_batch_back() -> None:
    with pytest.raises(ZeroDivisionError), jq.batch() as b:
        jq.enqueue_job(None, "flows.noop")
        1 / 0  # noqa: B018
    assert jq.get_batch(b.id) is None
    assert not Job.objects.exists()


def test_an_empty_batch_finishes_when_its_block_ends() -> None:
    with jq.batch(on_finish="flows.callback", on_success="flows.callback") as b:
        pass
    row = jq.get_batch(b.id)
    assert row.finished_at is not None and row.finish_jid and row.success_jid


def test_a_callback_of_no_job_type_is_refused_before_any_write() -> None:
    with pytest.raises(UnknownJobType), jq.batch(on_finish="no.such.type"):
        pass
    assert not Batch.objects.exists()


def test_get_batch_of_a_bad_id_is_a_typed_error() -> None:
    with pytest.raises(InvalidRequest):
        jq.get_batch("12")  # type: ignore[arg-type]
    assert jq.get_batch(10**9) is None


def test_enqueue_into_a_batch_that_does_not_exist_writes_nothing() -> None:
    with pytest.raises(InvalidRequest):
        jq.enqueue_job(None, "flows.noop", batch=10**9)
    assert not Job.objects.exists()


def test_an_operator_cancel_of_a_batch_job_counts_it_and_finishes_the_batch() -> None:
    from django_jobqueue.maintenance import cancel_jobs

    with jq.batch(on_finish="flows.callback", on_success="flows.callback") as b:
        jq.enqueue_job(None, "flows.noop", delay="1h")
    cancel_jobs(Job.objects.filter(batch_id=b.id))
    row = jq.get_batch(b.id)
    assert row.counts()["cancelled"] == 1 and row.finished_at is not None
    assert row.finish_jid and not row.success_jid


def test_a_finished_batch_takes_no_more_jobs() -> None:
    with jq.batch(on_finish="flows.callback") as b:
        jq.enqueue_job(None, "flows.noop")
    drain()
    count = Job.objects.count()
    with pytest.raises(InvalidRequest, match="has finished"):
        jq.enqueue_job(None, "flows.noop", batch=b.id)
    assert Job.objects.count() == count


def test_an_open_batch_takes_jobs_over_several_transactions_until_sealed() -> None:
    from django_jobqueue.flows.batches import open_batch

    handle = open_batch(on_finish=jq.signature("flows.callback", {"kind": "finish"}))
    jq.enqueue_job(None, "flows.noop", batch=handle.id)
    drain()
    row = jq.get_batch(handle.id)
    assert (row.done, row.finished_at, row.finish_jid) == (1, None, "")  # not sealed yet
    jq.enqueue_many([{"job_type": "flows.noop", "batch": handle.id}] * 2)
    drain()
    handle.seal()
    row = jq.get_batch(handle.id)
    assert row.counts()["done"] == 3 and row.finished_at is not None and row.finish_jid
    handle.seal()
    assert Job.objects.filter(job_type="flows.callback").count() == 1

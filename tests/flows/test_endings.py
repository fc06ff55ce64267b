"""Every terminal write of a batch's job ends it in the batch (docs/workflows.md
"Guarantees"): the reaper's dead letter, an expiry, a worker's cancel, a dead
letter by ``storage.fail``; and a plain job's end costs no more statements."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import django_jobqueue as jq
from django_jobqueue import reaping, storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.worker.executor import expire_if_due

pytestmark = pytest.mark.django_db(transaction=True)


def one_job_batch(**options: object) -> int:
    with jq.batch(on_finish="flows.callback", on_failure="flows.callback") as b:
        jq.enqueue_job(None, "flows.noop", **options)
    return int(b.id)


def test_the_reapers_dead_letter_counts_failed_and_makes_on_failure() -> None:
    batch_id = one_job_batch()
    (job,) = storage.claim("default", owner="gone")  # started: the attempt is spent
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    assert reaping.reap_expired("default") == 1
    assert Job.objects.get(pk=job.pk).status == JobStatus.MAX_RETRY
    row = jq.get_batch(batch_id)
    assert (row.failed, row.pending) == (1, 0)
    assert row.failure_jid and row.finish_jid


def test_an_expired_job_counts_failed() -> None:
    batch_id = one_job_batch(expires_ms=1)
    Job.objects.update(run_at=timezone.now(), expires_at=timezone.now() - timedelta(seconds=1))
    (job,) = storage.claim("default", owner="w")
    assert expire_if_due(job) == JobStatus.ERROR
    assert jq.get_batch(batch_id).failed == 1


def test_a_worker_cancel_counts_cancelled() -> None:
    batch_id = one_job_batch()
    (job,) = storage.claim("default", owner="w")
    assert storage.finish_cancelled(job)
    row = jq.get_batch(batch_id)
    assert (row.cancelled, row.finished_at is not None, row.failure_jid) == (1, True, "")


def test_a_plain_jobs_done_costs_one_statement_as_before() -> None:
    jq.enqueue_job(None, "flows.noop")
    (job,) = storage.claim("default", owner="w")
    with CaptureQueriesContext(connection) as queries:
        assert storage.complete(job, None)
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(writes) == 1, writes
    assert "awaited" in writes[0]
    assert not any(
        "batch" in q["sql"] or "dependency" in q["sql"] for q in queries.captured_queries
    )


def test_the_batch_and_workflow_indexes_exist_and_are_partial_where_they_can_be() -> None:
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, Job._meta.db_table)
    for name in ("jq_job_batch_idx", "jq_job_workflow_idx"):
        assert name in found and found[name]["index"]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = %s", ["jq_job_batch_idx"]
            )
            assert cursor.fetchone()[0].endswith("WHERE (batch_id IS NOT NULL)")


@pytest.mark.vendor("postgresql", "mysql")
def test_a_dependent_enqueued_while_its_upstream_ends_is_never_left_blocked() -> None:
    import threading

    from django.db import connections

    for _round in range(25):
        upstream = jq.enqueue_job("race", "flows.noop")
        (job,) = storage.claim("default", owner="w", queues=["race"])
        start = threading.Barrier(2)
        made: list[str] = []

        def end(job: Job = job, start: threading.Barrier = start) -> None:
            try:
                start.wait()
                storage.complete(job, None)
            finally:
                connections.close_all()

        def enqueue(
            upstream: str = upstream.jid, start: threading.Barrier = start, made: list[str] = made
        ) -> None:
            try:
                start.wait()
                made.append(jq.enqueue_job("race", "flows.noop", after=[upstream]).jid)
            finally:
                connections.close_all()

        threads = [threading.Thread(target=end), threading.Thread(target=enqueue)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert Job.objects.get(jid=upstream.jid).status == JobStatus.DONE
        assert Job.objects.get(jid=made[0]).status == JobStatus.INIT
        Job.objects.filter(queue="race").delete()


@pytest.mark.parametrize("batched", [False, True], ids=["complete", "complete_many"])
def test_a_batch_job_whose_dependent_came_while_it_ran_makes_that_dependent_due(
    batched: bool,
) -> None:
    with jq.batch():
        upstream = jq.enqueue_job(None, "flows.noop")
    (job,) = storage.claim("default", owner="w")
    assert not job.awaited  # the worker's copy, read before the dependent existed
    dependent = jq.enqueue_job(None, "flows.noop", after=[upstream.jid])
    assert Job.objects.get(jid=dependent.jid).status == JobStatus.BLOCKED
    if batched:
        assert storage.complete_many([(job, None)]) == [True]
    else:
        assert storage.complete(job, None)
    assert Job.objects.get(jid=dependent.jid).status == JobStatus.INIT

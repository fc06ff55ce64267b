"""The repair pass (docs/workflows.md "Repair"): what a restored backup or a row
changed by hand leaves stranded is made right exactly once, with a log line."""

from __future__ import annotations

import logging
import threading

import pytest
from django.db import connections

import django_jobqueue as jq
from django_jobqueue.flows.repair import repair
from django_jobqueue.models import Job, JobStatus
from tests.testapp.models import RunRecord
from tests.workers_helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)


def finish_callback() -> jq.Signature:
    return jq.signature("flows.callback", {"kind": "finish"}, queue="callbacks")


def test_a_callback_row_deleted_by_hand_is_made_again_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with jq.batch(on_finish=finish_callback()) as b:
        jq.enqueue_many([{"job_type": "flows.noop"}] * 3)
    drain(queues=["default"])
    lost = jq.get_batch(b.id).finish_jid
    assert Job.objects.filter(jid=lost).delete()[0] == 1

    with caplog.at_level(logging.WARNING, logger="django_jobqueue.flows.repair"):
        assert repair("default").callbacks == 1
    assert f"callback job {lost} is gone; made again" in caplog.text
    made = jq.get_batch(b.id).finish_jid
    assert made and made != lost
    assert not repair("default")  # nothing left to make right

    drain(queues=["callbacks"])
    assert list(RunRecord.objects.values_list("label", flat=True)) == ["callback:finish"]
    assert Job.objects.get(jid=made).payload["counts"]["done"] == 3


def test_a_batch_whose_jobs_ended_behind_its_back_finishes_once() -> None:
    with jq.batch(on_finish=finish_callback(), on_success=finish_callback()) as b:
        jq.enqueue_many([{"job_type": "flows.noop"}] * 4)
    # A restored backup, say: the jobs' rows say done, the batch's counts do not.
    Job.objects.filter(batch_id=b.id).update(status=JobStatus.DONE, waiting=False)
    report = repair("default")
    assert report.finished == 1
    row = jq.get_batch(b.id)
    assert row.counts()["done"] == 4 and row.finished_at is not None
    assert row.finish_jid and row.success_jid
    assert not repair("default")


def test_an_edge_left_waiting_for_an_ended_job_is_settled() -> None:
    upstream = jq.enqueue_job(None, "flows.step", {"label": "up"})
    dependent = jq.enqueue_job(None, "flows.step", {"label": "down"}, after=[upstream])
    Job.objects.filter(jid=upstream.jid).update(status=JobStatus.DONE, waiting=False)
    assert repair("default").edges == 1
    assert Job.objects.get(jid=dependent.jid).status == JobStatus.INIT
    assert not repair("default")


@pytest.mark.vendor("postgresql", "mysql")
def test_two_repair_passes_at_once_make_a_lost_callback_once() -> None:
    with jq.batch(on_finish=finish_callback()) as b:
        jq.enqueue_job(None, "flows.noop")
    drain(queues=["default"])
    Job.objects.filter(queue="callbacks").delete()
    start = threading.Barrier(4)
    made: list[int] = []

    def one() -> None:
        try:
            start.wait()
            made.append(repair("default").callbacks)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(made) == [0, 0, 0, 1]
    assert Job.objects.filter(queue="callbacks").count() == 1
    assert jq.get_batch(b.id).finish_jid == Job.objects.get(queue="callbacks").jid


def test_an_upstream_deleted_before_it_ended_fails_its_edges_and_settled_edges_go() -> None:
    from django_jobqueue.models import Dependency

    upstream = jq.enqueue_job(None, "flows.step", {"label": "up"}, delay="1h")
    dependent = jq.enqueue_job(None, "flows.step", {"label": "down"}, after=[upstream])
    Job.objects.filter(jid=upstream.jid).delete()
    assert repair("default").edges == 1
    down = Job.objects.get(jid=dependent.jid)
    assert down.status == JobStatus.CANCELLED
    assert down.message.startswith("cancelled: upstream job")
    Job.objects.filter(pk=down.pk).delete()  # pruned, say
    assert repair("default").pruned == 1
    assert not Dependency.objects.exists()

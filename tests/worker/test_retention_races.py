"""A retention of zero against what reads a done job's row after its end."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

import django_jobqueue as jq
from django_jobqueue import enqueue_job, storage
from django_jobqueue.flows.repair import repair
from django_jobqueue.models import Job, JobStatus
from tests.no_duplicate_helpers import race_threads
from tests.workers_helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)

NOT_KEPT = override_settings(JOBQUEUE={"RETENTION": "0s"})


@NOT_KEPT
def test_a_batch_callback_that_ended_done_is_not_made_again_by_repair() -> None:
    """A callback job returning None is a plain job by its columns; deleted at its
    end, the repair pass would take it for a lost callback and make it again (and
    again, every pass of REPAIR_WINDOW)."""
    with jq.batch(on_finish=jq.signature("flows.noop", None, queue="callbacks")) as b:
        jq.enqueue_many([{"job_type": "flows.noop"}] * 2)
    drain(queues=["default"])
    made = jq.get_batch(b.id).finish_jid
    assert made
    drain(queues=["callbacks"])
    assert repair("default").callbacks == 0
    assert jq.get_batch(b.id).finish_jid == made
    assert Job.objects.get(jid=made).status == JobStatus.DONE


@NOT_KEPT
def test_a_dependent_enqueued_after_its_upstream_ended_is_due() -> None:
    """The upstream's row was deleted at its end: the dependent is due, as it is
    when the done row is kept, not refused as waiting for an unknown job."""
    upstream = enqueue_job("default", "flows.noop", {})
    [job] = storage.claim("default", owner="t", limit=1, queues=["default"])
    assert storage.complete_many([(job, None)]) == [True]
    dependent = enqueue_job("default", "flows.noop", {}, after=[upstream.jid])
    row = Job.objects.get(jid=dependent.jid)
    assert (row.status, row.waiting) == (JobStatus.INIT, True)


@pytest.mark.parametrize("retention", ["0s", "7d"])
@pytest.mark.vendor("postgresql", "mysql")
def test_a_dependent_enqueued_as_its_upstream_ends_is_due_either_way(retention: str) -> None:
    """The enqueue with ``after`` and the batched completion race: the upstream is
    deleted first (the dependent waits for none) or marked ``awaited`` first (its
    row is written done and its end settles the dependent); never refused, never
    left blocked."""
    with override_settings(JOBQUEUE={"RETENTION": retention}):
        for _ in range(15):
            row = Job.objects.get(jid=race_once())
            assert (row.status, row.waiting) == (JobStatus.INIT, True)


def race_once() -> str:
    """End a running job and enqueue a job after it at once; return the dependent's jid."""
    upstream = enqueue_job("default", "flows.noop", {})
    [job] = storage.claim("default", owner="t", limit=1, queues=["default"])

    def racer(i: int) -> Any:
        if i == 0:
            return storage.complete_many([(job, None)])
        return enqueue_job("deps", "flows.noop", {}, after=[upstream.jid])

    race = race_threads(2, racer)
    assert not race.errors, race.errors
    ended, dependent = race.outcomes
    assert ended == [True]
    return dependent.jid

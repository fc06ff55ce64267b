"""A retention of zero against what reads a done job's row after its end."""

from __future__ import annotations

import functools
import threading
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings

import django_jobqueue as jq
from django_jobqueue import enqueue_job, storage
from django_jobqueue.flows.repair import repair
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.worker.completer import Completer
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


@NOT_KEPT
@pytest.mark.vendor("mysql")
def test_a_deleted_batch_waits_for_no_row_of_another_foreman() -> None:
    """MySQL/MariaDB: the batch's DELETE goes by the primary key, so rows another
    transaction holds (another foreman's batch between its lock and its write) do
    not stop it. Planned as a full scan (its list a fair share of the table), it
    waited for them while it held its own rows: two foremen's deletes deadlocked,
    and when the one retry deadlocked too, the batch was written one job at a time
    and its rows kept ``done``."""
    for i in range(40):
        enqueue_job("default", "flows.noop", {"n": i})
    mine = storage.claim("default", owner="a", limit=30, queues=["default"])
    theirs = storage.claim("default", owner="b", limit=10, queues=["default"])
    locked, written = threading.Event(), threading.Event()

    def racer(i: int) -> Any:
        if i == 0:  # the other foreman's write, between its lock and its statement
            with transaction.atomic():
                list(Job.objects.select_for_update().filter(pk__in=[j.pk for j in theirs]))
                locked.set()
                return written.wait(10)  # False: the delete waited for these rows
        assert locked.wait(10)
        try:
            return storage.complete_many([(job, None) for job in mine])
        finally:
            written.set()

    race = race_threads(2, racer)
    assert not race.errors, race.errors
    assert race.outcomes == [True, [True] * 30]
    assert set(Job.objects.values_list("pk", flat=True)) == {job.pk for job in theirs}


#: A lock wait of 1 s for this session (the racer's own, closed after it).
SHORT_LOCK_WAIT = {
    "postgresql": "SET lock_timeout = '1s'",
    "mysql": "SET SESSION innodb_lock_wait_timeout = 1",
}


@NOT_KEPT
@pytest.mark.vendor("postgresql", "mysql")
def test_a_batch_whose_write_failed_is_deleted_one_job_at_a_time() -> None:
    """A batch whose write failed (here one of its rows, held by another transaction,
    outlasts the lock wait) is stored one job at a time: those rows are deleted as
    the batch would have deleted them, not kept ``done``. The held job is not
    stored and stays ``processing``, for the reaper."""
    for i in range(4):
        enqueue_job("default", "flows.noop", {"n": i})
    jobs = storage.claim("default", owner="a", limit=4, queues=["default"])
    held = jobs[1]
    locked, written = threading.Event(), threading.Event()

    def racer(i: int) -> Any:
        if i == 0:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=held.pk)
                locked.set()
                return written.wait(30)
        assert locked.wait(10)
        with connection.cursor() as cursor:
            cursor.execute(SHORT_LOCK_WAIT[connection.vendor])
        stored: dict[int, bool] = {}
        completer = Completer(busy=lambda: 0)  # not started: flush writes here
        try:
            for job in jobs:
                completer.submit(job, None, functools.partial(stored.__setitem__, job.pk))
            completer.flush()
        finally:
            written.set()
        return stored

    race = race_threads(2, racer)
    assert not race.errors, race.errors
    assert race.outcomes[1] == {job.pk: job.pk != held.pk for job in jobs}
    assert list(Job.objects.values_list("pk", "status")) == [(held.pk, JobStatus.PROCESSING)]

"""Job ids (docs/design.md#ids): the table of the four calls (add, set, update, cancel) by the
job's state, what happens around it, get, Queue handles and the async twins.

Byte-exact ids and list()'s pages are in tests/test_ids_pages.py; debounce, throttle,
dedupe and races against claims in tests/test_ids_races.py.

Jobs are put in a state directly with the worker's storage calls (claim, fail,
complete), never by waiting for a worker process.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.utils import timezone

from django_jobqueue import storage
from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.ids import JobView, Queue
from django_jobqueue.models import Job, JobStatus, hold_hash
from tests.ids_helpers import ID, QUEUE, claim, holder
from tests.testapp.jobtypes.ids import draft, plain


def rows(job_id: str = ID, queue: str = QUEUE) -> list[Job]:
    return list(Job.objects.filter(queue=queue, job_id=job_id).order_by("pk"))


def put(state: str, value: Any = "v1") -> Job | None:
    """Put the job of ID in ``state`` (none, waiting, scheduled, running, failed, done)."""
    if state == "none":
        return None
    if state == "scheduled":
        assert draft.add(value, id=ID, delay="1h") is True
        return holder()
    assert draft.add(value, id=ID) is True
    if state == "waiting":
        return holder()
    (job,) = claim()
    if state == "failed":
        assert storage.fail(job, RuntimeError("boom"), retryable=False) == JobStatus.ERROR
    elif state == "done":
        assert storage.complete(job, "ok") is True
    return job


# -- the table: none -------------------------------------------------------------


@pytest.mark.django_db
def test_none__add_adds_it():
    assert draft.add("v", id=ID) is True
    (row,) = rows()
    assert (row.status, row.waiting, row.payload, row.job_id_hash) == (
        JobStatus.INIT,
        True,
        "v",
        hold_hash(ID),
    )


@pytest.mark.django_db
def test_none__set_adds_it():
    assert draft.set(ID, "v") is None
    (row,) = rows()
    assert (row.status, row.payload, row.job_id_hash) == (JobStatus.INIT, "v", hold_hash(ID))


@pytest.mark.django_db
def test_none__update_answers_false_and_writes_nothing():
    assert draft.update(ID, "v") is False
    assert rows() == []


@pytest.mark.django_db
def test_none__cancel_answers_false():
    assert draft.cancel(ID) is False
    assert rows() == []


# -- scheduled or waiting ------------------------------------------------------------


@pytest.mark.django_db
def test_waiting__add_answers_false_and_keeps_the_first():
    put("waiting")
    assert draft.add("v2", id=ID) is False
    (row,) = rows()
    assert (row.payload, row.status) == ("v1", JobStatus.INIT)


@pytest.mark.django_db
def test_scheduled__set_replaces_value_and_time():
    before = put("scheduled")
    at = timezone.now() + timedelta(days=2)
    assert draft.set(ID, "v2", at=at) is None
    (row,) = rows()
    assert (row.jid, row.payload, row.run_at, row.status) == (before.jid, "v2", at, JobStatus.INIT)


@pytest.mark.django_db
def test_scheduled__update_changes_it():
    before = put("scheduled")
    assert draft.update(ID, "v2") is True
    (row,) = rows()
    assert (row.jid, row.payload, row.run_at) == (before.jid, "v2", before.run_at)
    at = timezone.now() + timedelta(days=3)
    assert draft.update(ID, "v3", at=at) is True
    assert (holder().payload, holder().run_at) == ("v3", at)


@pytest.mark.django_db
def test_waiting__cancel_removes_it():
    put("waiting")
    assert draft.cancel(ID) is True
    assert rows() == []
    assert claim() == []


# -- running ------------------------------------------------------------------------


@pytest.mark.django_db
def test_running__add_answers_false():
    job = put("running")
    assert draft.add("v2", id=ID) is False
    (row,) = rows()
    assert (row.status, row.payload, row.lease_token) == (
        JobStatus.PROCESSING,
        "v1",
        job.lease_token,
    )


@pytest.mark.django_db
def test_running__set_asks_one_run_more_with_this_value():
    job = put("running")
    assert draft.set(ID, "v2") is None
    (row,) = rows()
    assert (row.status, row.payload, row.rerun, row.rerun_payload) == (
        JobStatus.PROCESSING,
        "v1",
        True,
        "v2",
    )
    assert storage.complete(job, "first") is True
    (row,) = rows()
    assert (row.jid, row.status, row.waiting, row.payload, row.attempt, row.rerun) == (
        job.jid,
        JobStatus.INIT,
        True,
        "v2",
        0,
        False,
    )
    (again,) = claim()
    assert (again.payload, again.attempt) == ("v2", 1)
    assert storage.complete(again, "second") is True
    assert [(r.status, r.result) for r in rows()] == [(JobStatus.DONE, "second")]
    assert claim() == []


@pytest.mark.django_db
def test_running__update_answers_false():
    job = put("running")
    assert draft.update(ID, "v2") is False
    (row,) = rows()
    assert (row.status, row.payload, row.rerun, row.lease_token) == (
        JobStatus.PROCESSING,
        "v1",
        False,
        job.lease_token,
    )


@pytest.mark.django_db
def test_running__cancel_tells_its_handler_to_stop():
    job = put("running")
    assert draft.cancel(ID) is True
    (row,) = rows()
    assert (row.status, row.cancel_requested) == (JobStatus.PROCESSING, True)
    alive, cancel = storage.heartbeat([job])
    assert (alive, cancel) == ({job.pk}, {job.pk})
    assert storage.finish_cancelled(job) is True
    (row,) = rows()
    assert (row.status, row.job_id_hash) == (JobStatus.CANCELLED, None)
    assert draft.get(ID) is None
    assert draft.add("v3", id=ID) is True  # the id is free again


# -- failed, kept for keep ---------------------------------------------------------------


@pytest.mark.django_db
def test_failed__add_answers_false():
    put("failed")
    assert draft.add("v2", id=ID) is False
    (row,) = rows()
    assert (row.status, row.payload) == (JobStatus.ERROR, "v1")
    assert row.id_held_until > timezone.now() + timedelta(days=6)  # keep: 7 days


@pytest.mark.django_db
def test_failed__set_starts_it_again_attempts_from_one():
    job = put("failed")
    assert draft.set(ID, "v2") is None
    (row,) = rows()
    assert (row.jid, row.status, row.waiting, row.payload, row.attempt, row.id_held_until) == (
        job.jid,
        JobStatus.INIT,
        True,
        "v2",
        0,
        None,
    )
    (again,) = claim()
    assert (again.payload, again.attempt) == ("v2", 1)


@pytest.mark.django_db
def test_failed__update_answers_false():
    put("failed")
    assert draft.update(ID, "v2") is False
    (row,) = rows()
    assert (row.status, row.payload) == (JobStatus.ERROR, "v1")


@pytest.mark.django_db
def test_failed__cancel_removes_it():
    put("failed")
    assert draft.cancel(ID) is True
    assert rows() == []


# -- done, while dedupe keeps it -----------------------------------------------------------


@pytest.mark.django_db
def test_done__add_answers_false_while_dedupe_keeps_it():
    job = put("done")
    assert draft.add("v2", id=ID) is False
    (row,) = rows()
    assert (row.jid, row.status, row.job_id_hash) == (job.jid, JobStatus.DONE, hold_hash(ID))
    assert row.id_held_until > timezone.now() + timedelta(minutes=59)  # dedupe: 1 hour


@pytest.mark.django_db
def test_done__set_adds_it_again():
    job = put("done")
    assert draft.set(ID, "v2") is None
    old, new = rows()
    assert (old.jid, old.status, old.job_id_hash) == (job.jid, JobStatus.DONE, None)
    assert (new.status, new.payload, new.job_id_hash) == (JobStatus.INIT, "v2", hold_hash(ID))


@pytest.mark.django_db
def test_done__update_answers_false():
    put("done")
    assert draft.update(ID, "v2") is False
    (row,) = rows()
    assert (row.status, row.payload) == (JobStatus.DONE, "v1")


@pytest.mark.django_db
def test_done__cancel_answers_false():
    put("done")
    assert draft.cancel(ID) is False
    (row,) = rows()
    assert (row.status, row.job_id_hash) == (JobStatus.DONE, hold_hash(ID))


# -- around the table --------------------------------------------------------------


@pytest.mark.django_db
def test_done_without_dedupe__frees_the_id():
    assert plain.add("v1", id=ID) is True
    (job,) = claim("ids-plain")
    assert storage.complete(job) is True
    assert plain.get(ID) is None
    assert plain.add("v2", id=ID) is True
    assert [r.status for r in rows(queue="ids-plain")] == [JobStatus.DONE, JobStatus.INIT]


@pytest.mark.django_db
def test_stale_hold__counts_as_none():
    put("failed")
    Job.objects.filter(queue=QUEUE).update(id_held_until=timezone.now() - timedelta(hours=1))
    assert draft.get(ID) is None
    assert draft.update(ID, "v2") is False
    assert draft.add("v2", id=ID) is True
    assert [r.job_id_hash for r in rows()] == [None, hold_hash(ID)]


@pytest.mark.django_db
def test_set_on_running__then_failure_still_reruns_with_the_new_value():
    job = put("running")
    draft.set(ID, "v2", delay="1h")
    assert storage.fail(job, RuntimeError("boom"), retryable=False) == JobStatus.INIT
    (row,) = rows()
    assert (row.status, row.payload, row.attempt, len(row.errors)) == (
        JobStatus.INIT,
        "v2",
        0,
        1,
    )
    assert row.run_at > timezone.now() + timedelta(minutes=59)


@pytest.mark.django_db
def test_cancel_after_set_on_running__drops_the_rerun():
    job = put("running")
    draft.set(ID, "v2")
    assert draft.cancel(ID) is True
    assert storage.complete(job) is True
    (row,) = rows()
    assert (row.status, row.rerun) == (JobStatus.DONE, False)


@pytest.mark.django_db
def test_get__shows_the_job_in_seed_words():
    assert draft.get(ID) is None
    put("scheduled")
    view = draft.get(ID)
    assert isinstance(view, JobView)
    assert (view.id, view.value, view.state, view.attempt) == (ID, "v1", "scheduled", 0)
    assert view.at == holder().run_at and view.jid == holder().jid
    draft.update(ID, "v1", at=timezone.now() - timedelta(seconds=1))
    assert draft.get(ID).state == "waiting"
    claim()
    assert draft.get(ID).state == "running"


# -- Queue handles and their options ---------------------------------------------------


@pytest.mark.django_db
def test_queue_handle_dedupe_and_keep_are_stored_and_honoured():
    pushes = Queue("ids-plain", dedupe="1h", keep="2h")
    assert pushes.add("p", id="digest:1") is True
    (job,) = claim("ids-plain")
    assert (job.dedupe_ms, job.keep_ms) == (3_600_000, 7_200_000)
    storage.complete(job)
    assert pushes.add("p2", id="digest:1") is False  # a second add within the hour
    assert pushes.get("digest:1").state == "done"
    pushes.add("q", id="digest:2")
    (job,) = claim("ids-plain")
    storage.fail(job, RuntimeError("boom"), retryable=False)
    row = Job.objects.get(pk=job.pk)
    assert timedelta(minutes=119) < row.id_held_until - row.finished_at <= timedelta(minutes=121)
    assert Queue("ids-plain", dedupe=None).add("p", id="nodedupe") is True
    (job,) = claim("ids-plain")
    storage.complete(job)
    assert plain.add("p", id="nodedupe") is True  # dedupe=None: freed at once


def test_queue_handle_needs_a_job_type_to_add():
    with pytest.raises(InvalidOption):
        Queue("no-such-queue").add("v", id="x")
    with pytest.raises(InvalidOption):
        Queue("")


@pytest.mark.django_db
def test_queue_handle_finds_the_queues_one_job_type():
    later = Queue("ids")
    assert later.add("v", id=ID) is True
    assert holder().job_type == "ids.draft"
    assert later.update(ID, "v2") is True
    assert later.get(ID).value == "v2"
    assert later.cancel(ID) is True


@pytest.mark.django_db(transaction=True)
def test_async_twins():
    assert async_to_sync(draft.aadd)("v", id=ID) is True
    assert async_to_sync(draft.aupdate)(ID, "v2") is True
    async_to_sync(draft.aset)(ID, "v3")
    assert async_to_sync(draft.aget)(ID).value == "v3"
    assert [j.id for j in async_to_sync(draft.alist)(prefix="chat:").jobs] == [ID]
    assert async_to_sync(draft.acancel)(ID) is True
    assert async_to_sync(Queue("ids").aget)(ID) is None

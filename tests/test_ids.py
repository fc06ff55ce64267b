"""Job ids (seed 002): the table of four calls by state, debounce, throttle, dedupe,
byte-exact ids, races against claims, and pages.

Jobs are put in a state directly with the worker's storage calls (claim, fail,
complete), never by waiting for a worker process.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.db.models.functions import Now
from django.test import override_settings
from django.utils import timezone

from django_jobqueue import locks, storage
from django_jobqueue.exceptions import InvalidJobId, InvalidOption
from django_jobqueue.ids import MAX_PAGE_BYTES, JobView, Page, Queue
from django_jobqueue.models import Job, JobStatus, hold_hash
from tests.testapp.jobtypes.ids import draft, plain

USING = "default"
QUEUE = "ids"
ID = "chat:7:draft-1"


def claim(queue: str = QUEUE, limit: int = 1) -> list[Job]:
    return storage.claim(USING, owner="test", limit=limit, queues=[queue])


def rows(job_id: str = ID, queue: str = QUEUE) -> list[Job]:
    return list(Job.objects.filter(queue=queue, job_id=job_id).order_by("pk"))


def holder(job_id: str = ID, queue: str = QUEUE) -> Job | None:
    return Job.objects.filter(queue=queue, job_id_hash=hold_hash(job_id)).first()


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


@pytest.mark.django_db
@pytest.mark.parametrize("job_id", ["", "x" * 1025, "é" * 513, 7, "\ud800"], ids=repr)
def test_ids_outside_1_to_1024_bytes_are_refused(job_id):
    calls = (
        lambda: draft.add("v", id=job_id),
        lambda: draft.set(job_id, "v"),
        lambda: draft.update(job_id, "v"),
        lambda: draft.cancel(job_id),
        lambda: draft.get(job_id),
    )
    for call in calls:
        with pytest.raises(InvalidJobId):
            call()
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_id_of_1024_bytes_is_accepted():
    job_id = "é" * 512
    assert draft.add("v", id=job_id) is True
    assert draft.get(job_id).id == job_id


@pytest.mark.django_db
def test_ids_compare_byte_for_byte():
    for job_id in ("Chat:1", "chat:1", "é", "e", "e\u0301"):
        assert draft.add(job_id, id=job_id) is True
    assert Job.objects.filter(queue=QUEUE).count() == 5
    assert draft.get("Chat:1").value == "Chat:1"
    assert draft.update("chat:1", "new") is True
    assert draft.get("Chat:1").value == "Chat:1"
    assert draft.cancel("e") is True
    assert draft.get("é").value == "é"
    assert draft.get("e\u0301").value == "e\u0301"


@pytest.mark.django_db
def test_list_prefix_is_literal_and_byte_exact():
    for job_id in ("ab", "a_1", "a%1", "a\\1", "A_2", "Chat:1", "chat:2", "é:1", "e:1"):
        draft.add(None, id=job_id)

    def ids(prefix: str) -> list[str]:
        return [job.id for job in draft.list(prefix=prefix).jobs]

    assert ids("a_") == ["a_1"]
    assert ids("a%") == ["a%1"]
    assert ids("a\\") == ["a\\1"]
    assert ids("a") == ["ab", "a_1", "a%1", "a\\1"]
    assert ids("chat:") == ["chat:2"]
    assert ids("Chat:") == ["Chat:1"]
    assert ids("é") == ["é:1"]
    assert ids("e") == ["e:1"]


@pytest.mark.django_db
def test_list_by_state_and_failed_latest_first():
    now = timezone.now()
    for i in range(3):
        draft.add(i, id=f"f:{i}")
    for _ in range(3):
        (job,) = claim()
        storage.fail(job, RuntimeError("boom"), retryable=False)
    for i, job in enumerate(Job.objects.filter(queue=QUEUE).order_by("pk")):
        Job.objects.filter(pk=job.pk).update(finished_at=now - timedelta(minutes=10 - i))
    draft.add("w", id="w:1")
    draft.add("s", id="s:1", delay="1h")
    assert [j.id for j in draft.list(state="failed").jobs] == ["f:2", "f:1", "f:0"]
    assert [j.id for j in draft.list(state="waiting").jobs] == ["w:1"]
    assert [j.id for j in draft.list(state="scheduled").jobs] == ["s:1"]
    assert [j.state for j in draft.list().jobs] == ["failed"] * 3 + ["waiting", "scheduled"]
    seen = []
    page = draft.list(state="failed", limit=1)
    while True:
        seen += [j.id for j in page.jobs]
        if page.next is None:
            break
        page = draft.list(state="failed", limit=1, after=page.next)
    assert seen == ["f:2", "f:1", "f:0"]


@pytest.mark.django_db
def test_list_rejects_bad_arguments():
    for kwargs in ({"limit": 0}, {"limit": 1001}, {"state": "gone"}, {"after": "junk"}):
        with pytest.raises(InvalidOption):
            draft.list(**kwargs)
    draft.add(1, id="x:1")
    draft.add(2, id="x:2")
    cursor = draft.list(limit=1).next
    with pytest.raises(InvalidOption):
        draft.list(state="failed", after=cursor)


def _bulk_jobs(queue: str, job_type: str, job_ids: list[str], payload: Any = None) -> None:
    import uuid

    now = timezone.now()
    # Fixtures straight in the table: Job.objects refuses bulk_create.
    Job._base_manager.bulk_create(
        [
            Job(
                jid=uuid.uuid4().hex,
                queue=queue,
                job_type=job_type,
                job_id=job_id,
                job_id_hash=hold_hash(job_id),
                payload=payload,
                run_at=now,
            )
            for job_id in job_ids
        ],
        batch_size=500,
    )


@pytest.mark.django_db
def test_pages_of_2500_jobs_return_each_once_in_order():
    wanted = [f"page:{i:05d}" for i in range(2500)]
    _bulk_jobs(QUEUE, "ids.draft", wanted[:1200])
    _bulk_jobs(QUEUE, "ids.draft", [f"other:{i}" for i in range(50)])
    _bulk_jobs(QUEUE, "ids.draft", wanted[1200:])
    sizes, seen = [], []
    page = draft.list(prefix="page:", limit=1000)
    while True:
        sizes.append(len(page.jobs))
        seen += [job.id for job in page.jobs]
        if page.next is None:
            break
        page = draft.list(prefix="page:", limit=1000, after=page.next)
    assert sizes == [1000, 1000, 500]
    assert seen == wanted


@pytest.mark.django_db
@override_settings(JOBQUEUE={"MAX_PAYLOAD_BYTES": MAX_PAGE_BYTES})  # values over 1 MiB
def test_page_stops_before_4_mib_of_values():
    big = "x" * (MAX_PAGE_BYTES // 3)  # three fill a page but for the quotes
    for i in range(5):
        draft.add(big, id=f"big:{i}")
    sizes = []
    page = draft.list(prefix="big:")
    while True:
        sizes.append(len(page.jobs))
        if page.next is None:
            break
        page = draft.list(prefix="big:", after=page.next)
    assert sizes == [2, 2, 1]
    assert draft.list().jobs and draft.list(limit=3).next is not None


@pytest.mark.django_db
def test_default_page_is_100_jobs():
    _bulk_jobs(QUEUE, "ids.draft", [f"d:{i}" for i in range(150)])
    page = draft.list()
    assert isinstance(page, Page) and len(page.jobs) == 100 and page.next is not None


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


# -- debounce, throttle, dedupe --------------------------------------------------------
#
# These tests sleep, so on a loaded machine any statement can stall for a second or
# more. "Due" is therefore decided against the job's own stored run_at and the
# database's clock (the one claim compares with), never against how long the test
# thought its loop took.


def _claim_within(queue: str, seconds: float) -> list[Job]:
    """Claim until something comes (an "eventually": a long deadline costs nothing)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        jobs = claim(queue)
        if jobs:
            return jobs
        time.sleep(0.05)
    return []


def _db_now(job_id: str) -> datetime:
    """Return the database's clock, the one ``storage.claim`` compares run_at with."""
    return Job.objects.filter(queue=QUEUE, job_id=job_id).values_list(Now(), flat=True)[0]


def _debounce(job_id: str) -> Job | None:
    """Run the 20 sets 100 ms apart on ``job_id``; return the one run, or None if void.

    Each set must move the stored run_at to at least 1 s past the database's clock
    before the call, later than the previous one, and no claim may find the job while
    that run_at is ahead. An attempt is void (None) only when a claim found the job
    and the database's clock shows it really was due: the machine stalled for longer
    than the delay between a set and the next claim, which proves nothing either way.
    """
    first_at = previous_at = None
    claimed_after_first_at = False
    for i in range(20):
        if previous_at is not None:
            before = _db_now(job_id)
        draft.set(job_id, {"n": i}, delay="1s")
        row = holder(job_id)
        if previous_at is None:
            first_at = row.run_at
        else:
            assert row.run_at >= before + timedelta(seconds=1)  # the call moved it 1 s on
            assert row.run_at > previous_at
        previous_at = row.run_at
        checked_at = _db_now(job_id)
        jobs = claim()
        if jobs:
            (job,) = jobs
            # Claimed: only fine if its stored run_at had really passed (a stall).
            assert _db_now(job_id) >= row.run_at, "claimed before its run_at"
            storage.complete(job)
            return None
        claimed_after_first_at |= checked_at > first_at
        time.sleep(0.1)
    # The loop outlasted the first call's delay: without the moves it would have run.
    assert claimed_after_first_at
    (job,) = _claim_within(QUEUE, 60)
    return job


@pytest.mark.django_db(transaction=True)
def test_debounce__20_sets_100ms_apart_run_once_with_the_last_value():
    for attempt in range(5):
        job_id = f"note:{attempt}"
        job = _debounce(job_id)
        if job is not None:
            break
    else:
        pytest.fail("every attempt stalled past the 1 s delay between a set and a claim")
    assert (job.job_id, job.payload) == (job_id, {"n": 19})
    storage.complete(job)
    assert claim() == []
    assert Job.objects.filter(queue=QUEUE, job_id=job_id).count() == 1


@pytest.mark.django_db(transaction=True)
def test_throttle__20_adds_run_once_with_the_first_value():
    assert draft.add({"n": 0}, id="report:team", delay="1s") is True
    first = holder("report:team")
    answers = [draft.add({"n": i}, id="report:team", delay="1s") for i in range(1, 20)]
    assert answers == [False] * 19
    # The first call stands: its value and its time, whatever the machine's load.
    after = holder("report:team")
    assert (after.pk, after.payload, after.run_at) == (first.pk, {"n": 0}, first.run_at)
    (job,) = _claim_within(QUEUE, 60)
    assert job.payload == {"n": 0}
    storage.complete(job)
    assert claim() == []
    assert Job.objects.filter(queue=QUEUE).count() == 1


@pytest.mark.django_db
def test_dedupe_1h__second_add_after_it_ran_adds_nothing_set_arms_it_again():
    assert draft.add("first", id="digest:9") is True
    (job,) = claim()
    storage.complete(job)
    assert draft.add("second", id="digest:9") is False
    assert claim() == []
    draft.set("digest:9", "third")
    assert draft.add("fourth", id="digest:9") is False
    (job,) = claim()
    assert job.payload == "third"


# -- races against the workers' claims ---------------------------------------------------


def _close_thread_connections() -> None:
    for wrapper in (getattr(locks._local, "connections", None) or {}).values():
        wrapper.close()
    connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_update_and_cancel_racing_4_claimers_answer_what_ran():
    n_jobs, n_callers, n_claimers = 120, 20, 4
    for i in range(n_jobs):
        assert plain.add({"v": "old"}, id=f"race:{i}") is True
    answers: dict[int, tuple[str, bool]] = {}
    ran: dict[str, list[Any]] = {}
    ran_lock = threading.Lock()
    callers_done = threading.Event()
    start = threading.Barrier(n_callers + n_claimers)
    errors: list[BaseException] = []

    def caller(t: int) -> None:
        try:
            start.wait()
            for i in range(t, n_jobs, n_callers):
                if i % 2:
                    answers[i] = ("cancel", plain.cancel(f"race:{i}"))
                else:
                    answers[i] = ("update", plain.update(f"race:{i}", {"v": "new"}))
        except BaseException as exc:
            errors.append(exc)
        finally:
            _close_thread_connections()

    def claimer() -> None:
        try:
            start.wait()
            while True:
                jobs = claim("ids-plain")
                if not jobs:
                    if callers_done.is_set() and not Job.objects.filter(waiting=True).exists():
                        return
                    time.sleep(0.005)
                    continue
                for job in jobs:
                    with ran_lock:
                        ran.setdefault(job.job_id, []).append(job.payload["v"])
                    _alive, cancel = storage.heartbeat([job])
                    if job.pk in cancel:
                        assert storage.finish_cancelled(job) is True
                    else:
                        assert storage.complete(job) is True
        except BaseException as exc:
            errors.append(exc)
        finally:
            _close_thread_connections()

    callers = [threading.Thread(target=caller, args=(t,)) for t in range(n_callers)]
    claimers = [threading.Thread(target=claimer) for _ in range(n_claimers)]
    for thread in callers + claimers:
        thread.start()
    for thread in callers:
        thread.join(60)
    callers_done.set()
    for thread in claimers:
        thread.join(60)
    assert errors == []
    assert len(answers) == n_jobs
    final = {row.job_id: row for row in Job.objects.filter(queue="ids-plain")}
    for i, (call, answer) in answers.items():
        job_id = f"race:{i}"
        runs = ran.get(job_id, [])
        assert len(runs) <= 1, (job_id, runs)
        if call == "update":
            # True: the job ran with the new value; False: a claim came first.
            assert runs == (["new"] if answer else ["old"]), (job_id, answer, runs)
        elif answer and not runs:
            assert job_id not in final  # removed before any claim
        elif answer:
            row = final[job_id]  # running when cancelled: told to stop
            assert row.cancel_requested and row.status in (JobStatus.CANCELLED, JobStatus.DONE)
        else:
            row = final[job_id]  # done before the cancel
            assert runs == ["old"] and row.status == JobStatus.DONE and not row.cancel_requested
    assert not Job.objects.filter(waiting=True).exists()
    assert not Job.objects.filter(status=JobStatus.PROCESSING).exists()


@pytest.mark.django_db(transaction=True)
def test_set_racing_complete__the_rerun_is_never_lost():
    rounds = 30
    lost = 0
    for r in range(rounds):
        job_id = f"rr:{r}"
        plain.add({"r": r, "v": 0}, id=job_id)
        (job,) = claim("ids-plain")
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def setter(
            job_id: str = job_id,
            r: int = r,
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                barrier.wait()
                plain.set(job_id, {"r": r, "v": 1})
            except BaseException as exc:
                errors.append(exc)
            finally:
                _close_thread_connections()

        thread = threading.Thread(target=setter)
        thread.start()
        barrier.wait()
        storage.complete(job)
        thread.join(30)
        assert errors == []
        # Whichever came first, one job with the set's value now waits to run.
        waiting = list(Job.objects.filter(queue="ids-plain", job_id=job_id, waiting=True))
        lost += len(waiting) != 1
        assert [w.payload for w in waiting] == [{"r": r, "v": 1}]
        (again,) = claim("ids-plain")
        storage.complete(again)
    assert lost == 0

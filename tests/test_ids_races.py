"""Job ids (docs/design.md#ids) over time and under concurrency: debounce, throttle and dedupe
(tests that sleep), and update, cancel and set racing the workers' claims.

Jobs are claimed and finished directly with the worker's storage calls, never by
waiting for a worker process.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connections
from django.db.models.functions import Now

from django_jobqueue import storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import locks
from tests.ids_helpers import QUEUE, claim, holder
from tests.testapp.jobtypes.ids import draft, plain

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

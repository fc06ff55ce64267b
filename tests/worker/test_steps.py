"""Resumable steps (docs/workflows.md "Resumable steps"): checkpoints, resumes, cursors,
the order rule, the lease guard and the retries, on a real database.

Each attempt is one real claim (:func:`storage.claim`) and one run of the executor
in the test's thread; the step's writes are RunRecord rows of tests/testapp.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_jobqueue import enqueue_job
from django_jobqueue.core.exceptions import InvalidStep, StepLeaseLost, StepOrderChanged
from django_jobqueue.enqueue import jobs_database
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.storage import claim
from django_jobqueue.worker.context import JobContext
from django_jobqueue.worker.executor import execute
from tests.testapp.jobtypes import steps as steptypes
from tests.testapp.models import RunRecord
from tests.workers_helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "test-host:1:steps"


def attempt(jid: str) -> tuple[str | None, JobContext]:
    """Claim ``jid`` (it must be the one due job) and run it once; (status, context)."""
    claimed = claim(jobs_database(), owner=OWNER, limit=1)
    assert [row.jid for row in claimed] == [jid]
    ctx = JobContext(claimed[0], worker=OWNER)
    return execute(claimed[0], ctx), ctx


def labels(jid: str) -> list[tuple[str, int]]:
    """(label, attempt) of every committed RunRecord of ``jid``, in write order."""
    return list(RunRecord.objects.filter(jid=jid).values_list("label", "attempt"))


def enqueue(job_type: str, payload: Any) -> str:
    return enqueue_job(None, job_type, payload)["jid"]


def test_steps__each_runs_once_and_the_job_resumes_after_the_failed_step(no_backoff):
    jid = enqueue("steps.pay", {"items": 2, "fail": {"charge": 1}})

    status, _ctx = attempt(jid)
    assert status == JobStatus.RETRY
    # charge's write rolled back with its failure; reserve's committed with its checkpoint.
    assert labels(jid) == [("reserve", 1)]
    row = Job.objects.get(jid=jid)
    assert row.steps == [
        {
            "name": "reserve",
            "done": True,
            "cursor": None,
            "result": {"reservation": f"r-{jid}", "attempt": 1},
        }
    ]
    assert row.errors[0]["message"].endswith("failed at charge")

    status, _ctx = attempt(jid)
    assert status == JobStatus.DONE
    assert labels(jid) == [("reserve", 1), ("charge", 2), ("item-0", 2), ("item-1", 2)]
    row = Job.objects.get(jid=jid)
    # The skipped step's name is bound to the result its run stored, on attempt 1.
    assert row.result == {
        "reservation": {"reservation": f"r-{jid}", "attempt": 1},
        "charge": {"charge": f"c-r-{jid}", "attempt": 2},
        "shipped": 2,
    }
    assert [(entry["name"], entry["done"]) for entry in row.steps] == [
        ("reserve", True),
        ("charge", True),
        ("ship", True),
    ]
    assert row.steps[2]["cursor"] == 2


def test_cursor__a_step_resumes_at_its_last_save_and_later_writes_roll_back(no_backoff):
    jid = enqueue("steps.pay", {"items": 4, "fail": {"item-2": 1}})

    assert attempt(jid)[0] == JobStatus.RETRY
    # item-2 was written, then failed before its save: rolled back.
    assert labels(jid) == [("reserve", 1), ("charge", 1), ("item-0", 1), ("item-1", 1)]
    ship = Job.objects.get(jid=jid).steps[2]
    assert ship == {"name": "ship", "done": False, "cursor": 2, "result": None}

    assert attempt(jid)[0] == JobStatus.DONE
    assert labels(jid)[4:] == [("item-2", 2), ("item-3", 2)]
    assert Job.objects.get(jid=jid).result["shipped"] == 4


def test_failed_step__goes_through_the_jobs_own_backoff_and_max_retry():
    jid = enqueue("steps.always_fails", None)
    before = timezone.now()
    assert attempt(jid)[0] == JobStatus.RETRY
    row = Job.objects.get(jid=jid)
    assert row.run_at > before  # the default backoff (BACKOFF_BASE_MS), not "due now"
    Job.objects.filter(jid=jid).update(run_at=timezone.now() - timedelta(seconds=1))
    assert attempt(jid)[0] == JobStatus.MAX_RETRY
    assert labels(jid) == [("first", 1)]
    assert [entry["message"] for entry in Job.objects.get(jid=jid).errors] == [
        "RuntimeError: second failed",
        "RuntimeError: second failed",
    ]


@pytest.mark.parametrize(
    ("second_deploy", "expected", "step"),
    [
        pytest.param(["b", "a", "c"], "a", "b", id="reordered"),
        pytest.param(["a", "x", "c"], "b", "x", id="renamed"),
        pytest.param(["a", "c"], "b", "c", id="removed"),
    ],
)
def test_order_changed__between_deploys_fails_the_attempt_with_a_typed_error(
    no_backoff, second_deploy, expected, step
):
    steptypes.DEPLOYED["order"] = ["a", "b", "c"]
    try:
        jid = enqueue("steps.deployed", {"fail": "c"})
        assert attempt(jid)[0] == JobStatus.RETRY
        assert labels(jid) == [("a", 1), ("b", 1)]

        steptypes.DEPLOYED["order"] = second_deploy
        assert attempt(jid)[0] == JobStatus.RETRY
        assert labels(jid) == [("a", 1), ("b", 1)]  # nothing skipped, nothing run twice
        error = Job.objects.get(jid=jid).errors[-1]
        assert error["exception_class"].endswith("StepOrderChanged")
        assert f"Step {step!r}" in error["message"]
        assert f"recorded {expected!r} there" in error["message"]
    finally:
        steptypes.DEPLOYED["order"] = ["a", "b", "c"]


def test_order_changed__a_returning_attempt_that_skipped_a_recorded_step(no_backoff):
    steptypes.DEPLOYED["order"] = ["a", "b", "c"]
    try:
        jid = enqueue("steps.deployed", {"fail": "c"})
        Job.objects.filter(jid=jid).update(max_retry=5)
        assert attempt(jid)[0] == JobStatus.RETRY
        # c failed before any checkpoint: never recorded, so dropping c is no skip.
        steptypes.DEPLOYED["order"] = ["a", "b"]
        assert attempt(jid)[0] == JobStatus.DONE
        assert Job.objects.get(jid=jid).result == ["a", "b"]

        # A recorded step the next deploy no longer reaches is an error.
        jid = enqueue("steps.deployed", {"fail": "c"})
        steptypes.DEPLOYED["order"] = ["a", "b", "c"]
        assert attempt(jid)[0] == JobStatus.RETRY
        steptypes.DEPLOYED["order"] = ["a"]
        assert attempt(jid)[0] == JobStatus.RETRY
        message = Job.objects.get(jid=jid).errors[-1]["message"]
        assert "returned without reaching step 'b'" in message
    finally:
        steptypes.DEPLOYED["order"] = ["a", "b", "c"]


def test_order_changed__carries_the_step_the_expected_name_and_the_recorded_order():
    jid = enqueue("steps.twice", None)
    assert attempt(jid)[0] == JobStatus.MAX_RETRY
    error = steptypes.RAISED.pop(jid)
    assert isinstance(error, StepOrderChanged)
    assert error.code == "step_order_changed"
    assert (error.step, error.expected, error.recorded) == ("one", "", ["one"])
    assert "began twice" in str(error)


def test_after_a_step_raised__only_that_step_may_begin_again():
    jid = enqueue("steps.again", None)
    assert attempt(jid)[0] == JobStatus.DONE
    assert Job.objects.get(jid=jid).result == 3
    assert labels(jid) == [("flaky-2", 1)]  # the two failed tries rolled back
    assert "after step 'broken' raised" in str(steptypes.RAISED.pop(jid))
    assert [entry["name"] for entry in Job.objects.get(jid=jid).steps] == ["flaky"]


def _steal_lease(pk: int) -> None:
    """Take ``pk``'s lease from another connection, as a reaper and a new claim would."""

    def steal() -> None:
        try:
            Job.objects.filter(pk=pk).update(lease_token="stolen-by-another-claim")
        finally:
            connection.close()

    thread = threading.Thread(target=steal)
    thread.start()
    thread.join()


def test_lease_lost_mid_step__rolls_back_the_steps_writes_and_raises():
    # SQLite: the step's transaction holds the one write lock from its BEGIN IMMEDIATE,
    # so no other connection can take the lease while it is open; the lease is lost
    # just before the step there, unknown to the worker, which is the same race seen
    # from the step's side. PostgreSQL and MariaDB: inside the step, after its BEGIN.
    before = connection.vendor == "sqlite"
    jid = enqueue("steps.hooked", {"before": before})
    pk = Job.objects.get(jid=jid).pk
    steptypes.HOOKS[jid] = lambda: _steal_lease(pk)
    try:
        status, ctx = attempt(jid)
    finally:
        steptypes.HOOKS.pop(jid)
    assert status is None  # the outcome was not the worker's to store
    assert ctx.lease_lost
    error = steptypes.RAISED.pop(jid)
    assert isinstance(error, StepLeaseLost)
    assert error.code == "step_lease_lost"
    assert labels(jid) == []  # the step's write rolled back with the refused checkpoint
    row = Job.objects.get(jid=jid)
    assert (row.status, row.lease_token, row.steps) == (
        JobStatus.PROCESSING,
        "stolen-by-another-claim",
        None,
    )


def test_invalid_use__raises_invalid_step_and_writes_nothing():
    kinds = ["with", "atomic", "result", "save_outside", "save_in_atomic", "name"]
    seen = {}
    for kind in kinds:
        jid = enqueue("steps.misuse", {"kind": kind})
        attempt(jid)
        assert labels(jid) == []
        seen[kind] = steptypes.RAISED.pop(jid)
        assert isinstance(seen[kind], InvalidStep), (kind, seen[kind])
        assert seen[kind].code == "invalid_step"
    assert "is not a with block" in str(seen["with"])
    assert "inside a transaction.atomic()" in str(seen["atomic"])
    assert "The result of step 'charge'" in str(seen["result"])
    assert "outside the function of step 'charge'" in str(seen["save_outside"])
    assert "inside an atomic() block opened in step" in str(seen["save_in_atomic"])
    assert "Step name '' is not a string" in str(seen["name"])


def test_a_fresh_result_is_the_json_a_resume_would_read():
    jid = enqueue("steps.pair", None)
    assert attempt(jid)[0] == JobStatus.DONE
    assert Job.objects.get(jid=jid).result == {"seen": "[1, 2]"}


def test_set_with_a_new_value__starts_a_dead_letters_steps_afresh():
    from django_jobqueue.ids import Queue

    queue = Queue("default", job_type="steps.deployed")
    steptypes.DEPLOYED["order"] = ["a", "b", "c"]
    queue.set("order-1", {"fail": "c"})
    row = Job.objects.get(job_id="order-1")
    Job.objects.filter(pk=row.pk).update(max_retry=0)
    assert attempt(row.jid)[0] == JobStatus.MAX_RETRY
    assert [entry["name"] for entry in Job.objects.get(pk=row.pk).steps] == ["a", "b"]
    queue.set("order-1", {})
    assert Job.objects.get(pk=row.pk).steps is None


def test_async_handler__steps_through_sync_to_async(no_backoff):
    jid = enqueue("steps.async", None)
    assert attempt(jid)[0] == JobStatus.RETRY
    assert attempt(jid)[0] == JobStatus.DONE
    assert labels(jid) == [("async-first", 1), ("async-second", 2)]
    assert Job.objects.get(jid=jid).result == ["first", "second"]


# SQLite: a step's transaction holds the one write lock from its BEGIN IMMEDIATE, so
# no other connection can take the lease while a step runs there; the worker's own
# timeout write waits for the step's checkpoint instead.
@pytest.mark.vendor("postgresql", "mysql")
def test_lease_lost_after_a_cursor_save__keeps_the_saved_writes_and_rolls_back_the_rest():
    jid = enqueue("steps.cursor_hooked", None)
    pk = Job.objects.get(jid=jid).pk
    steptypes.HOOKS[jid] = lambda: _steal_lease(pk)
    try:
        status, _ctx = attempt(jid)
    finally:
        steptypes.HOOKS.pop(jid)
    assert status is None
    assert isinstance(steptypes.RAISED.pop(jid), StepLeaseLost)
    # item-0 committed with the first save; item-1 was written before the refused one.
    assert labels(jid) == [("item-0", 1)]
    assert Job.objects.get(jid=jid).steps == [
        {"name": "items", "done": False, "cursor": 1, "result": None}
    ]


@pytest.mark.vendor("postgresql", "mysql")
def test_step_past_the_jobs_timeout__its_late_checkpoint_is_refused_and_rolled_back(
    no_backoff,
):
    jid = enqueue("steps.slow", {"s": 3})
    # A foreman with real threads: attempt 1 times out at 1 s and attempt 2 runs
    # while attempt 1's abandoned step still sleeps in its transaction.
    assert drain(concurrency=2, lease_ms=30_000) == {"retry": 1, "done": 1}
    deadline = time.monotonic() + 60
    while jid not in steptypes.RAISED and time.monotonic() < deadline:
        time.sleep(0.05)  # the abandoned runner's step ends at 3 s
    assert isinstance(steptypes.RAISED.pop(jid), StepLeaseLost)
    row = Job.objects.get(jid=jid)
    assert (row.status, row.attempt, row.result) == (JobStatus.DONE, 2, "finished")
    assert "ran past its timeout" in row.errors[0]["message"]
    assert labels(jid) == [("slow", 2)]  # attempt 1's write rolled back

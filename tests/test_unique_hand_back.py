"""A job handed back unrun takes its ``until_executing`` hold again (docs/design.md#unique-keys).

The claim ends an ``until_executing`` hold; a hand-back undoes the claim, so the
job, waiting again and never run, holds its key again and an identical enqueue is
deduplicated. Hand-backs come from a batch claim over its type's ``concurrent``
limit and from a worker's shutdown; both go through :func:`storage.hand_back`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction

from django_jobqueue import enqueue_job, storage
from django_jobqueue.core.dbclock import Now
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.worker.foreman import Foreman, ForemanOptions

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "unique"


def enqueue(key: str, mode: str = "until_executing", job_type: str = "unique.opt") -> str:
    result = enqueue_job(
        None if job_type == "worker.limited" else QUEUE,
        job_type,
        {"s": 0},
        unique_key=key,
        unique_mode=mode,
    )
    assert result.status == "enqueued"
    return result.jid


def claim_one() -> Job:
    (job,) = storage.claim("default", owner="test", limit=1, queues=[QUEUE])
    return job


def test_over_limit_hand_back__the_unrun_jobs_keep_their_until_executing_keys(
    pro: None,
) -> None:
    keys = ["k1", "k2", "k3"]
    for key in keys:
        enqueue(key, job_type="worker.limited")
    run = Foreman(ForemanOptions(concurrency=1, prefetch=2, min_sleep_ms=5, max_sleep_ms=50))
    first = run._next_job("w")  # one claim of 3; 2 over the type's limit of 1, handed back
    assert first is not None and first.job.unique_key == "k1"
    back = Job.objects.filter(unique_key__in=["k2", "k3"])
    assert sorted((j.status, j.attempt, j.waiting) for j in back) == [(JobStatus.INIT, 0, True)] * 2
    for key in ("k2", "k3"):
        again = enqueue_job(
            None, "worker.limited", {"s": 0}, unique_key=key, unique_mode="until_executing"
        )
        assert again.status == "deduplicated"
        assert again.jid == Job.objects.get(unique_key=key).jid
    # The job that runs freed its key at the claim, as before.
    assert enqueue("k1", job_type="worker.limited") != first.job.jid
    assert Job.objects.filter(job_type="worker.limited").count() == 4


def test_shutdown_hand_back__the_key_is_held_again(pro: None) -> None:
    jid = enqueue("k")
    job = claim_one()
    assert storage.hand_back(job, message="handed back at worker shutdown")
    row = Job.objects.get(jid=jid)
    assert (row.status, row.waiting, row.attempt) == (JobStatus.INIT, True, 0)
    again = enqueue_job(QUEUE, "unique.opt", unique_key="k", unique_mode="until_executing")
    assert (again.status, again.jid) == ("deduplicated", jid)
    # Claimed again, the hold ends again.
    assert claim_one().jid == jid
    assert enqueue("k") != jid


def test_hand_back__a_newer_holder_keeps_the_key_and_nothing_raises(pro: None) -> None:
    first = enqueue("k")
    job = claim_one()
    newer = enqueue("k")  # the key was free while the first was claimed
    with transaction.atomic():  # a caller's transaction stays usable
        assert storage.hand_back(job, message="handed back at worker shutdown")
        assert Job.objects.filter(jid=first).exists()
    rows = {row.jid: row for row in Job.objects.all()}
    assert (rows[first].status, rows[first].waiting) == (JobStatus.INIT, True)
    assert rows[first].unique_key_hash is None
    assert rows[newer].unique_key_hash is not None
    again = enqueue_job(QUEUE, "unique.opt", unique_key="k", unique_mode="until_executing")
    assert (again.status, again.jid) == ("deduplicated", newer)


def test_hand_back__a_hold_past_its_ttl_is_not_taken_again(pro: None) -> None:
    first = enqueue("k")
    job = claim_one()
    Job.objects.filter(jid=first).update(unique_expires_at=Now() - timedelta(seconds=1))
    assert storage.hand_back(job)
    assert Job.objects.get(jid=first).unique_key_hash is None
    assert enqueue("k") != first


def test_hand_back__a_lost_lease_writes_nothing(pro: None) -> None:
    first = enqueue("k")
    job = claim_one()
    Job.objects.filter(jid=first).update(lease_token="someone-else")
    assert not storage.hand_back(job)
    row = Job.objects.get(jid=first)
    assert (row.status, row.unique_key_hash) == (JobStatus.PROCESSING, None)


@pytest.mark.parametrize("mode", ["while_locked", "until_executed"])
def test_hand_back__other_modes_keep_the_hold_they_kept_through_the_claim(
    pro: None, mode: str
) -> None:
    first = enqueue("k", mode=mode)
    job = claim_one()
    assert storage.hand_back(job)
    again = enqueue_job(QUEUE, "unique.opt", unique_key="k", unique_mode=mode)
    assert (again.status, again.jid) == ("deduplicated", first)

"""The claim's rows become the same ``Job`` objects a query returns, built with or
without ``Model.__init__`` (``store.jobrows.jobs_of_rows``)."""

from __future__ import annotations

import pytest
from django.db.models.signals import post_init

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job
from django_jobqueue.storage_claim import claim

pytestmark = pytest.mark.django_db(transaction=True)


def _fields(job: Job) -> dict[str, object]:
    return {f.attname: getattr(job, f.attname) for f in Job._meta.concrete_fields}


def _claim_two() -> list[Job]:
    enqueue_job("q", "maint.noop", {"n": 1, "text": "é"}, priority=3)
    enqueue_job("q", "maint.noop", [1, None], unique_key="k")
    claimed = claim("default", owner="test", limit=2)
    assert len(claimed) == 2
    return claimed


def test_claimed_jobs__equal_a_query_of_the_same_rows_field_by_field():
    for job in _claim_two():
        stored = Job.objects.get(pk=job.pk)
        assert _fields(job) == _fields(stored)
        assert job._state.db == "default" and job._state.adding is False
        job.message = "saved"
        job.save(update_fields=["message"])  # a normal model instance: it saves
        assert Job.objects.get(pk=job.pk).message == "saved"


def test_post_init_receivers__still_see_every_claimed_job():
    seen: list[int] = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.pk)

    post_init.connect(receiver, sender=Job)
    try:
        claimed = _claim_two()
    finally:
        post_init.disconnect(receiver, sender=Job)
    assert set(seen) >= {job.pk for job in claimed}
    for job in claimed:
        assert _fields(job) == _fields(Job.objects.get(pk=job.pk))


def test_claimed_jobs__empty_json_texts_are_new_objects_each() -> None:
    # A new job's errors column holds "[]": each claimed job gets a list of its own
    # (store.jobrows answers "[]" and "{}" without json.loads), not one shared list.
    enqueue_job(None, "maint.noop", {})
    enqueue_job(None, "maint.noop", {})
    first, second = claim("default", owner="w", limit=2)
    assert first.errors == [] and second.errors == []
    assert first.payload == {} and second.payload == {}
    first.errors.append("x")
    first.payload["y"] = 1
    assert second.errors == [] and second.payload == {}

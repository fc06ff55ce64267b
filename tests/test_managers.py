"""The managers own creation: Job.objects makes jobs only through the locked path."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from django_jobqueue import enqueue_job
from django_jobqueue.core.exceptions import DirectCreateRefused, DuplicateJob
from django_jobqueue.ids import Queue
from django_jobqueue.models import Job, ScheduleJob
from django_jobqueue.schedules import add_job_with_schedule
from django_jobqueue.store.managers import hold_hash
from tests.no_duplicate_helpers import JOB_TYPE

pytestmark = pytest.mark.django_db(transaction=True)


def _fields(**extra):
    return {
        "jid": "f" * 32,
        "queue": "mgr",
        "job_type": JOB_TYPE,
        "run_at": timezone.now(),
        **extra,
    }


@pytest.mark.parametrize("route", ["objects", "using"])
def test_create__is_refused_and_names_enqueue_job(route):
    """Job.objects.create and Job.objects.using(db).create write nothing and say what to use."""
    jobs = Job.objects if route == "objects" else Job.objects.using("default")
    with pytest.raises(DirectCreateRefused, match="enqueue_job") as info:
        jobs.create(**_fields())
    assert info.value.code == "use_enqueue_job"
    assert Job.objects.count() == 0


def test_bulk_create__is_refused():
    with pytest.raises(DirectCreateRefused, match="enqueue_job"):
        Job.objects.bulk_create([Job(**_fields())])
    assert Job.objects.count() == 0


def test_get_or_create__finds_an_existing_job_but_refuses_to_make_one():
    jid = enqueue_job("mgr", JOB_TYPE, {"n": 1}).jid
    found, created = Job.objects.get_or_create(jid=jid)
    assert (found.jid, created) == (jid, False)
    with pytest.raises(DirectCreateRefused):
        Job.objects.get_or_create(**_fields())
    with pytest.raises(DirectCreateRefused):
        Job.objects.update_or_create(jid="e" * 32, defaults=_fields(jid="e" * 32))
    assert list(Job.objects.values_list("jid", flat=True)) == [jid]


def test_create_job__takes_the_hold_and_answers_the_duplicate():
    """The manager's own path is not refused: it stores the hold and checks it."""
    with transaction.atomic():
        first = enqueue_job("mgr", JOB_TYPE, unique_key="k")
    job = Job.objects.get(jid=first.jid)
    assert job.unique_key_hash == hold_hash("k")
    assert enqueue_job("mgr", JOB_TYPE, unique_key="k").deduplicated
    assert Queue("mgr", job_type=JOB_TYPE).add(id="a") is True
    assert Queue("mgr", job_type=JOB_TYPE).add(id="a") is False
    assert Job.objects.get(job_id="a").job_id_hash == hold_hash("a")
    assert Job.objects.count() == 2


def test_schedule_manager__create_plan_refuses_a_taken_name_and_advance_is_guarded():
    at = timezone.now()
    plan = add_job_with_schedule(JOB_TYPE, at=at, name="mgr-plan")
    with pytest.raises(DuplicateJob):
        ScheduleJob.objects.create_plan("default", name="mgr-plan", queue="mgr", job_type=JOB_TYPE)
    assert (
        ScheduleJob.objects.advance("default", plan.pk, plan.schedule_at, schedule_at=None) is True
    )
    # The plan moved on: an advance read with the old next run moves nothing.
    assert (
        ScheduleJob.objects.advance("default", plan.pk, plan.schedule_at, schedule_at=None) is False
    )

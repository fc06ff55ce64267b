"""A failed attempt's entry stores any exception class name, on every database."""

from __future__ import annotations

import pytest

from django_jobqueue import enqueue_job, storage
from django_jobqueue.models import Job
from tests.no_duplicate_helpers import JOB_TYPE


@pytest.mark.django_db(transaction=True)
def test_in_process_fail__a_class_named_with_nul_and_a_surrogate_is_stored() -> None:
    enqueue_job("advf", JOB_TYPE, None)
    [job] = storage.claim("default", owner="w", queues=["advf"], limit=1)
    odd = type("Odd", (Exception,), {})
    odd.__qualname__ = "Bad\x00Na\udc80me"  # as a class made at run time may be named
    storage.fail(job, odd("msg\x00"), retryable=False)
    stored = Job.objects.get(pk=job.pk)
    assert stored.status == "error"
    assert stored.errors[-1]["exception_class"].endswith("Bad\\x00Na\\udc80me")
    assert stored.message.startswith("Odd: msg")

"""A retention of zero against what reads a done job's row after its end."""

from __future__ import annotations

import pytest
from django.test import override_settings

import django_jobqueue as jq
from django_jobqueue.flows.repair import repair
from django_jobqueue.models import Job, JobStatus
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

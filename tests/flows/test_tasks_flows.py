"""django.tasks users get batches and dependencies too (docs/workflows.md
"django.tasks"): ``task.enqueue()`` inside ``with batch()`` joins the batch, inside
``with wait_for(result)`` waits for that job."""

from __future__ import annotations

import pytest

import django_jobqueue as jq
from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.models import Job, JobStatus
from tests.workers_helpers import drain

tasks = pytest.importorskip("tests.testapp.jobtypes.tasks")
if getattr(tasks, "add", None) is None:
    pytest.skip("no tasks framework", allow_module_level=True)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_enqueued_in_a_batch_joins_it_and_one_in_wait_for_waits() -> None:
    with jq.batch(on_finish="flows.callback") as b:
        first = tasks.add.enqueue(1, 2)
        with jq.wait_for(first):
            second = tasks.add.enqueue(3, 4)
            explicit = jq.enqueue_job(None, "flows.noop", after=[])  # its own after wins
    assert Job.objects.get(jid=second.id).status == JobStatus.BLOCKED
    assert Job.objects.get(jid=explicit.jid).status == JobStatus.INIT
    assert jq.get_batch(b.id).total == 3
    drain()
    row = jq.get_batch(b.id)
    assert row.counts()["done"] == 3 and row.finish_jid
    second.refresh()
    assert second.return_value == 7
    callback = Job.objects.get(jid=row.finish_jid)
    assert not callback.awaited and callback.status == JobStatus.DONE


def test_wait_for_refuses_what_is_not_a_job() -> None:
    with pytest.raises(InvalidOption), jq.wait_for(12):
        pass

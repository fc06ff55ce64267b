"""django.tasks beyond ``batch()`` and ``wait_for()`` (docs/workflows.md "django.tasks"):
``in_batch()`` joins an existing batch, ``add_task`` makes a task's call a workflow
step; with the blocked status read as Django's READY. Run by real workers (an
in-process foreman)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

import django_jobqueue as jq
from django_jobqueue.core.exceptions import InvalidOption, InvalidRequest
from django_jobqueue.flows.batches import open_batch
from django_jobqueue.models import Batch, Dependency, Job, JobStatus
from tests.testapp.models import RunRecord
from tests.workers_helpers import drain

pytest.importorskip("django_jobqueue.core.compat", exc_type=ImproperlyConfigured)

from django_jobqueue.core.compat import SUCCESSFUL, TaskResultStatus  # noqa: E402
from django_jobqueue.tasks import add_task, in_batch  # noqa: E402
from tests.testapp.jobtypes import tasks as t  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_waiting_tasks_result_is_ready_and_a_cancelled_one_failed() -> None:
    doomed = t.give_up.enqueue("no")
    with jq.wait_for(doomed):
        waiting = t.add.enqueue(2, 2)
    with jq.wait_for(doomed, on_upstream_failure="ignore"):
        anyway = t.add.enqueue(3, 3)
    assert Job.objects.get(jid=waiting.id).status == JobStatus.BLOCKED
    assert waiting.status == TaskResultStatus.READY  # queued, not started
    assert t.add.get_result(waiting.id).status == TaskResultStatus.READY
    drain()
    waiting.refresh()
    anyway.refresh()
    assert waiting.status == TaskResultStatus.FAILED
    assert Job.objects.get(jid=waiting.id).status == JobStatus.CANCELLED
    assert (anyway.status, anyway.return_value) == (SUCCESSFUL, 6)


def test_in_batch_joins_an_open_batch_and_its_callback_counts_the_tasks() -> None:
    handle = open_batch(on_finish=jq.signature("flows.callback", {"kind": "finish"}))
    with in_batch(handle.id):
        first = t.add.enqueue(1, 1)
    with in_batch(handle), jq.wait_for(first):
        second = t.add.enqueue(2, 2)  # joins, and waits
    assert set(Job.objects.filter(batch_id=handle.id).values_list("jid", flat=True)) == {
        first.id,
        second.id,
    }
    assert Dependency.objects.get(dependent__jid=second.id).upstream.jid == first.id
    handle.seal()
    drain()
    row = Batch.objects.get(pk=handle.id)
    assert (row.total, row.done, row.finished_at is not None) == (2, 2, True)
    runs = RunRecord.objects.filter(label="callback:finish").values_list("jid", flat=True)
    assert list(runs) == [row.finish_jid]
    # A finished batch takes no more tasks; nothing is written.
    with in_batch(handle), pytest.raises(InvalidRequest, match="finished"):
        t.add.enqueue(3, 3)
    assert Job.objects.filter(batch_id=handle.id).count() == 2


def test_add_task_builds_a_workflow_of_task_calls() -> None:
    w = jq.Workflow("tasks")
    add_task(w, "sum", t.add, [1, 2])
    add_task(w, "echo", t.echo, ["x"], {"k": "v"}, after=["sum"])
    jids = w.enqueue()
    echo = Job.objects.get(jid=jids["echo"])
    assert (echo.status, echo.queue, echo.step) == (JobStatus.BLOCKED, "tasks-other", "echo")
    assert echo.priority == 51  # the task's priority 50, as task.enqueue maps it
    drain()
    assert t.add.get_result(jids["sum"]).return_value == 3
    result = t.echo.get_result(jids["echo"])
    assert (result.status, result.return_value) == (
        SUCCESSFUL,
        {"args": ["x"], "kwargs": {"k": "v"}},
    )
    assert (
        Job.objects.get(jid=jids["echo"]).started_at >= Job.objects.get(jid=jids["sum"]).finished_at
    )


def test_bad_input_is_refused_and_writes_nothing() -> None:
    for bad in ("seven", 0, True, None):
        with pytest.raises(InvalidOption, match="batch"), in_batch(bad):
            pass
    with in_batch(987654), pytest.raises(InvalidRequest, match="batch"):
        t.add.enqueue(1, 1)
    with pytest.raises(InvalidOption, match="unique"):
        add_task(jq.Workflow("u"), "a", t.unique_add, [1, 2])
    with pytest.raises(InvalidOption, match="after"):
        add_task(jq.Workflow("u"), "a", t.add, [1, 2], after=["nope"])
    assert not Job.objects.exists()


def test_in_batch_ends_with_its_block() -> None:
    with jq.batch() as b:
        pass
    handle = open_batch()
    with in_batch(handle):
        inside = t.add.enqueue(1, 1)
    outside = t.add.enqueue(2, 2)
    assert Job.objects.get(jid=inside.id).batch_id == handle.id
    assert Job.objects.get(jid=outside.id).batch_id is None
    assert Batch.objects.get(pk=b.id).total == 0

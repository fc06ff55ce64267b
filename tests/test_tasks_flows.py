"""Batches and dependencies for django.tasks users (docs/workflows.md "From
django.tasks"): ``with batch()``, ``linked(after=..., batch=...)`` and ``add_task``,
run by real workers (an in-process foreman)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

import django_jobqueue as jq
from django_jobqueue.core.exceptions import InvalidOption, InvalidRequest
from django_jobqueue.models import Batch, Dependency, Job, JobStatus
from tests.testapp.models import RunRecord
from tests.workers_helpers import drain

pytest.importorskip("django_jobqueue.core.compat", exc_type=ImproperlyConfigured)

from django_jobqueue.core.compat import SUCCESSFUL, TaskResultStatus  # noqa: E402
from django_jobqueue.tasks import add_task, linked  # noqa: E402
from tests.testapp.jobtypes import tasks as t  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


def test_linked_after_makes_a_task_wait_for_another_tasks_job() -> None:
    first = t.add.enqueue(1, 2)
    with linked(after=[first]):
        second = t.echo.enqueue("after", n=1)
    job = Job.objects.get(jid=second.id)
    assert job.status == JobStatus.BLOCKED
    assert second.status == TaskResultStatus.READY  # queued, not started
    assert t.echo.get_result(second.id).status == TaskResultStatus.READY
    assert Dependency.objects.get(dependent=job).upstream.jid == first.id

    drain()

    first.refresh()
    second.refresh()
    assert (first.status, second.status) == (SUCCESSFUL, SUCCESSFUL)
    assert second.return_value == {"args": ["after"], "kwargs": {"n": 1}}
    a, b = Job.objects.get(jid=first.id), Job.objects.get(jid=second.id)
    assert b.started_at >= a.finished_at


def test_a_failed_upstream_task_cancels_its_dependent_under_the_default_policy() -> None:
    doomed = t.give_up.enqueue("no")
    with linked(after=[doomed.id]):
        waiting = t.add.enqueue(2, 2)
    with linked(after=[doomed], on_upstream_failure="ignore"):
        anyway = t.add.enqueue(3, 3)
    drain()
    waiting.refresh()
    anyway.refresh()
    assert waiting.status == TaskResultStatus.FAILED
    assert Job.objects.get(jid=waiting.id).status == JobStatus.CANCELLED
    assert "upstream" in Job.objects.get(jid=waiting.id).message
    assert (anyway.status, anyway.return_value) == (SUCCESSFUL, 6)


def test_tasks_in_a_batch_block_join_it_and_its_callback_runs_once() -> None:
    with jq.batch(on_finish=jq.signature("flows.callback", {"kind": "finish"})) as b:
        results = [t.add.enqueue(i, i) for i in range(3)]
    with linked(batch=b):
        late = t.add.enqueue(10, 10)  # an open batch: joined after its block ended
    assert set(Job.objects.filter(batch_id=b.id).values_list("jid", flat=True)) == {
        r.id for r in [*results, late]
    }
    drain()
    row = Batch.objects.get(pk=b.id)
    assert (row.total, row.done, row.finished_at is not None) == (4, 4, True)
    assert list(
        RunRecord.objects.filter(label="callback:finish").values_list("jid", flat=True)
    ) == [row.finish_jid]


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


def test_bad_links_are_refused_and_write_nothing() -> None:
    with pytest.raises(InvalidOption, match="after"):
        with linked(after=[123]):
            pass
    with pytest.raises(InvalidOption, match="on_upstream_failure"):
        with linked(on_upstream_failure="skip"):
            pass
    with pytest.raises(InvalidOption, match="on_upstream_failure"):
        with linked(after=["a" * 32], on_upstream_failure="explode"):
            pass
    with pytest.raises(InvalidOption, match="batch"):
        with linked(batch="seven"):
            pass
    with linked(after=["0" * 32]):
        with pytest.raises(InvalidRequest, match="do not exist"):
            t.add.enqueue(1, 1)
    with linked(batch=987654):
        with pytest.raises(InvalidRequest, match="batch"):
            t.add.enqueue(1, 1)
    with pytest.raises(InvalidOption, match="unique"):
        add_task(jq.Workflow("u"), "a", t.unique_add, [1, 2])
    assert not Job.objects.exists()


def test_linked_blocks_nest_and_end_with_their_block() -> None:
    a = t.add.enqueue(1, 1)
    b = t.add.enqueue(2, 2)
    with linked(after=[a]):
        with linked(after=[b]):
            both = t.add.enqueue(3, 3)
        one = t.add.enqueue(4, 4)
    free = t.add.enqueue(5, 5)
    ups = {
        r.id: set(
            Dependency.objects.filter(dependent__jid=r.id).values_list("upstream__jid", flat=True)
        )
        for r in (both, one, free)
    }
    assert ups == {both.id: {a.id, b.id}, one.id: {a.id}, free.id: set()}

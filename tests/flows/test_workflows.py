"""Workflows (docs/workflows.md "Workflows"): dependents wait in a state the claim
never scans, run after their last upstream job is done, read its results, and
follow their edges' policy when an upstream job fails."""

from __future__ import annotations

import pytest

import django_jobqueue as jq
from django_jobqueue import storage
from django_jobqueue.core.exceptions import InvalidOption, InvalidRequest
from django_jobqueue.flows.graph import Step
from django_jobqueue.maintenance import retry_jobs
from django_jobqueue.models import Dependency, Job, JobStatus, Workflow
from tests.testapp.models import RunRecord
from tests.workers_helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)


def step(label: str, **extra: object) -> dict[str, object]:
    return {"label": label, **extra}


def runs() -> list[str]:
    return list(RunRecord.objects.order_by("pk").values_list("label", flat=True))


def by_step(workflow_id: int) -> dict[str, Job]:
    return {job.step: job for job in Job.objects.filter(workflow_id=workflow_id)}


def test_a_fan_in_runs_after_its_last_upstream_and_reads_every_result() -> None:
    w = jq.Workflow("images")
    for name in ("a", "b", "c"):
        w.add(name, "flows.step", step(name))
    w.add("merge", "flows.step", step("merge"), after=["a", "b", "c"])
    result = w.enqueue()
    merge = Job.objects.get(jid=result["merge"])
    assert (merge.status, merge.waiting) == (JobStatus.BLOCKED, False)
    assert not Job.objects.due().filter(pk=merge.pk).exists()

    drain(concurrency=4)

    assert runs()[-1] == "merge" and sorted(runs()[:3]) == ["a", "b", "c"]
    merge.refresh_from_db()
    assert merge.status == JobStatus.DONE
    assert merge.result["upstream"] == {
        name: {"label": name, "upstream": {}} for name in ("a", "b", "c")
    }
    row = Workflow.objects.get(pk=result.id)
    assert (row.total, row.done, row.finished_at is not None) == (4, 4, True)


def test_a_dependent_becomes_due_in_the_transaction_of_its_last_upstream_done() -> None:
    w = jq.Workflow("pair").add("a", "flows.step", step("a")).add("b", "flows.step", after=["a"])
    result = w.enqueue()
    (job,) = storage.claim("default", owner="test")
    assert job.jid == result["a"]
    b = Job.objects.get(jid=result["b"])
    assert b.status == JobStatus.BLOCKED
    assert storage.complete(job, {"ok": True})
    b.refresh_from_db()
    assert (b.status, b.waiting) == (JobStatus.INIT, True)
    assert Dependency.objects.get(dependent_id=b.pk).state == "done"


def test_after_a_running_job_makes_its_stale_copy_end_on_the_linked_path() -> None:
    upstream = jq.enqueue_job(None, "flows.step", step("up"))
    (job,) = storage.claim("default", owner="test")
    assert not job.awaited  # the worker's copy, read before the dependent existed
    dependent = jq.enqueue_job(None, "flows.step", step("down"), after=[upstream.jid])
    assert Job.objects.get(jid=dependent.jid).status == JobStatus.BLOCKED
    assert storage.complete_many([(job, None)]) == [True]
    assert Job.objects.get(jid=dependent.jid).status == JobStatus.INIT


def test_after_a_done_job_is_due_at_once_and_after_an_unknown_jid_writes_nothing() -> None:
    upstream = jq.enqueue_job(None, "flows.step", step("up"))
    drain()
    dependent = jq.enqueue_job(None, "flows.step", step("down"), after=[upstream])
    assert Job.objects.get(jid=dependent.jid).status == JobStatus.INIT
    count = Job.objects.count()
    with pytest.raises(InvalidRequest):
        jq.enqueue_job(None, "flows.step", after=["0" * 32])
    with pytest.raises(InvalidOption):
        jq.enqueue_job(None, "flows.step", after=[upstream.jid], on_upstream_failure="retry")
    assert Job.objects.count() == count


def test_cancel_ends_the_rest_of_a_chain_with_the_reason() -> None:
    result = jq.chain(
        jq.signature("flows.step", step("a", fail=True), step="a"),
        jq.signature("flows.step", step("b"), step="b"),
        jq.signature("flows.step", step("c"), step="c"),
    ).enqueue("nightly")
    drain()
    jobs = by_step(result.id)
    assert runs() == ["a"]
    assert jobs["a"].status == JobStatus.ERROR
    assert jobs["b"].status == jobs["c"].status == JobStatus.CANCELLED
    assert jobs["b"].message == f"cancelled: upstream job {result['a']} failed"
    assert jobs["c"].message == f"cancelled: upstream job {result['b']} failed"
    row = Workflow.objects.get(pk=result.id)
    assert (row.failed, row.cancelled, row.pending, row.finished_at is not None) == (1, 2, 0, True)


def test_skip_ends_the_dependent_unrun_and_its_own_dependents_go_on() -> None:
    w = jq.Workflow("skip")
    w.add("a", "flows.step", step("a", fail=True))
    w.add("b", "flows.step", step("b"), after=["a"], on_upstream_failure="skip")
    w.add("c", "flows.step", step("c"), after=["b"])
    result = w.enqueue()
    drain()
    jobs = by_step(result.id)
    assert runs() == ["a", "c"]
    assert (jobs["b"].status, jobs["b"].result) == (JobStatus.DONE, None)
    assert jobs["b"].message.startswith("skipped: upstream job")
    assert jobs["c"].result["upstream"] == {"b": None}


def test_ignore_runs_the_dependent_anyway() -> None:
    w = jq.Workflow("ignore", on_upstream_failure="ignore")
    w.add("a", "flows.step", step("a", fail=True))
    w.add("b", "flows.step", step("b"))
    w.add("c", "flows.step", step("c"), after=["a", "b"])
    result = w.enqueue()
    drain()
    jobs = by_step(result.id)
    assert runs()[-1] == "c"
    assert jobs["c"].result["upstream"] == {"a": None, "b": {"label": "b", "upstream": {}}}


def test_a_retried_failed_step_resumes_its_workflow() -> None:
    result = jq.chain(
        jq.signature("flows.flaky", {"label": "a"}, step="a"),
        jq.signature("flows.step", step("b"), step="b"),
    ).enqueue("resume")
    drain()
    assert by_step(result.id)["b"].status == JobStatus.CANCELLED
    row = Workflow.objects.get(pk=result.id)
    assert (row.failed, row.cancelled, row.finished_at is not None) == (1, 1, True)

    assert retry_jobs(Job.objects.filter(jid=result["a"])).dead == 1
    b = by_step(result.id)["b"]
    assert (b.status, b.message) == (JobStatus.BLOCKED, "")
    row.refresh_from_db()
    assert (row.failed, row.cancelled, row.pending, row.finished_at) == (0, 0, 2, None)

    drain()
    assert runs() == ["a", "a", "b"]
    row.refresh_from_db()
    assert (row.done, row.pending, row.finished_at is not None) == (2, 0, True)


def test_chord_runs_its_body_after_every_member_of_its_group() -> None:
    header = jq.group(*(jq.signature("flows.step", step(f"part{i}")) for i in range(3)))
    result = jq.chord(header, jq.signature("flows.step", step("sum"), step="sum")).enqueue()
    drain(concurrency=3)
    assert runs()[-1] == "sum"
    body = Job.objects.get(jid=result["sum"])
    assert sorted(body.result["upstream"]) == ["0.flows.step", "1.flows.step", "2.flows.step"]


def test_a_chain_with_a_group_fans_out_then_in() -> None:
    flow = jq.chain(
        jq.signature("flows.step", step("fetch"), step="fetch"),
        jq.group(jq.signature("flows.step", step("x")), jq.signature("flows.step", step("y"))),
        jq.signature("flows.step", step("merge"), step="merge"),
    ).workflow("fan")
    assert flow.steps["merge"].after == ("1.flows.step", "2.flows.step")
    assert flow.steps["1.flows.step"].after == ("fetch",)


def test_the_graph_is_checked_at_build_time() -> None:
    w = jq.Workflow("cycle").add("a", "flows.step")
    with pytest.raises(InvalidOption, match="not a step added before"):
        w.add("b", "flows.step", after=["c"])
    with pytest.raises(InvalidOption, match="already has a step"):
        w.add("a", "flows.step")
    with pytest.raises(InvalidOption, match="takes no"):
        w.add("b", "flows.step", unique_key="k")
    w.steps["a"] = Step("a", "flows.step", None, {}, ("b",), "cancel")
    w.steps["b"] = Step("b", "flows.step", None, {}, ("a",), "cancel")
    with pytest.raises(InvalidOption, match="cycle"):
        w.enqueue()
    assert not Job.objects.exists()


def test_the_pipe_spells_a_chain_as_celery_does() -> None:
    flow = (
        jq.signature("flows.step", step("a"), step="a")
        | jq.signature("flows.step", step("b"), step="b")
        | jq.signature("flows.step", step("c"), step="c")
    ).workflow("piped")
    assert [(s.name, s.after) for s in flow.order()] == [("a", ()), ("b", ("a",)), ("c", ("b",))]


def test_no_dependent_starts_before_its_last_upstream_is_done_under_eight_threads() -> None:
    w = jq.Workflow("many fan-ins")
    for group_no in range(12):
        parts = [f"g{group_no}.p{i}" for i in range(5)]
        for name in parts:
            w.add(name, "flows.step", step(name))
        w.add(f"g{group_no}.merge", "flows.step", step("merge"), after=parts)
    result = w.enqueue()
    drain(concurrency=8)
    jobs = by_step(result.id)
    assert all(job.status == JobStatus.DONE for job in jobs.values())
    for group_no in range(12):
        merge = jobs[f"g{group_no}.merge"]
        parts = [jobs[f"g{group_no}.p{i}"] for i in range(5)]
        assert merge.started_at >= max(part.finished_at for part in parts)
        assert merge.result["upstream"] == {
            part.step: {"label": part.step, "upstream": {}} for part in parts
        }


def test_the_async_twins_enqueue_and_read() -> None:
    import asyncio

    async def run() -> tuple[object, object]:
        flow = jq.Workflow("async").add("a", "flows.step", step("a"))
        result = await flow.aenqueue()
        piped = await (
            jq.signature("flows.step", step("x")) | jq.signature("flows.step", step("y"))
        ).aenqueue()
        return result, piped

    result, piped = asyncio.run(run())
    assert Job.objects.get(jid=result["a"]).workflow_id == result.id
    assert Job.objects.filter(workflow_id=piped.id, status=JobStatus.BLOCKED).count() == 1
    with jq.batch() as b:
        jq.enqueue_job(None, "flows.noop")
    assert asyncio.run(jq.aget_batch(b.id)).total == 1


def test_enqueue_many_of_plain_jobs_in_a_wait_for_block_waits_for_its_upstream() -> None:
    first = jq.enqueue_job(None, "flows.step", step("first"))
    with jq.wait_for(first):
        results = jq.enqueue_many(
            [{"job_type": "flows.step", "payload": step(f"plain{i}")} for i in range(3)]
            + [{"job_type": "flows.step", "payload": step("own"), "priority": 5}]
        )
    assert {Job.objects.get(jid=r.jid).status for r in results} == {JobStatus.BLOCKED}
    assert Dependency.objects.count() == 4
    drain(concurrency=2)
    assert runs()[0] == "first" and len(runs()) == 5


def test_enqueue_many_takes_each_jobs_own_after() -> None:
    first = jq.enqueue_job(None, "flows.step", step("first"))
    second = jq.enqueue_job(None, "flows.step", step("second"))
    results = jq.enqueue_many(
        [
            {"job_type": "flows.step", "payload": step("after-first"), "after": [first]},
            {"job_type": "flows.step", "payload": step("after-both"), "after": [first, second]},
            {"job_type": "flows.step", "payload": step("free")},
        ]
    )
    statuses = [Job.objects.get(jid=r.jid).status for r in results]
    assert statuses == [JobStatus.BLOCKED, JobStatus.BLOCKED, JobStatus.INIT]
    assert Dependency.objects.count() == 3
    count = Job.objects.count()
    with pytest.raises(InvalidRequest):
        jq.enqueue_many([{"job_type": "flows.step", "after": ["f" * 32]}])
    with pytest.raises(InvalidOption, match=r"jobs\[0\]"):
        jq.enqueue_many([{"job_type": "flows.step", "after": "not-a-list"}])
    assert Job.objects.count() == count
    drain(concurrency=4)
    jobs = {Job.objects.get(jid=r.jid).result["label"]: Job.objects.get(jid=r.jid) for r in results}
    assert sorted(jobs["after-both"].result["upstream"]) == sorted([first.jid, second.jid])

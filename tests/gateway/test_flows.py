"""Batches and workflows over the gateway (docs/gateway.md "Batches and workflows"):
``JobIn``'s ``batch`` and ``after``, ``POST /sdk/workflows``, ``GET /sdk/batches/{id}``
and ``GET /sdk/workflows/{id}``."""

from __future__ import annotations

import pytest

import django_jobqueue as jq
from django_jobqueue import storage
from django_jobqueue.core.exceptions import InvalidRequest
from django_jobqueue.models import Batch, Dependency, Job, JobStatus, Workflow
from tests.gateway.conftest import Api, table_counts

pytestmark = pytest.mark.django_db


def step(name: str, *after: str, **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "job_type": "gw.echo",
        "payload": {"step": name},
        "after": list(after),
        **extra,
    }


def diamond() -> dict[str, object]:
    return {
        "name": "diamond",
        "steps": [
            step("merge", "left", "right"),  # steps in any order: ordered by the gateway
            step("left", "fetch"),
            step("right", "fetch", on_upstream_failure="ignore"),
            step("fetch", options={"priority": 3, "max_retry": 1}),
        ],
    }


def run_one() -> Job:
    (job,) = storage.claim("default", owner="test", queues=["gw"])
    assert storage.complete(job, {"ran": job.step})
    return job


def test_a_workflow_is_enqueued_with_its_edges_and_answered_by_step(api: Api) -> None:
    response = api.post("/sdk/workflows", diamond())
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["name"] == "diamond" and set(body["jids"]) == {"fetch", "left", "right", "merge"}
    row = Workflow.objects.get(pk=body["id"])
    assert (row.name, row.total) == ("diamond", 4)
    jobs = {job.step: job for job in Job.objects.filter(workflow=row)}
    assert {s: j.jid for s, j in jobs.items()} == body["jids"]
    assert jobs["fetch"].status == JobStatus.INIT and jobs["fetch"].priority == 3
    assert jobs["fetch"].max_retry == 1
    assert {jobs[s].status for s in ("left", "right", "merge")} == {JobStatus.BLOCKED}
    assert Dependency.objects.get(dependent=jobs["right"]).policy == "ignore"
    assert Dependency.objects.filter(dependent=jobs["merge"]).count() == 2
    assert jobs["fetch"].origin == "gateway:tests"


def test_get_workflow_reads_each_steps_state_as_it_runs(api: Api) -> None:
    created = api.post("/sdk/workflows", diamond()).json()
    answer = api.get(f"/sdk/workflows/{created['id']}").json()
    assert (answer["total"], answer["pending"], answer["finished_at"]) == (4, 4, None)
    states = {s["name"]: s["state"] for s in answer["steps"]}
    assert states == {"fetch": "waiting", "left": "blocked", "right": "blocked", "merge": "blocked"}
    after = {s["name"]: sorted(s["after"]) for s in answer["steps"]}
    assert after == {"fetch": [], "left": ["fetch"], "right": ["fetch"], "merge": ["left", "right"]}

    assert run_one().step == "fetch"
    answer = api.get(f"/sdk/workflows/{created['id']}").json()
    states = {s["name"]: s["state"] for s in answer["steps"]}
    assert states == {"fetch": "done", "left": "waiting", "right": "waiting", "merge": "blocked"}
    assert api.get(f"/sdk/jobs/{created['jids']['merge']}").json()["state"] == "blocked"

    for _ in range(3):
        run_one()
    answer = api.get(f"/sdk/workflows/{created['id']}").json()
    assert (answer["done"], answer["pending"]) == (4, 0)
    assert answer["steps_truncated"] is False
    assert answer["finished_at"] is not None


@pytest.mark.parametrize(
    ("steps", "field", "words"),
    [
        ([step("a", "b"), step("b", "c"), step("c", "a")], "steps[2].after", "a -> b -> c -> a"),
        ([step("a"), step("b", "b")], "steps[1].after", "cycle"),
        ([step("a"), step("b", "nope")], "steps[1].after", "'nope'"),
        ([step("a"), step("a")], "steps[1].name", "once"),
        ([step("a"), {**step("b"), "job_type": "no.such"}], "steps[1].job_type", "no.such"),
        ([step("a", options={"delay": "soon"})], "steps[0].options.delay", "delay"),
        ([step("a", options={"priority": 0})], "steps[0].options.priority", None),
        ([step("a", on_upstream_failure="explode")], "steps[0].on_upstream_failure", None),
        ([{**step("a"), "unique_key": "k"}], "steps[0].unique_key", None),
    ],
)
def test_a_bad_workflow_is_a_422_naming_the_step_and_writes_nothing(
    api: Api, steps: list[dict[str, object]], field: str, words: str | None
) -> None:
    before = table_counts()
    response = api.post("/sdk/workflows", {"name": "bad", "steps": steps})
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["error"] == "invalid_request"
    assert body["field"] == field, body
    if words:
        assert words in body["detail"], body
    assert table_counts() == before


def test_a_cycle_is_spelt_in_the_detail(api: Api) -> None:
    steps = [step("start"), step("a", "start", "c"), step("b", "a"), step("c", "b")]
    body = api.post("/sdk/workflows", {"name": "loop", "steps": steps}).json()
    assert body["field"].startswith("steps[") and body["field"].endswith("].after")
    assert "a -> c -> b -> a" in body["detail"] or "c -> b -> a -> c" in body["detail"], body


def test_a_long_chain_is_ordered_without_recursion(api: Api) -> None:
    steps = [step("s0")] + [step(f"s{i}", f"s{i - 1}") for i in range(1, 900)]
    response = api.post("/sdk/workflows", {"name": "long", "steps": steps[::-1]})
    assert response.status_code == 201, response.content
    assert Job.objects.filter(workflow_id=response.json()["id"], status="blocked").count() == 899


def test_workflow_scopes_and_queues(make_token, client_for) -> None:
    reader = client_for(make_token(scopes=("read",)))
    assert reader.post("/sdk/workflows", diamond()).status_code == 403
    narrow = client_for(make_token(scopes=("produce", "read"), queues=("other",)))
    response = narrow.post("/sdk/workflows", diamond())
    assert response.status_code == 403
    assert response.json()["field"].endswith(".options.queue")
    assert not Workflow.objects.exists() and not Job.objects.exists()

    created = client_for(make_token()).post("/sdk/workflows", diamond()).json()
    producer = client_for(make_token(scopes=("produce",)))
    assert producer.get(f"/sdk/workflows/{created['id']}").status_code == 403
    assert narrow.get(f"/sdk/workflows/{created['id']}").status_code == 403
    assert (
        client_for(make_token(scopes=("read",), queues=("gw",)))
        .get(f"/sdk/workflows/{created['id']}")
        .status_code
        == 200
    )


def test_unknown_ids_are_404(api: Api) -> None:
    for path in ("/sdk/batches/999999", "/sdk/workflows/999999", f"/sdk/batches/{2**70}"):
        response = api.get(path)
        assert response.status_code == 404, (path, response.content)
        assert response.json()["error"] == "not_found"
    assert api.get("/sdk/batches/abc").status_code in (400, 404, 422)


def test_a_job_joins_an_open_batch_and_the_batch_is_read(api: Api) -> None:
    with jq.batch(on_finish="gw.echo") as b:
        jq.enqueue_job(None, "gw.echo", {"n": 0})
    response = api.post("/sdk/jobs", {"job_type": "gw.echo", "payload": {"n": 1}, "batch": b.id})
    assert response.status_code == 201, response.content
    assert Job.objects.get(jid=response.json()["jid"]).batch_id == b.id

    answer = api.get(f"/sdk/batches/{b.id}").json()
    assert answer["id"] == b.id
    assert (answer["total"], answer["pending"], answer["done"]) == (2, 2, 0)
    assert answer["sealed"] is True
    assert answer["on_finish"] == {"job_type": "gw.echo", "jid": ""}
    assert answer["on_success"] is None and answer["finished_at"] is None

    run_one()
    run_one()
    answer = api.get(f"/sdk/batches/{b.id}").json()
    assert (answer["done"], answer["pending"]) == (2, 0) and answer["finished_at"]
    callback = Batch.objects.get(pk=b.id).finish_jid
    assert answer["on_finish"] == {"job_type": "gw.echo", "jid": callback}
    assert Job.objects.get(jid=callback).payload["batch"] == b.id


def test_a_finished_batch_is_joined_by_nothing(api: Api) -> None:
    with jq.batch(on_finish="gw.echo") as b:
        jq.enqueue_job(None, "gw.echo")
    run_one()
    finished = Batch.objects.get(pk=b.id)
    assert finished.finished_at is not None and finished.finish_jid
    before = table_counts()
    response = api.post("/sdk/jobs", {"job_type": "gw.echo", "batch": b.id})
    assert response.status_code == 422, response.content
    assert response.json()["field"] == "batch" and "finished" in response.json()["detail"]
    with pytest.raises(InvalidRequest, match="finished"):
        jq.enqueue_job(None, "gw.echo", batch=b.id)
    assert table_counts() == before
    assert Batch.objects.get(pk=b.id).total == 1


def test_after_makes_a_job_wait_and_bad_links_are_422(api: Api) -> None:
    first = api.post("/sdk/jobs", {"job_type": "gw.echo"}).json()["jid"]
    response = api.post(
        "/sdk/jobs", {"job_type": "gw.echo", "after": [first], "on_upstream_failure": "skip"}
    )
    assert response.status_code == 201, response.content
    second = Job.objects.get(jid=response.json()["jid"])
    assert second.status == JobStatus.BLOCKED
    assert Dependency.objects.get(dependent=second).policy == "skip"
    run_one()
    second.refresh_from_db()
    assert second.status == JobStatus.INIT

    before = table_counts()
    for body, field in [
        ({"after": ["0" * 32]}, "after"),
        ({"after": ["not-a-jid"]}, "after[0]"),
        ({"after": []}, "after"),
        ({"batch": 987654}, "batch"),
        ({"batch": 0}, "batch"),
        ({"on_upstream_failure": "skip"}, "on_upstream_failure"),
    ]:
        response = api.post("/sdk/jobs", {"job_type": "gw.echo", **body})
        assert response.status_code == 422, (body, response.content)
        assert response.json()["field"] == field, (body, response.json())
    assert table_counts() == before


def test_the_bulk_route_refuses_batch_and_after(api: Api) -> None:
    first = api.post("/sdk/jobs", {"job_type": "gw.echo"}).json()["jid"]
    jobs = [{"job_type": "gw.echo"}, {"job_type": "gw.echo", "after": [first]}]
    response = api.post("/sdk/jobs/batch", {"jobs": jobs})
    assert response.status_code == 422
    assert response.json()["field"] == "jobs[1].after"
    assert Job.objects.count() == 1


def test_an_open_batch_takes_jobs_until_sealed_then_makes_its_callback(api: Api) -> None:
    body = {
        "on_finish": {"job_type": "gw.echo", "payload": {"k": 1}, "options": {"priority": 7}},
        "on_failure": {"job_type": "gw.echo", "options": {"queue": "gw-alerts"}},
    }
    response = api.post("/sdk/batches", body)
    assert response.status_code == 201, response.content
    opened = response.json()
    assert (opened["total"], opened["sealed"], opened["finished_at"]) == (0, False, None)
    assert opened["on_finish"] == {"job_type": "gw.echo", "jid": ""}
    batch_id = opened["id"]
    for n in range(2):
        answer = api.post("/sdk/jobs", {"job_type": "gw.echo", "payload": n, "batch": batch_id})
        assert answer.status_code == 201, answer.content
    run_one()
    run_one()
    state = api.get(f"/sdk/batches/{batch_id}").json()
    assert (state["done"], state["pending"], state["finished_at"]) == (2, 0, None)  # not sealed
    assert Batch.objects.get(pk=batch_id).finish_jid == ""

    sealed = api.post(f"/sdk/batches/{batch_id}/seal")
    assert sealed.status_code == 200, sealed.content
    state = sealed.json()
    assert state["sealed"] is True and state["finished_at"] is not None
    callback = Job.objects.get(jid=state["on_finish"]["jid"])
    assert (callback.priority, callback.queue) == (7, "gw")
    assert callback.payload == {
        "batch": batch_id,
        "counts": callback.payload["counts"],
        "payload": {"k": 1},
    }
    assert state["on_failure"] == {"job_type": "gw.echo", "jid": ""}
    assert api.post(f"/sdk/batches/{batch_id}/seal").status_code == 200  # again: nothing more
    assert Job.objects.filter(job_type="gw.echo").count() == 3
    refused = api.post("/sdk/jobs", {"job_type": "gw.echo", "batch": batch_id})
    assert refused.status_code == 422 and refused.json()["field"] == "batch"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"on_finish": {"job_type": "no.such"}}, "on_finish.job_type"),
        (
            {"on_success": {"job_type": "gw.echo", "options": {"delay": "soon"}}},
            "on_success.options.delay",
        ),
        (
            {"on_finish": {"job_type": "gw.echo", "options": {"run_at": "2030-01-01T00:00:00Z"}}},
            "on_finish.options.run_at",
        ),
        ({"on_finish": {"job_type": "gw.echo", "unknown": 1}}, "on_finish.unknown"),
        ({"queue": "bad/queue"}, "queue"),
    ],
)
def test_a_bad_batch_is_a_422_naming_the_field_and_writes_nothing(
    api: Api, body: dict[str, object], field: str
) -> None:
    before = table_counts()
    response = api.post("/sdk/batches", body)
    assert response.status_code == 422, response.content
    assert response.json()["field"] == field, response.json()
    assert table_counts() == before


def test_batch_scopes_and_queues(make_token, client_for, api: Api) -> None:
    reader = client_for(make_token(scopes=("read",)))
    assert reader.post("/sdk/batches", {}).status_code == 403
    narrow = client_for(make_token(scopes=("produce", "read"), queues=("gw",)))
    callback = {"job_type": "gw.echo", "options": {"queue": "elsewhere"}}
    response = narrow.post("/sdk/batches", {"on_finish": callback})
    assert response.status_code == 403 and response.json()["field"] == "on_finish.options.queue"
    response = narrow.post("/sdk/batches", {"on_finish": {"job_type": "gw.echo"}, "queue": "other"})
    assert response.status_code == 403 and response.json()["field"] == "queue"
    assert not Batch.objects.exists()

    batch_id = narrow.post("/sdk/batches", {"on_finish": {"job_type": "gw.echo"}}).json()["id"]
    assert reader.post(f"/sdk/batches/{batch_id}/seal").status_code == 403
    assert api.post("/sdk/batches/999999/seal").status_code == 404
    api.post("/sdk/jobs", {"job_type": "gw.echo", "queue": "other", "batch": batch_id})
    assert narrow.post(f"/sdk/batches/{batch_id}/seal").status_code == 403  # a job on "other"
    assert narrow.get(f"/sdk/batches/{batch_id}").status_code == 403

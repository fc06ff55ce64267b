"""The id verbs (docs/design.md#ids), the worker protocol and the Pro routes over HTTP."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from django.test import override_settings

from django_jobqueue.enqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus, Worker

IDS = "/sdk/queues/gw/ids"


@pytest.mark.django_db
def test_ids__add_set_update_cancel_get_list(api):
    assert api.post(f"{IDS}/chat:1:a/add", {"value": {"v": 1}, "delay": "1h"}).status_code == 201
    again = api.post(f"{IDS}/chat:1:a/add", {"value": {"v": 2}})
    assert (again.status_code, again.json()) == (200, {"added": False})
    assert api.post(f"{IDS}/chat:1:a/update", {"value": {"v": 3}}).json() == {"updated": True}
    got = api.get(f"{IDS}/chat:1:a")
    assert got.status_code == 200
    assert (got.json()["value"], got.json()["state"]) == ({"v": 3}, "scheduled")
    assert api.post(f"{IDS}/chat:1:b/set", {"value": 5}).json() == {"set": True}
    page = api.get("/sdk/queues/gw/jobs", {"prefix": "chat:1:", "limit": 1}).json()
    assert [job["id"] for job in page["jobs"]] == ["chat:1:a"]
    rest = api.get("/sdk/queues/gw/jobs", {"prefix": "chat:1:", "cursor": page["next"]}).json()
    assert [job["id"] for job in rest["jobs"]] == ["chat:1:b"] and rest["next"] is None
    assert api.post(f"{IDS}/chat:1:a/cancel").json() == {"cancelled": True}
    assert api.post(f"{IDS}/chat:1:a/cancel").json() == {"cancelled": False}
    assert api.post(f"{IDS}/chat:1:a/update", {"value": 1}).json() == {"updated": False}
    missing = api.get(f"{IDS}/chat:1:a")
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")


@pytest.mark.django_db
def test_ids__an_id_with_slashes_and_bad_input(api):
    assert api.post(f"{IDS}/a/b/c/add", {"value": 1}).status_code == 201
    assert api.get(f"{IDS}/a/b/c").json()["id"] == "a/b/c"
    assert api.post(f"{IDS}/x/add", {"value": 1, "delay": "never"}).json()["field"] == "delay"
    assert api.post(f"{IDS}/x/add", {"value": 1, "job_type": "no.such"}).status_code == 422


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field", "detail"),
    [
        ({"limit": "abc"}, "limit", "limit: "),
        ({"state": "sleeping"}, "state", "state must be one of "),
        ({"state": "after=x"}, "state", "state must be one of "),
        ({"prefix": "a\x00"}, "prefix", "A prefix "),
        ({"cursor": "zzz"}, "cursor", "cursor='zzz' is not a cursor of this list; "),
        ({"cursor": "zzz", "state": "failed"}, "cursor", "cursor='zzz' is not a cursor "),
    ],
)
def test_list__a_malformed_query_parameter_is_400_naming_it(api, query, field, detail):
    response = api.get("/sdk/queues/gw/jobs", query)
    assert response.status_code == 400, response.content
    body = response.json()
    assert (body["error"], body["field"]) == ("bad_request", field)
    assert body["detail"].startswith(detail), body["detail"]
    assert "after=" not in body["detail"] or field != "cursor"


@pytest.mark.django_db
def test_unique_locks__a_malformed_queue_parameter_is_400(admin_api, pro):
    response = admin_api.get("/sdk/unique-locks", {"queue": "a\x00"})
    assert response.status_code == 400, response.content
    assert (response.json()["error"], response.json()["field"]) == ("bad_request", "queue")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "path", "field", "detail"),
    [
        ("get", "/sdk/queues/a%00/ids/x", "queue", "queue"),
        ("post", "/sdk/queues/a%00/ids/x/add", "queue", "queue"),
        ("get", "/sdk/queues/" + "q" * 200 + "/jobs", "queue", "queue"),
        ("get", f"{IDS}/x%00", "id", "a job id"),
        ("post", f"{IDS}/x%00/set", "id", "a job id"),
        ("post", "/sdk/queues/a%00/pause", "queue", "queue"),
        ("delete", "/sdk/unique-locks/a%00/k", "queue", "queue"),
        ("delete", "/sdk/unique-locks/gw/k%00", "key", "a unique_key"),
    ],
)
def test_a_malformed_path_parameter_is_400_naming_it(admin_api, pro, method, path, field, detail):
    """As docs/gateway.md's table has it: a malformed path parameter is a 400, like a
    query parameter's; a body field's is a 422. Nothing is written."""
    call = getattr(admin_api, method)
    response = call(path, {"value": 1}) if method == "post" else call(path)
    assert response.status_code == 400, response.content
    body = response.json()
    assert (body["error"], body["field"]) == ("bad_request", field), body
    assert detail in body["detail"].lower(), body["detail"]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_ids__secure_values_are_hidden(api):
    api.post("/sdk/queues/gw-secure/ids/s/add", {"value": {"pin": 1234}})
    assert api.get("/sdk/queues/gw-secure/ids/s").json()["value"] is None
    page = api.get("/sdk/queues/gw-secure/jobs").json()
    assert page["jobs"][0]["value"] is None


def claim(api, **body):
    response = api.post("/sdk/worker/claim", {"queues": ["gw"], **body})
    assert response.status_code == 200, response.content
    return response.json()["jobs"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {"queues": ["gw\udba1"]},  # a lone surrogate: no database stores it
        {"queues": ["gw"], "job_types": ["gw.echo\x00"]},
        {"queues": ["gw"], "worker": "w\ud800"},
    ],
)
def test_worker__claim_with_unstorable_text_is_422_not_500(api, body):
    response = api.post("/sdk/worker/claim", body)
    assert response.status_code == 422, response.content
    assert response.json()["error"] == "invalid_request"


@pytest.mark.django_db
def test_worker__register_claim_heartbeat_complete(api):
    reg = api.post(
        "/sdk/worker/register",
        {"name": "node-1", "host": "h", "languages": ["typescript"], "queues": ["gw"]},
    )
    assert reg.status_code == 200 and reg.json()["lease_ms"] > 0
    worker = Worker.objects.get(name="node-1")
    assert (worker.kind, worker.languages, worker.queues) == ("gateway", ["typescript"], ["gw"])
    jid = enqueue_job("gw", "gw.echo", {"n": 1})["jid"]
    [job] = claim(api, worker="node-1")
    assert (job["jid"], job["payload"], job["attempt"]) == (jid, {"n": 1}, 1)
    token = job["lease_token"]
    beat = api.post(f"/sdk/worker/jobs/{jid}/heartbeat", {"lease_token": token})
    assert beat.json() == {"cancel_requested": False}
    api.post(f"/sdk/jobs/{jid}/cancel")
    beat = api.post(f"/sdk/worker/jobs/{jid}/heartbeat", {"lease_token": token})
    assert beat.json() == {"cancel_requested": True}
    done = api.post(f"/sdk/worker/jobs/{jid}/complete", {"lease_token": token, "result": [1]})
    assert done.json() == {"status": "done"}
    row = Job.objects.get(jid=jid)
    assert (row.status, row.result) == (JobStatus.DONE, [1])
    assert Worker.objects.get(name="node-1").done == 1


@pytest.mark.django_db
def test_worker__stop_marks_it_gone_keeps_its_counts(api, client_for, make_token):
    from django_jobqueue.store import workerstats

    assert api.post("/sdk/worker/register", {"name": "node-2", "queues": ["gw"]}).status_code == 200
    Worker.objects.filter(name="node-2").update(done=7)
    workerstats.register_worker("default", "host:1", kind="runworkers")
    # A token without the work scope, or not allowed the worker's queue, stops nothing.
    reader = client_for(make_token(scopes=("read",)))
    assert reader.post("/sdk/worker/stop", {"name": "node-2"}).status_code == 403
    other = client_for(make_token(queues=("elsewhere",)))
    assert other.post("/sdk/worker/stop", {"name": "node-2"}).status_code == 403
    assert [w.name for w in workerstats.live_workers("default")] == ["host:1", "node-2"]

    first = api.post("/sdk/worker/stop", {"name": "node-2"})
    assert (first.status_code, first.json()) == (200, {"name": "node-2", "stopped": True})
    assert [w.name for w in workerstats.live_workers("default")] == ["host:1"]
    row = Worker.objects.get(name="node-2")
    assert row.stopped_at is not None and row.done == 7
    again = api.post("/sdk/worker/stop", {"name": "node-2"})
    assert again.json() == {"name": "node-2", "stopped": False}
    # Only gateway workers, and only registered names.
    assert api.post("/sdk/worker/stop", {"name": "host:1"}).status_code == 404
    assert api.post("/sdk/worker/stop", {"name": "nobody"}).json()["error"] == "not_found"
    assert Worker.objects.get(name="host:1").stopped_at is None
    # A new registration under the name is live again.
    api.post("/sdk/worker/register", {"name": "node-2", "queues": ["gw"]})
    assert "node-2" in [w.name for w in workerstats.live_workers("default")]


@pytest.mark.django_db
def test_worker__fail_retries_then_dead_letters_and_cancelled(api):
    jid = enqueue_job("gw", "gw.echo", None, max_retry=1)["jid"]
    [job] = claim(api)
    failed = api.post(
        f"/sdk/worker/jobs/{jid}/fail", {"lease_token": job["lease_token"], "error": "boom"}
    )
    assert failed.json() == {"status": "retry"}
    Job.objects.filter(jid=jid).update(run_at=Job.objects.get(jid=jid).created_at)
    [job] = claim(api)
    final = api.post(
        f"/sdk/worker/jobs/{jid}/fail",
        {
            "lease_token": job["lease_token"],
            "error": "boom",
            "exception_class": "billing.errors.CardDeclined",
            "retry": False,
        },
    )
    assert final.json() == {"status": "error"}
    stored = Job.objects.get(jid=jid)
    assert stored.message == "CardDeclined: boom"  # as an in-process failure names it
    first, last = stored.errors
    assert (first["exception_class"], last["exception_class"]) == (
        "",  # the first report named no class
        "billing.errors.CardDeclined",
    )
    shown = api.get(f"/sdk/jobs/{jid}").json()["last_error"]
    assert shown["exception_class"] == "billing.errors.CardDeclined"
    other = enqueue_job("gw", "gw.echo", None)["jid"]
    [job] = claim(api)
    stop = api.post(
        f"/sdk/worker/jobs/{other}/fail", {"lease_token": job["lease_token"], "cancelled": True}
    )
    assert stop.json() == {"status": "cancelled"}


@pytest.mark.django_db
def test_worker__a_lost_lease_answers_409(api):
    jid = enqueue_job("gw", "gw.echo", None)["jid"]
    [job] = claim(api)
    for route, body in (("heartbeat", {}), ("complete", {"result": 1}), ("fail", {})):
        response = api.post(f"/sdk/worker/jobs/{jid}/{route}", {"lease_token": "x" * 32, **body})
        assert (response.status_code, response.json()["error"]) == (409, "lease_lost")
    api.post(f"/sdk/worker/jobs/{jid}/complete", {"lease_token": job["lease_token"]})
    late = api.post(f"/sdk/worker/jobs/{jid}/complete", {"lease_token": job["lease_token"]})
    assert late.status_code == 409
    assert Job.objects.get(jid=jid).status == JobStatus.DONE


@pytest.mark.django_db
def test_worker__job_types_filter_and_external_types(api):
    external = {"GATEWAY": {"JOB_TYPES": {"pdf.render": {"queue": "gw", "max_retry": 7}}}}
    with override_settings(JOBQUEUE=external):
        ext = api.post("/sdk/jobs", {"job_type": "pdf.render", "payload": {}}).json()["jid"]
        py = enqueue_job("gw", "gw.echo", None)["jid"]
        jobs = claim(api, job_types=["pdf.render"], limit=10)
        assert [job["jid"] for job in jobs] == [ext]
        assert jobs[0]["max_retry"] == 7
        assert Job.objects.get(jid=py).status == JobStatus.INIT


@pytest.mark.django_db(transaction=True)
def test_worker__long_poll_returns_when_a_job_is_enqueued(api):
    got: list = []
    waiting = threading.Event()

    def wait_for_job() -> None:
        try:
            waiting.set()
            got.extend(claim(api, wait_ms=30_000))
        finally:
            connections.close_all()

    thread = threading.Thread(target=wait_for_job)
    thread.start()
    waiting.wait()
    jid = enqueue_job("gw", "gw.echo", {"late": True})["jid"]
    thread.join(40)
    assert not thread.is_alive()
    assert [job["jid"] for job in got] == [jid]


@pytest.mark.django_db
def test_pro_routes_are_402_without_a_licence(admin_api):
    assert admin_api.get("/sdk/unique-locks").status_code == 402
    assert admin_api.delete("/sdk/unique-locks/gw/k").status_code == 402
    bulk = admin_api.post("/sdk/jobs/bulk", {"action": "retry", "queue": "gw"})
    assert (bulk.status_code, bulk.json()["error"]) == (402, "pro_required")


@pytest.mark.django_db
def test_pro_routes_with_a_licence(admin_api, api, pro):
    jid = api.post("/sdk/jobs", {"queue": "gw", "job_type": "gw.echo", "unique_key": "k/1"}).json()[
        "jid"
    ]
    locks = admin_api.get("/sdk/unique-locks", {"queue": "gw"}).json()["locks"]
    assert [(lock["jid"], lock["unique_key"], lock["mode"]) for lock in locks] == [
        (jid, "k/1", "while_locked")
    ]
    assert api.get("/sdk/unique-locks").status_code == 403
    released = admin_api.delete("/sdk/unique-locks/gw/k/1").json()
    assert released == {"released": True, "jid": jid}
    assert admin_api.get("/sdk/unique-locks").json()["locks"] == []
    Job.objects.filter(jid=jid).update(status=JobStatus.ERROR, waiting=False)
    bulk = admin_api.post("/sdk/jobs/bulk", {"action": "retry", "queue": "gw", "state": "failed"})
    assert bulk.json() == {"action": "retry", "changed": 1, "detail": {"dead": 1, "waiting": 0}}
    bulk = admin_api.post("/sdk/jobs/bulk", {"action": "cancel", "queue": "gw"})
    assert bulk.json()["detail"]["cancelled"] == 1

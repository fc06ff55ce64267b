"""Worker names belong to the token that registered them (docs/gateway.md "Worker names").

Another token cannot re-register, claim as or stop a worker (403, the row
unchanged) unless it has the ``admin`` scope on every queue of that worker; a
``work`` token that sends no name gets a generated one; a revoked owner frees the
name; two tokens racing to register one new name end with one owner, the other 403.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from django_jobqueue.models import ApiToken, Worker
from django_jobqueue.store.apitokens import revoke_token
from django_jobqueue.store.workerstats import register_worker
from tests.gateway.conftest import Api

pytestmark = pytest.mark.django_db

REGISTER = "/sdk/worker/register"


def _register(api, name, queues):
    return api.post(REGISTER, {"name": name, "queues": queues, "host": "h", "pid": 1})


def test_another_token_cannot_take_over_a_worker_name(make_token):
    owner = Api(make_token(queues=("ext",), scopes=("work",), name="ext-svc"))
    other = Api(make_token(queues=("emails",), scopes=("work",), name="emails-svc"))
    assert _register(owner, "node-1", ["ext"]).status_code == 200
    before = Worker.objects.values().get(name="node-1")

    response = _register(other, "node-1", ["emails"])
    assert response.status_code == 403, response.content
    assert response.json()["error"] == "forbidden"
    claim = other.post("/sdk/worker/claim", {"queues": ["emails"], "worker": "node-1"})
    assert claim.status_code == 403
    # Stopping: the token is not allowed the worker's queue, and does not own it.
    assert other.post("/sdk/worker/stop", {"name": "node-1"}).status_code == 403
    everywhere = Api(make_token(queues=("*",), scopes=("work",), name="broad"))
    assert everywhere.post("/sdk/worker/stop", {"name": "node-1"}).status_code == 403
    assert _register(everywhere, "node-1", ["ext"]).status_code == 403

    after = Worker.objects.values().get(name="node-1")
    assert after == before
    assert after["stopped_at"] is None and after["queues"] == ["ext"]

    assert _register(owner, "node-1", ["ext"]).status_code == 200
    assert (
        owner.post("/sdk/worker/claim", {"queues": ["ext"], "worker": "node-1"}).status_code == 200
    )
    assert owner.post("/sdk/worker/stop", {"name": "node-1"}).json()["stopped"] is True


def test_an_admin_on_every_queue_of_the_worker_may_act_on_it(make_token):
    owner = Api(make_token(queues=("ext", "ext2"), scopes=("work",)))
    assert _register(owner, "node-1", ["ext", "ext2"]).status_code == 200
    half_admin = Api(make_token(queues=("ext",), scopes=("admin",)))
    assert _register(half_admin, "node-1", ["ext"]).status_code == 403
    assert half_admin.post("/sdk/worker/stop", {"name": "node-1"}).status_code == 403
    admin = Api(make_token(queues=("ext*",), scopes=("admin",)))
    assert _register(admin, "node-1", ["ext", "ext2"]).status_code == 200
    assert admin.post("/sdk/worker/stop", {"name": "node-1"}).json()["stopped"] is True
    # The admin acted on it; the name is still the first token's.
    assert Worker.objects.get(name="node-1").owner_token_id == ApiToken.objects.order_by("pk")[0].pk


def test_a_runworkers_name_is_not_taken_over_the_gateway(make_token):
    register_worker("default", "host:42", kind="runworkers", queues=[])
    work = Api(make_token(scopes=("work",)))
    assert _register(work, "host:42", ["gw"]).status_code == 403
    assert Worker.objects.get(name="host:42").kind == "runworkers"
    admin_some = Api(make_token(queues=("gw",), scopes=("admin",)))
    assert _register(admin_some, "host:42", ["gw"]).status_code == 403


def test_a_work_token_without_a_name_gets_a_generated_one(make_token):
    api = Api(make_token(scopes=("work",), name="billing"))
    first = api.post(REGISTER, {"queues": ["gw"]})
    second = api.post(REGISTER, {"queues": ["gw"]})
    assert first.status_code == second.status_code == 200
    names = {first.json()["name"], second.json()["name"]}
    assert len(names) == 2 and all(name.startswith("billing-") for name in names)
    assert Worker.objects.filter(name__in=names, kind="gateway").count() == 2


def test_a_revoked_owner_frees_the_name(make_token):
    old = make_token(scopes=("work",), name="rotating")
    assert _register(Api(old), "node-9", ["gw"]).status_code == 200
    new = make_token(scopes=("work",), name="rotating-2")
    assert _register(Api(new), "node-9", ["gw"]).status_code == 403
    revoke_token(old)
    assert _register(Api(new), "node-9", ["gw"]).status_code == 200
    assert _register(Api(old), "node-9", ["gw"]).status_code == 401


def test_a_row_without_owner_is_taken_by_the_next_registration(make_token):
    register_worker("default", "legacy", kind="gateway", queues=["gw"])
    first = Api(make_token(scopes=("work",)))
    assert _register(first, "legacy", ["gw"]).status_code == 200
    assert _register(Api(make_token(scopes=("work",))), "legacy", ["gw"]).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_two_tokens_racing_for_one_new_name_end_with_one_owner(make_token):
    tokens = [make_token(scopes=("work",), name=f"racer-{n}") for n in range(4)]
    statuses: list[int] = []
    barrier = threading.Barrier(len(tokens))

    def race(token: str) -> None:
        try:
            barrier.wait(timeout=60)
            statuses.append(_register(Api(token), "contested", ["gw"]).status_code)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race, args=(token,)) for token in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(statuses) == [200, 403, 403, 403], statuses
    row = Worker.objects.select_related("owner_token").get(name="contested")
    assert row.owner_token is not None and row.owner_token.name.startswith("racer-")

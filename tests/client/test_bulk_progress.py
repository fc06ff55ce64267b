"""The Python client's ``bulk`` against a licensed live gateway (docs/console.md
"Search syntax"), and a heartbeat's ``progress`` (docs/console.md "Progress")."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from jobqueue_client import Client, InvalidRequest

from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store.licence import generate_key_pair, issue_licence
from tests.maintenance_helpers import make_job

from .conftest import SERVER_JOBQUEUE
from .live import live_gateway

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def pro_gateway_url(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    private_pem, public_pem = generate_key_pair()
    token = issue_licence(
        private_pem, licensee="Clients", expires_at=datetime.now(UTC) + timedelta(days=1)
    )
    config = {**SERVER_JOBQUEUE, "LICENCE_KEY": token, "LICENCE_PUBLIC_KEYS": [public_pem]}
    with django_db_blocker.unblock(), live_gateway(config) as url:
        yield url


def test_bulk__retries_what_the_filter_selects(pro_gateway_url, make_token):
    wanted = make_job(queue="gw", status=JobStatus.MAX_RETRY, payload={"customer_id": 42})
    other = make_job(queue="gw", status=JobStatus.MAX_RETRY, payload={"customer_id": 7})
    with Client(pro_gateway_url, make_token(scopes=("admin",))) as admin:
        answer = admin.bulk("retry", "queue:gw payload.customer_id:42")
        assert (answer.action, answer.changed, answer.detail) == (
            "retry",
            1,
            {"dead": 1, "waiting": 0},
        )
        with pytest.raises(InvalidRequest) as bad:
            admin.bulk("retry", "colour:red")
        assert bad.value.status == 422 and "colour:red" in str(bad.value)
    assert Job.objects.get(pk=wanted.pk).status == JobStatus.INIT
    assert Job.objects.get(pk=other.pk).status == JobStatus.MAX_RETRY


def test_heartbeat__sends_progress(pro_gateway_url, make_token):
    with Client(pro_gateway_url, make_token()) as client:
        jid = client.enqueue("gw.echo", {}, queue="gw").jid
        [job] = client.claim(["gw"], limit=1, wait_ms=0)
        assert job.jid == jid
        client.heartbeat(jid, job.lease_token, progress={"done": 2, "total": 5, "message": "x"})
    assert Job.objects.get(jid=jid).progress == {"done": 2, "total": 5, "message": "x"}


def test_worker_context_progress__reaches_the_job_while_it_runs(pro_gateway_url, make_token):
    import threading
    import time

    from jobqueue_client import Worker

    release = threading.Event()

    def slow(payload, ctx):
        for done in range(1, 4):
            ctx.progress(done, 3, message=f"step {done}")
        release.wait(30)
        return "ok"

    with Client(pro_gateway_url, make_token()) as client:
        jid = client.enqueue("gw.echo", {}, queue="gw").jid
        worker = Worker(
            {"gw.echo": slow},
            client=client,
            queues=["gw"],
            wait_ms=200,
            install_signals=False,
            name="py-progress-worker",
        )
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            deadline = time.monotonic() + 30
            while Job.objects.get(jid=jid).progress is None and time.monotonic() < deadline:
                time.sleep(0.1)
            # The latest report only (coalesced), within about a second of the calls.
            assert Job.objects.get(jid=jid).progress == {
                "done": 3,
                "total": 3,
                "message": "step 3",
            }
        finally:
            release.set()
            worker.stop()
            thread.join(30)
    assert Job.objects.get(jid=jid).status == JobStatus.DONE

"""The gateway's long-poll claim while the claim floor is on (store/claimfloor.py).

A waiting claim is woken by the watcher, which looks for due jobs with no floor; the
claim itself may start at its floor and miss a job written below it. The job must
still reach the waiting claim once a look below the floor is due (plus the watcher's
poll), not wait out the claim's whole ``wait_ms``. The thresholds are set by the
test, never timed beyond a generous bound.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections

from django_jobqueue import enqueue_job
from django_jobqueue.store import claimfloor
from tests.gateway.conftest import Api
from tests.test_claim_floor import no_look_due

CLAIM = "/sdk/worker/claim"


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
def test_long_poll__a_job_written_below_the_floor_reaches_the_waiting_claim(
    make_token, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claimfloor, "SLOW_CLAIM_MS", 0.0)
    no_look_due(monkeypatch)
    api = Api(make_token())
    enqueue_job("gw", "gw.echo", {"n": 1})
    first = api.post(CLAIM, {"queues": ["gw"], "wait_ms": 0}).json()["jobs"]
    assert len(first) == 1  # from the start: the floor on, at this job
    got: list = []

    def wait_for_job() -> None:
        try:
            began = time.monotonic()
            answer = api.post(CLAIM, {"queues": ["gw"], "wait_ms": 30_000})
            got.append((answer.json()["jobs"], time.monotonic() - began))
        finally:
            connections.close_all()

    thread = threading.Thread(target=wait_for_job)
    thread.start()
    time.sleep(0.5)  # it waits (its first claim, above the floor, found nothing)
    urgent = enqueue_job("gw", "gw.echo", {"n": 2}, priority=1)  # below the floor
    time.sleep(0.3)  # woken, it claimed above the floor again and missed it
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.5)
    thread.join(60)
    assert not thread.is_alive()
    ((jobs, waited_s),) = got
    assert [job["jid"] for job in jobs] == [urgent.jid]
    assert waited_s < 20  # far below the 30 s wait_ms, far above a poll and the gap

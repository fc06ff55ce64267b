"""Recovery at scale: one reap takes back every expired lease, in batches.

1,000 jobs held by dead workers (leases expired, nobody heartbeating) are all back
in the queue after one reap on each path that reaps: :func:`reaping.reap_expired`,
the gateway's claim route, and ``runworkers``' housekeeping. Each test waits on a
condition (no job left ``processing`` under a dead owner), never on a duration.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from django_jobqueue import reaping
from django_jobqueue.gateway import workers as gateway_workers
from django_jobqueue.models import Job, JobStatus
from tests.maintenance_helpers import job_fields
from tests.workers_helpers import run_workers

COUNT = 1_000
DEAD = [f"gateway:dead-{n}" for n in range(12)] + ["host:1:worker-dead"]


def _dead_fleet(queue: str = "orphans", count: int = COUNT) -> None:
    """``count`` jobs leased by dead owners whose leases expired a second ago; every
    tenth has no retry left (it becomes a dead letter)."""
    now = timezone.now()
    rows = [
        Job(
            **job_fields(
                queue=queue,
                job_type="maint.noop",
                status=JobStatus.PROCESSING,
                attempt=1,
                max_retry=0 if n % 10 == 0 else 3,
                lease_owner=DEAD[n % len(DEAD)],
                lease_token=uuid.uuid4().hex,
                lease_expires_at=now - timedelta(seconds=1),
                heartbeat_at=now - timedelta(seconds=30),
                started_at=now - timedelta(seconds=30),
            )
        )
        for n in range(count)
    ]
    Job._base_manager.bulk_create(rows, 500)


def _assert_all_back(queue: str = "orphans") -> None:
    jobs = Job.objects.filter(queue=queue)
    assert not jobs.filter(status=JobStatus.PROCESSING, lease_owner__in=DEAD).exists()
    assert jobs.filter(status=JobStatus.RETRY).count() == COUNT - COUNT // 10
    assert jobs.filter(status=JobStatus.MAX_RETRY).count() == COUNT // 10


@pytest.mark.django_db
def test_one_reap_takes_back_every_expired_lease_in_batches():
    _dead_fleet()
    assert reaping.reap_expired("default", limit=100) == COUNT
    _assert_all_back()
    assert reaping.reap_expired("default") == 0


@pytest.mark.django_db
def test_the_gateway_claim_route_reaps_every_expired_lease(api, monkeypatch):
    _dead_fleet()
    monkeypatch.setattr(gateway_workers, "_reaped_at", 0.0)  # due, as after one interval
    response = api.post("/sdk/worker/claim", {"queues": ["elsewhere"], "wait_ms": 0})
    assert response.status_code == 200, response.content
    _assert_all_back()


@pytest.mark.django_db(transaction=True)
def test_runworkers_reaper_takes_back_every_expired_lease():
    _dead_fleet()
    # A worker of another queue: its housekeeping reaps every queue, and in burst
    # mode it reaps once more when idle before it exits.
    idle = ("--min-sleep", "5", "--max-sleep", "100", "--ramp-time", "0", "--verbosity", "0")
    proc = run_workers("--burst", "--queues", "elsewhere", *idle, timeout_s=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    _assert_all_back()

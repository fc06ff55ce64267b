"""A gateway worker's reports reach the job statistics and its registry row as a
``runworkers`` foreman's do (docs/metrics.md): done, retried, failed (dead letters)."""

from __future__ import annotations

import time

import pytest

from django_jobqueue.enqueue import enqueue_job
from django_jobqueue.models import JobStat, JobStatus, JobTotal
from django_jobqueue.models import Worker as WorkerRow
from django_jobqueue.store.jobstats import process_stats

pytestmark = pytest.mark.django_db(transaction=True)


def _claim(api, worker: str) -> dict:
    response = api.post("/sdk/worker/claim", {"queues": ["gw"], "worker": worker})
    assert response.status_code == 200, response.content
    [job] = response.json()["jobs"]
    return job


def test_reports__counted_in_the_statistics_and_the_worker_row(api, monkeypatch):
    monkeypatch.setattr(process_stats, "flush_timer", False)  # written below
    assert api.post("/sdk/worker/register", {"name": "node-1", "queues": ["gw"]}).status_code == 200
    enqueue_job("gw", "gw.echo", {"n": 1})
    enqueue_job("gw", "gw.echo", {"n": 2}, max_retry=1)
    job = _claim(api, "node-1")
    done = api.post(f"/sdk/worker/jobs/{job['jid']}/complete", {"lease_token": job["lease_token"]})
    assert done.json()["status"] == JobStatus.DONE
    job = _claim(api, "node-1")
    body = {"lease_token": job["lease_token"], "error": "boom"}
    failed = api.post(f"/sdk/worker/jobs/{job['jid']}/fail", body)
    assert failed.json()["status"] == JobStatus.RETRY
    row = WorkerRow.objects.get(name="node-1")
    assert (row.done, row.failed) == (1, 0)  # a retried attempt is no dead letter
    job = _claim_after_backoff(api, "node-1", job["jid"])
    body = {"lease_token": job["lease_token"], "error": "boom again"}
    failed = api.post(f"/sdk/worker/jobs/{job['jid']}/fail", body)
    assert failed.json()["status"] == JobStatus.MAX_RETRY
    row = WorkerRow.objects.get(name="node-1")
    assert (row.done, row.failed) == (1, 1)

    assert process_stats.flush("default") >= 1
    total = JobTotal.objects.get(queue="gw", job_type="gw.echo")
    assert (total.done, total.retried, total.failed) == (1, 1, 1)
    timed = sum(getattr(total, f) for f in ("le_10", "le_100", "le_1000", "le_10000"))
    assert timed + total.le_60000 + total.le_300000 + total.le_inf == 3
    picked = total.pickup_le_100 + total.pickup_le_1000 + total.pickup_le_10000
    assert picked + total.pickup_le_60000 >= 3  # a claim each, the retry included
    assert sum(JobStat.objects.filter(queue="gw").values_list("done", flat=True)) == 1


def _claim_after_backoff(api, worker: str, jid: str) -> dict:
    """Claim ``jid`` again once its retry's backoff (about 1 s) is due."""
    deadline = time.monotonic() + 60
    while True:
        response = api.post("/sdk/worker/claim", {"queues": ["gw"], "worker": worker})
        jobs = response.json()["jobs"]
        if jobs:
            [job] = jobs
            assert job["jid"] == jid
            return job
        assert time.monotonic() < deadline, "the retry never came due"
        time.sleep(0.2)

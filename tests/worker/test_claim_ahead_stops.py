"""The claim-ahead under stops: short jobs (the adaptive prefetch on), stops
and forced stops at random points of a drain, per-type limits under it."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from django_jobqueue import enqueue_many
from django_jobqueue.models import Job, JobStatus
from tests.testapp.jobtypes import worker as worker_jobs
from tests.testapp.models import RunRecord
from tests.worker.test_runner_chain import check_once_and_nothing_leased, foreman

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("force", [False, True], ids=["stop", "forced"])
@pytest.mark.parametrize("seed", range(4))
def test_stop_at_a_random_point_of_a_short_job_drain(force: bool, seed: int) -> None:
    rng = random.Random(seed)
    enqueue_many([{"job_type": "worker.record", "payload": {"label": str(i)}} for i in range(600)])
    f = foreman(concurrency=4, shutdown_timeout_ms=3000)
    thread = threading.Thread(target=f.run, kwargs={"install_signals": False})
    thread.start()
    target = rng.randrange(5, 300)
    deadline = time.monotonic() + 30
    while RunRecord.objects.count() < target and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(rng.random() * 0.01)
    f.stop(force=force)
    thread.join(30)
    assert not thread.is_alive()
    check_once_and_nothing_leased()
    if not force:  # a graceful stop finishes every job it started
        assert Job.objects.filter(status=JobStatus.DONE).count() == RunRecord.objects.count()


def test_limits_hold_with_the_adaptive_prefetch() -> None:
    worker_jobs.limited_max = 0
    jobs: list[dict[str, Any]] = []
    for i in range(300):
        if i % 5 == 0:
            jobs.append({"job_type": "worker.limited", "payload": {"s": 0.002}})
        else:
            jobs.append({"job_type": "worker.record", "payload": {"label": str(i)}})
    enqueue_many(jobs)
    f = foreman(concurrency=4, burst=True)
    thread = threading.Thread(target=f.run, kwargs={"install_signals": False})
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    assert worker_jobs.limited_max == 1
    assert Job.objects.exclude(status=JobStatus.DONE).count() == 0
    check_once_and_nothing_leased()

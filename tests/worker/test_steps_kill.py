"""Resumable steps under real ``runworkers`` processes SIGKILLed between steps and in
the middle of a step's cursor (docs/workflows.md "Resumable steps")."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from tests.testapp.models import RunRecord
from tests.workers_helpers import run_workers

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_ARGS = ("--lease", "2000", "--concurrency", "1", "--ramp-time", "0", "--verbosity", "2")


def wait_for(predicate: Callable[[], bool], timeout_s: float = 90) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def kill_when(ready: Callable[[], bool]) -> None:
    """Start a ``runworkers``, SIGKILL it once ``ready()`` holds, and wait until the
    lease of the job it held has expired by the database clock."""
    proc = run_workers(*WORKER_ARGS, wait=False)
    try:
        reached = wait_for(ready)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=90)
    assert reached, err[-3000:]
    assert wait_for(lambda: Job.objects.lease_expired().exists()), err[-3000:]


def ship_cursor(jid: str) -> object:
    steps = Job.objects.get(jid=jid).steps or []
    return steps[2]["cursor"] if len(steps) > 2 else None


def test_sigkill_between_steps__each_steps_write_happens_once_and_the_job_ends_done(
    no_backoff,
):
    # Attempt 1 sleeps after "reserve" is done; attempt 2 sleeps after the ship
    # step's cursor moved past its second item: each is killed there.
    payload = {"items": 4, "pauses": {"after-reserve": 1, "item-1": 2}}
    jid = enqueue_job(None, "steps.pay", payload)["jid"]

    kill_when(lambda: RunRecord.objects.filter(jid=jid, label="reserve").exists())
    assert [entry["name"] for entry in Job.objects.get(jid=jid).steps] == ["reserve"]

    kill_when(lambda: ship_cursor(jid) == 2)
    assert Job.objects.get(jid=jid).status == JobStatus.PROCESSING

    proc = run_workers("--burst", *WORKER_ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]

    job = Job.objects.get(jid=jid)
    assert job.status == JobStatus.DONE
    assert job.attempt == 3
    assert [error["message"].startswith("lease expired") for error in job.errors] == [True] * 2
    records = list(RunRecord.objects.filter(jid=jid).values_list("label", "attempt"))
    # Every step's write committed exactly once, by the attempt that got past it.
    steps = ("reserve", "charge", "item-0", "item-1", "item-2", "item-3")
    assert Counter(label for label, _attempt in records) == dict.fromkeys(steps, 1)
    assert dict(records) == {
        "reserve": 1,
        "charge": 2,
        "item-0": 2,
        "item-1": 2,
        "item-2": 3,
        "item-3": 3,
    }
    assert job.result == {
        "reservation": {"reservation": f"r-{jid}", "attempt": 1},
        "charge": {"charge": f"c-r-{jid}", "attempt": 2},
        "shipped": 4,
    }

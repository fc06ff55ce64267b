"""The foreman stores a handler's progress with its heartbeats while the job runs, the
latest report only and at most once a second per job (docs/console.md "Progress")."""

from __future__ import annotations

import threading
import time

import pytest

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from tests.workers_helpers import drain

pytestmark = pytest.mark.django_db(transaction=True)


def test_progress__moves_while_the_job_runs_at_most_once_a_second():
    jid = enqueue_job(None, "worker.progress", {"steps": 4, "step_s": 0.7})["jid"]
    outcome: dict[str, int] = {}
    runner = threading.Thread(target=lambda: outcome.update(drain(concurrency=1)))
    started = time.monotonic()
    runner.start()
    seen: list[dict] = []
    while runner.is_alive():
        progress = Job.objects.get(jid=jid).progress
        if progress and (not seen or seen[-1] != progress):
            seen.append(progress)
        time.sleep(0.05)
    runner.join()
    elapsed = time.monotonic() - started

    assert outcome == {"done": 1}
    assert Job.objects.get(jid=jid).status == JobStatus.DONE
    dones = [p["done"] for p in seen]
    assert len(dones) >= 2 and dones == sorted(dones)  # the bar moved, forward
    assert all(p["total"] == 4 and p["message"] == f"step {p['done']}" for p in seen)
    assert len(seen) <= elapsed + 1  # at most one stored report a second

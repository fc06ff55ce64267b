"""A real runworkers drain of 500 jobs while the test kills its sessions at random moments.

Every job ends done with its result stored, none is left processing; a run the
kill cut short may run again (counted: RunRecord rows beyond one per job), within
the job's retries.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from django.db import DatabaseError, connection

from django_jobqueue import enqueue_many
from django_jobqueue.models import Job, JobStatus
from tests.testapp.models import RunRecord
from tests.worker.test_reconnect import kill_other_sessions
from tests.workers_helpers import run_workers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql", "mysql")]

JOBS = 500


def test_drain_of_500_under_random_session_kills__none_lost_none_left_processing() -> None:
    enqueue_many([{"job_type": "worker.record", "payload": {"label": str(n)}} for n in range(JOBS)])
    rng = random.Random(20261201)  # noqa: S311 - kill moments, not secrets
    proc = run_workers(
        "--burst", "--concurrency", "4", "--lease", "3000", "--min-sleep", "20",
        "--max-sleep", "200", "--verbosity", "0", wait=False,
    )  # fmt: skip
    kills: list[int] = []
    stop = threading.Event()

    def killer() -> None:
        try:
            while not stop.is_set():
                time.sleep(rng.uniform(0.02, 0.4))
                try:
                    kills.append(kill_other_sessions())
                except DatabaseError:
                    pass
        finally:
            connection.close()

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        stop.set()
        thread.join(30)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        connection.close()  # the killer ended this thread's session too
    # A burst may exit while a job's lease (cut short by a kill) has yet to expire:
    # drain what is left, without kills, so every job has its end.
    time.sleep(3.5)
    rest = run_workers("--burst", "--concurrency", "2", "--lease", "3000", "--verbosity", "0")
    assert rest.returncode == 0, rest.stderr[-3000:]
    statuses = Counter(Job.objects.values_list("status", flat=True))
    assert statuses == {JobStatus.DONE: JOBS}, (statuses, err[-3000:])
    assert sum(kills) > 0
    assert proc.returncode == 0, err[-3000:]  # the kills never ended the worker
    missing = Job.objects.filter(status=JobStatus.DONE, result__isnull=True).count()
    assert missing == 0
    runs = Counter(RunRecord.objects.values_list("jid", flat=True))
    assert len(runs) == JOBS
    twice = sum(1 for n in runs.values() if n > 1)
    print(
        f"kills={sum(kills)} rounds={len(kills)} run more than once={twice} exit={proc.returncode}"
    )  # noqa: T201
    assert max(runs.values()) <= 4  # max_retry=3: at most four runs

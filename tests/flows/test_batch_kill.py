"""A 2,000-job batch drained by 4 ``runworkers`` processes, one SIGKILLed twice: each
callback runs exactly once, after every job ended (docs/workflows.md "Guarantees")."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable

import pytest

import django_jobqueue as jq
from django_jobqueue.models import Job, JobStatus
from tests.testapp.models import RunRecord
from tests.workers_helpers import StartedWorkers, stop_all

pytestmark = pytest.mark.django_db(transaction=True)

JOBS = 2_000
WORKER_ARGS = ("--concurrency", "2", "--lease", "3000", "--heartbeat", "500",
               "--ramp-time", "0", "--min-sleep", "5", "--max-sleep", "100",
               "--verbosity", "1")  # fmt: skip


def wait_for(check: Callable[[], bool], timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def ended(batch_id: int) -> int:
    row = jq.get_batch(batch_id)
    assert row is not None
    return row.done + row.failed + row.cancelled


def leased_to(owner: str) -> list[int]:
    """Primary keys of the jobs running under a lease of the worker process whose names
    start ``owner`` (``host:pid:``)."""
    return list(
        Job.objects.filter(status=JobStatus.PROCESSING, lease_owner__startswith=owner).values_list(
            "pk", flat=True
        )
    )


def test_callbacks_run_once_while_a_worker_is_sigkilled_twice() -> None:
    workers = [StartedWorkers(*WORKER_ARGS) for _ in range(4)]
    try:
        for worker in workers:
            worker.wait_started()
        with jq.batch(
            on_finish=jq.signature("flows.callback", {"kind": "finish"}),
            on_success=jq.signature("flows.callback", {"kind": "success"}),
            on_failure=jq.signature("flows.callback", {"kind": "failure"}),
        ) as b:
            jq.enqueue_many([{"job_type": "flows.tick"}] * JOBS)
        # A job taken back from the first victim goes back to its place in claim
        # order and may be held by the second victim too: counted per job.
        held_at_death: Counter[int] = Counter()
        for share in (0.25, 0.6, 0.7, 0.8):
            if share > 0.6 and held_at_death:
                break  # two kills, and one landed on a lease: the later two are spares
            wait_for(lambda share=share: ended(b.id) >= JOBS * share)
            victim = workers.pop(0)
            # Killed while it holds a lease: a job ends between two looks at the table,
            # so the kill waits for a look that finds one. What the dead process still
            # holds is counted after its death, when it can no longer change.
            owner = f"{socket.gethostname()}:{victim.process.pid}:"
            wait_for(lambda owner=owner: bool(leased_to(owner)) or ended(b.id) >= JOBS)
            os.kill(victim.process.pid, signal.SIGKILL)
            victim.process.wait(timeout=30)
            victim._close()
            held_at_death.update(leased_to(owner))
            # Its replacement starts while the drain goes on: waiting for its start
            # here would let the others finish the batch before the next kill.
            workers.append(StartedWorkers(*WORKER_ARGS))
        for worker in workers:
            worker.wait_started()
        wait_for(lambda: RunRecord.objects.filter(label__startswith="callback:").count() >= 2)
        wait_for(lambda: not Job.objects.exclude(status=JobStatus.DONE).exists())
    finally:
        outcomes = stop_all(workers)
    assert all(code == 0 for code, _err in outcomes), outcomes

    row = jq.get_batch(b.id)
    assert row.counts() == {"total": JOBS, "done": JOBS, "failed": 0, "cancelled": 0, "pending": 0}
    # Each callback made exactly once: one job each, its jid stored on the batch's row.
    callbacks = Job.objects.filter(job_type="flows.callback")
    assert sorted(callbacks.values_list("jid", flat=True)) == sorted(
        [row.finish_jid, row.success_jid]
    )
    assert not row.failure_jid
    runs = RunRecord.objects.filter(label__startswith="callback:")
    assert sorted(set(runs.values_list("label", flat=True))) == [
        "callback:finish",
        "callback:success",
    ]
    # And run once; on a loaded machine a callback's lease may expire while it runs
    # (heartbeat every 500 ms, lease 3 s), and the reaper's retry then runs it again,
    # as any job: never twice in one attempt, and no more than its lost leases allow.
    for callback in callbacks:
        attempts = list(runs.filter(jid=callback.jid).values_list("attempt", flat=True))
        lost = sum("lease expired" in error["message"] for error in callback.errors or [])
        assert len(attempts) == len(set(attempts)) and 1 <= len(attempts) <= 1 + lost
    assert Job.objects.filter(batch_id=b.id, status=JobStatus.DONE).count() == JOBS
    assert Job.objects.count() == JOBS + 2
    # Where a kill landed while its victim held leases, the reaper took those jobs back.
    reaped = {
        pk: errors
        for pk, errors in Job.objects.filter(batch_id=b.id).values_list("pk", "errors")
        if errors
    }
    assert held_at_death
    for pk, times in held_at_death.items():
        assert sum("lease expired" in error["message"] for error in reaped.get(pk, [])) >= times
    assert all("lease expired" in errors[-1]["message"] for errors in reaped.values())
    finish = Job.objects.get(jid=row.finish_jid)
    assert finish.payload["counts"]["done"] == JOBS

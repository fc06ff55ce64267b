"""The worker wired to the registry, pauses and stats.

Real ``runworkers`` subprocesses where a process matters: a pause seen by a running
worker, an idle worker live in ``jobqueue status`` and the console, a SIGKILLed one
gone after three heartbeats, the stats table after a drain by two processes. No
assertion on a duration: waits are for states, with generous limits.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.db.models import Sum
from django.test import Client, override_settings
from django.urls import reverse

from django_jobqueue import enqueue_job, storage
from django_jobqueue.models import Job, JobStat, JobStatus, Worker
from django_jobqueue.store import limits, pauses
from django_jobqueue.store.pauses import paused_queues
from django_jobqueue.store.workerstats import BUCKET_FIELDS, gone_workers, live_workers
from django_jobqueue.worker.housekeeping import package_version
from tests.testapp.models import RunRecord
from tests.worker.test_batches import STATEMENTS
from tests.workers_helpers import run_workers

pytestmark = pytest.mark.django_db(transaction=True)

#: Short heartbeats, so "gone after three" comes in about 6 s, yet a worker stalled
#: for a few seconds by a loaded machine still counts as live (3 x 200 ms did not
#: leave it even half a second); a 30 s lease, so such a stall never reaps a job and
#: runs it twice (the tests count runs). No retry backoff.
FAST = {"HEARTBEAT_MS": 2_000, "LEASE_MS": 30_000, "BACKOFF_BASE_MS": 0, "BACKOFF_JITTER": 0}
IDLE_WORKER = ("--min-sleep", "5", "--max-sleep", "100", "--ramp-time", "0", "--verbosity", "0")


@pytest.fixture(autouse=True)
def _fresh_pause_cache() -> Iterator[None]:
    pauses.clear_cache()
    yield
    pauses.clear_cache()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 90) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    """Signal ``proc``, wait for it and return its stderr."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
    try:
        _out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
    return err or ""


def done(jids: list[str]) -> int:
    return Job.objects.filter(jid__in=jids, status=JobStatus.DONE).count()


def enqueue(queue: str, count: int, job_type: str = "worker.record") -> list[str]:
    return [enqueue_job(queue, job_type, {"label": f"{queue}-{i}"})["jid"] for i in range(count)]


# Pause: the claim --------------------------------------------------------------------


def test_claim__skips_paused_queues_in_one_statement(django_assert_num_queries: Any) -> None:
    held = enqueue("held", 2)
    other = enqueue("other", 2)
    pauses.pause_queue("default", "held", by="test")
    assert paused_queues("default") == {"held"}  # cached from here on
    with django_assert_num_queries(0):
        # Every queue asked for is paused: nothing to send.
        assert storage.claim("default", owner="t", limit=5, queues=["held"]) == []
    named = storage.claim("default", owner="t", limit=5, queues=["held", "other"])
    assert sorted(j.jid for j in named) == sorted(other)
    enqueue("other", 1)
    paused_queues("default")  # still cached, or read again now: not inside the claim
    limits.active("default")  # the limits in force, likewise (none: the plain claim)
    with django_assert_num_queries(STATEMENTS[connection.vendor]):
        anywhere = storage.claim("default", owner="t", limit=5)  # queue NOT IN (...)
    assert [j.queue for j in anywhere] == ["other"]
    assert Job.objects.filter(jid__in=held, waiting=True, attempt=0).count() == 2
    pauses.resume_queue("default", "held")
    assert sorted(j.jid for j in storage.claim("default", owner="t", limit=5)) == sorted(held)


def test_enqueue__into_a_paused_queue_still_works() -> None:
    pauses.pause_queue("default", "held", by="test")
    (jid,) = enqueue("held", 1)
    job = Job.objects.get(jid=jid)
    assert (job.queue, job.status, job.waiting) == ("held", JobStatus.INIT, True)


# Pause: a running worker ---------------------------------------------------------------


@override_settings(JOBQUEUE=FAST)
def test_pause__a_running_worker_stops_claiming_within_a_second_and_resume_runs_them() -> None:
    proc = run_workers("--concurrency", "2", *IDLE_WORKER, wait=False)
    try:
        # The worker claims from "held" first, so its cache once held it unpaused.
        warm = enqueue("held", 1)
        assert wait_for(lambda: done(warm) == 1), stop(proc)[-3000:]
        pauses.pause_queue("default", "held", by="test")
        time.sleep(1.0)  # the promise: every worker sees a pause within a second
        held = enqueue("held", 10)
        other = enqueue("other", 10)
        assert wait_for(lambda: done(other) == 10), stop(proc)[-3000:]
        # Run it a while longer: one more job of another queue, claimed after the rest.
        later = enqueue("other", 1)
        assert wait_for(lambda: done(later) == 1), stop(proc)[-3000:]
        held_jobs = Job.objects.filter(jid__in=held)
        assert held_jobs.filter(status=JobStatus.INIT, waiting=True, attempt=0).count() == 10
        assert not RunRecord.objects.filter(jid__in=held).exists()
        pauses.resume_queue("default", "held")
        assert wait_for(lambda: done(held) == 10), stop(proc)[-3000:]
    finally:
        err = stop(proc)
    assert proc.returncode == 0, err[-3000:]
    assert RunRecord.objects.filter(jid__in=held).count() == 10  # each ran once


def test_pause__a_burst_drain_leaves_a_paused_queue_and_returns() -> None:
    held = enqueue("held", 3)
    other = enqueue("other", 3)
    pauses.pause_queue("default", "held", by="test")
    proc = run_workers("--burst", *IDLE_WORKER, timeout_s=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert done(other) == 3
    assert Job.objects.filter(jid__in=held, status=JobStatus.INIT, attempt=0).count() == 3


@override_settings(JOBQUEUE={"GATEWAY": {"JOB_TYPES": {"ext.render": {"queue": "shared"}}}})
def test_burst__leaves_gateway_job_types_to_gateway_workers() -> None:
    """runworkers claims no job of a gateway job type (no Python handler), even on a
    queue it serves, and its burst does not wait for them."""
    python_jobs = enqueue("shared", 3)
    external = [enqueue_job("shared", "ext.render", {"n": n})["jid"] for n in range(3)]
    proc = run_workers("--burst", *IDLE_WORKER, timeout_s=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert done(python_jobs) == 3
    assert Job.objects.filter(jid__in=external, status=JobStatus.INIT, attempt=0).count() == 3


# Registry -------------------------------------------------------------------------------


def _mine(pid: int) -> list[Worker]:
    return [w for w in live_workers("default") if w.pid == pid]


@override_settings(JOBQUEUE=FAST)
def test_registry__idle_worker_is_live_in_status_and_console_then_gone_after_sigkill() -> None:
    proc = run_workers("--concurrency", "3", "--queue", "mail", *IDLE_WORKER, wait=False)
    try:
        assert wait_for(lambda: bool(_mine(proc.pid))), stop(proc)[-3000:]
        (worker,) = _mine(proc.pid)
        assert worker.name == f"{socket.gethostname()}:{proc.pid}"
        assert (worker.kind, worker.host, worker.queues) == (
            "runworkers",
            socket.gethostname(),
            ["mail"],
        )
        assert (worker.concurrency, worker.busy, worker.done, worker.failed) == (3, 0, 0, 0)
        assert worker.version == package_version() != ""
        # Idle, it still beats: its last-seen time moves on.
        assert wait_for(
            lambda: Worker.objects.get(pk=worker.pk).last_seen_at > worker.last_seen_at
        ), stop(proc)[-3000:]

        out = StringIO()
        call_command("jobqueue", "status", stdout=out)
        assert "Live workers: 1" in out.getvalue()
        (line,) = [x for x in out.getvalue().splitlines() if x.startswith(worker.name)]
        assert line.split()[1:6] == ["runworkers", "mail", "0", "3", "0"]

        client = Client()
        client.force_login(User.objects.create_user("staff", is_staff=True))
        overview = client.get(reverse("django_jobqueue_console:overview")).content.decode()
        assert "1 live worker." in overview
        page = client.get(reverse("django_jobqueue_console:workers")).content.decode()
        assert worker.name in page and "Live (1)" in page
    finally:
        stop(proc, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    # Nothing beats for it now: three heartbeats on, it is gone (and stays in the table).
    assert wait_for(lambda: not _mine(proc.pid))
    assert worker.name in [w.name for w in gone_workers("default")]
    assert Worker.objects.filter(name=worker.name).exists()
    out = StringIO()
    call_command("jobqueue", "status", "--json", stdout=out)
    assert '"live_workers": []' in out.getvalue()


# Stats ----------------------------------------------------------------------------------


@override_settings(JOBQUEUE=FAST)
def test_stats__a_drain_by_two_processes_writes_counts_matching_the_outcomes() -> None:
    ok = enqueue("mail", 40)
    enqueue("mail", 3, "worker.fatal")  # fails for good at once
    enqueue("mail", 2, "worker.fail")  # retried, then fails for good
    proc = run_workers("--burst", "--processes", "2", "--concurrency", "3", *IDLE_WORKER)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert done(ok) == 40
    jobs = Job.objects.filter(queue="mail")
    dead = jobs.filter(status__in=[JobStatus.ERROR, JobStatus.MAX_RETRY]).count()
    attempts = jobs.aggregate(n=Sum("attempt"))["n"]
    assert dead == 5

    rows = JobStat.objects.filter(queue="mail")
    by_type = {
        t: rows.filter(job_type=t).aggregate(d=Sum("done"), f=Sum("failed"), r=Sum("retried"))
        for t in ("worker.record", "worker.fatal", "worker.fail")
    }
    assert by_type["worker.record"] == {"d": 40, "f": 0, "r": 0}
    assert by_type["worker.fatal"] == {"d": 0, "f": 3, "r": 0}
    fail = by_type["worker.fail"]
    assert (fail["d"], fail["f"]) == (0, 2) and fail["r"] >= 2
    # Each attempt has one outcome, and one histogram bucket.
    totals = rows.aggregate(
        d=Sum("done"), f=Sum("failed"), r=Sum("retried"), **{b: Sum(b) for b in BUCKET_FIELDS}
    )
    assert totals["d"] + totals["f"] + totals["r"] == attempts
    assert sum(totals[b] for b in BUCKET_FIELDS) == attempts

    # Each process's last beat carries its totals: together, every outcome once.
    workers = Worker.objects.all()
    assert workers.count() == 2
    assert workers.aggregate(d=Sum("done"), f=Sum("failed")) == {"d": 40, "f": 5}
    assert not workers.filter(busy__gt=0).exists()

"""Flow-control limits raced by real ``runworkers`` processes (docs/limits.md).

A sampler thread, on a connection of its own, reads the ``processing`` rows per key
every 10 ms while the workers drain; the tests assert what it saw (never more in
flight than the limit), that every job ran exactly once, that a limited type does
not hold back an unlimited one in the same queue, and that a SIGKILLed worker's slot
comes back with its reaped lease. No assertion on a duration.

``JOBQUEUE_TEST_LIMITS_FULL=1`` runs the race at the size docs/limits.md quotes
(8 processes x 4 threads, 5,000 jobs of 50 keys); the default is smaller, for the
shared test machine.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections, transaction
from django.test import override_settings

from django_jobqueue import enqueue_many
from django_jobqueue.core.limitspec import Limit
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.storage_limits import key_sql
from django_jobqueue.store import limits
from tests.testapp.models import RunRecord
from tests.workers_helpers import run_workers

pytestmark = pytest.mark.django_db(transaction=True)

FULL = os.environ.get("JOBQUEUE_TEST_LIMITS_FULL") == "1"
IDLE_WORKER = ("--min-sleep", "5", "--max-sleep", "100", "--ramp-time", "0", "--verbosity", "0")
#: Leases long enough that no lease of a live worker expires under 32 threads on SQLite's
#: one writer: a job runs twice only if its worker died (delivery is at least once).
RACE = {"HEARTBEAT_MS": 2_000, "LEASE_MS": 30_000, "BACKOFF_BASE_MS": 0, "BACKOFF_JITTER": 0}
#: A short lease, for the test of a SIGKILLed worker's slot.
FAST = {"HEARTBEAT_MS": 1_000, "LEASE_MS": 3_000, "BACKOFF_BASE_MS": 0, "BACKOFF_JITTER": 0}


@pytest.fixture(autouse=True)
def _fresh_limits() -> Iterator[None]:
    limits.clear_cache()
    yield
    limits.clear_cache()


class Sampler:
    """Count ``processing`` jobs per ``limit_key`` (and in all) every ``every_s``
    seconds on a connection of its own; keep the largest count seen of each."""

    def __init__(self, every_s: float = 0.01, where: str = "", by: Limit | None = None) -> None:
        self.every_s = every_s
        self.where = where
        #: The key counted: ``limit_key``, or the one ``by``'s partition reads.
        self.by = by or Limit(concurrency=1, partition="key")
        self.most: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        table = connections["default"].ops.quote_name(Job._meta.db_table)
        key, key_params = key_sql("default", self.by)
        sql = f"SELECT {key}, COUNT(*) FROM {table} WHERE status = %s{self.where} GROUP BY 1"
        try:
            while not self._stop.is_set():
                with connections["default"].cursor() as cursor:
                    cursor.execute(sql, [*key_params, JobStatus.PROCESSING])
                    rows = cursor.fetchall()
                self.samples += 1
                total = 0
                for key, count in rows:
                    self.most[key] = max(self.most[key], count)
                    total += count
                self.most["*"] = max(self.most["*"], total)
                self._stop.wait(self.every_s)
        finally:
            connections.close_all()


def wait_for(predicate: Callable[[], bool], timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@override_settings(JOBQUEUE=RACE)
def test_race__in_flight_never_exceeds_a_keys_limit_and_every_job_runs_once() -> None:
    processes, threads, count, keys = (8, 4, 5000, 50) if FULL else (4, 4, 1000, 50)
    limits.set_limit(
        "default", "type:limits.run", {"concurrency": 2, "partition": "payload.customer"}
    )
    with transaction.atomic():
        results = enqueue_many(
            [
                {"queue": "lim", "job_type": "limits.run", "payload": {"customer": f"c{i % keys}"}}
                for i in range(count)
            ]
        )
    jids = {result["jid"] for result in results}
    by_customer = Limit(concurrency=2, partition="payload.customer")
    with Sampler(where=" AND job_type = 'limits.run'", by=by_customer) as sampler:
        proc = run_workers(
            "--burst",
            "--processes", str(processes),
            "--concurrency", str(threads),
            *IDLE_WORKER,
            timeout_s=600,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sampler.samples > 10
    per_key = {key: most for key, most in sampler.most.items() if key != "*"}
    # The payload partition was set at run time: the rows keep limit_key "", and the
    # claim (and the sampler) read each job's key from its payload.
    assert set(Job.objects.values_list("limit_key", flat=True)) == {""}
    assert len(per_key) > keys // 2  # most keys were seen running
    assert max(per_key.values()) <= 2
    runs = Counter(RunRecord.objects.values_list("jid", flat=True))
    assert set(runs) == jids  # none lost
    assert max(runs.values()) == 1  # each ran exactly once
    assert not Job.objects.processing().exists()
    # Per key: the runs' own record of overlap, by their start and finish times.
    by_key: dict[str, list[tuple[Any, int]]] = {}
    for customer, started, finished in Job.objects.values_list(
        "payload__customer", "started_at", "finished_at"
    ):
        events = by_key.setdefault(customer, [])
        events += [(started, 1), (finished, -1)]
    worst = 0
    for events in by_key.values():
        running = 0
        for _at, step in sorted(events, key=lambda e: (e[0], e[1])):  # ends before starts
            running += step
            worst = max(worst, running)
    assert worst <= 2


@override_settings(JOBQUEUE=RACE)
def test_race__in_flight_never_exceeds_a_global_limit_and_every_job_runs_once() -> None:
    # A global concurrency: a claim with room for all it asks is the guarded plain
    # claim (one flight on PostgreSQL), a bigger one goes by candidates; both race here.
    processes, threads, count = (8, 4, 2000) if FULL else (4, 4, 400)
    concurrency = 6
    limits.set_limit("default", "type:limits.run", {"concurrency": concurrency})
    with transaction.atomic():
        results = enqueue_many(
            [{"queue": "lim", "job_type": "limits.run", "payload": {"s": 0.01}}] * count
        )
    jids = {result["jid"] for result in results}
    with Sampler(where=" AND job_type = 'limits.run'") as sampler:
        proc = run_workers(
            "--burst",
            "--processes", str(processes),
            "--concurrency", str(threads),
            *IDLE_WORKER,
            timeout_s=600,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sampler.samples > 10
    assert sampler.most["*"] <= concurrency
    runs = Counter(RunRecord.objects.values_list("jid", flat=True))
    assert set(runs) == jids  # none lost
    assert max(runs.values()) == 1  # each ran exactly once
    events = []
    for started, finished in Job.objects.values_list("started_at", "finished_at"):
        events += [(started, 1), (finished, -1)]
    running = worst = 0
    for _at, step in sorted(events, key=lambda e: (e[0], e[1])):  # ends before starts
        running += step
        worst = max(worst, running)
    assert worst <= concurrency


@override_settings(JOBQUEUE=RACE)
def test_race__the_sampler_sees_a_stored_key_held_at_its_limit() -> None:
    processes, threads, count = (4, 4, 600)
    limits.set_limit("default", "type:limits.run", {"concurrency": 2, "partition": "key"})
    with transaction.atomic():
        enqueue_many(
            [
                {
                    "queue": "lim",
                    "job_type": "limits.run",
                    "payload": {"customer": f"c{i % 6}", "s": 0.01},
                    "limit_key": f"k{i % 6}",
                }
                for i in range(count)
            ]
        )
    with Sampler() as sampler:
        proc = run_workers(
            "--burst",
            "--processes", str(processes),
            "--concurrency", str(threads),
            *IDLE_WORKER,
            timeout_s=600,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    per_key = {key: most for key, most in sampler.most.items() if key != "*"}
    assert set(per_key) == {f"k{i}" for i in range(6)}
    assert max(per_key.values()) == 2  # reached, never passed
    assert RunRecord.objects.count() == count


@override_settings(JOBQUEUE=RACE)
def test_race__a_limited_type_does_not_hold_back_an_unlimited_one_in_its_queue() -> None:
    limits.set_limit("default", "type:limits.run", {"concurrency": 1})
    with transaction.atomic():
        enqueue_many(
            [{"queue": "lim", "job_type": "limits.run", "payload": {"s": 0.4}}] * 60
            + [{"queue": "lim", "job_type": "limits.free", "payload": {}}] * 1000
        )
    with Sampler(where=" AND job_type = 'limits.run'") as sampler:
        proc = run_workers(
            "--burst", "--processes", "2", "--concurrency", "4", *IDLE_WORKER, timeout_s=600
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sampler.most["*"] == 1
    assert RunRecord.objects.count() == 1060
    free_done = Job.objects.filter(job_type="limits.free").order_by("-finished_at")[0].finished_at
    limited_by_then = Job.objects.filter(job_type="limits.run", finished_at__lte=free_done).count()
    # The limited jobs came first in claim order. Behind them, the free ones would start
    # only after the 60th (24 s of them, one at a time); all 1,000 were done while the
    # limited type had run at most three quarters of its 60 (even on a loaded machine).
    assert limited_by_then < 45


@override_settings(JOBQUEUE=FAST)
def test_race__a_sigkilled_workers_slot_comes_back_with_its_reaped_lease() -> None:
    limits.set_limit("default", "type:limits.run", {"concurrency": 1})
    with transaction.atomic():
        enqueue_many(
            [{"queue": "lim", "job_type": "limits.run", "payload": {"first_s": 60}}]
            + [{"queue": "lim", "job_type": "limits.run", "payload": {"s": 0}}] * 3
        )
    first = run_workers("--concurrency", "2", *IDLE_WORKER, wait=False)
    try:
        assert wait_for(lambda: Job.objects.filter(status=JobStatus.PROCESSING).count() == 1)
        held = Job.objects.get(status=JobStatus.PROCESSING)
        assert wait_for(lambda: Job.objects.filter(pk=held.pk, started_at__isnull=False).exists())
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    killed_lease = Job.objects.get(pk=held.pk).lease_expires_at
    with Sampler(where=" AND job_type = 'limits.run'") as sampler:
        second = run_workers("--burst", "--concurrency", "2", *IDLE_WORKER, timeout_s=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert sampler.most["*"] <= 1
    reaped = Job.objects.get(pk=held.pk)
    assert any("lease expired" in entry["message"] for entry in reaped.errors)
    others = Job.objects.exclude(pk=held.pk)
    assert set(others.values_list("status", flat=True)) == {JobStatus.DONE}
    # The slot stayed taken until the dead worker's lease ran out, not longer: the
    # first job after it started once the lease was reaped.
    first_after = min(others.values_list("started_at", flat=True))
    assert first_after >= killed_lease


@override_settings(JOBQUEUE=RACE)
def test_race__a_rate_holds_in_every_window_and_a_burst_run_waits_for_its_tokens() -> None:
    rate, burst, count = 20, 2, 60
    limits.set_limit("default", "type:limits.run", {"rate": f"{rate}/s", "burst": burst})
    with transaction.atomic():
        enqueue_many([{"queue": "lim", "job_type": "limits.run", "payload": {}}] * count)
    proc = run_workers(
        "--burst", "--processes", "2", "--concurrency", "4", *IDLE_WORKER, timeout_s=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert RunRecord.objects.count() == count  # the burst run waited for its tokens
    # Starts are claims (the claim's time by the database clock): in any one-second
    # window at most the rate's tokens plus the bucket.
    starts = sorted(Job.objects.values_list("started_at", flat=True))
    from datetime import timedelta

    for i, start in enumerate(starts):
        within = sum(1 for other in starts[i:] if other < start + timedelta(seconds=1))
        assert within <= rate + burst


@override_settings(JOBQUEUE=RACE)
def test_race__a_limit_set_then_cleared_under_running_workers_holds_and_strands_nothing() -> None:
    count = 80
    with transaction.atomic():
        results = enqueue_many(
            [{"queue": "lim", "job_type": "limits.run", "payload": {"s": 0.05}}] * count
        )
    jids = {result["jid"] for result in results}
    workers = run_workers("--processes", "2", "--concurrency", "4", *IDLE_WORKER, wait=False)
    try:
        assert wait_for(lambda: RunRecord.objects.count() >= 5)
        limits.set_limit("default", "type:limits.run", {"concurrency": 1}, by="test")
        # Lowering a limit does not stop running jobs (docs/limits.md "Changing a limit
        # at run time"): the bound holds once those have ended and every worker has
        # read the row again (within a second).
        running = list(Job.objects.processing().values_list("pk", flat=True))
        assert wait_for(lambda: not Job.objects.processing().filter(pk__in=running).exists())
        time.sleep(1.0)
        before = RunRecord.objects.count()
        with Sampler(where=" AND job_type = 'limits.run'") as sampler:
            assert wait_for(
                lambda: (
                    RunRecord.objects.count() >= min(before + 10, count) and sampler.samples > 20
                )
            )
        assert sampler.most["*"] <= 1
        assert limits.clear_limit("default", "type:limits.run") is True
        assert wait_for(lambda: RunRecord.objects.count() >= count, timeout_s=120)
        assert wait_for(
            lambda: Job.objects.filter(status=JobStatus.DONE).count() == count, timeout_s=60
        )
    finally:
        workers.send_signal(signal.SIGTERM)
        workers.communicate(timeout=120)
    assert workers.returncode == 0
    runs = Counter(RunRecord.objects.values_list("jid", flat=True))
    assert set(runs) == jids  # none stranded
    assert max(runs.values()) == 1
    assert not Job.objects.processing().exists()

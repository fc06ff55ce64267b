"""Starts and the prefetch under real ``runworkers`` processes (README "Prefetch").

- A job type that kills its process (``os._exit``) beside well-behaved jobs, with
  prefetch on: the well-behaved ones claimed beside it lose no attempt, and the
  crashing one ends ``max_retry`` after exactly ``1 + max_retry`` starts.
- Two processes and long jobs: no job waits in one process's memory while the
  other has a free slot.
- Heartbeats every 10 ms racing the outcomes of 1,000 short jobs: no "lease lost".
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import transaction

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from tests.testapp.models import RunRecord
from tests.workers_helpers import StartedWorkers, run_workers

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(condition: Callable[[], bool], timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def _live_pids(workers: StartedWorkers) -> set[str]:
    """The pid of each foreman process now running: the last one started per index."""
    started: dict[str, str] = {}
    for line in list(workers.lines):
        if match := re.search(r"foreman process started index=(\d+) pid=(\d+)", line):
            started[match[1]] = match[2]
    return set(started.values())


def _warm_up(workers: StartedWorkers, quicks: dict[str, str], quick: list[str]) -> None:
    """Run quick jobs until each live foreman process ran five of them (their jids
    are added to ``quick``).

    A foreman that knows no short type prefetches nothing (docs/prefetch.md), and a
    type is short by the median of its last five runs in that process: a process
    restarted after a crash knows none, and a cold first run that a loaded machine
    stretched past 100 ms would leave the type not short there.
    """
    while True:
        live = _live_pids(workers)
        done = Job.objects.filter(jid__in=quick).values_list("lease_owner", flat=True)
        runs_by = Counter(owner.split(":")[1] for owner in done)
        if len(live) == 2 and all(runs_by[pid] >= 5 for pid in live):
            return
        # More than one claim takes (1 slot + a prefetch of 4): both get some.
        warm = [enqueue_job(None, "starts.quick", quicks, priority=1)["jid"] for _ in range(8)]
        quick += warm
        wait_for(lambda w=warm: Job.objects.filter(jid__in=w, status=JobStatus.DONE).count() == 8)
        assert len(quick) <= 600, f"one process ran nearly every warm-up job: {runs_by}"


def test_a_crashing_job_type__its_neighbours_lose_no_attempt__it_ends_after_exactly_its_starts(
    tmp_path: Path,
):
    # Starts are counted in files the handlers append to: no statement, so the
    # well-behaved jobs stay short (prefetched) on a loaded machine too.
    crashes, quicks = str(tmp_path / "crash"), {"path": str(tmp_path / "quick")}
    quick: list[str] = []
    crash_jids: list[str] = []
    workers = StartedWorkers(
        "--processes", "2",
        "--concurrency", "1",
        "--lease", "1000",
        "--ramp-time", "0",
        "--min-sleep", "10",
        "--max-sleep", "100",
        "--prefetch", "4",  # a fixed prefetch: held jobs beside the crash whenever short
        "--prefetch-ms", "1000",  # held for up to 5 s: the reaper finds them, not the hold
    )  # fmt: skip
    try:
        workers.wait_started()
        # Rounds, until a claim held quick jobs beside the crashing one (then some go
        # back unspent), at most 3: on a machine loaded enough to stretch a file append
        # past 100 ms, a round's claims may all have found the quick type not short.
        # Every guarantee is checked for every round.
        while len(crash_jids) < 3:
            _warm_up(workers, quicks, quick)
            # The crashing job first in claim order, short jobs behind it: the claim
            # that takes it holds some of them beside it.
            with transaction.atomic():
                crash = enqueue_job(None, "starts.crash", {"path": crashes}, priority=2)["jid"]
                quick += [
                    enqueue_job(None, "starts.quick", quicks, priority=3)["jid"] for _ in range(40)
                ]
            crash_jids.append(crash)
            wait_for(
                lambda c=crash, q=quick: (
                    Job.objects.filter(jid__in=q, status=JobStatus.DONE).count() == len(q)
                    and Job.objects.get(jid=c).status == JobStatus.MAX_RETRY
                )
            )
            if any("returned unspent" in line for line in list(workers.lines)):
                break
    finally:
        _code, log = workers.stop()
    assert log.count("foreman process crashed") == 3 * len(crash_jids), log[-5000:]
    # Exactly 1 + max_retry (2) starts each, each counted as an attempt.
    starts = [f"{jid} {n}" for jid in crash_jids for n in (1, 2, 3)]
    assert Path(crashes).read_text().split("\n") == [*starts, ""]
    for row in Job.objects.filter(jid__in=crash_jids):
        assert (row.status, row.attempt, len(row.errors)) == (JobStatus.MAX_RETRY, 3, 3)
    # Every well-behaved job ran once, done at attempt 1.
    runs = Path(quicks["path"]).read_text().split()
    assert sorted(runs[0::2]) == sorted(quick)  # each once: none lost its success to a crash
    assert set(runs[1::2]) == {"1"}
    assert set(Job.objects.filter(jid__in=quick).values_list("attempt", flat=True)) == {1}
    # Some were held beside a crash and went back unspent (else the test showed nothing).
    # On failure: how long the quick jobs took (a median past 100 ms is not short),
    # then the log's lines other than "job finished".
    took = sorted(int(ms) for ms in re.findall(r"type=starts.quick .*duration_ms=(\d+)", log))
    told = [line for line in log.splitlines() if "job finished" not in line]
    assert "returned unspent" in log, "\n".join(
        [f"quick jobs' duration_ms, median {took[len(took) // 2] if took else None}", *told[-80:]]
    )


def test_two_processes_long_jobs__no_job_waits_beside_an_idle_slot():
    """Three jobs that each wait until all three run at once: one process holding the
    third for its busy slots would leave them all waiting (and say so)."""
    first = StartedWorkers(
        "--concurrency", "2", "--ramp-time", "0", "--min-sleep", "10", "--max-sleep", "50"
    )
    second = StartedWorkers(
        "--concurrency", "2", "--ramp-time", "0", "--min-sleep", "10", "--max-sleep", "50"
    )
    try:
        first.wait_started()
        second.wait_started()
        with transaction.atomic():
            jids = [enqueue_job(None, "starts.gather", {"n": 3, "s": 20})["jid"] for _ in range(3)]
        wait_for(lambda: Job.objects.filter(jid__in=jids, status=JobStatus.DONE).count() == 3)
    finally:
        first.stop()
        second.stop()
    results = list(Job.objects.filter(jid__in=jids).values_list("result", flat=True))
    assert results == [{"together": True}] * 3
    # Which process ran what: two in one, one in the other.
    pids = [w.split(":")[1] for w in RunRecord.objects.values_list("worker", flat=True)]
    assert sorted(pids.count(pid) for pid in set(pids)) == [1, 2]
    assert set(Job.objects.filter(jid__in=jids).values_list("attempt", flat=True)) == {1}


def test_heartbeats_racing_outcomes__no_lease_lost_in_1000_jobs():
    with transaction.atomic():
        for _ in range(1000):
            enqueue_job(None, "maint.noop")
    proc = run_workers(
        "--burst",
        "--concurrency", "4",
        "--lease", "1000",
        "--heartbeat", "10",  # a beat every 10 ms: many cross a batched done write
        "--ramp-time", "0",
        timeout_s=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Job.objects.filter(status=JobStatus.DONE, attempt=1).count() == 1000
    assert "lease lost" not in proc.stderr, [
        line for line in proc.stderr.splitlines() if "lease lost" in line
    ][:5]
    assert "Traceback" not in proc.stderr

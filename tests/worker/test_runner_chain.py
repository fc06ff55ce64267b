"""Foreman chains (a runner claims job after job): stops, timeouts, burst, counts."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.worker.foreman import Foreman, ForemanOptions
from tests.testapp.models import RunRecord

pytestmark = pytest.mark.django_db(transaction=True)


def foreman(**options: Any) -> Foreman:
    options.setdefault("min_sleep_ms", 5)
    options.setdefault("max_sleep_ms", 50)
    options.setdefault("ramp_time_ms", 0)
    return Foreman(ForemanOptions(**options))


def check_once_and_nothing_leased() -> dict[str, int]:
    left = Job.objects.filter(status=JobStatus.PROCESSING).values_list("jid", flat=True)
    assert list(left) == []
    runs: dict[str, int] = {}
    for jid in RunRecord.objects.values_list("jid", flat=True):
        runs[jid] = runs.get(jid, 0) + 1
    assert {jid: n for jid, n in runs.items() if n > 1} == {}
    for job in Job.objects.filter(status=JobStatus.DONE):
        assert runs.get(job.jid) == 1, job.jid
    return runs


@pytest.mark.parametrize("force", [False, True], ids=["stop", "forced"])
@pytest.mark.parametrize("prefetch", [0, 3])
def test_stop_in_a_chain__nothing_left_leased_nothing_run_twice(force: bool, prefetch: int) -> None:
    for i in range(300):
        enqueue_job(None, "worker.sleep", {"s": 0.01, "label": str(i)})
    f = foreman(concurrency=3, prefetch=prefetch, shutdown_timeout_ms=2000)
    thread = threading.Thread(target=f.run, kwargs={"install_signals": False})
    thread.start()
    deadline = time.monotonic() + 30
    while RunRecord.objects.count() < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    f.stop(force=force)
    thread.join(30)
    assert not thread.is_alive()
    check_once_and_nothing_leased()
    assert Job.objects.filter(status__in=[JobStatus.INIT, JobStatus.RETRY]).exists()


@pytest.mark.parametrize("break_ms", [0, 20])
def test_burst_with_timeouts_in_the_chain__each_job_once_and_burst_ends(break_ms: int) -> None:
    jids = []
    for i in range(40):
        if i % 10 == 3:  # overruns, then ignores nothing: returns soon after its lease is lost
            jids.append(
                enqueue_job(
                    None, "worker.sleep", {"s": 3, "label": f"slow{i}"}, timeout_ms=300, max_retry=0
                )["jid"]
            )
        else:
            jids.append(enqueue_job(None, "worker.record", {"label": str(i)})["jid"])
    f = foreman(concurrency=2, prefetch=2, burst=True, break_time_ms=break_ms)
    thread = threading.Thread(target=f.run, kwargs={"install_signals": False})
    thread.start()
    thread.join(120)  # a bound on a hang, not a speed: a burst that never ends fails here
    assert not thread.is_alive(), "the burst did not end"
    runs = check_once_and_nothing_leased()
    assert (
        Job.objects.exclude(
            status__in=[JobStatus.DONE, JobStatus.ERROR, JobStatus.MAX_RETRY]
        ).count()
        == 0
    )
    assert set(runs) == set(jids)
    assert f.governor.workers == 0


def test_a_trickle_of_jobs__is_the_idle_runners_and_spawns_no_slot_per_job() -> None:
    """A job enqueued while a runner sleeps idle is that runner's: no slot (a thread
    and a database session) is started for it, to find nothing and retire."""
    f = foreman(concurrency=4, max_sleep_ms=2000)
    thread = threading.Thread(target=f.run, kwargs={"install_signals": False})
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while f._idle_runners == 0:  # the first slot, asleep
            assert time.monotonic() < deadline
            time.sleep(0.01)
        first = f._slot_seq
        for i in range(40):
            enqueue_job(None, "worker.record", {"label": f"trickle{i}"})
            time.sleep(0.03)
        deadline = time.monotonic() + 20
        while RunRecord.objects.filter(label__startswith="trickle").count() < 40:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        spawned = f._slot_seq - first
    finally:
        f.stop()
        thread.join(30)
    assert not thread.is_alive()
    check_once_and_nothing_leased()
    # One runner takes each job: 0 to 2 slots were started here, on a loaded
    # machine too. Before, a job started slots again and again: 118 and 119 for
    # these 40 jobs.
    assert spawned <= 10, f"{spawned} slots started for 40 jobs, one at a time"

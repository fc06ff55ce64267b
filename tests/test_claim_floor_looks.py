"""The looks below a claim floor (django_jobqueue/store/claimfloor.py, docs/horizon.md).

While the floor is on, every claim starts at it, and one thread per process (the
looker) reads below it: a look that finds a row lowers the floor, one that finds
nothing proves the rows below where it looked, and covers only the short claim right
after it. Claims at once send one look; a late look is polled for at a modest pace;
a looker thread that cannot start fails no claim. The thresholds are set by the
tests, never timed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_jobqueue import enqueue_job, storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import claimfloor, pauses
from django_jobqueue.store.pauses import pause_queue, resume_queue
from tests.test_claim_floor import (  # the floor's fixture and helpers
    floor_on,
    floor_with_a_job_below,
    no_look_due,
    slow_claims,  # noqa: F401 (a fixture, used by name)
)
from tests.test_claim_floor_recheck import _fresh_caches  # noqa: F401 (autouse)


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
def test_claim__of_claims_at_once_when_a_look_is_due_one_sends_it_and_all_keep_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Claimers of one process with the same filters (the gateway's claim threads): when
    # the gap has passed, one look walks the garbage below the floor; every claim keeps
    # the floor, or a claim in flight would pay the whole walk.
    from django.db import close_old_connections

    monkeypatch.setattr(claimfloor, "SLOW_CLAIM_MS", 0.0)
    no_look_due(monkeypatch)
    for n in range(5):
        enqueue_job(None, "worker.record", {"n": n})
    assert len(storage.claim("default", owner="w", limit=1)) == 1  # floor on
    monkeypatch.setattr(claimfloor, "LOOK_GAP", 0.0)  # a look below is due
    claimers = 4
    looks: list[object] = []
    real_submit = claimfloor.looker.submit

    def submit(filters: object, look: Any) -> bool:
        looks.append(filters)
        return real_submit(filters, look)

    monkeypatch.setattr(claimfloor.looker, "submit", submit)
    barrier = threading.Barrier(claimers, timeout=30)
    real_start = claimfloor.floors.start
    starts: list[object] = []
    errors: list[BaseException] = []

    def start(filters: object) -> object:
        key = real_start(filters)
        starts.append(key)
        barrier.wait()  # every claim has its start before any settles
        return key

    monkeypatch.setattr(claimfloor.floors, "start", start)

    def claim() -> None:
        try:
            storage.claim("default", owner="w", limit=1)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            close_old_connections()

    # The look stays in flight until every claim settled: one back at once would be
    # due again (LOOK_GAP 0) for the claims settling after it.
    release = threading.Event()
    real_submit("busy", lambda: release.wait(30))
    threads = [threading.Thread(target=claim) for _ in range(claimers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        release.set()
    assert errors == []
    assert len(starts) == claimers
    assert all(key is not None for key in starts)
    assert len(looks) == 1
    assert claimfloor.looker.wait(30)


def test_floors__while_a_look_is_in_flight_the_recheck_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker whose short claim kept the floor while the process's look below it is
    # under way must not claim again at once (a loop until the look settles): it
    # waits about the look's time, and the look proves the rows.
    from django.utils import timezone

    no_look_due(monkeypatch)
    floors = claimfloor.ClaimFloors()
    key = (100, timezone.now(), 7)
    filters = claimfloor.filter_set("a", None, (), ())
    floors.settle(filters, started=None, first=key, took_ms=10.0)  # floor on
    monkeypatch.setattr(claimfloor, "LOOK_GAP", 0.0)  # a look below is due
    started = floors.start(filters)
    assert started is not None
    assert floors.due_look(filters) is not None  # this claim sends it
    floors.settle(filters, started=started, first=None, took_ms=0.1, short=True)
    waits_ms = floors.recheck_ms("a")
    assert waits_ms is not None and 0 < waits_ms <= 11

    floors.looked(filters, below=started, found=None, took_ms=10.0)  # the one in flight
    assert floors.recheck_ms("a") is None


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_look__below_an_old_floor_proves_nothing_above_it_once_claims_moved_the_floor_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A look runs below the floor as it was when it was sent. While it waits (the
    # process's looker is busy) or runs, claims move the floor up past a row written
    # between the old floor and the new one: the look that found nothing below the
    # old floor must not leave the rows below the new one proven, or a burst ends
    # and an idle worker sleeps its whole sleep with that row waiting.
    from datetime import timedelta

    from django.utils import timezone

    old = timezone.now() - timedelta(hours=1)
    enqueue_job(None, "worker.record", {"n": 0}, at=old)
    assert len(storage.claim("default", owner="w", limit=1)) == 1  # floor on, an hour ago
    release = threading.Event()
    claimfloor.looker.submit("busy", lambda: release.wait(30))  # the looker busy elsewhere
    try:
        monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)  # a look below is due
        assert storage.claim("default", owner="w", limit=5) == []  # short: sends it
        monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 1e12)
        above = enqueue_job(None, "worker.record", {"n": 1})
        assert [job.jid for job in storage.claim("default", owner="w", limit=1)] == [above.jid]
        between = enqueue_job(None, "worker.record", {"n": 2}, at=old + timedelta(minutes=30))
    finally:
        release.set()
    assert claimfloor.looker.wait(30)  # the look below the old floor: nothing there

    assert storage.claim("default", owner="w", limit=5) == []  # above the new floor
    assert storage.claim_recheck_ms("default") is not None  # the row between is unproven
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)  # the next look, below the new floor
    assert storage.claim("default", owner="w", limit=5) == []
    assert claimfloor.looker.wait(30)
    assert [job.jid for job in storage.claim("default", owner="w", limit=5)] == [between.jid]


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_idle_worker__does_not_claim_in_a_loop_while_a_look_is_late(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The look a short claim sent waits behind another in the process's one looker
    # thread (or its walk is slower than the last one's): past the last look's time
    # the idle worker polls for it, at a modest pace, not every millisecond.
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    urgent = floor_with_a_job_below()
    release = threading.Event()
    claimfloor.looker.submit("busy", lambda: release.wait(30))  # the looker busy elsewhere
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 2.0)
    floor = claimfloor.floors._floors[claimfloor.filter_set("default", None, (), ())]
    floor.last_full -= 10  # a look below the floor is due: the worker's first claim sends it
    foreman = Foreman(
        ForemanOptions(concurrency=1, min_sleep_ms=60_000, max_sleep_ms=60_000, ramp_time_ms=0)
    )
    thread = threading.Thread(target=foreman.run, kwargs={"install_signals": False})
    thread.start()
    try:
        time.sleep(1.5)  # the look is late all along (within LOOK_EVERY_S)
        claims = foreman.claims
        release.set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if Job.objects.filter(jid=urgent.jid, status=JobStatus.DONE).exists():
                break
            time.sleep(0.05)
        assert Job.objects.get(jid=urgent.jid).status == JobStatus.DONE
    finally:
        release.set()
        foreman.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert claims < 60, f"{claims} claims in 1.5 s while the look was late"


def test_floors__a_look_covers_a_short_claim_only_from_where_it_looked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A look found nothing below the floor; a full claim then moved the floor up, and
    # a row was written between the two. The next short claim, above the new floor,
    # is not covered by the look: the rows between are unproven.
    from datetime import timedelta

    from django.utils import timezone

    no_look_due(monkeypatch)
    floors = claimfloor.ClaimFloors()
    filters = claimfloor.filter_set("a", None, (), ())
    key = (100, timezone.now(), 7)
    later = (100, key[1] + timedelta(seconds=5), 9)
    floors.settle(filters, started=None, first=key, took_ms=10.0)  # floor on
    started = floors.start(filters)
    assert started is not None
    floors.looked(filters, below=started, found=None, took_ms=10.0)
    floors.settle(filters, started=started, first=later, took_ms=0.1)  # full: floor up
    floors.settle(filters, started=floors.start(filters), first=None, took_ms=0.1, short=True)

    assert floors.recheck_ms("a") is not None


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_claim__when_no_looker_thread_can_start_returns_its_jobs_and_looks_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The process cannot start a thread (a container's pids limit, memory) when a claim
    # sends a look: the claim's rows are committed, so the claim returns them; and a
    # later claim sends the look again once a thread can start.
    urgent = floor_with_a_job_below()
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)  # a look below is due
    old = threading.stack_size(1 << 40)  # no thread starts: its stack cannot be mapped
    try:
        claimed = storage.claim("default", owner="w", limit=1)  # sends the look
    finally:
        threading.stack_size(old)
    assert len(claimed) == 1 and claimed[0].jid != urgent.jid  # the job above the floor

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert claimfloor.looker.wait(5)
        jobs = storage.claim("default", owner="w", limit=5)
        if jobs:
            break
    assert [job.jid for job in jobs] == [urgent.jid]


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_recheck__a_look_long_ago_does_not_cover_a_claim_after_its_filters_came_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A look found nothing below the floor; then the worker's filters changed (a queue
    # paused: every claim leaves it out) and an urgent job was written below that
    # floor. When the filters come back (the resume), the first short claim at the old
    # floor is not covered by the look from before: the job must not wait for a
    # wake-up that may never come.
    floor_on()
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)  # a look below is due
    assert storage.claim("default", owner="w", limit=5) == []  # short: sends it
    assert claimfloor.looker.wait(30)  # nothing below the floor
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 1e12)
    pause_queue("default", "other")
    pauses.clear_cache()
    assert storage.claim("default", owner="w", limit=5) == []  # other filters: its own floor
    time.sleep(0.5)
    urgent = enqueue_job(None, "worker.record", {"n": 2}, priority=1)  # below the first floor
    resume_queue("default", "other")
    pauses.clear_cache()

    assert storage.claim("default", owner="w", limit=5) == []  # at the first floor: missed
    assert storage.claim_recheck_ms("default") is not None  # so the worker claims again
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)
    assert storage.claim("default", owner="w", limit=5) == []  # sends the look
    assert claimfloor.looker.wait(30)
    assert [job.jid for job in storage.claim("default", owner="w", limit=5)] == [urgent.jid]

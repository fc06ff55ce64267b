"""The claim's floor (django_jobqueue/store/claimfloor.py, docs/horizon.md).

While claims from the start of the claim index are slow (dead entries), a PostgreSQL
claim starts at the key of the first row the last claim took; a look below the floor
runs ``LOOK_GAP`` times the last one's duration later (at most ``LOOK_EVERY_S``),
and a fast one turns the floor off. A short claim above the floor leaves the rows
below it unproven: a worker sleeps only until the next look, and a burst does not
end before it. MariaDB and SQLite never take a floor.
The thresholds are set by the tests, never timed.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobqueue import enqueue_job, storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import claimfloor

BOUND = "(priority, run_at, id) >="
FILTERS = ("default", (), (), frozenset())


def no_look_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """No look below a floor comes due by itself: the gaps are longer than any uptime,
    so a test never depends on how long ago the machine booted."""
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 1e12)
    monkeypatch.setattr(claimfloor, "LOOK_GAP", 1e12)


@pytest.fixture
def slow_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every claim from the start and every look counts as slow; no look is due."""
    monkeypatch.setattr(claimfloor, "SLOW_CLAIM_MS", 0.0)
    no_look_due(monkeypatch)


def _claim_sql(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "SKIP LOCKED" in q["sql"]]


def _key(job: Job) -> claimfloor.Key:
    return (job.priority, job.run_at, job.pk)


def _floor(key: claimfloor.Key) -> claimfloor.Key:
    """Where a claim with its floor at ``key`` starts: the margin below it."""
    return (key[0], key[1] - claimfloor.LAG, 0)


def floor_on() -> None:
    """Write a job and claim it: with ``slow_claims``, the floor is on at that job."""
    enqueue_job(None, "worker.record", {"n": 0})
    assert len(storage.claim("default", owner="w", limit=1)) == 1


# the policy, no database ---------------------------------------------------------


def test_floors__on_after_a_slow_claim_from_the_start_off_after_a_fast_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    floors = claimfloor.ClaimFloors()
    key = (100, timezone.now(), 7)
    floors.settle(FILTERS, started=None, first=key, took_ms=claimfloor.SLOW_CLAIM_MS - 1)
    assert floors.start(FILTERS) is None  # fast: no floor

    floors.settle(FILTERS, started=None, first=key, took_ms=claimfloor.SLOW_CLAIM_MS)
    assert floors.start(FILTERS) == _floor(key)
    later = (100, key[1] + timedelta(seconds=1), 9)
    floors.settle(FILTERS, started=key, first=later, took_ms=0.1)
    assert floors.start(FILTERS) == _floor(later)  # moves up with each claim's first row
    floors.settle(FILTERS, started=later, first=None, took_ms=0.1)
    assert floors.start(FILTERS) == _floor(later)  # an empty claim leaves it where it was
    assert floors.start(("default", ("other",), (), frozenset())) is None  # per filter set

    assert floors.due_look(FILTERS) is None  # the gap has not passed
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)
    assert floors.due_look(FILTERS) == _floor(later)  # a look below the floor is due
    assert floors.start(FILTERS) == _floor(later)  # the claims keep the floor meanwhile
    floors.looked(FILTERS, below=_floor(later), found=None, took_ms=0.1)
    # Longer than any uptime: the test never depends on how long ago the machine booted.
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 1e12)
    assert floors.start(FILTERS) is None  # that look was fast: off


def test_floors__the_next_look_comes_gap_times_the_last_ones_time_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 1e12)
    floors = claimfloor.ClaimFloors()
    key = (100, timezone.now(), 7)
    took_ms = claimfloor.SLOW_CLAIM_MS * 4
    floors.settle(FILTERS, started=None, first=key, took_ms=took_ms)
    floor = floors._floors[FILTERS]
    gap_s = claimfloor.LOOK_GAP * took_ms / 1000
    assert floor.gap_s() == gap_s
    assert floors.start(FILTERS) == _floor(key)
    assert floors.due_look(FILTERS) is None
    assert floors.recheck_ms("default") is None  # no short claim above the floor yet

    floors.settle(FILTERS, started=_floor(key), first=None, took_ms=0.1, short=True)
    waits_ms = floors.recheck_ms("default")
    assert waits_ms is not None
    assert 0 < waits_ms <= gap_s * 1000 + 1
    assert floors.recheck_ms("other") is None  # per alias

    floor.last_full -= gap_s  # the gap has passed
    assert floors.recheck_ms("default") == 0  # the next claim sends the look
    assert floors.due_look(FILTERS) == _floor(key)  # this one
    assert floors.due_look(FILTERS) is None  # one at a time
    waits_ms = floors.recheck_ms("default")  # until the look is back, about its time
    assert waits_ms is not None and 0 < waits_ms <= took_ms + 1
    floors.looked(FILTERS, below=_floor(key), found=None, took_ms=took_ms)
    assert floors.recheck_ms("default") is None  # it found nothing: proven again
    # The next short claim above the floor is covered by that look; the one after is not.
    floors.settle(FILTERS, started=_floor(key), first=None, took_ms=0.1, short=True)
    assert floors.recheck_ms("default") is None
    floors.settle(FILTERS, started=_floor(key), first=None, took_ms=0.1, short=True)
    assert floors.recheck_ms("default") is not None

    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", gap_s / 2)  # the cap
    assert floor.gap_s() == gap_s / 2


def test_floors__a_look_that_finds_a_row_lowers_the_floor_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)
    floors = claimfloor.ClaimFloors()
    key = (100, timezone.now(), 7)
    floors.settle(FILTERS, started=None, first=key, took_ms=claimfloor.SLOW_CLAIM_MS)
    floors.settle(FILTERS, started=_floor(key), first=None, took_ms=0.1, short=True)
    assert floors.due_look(FILTERS) == _floor(key)
    below = (1, key[1] - timedelta(hours=1), 3)
    floors.looked(FILTERS, below=_floor(key), found=below, took_ms=claimfloor.SLOW_CLAIM_MS)

    assert floors.start(FILTERS) == _floor(below)
    assert floors.recheck_ms("default") == 0  # claim again now: a row waits there
    # A claim that started at the old floor settles late: it saw nothing of the row
    # below it, and leaves the floor where the look put it.
    floors.settle(FILTERS, started=_floor(key), first=key, took_ms=0.1)
    assert floors.start(FILTERS) == _floor(below)
    assert floors.recheck_ms("default") == 0
    # The claim that started there takes it, and the floor moves up again.
    floors.settle(FILTERS, started=_floor(below), first=below, took_ms=0.1, short=True)
    assert floors.start(FILTERS) == _floor(below)
    assert floors.recheck_ms("default") is not None
    floors.settle(FILTERS, started=_floor(below), first=key, took_ms=0.1)
    assert floors.start(FILTERS) == _floor(key)


def test_floors__only_the_last_claims_filters_say_whether_to_look_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker's filters change when a job type reaches its limit or frees it: a
    # short claim above the floor under the old filters must not keep a burst from
    # ending (or a slot from sleeping) once a claim under the new ones looked from
    # the start and found nothing.
    no_look_due(monkeypatch)
    floors = claimfloor.ClaimFloors()
    key = (100, timezone.now(), 7)
    limited = ("default", (), (), frozenset({"worker.limited"}))
    floors.settle(limited, started=None, first=key, took_ms=claimfloor.SLOW_CLAIM_MS)
    floors.settle(limited, started=_floor(key), first=None, took_ms=0.1, short=True)
    assert floors.recheck_ms("default") is not None

    floors.settle(FILTERS, started=None, first=None, took_ms=claimfloor.SLOW_CLAIM_MS)
    assert floors.recheck_ms("default") is None
    floors.settle(limited, started=_floor(key), first=None, took_ms=0.1, short=True)
    assert floors.recheck_ms("default") is not None  # its filters again


def test_floors__remember_a_bounded_number_of_filter_sets() -> None:
    floors = claimfloor.ClaimFloors()
    key = (1, timezone.now(), 1)
    for n in range(claimfloor.MAX_FILTER_SETS + 5):
        floors.settle(("default", (f"q{n}",)), started=None, first=key, took_ms=1e6)
    assert floors.start(("default", ("q0",))) is None  # the oldest went
    assert floors.start(("default", (f"q{claimfloor.MAX_FILTER_SETS + 4}",))) == _floor(key)
    assert len(floors._floors) == claimfloor.MAX_FILTER_SETS


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_looker__a_forked_child_runs_its_own_looks() -> None:
    # runworkers --processes forks: the parent's looker thread (here busy with a look
    # that waits) is not in the child, whose looks must run all the same.
    release = threading.Event()
    looker = claimfloor.looker
    looker.submit("parent", release.wait)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its look ran
        ran = threading.Event()
        looker.submit("child", ran.set)
        os._exit(0 if looker.wait(10) and ran.is_set() else 1)
    try:
        deadline = time.monotonic() + 30
        while (waited := os.waitpid(pid, os.WNOHANG)) == (0, 0):
            if time.monotonic() > deadline:  # hung: on a lock the fork copied held
                os.kill(pid, signal.SIGKILL)
                waited = os.waitpid(pid, 0)
                break
            time.sleep(0.05)
    finally:
        release.set()
    assert os.waitstatus_to_exitcode(waited[1]) == 0
    assert looker.wait(10)


# PostgreSQL: claims start at the floor ----------------------------------------------


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db
@pytest.mark.usefixtures("slow_claims")
def test_claim__starts_at_the_first_row_of_the_last_claim_while_claims_are_slow() -> None:
    jids = [enqueue_job(None, "worker.record", {"n": n}).jid for n in range(4)]

    with CaptureQueriesContext(connection) as queries:
        first = storage.claim("default", owner="w", limit=1)
        second = storage.claim("default", owner="w", limit=2)

    assert [job.jid for job in first + second] == jids[:3]
    full, floored = _claim_sql(queries)
    assert BOUND not in full
    assert BOUND in floored
    assert claimfloor.floors.start(FILTERS) == _floor(_key(second[0]))


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_claim__a_job_committed_after_a_claim_with_an_earlier_run_at_is_the_next_claims():
    # A producer takes its run_at, another job is enqueued and claimed (the floor at
    # its key), and only then the producer commits: its job sorts just below the
    # floor. Within the margin the next claim with the floor takes it.
    floor_on()
    late_run_at = timezone.now()
    enqueue_job(None, "worker.record", {"n": 1})
    assert len(storage.claim("default", owner="w", limit=1)) == 1  # floor at job 1
    late = enqueue_job(None, "worker.record", {"n": 2}, at=late_run_at)
    assert Job.objects.get(jid=late.jid).run_at < Job.objects.get(payload={"n": 1}).run_at

    with CaptureQueriesContext(connection) as queries:
        claimed = storage.claim("default", owner="w", limit=5)
    assert [job.jid for job in claimed] == [late.jid]
    (floored,) = _claim_sql(queries)  # found by the floored claim, not a second one
    assert BOUND in floored


def look_below() -> None:
    """Wait for the looker thread's looks (their own connection: a transactional
    test's rows are committed)."""
    assert claimfloor.looker.wait(30)


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_claim__a_job_written_below_the_floor_waits_for_the_next_look_below_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    enqueue_job(None, "worker.record", {"n": 1})
    later = enqueue_job(None, "worker.record", {"n": 2})
    assert len(storage.claim("default", owner="w", limit=1)) == 1  # floor on, at job 1
    urgent = enqueue_job(None, "worker.record", {"n": 3}, priority=1)
    backdated = enqueue_job(None, "worker.record", {"n": 4}, at=timezone.now() - timedelta(hours=1))

    floored = storage.claim("default", owner="w", limit=5)
    assert [job.jid for job in floored] == [later.jid]  # both below the floor
    look_below()  # none was due

    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)  # a look below is due
    with CaptureQueriesContext(connection) as queries:
        assert storage.claim("default", owner="w", limit=5) == []  # it sends the look
    assert [BOUND in sql for sql in _claim_sql(queries)] == [True]  # the claim kept its floor
    look_below()
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 1e12)
    assert storage.claim_recheck_ms("default") == 0  # the look found them: claim now
    below = storage.claim("default", owner="w", limit=5)
    assert [job.jid for job in below] == [urgent.jid, backdated.jid]
    assert not Job.objects.filter(waiting=True).exists()


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_claim__nothing_above_the_floor_leaves_the_rows_below_for_the_next_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    floor_on()
    urgent = enqueue_job(None, "worker.record", {"n": 2}, priority=1)  # below the floor

    with CaptureQueriesContext(connection) as queries:
        assert storage.claim("default", owner="w", limit=5) == []
    (floored,) = _claim_sql(queries)  # no claim from the start at once
    assert BOUND in floored
    # The empty answer proved nothing below the floor: the caller is told so.
    assert storage.claim_recheck_ms("default") is not None

    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)  # a look below is due
    assert storage.claim_recheck_ms("default") == 0  # the next claim sends it
    assert storage.claim("default", owner="w", limit=5) == []
    look_below()
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 1e12)
    claimed = storage.claim("default", owner="w", limit=5)
    assert [job.jid for job in claimed] == [urgent.jid]
    # Empty now; a look that finds nothing proves the rows below again.
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)
    assert storage.claim("default", owner="w", limit=5) == []
    look_below()
    assert storage.claim_recheck_ms("default") is None


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_burst__does_not_end_before_the_jobs_a_look_found_below_the_floor_were_claimed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker whose claims start at a floor: the jobs written below it are claimed
    # once a look below the floor found them, and the burst ends only after a look found
    # nothing.
    from tests.workers_helpers import drain

    floor_on()
    above = enqueue_job(None, "worker.record", {"n": 2})
    below = [
        enqueue_job(None, "worker.record", {"n": 3}, priority=1),
        enqueue_job(None, "worker.record", {"n": 4}, at=timezone.now() - timedelta(hours=1)),
    ]
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.3)  # the wait the test accepts

    outcomes = drain(concurrency=2)

    assert outcomes.get("done") == 3
    done = set(Job.objects.filter(status=JobStatus.DONE).values_list("jid", flat=True))
    assert {above.jid, *(job.jid for job in below)} <= done
    assert not Job.objects.filter(waiting=True).exists()


def floor_with_a_job_below() -> Any:
    """Turn the floor on (:func:`floor_on`), then write a job above it and a more
    urgent one below it; return the one below."""
    floor_on()
    enqueue_job(None, "worker.record", {"n": 2})  # above the floor
    return enqueue_job(None, "worker.record", {"n": 3}, priority=1)  # below it


def run_until_done(foreman: Any, jid: str, *, within_s: float = 20) -> None:
    """Run ``foreman`` in a thread until job ``jid`` is done (at most ``within_s``
    seconds), then stop it; fail if the job is not done or the foreman did not stop."""
    thread = threading.Thread(target=foreman.run, kwargs={"install_signals": False})
    thread.start()
    try:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if Job.objects.filter(jid=jid, status=JobStatus.DONE).exists():
                break
            time.sleep(0.05)
        assert Job.objects.get(jid=jid).status == JobStatus.DONE
    finally:
        foreman.stop()
        thread.join(30)
    assert not thread.is_alive()


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_idle_worker__sleeps_only_until_the_look_that_sees_below_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Nothing wakes this worker (its jobs were written before it started) and its idle
    # sleep is a minute: a job below the floor is claimed when a look below it is due
    # (0.5 s) and back, not after the sleep.
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    urgent = floor_with_a_job_below()
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.5)
    foreman = Foreman(
        ForemanOptions(concurrency=1, min_sleep_ms=60_000, max_sleep_ms=60_000, ramp_time_ms=0)
    )
    run_until_done(foreman, urgent.jid)


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db
@pytest.mark.usefixtures("slow_claims")
def test_claim__floors_are_kept_per_filter_set() -> None:
    enqueue_job(None, "worker.record", {"n": 1})
    storage.claim("default", owner="w", limit=1)  # every queue: floor on
    other = enqueue_job("other", "worker.record", {"n": 2}, priority=1)

    with CaptureQueriesContext(connection) as queries:
        named = storage.claim("default", owner="w", limit=1, queues=["other"])

    assert [job.jid for job in named] == [other.jid]
    assert BOUND not in _claim_sql(queries)[0]  # its own filters: no floor yet


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
def test_claim__racing_claimers_with_floors_claim_every_job_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claimfloor, "SLOW_CLAIM_MS", 0.0)
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.05)
    monkeypatch.setattr(claimfloor, "LOOK_GAP", 1e12)  # the next from the start: 0.05 s
    total = 400
    claimed: list[str] = []
    lock = threading.Lock()
    producing = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            for n in range(total):
                # Mixed priorities and backdated jobs: some land below a floor.
                priority = 1 if n % 7 == 0 else 100
                at = timezone.now() - timedelta(seconds=30) if n % 11 == 0 else None
                enqueue_job(None, "worker.record", {"n": n}, priority=priority, at=at)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            producing.set()
            close_old_connections()

    def claim(name: str) -> None:
        # Until every job is claimed (a job below a floor waits for a claim from the
        # start), within a generous bound.
        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline:
                jobs = storage.claim("default", owner=name, limit=3)
                with lock:
                    claimed.extend(job.jid for job in jobs)
                    if producing.is_set() and len(claimed) >= total:
                        return
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=produce)]
    threads += [threading.Thread(target=claim, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)

    assert errors == []
    assert len(claimed) == len(set(claimed)) == total
    assert Job.objects.filter(status=JobStatus.PROCESSING).count() == total


# MariaDB and SQLite: no floor ---------------------------------------------------------


@pytest.mark.vendor("mysql", "sqlite")
@pytest.mark.django_db
@pytest.mark.usefixtures("slow_claims")
def test_claim__other_databases_always_claim_from_the_start() -> None:
    jids = [enqueue_job(None, "worker.record", {"n": n}).jid for n in range(2)]

    with CaptureQueriesContext(connection) as queries:
        first = storage.claim("default", owner="w", limit=1)
        urgent = enqueue_job(None, "worker.record", {"n": 9}, priority=1)
        second = storage.claim("default", owner="w", limit=2)

    assert [job.jid for job in first] == jids[:1]
    assert [job.jid for job in second] == [urgent.jid, jids[1]]
    assert not any(BOUND in q["sql"] for q in queries.captured_queries)
    assert claimfloor.floors.start(FILTERS) is None

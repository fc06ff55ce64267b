"""The claim floor's recheck across filter sets (django_jobqueue/store/claimfloor.py).

A short claim above a floor leaves its filter set "unproven": the worker's idle sleep
is capped by :func:`storage.claim_recheck_ms`, and a ``--burst`` run does not end
while it says anything. A claim's filter set changes while a worker runs (a queue
paused then resumed, a job type at its ``concurrent`` limit): a filter set no claim
uses any more must not keep the alias unproven, or an idle worker claims in a loop
and a burst never ends. The thresholds are set by the tests, never timed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from django_jobqueue import enqueue_job, storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import claimfloor, limits, pauses
from django_jobqueue.store.pauses import pause_queue, resume_queue
from tests.test_claim_floor import (  # the floor's fixture and helpers
    floor_on,
    floor_with_a_job_below,
    no_look_due,
    run_until_done,
    slow_claims,  # noqa: F401 (a fixture, used by name)
)


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """No limit or pause of this module's tests reaches a later test through the
    process's caches (a rolled-back row stays cached for half a second)."""
    limits.clear_cache()
    pauses.clear_cache()
    yield
    limits.clear_cache()
    pauses.clear_cache()


def _leave_an_unproven_floor_behind() -> None:
    """Claims while queue ``paused`` is paused: a floor, then a short claim above it
    (that filter set unproven); then the queue is resumed, so no claim of this
    process uses that filter set again."""
    enqueue_job(None, "worker.record", {"n": 1})
    pause_queue("default", "paused")
    assert len(storage.claim("default", owner="w", limit=1)) == 1  # floor on
    assert storage.claim("default", owner="w", limit=5) == []  # short above it
    assert storage.claim_recheck_ms("default") is not None
    resume_queue("default", "paused")


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db
@pytest.mark.usefixtures("slow_claims")
def test_recheck__a_filter_set_no_claim_uses_any_more_leaves_the_alias_proven(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _leave_an_unproven_floor_behind()
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)  # a look below the floor is due

    # From the start, every queue: nothing is due anywhere.
    assert storage.claim("default", owner="w", limit=5) == []
    assert storage.claim("default", owner="w", limit=5) == []

    assert storage.claim_recheck_ms("default") is None


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_burst__ends_after_a_queue_was_resumed_and_does_not_claim_in_a_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    _leave_an_unproven_floor_behind()
    below = enqueue_job(None, "worker.record", {"n": 2}, priority=1)  # below the floor
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.05)
    foreman = Foreman(
        ForemanOptions(
            concurrency=1, burst=True, min_sleep_ms=1000, max_sleep_ms=1000, ramp_time_ms=0
        )
    )
    thread = threading.Thread(target=foreman.run, kwargs={"install_signals": False})
    began = time.monotonic()
    thread.start()
    try:
        thread.join(30)  # far above the few idle sleeps a burst takes
        ended = not thread.is_alive()
    finally:
        foreman.stop()
        thread.join(30)
    took_s = time.monotonic() - began
    assert ended, f"the burst did not end: {foreman.claims} claims in {took_s:.0f} s"
    assert Job.objects.get(jid=below.jid).status == JobStatus.DONE
    # A claim or two per idle sleep, not a claim whenever the last one returned.
    assert foreman.claims < 50


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db
@pytest.mark.usefixtures("slow_claims")
def test_recheck__a_limits_claim_looks_from_the_start_and_proves_the_rows_below(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A limit set while a floor was unproven: every claim is now the limits' claim,
    # whose statements have no floor. Each looks from the start, so it proves what a
    # short claim above the floor left unproven.
    floor_on()
    assert storage.claim("default", owner="w", limit=5) == []  # short above it
    assert storage.claim_recheck_ms("default") is not None
    limits.set_limit("default", "type:worker.record", {"concurrency": 10})
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)  # a look below the floor is due
    urgent = enqueue_job(None, "worker.record", {"n": 2}, priority=1)  # below the floor

    assert [job.jid for job in storage.claim("default", owner="w", limit=5)] == [urgent.jid]
    assert storage.claim("default", owner="w", limit=5) == []

    assert storage.claim_recheck_ms("default") is None


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db
@pytest.mark.usefixtures("slow_claims")
def test_recheck__a_worker_whose_every_queue_is_paused_is_not_held_by_its_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A worker of queue "a" only, its floor unproven, and then "a" is paused: its claims
    # send no statement (every queue asked for is paused), so no claim of its filters
    # settles the floor again; its idle sleep must not be held at 0 through the pause.
    enqueue_job("a", "worker.record", {"n": 1})
    assert len(storage.claim("default", owner="w", limit=1, queues=["a"])) == 1  # floor on
    assert storage.claim("default", owner="w", limit=5, queues=["a"]) == []  # short above it
    assert storage.claim_recheck_ms("default") is not None
    pause_queue("default", "a")
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.0)  # a look below the floor is due

    assert storage.claim("default", owner="w", limit=5, queues=["a"]) == []

    assert storage.claim_recheck_ms("default") is None


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_idle_worker__with_its_listener_down_still_sleeps_only_until_the_look_below_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # While wake-ups may be lost an idle slot polls at min_sleep_ms; that must not
    # lengthen a sleep the floor's recheck made shorter. Nothing wakes this worker and
    # its idle sleep is a minute: the job below the floor is claimed when a look below
    # it is due and back.
    from django.test import override_settings

    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    urgent = floor_with_a_job_below()
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.5)
    with override_settings(JOBQUEUE={"NOTIFY": False}):  # no listener marks it up again
        foreman = Foreman(
            ForemanOptions(concurrency=1, min_sleep_ms=60_000, max_sleep_ms=60_000, ramp_time_ms=0)
        )
        foreman.listener.mark_down()
        run_until_done(foreman, urgent.jid)


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_burst__async_handlers_take_every_job_below_and_above_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Async jobs run on the foreman's loop, and the loop's claim thread claims ahead:
    # the jobs written below the floor are all run, and the burst ends.
    from datetime import timedelta

    from django.utils import timezone

    from tests.workers_helpers import drain

    floor_on()
    jids = []
    for n in range(30):
        jids.append(enqueue_job(None, "aio.record", {"s": 0.01}).jid)  # above the floor
        below = {"priority": 1} if n % 2 else {"at": timezone.now() - timedelta(hours=1)}
        jids.append(enqueue_job(None, "aio.record", {"s": 0.01}, **below).jid)
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.1)

    outcomes = drain(concurrency=4)

    assert outcomes.get("done") == len(jids)
    assert set(Job.objects.filter(status=JobStatus.DONE).values_list("jid", flat=True)) >= set(jids)
    assert not Job.objects.filter(waiting=True).exists()


def test_floors__only_the_last_claim_of_the_same_alias_decides_the_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.utils import timezone

    no_look_due(monkeypatch)
    floors = claimfloor.ClaimFloors()
    key = (100, timezone.now(), 7)
    left = claimfloor.filter_set("a", None, ("paused",), ())
    now = claimfloor.filter_set("a", None, (), ())
    elsewhere = claimfloor.filter_set("b", None, (), ())
    floors.settle(left, started=None, first=key, took_ms=10.0)  # floor on
    floors.settle(left, started=key, first=None, took_ms=0.1, short=True)  # unproven
    assert floors.recheck_ms("a") is not None

    floors.settle(elsewhere, started=None, first=None, took_ms=0.1)
    assert floors.recheck_ms("a") is not None  # another alias's claim says nothing of it
    floors.settle(now, started=None, first=None, took_ms=0.1)
    assert floors.recheck_ms("a") is None  # this alias's claims moved on
    floors.looked_from_start(left)  # a limits' claim with the old filters
    assert floors.recheck_ms("a") is None
    assert floors.start(left) is not None  # its floor stays for its next claims


@pytest.mark.vendor("mysql", "sqlite")
@pytest.mark.django_db
@pytest.mark.usefixtures("slow_claims")
def test_recheck__other_databases_never_hold_a_worker_for_a_floor() -> None:
    enqueue_job(None, "worker.record", {"n": 1})
    enqueue_job("a", "worker.record", {"n": 2})
    assert len(storage.claim("default", owner="w", limit=1)) == 1
    assert len(storage.claim("default", owner="w", limit=5)) == 1  # short
    pause_queue("default", "a")
    assert storage.claim("default", owner="w", limit=5, queues=["a"]) == []  # every queue paused
    limits.set_limit("default", "type:worker.record", {"concurrency": 10})
    assert storage.claim("default", owner="w", limit=5) == []  # the limits' claim

    assert storage.claim_recheck_ms("default") is None
    assert not claimfloor.floors._floors


def test_floors__a_filter_set_the_lru_dropped_no_longer_holds_the_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.utils import timezone

    no_look_due(monkeypatch)
    floors = claimfloor.ClaimFloors()
    key = (100, timezone.now(), 7)
    oldest = claimfloor.filter_set("a", ["q"], (), ())
    floors.settle(oldest, started=None, first=key, took_ms=10.0)
    floors.settle(oldest, started=key, first=None, took_ms=0.1, short=True)
    assert floors.recheck_ms("a") is not None
    for n in range(claimfloor.MAX_FILTER_SETS):  # claims of other filters, none due
        floors.settle(
            claimfloor.filter_set("a", [f"q{n}"], (), ()), started=None, first=None, took_ms=0.1
        )

    assert oldest not in floors._floors
    assert floors.recheck_ms("a") is None  # its next claim looks from the start
    assert floors.start(oldest) is None


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_idle_worker__takes_a_job_handed_back_in_place_and_a_reaped_one_below_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both keep (or take back) a place below the floor the claims have moved past.
    # Nothing wakes this worker and its idle sleep is a minute: each is claimed when
    # a look below the floor is due.
    from datetime import timedelta

    from django.utils import timezone

    from django_jobqueue import reaping
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    old = timezone.now() - timedelta(hours=1)
    kept = enqueue_job(None, "worker.record", {"n": 1}, at=old)
    reaped = enqueue_job(None, "worker.record", {"n": 2}, at=old)
    (mine,) = storage.claim("default", owner="w", limit=1)  # floor on, at the kept job
    (lost,) = storage.claim("default", owner="w", limit=1, lease_ms=1)  # floor at the reaped job
    above = enqueue_job(None, "worker.record", {"n": 3})
    assert len(storage.claim("default", owner="w", limit=1)) == 1  # floor at the newest
    enqueue_job(None, "worker.record", {"n": 4})  # above the floor
    assert mine.jid == kept.jid and lost.jid == reaped.jid and above.jid
    assert storage.hand_back(mine, message=None, keep_place=True)
    time.sleep(0.05)
    assert reaping.reap_expired("default") == 1
    assert Job.objects.filter(jid__in=[kept.jid, reaped.jid], waiting=True).count() == 2
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.5)
    foreman = Foreman(
        ForemanOptions(concurrency=1, min_sleep_ms=60_000, max_sleep_ms=60_000, ramp_time_ms=0)
    )
    thread = threading.Thread(target=foreman.run, kwargs={"install_signals": False})
    thread.start()
    try:
        deadline = time.monotonic() + 20  # far below the minute, far above the 0.5 s
        while time.monotonic() < deadline:
            if Job.objects.filter(jid__in=[kept.jid, reaped.jid], waiting=True).count() == 0:
                break
            time.sleep(0.05)
        assert not Job.objects.filter(jid__in=[kept.jid, reaped.jid], waiting=True).exists()
    finally:
        foreman.stop()
        thread.join(30)
    assert not thread.is_alive()


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_worker__runs_every_job_while_queues_pause_and_resume_under_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A running worker (threads) while a producer writes jobs, some below any floor,
    # into two queues, and one of them is paused and resumed over and over: every job
    # runs once, and the idle worker does not claim in a loop once all are done.
    from datetime import timedelta

    from django.db import close_old_connections
    from django.utils import timezone

    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.1)
    total = 120
    jids: list[str] = []
    produced = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            for n in range(total):
                queue = "b" if n % 3 == 0 else None
                priority = 1 if n % 5 == 0 else 100
                at = timezone.now() - timedelta(seconds=30) if n % 7 == 0 else None
                job = enqueue_job(queue, "worker.record", {"n": n}, priority=priority, at=at)
                jids.append(job.jid)
                if n % 20 == 10:
                    pause_queue("default", "b")
                elif n % 20 == 19:
                    resume_queue("default", "b")
                time.sleep(0.005)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            resume_queue("default", "b")
            produced.set()
            close_old_connections()

    foreman = Foreman(
        ForemanOptions(concurrency=3, min_sleep_ms=200, max_sleep_ms=200, ramp_time_ms=0)
    )
    worker = threading.Thread(target=foreman.run, kwargs={"install_signals": False})
    producer = threading.Thread(target=produce)
    worker.start()
    producer.start()
    try:
        producer.join(120)
        deadline = time.monotonic() + 60  # far above a few gaps and idle sleeps
        while time.monotonic() < deadline:
            if Job.objects.filter(status=JobStatus.DONE).count() >= total:
                break
            time.sleep(0.05)
        assert errors == []
        done = set(Job.objects.filter(status=JobStatus.DONE).values_list("jid", flat=True))
        assert set(jids) <= done
        claims_then = foreman.claims
        time.sleep(1.0)  # idle: a claim per idle sleep or gap, not a loop
        assert foreman.claims - claims_then < 100
    finally:
        foreman.stop()
        worker.join(30)
    assert not worker.is_alive()
    assert foreman.stats.get("done") == total


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("slow_claims")
def test_burst__ends_with_every_job_run_while_a_job_type_at_its_limit_changes_the_filters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # While a worker.limited job runs (concurrent=1) the other slots claim without its
    # type: a filter set of their own, with its own floor. Every job runs, below a
    # floor or not, and the burst ends.
    from datetime import timedelta

    from django.utils import timezone

    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    jids = []
    for n in range(12):
        jids.append(enqueue_job(None, "worker.limited", {"s": 0.05}).jid)
        jids.append(enqueue_job(None, "worker.record", {"n": n}).jid)
    (first,) = storage.claim("default", owner="w", limit=1)  # floor on
    assert storage.hand_back(first, message=None, keep_place=True)
    for n in range(6):
        below = {"priority": 1} if n % 2 else {"at": timezone.now() - timedelta(hours=1)}
        jids.append(enqueue_job(None, "worker.record", {"n": 100 + n}, **below).jid)
        jids.append(enqueue_job(None, "worker.limited", {"s": 0.05}, **below).jid)
    monkeypatch.setattr(claimfloor, "LOOK_EVERY_S", 0.1)
    foreman = Foreman(
        ForemanOptions(concurrency=3, burst=True, min_sleep_ms=5, max_sleep_ms=50, ramp_time_ms=0)
    )
    thread = threading.Thread(target=foreman.run, kwargs={"install_signals": False})
    thread.start()
    try:
        thread.join(60)  # far above the second or two the burst takes
        ended = not thread.is_alive()
    finally:
        foreman.stop()
        thread.join(30)
    assert ended, f"the burst did not end: {foreman.claims} claims"
    assert foreman.stats.get("done") == len(jids)
    assert not Job.objects.filter(waiting=True).exists()
    assert Job.objects.filter(status=JobStatus.DONE).count() == len(jids)

"""Held jobs handed back together (docs/prefetch.md): one statement for the lot, each
job unspent and in its place, and on PostgreSQL back above where this process's next
claim starts (store/claimfloor.py), so no look below the floor has to find them."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_jobqueue import enqueue_job, storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import claimfloor
from tests.test_claim_floor import BOUND, FILTERS, _claim_sql, floor_on, slow_claims

pytestmark = pytest.mark.django_db(transaction=True)

__all__ = ["slow_claims"]  # the fixture, used by name below


def _updates(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]


def test_hand_back_many__one_update_each_job_unspent_in_place_a_retry_stays_a_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    retry = enqueue_job(None, "worker.record", {"n": 0}).jid
    (job,) = storage.claim("default", owner="w", limit=1)
    assert storage.fail(job, RuntimeError("first")) == JobStatus.RETRY
    Job.objects.filter(jid=retry).update(run_at="2000-01-01T00:00:00Z")
    fresh = [enqueue_job(None, "worker.record", {"n": n}).jid for n in (1, 2, 3)]
    before = dict(Job.objects.values_list("jid", "run_at"))
    held = storage.claim("default", owner="w", limit=4, started=False)
    assert [j.jid for j in held] == [retry, *fresh]
    taken = held[-1]  # its lease expired and another worker claimed it meanwhile
    Job.objects.filter(pk=taken.pk).update(lease_token="someone-else")

    with CaptureQueriesContext(connection) as queries, caplog.at_level(logging.WARNING):
        assert storage.hand_back_many(held, message=None) == 3

    assert len(_updates(queries)) == 1
    rows = {row.jid: row for row in Job.objects.all()}
    assert (rows[retry].status, rows[retry].attempt, rows[retry].waiting) == (
        JobStatus.RETRY,
        1,
        True,
    )
    assert rows[retry].message == "RuntimeError: first"  # message None: the stored one stays
    for jid in fresh[:2]:
        assert (rows[jid].status, rows[jid].attempt, rows[jid].waiting) == (JobStatus.INIT, 0, True)
    for jid in [retry, *fresh[:2]]:
        assert rows[jid].run_at == before[jid]  # in its place, no backoff
        assert (rows[jid].lease_token, rows[jid].lease_owner, rows[jid].lease_expires_at) == (
            "",
            "",
            None,
        )
    other = rows[taken.jid]
    assert (other.status, other.lease_token, other.attempt) == (
        JobStatus.PROCESSING,
        "someone-else",
        1,
    )
    assert "hand_back not stored for 1 of 4 held jobs" in caplog.text
    again = storage.claim("default", owner="w2", limit=5)
    assert [j.jid for j in again] == [retry, *fresh[:2]]  # claim order as before


def test_hand_back_many__an_until_executing_job_holds_its_key_again(pro: None) -> None:
    keyed = enqueue_job(
        None, "worker.record", {"n": 0}, unique_key="k", unique_mode="until_executing"
    ).jid
    plain = enqueue_job(None, "worker.record", {"n": 1}).jid
    held = storage.claim("default", owner="w", limit=2, started=False)

    assert storage.hand_back_many(held) == 2

    assert set(Job.objects.filter(waiting=True).values_list("jid", flat=True)) == {keyed, plain}
    again = enqueue_job(
        None, "worker.record", {"n": 2}, unique_key="k", unique_mode="until_executing"
    )
    assert (again.status, again.jid) == ("deduplicated", keyed)


def two_held_below_the_floor(monkeypatch: pytest.MonkeyPatch) -> list[Job]:
    """With ``slow_claims``: claim two jobs unstarted (prefetched, say), then a third,
    so the floor is above the two; return the two."""
    monkeypatch.setattr(claimfloor, "LAG", timedelta(0))  # no margin: jobs ms apart
    floor_on()
    enqueue_job(None, "worker.record", {"n": 1})
    enqueue_job(None, "worker.record", {"n": 2})
    held = storage.claim("default", owner="w", limit=2, started=False)
    later = enqueue_job(None, "worker.record", {"n": 3}).jid
    (moved,) = storage.claim("default", owner="w", limit=1)  # the floor moves past them
    assert moved.jid == later
    return held


@pytest.mark.vendor("postgresql")
@pytest.mark.usefixtures("slow_claims")
def test_hand_back_many__jobs_below_the_floor_are_the_next_claims_without_a_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = two_held_below_the_floor(monkeypatch)
    assert claimfloor.floors.start(FILTERS) > (held[-1].priority, held[-1].run_at, held[-1].pk)

    assert storage.hand_back_many(held) == 2

    assert storage.claim_recheck_ms("default") == 0  # a worker that sleeps wakes now
    with CaptureQueriesContext(connection) as queries:
        again = storage.claim("default", owner="w", limit=5)
    assert [j.jid for j in again] == [j.jid for j in held]
    assert [BOUND in sql for sql in _claim_sql(queries)] == [True]  # at the lowered floor


def test_floors_lower__only_the_floors_whose_claims_could_take_the_job_and_are_above_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(claimfloor, "SLOW_CLAIM_MS", 0.0)  # every floor below is on
    floors = claimfloor.ClaimFloors()
    at = datetime(2026, 1, 1, tzinfo=UTC)
    high = (0, at + timedelta(seconds=10), 100)
    sets = {
        "every queue": ("default", (), (), frozenset()),
        "its queue": ("default", ("q",), (), frozenset()),
        "another queue": ("default", ("r",), (), frozenset()),
        "its queue paused": ("default", (), ("q",), frozenset()),
        "its type left out": ("default", (), (), frozenset({"t"})),
        "another alias": ("other", (), (), frozenset()),
    }
    for filters in sets.values():
        floors.settle(filters, started=None, first=high, took_ms=1e6)  # floors on, high
    below = ("default", (), (), frozenset({"x"}))  # could take it, but already lower
    low = (0, at - timedelta(seconds=1), 1)
    floors.settle(below, started=None, first=low, took_ms=1e6)

    floors.lower("default", (0, at, 5), "q", "t")

    lowered = {
        name
        for name, filters in sets.items()
        if floors.start(filters) == (0, at - claimfloor.LAG, 0)
    }
    assert lowered == {"every queue", "its queue"}
    assert floors.start(below) == (0, low[1] - claimfloor.LAG, 0)
    assert floors.start(sets["another queue"]) == (0, high[1] - claimfloor.LAG, 0)


@pytest.mark.vendor("postgresql")
@pytest.mark.usefixtures("slow_claims")
def test_hand_back_many__a_job_another_worker_took_meanwhile_does_not_lower_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A held job whose lease expired and that another worker claimed since is not
    # waiting: a floor lowered to it would send the next claim over the dead entries
    # between it and the job that did go back, the walk the floor is there to spare.
    taken, back = held = two_held_below_the_floor(monkeypatch)
    Job.objects.filter(pk=taken.pk).update(lease_token="someone-else")

    assert storage.hand_back_many(held) == 1

    assert claimfloor.floors.start(FILTERS) == (back.priority, back.run_at, 0)
    again = storage.claim("default", owner="w", limit=5)
    assert [j.jid for j in again] == [back.jid]


@pytest.mark.vendor("postgresql", "mysql")
def test_hand_back_many__a_keyed_job_that_cannot_be_written_keeps_no_other_job_leased(
    pro: None, caplog: pytest.LogCaptureFixture
) -> None:
    # Another session holds the keyed job's row (a long transaction over it): its
    # write fails after the session's lock wait. The plain job still goes back, and
    # the count says so; the keyed one stays leased, for the reaper.
    keyed = enqueue_job(
        None, "worker.record", {"n": 0}, unique_key="k", unique_mode="until_executing"
    ).jid
    plain = enqueue_job(None, "worker.record", {"n": 1}).jid
    held = storage.claim("default", owner="w", limit=2, started=False)
    assert [j.jid for j in held] == [keyed, plain]
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(jid=keyed)
                locked.set()
                release.wait(60)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    postgres = connection.vendor == "postgresql"
    try:
        assert locked.wait(60)
        with connection.cursor() as cursor:
            cursor.execute(
                "SET lock_timeout = '200ms'"
                if postgres
                else "SET SESSION innodb_lock_wait_timeout = 1"
            )
        with caplog.at_level(logging.WARNING):
            assert storage.hand_back_many(held) == 1
    finally:
        release.set()
        holder.join(60)
        with connection.cursor() as cursor:
            cursor.execute(
                "SET lock_timeout = DEFAULT"
                if postgres
                else "SET SESSION innodb_lock_wait_timeout = DEFAULT"
            )

    rows = {row.jid: row for row in Job.objects.all()}
    assert (rows[plain].status, rows[plain].waiting, rows[plain].attempt) == (
        JobStatus.INIT,
        True,
        0,
    )
    still = (JobStatus.PROCESSING, held[0].lease_token)  # for the reaper
    assert (rows[keyed].status, rows[keyed].lease_token) == still
    assert f"handing back a held job failed jid={keyed}" in caplog.text

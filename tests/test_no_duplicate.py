"""No duplicate job, ever (docs/design.md#creation).

Real threads and processes race on the real server (PostgreSQL, MariaDB, SQLite).
The tests assert counts and states; settle times are printed and appended to
``tests.no_duplicate_helpers.RESULTS_FILE``, never asserted on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings

from django_jobqueue import storage
from django_jobqueue.core.exceptions import DuplicateJob, InvalidJobId, LockTimeout
from django_jobqueue.core.validation import MAX_ID_BYTES
from django_jobqueue.enqueue import build_job, create_job, enqueue_job
from django_jobqueue.models import Job, JobStatus, hold_hash
from django_jobqueue.store import locks
from django_jobqueue.store.managers import hold_lock_names
from tests.no_duplicate_helpers import (
    JOB_TYPE,
    advisory_locks_in_database,
    race_threads,
    record,
)

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 30
PROCESSES = 8


@pytest.fixture
def queue() -> str:
    """A queue of this test alone, so its lock names meet no other test's."""
    return f"nodup-{uuid.uuid4().hex[:12]}"


def create(queue: str, job_id: str, payload: Any = None) -> str:
    """Create a job with ``job_id``; return "created" or "duplicate"."""
    try:
        create_job(build_job(queue, JOB_TYPE, payload, job_id=job_id))
    except DuplicateJob:
        return "duplicate"
    return "created"


def assert_no_lock_held(queue: str, job_id: str | None = None, unique_key: str | None = None):
    for name in hold_lock_names(queue, job_id=job_id, unique_key=unique_key):
        assert not locks.is_lock_held("default", name), name
    if connection.vendor == "postgresql":
        assert advisory_locks_in_database() == 0


def rows(queue: str) -> list[Job]:
    return list(Job.objects.filter(queue=queue).order_by("pk"))


# 30 threads, 8 processes --------------------------------------------------------


@pytest.mark.pgbouncer
def test_30_threads_create_one_id__exactly_one_row(queue: str) -> None:
    race = race_threads(THREADS, lambda i: create(queue, "order-42", {"racer": i}))

    assert race.errors == []
    assert Counter(race.outcomes) == {"created": 1, "duplicate": THREADS - 1}
    created = rows(queue)
    assert len(created) == 1
    assert created[0].job_id == "order-42"
    assert_no_lock_held(queue, "order-42")
    record("30 threads, one id", connection.vendor, race.settle_s, len(created), THREADS)


def test_8_processes_create_one_id__exactly_one_row(
    queue: str, subprocess_env: dict[str, str]
) -> None:
    cmd = [sys.executable, "-m", "tests.no_duplicate_helpers", queue, "order-42"]
    procs = [
        subprocess.Popen(  # noqa: S603
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=subprocess_env,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        started = time.monotonic()
        for proc in procs:  # the starting gun
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outcomes = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            outcomes.append(json.loads(out.strip().splitlines()[-1]))
        settle_s = time.monotonic() - started
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()

    assert [o for o in outcomes if o["outcome"] == "error"] == []
    assert Counter(o["outcome"] for o in outcomes) == {"created": 1, "duplicate": PROCESSES - 1}
    created = rows(queue)
    assert len(created) == 1
    # Every loser names the winner.
    assert {o["jid"] for o in outcomes} == {created[0].jid}
    assert_no_lock_held(queue, "order-42")
    record("8 processes, one id", connection.vendor, settle_s, len(created), PROCESSES)


@pytest.mark.pgbouncer
def test_30_threads_hold_their_transaction_open__exactly_one_row(queue: str) -> None:
    # SQLite serialises whole write transactions: 30 x 1 s would only measure its
    # busy timeout, so each holds 0.2 s there.
    hold_s = 0.2 if connection.vendor == "sqlite" else 1.0

    def racer(i: int) -> str:
        with transaction.atomic():
            outcome = create(queue, "order-42", {"racer": i})
            time.sleep(hold_s)
        return outcome

    race = race_threads(THREADS, racer)

    assert race.errors == []
    assert Counter(race.outcomes) == {"created": 1, "duplicate": THREADS - 1}
    assert len(rows(queue)) == 1
    assert_no_lock_held(queue, "order-42")
    record(f"30 threads, atomic held {hold_s:.1f} s", connection.vendor, race.settle_s, 1, THREADS)


@pytest.mark.pgbouncer
def test_30_threads_hold_their_transaction_open__one_unique_key_enqueued(queue: str) -> None:
    # A loser that finds the holder under the lock must free the lock at once
    # (PostgreSQL keeps a transaction lock until the caller's transaction ends
    # unless its savepoint rolls back), else the 29 would queue 1 s each.
    hold_s = 0.2 if connection.vendor == "sqlite" else 1.0

    def racer(i: int) -> str:
        with transaction.atomic():
            status = enqueue_job(queue, JOB_TYPE, {"racer": i}, unique_key="digest:7").status
            time.sleep(hold_s)
        return status

    race = race_threads(THREADS, racer)

    assert race.errors == []
    assert Counter(race.outcomes) == {"enqueued": 1, "deduplicated": THREADS - 1}
    assert len(rows(queue)) == 1
    assert_no_lock_held(queue, unique_key="digest:7")
    record(
        f"30 threads, atomic {hold_s:.1f} s, unique key",
        connection.vendor,
        race.settle_s,
        1,
        THREADS,
    )


@pytest.mark.pgbouncer
def test_30_threads_one_unique_key__one_enqueued_29_deduplicated(queue: str) -> None:
    def racer(i: int) -> dict[str, str]:
        return dict(enqueue_job(queue, JOB_TYPE, {"racer": i}, unique_key="digest:7"))

    race = race_threads(THREADS, racer)

    assert race.errors == []
    statuses = Counter(o["status"] for o in race.outcomes)
    assert statuses == {"enqueued": 1, "deduplicated": THREADS - 1}
    created = rows(queue)
    assert len(created) == 1
    assert {o["jid"] for o in race.outcomes} == {created[0].jid}
    assert_no_lock_held(queue, unique_key="digest:7")
    record("30 threads, one unique key", connection.vendor, race.settle_s, 1, THREADS)


# Creation racing the claim scan ------------------------------------------------


def test_creation_racing_8_claimers__no_deadlock_duplicate_or_loss(queue: str) -> None:
    keys = [f"k{n}" for n in range(4)]  # a small key space: holds collide all the time
    stop_creating = threading.Event()
    stop_claiming = threading.Event()
    accepted: list[str] = []
    running: dict[str, str] = {}  # job id -> jid of the job a claimer runs now
    violations: list[str] = []
    guard = threading.Lock()
    claimers = 8
    creators = 8

    def claimer(i: int) -> int:
        done = 0
        while True:
            jobs = storage.claim("default", owner=f"claimer-{i}", queues=[queue])
            if not jobs:
                if stop_claiming.is_set():
                    return done
                time.sleep(0.005)
                continue
            for job in jobs:
                with guard:
                    if job.job_id in running:
                        violations.append(
                            f"{job.job_id} run by {running[job.job_id]} and {job.jid}"
                        )
                    running[job.job_id] = job.jid
                time.sleep(0.002)
                with guard:
                    del running[job.job_id]
                assert storage.complete(job)
                done += 1

    creators_done = threading.Semaphore(0)

    def creator(i: int) -> int:
        n = 0
        try:
            while not stop_creating.is_set():
                key = keys[n % len(keys)]
                n += 1
                try:
                    result = create_job(build_job(queue, JOB_TYPE, {"c": i}, job_id=key))
                except DuplicateJob:
                    continue
                with guard:
                    accepted.append(result.jid)
        finally:
            creators_done.release()
        return n

    def racer(i: int) -> int:
        return claimer(i) if i < claimers else creator(i)

    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["race"] = race_threads(claimers + creators, racer)

    runner = threading.Thread(target=run)
    runner.start()
    time.sleep(10)
    stop_creating.set()
    for _ in range(creators):
        assert creators_done.acquire(timeout=60)
    # Claimers drain what the creators left, then stop.
    deadline = time.monotonic() + 120
    while Job.objects.filter(queue=queue, waiting=True).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stop_claiming.set()
    runner.join(timeout=60)
    race = outcome["race"]

    assert race.errors == []  # no deadlock, no lock timeout, no crash
    assert violations == []
    all_rows = rows(queue)
    assert sorted(job.jid for job in all_rows) == sorted(accepted)  # none lost, none extra
    assert {job.status for job in all_rows} == {JobStatus.DONE}
    assert sum(race.outcomes[:claimers]) == len(accepted)
    # Holds end at completion (no dedupe): nothing holds an id any more.
    assert not Job.objects.filter(queue=queue, job_id_hash__isnull=False).exists()
    assert len(accepted) > len(keys)  # the race really recreated freed ids
    assert_no_lock_held(queue)
    for key in keys:
        assert_no_lock_held(queue, key)
    record("10 s creation vs 8 claimers", connection.vendor, race.settle_s, len(accepted), 16)


# The lock is freed every time ----------------------------------------------------


@pytest.mark.vendor("mysql", "postgresql")
def test_200_sequential_creations_of_one_key__lock_free_after_each(queue: str) -> None:
    names = hold_lock_names(queue, job_id="nightly")
    for n in range(200):
        if n % 2:
            with transaction.atomic():
                result = create_job(build_job(queue, JOB_TYPE, n, job_id="nightly"))
        else:
            result = create_job(build_job(queue, JOB_TYPE, n, job_id="nightly"))
        for name in names:
            assert not locks.is_lock_held("default", name), f"lock leaked after creation {n}"
        # End the hold, as a completion without dedupe does, so the next one creates.
        Job.objects.filter(jid=result.jid).update(job_id_hash=None)
    assert Job.objects.filter(queue=queue).count() == 200


def test_rolled_back_transaction__no_job_and_no_lock(queue: str) -> None:
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        create_job(build_job(queue, JOB_TYPE, None, job_id="order-42", unique_key="u"))
        assert Job.objects.filter(queue=queue).count() == 1
        # PostgreSQL holds the lock until the caller's transaction ends; MySQL has
        # released it already (the unique index is the last line until the commit).
        for name in hold_lock_names(queue, job_id="order-42", unique_key="u"):
            assert locks.is_lock_held("default", name) is (connection.vendor == "postgresql")
        raise Rollback

    assert rows(queue) == []
    assert_no_lock_held(queue, "order-42", "u")
    # The id and the key are free again.
    assert create(queue, "order-42") == "created"


# Ids byte for byte -----------------------------------------------------------------


@pytest.mark.parametrize(
    "job_id",
    [
        "😀" * 256,
        "é" * 511 + "ab",
        "x" * MAX_ID_BYTES,
    ],
    ids=["emoji", "accented", "ascii"],
)
def test_1024_byte_id__stored_and_found_byte_for_byte(queue: str, job_id: str) -> None:
    assert len(job_id.encode("utf-8")) == MAX_ID_BYTES

    jid = create_job(build_job(queue, JOB_TYPE, None, job_id=job_id)).jid

    job = Job.objects.get(queue=queue, job_id_hash=hold_hash(job_id))
    assert job.jid == jid
    assert job.job_id.encode("utf-8") == job_id.encode("utf-8")
    with pytest.raises(DuplicateJob) as caught:
        create_job(build_job(queue, JOB_TYPE, None, job_id=job_id))
    assert caught.value.holder_jid == jid
    assert_no_lock_held(queue, job_id)


def test_1025_byte_id__refused_and_nothing_written(queue: str) -> None:
    job_id = "😀" * 256 + "x"
    assert len(job_id.encode("utf-8")) == MAX_ID_BYTES + 1

    with pytest.raises(InvalidJobId, match="1025 bytes"):
        create_job(build_job(queue, JOB_TYPE, None, job_id=job_id))

    assert rows(queue) == []


def test_ids_differing_in_case_or_accent__two_jobs(queue: str) -> None:
    # MariaDB's utf8mb4_unicode_ci calls these equal; ids compare by their bytes.
    for pair in (("Order-42", "order-42"), ("resume", "résumé"), ("a", "a ")):
        assert [create(queue, job_id) for job_id in pair] == ["created", "created"]
    assert len(rows(queue)) == 6


# Lock timeout ---------------------------------------------------------------------


def test_lock_held_elsewhere_beyond_lock_timeout__lock_timeout_and_nothing_written(
    queue: str,
) -> None:
    names = hold_lock_names(queue, job_id="order-42")
    holding = threading.Event()
    release = threading.Event()

    def holder(_i: int) -> None:
        # Inside an open transaction: the database lock only, no in-process stripe.
        with transaction.atomic(), locks.creation_lock("default", names, timeout_ms=5_000):
            holding.set()
            release.wait(60)

    outcome: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: outcome.update(race=race_threads(1, holder)))
    runner.start()
    try:
        assert holding.wait(60)
        if connection.vendor != "sqlite":
            assert all(locks.is_lock_held("default", name) for name in names)
        started = time.monotonic()
        with override_settings(JOBQUEUE={"LOCK_TIMEOUT_MS": 200}), pytest.raises(LockTimeout):
            create_job(build_job(queue, JOB_TYPE, None, job_id="order-42"))
        waited_s = time.monotonic() - started
    finally:
        release.set()
        runner.join(30)
    assert outcome["race"].errors == []
    assert rows(queue) == []
    assert_no_lock_held(queue, "order-42")
    record("lock timeout 200 ms (waited)", connection.vendor, waited_s, 0, 1)


# The in-process striped mutex -----------------------------------------------------


def test_stripes__sorted_distinct_and_stable() -> None:
    names = [f"id\x00q\x00{n}" for n in range(200)]
    stripes = locks.stripes_of(names)
    assert stripes == sorted(set(stripes))
    assert all(0 <= s < locks.STRIPES for s in stripes)
    assert locks.stripes_of(list(reversed(names))) == stripes
    assert locks.stripes_of([names[0], names[0]]) == locks.stripes_of([names[0]])


def test_stripes__never_waited_for_inside_the_callers_transaction(queue: str) -> None:
    # T1 creates "order-1" in its open transaction (it holds database locks), T2
    # then takes the stripe of "order-1" and waits in the database for T1. T1's
    # next creation, of an id on the same stripe, must not wait for T2's stripe:
    # that would be a deadlock until T2's lock timeout.
    first = hold_lock_names(queue, job_id="order-1")
    second_id = next(
        f"order-{n}"
        for n in range(2, 10_000)
        if locks.stripes_of(hold_lock_names(queue, job_id=f"order-{n}")) == locks.stripes_of(first)
    )
    t1_created = threading.Event()

    def t1() -> list[str]:
        with transaction.atomic():
            outcomes = [create(queue, "order-1")]
            t1_created.set()
            time.sleep(0.5)  # T2 is now inside the stripe, waiting in the database
            outcomes.append(create(queue, second_id))
        return outcomes

    def t2() -> list[str]:
        assert t1_created.wait(60)
        return [create(queue, "order-1")]

    with override_settings(JOBQUEUE={"LOCK_TIMEOUT_MS": 5_000}):
        race = race_threads(2, lambda i: t2() if i else t1())

    assert race.errors == []
    assert race.outcomes == [["created", "created"], ["duplicate"]]
    assert len(rows(queue)) == 2

"""Flow-control limits raced by threads calling ``storage.claim`` directly
(docs/limits.md "How a claim enforces the limits").

tests/worker/test_limits_race.py races whole ``runworkers`` processes and samples the
table; here each thread claims several jobs at a time in a tight loop and records
every job it holds, from the claim's return to the call that ends it (complete, a
failed attempt, a cancel). That span lies inside the job's ``processing`` span in the
table, so holders counted over it never exceed the real count: a limit seen exceeded
here was exceeded in the database, however short the overlap. No sampling and no
assertion on a duration.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections, transaction

from django_jobqueue import enqueue_many, storage
from django_jobqueue.exceptions import LockTimeout
from django_jobqueue.models import Job
from django_jobqueue.store import limits
from tests.limits_helpers import _fresh_limits  # noqa: F401 (autouse fixture)

pytestmark = pytest.mark.django_db(transaction=True)

#: Keys that differ only by case, a space, a combining mark or after 200 characters
#: (the last two share their key: a key is its first 200 characters).
KEYS = ["Cust", "cust", "cust ", "cüst", "cu\u0308st", "ß", "ss", "x" * 200 + "a", "x" * 200 + "b"]

Pair = tuple[str, str]


class Holders:
    """The jobs each thread holds, per (limit, key), and every excess over a cap."""

    def __init__(self, pairs_of: Callable[[Job], list[Pair]], caps: dict[str, int]) -> None:
        self.pairs_of = pairs_of
        self.caps = caps
        self.now: Counter[Pair] = Counter()
        self.most: Counter[Pair] = Counter()
        self.over: list[tuple[Pair, int]] = []
        self._lock = threading.Lock()

    def take(self, jobs: list[Job]) -> None:
        with self._lock:
            for job in jobs:
                for pair in self.pairs_of(job):
                    self.now[pair] += 1
                    self.most[pair] = max(self.most[pair], self.now[pair])
                    if self.now[pair] > self.caps[pair[0]]:
                        self.over.append((pair, self.now[pair]))

    def drop(self, job: Job) -> None:
        with self._lock:
            for pair in self.pairs_of(job):
                self.now[pair] -= 1


def race(
    holders: Holders, *, threads: int = 6, claim: int = 4, seconds: float = 4.0
) -> Counter[str]:
    """Claim with ``threads`` threads until no job waits or ``seconds`` pass; end each
    job by a random outcome. Returns the claimed jobs per job type."""
    stop = time.monotonic() + seconds
    claimed: Counter[str] = Counter()
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            while time.monotonic() < stop:
                try:
                    jobs = storage.claim("default", owner=f"t{seed}", limit=claim)
                except LockTimeout:
                    # The claim's documented refusal, nothing written: MariaDB's
                    # deadlock met twice (its locking reads of the candidates and
                    # the limits' rows); a worker claims again, as here.
                    continue
                holders.take(jobs)
                if not jobs:
                    if not Job.objects.filter(waiting=True).exists():
                        return
                    time.sleep(0.002)
                    continue
                claimed.update(job.job_type for job in jobs)
                time.sleep(rnd.random() * 0.003)
                for job in jobs:
                    holders.drop(job)
                    outcome = rnd.random()
                    if outcome < 0.8:
                        assert storage.complete(job)
                    elif outcome < 0.9:
                        assert storage.fail(job, None, message="raced") is not None
                    else:
                        assert storage.finish_cancelled(job)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert not errors, errors
    assert not holders.over, holders.over[:5]
    return claimed


def test_claim_race__a_keyed_limit_holds_per_exact_key_beside_unlimited_jobs() -> None:
    # One partitioned concurrency read from the payload (on PostgreSQL the keyed
    # claim's one UPDATE), keys that compare exactly, a payload without the field
    # (key ""), and an unlimited type in the same queue that keeps being claimed.
    limits.set_limit("default", "type:limits.run", {"concurrency": 1, "partition": "payload.c"})
    jobs: list[dict[str, Any]] = []
    for i in range(1200):
        payload = {"c": KEYS[i % len(KEYS)]} if i % 10 else {"n": i}
        jobs.append({"queue": "lim", "job_type": "limits.run", "payload": payload})
        if i % 4 == 0:
            jobs.append({"queue": "lim", "job_type": "limits.free", "payload": {"c": "Cust"}})
    with transaction.atomic():
        enqueue_many(jobs)

    def pairs_of(job: Job) -> list[Pair]:
        if job.job_type != "limits.run":
            return []
        return [("key", str(job.payload.get("c", ""))[:200])]

    holders = Holders(pairs_of, {"key": 1})
    claimed = race(holders)
    assert claimed["limits.free"] > 0
    # Every key was held: the two long ones share theirs, and the payloads without
    # the field have the key "".
    assert len([pair for pair in holders.most if pair[0] == "key"]) == len(KEYS)


def test_claim_race__a_type_limit_and_a_queue_limit_hold_together() -> None:
    # Two global concurrencies over one job type (PostgreSQL and SQLite: the guarded
    # claim, then the claim by candidates for what a tight limit refused).
    limits.set_limit("default", "type:limits.run", {"concurrency": 3})
    limits.set_limit("default", "queue:lim", {"concurrency": 5})
    jobs: list[dict[str, Any]] = []
    for i in range(900):
        jobs.append({"queue": "lim", "job_type": "limits.run", "payload": {"n": i}})
        jobs.append({"queue": "lim", "job_type": "limits.free", "payload": {"n": i}})
        jobs.append({"queue": "other", "job_type": "limits.run", "payload": {"n": i}})
    with transaction.atomic():
        enqueue_many(jobs)

    def pairs_of(job: Job) -> list[Pair]:
        pairs = [("type", "")] if job.job_type == "limits.run" else []
        return pairs + ([("queue", "")] if job.queue == "lim" else [])

    holders = Holders(pairs_of, {"type": 3, "queue": 5})
    claimed = race(holders)
    assert claimed["limits.free"] > 0
    assert claimed["limits.run"] > 0

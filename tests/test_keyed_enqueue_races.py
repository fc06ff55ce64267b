"""PostgreSQL one-statement add / unique enqueue (rawkeyed.insert_unless_held) under
races in callers' transactions that commit late or roll back, with stale holds."""

from __future__ import annotations

import random
import threading
import time

import pytest
from django.db import connection, connections, transaction

from django_jobqueue import DuplicateJob, enqueue_job
from django_jobqueue.ids import Queue
from django_jobqueue.models import Job, hold_hash

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql")]

QUEUE = "advpg"


def advisory_locks() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def test_threads_in_late_committing_or_rolled_back_transactions__one_holder_true_answers() -> None:
    # A stale id hold and a stale key hold first: each must be replaced once.
    old = enqueue_job(QUEUE, "worker.record", {"label": "old"}, unique_key="K", unique_ttl_ms=1)
    time.sleep(0.05)
    answers: list[tuple[str, str, bool]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(12)

    def one(i: int) -> None:
        rng = random.Random(i)
        try:
            barrier.wait(10)
            for _ in range(5):
                commit = rng.random() < 0.6
                try:
                    with transaction.atomic():
                        try:
                            got = enqueue_job(
                                QUEUE, "worker.record", {"label": str(i)}, unique_key="K"
                            )
                            status, jid = got.status, got.jid
                        except DuplicateJob as exc:
                            status, jid = "dup", exc.holder_jid
                        time.sleep(rng.random() * 0.03)
                        if not commit:
                            raise RuntimeError("roll back")
                except RuntimeError:
                    pass
                with lock:
                    answers.append((status, jid, commit))
                assert advisory_locks() == 0
        finally:
            connections.close_all()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    live = list(
        Job.objects.filter(queue=QUEUE, unique_key_hash=hold_hash("K")).values_list(
            "jid", flat=True
        )
    )
    assert len(live) == 1
    jids = set(Job.objects.values_list("jid", flat=True))
    committed_enqueued = [jid for status, jid, commit in answers if status == "enqueued" and commit]
    assert committed_enqueued == live or (old.jid in live and not committed_enqueued)
    for status, jid, _commit in answers:
        if status == "deduplicated":
            assert jid in jids, "deduplicated against a job that never committed"
    assert advisory_locks() == 0


def test_add_in_a_continuing_atomic__a_refused_add_frees_what_it_took() -> None:
    q = Queue(QUEUE, job_type="worker.record")
    with transaction.atomic():
        assert q.add({"label": "a"}, id="x") is True
        held = advisory_locks()
        assert q.add({"label": "b"}, id="x") is False
        assert advisory_locks() == held
        assert enqueue_job(QUEUE, "worker.record", None, unique_key="u").status == "enqueued"
        held = advisory_locks()
        assert enqueue_job(QUEUE, "worker.record", None, unique_key="u").status == "deduplicated"
        assert advisory_locks() == held
    assert advisory_locks() == 0
    assert q.add({"label": "c"}, id="x") is False
    assert advisory_locks() == 0

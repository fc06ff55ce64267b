"""Deduplicated enqueues in the per-minute stats (workerstats.CreateStats).

Every create path that turns an enqueue away counts it; the process writes the
counts in one upsert once they are due, never inside the caller's transaction, and
the dedupe audit (Pro) and ``/metrics/`` show them. Transactional tests: the counts
are written in autocommit or after a commit, which a test wrapped in a transaction
never reaches.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Sum
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_jobqueue import enqueue_job, enqueue_many
from django_jobqueue.ids import Queue
from django_jobqueue.models import JobStat
from django_jobqueue.store.licence import generate_key_pair, issue_licence
from django_jobqueue.store.workerstats import CreateStats, create_stats
from tests.test_metrics import samples

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "digest:7"


def deduplicated(queue: str | None = None, job_type: str | None = None) -> int:
    stats = JobStat.objects.all()
    if queue:
        stats = stats.filter(queue=queue)
    if job_type:
        stats = stats.filter(job_type=job_type)
    return stats.aggregate(n=Sum("deduplicated"))["n"] or 0


def stat_writes(queries: CaptureQueriesContext) -> int:
    table = JobStat._meta.db_table
    return sum(1 for q in queries.captured_queries if table in q["sql"] and "INSERT" in q["sql"])


def turn_away(count: int) -> None:
    """Enqueue ``count`` jobs that every create path turns away, after their holders."""
    assert enqueue_job("unique", "unique.opt", {}, unique_key=KEY)["status"] == "enqueued"
    assert Queue("ids").add("v", id="held") is True
    made = 0
    while made < count:
        kind = made % 3
        if kind == 0:
            assert enqueue_job("unique", "unique.opt", {}, unique_key=KEY).deduplicated
        elif kind == 1:
            assert Queue("ids").add("again", id="held") is False
        else:
            batch = [{"queue": "unique", "job_type": "unique.opt", "unique_key": KEY}]
            assert enqueue_many(batch)[0].deduplicated
        made += 1


def test_deduplicated__every_create_path_counts_and_never_writes_per_enqueue(monkeypatch):
    monkeypatch.setattr(create_stats, "flush_s", 3600.0)  # however slow the machine
    with CaptureQueriesContext(connection) as queries:
        turn_away(30)
    assert stat_writes(queries) == 0  # not due yet: nothing written
    assert create_stats.pending("default") >= 2  # (minute, queue, type) rows in memory
    assert create_stats.flush("default") >= 2
    assert deduplicated("unique", "unique.opt") == 20
    assert deduplicated("ids", "ids.draft") == 10
    assert create_stats.pending("default") == 0


def test_deduplicated__a_batch_counts_each_job_turned_away_within_it():
    batch = [{"queue": "unique", "job_type": "unique.opt", "unique_key": "b"} for _ in range(5)]
    results = enqueue_many(batch)
    assert [r.status for r in results] == ["enqueued", *["deduplicated"] * 4]
    create_stats.flush("default")
    assert deduplicated("unique") == 4


def test_deduplicated__shown_by_the_dedupe_audit_and_the_metrics_counter():
    turn_away(12)
    create_stats.flush("default")
    private_pem, public_pem = generate_key_pair()
    token = issue_licence(
        private_pem, licensee="Tests", expires_at=datetime.now(UTC) + timedelta(days=1)
    )
    client = Client()
    client.force_login(User.objects.create_superuser("root"))
    with override_settings(JOBQUEUE={"LICENCE_KEY": token, "LICENCE_PUBLIC_KEYS": [public_pem]}):
        body = client.get(reverse("django_jobqueue_console:dedupe")).content.decode()
    assert "unique.opt" in body and '<td class="num">8</td>' in body
    assert "ids.draft" in body and '<td class="num">4</td>' in body
    got = samples(client.get("/metrics/").content.decode())
    for queue, job_type, number in (("unique", "unique.opt", 8), ("ids", "ids.draft", 4)):
        labels = (("job_type", job_type), ("outcome", "deduplicated"), ("queue", queue))
        assert got[("jobqueue_job_outcomes_total", labels)] == number


def test_create_stats__the_first_count_past_flush_s_writes_them_all():
    clock = [1000.0]
    stats = CreateStats(flush_s=5, clock=lambda: clock[0])
    with CaptureQueriesContext(connection) as queries:
        for _ in range(40):
            stats.record("default", "q", "t")
            clock[0] += 0.1  # 4 s in all: not due yet
    assert stat_writes(queries) == 0 and deduplicated() == 0
    clock[0] += 1.5
    with CaptureQueriesContext(connection) as queries:
        stats.record("default", "q", "t")
    assert stat_writes(queries) == 1  # one upsert for all 41
    assert deduplicated("q", "t") == 41
    stats.record("default", "q", "t")  # the age starts again from this count
    assert deduplicated("q", "t") == 41 and stats.pending("default") == 1


def test_create_stats__inside_a_transaction_waits_for_its_commit():
    clock = [0.0]
    stats = CreateStats(flush_s=5, clock=lambda: clock[0])
    stats.record("default", "q", "t")
    clock[0] = 10.0
    with transaction.atomic():
        stats.record("default", "q", "t")
        stats.record("default", "q", "t")  # one commit hook, not one per count
        assert len(connection.run_on_commit) == 1
        assert stats.flush("default") == 0  # never inside the caller's transaction
        assert deduplicated() == 0
    assert deduplicated("q", "t") == 3


def test_create_stats__a_rollback_keeps_the_counts_for_the_next_flush():
    clock = [0.0]
    stats = CreateStats(flush_s=5, clock=lambda: clock[0])
    stats.record("default", "q", "t")
    clock[0] = 10.0
    with pytest.raises(RuntimeError), transaction.atomic():
        stats.record("default", "q", "t")
        raise RuntimeError("the caller rolls back")
    assert deduplicated() == 0 and stats.pending("default") == 1
    clock[0] = 20.0
    stats.record("default", "q", "t")  # due, in autocommit: written now
    assert deduplicated("q", "t") == 3


def test_create_stats__threads_counting_and_flushing_at_once_lose_nothing():
    stats = CreateStats(flush_s=0)  # every count is due: flushes race each other
    errors: list[BaseException] = []

    def count() -> None:
        try:
            for _ in range(100):
                stats.record("default", "q", "t")
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=count) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    stats.flush_all()  # what a failed write (SQLite's lock) kept
    assert deduplicated("q", "t") == 600

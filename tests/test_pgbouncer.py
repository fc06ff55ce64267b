"""PostgreSQL through PgBouncer in transaction pooling mode.

scripts/test's pgbouncer leg runs ``pytest -m pgbouncer`` with ``DATABASE_URL`` on
scripts/start-pgbouncer's pooler and ``JOBQUEUE_TEST_PGBOUNCER`` naming the server
behind it (tests/settings.py). With this module go the 30-way id and unique-key
races of tests/test_no_duplicate.py (marked ``pgbouncer``). Tests here that need the
pooler skip elsewhere; the LISTEN probe's test runs on every PostgreSQL leg.
"""

from __future__ import annotations

import queue as queue_module
import signal
import threading
import time
import uuid
from collections import Counter

import psycopg
import pytest
from django.db import connection, transaction

from django_jobqueue import enqueue_job
from django_jobqueue.core.exceptions import DuplicateJob
from django_jobqueue.enqueue import build_job, create_job
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.worker.pooler import listen_supported
from tests.conftest import direct_postgres_url, through_pgbouncer
from tests.no_duplicate_helpers import JOB_TYPE, race_threads
from tests.testapp.models import RunRecord
from tests.workers_helpers import drain_once_each, run_workers

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.pgbouncer,
    pytest.mark.vendor("postgresql"),
]

#: The warning of django_jobqueue.worker.pooler when LISTEN receives nothing.
POOLER_LINE = "LISTEN receives no notification"


@pytest.fixture
def pooled() -> None:
    if not through_pgbouncer():
        pytest.skip("needs PgBouncer (scripts/test's pgbouncer leg)")


def server_advisory_locks() -> int:
    """Advisory locks any session holds in the test database, asked of the server itself."""
    with psycopg.connect(direct_postgres_url(), autocommit=True) as direct:
        row = direct.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND d.datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_pgbouncer_leg__goes_through_a_pooler(pooled: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT inet_server_port()")
        server_port = cursor.fetchone()[0]
    # Django talks to the pooler's port; the session it gets is the server's.
    assert int(connection.settings_dict["PORT"]) != server_port
    assert connection.settings_dict["OPTIONS"].get("prepare_threshold", 0) is None


def test_listen_probe__works_on_the_server_and_not_through_a_transaction_pooler() -> None:
    started = time.monotonic()
    supported = listen_supported("default")
    elapsed = time.monotonic() - started

    assert supported is not through_pgbouncer()
    # The probe's notification comes at once on the server; through the pooler
    # it waits out its 1 s, never more.
    assert elapsed < (3.0 if through_pgbouncer() else 1.0)


def test_30_way_id_and_unique_key_races__leave_no_advisory_lock_on_the_server(
    pooled: None,
) -> None:
    queue = f"pgb-{uuid.uuid4().hex[:12]}"

    def racer(i: int) -> str:
        if i % 2:
            return enqueue_job(queue, JOB_TYPE, {"racer": i}, unique_key="digest:7").status
        with transaction.atomic():
            try:
                create_job(build_job(queue, JOB_TYPE, {"racer": i}, job_id="order-42"))
            except DuplicateJob:
                return "duplicate"
            return "created"

    race = race_threads(30, racer)

    assert race.errors == []
    assert Counter(race.outcomes) == {
        "created": 1,
        "duplicate": 14,
        "enqueued": 1,
        "deduplicated": 14,
    }
    assert Job.objects.filter(queue=queue).count() == 2
    assert server_advisory_locks() == 0


def test_2000_jobs_2_processes__drained_once_each_through_the_pooler(pooled: None) -> None:
    count = 2_000
    proc, elapsed = drain_once_each(2, 4, count, timeout_s=240)
    print(f"\npgbouncer: 2 processes x 4 threads drained {count} jobs in {elapsed:.2f} s")  # noqa: T201
    assert server_advisory_locks() == 0
    # Each process's listener found LISTEN useless and said so (stderr is shared).
    assert proc.stderr.count(POOLER_LINE) >= 1, proc.stderr[-3000:]


def test_foreman_through_the_pooler__says_so_polls_and_stops(pooled: None) -> None:
    proc = run_workers(
        "--concurrency",
        "2",
        "--min-sleep",
        "50",
        "--max-sleep",
        "20000",
        "--verbosity",
        "1",
        wait=False,
    )
    lines: queue_module.Queue[str] = queue_module.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 30
        seen: list[str] = []
        while not any(POOLER_LINE in line for line in seen):
            assert time.monotonic() < deadline, "no pooler warning in 30 s:\n" + "".join(seen)
            try:
                seen.append(lines.get(timeout=1))
            except queue_module.Empty:
                assert proc.poll() is None, "".join(seen)
        # Idle long enough that the sleep grows past 5 s without the pooler's polls.
        time.sleep(6)
        jid = enqueue_job(None, "worker.record", {"label": "polled"})["jid"]
        enqueued = time.monotonic()
        while not RunRecord.objects.filter(jid=jid).exists():
            assert time.monotonic() - enqueued < 10, "the job was never picked up"
            time.sleep(0.02)
        pickup_s = time.monotonic() - enqueued
        print(f"\npgbouncer: picked up {pickup_s:.3f} s after enqueue (polling)")  # noqa: T201
        assert pickup_s < 2.0

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize(
    "limit",
    [{"concurrency": 3}, {"concurrency": 1, "partition": "payload.label"}],
    ids=["global", "per_key"],
)
def test_limited_claims_through_the_pooler__drain_once_each(
    pooled: None, limit: dict[str, object]
) -> None:
    # A limited claim's flights hold one transaction open between pipelines
    # (django_jobqueue/store/flights.py): the pooler keeps its server session.
    from django_jobqueue.store import limits

    limits.clear_cache()
    limits.set_limit("default", "type:worker.record", limit)
    try:
        drain_once_each(2, 4, 400, timeout_s=240)
    finally:
        limits.clear_cache()
    assert not Job.objects.filter(status=JobStatus.PROCESSING).exists()

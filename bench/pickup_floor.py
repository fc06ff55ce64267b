"""The floor of a LISTEN/NOTIFY pickup on this machine, without the job queue.

Run by ``make bench`` beside bench/pickup.py (PostgreSQL only), or by hand::

    .venv/bin/python bench/pickup_floor.py --jobs 300 --spacing-ms 20

The least a queue woken by LISTEN/NOTIFY and claiming with synchronous commits can do
here: plain psycopg 3, no Django, no threads, a narrow table with one partial index.
One process enqueues one row per transaction, ``--spacing-ms`` apart (an INSERT and
its ``pg_notify`` in one autocommit statement: one commit); another process LISTENs
and, in the thread that got the notification, claims with one autocommit
``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING`` (the second
commit). A row's pickup is the time the claim returned minus the time before its
enqueue, as bench/pickup.py measures ours (which adds a handler's start, a wider row
and its indexes, Django, and the hand-off to a runner thread).

On a quiet 2-CPU virtual machine an idle round trip costs several times a busy one
(each sleeping process wakes up), so this floor is far above pgbench's
latency at full speed. Prints p50/p95/p99 in ms, then the JSON.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from typing import Any

from common import URLS, create_database
from pickup import print_report

TABLE = "bench_pickup_floor"
CHANNEL = "bench_pickup_floor"
CLAIM = (
    f"UPDATE {TABLE} SET state = 'running', claimed_at = clock_timestamp() WHERE id IN "  # noqa: S608
    f"(SELECT id FROM {TABLE} WHERE state = 'queued' ORDER BY id LIMIT 4 "
    "FOR UPDATE SKIP LOCKED) RETURNING enqueued_at"
)
ENQUEUE = (
    f"WITH row AS (INSERT INTO {TABLE} (state, enqueued_at, payload) "  # noqa: S608
    "VALUES ('queued', %s, '{}') RETURNING id) "
    f"SELECT pg_notify('{CHANNEL}', 'default') FROM row"
)


def listener(dsn: str, jobs: int, ready: Any, results: Any) -> None:
    """In its own process: LISTEN, claim on each notification; put the pickups (ms)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        ready.set()
        pickups: list[float] = []
        deadline = time.monotonic() + 120
        while len(pickups) < jobs and time.monotonic() < deadline:
            if not list(conn.notifies(timeout=5, stop_after=1)):
                continue
            rows = conn.execute(CLAIM, prepare=True).fetchall()
            now = time.time()
            pickups += [(now - enqueued_at) * 1000 for (enqueued_at,) in rows]
        results.put(pickups)


def main() -> None:
    """Create the table, run the listener process, enqueue, print the percentiles."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--spacing-ms", type=float, default=20)
    args = parser.parse_args()
    import psycopg

    create_database("postgres")
    dsn = URLS["postgres"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute(
            f"CREATE TABLE {TABLE} (id bigserial PRIMARY KEY, state text NOT NULL, "
            "enqueued_at float8 NOT NULL, claimed_at timestamptz, payload jsonb)"
        )
        conn.execute(f"CREATE INDEX ON {TABLE} (id) WHERE state = 'queued'")
        context = multiprocessing.get_context("spawn")
        ready, results = context.Event(), context.Queue()
        proc = context.Process(target=listener, args=(dsn, args.jobs, ready, results))
        proc.start()
        try:
            if not ready.wait(30):
                raise SystemExit("the listener did not start within 30 s")
            time.sleep(1)  # idle, as bench/pickup.py's worker is
            for _ in range(args.jobs):
                conn.execute(ENQUEUE, (time.time(),), prepare=True)
                time.sleep(args.spacing_ms / 1000)
            pickups = results.get(timeout=60)
        finally:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
            conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    if len(pickups) < args.jobs:
        raise SystemExit(f"only {len(pickups)} of {args.jobs} rows were claimed")
    print_report("postgres", "pickup floor", pickups)


if __name__ == "__main__":
    main()

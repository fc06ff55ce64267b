"""Cost of the connection check a worker makes before each handler.

Run by hand (not part of ``make test``)::

    .venv/bin/python bench/conncheck.py --db postgres --iterations 5000

Times, per call on one open connection of the scratch database (no table used):

- ``is_usable``: Django's check alone (``SELECT 1`` on PostgreSQL, a ping on MySQL);
- ``check idle``: :func:`check_before_handler` on a connection idle past the
  threshold, so it does check (what a job taken after an idle spell pays);
- ``check busy``: the same call within the threshold of the last known use (what a
  job pays whose own claim just ran on the connection: no round trip);
- ``query``: one ``SELECT 1`` through a cursor, for scale (a claim or an outcome
  write is at least one such round trip).

Prints microseconds per call (median of 5 runs) and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

from common import create_database, env_for


def per_call_us(func: Callable[[], object], iterations: int) -> float:
    """Return the median over 5 runs of ``func``'s mean time per call, in microseconds."""
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iterations):
            func()
        runs.append((time.perf_counter() - start) / iterations * 1e6)
    return statistics.median(runs)


def main() -> None:
    """Open a connection, time the check paths, print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["postgres", "mariadb", "sqlite"], default="postgres")
    parser.add_argument("--iterations", type=int, default=5000)
    args = parser.parse_args()
    create_database(args.db)
    os.environ.update(env_for(args.db))
    import django

    django.setup()
    from django.db import connection

    from django_jobqueue.core.reconnect import mark_used
    from django_jobqueue.worker.connections import check_before_handler

    connection.ensure_connection()

    def query() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()

    def busy() -> None:
        mark_used(connection.alias)  # as a claim's write does
        check_before_handler()

    results = {
        "db": args.db,
        "is_usable_us": per_call_us(connection.is_usable, args.iterations),
        "check_idle_us": per_call_us(lambda: check_before_handler(0), args.iterations),
        "check_busy_us": per_call_us(busy, args.iterations),
        "query_us": per_call_us(query, args.iterations),
    }
    for key, value in results.items():
        if key != "db":
            print(f"{key:>14}: {value:8.1f} us")  # noqa: T201
    print(json.dumps(results))  # noqa: T201


if __name__ == "__main__":
    main()

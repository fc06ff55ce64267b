"""Enqueue throughput on PostgreSQL, MariaDB and SQLite: jobs/s and statements per job.

Not a test (timings assert nothing): run it by hand; it creates and migrates its
own scratch databases (``jq_bench_enqueue`` on each server, a file for SQLite)::

    .venv/bin/python bench/enqueue.py                     # all three databases
    .venv/bin/python bench/enqueue.py --db postgres -n 3000
    .venv/bin/python bench/enqueue.py --root ../other-checkout   # that tree's code

Cases, each on an emptied table after a short warm-up:

- ``single``: ``enqueue_job`` in autocommit, one job per transaction;
- ``in_txn``: 5,000 ``enqueue_job`` inside one ``transaction.atomic()``;
- ``add_id``: ``Queue.add(id=...)``, a fresh id each (docs/design.md#ids);
- ``unique``: ``enqueue_job(unique_key=...)``, a fresh key each;
- ``bulk``: ``enqueue_many`` of 5,000 jobs in one call (skipped by a tree without it).

It prints one line per case (jobs/s, statements per job: every ``cursor.execute``
Django sent in the timed run, over its jobs) and, with ``--json``, writes them to a
file. ``JQ_BENCH_DB_SUFFIX`` is appended to the scratch databases' names.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

#: ``JQ_BENCH_DB_SUFFIX`` as in bench/common.py: two runs on one server stay apart.
_NAME = "jq_bench_enqueue" + (
    f"_{os.environ['JQ_BENCH_DB_SUFFIX']}" if os.environ.get("JQ_BENCH_DB_SUFFIX") else ""
)
URLS = {
    "postgres": f"postgres://postgres@127.0.0.1:5432/{_NAME}",
    "mariadb": f"mysql://root@127.0.0.1:3306/{_NAME}",
    "sqlite": f"sqlite:////tmp/{_NAME}.sqlite3",
}
JOB_TYPE = "nodup.noop"


def ensure_database(url: str) -> None:
    """Create the scratch database of ``url`` if its server has none."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(
            host=parts.hostname, port=parts.port, user=parts.username, dbname="postgres",
            autocommit=True,
        ) as conn:  # fmt: skip
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
    elif url.startswith("mysql"):
        import MySQLdb

        conn = MySQLdb.connect(host=parts.hostname, port=parts.port, user=parts.username)
        conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
        conn.close()


def setup(url: str, root: Path) -> None:
    """Set Django up on ``url`` with the test settings of the tree at ``root``; migrate."""
    sys.path.insert(0, str(root))
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _empty() -> None:
    from django_jobqueue.models import Job

    Job.objects.all().delete()


def _timed(func: Any, count: int) -> tuple[float, float]:
    """Return (jobs/s, statements per job) of ``func(start, stop, tag)`` over ``count`` jobs.

    Statements are every ``cursor.execute`` Django sent during the timed run
    (``connection.execute_wrapper``: a counter, no capture), divided by ``count``;
    BEGIN/COMMIT that the driver sends by itself (``transaction.atomic``) are not
    among them. One warm-up job runs first, on its own.
    """
    from django.db import connection

    func(0, 1, "warm")
    _empty()
    statements = 0

    def counting(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal statements
        statements += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counting):
        start = time.perf_counter()
        func(0, count, "run")
        elapsed = time.perf_counter() - start
    return count / elapsed, statements / count


def cases(count: int) -> dict[str, Any]:
    """The benchmark cases: name -> function(start, stop, tag) that enqueues jobs."""
    from django.db import transaction

    import django_jobqueue
    from django_jobqueue import enqueue_job
    from django_jobqueue.ids import Queue

    def single(a: int, b: int, tag: str) -> None:
        for i in range(a, b):
            enqueue_job("bench", JOB_TYPE, {"n": i})

    def in_txn(a: int, b: int, tag: str) -> None:
        with transaction.atomic():
            for i in range(a, b):
                enqueue_job("bench", JOB_TYPE, {"n": i})

    def add_id(a: int, b: int, tag: str) -> None:
        queue = Queue("bench", job_type=JOB_TYPE)
        for i in range(a, b):
            queue.add({"n": i}, id=f"{tag}-{i}")

    def unique(a: int, b: int, tag: str) -> None:
        for i in range(a, b):
            enqueue_job("bench", JOB_TYPE, {"n": i}, unique_key=f"{tag}-{i}")

    found = {"single": (single, count), "in_txn": (in_txn, 5000), "add_id": (add_id, count)}
    found["unique"] = (unique, count)
    many = (
        getattr(django_jobqueue, "enqueue_many", None)
        if "enqueue_many" in getattr(django_jobqueue, "__all__", ())
        else None
    )
    if many is not None:

        def bulk(a: int, b: int, tag: str) -> None:
            many(
                [{"queue": "bench", "job_type": JOB_TYPE, "payload": {"n": i}} for i in range(a, b)]
            )

        found["bulk"] = (bulk, 5000)
    return found


def main() -> None:
    """Run the cases on one database (``--db``) or on each in a child process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=sorted(URLS), action="append")
    parser.add_argument("-n", "--count", type=int, default=2000, help="jobs per per-job case")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    databases = args.db or ["postgres", "mariadb", "sqlite"]
    if len(databases) > 1:
        import subprocess

        results: dict[str, Any] = {}
        for db in databases:
            out = subprocess.run(
                [sys.executable, __file__, "--db", db, "-n", str(args.count)]
                + ["--root", str(args.root)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            sys.stdout.write(out.stdout.split("JSON ", 1)[0])
            results[db] = json.loads(out.stdout.split("JSON ", 1)[1])
    else:
        db = databases[0]
        ensure_database(URLS[db])
        setup(URLS[db], args.root.resolve())
        figures = {}
        for name, (func, count) in cases(args.count).items():
            _empty()
            rate, statements = _timed(func, count)
            figures[name] = {
                "jobs_per_s": round(rate),
                "statements_per_job": round(statements, 3),
                "jobs": count,
            }
            print(f"{db:<9} {name:<7} {rate:>9,.0f} jobs/s   {statements:.3g} statements/job")
        _empty()
        results = {db: figures}
        print("JSON " + json.dumps(figures))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

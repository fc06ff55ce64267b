"""Enqueue throughput through the HTTP gateway against in-process enqueueing, on
PostgreSQL, in one run.

Not a test: run it by hand (it needs the ``bench``, ``client`` and ``postgres``
extras)::

    .venv/bin/python bench/gateway.py                      # 500 singles, 5 batches of 1,000
    .venv/bin/python bench/gateway.py --singles 1000 --batches 10 --url postgres://...

It creates (once) and migrates a scratch database, serves the example project (with
``DJANGO_DEBUG=0``, as in production: no query log) with
``gunicorn --workers 2 --worker-class gthread --threads 4`` on 127.0.0.1 (as
docs/gateway.md advises: keep-alive, and a long-polling claim holds a thread, not a
process), with the example project's persistent connections, and times, each on an
emptied job table:

- ``enqueue_job`` in this process, one job per transaction (the baseline of singles);
- bulk in-process: ``enqueue_many`` of 1,000 jobs per call (a loop of ``enqueue_job``
  in one transaction where a tree has no ``enqueue_many``; the label says which ran);
- ``POST /sdk/jobs`` one at a time from one client (jobqueue_client);
- ``POST /sdk/jobs/batch`` with 1,000 jobs per request.

It prints jobs/s of each and the gateway's ratios to the in-process figures. Bounded:
``--max-seconds`` per phase stops a phase early (its rate is still reported).

``--waits`` runs the legs of :mod:`bench.gateway_waits` instead: producers while 200
claims wait, under ASGI (uvicorn) and under WSGI with ``MAX_WAITING_CLAIMS``, and 20
slow sockets behind nginx (``--max-seconds`` bounds each producer leg)::

    .venv/bin/python bench/gateway.py --waits --max-seconds 8

``--clients`` runs :mod:`bench.gateway_clients` instead: each client's worker
(clients/<lang>/conformance worker, concurrency 4) draining ``--jobs`` no-op jobs through
the gateway, side by side, as a ratio to the Python client's worker::

    .venv/bin/python bench/gateway.py --clients --jobs 2000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The servers of the documented deployments, shared with the --waits legs.
from bench.gateway_waits import free_port, start_gunicorn  # noqa: E402

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jq_bench_gateway"
JOB_TYPE, QUEUE = "newsletter.daily_digest", "emails"


def ensure_database(url: str) -> None:
    """Create the scratch database of ``url`` if it does not exist."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")


def empty_jobs() -> None:
    """Delete every job (and unique lock) so each phase starts alike."""
    from django.db import connection

    from django_jobqueue.models import Job

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Job._meta.db_table} CASCADE")


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def timed(label: str, run: Any, max_seconds: float) -> float:
    """Run ``run(deadline) -> jobs``; print and return its jobs/s."""
    empty_jobs()
    start = time.perf_counter()
    jobs = run(start + max_seconds)
    seconds = time.perf_counter() - start
    jobs_per_s = rate(jobs, seconds)
    print(f"{label:<48} {jobs:>6} jobs in {seconds:6.2f} s  {jobs_per_s:9.0f} jobs/s")
    return jobs_per_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="PostgreSQL URL of a scratch database")
    parser.add_argument("--singles", type=int, default=500, help="jobs enqueued one by one")
    parser.add_argument("--batches", type=int, default=5, help="batches of --batch-size")
    parser.add_argument("--batch-size", type=int, default=1_000)
    parser.add_argument("--max-seconds", type=float, default=60, help="bound of each phase")
    parser.add_argument("--waits", action="store_true", help="waiting claims and slow clients")
    parser.add_argument("--clients", action="store_true", help="each client's worker's drain")
    parser.add_argument("--jobs", type=int, default=2_000, help="--clients: jobs per client")
    args = parser.parse_args()

    ensure_database(args.url)
    os.environ["DATABASE_URL"] = args.url
    # --clients: the example project plus the conformance job types its workers run.
    settings = "bench.clients_settings" if args.clients else "example_project.settings"
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from jobqueue_client import Client

    import django_jobqueue
    from django_jobqueue import enqueue_job
    from django_jobqueue.store.apitokens import issue_token

    call_command("migrate", verbosity=0)
    if args.waits:
        from bench import gateway_waits

        both = issue_token("bench-waits", queues=["*"], scopes=["produce", "work"])[1]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "DJANGO_DEBUG": "0"}
        print(f"PostgreSQL {args.url}; example_project on 127.0.0.1")
        gateway_waits.report(gateway_waits.run_legs(env, both, args.max_seconds))
        empty_jobs()
        return
    if args.clients:
        from bench import gateway_clients

        port = free_port()
        server = start_gunicorn({**os.environ, "PYTHONUNBUFFERED": "1"}, port)
        try:
            scopes = ["produce", "read", "work", "admin"]
            print(f"PostgreSQL {args.url}; gunicorn --workers 2 (gthread x 4); {args.jobs} jobs")
            gateway_clients.run(
                f"http://127.0.0.1:{port}/sdk",
                issue_token("bench-clients", queues=["*"], scopes=scopes)[1],
                issue_token("bench-clients-work", queues=["*"], scopes=["work", "produce"])[1],
                args.jobs,
                args.max_seconds,
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
        empty_jobs()
        return
    token = issue_token("bench", queues=[QUEUE], scopes=["produce"])[1]
    total = args.batches * args.batch_size
    payload = {"n": 0}

    def singles(deadline: float) -> int:
        for n in range(args.singles):
            enqueue_job(QUEUE, JOB_TYPE, payload)
            if time.perf_counter() > deadline:
                return n + 1
        return args.singles

    bulk_many = getattr(django_jobqueue, "enqueue_many", None)

    def bulk(deadline: float) -> int:
        for _ in range(args.batches):
            if bulk_many is not None:
                bulk_many(
                    [{"queue": QUEUE, "job_type": JOB_TYPE, "payload": payload}] * args.batch_size
                )
            else:
                with transaction.atomic():
                    for _n in range(args.batch_size):
                        enqueue_job(QUEUE, JOB_TYPE, payload)
        return total

    print(f"PostgreSQL {args.url}; gunicorn --workers 2 (gthread x 4) serving example_project")
    in_single = timed("in-process enqueue_job, one per transaction", singles, args.max_seconds)
    bulk_label = (
        "in-process enqueue_many, 1,000 per call"
        if bulk_many is not None
        else "in-process enqueue_job loop, 1,000 per transaction"
    )
    in_bulk = timed(bulk_label, bulk, args.max_seconds)

    port = free_port()
    server = start_gunicorn({**os.environ, "PYTHONUNBUFFERED": "1", "DJANGO_DEBUG": "0"}, port)
    try:
        with Client(f"http://127.0.0.1:{port}/sdk", token) as jq:
            jq.enqueue(JOB_TYPE, payload, queue=QUEUE)  # warm both workers' imports

            def http_singles(deadline: float) -> int:
                for n in range(args.singles):
                    jq.enqueue(JOB_TYPE, payload, queue=QUEUE)
                    if time.perf_counter() > deadline:
                        return n + 1
                return args.singles

            def http_batches(deadline: float) -> int:
                jobs = [
                    {"job_type": JOB_TYPE, "payload": payload, "queue": QUEUE}
                ] * args.batch_size
                done = 0
                for _ in range(args.batches):
                    done += len(jq.enqueue_batch(jobs))
                    if time.perf_counter() > deadline:
                        break
                return done

            gw_single = timed(
                "gateway POST /sdk/jobs, one client, sequential", http_singles, args.max_seconds
            )
            gw_batch = timed(
                "gateway POST /sdk/jobs/batch, 1,000 per request", http_batches, args.max_seconds
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    empty_jobs()
    print()
    print(f"gateway single / in-process enqueue_job: {gw_single / in_single:.2f}")
    print(f"gateway batch  / in-process bulk:        {gw_batch / in_bulk:.2f}")
    print(f"gateway batch  / in-process enqueue_job: {gw_batch / in_single:.2f}")


if __name__ == "__main__":
    main()

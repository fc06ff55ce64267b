"""Drain rate with a million jobs waiting against the rate with 10,000, on PostgreSQL.

Run by hand or by ``make bench`` (not part of ``make test``)::

    .venv/bin/python bench/bigdrain.py                          # 10,000 then 1,000,000
    .venv/bin/python bench/bigdrain.py --waiting 10000 --waiting 100000 --measure 2000

For each ``--waiting`` size the scratch database (``bench.common.URLS``) is refilled
with that many due ``bench.noop`` jobs by one ``INSERT ... SELECT generate_series``
(bench/admin_changelist.py's ``fill``: seconds, not minutes, for a million), then
ANALYZEd. ``runworkers --processes P --concurrency C`` (not ``--burst``) is started,
and this process reads the count of done jobs every 50 ms: the rate is the jobs done
between the count passing 10% and 90% of ``--measure``, over that time, so neither the
start-up nor the last jobs of the small size weigh on it. The table is emptied
at the end. Prints one line per size, the ratio of the last to the first, and JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

from admin_changelist import fill
from common import ROOT, env_for, setup


def empty() -> None:
    """TRUNCATE the job table (a DELETE of a million rows takes long)."""
    from django.db import connection

    from django_jobqueue.models import Job

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Job._meta.db_table}")


def seed(rows: int) -> float:
    """Replace the job table by ``rows`` due, waiting ``bench.noop`` jobs; return seconds."""
    from django_jobqueue import enqueue_job
    from django_jobqueue.models import Job

    empty()
    enqueue_job(None, "bench.noop")
    queue = Job.objects.values_list("queue", flat=True).get()
    started = time.perf_counter()
    fill(
        rows,
        {
            "queue": "'" + queue.replace("'", "''") + "'",
            "job_type": "'bench.noop'",
            "payload": "'null'::jsonb",
            "status": "'init'",
            "waiting": "true",
            "attempt": "0",
            "run_at": "now() - interval '1 minute'",
            "finished_at": "NULL",
            "unique_key": "NULL",
            "unique_key_hash": "NULL",
            "unique_mode": "''",
            "unique_expires_at": "NULL",
        },
    )
    return time.perf_counter() - started


def windowed_rate(db: str, measure: int, processes: int, concurrency: int) -> dict[str, Any]:
    """Run runworkers on the seeded table; return the steady rate over ``measure`` jobs.

    Returns ``{"rate", "window_s", "jobs_in_window"}`` (jobs/s, s, jobs). Raises
    SystemExit when the workers exit early or 90% of ``measure`` jobs are not done
    within 10 minutes.
    """
    from django.db import connection

    from django_jobqueue.models import Job

    table = Job._meta.db_table
    start_at, stop_at = max(1, measure // 10), max(2, measure * 9 // 10)
    log = tempfile.TemporaryFile(mode="w+")  # a pipe nobody reads would block its logging
    worker = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "django", "runworkers"]
        + ["--processes", str(processes), "--concurrency", str(concurrency)],
        cwd=ROOT,
        env=env_for(db),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    first: tuple[float, int] | None = None
    try:
        deadline = time.monotonic() + 600
        while True:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT count(*) FROM {table} WHERE status = 'done'")  # noqa: S608
                done = cursor.fetchone()[0]
            now = time.monotonic()
            if first is None and done >= start_at:
                first = (now, done)
            if first is not None and done >= stop_at:
                break
            if worker.poll() is not None:
                log.seek(0)
                raise SystemExit(f"runworkers exited {worker.returncode}: {log.read()[-3000:]}")
            if now > deadline:
                raise SystemExit(f"only {done} of {measure} jobs done in 10 minutes")
            time.sleep(0.05)
    finally:
        worker.terminate()
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
    window = now - first[0]
    return {
        "rate": (done - first[1]) / window,
        "window_s": window,
        "jobs_in_window": done - first[1],
    }


def main() -> None:
    """Seed each size, measure, print the lines, the ratio and JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, action="append", help="jobs waiting (repeatable)")
    parser.add_argument("--measure", type=int, default=10_000, help="jobs drained per size")
    parser.add_argument("--layout", default="1x4", help="PxC: processes x threads")
    args = parser.parse_args()
    sizes = args.waiting or [10_000, 1_000_000]
    if min(sizes) < args.measure:
        raise SystemExit(f"--measure {args.measure} is more than the smallest --waiting")
    processes, concurrency = (int(n) for n in args.layout.split("x"))
    setup("postgres")
    report: dict[str, Any] = {"layout": args.layout, "measure": args.measure, "sizes": {}}
    try:
        for size in sizes:
            seconds = seed(size)
            figures = windowed_rate("postgres", args.measure, processes, concurrency)
            figures["seed_s"] = seconds
            report["sizes"][str(size)] = figures
            print(f"{size:>9,} waiting: {figures['rate']:,.0f} jobs/s (seeded in {seconds:.1f} s)")
    finally:
        empty()
    rates = [report["sizes"][str(size)]["rate"] for size in sizes]
    report["ratio"] = rates[-1] / rates[0]
    print(f"ratio {sizes[-1]:,} / {sizes[0]:,}: {report['ratio']:.2f}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()

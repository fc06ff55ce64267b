"""Pickup latency: time from an enqueue's commit to its handler's start, idle worker.

Run by hand (not part of ``make test``)::

    .venv/bin/python bench/pickup.py --db postgres --jobs 200 --spacing-ms 20

Starts ``runworkers --concurrency 4`` (idle), then enqueues ``bench.stamp`` jobs one
at a time, ``--spacing-ms`` apart, each in its own transaction, from this process
(another process than the worker's, so the wake-up is the database's: NOTIFY on
PostgreSQL, polling elsewhere). A job's pickup is its handler's ``time.time()``
(its result) minus the time just before its enqueue. Prints p50/p95/p99 in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from common import ROOT, clear_jobs, env_for, setup


def percentile(values: list[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def print_report(db: str, label: str, latencies: list[float]) -> None:
    """Print ``latencies`` (ms) as p50/p95/p99, then the JSON line bench/run.py reads."""
    report = {
        "db": db,
        "jobs": len(latencies),
        "p50_ms": percentile(latencies, 0.50),
        "p95_ms": percentile(latencies, 0.95),
        "p99_ms": percentile(latencies, 0.99),
        "mean_ms": statistics.fmean(latencies),
    }
    print(
        f"{db} {label} ms: p50 {report['p50_ms']:.2f}  p95 {report['p95_ms']:.2f}  "
        f"p99 {report['p99_ms']:.2f}"
    )
    print(json.dumps(report))


def main() -> None:
    """Run the worker, enqueue spaced jobs, print the latency percentiles and JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["postgres", "mariadb", "sqlite"], default="postgres")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--spacing-ms", type=float, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    setup(args.db)
    from django_jobqueue import enqueue_job
    from django_jobqueue.models import Job

    clear_jobs()
    worker = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "django", "runworkers", "--concurrency", str(args.concurrency)],
        cwd=ROOT,
        env=env_for(args.db),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(3)  # started, listening, idle
        sent: dict[str, float] = {}
        for _ in range(args.jobs):
            before = time.time()
            sent[enqueue_job(None, "bench.stamp").jid] = before
            time.sleep(args.spacing_ms / 1000)
        deadline = time.monotonic() + 30
        while Job.objects.filter(status="done").count() < args.jobs:
            if time.monotonic() > deadline:
                raise SystemExit("not every job ran within 30 s")
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait(30)
    latencies = [
        (result - sent[jid]) * 1000 for jid, result in Job.objects.values_list("jid", "result")
    ]
    print_report(args.db, "pickup", latencies)


if __name__ == "__main__":
    main()

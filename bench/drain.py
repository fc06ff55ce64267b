"""Drain no-op jobs with real ``runworkers --burst`` processes; print jobs/s.

Run by hand (minutes; not part of ``make test``)::

    .venv/bin/python bench/drain.py --db postgres --jobs 5000 --layout 1x4 --layout 4x1
    .venv/bin/python bench/drain.py --db mariadb --statements

Each round deletes every job of the scratch database (``bench.common.URLS``),
enqueues ``--jobs`` no-op jobs in one transaction, then times ``runworkers --burst
--processes P --concurrency C`` from its start to its exit and checks every job is
``done``. ``--statements`` also drains once in-process and counts the SQL statements
the worker sent per job (every ``cursor.execute``; transaction BEGIN/COMMIT that a
driver sends by itself are not counted).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

from common import clear_jobs, runworkers, setup


def fill(jobs: int) -> None:
    """Enqueue ``jobs`` no-op jobs in one transaction."""
    from django.db import transaction

    from django_jobqueue import enqueue_job

    clear_jobs()
    with transaction.atomic():
        for _ in range(jobs):
            enqueue_job(None, "bench.noop")


def done_count() -> int:
    """Return how many jobs are done."""
    from django_jobqueue.models import Job, JobStatus

    return Job.objects.filter(status=JobStatus.DONE).count()


def drain_once(db: str, jobs: int, processes: int, concurrency: int) -> float:
    """Fill, drain with runworkers, check; return jobs per second."""
    fill(jobs)
    started = time.monotonic()
    proc = runworkers(
        db, "--burst", "--processes", str(processes), "--concurrency", str(concurrency)
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"runworkers failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    finished = done_count()
    if finished != jobs:
        raise SystemExit(f"{finished} of {jobs} jobs done")
    return jobs / elapsed


def statements_per_job(jobs: int, concurrency: int) -> dict[str, float]:
    """Drain ``jobs`` in-process (1 x ``concurrency``); return statements per job."""
    from django.db.backends import utils

    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    fill(jobs)
    counts: dict[str, int] = {}
    lock = threading.Lock()
    originals = {cls: cls.execute for cls in (utils.CursorWrapper, utils.CursorDebugWrapper)}

    def counting(original: Any) -> Any:
        def execute(self: Any, sql: str, params: Any = None) -> Any:
            verb = sql.split(None, 1)[0].upper()
            with lock:
                counts[verb] = counts.get(verb, 0) + 1
            return original(self, sql, params)

        return execute

    for cls, original in originals.items():
        cls.execute = counting(original)  # type: ignore[method-assign]
    try:
        foreman = Foreman(ForemanOptions(burst=True, concurrency=concurrency))
        foreman.run(install_signals=False)
    finally:
        for cls, original in originals.items():
            cls.execute = original  # type: ignore[method-assign]
    if done_count() != jobs:
        raise SystemExit("in-process drain left jobs undone")
    per_job = {verb: count / jobs for verb, count in sorted(counts.items())}
    per_job["total"] = sum(counts.values()) / jobs
    per_job["claims_per_job"] = getattr(foreman, "claims", jobs) / jobs
    if getattr(foreman, "completer", None) is not None:
        per_job["done_writes_per_job"] = foreman.completer.flushes / jobs
    return per_job


def main() -> None:
    """Parse the options, run the rounds, print a table and JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["postgres", "mariadb", "sqlite"], default="postgres")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--layout", action="append", help="PxC: processes x threads")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--statements", action="store_true")
    args = parser.parse_args()
    setup(args.db)
    report: dict[str, Any] = {"db": args.db, "jobs": args.jobs, "layouts": {}}
    for layout in args.layout or ["1x4", "4x1"]:
        processes, concurrency = (int(n) for n in layout.split("x"))
        rates = [drain_once(args.db, args.jobs, processes, concurrency) for _ in range(args.repeat)]
        report["layouts"][layout] = {"rates": rates, "median": statistics.median(rates)}
        print(f"{args.db} {layout}: {statistics.median(rates):,.0f} jobs/s  {rates}")
    if args.statements:
        report["statements_per_job"] = statements_per_job(min(args.jobs, 2000), 4)
        print("statements per job:", report["statements_per_job"])
    print(json.dumps(report))


if __name__ == "__main__":
    main()

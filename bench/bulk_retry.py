"""Time a bulk "retry every match" over many dead jobs on PostgreSQL, and how long a
claim waits meanwhile (docs/console.md "Bulk by filter").

A scratch database of ``--rows`` jobs, all dead letters (``max_retry``) of one queue
with a ``customer_id`` in their payload. The bulk retry runs the filter
``queue:bulk state:failed`` through :func:`django_jobqueue.operations.act_in_batches`
(500 jobs per write transaction) while a second thread claims from another queue in a
loop; the report gives the retry's total time, its slowest batch, and the claim's
slowest wait, so "never blocks a claim for more than 100 ms at a time" is read off::

    .venv/bin/python bench/bulk_retry.py                 # 100,000 dead jobs
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admin_changelist import ensure_database, fill  # noqa: E402

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jq_bench_bulk"


def main() -> int:
    """Fill, then time the bulk retry and the concurrent claims."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="Scratch PostgreSQL database URL.")
    parser.add_argument("--rows", type=int, default=100_000, help="Dead jobs to retry.")
    args = parser.parse_args()

    ensure_database(args.url)
    os.environ["DATABASE_URL"] = args.url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from django_jobqueue import storage
    from django_jobqueue.models import Job
    from django_jobqueue.operations import act_in_batches
    from django_jobqueue.store.audit import Actor
    from django_jobqueue.store.jobfilter import filter_jobs
    from tests.maintenance_helpers import make_jobs

    call_command("migrate", verbosity=0)
    fill(
        args.rows,
        {
            "queue": "'bulk'",
            "status": "'max_retry'",
            "waiting": "false",
            "payload": "jsonb_build_object('customer_id', g %% 100)",
        },
    )
    make_jobs(5_000, queue="bench-claims", job_type="maint.noop")

    waits: list[float] = []
    stop = threading.Event()

    def claimer() -> None:
        while not stop.is_set():
            began = time.perf_counter()
            jobs = storage.claim("default", owner="bench-worker", queues=["bench-claims"], limit=1)
            waits.append(time.perf_counter() - began)
            for job in jobs:
                storage.complete(job, None)
            time.sleep(0.005)
        connections.close_all()

    thread = threading.Thread(target=claimer)
    thread.start()
    time.sleep(0.5)
    baseline = len(waits)
    began = time.perf_counter()
    jobs = filter_jobs(Job.objects.all(), "queue:bulk state:failed")
    counts = act_in_batches(jobs, "retry", Actor("cli", "bench"), target="bench")
    elapsed = time.perf_counter() - began
    stop.set()
    thread.join()
    during = sorted(waits[baseline:])
    quiet = sorted(waits[:baseline]) or [0.0]
    print(f"retried {counts.get('dead', 0)} of {args.rows} dead jobs in {elapsed:.1f} s")
    print(
        f"claims during it: {len(during)}, median {1000 * during[len(during) // 2]:.1f} ms, "
        f"p99 {1000 * during[len(during) * 99 // 100]:.1f} ms, slowest {1000 * during[-1]:.1f} ms, "
        f"over 100 ms: {sum(1 for w in during if w > 0.1)}; before it: median "
        f"{1000 * quiet[len(quiet) // 2]:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

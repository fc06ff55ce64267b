"""Batches and workflows against a plain drain (docs/workflows.md "Speed").

Run by hand (minutes; not part of ``make test``)::

    .venv/bin/python bench/workflows.py --db postgres
    .venv/bin/python bench/workflows.py --db mariadb --jobs 2000 --rounds 1

Per round, on the scratch database of bench/common.py:

1. **plain**: ``--jobs`` no-op jobs enqueued in one transaction, drained by
   ``runworkers --burst --processes P --concurrency C``;
2. **batch**: the same jobs enqueued inside ``with batch(on_finish=...)``, drained
   the same way (the callback is a job of the drain too).

It prints each drain's rate (jobs/s over the drain's steady part: first job's start
to last job's end, the rows' own clock), the ratio batch / plain (median of the
rounds; the goal is at least 0.8), and the callback's delay: from the last job of the
batch done to its ``on_finish`` callback started (database clock, ms).

On PostgreSQL it then enqueues a 1,000-node fan-out/fan-in workflow (a root, 1,000
dependents of it, a merge after them all), so 1,001 jobs wait ``blocked``, and prints
the claim's own query plan (``EXPLAIN (ANALYZE, BUFFERS)`` of the statement a worker
sends, captured from ``storage.claim`` and rolled back): the claim reads the waiting
range of its index, and the blocked rows (``waiting = false``) are outside it, so they
cost it nothing; the plan is printed beside the plan of the same claim with no
workflow. The last line is the JSON of the results.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from common import clear_jobs, runworkers, setup
from drain import steady_rate


def fill(jobs: int, *, in_batch: bool) -> int | None:
    """Enqueue ``jobs`` no-op jobs in one transaction; inside a batch with an
    ``on_finish`` callback when ``in_batch``; return the batch's id."""
    from django.db import transaction

    import django_jobqueue as jq

    clear_jobs()
    with transaction.atomic():
        if not in_batch:
            for start in range(0, jobs, 1000):
                jq.enqueue_many([{"job_type": "bench.noop"}] * min(1000, jobs - start))
            return None
        with jq.batch(on_finish="bench.batch_done") as b:
            for start in range(0, jobs, 1000):
                jq.enqueue_many([{"job_type": "bench.noop"}] * min(1000, jobs - start))
        return int(b.id)


def drain(db: str, jobs: int, layout: tuple[int, int], *, in_batch: bool) -> dict[str, Any]:
    """One round: fill, drain, check; return its rate (and the callback's delay)."""
    from django.db.models import Max

    import django_jobqueue as jq
    from django_jobqueue.models import Job, JobStatus

    batch_id = fill(jobs, in_batch=in_batch)
    processes, concurrency = layout
    started = time.monotonic()
    proc = runworkers(
        db, "--burst", "--processes", str(processes), "--concurrency", str(concurrency)
    )
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"runworkers failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    done = Job.objects.filter(status=JobStatus.DONE, job_type="bench.noop").count()
    if done != jobs:
        raise SystemExit(f"{done} of {jobs} jobs done")
    out: dict[str, Any] = {"wall_jobs_per_s": jobs / wall}
    if batch_id is None:
        out["jobs_per_s"] = steady_rate(jobs)
        return out
    batch = jq.get_batch(batch_id)
    assert batch is not None and batch.finish_jid, "no on_finish callback was made"
    callback = Job.objects.get(jid=batch.finish_jid)
    if callback.status != JobStatus.DONE:
        raise SystemExit(f"the callback is {callback.status}, not done")
    last = Job.objects.filter(batch_id=batch_id).aggregate(last=Max("finished_at"))["last"]
    out["callback_delay_ms"] = (callback.started_at - last).total_seconds() * 1000
    # The batch's own jobs only: the callback ran after them.
    out["jobs_per_s"] = _batch_rate(batch_id, jobs)
    return out


def _batch_rate(batch_id: int, jobs: int) -> float:
    from django.db.models import Max, Min

    from django_jobqueue.models import Job

    span = Job.objects.filter(batch_id=batch_id).aggregate(
        first=Min("started_at"), last=Max("finished_at")
    )
    return jobs / max((span["last"] - span["first"]).total_seconds(), 1e-6)


def claim_plan() -> dict[str, Any]:
    """PostgreSQL: the claim's plan with no workflow and with 1,001 blocked jobs."""
    from django.db import connection, transaction

    import django_jobqueue as jq
    from django_jobqueue import storage
    from django_jobqueue.models import Job, JobStatus

    def explain() -> list[str]:
        captured: list[tuple[str, Any]] = []

        def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            if sql.lstrip().upper().startswith("UPDATE") and "RETURNING" in sql:
                captured.append((sql, params))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(capture):
            sid = transaction.savepoint()
            storage.claim("default", owner="bench", limit=10)
            transaction.savepoint_rollback(sid)
        sql, params = captured[0]
        with connection.cursor() as cursor:
            sid = transaction.savepoint()
            cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", params)
            lines = [row[0] for row in cursor.fetchall()]
            transaction.savepoint_rollback(sid)
        return lines

    def vacuum() -> None:  # the drains' dead rows out of the index, as a live table's are
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM (ANALYZE) {Job._meta.db_table}")

    clear_jobs()
    for _start in range(0, 10_000, 1000):
        jq.enqueue_many([{"job_type": "bench.noop"}] * 1000)
    vacuum()
    with transaction.atomic():
        plain = explain()
    w = jq.Workflow("bench-fan")
    w.add("root", "bench.noop")
    for i in range(1000):
        w.add(f"part{i}", "bench.noop", after=["root"])
    w.add("merge", "bench.noop", after=[f"part{i}" for i in range(1000)])
    w.enqueue()
    blocked = Job.objects.filter(status=JobStatus.BLOCKED).count()
    vacuum()
    with transaction.atomic():
        with_workflow = explain()
    return {"blocked": blocked, "plain": plain, "with_workflow": with_workflow}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["postgres", "mariadb", "sqlite"], default="postgres")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layout", default="1x4", help="processes x threads, e.g. 1x4")
    args = parser.parse_args()
    setup(args.db)
    processes, concurrency = (int(n) for n in args.layout.split("x"))
    plain, batch = [], []
    for _round in range(args.rounds):
        plain.append(drain(args.db, args.jobs, (processes, concurrency), in_batch=False))
        batch.append(drain(args.db, args.jobs, (processes, concurrency), in_batch=True))
    plain_rate = statistics.median(r["jobs_per_s"] for r in plain)
    batch_rate = statistics.median(r["jobs_per_s"] for r in batch)
    delay = statistics.median(r["callback_delay_ms"] for r in batch)
    results: dict[str, Any] = {
        "db": args.db,
        "jobs": args.jobs,
        "layout": args.layout,
        "plain_jobs_per_s": round(plain_rate, 1),
        "batch_jobs_per_s": round(batch_rate, 1),
        "ratio": round(batch_rate / plain_rate, 3),
        "callback_delay_ms": round(delay, 1),
        "rounds": {"plain": plain, "batch": batch},
    }
    print(
        f"{args.db} {args.layout}: plain {plain_rate:.0f} jobs/s, batch with on_finish "
        f"{batch_rate:.0f} jobs/s, ratio {batch_rate / plain_rate:.2f}; "
        f"callback started {delay:.0f} ms after the last job was done"
    )
    from django.db import connection

    if connection.vendor == "postgresql":
        plans = claim_plan()
        results["claim_plan"] = plans
        print("\nThe claim with 10,000 due jobs and no workflow:")
        print("\n".join(plans["plain"]))
        print(f"\nThe same claim with {plans['blocked']} blocked jobs of a workflow waiting:")
        print("\n".join(plans["with_workflow"]))
    clear_jobs()
    print(json.dumps(results, default=str))


if __name__ == "__main__":
    main()

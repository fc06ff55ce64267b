"""Drains under flow-control limits (docs/limits.md), as ratios to the unlimited drain
of the same run; and a rate held over a window.

Run by hand (minutes; not part of ``make test``)::

    .venv/bin/python bench/limits.py --db postgres --jobs 10000
    .venv/bin/python bench/limits.py --db postgres --rate 500 --seconds 30 --processes 4

Each round enqueues ``--jobs`` no-op jobs (``bench.noop``) into the scratch database
(``bench.common.URLS``) and times ``runworkers --burst`` at ``--layout`` (steady
rate: first start to last finish, by the rows), in this order, repeated ``--repeat``
times, each figure the median:

- ``unlimited``: no limit (the claim's plain statement);
- ``global_1000``: ``concurrency: 1000`` on the job type (the limited claim, never at
  its limit);
- ``keys_1000``: ``concurrency: 1`` per key over 1,000 keys (``limit_key``);
- ``keys_100_fresh``: ``concurrency: 1`` per key, jobs over 100 keys, 100 keys ever used;
- ``keys_100_of_100k``: the same after 100,000 keys were used (their limit rows made
  and their jobs done and kept).

It prints each rate and the ratios the issue quotes (``global_1000 / unlimited`` >= 0.8,
``keys_1000 / unlimited`` >= 0.6, ``keys_100_of_100k / keys_100_fresh`` >= 0.9).
``--rate N`` instead runs ``--processes`` x 4 workers on jobs of a type limited to
``N/s`` for ``--seconds`` and prints the starts per second measured over the window.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from common import runworkers, setup

#: The limit keys of the jobs done before a drain (keys ever used): kept by every fill.
OLD = "old"


def clear_jobs() -> None:
    """Delete the jobs of earlier rounds, but not those of the keys used before."""
    from django_jobqueue.models import Job

    Job.objects.exclude(limit_key__startswith=OLD).delete()


def _set(limit: dict[str, Any] | None) -> None:
    from django_jobqueue.models import LimitOverride
    from django_jobqueue.store import limits

    LimitOverride.objects.all().delete()
    if limit is not None:
        limits.set_limit("default", "type:bench.noop", limit, by="bench")


def fill(jobs: int, keys: int | None) -> None:
    """Enqueue ``jobs`` no-op jobs in one transaction, over ``keys`` limit keys (None: none)."""
    from django.db import transaction

    from django_jobqueue import enqueue_many

    clear_jobs()
    with transaction.atomic():
        for start in range(0, jobs, 1000):
            count = min(1000, jobs - start)
            if keys is None:
                enqueue_many([{"job_type": "bench.noop"}] * count)
            else:
                enqueue_many(
                    [
                        {"job_type": "bench.noop", "limit_key": f"k{(start + i) % keys}"}
                        for i in range(count)
                    ]
                )


def steady(jobs: int) -> float:
    """Jobs per second from the first start to the last finish (the rows' clock)."""
    from django.db.models import Max, Min

    from django_jobqueue.models import Job, JobStatus

    rows = Job.objects.exclude(limit_key__startswith=OLD)
    done = rows.filter(status=JobStatus.DONE).count()
    if done != jobs:
        raise SystemExit(f"{done} of {jobs} jobs done")
    span = rows.aggregate(first=Min("started_at"), last=Max("finished_at"))
    return jobs / max((span["last"] - span["first"]).total_seconds(), 1e-6)


def drain(db: str, layout: str, jobs: int, keys: int | None, limit: dict[str, Any] | None) -> float:
    """One round: set the limit, fill, drain with runworkers; its steady jobs/s."""
    processes, concurrency = layout.split("x")
    _set(limit)
    fill(jobs, keys)
    proc = runworkers(db, "--burst", "--processes", processes, "--concurrency", concurrency)
    if proc.returncode != 0:
        raise SystemExit(f"runworkers failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return steady(jobs)


def keys_ever_used(count: int) -> None:
    """Leave ``count`` keys used before: their limit rows, and one done job each."""
    from django.db import connection, transaction

    from django_jobqueue.models import Job, LimitState

    LimitState.objects.all().delete()
    with transaction.atomic():
        LimitState.objects.bulk_create(
            [LimitState(target="type:bench.noop", limit_key=f"{OLD}{i}") for i in range(count)],
            batch_size=5000,
        )
    fill(count, None)
    table = connection.ops.quote_name(Job._meta.db_table)
    key = f"CONCAT('{OLD}', id)" if connection.vendor == "mysql" else f"'{OLD}' || id"
    with connection.cursor() as cursor:  # done, a key each: finished jobs kept
        cursor.execute(
            f"UPDATE {table} SET status = 'done', waiting = %s, limit_key = {key}",  # noqa: S608
            [False],
        )
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE")  # as autovacuum does after such a change
        elif connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {table}")


def rounds(db: str, layout: str, jobs: int, repeat: int) -> dict[str, float]:
    """The medians of every scenario, interleaved round by round."""
    from django_jobqueue.models import LimitState

    per_key = {"concurrency": 1, "partition": "key"}
    scenarios: dict[str, tuple[int | None, dict[str, Any] | None]] = {
        "unlimited": (None, None),
        "global_1000": (None, {"concurrency": 1000}),
        "keys_1000": (1000, per_key),
    }
    rates: dict[str, list[float]] = {name: [] for name in [*scenarios, "keys_100_fresh"]}
    rates["keys_100_of_100k"] = []
    for _round in range(repeat):
        for name, (keys, limit) in scenarios.items():
            rates[name].append(drain(db, layout, jobs, keys, limit))
        LimitState.objects.all().delete()
        rates["keys_100_fresh"].append(drain(db, layout, jobs, 100, per_key))
    keys_ever_used(100_000)
    for _round in range(repeat):
        # The drain clears the jobs: the 100,000 limit rows stay (keys seen before).
        rates["keys_100_of_100k"].append(drain(db, layout, jobs, 100, per_key))
    _set(None)
    return {name: statistics.median(values) for name, values in rates.items()}


def rate_window(db: str, rate: int, seconds: float, processes: int) -> dict[str, float]:
    """Drain a type limited to ``rate``/s for ``seconds``; return the measured starts/s."""
    import subprocess
    import sys

    from common import ROOT, env_for

    from django_jobqueue.models import Job

    _set({"rate": f"{rate}/s"})
    fill(int(rate * seconds * 1.5), None)
    worker = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "django", "runworkers", "--processes", str(processes)]
        + ["--concurrency", "4", "--verbosity", "0"],
        cwd=ROOT,
        env=env_for(db),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(seconds + 5)
    finally:
        worker.terminate()
        worker.wait(60)
    starts = sorted(
        t for t in Job.objects.exclude(started_at=None).values_list("started_at", flat=True)
    )
    # The window: from 2 s after the first start (the bucket's burst spent), seconds long.
    first = starts[0].timestamp() + 2
    window = [t for t in starts if first <= t.timestamp() < first + seconds]
    _set(None)
    return {"rate": rate, "seconds": seconds, "measured_per_s": len(window) / seconds}


def main() -> None:
    """Parse the options, run the scenarios, print the rates, ratios and JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["postgres", "mariadb", "sqlite"], default="postgres")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--layout", default="1x4", help="PxC: processes x threads")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--rate", type=int, help="Measure this rate (starts/s) instead.")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    setup(args.db)
    if args.rate:
        result = rate_window(args.db, args.rate, args.seconds, args.processes)
        print(f"{args.db} rate {args.rate}/s: measured {result['measured_per_s']:.1f}/s")
        print(json.dumps(result))
        return
    medians = rounds(args.db, args.layout, args.jobs, args.repeat)
    ratios = {
        "global_1000/unlimited": medians["global_1000"] / medians["unlimited"],
        "keys_1000/unlimited": medians["keys_1000"] / medians["unlimited"],
        "keys_100_of_100k/keys_100_fresh": medians["keys_100_of_100k"] / medians["keys_100_fresh"],
    }
    for name, value in medians.items():
        print(f"{args.db} {args.layout} {name}: {value:,.0f} jobs/s")
    for name, value in ratios.items():
        print(f"{args.db} {name}: {value:.2f}")
    print(json.dumps({"db": args.db, "layout": args.layout, "rates": medians, "ratios": ratios}))


if __name__ == "__main__":
    main()

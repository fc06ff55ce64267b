"""Bulk enqueue on PostgreSQL: ``COPY`` against the unnest insert, batch by batch size.

Not a test (timings assert nothing): run it by hand; it creates and migrates its own
scratch database (``jq_bench_bulk_copy`` plus ``JQ_BENCH_DB_SUFFIX``)::

    .venv/bin/python bench/bulk_copy.py
    .venv/bin/python bench/bulk_copy.py --sizes 100,1000 --jobs 40000 --rounds 7

For each batch size (10, 100, 1,000, 5,000 and 20,000 jobs by default) it times
``enqueue_many`` of no-op jobs (a payload ``{"n": i}`` each, one queue, one job type)
forced down each path (:data:`django_jobqueue.store.rawcopy.COPY_MIN_ROWS` set to 0
for ``copy``, None for ``unnest``), then as shipped (``auto``: the path
:func:`~django_jobqueue.store.rawcopy.uses_copy` picks). Each round runs about
``--jobs`` jobs per path, the paths in turn (their order rotating round by round),
on a table emptied by ``TRUNCATE`` before each timed run, so the load of the
machine falls on all of them alike; a figure is the median of the rounds. A batch
is one ``enqueue_many`` call in autocommit (its own transaction, commit included).

It prints jobs/s per path and the ratios copy / unnest and auto / best; then the
CPU time per job of the client process and of its PostgreSQL server process
together (``/proc/<pid>/stat`` of ``pg_backend_pid()``: the server must run on this
machine), which the load of other processes on a shared machine moves far less than
the wall-clock rates (commit waits for the WAL flush are not in it); then the
ratio of ``auto`` at 5,000 to Graphile Worker's ``addJobs`` as the referee last
measured it (``--peer-rate``, 59,024 jobs/s; run ``../shared/bench-peers/run``
for both in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402 - its import puts the checkout on sys.path

JOB_TYPE = "bench.noop"
PATHS = ("unnest", "copy", "auto")


def _truncate() -> None:
    from django.db import connection

    from django_jobqueue.models import Job

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Job._meta.db_table}")  # noqa: S608


def _backend_cpu_s() -> float:
    """CPU seconds (user + system) the server process of Django's connection has used.

    Read from ``/proc/<pid>/stat`` of ``pg_backend_pid()``: the benchmark runs beside
    its PostgreSQL, as ``make bench`` does. None of it is the other sessions' load.
    """
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(path: str, size: int, batches: int) -> tuple[float, float]:
    """Enqueue ``batches`` batches of ``size`` jobs down ``path``; return (jobs/s,
    CPU µs per job of this process and its server process together)."""
    from django_jobqueue import enqueue_many
    from django_jobqueue.store import rawcopy

    shipped = rawcopy.COPY_MIN_ROWS
    rawcopy.COPY_MIN_ROWS = {"unnest": None, "copy": 0, "auto": shipped}[path]
    try:
        jobs = [
            [
                {"queue": "bench", "job_type": JOB_TYPE, "payload": {"n": b * size + i}}
                for i in range(size)
            ]
            for b in range(batches)
        ]
        enqueue_many(jobs[0][:1])  # the connection and the plans, outside the timing
        _truncate()
        backend = _backend_cpu_s()
        cpu = time.process_time()
        start = time.perf_counter()
        for batch in jobs:
            enqueue_many(batch)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu + _backend_cpu_s() - backend
        count = size * batches
        return count / elapsed, cpu / count * 1e6
    finally:
        rawcopy.COPY_MIN_ROWS = shipped


def main() -> None:
    """Measure every (size, path) pair in interleaved rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,5000,20000", help="batch sizes")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per path per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (median taken)")
    parser.add_argument("--peer-rate", type=float, default=59_024.0, help="jobs/s of addJobs")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    common.NAME = f"jq_bench_bulk_copy{common.SUFFIX and '_' + common.SUFFIX}"
    common.URLS["postgres"] = f"postgres://postgres@127.0.0.1:5432/{common.NAME}"
    common.setup("postgres")
    from django_jobqueue.store import rawcopy

    rates: dict[int, dict[str, list[float]]] = {size: {p: [] for p in PATHS} for size in sizes}
    cpus: dict[int, dict[str, list[float]]] = {size: {p: [] for p in PATHS} for size in sizes}
    for round_ in range(args.rounds):
        for size in sizes:
            batches = max(1, args.jobs // size)
            order = PATHS[round_ % 3 :] + PATHS[: round_ % 3]
            for path in order:
                rate, cpu = _run(path, size, batches)
                rates[size][path].append(rate)
                cpus[size][path].append(cpu)
    _truncate()

    print(f"COPY_MIN_ROWS = {rawcopy.COPY_MIN_ROWS}; median of {args.rounds} rounds")
    print(
        f"{'batch':>7} {'unnest/s':>10} {'copy/s':>10} {'auto/s':>10}"
        f" {'copy/unnest':>12} {'auto/best':>10} {'unnest µs':>10} {'copy µs':>8}"
        f" {'unnest/copy':>12}  auto takes"
    )
    print(f"{'':>45}(jobs/s){'':>13}(CPU per job, client + server)")
    figures: dict[str, Any] = {}
    for size in sizes:
        med = {p: statistics.median(rates[size][p]) for p in PATHS}
        cpu = {p: statistics.median(cpus[size][p]) for p in PATHS}
        best = max(med["unnest"], med["copy"])
        shipped = rawcopy.COPY_MIN_ROWS
        takes = "copy" if shipped is not None and size >= shipped else "unnest"
        print(
            f"{size:>7,} {med['unnest']:>10,.0f} {med['copy']:>10,.0f} {med['auto']:>10,.0f}"
            f" {med['copy'] / med['unnest']:>12.2f} {med['auto'] / best:>10.2f}"
            f" {cpu['unnest']:>10.1f} {cpu['copy']:>8.1f}"
            f" {cpu['unnest'] / cpu['copy']:>12.2f}  {takes}"
        )
        figures[str(size)] = {
            **{f"{p}_jobs_per_s": round(v) for p, v in med.items()},
            **{f"{p}_cpu_us_per_job": round(v, 2) for p, v in cpu.items()},
            "copy_over_unnest": round(med["copy"] / med["unnest"], 3),
            "auto_takes": takes,
        }
    if 5000 in rates:
        auto = statistics.median(rates[5000]["auto"])
        print(f"auto at 5,000 / addJobs ({args.peer_rate:,.0f}/s): {auto / args.peer_rate:.2f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

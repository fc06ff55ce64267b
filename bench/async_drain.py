"""Drain ``async def`` no-op jobs against sync no-op jobs, one process; print the ratio.

Run by hand (a minute or two; not part of ``make test``)::

    .venv/bin/python bench/async_drain.py --db postgres --jobs 10000 --concurrency 24

Each round fills the scratch database with ``--jobs`` jobs of one type and times
``runworkers --burst --processes 1 --concurrency C`` (bench/drain.py's
``drain_once``): ``bench.noop`` (a sync handler, run in a runner thread) and
``bench.anoop`` (``async def``, run on the foreman's event loop), alternately,
``--repeat`` times each, so both see the same machine. Prints the medians and the
async/sync ratio, steady (first start to last end, from the rows) and from the
command's start to its exit, and the worker process's CPU time per job (user +
system, from ``getrusage``, less that of a run on an empty queue: what a loaded
machine disturbs least), then JSON.

``--log-cost`` compares sync no-op jobs with the per-success "job finished" line (the
default) against ``--no-log-success`` instead: what ``JOBQUEUE["LOG_SUCCESS"]`` costs.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
from typing import Any

from common import clear_jobs, runworkers, setup
from drain import drain_once

#: The variants compared, (job type, runworkers options): both return None at once
#: (bench/jobs.py).
TYPES = {"sync": ("bench.noop", ()), "async": ("bench.anoop", ())}
#: With ``--log-cost``: the same sync jobs with and without the success line.
LOG_VARIANTS = {"log": ("bench.noop", ()), "nolog": ("bench.noop", ("--no-log-success",))}


def children_cpu_s() -> float:
    """Return the user + system CPU seconds of this process's ended children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def empty_run_cpu_s(db: str, concurrency: int, options: tuple[str, ...]) -> float:
    """Return the CPU seconds of ``runworkers --burst`` on an empty queue (its start-up,
    imports and exit), the lowest of three: subtracted from each drain's CPU."""
    clear_jobs()
    costs = []
    for _ in range(3):
        cpu = children_cpu_s()
        runworkers(db, "--burst", "--processes", "1", "--concurrency", str(concurrency), *options)
        costs.append(children_cpu_s() - cpu)
    return min(costs)


def main() -> None:
    """Parse the options, drain both types alternately, print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["postgres", "mariadb", "sqlite"], default="postgres")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--worker-arg", action="append", default=[], help="one more runworkers option"
    )
    parser.add_argument("--log-cost", action="store_true", help="compare the success line")
    args = parser.parse_args()
    variants = LOG_VARIANTS if args.log_cost else TYPES
    setup(args.db)
    rounds: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in variants}
    empty = {
        kind: empty_run_cpu_s(args.db, args.concurrency, (*options, *args.worker_arg))
        for kind, (_job_type, options) in variants.items()
    }
    for _ in range(args.repeat):
        for kind, (job_type, options) in variants.items():
            cpu = children_cpu_s()
            rate, steady = drain_once(
                args.db,
                args.jobs,
                1,
                args.concurrency,
                (*options, *args.worker_arg),
                job_type,
            )
            cpu_us = (children_cpu_s() - cpu - empty[kind]) / args.jobs * 1e6
            rounds[kind].append((rate, steady, cpu_us))
    report: dict[str, Any] = {"db": args.db, "jobs": args.jobs, "concurrency": args.concurrency}
    for kind, results in rounds.items():
        report[kind] = {
            "rates": [r[0] for r in results],
            "steady_rates": [r[1] for r in results],
            "cpu_us_per_job": [r[2] for r in results],
            "median": statistics.median(r[0] for r in results),
            "steady_median": statistics.median(r[1] for r in results),
            "cpu_us_median": statistics.median(r[2] for r in results),
        }
        print(
            f"{args.db} 1x{args.concurrency} {kind}: {report[kind]['steady_median']:,.0f} "
            f"jobs/s steady, {report[kind]['median']:,.0f} from start to exit, "
            f"{report[kind]['cpu_us_median']:,.0f} us CPU per job"
        )
    first, second = list(variants)
    report["ratio_steady"] = report[second]["steady_median"] / report[first]["steady_median"]
    report["ratio"] = report[second]["median"] / report[first]["median"]
    report["cpu_ratio"] = report[first]["cpu_us_median"] / report[second]["cpu_us_median"]
    print(
        f"{second}/{first}: {report['ratio_steady']:.2f}x steady, "
        f"{report['ratio']:.2f}x from start to exit, {report['cpu_ratio']:.2f}x fewer CPU "
        "seconds per job"
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()

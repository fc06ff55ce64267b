"""Drain ``async def`` no-op jobs against sync no-op jobs, one process; print the ratio.

Run by hand (a minute or two; not part of ``make test``)::

    .venv/bin/python bench/async_drain.py --db postgres --jobs 10000 --concurrency 24

Each round fills the scratch database with ``--jobs`` jobs of one type and times
``runworkers --burst --processes 1 --concurrency C`` (bench/drain.py's
``drain_once``): ``bench.noop`` (a sync handler, run in a runner thread) and
``bench.anoop`` (``async def``, run on the foreman's event loop), alternately,
``--repeat`` times each, so both see the same machine. Prints the medians and the
async/sync ratio, steady (first start to last end, from the rows) and from the
command's start to its exit, then JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from common import setup
from drain import drain_once

#: The job types compared: both return None at once (bench/jobs.py).
TYPES = {"sync": "bench.noop", "async": "bench.anoop"}


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
    args = parser.parse_args()
    setup(args.db)
    rounds: dict[str, list[tuple[float, float]]] = {kind: [] for kind in TYPES}
    for _ in range(args.repeat):
        for kind, job_type in TYPES.items():
            rounds[kind].append(
                drain_once(
                    args.db, args.jobs, 1, args.concurrency, tuple(args.worker_arg), job_type
                )
            )
    report: dict[str, Any] = {"db": args.db, "jobs": args.jobs, "concurrency": args.concurrency}
    for kind, results in rounds.items():
        report[kind] = {
            "rates": [rate for rate, _ in results],
            "steady_rates": [steady for _, steady in results],
            "median": statistics.median(rate for rate, _ in results),
            "steady_median": statistics.median(steady for _, steady in results),
        }
        print(
            f"{args.db} 1x{args.concurrency} {kind}: {report[kind]['steady_median']:,.0f} "
            f"jobs/s steady, {report[kind]['median']:,.0f} from start to exit"
        )
    report["ratio_steady"] = report["async"]["steady_median"] / report["sync"]["steady_median"]
    report["ratio"] = report["async"]["median"] / report["sync"]["median"]
    print(
        f"async/sync: {report['ratio_steady']:.2f}x steady, "
        f"{report['ratio']:.2f}x from start to exit"
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()

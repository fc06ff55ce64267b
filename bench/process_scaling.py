"""Drain no-op jobs with ``runworkers --processes N`` for N = 1 to 4; print ratios to N = 1.

Run by hand (a few minutes; not part of ``make test``)::

    .venv/bin/python bench/process_scaling.py --db postgres --jobs 20000 --concurrency 12
    .venv/bin/python bench/process_scaling.py --layout 1x24 --layout 2x12 --layout 4x6

Each round drains ``--jobs`` no-op jobs once per layout (bench/drain.py's
``drain_once``: ``runworkers --burst``, timed from its start to its exit, and steady
from the first job's start to the last one's end), the layouts in turn, ``--repeat``
rounds, so every layout sees the same machine. Prints each layout's medians and their
ratios to the first layout's, then JSON. Default layouts: 1 to 4 processes of
``--concurrency`` slots each.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from common import setup
from drain import drain_once


def main() -> None:
    """Parse the options, drain each layout in turn, print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["postgres", "mariadb", "sqlite"], default="postgres")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--layout", action="append", help="PxC: processes x slots")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--job-type", default="bench.noop")
    parser.add_argument(
        "--worker-arg", action="append", default=[], help="one more runworkers option"
    )
    args = parser.parse_args()
    layouts = args.layout or [f"{n}x{args.concurrency}" for n in range(1, 5)]
    setup(args.db)
    rounds: dict[str, list[tuple[float, float]]] = {layout: [] for layout in layouts}
    for _ in range(args.repeat):
        for layout in layouts:
            processes, slots = (int(n) for n in layout.split("x"))
            rounds[layout].append(
                drain_once(
                    args.db, args.jobs, processes, slots, tuple(args.worker_arg), args.job_type
                )
            )
    report: dict[str, Any] = {"db": args.db, "jobs": args.jobs, "layouts": {}}
    base: dict[str, float] = {}
    for layout, results in rounds.items():
        median = statistics.median(rate for rate, _ in results)
        steady = statistics.median(s for _, s in results)
        base = base or {"median": median, "steady": steady}
        report["layouts"][layout] = {
            "rates": [rate for rate, _ in results],
            "steady_rates": [s for _, s in results],
            "median": median,
            "steady_median": steady,
            "ratio": median / base["median"],
            "steady_ratio": steady / base["steady"],
        }
        print(
            f"{args.db} {layout}: {steady:,.0f} jobs/s steady ({steady / base['steady']:.2f}x), "
            f"{median:,.0f} from start to exit ({median / base['median']:.2f}x)"
        )
    print(json.dumps(report))


if __name__ == "__main__":
    main()

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

``--compare TREE`` measures another checkout too (a base commit's ``git archive``,
say), in the same run: each round drains every scenario with this tree's code and
with ``TREE``'s, alternately, and prints both sets of ratios. ``--statements`` also
drains ``--statements-jobs`` jobs in-process per scenario (1 x 4) and prints its rate,
the process's CPU per job, the SQL statements per job (every ``cursor.execute``, a
``BEGIN`` or ``COMMIT`` sent as one included) and the round trips per job: statements
outside a pipeline, the driver's own ``BEGIN`` and ``COMMIT`` (PostgreSQL's psycopg
sends each as one; MySQLdb's ``SET autocommit`` is not counted), and one per pipeline
(docs/limits.md "Cost"). The load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common import ROOT, env_for, setup

#: The limit keys of the jobs done before a drain (keys ever used): kept by every fill.
OLD = "old"


def clear_jobs() -> None:
    """Delete the jobs of earlier rounds, but not those of the keys used before."""
    from django_jobqueue.models import Job

    Job.objects.exclude(limit_key__startswith=OLD).delete()
    vacuum("VACUUM")


def vacuum(what: str = "VACUUM") -> None:
    """PostgreSQL: vacuum the job table (``what``: ``ANALYZE`` to only analyze it), as
    autovacuum would between two drains and after a fill (this machine's server may
    run with it off): every drain then starts from the same table, not one bloated
    by the dead rows of the drains before it, and with its planner statistics."""
    from django.db import connection

    from django_jobqueue.models import Job

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"{what} {connection.ops.quote_name(Job._meta.db_table)}")


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
    vacuum("ANALYZE")


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


def drain(
    db: str,
    layout: str,
    jobs: int,
    keys: int | None,
    limit: dict[str, Any] | None,
    root: Path = ROOT,
) -> float:
    """One round: set the limit, fill, drain with runworkers of the checkout ``root``;
    its steady jobs/s."""
    processes, concurrency = layout.split("x")
    _set(limit)
    fill(jobs, keys)
    env = {
        **env_for(db),
        "PYTHONPATH": os.pathsep.join([str(root), str(Path(__file__).parent.parent)]),
    }
    proc = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "django", "runworkers", "--burst"]
        + ["--processes", processes, "--concurrency", concurrency],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
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


PER_KEY = {"concurrency": 1, "partition": "key"}
#: The drains of every round: name -> (keys, limit).
SCENARIOS: dict[str, tuple[int | None, dict[str, Any] | None]] = {
    "unlimited": (None, None),
    "global_1000": (None, {"concurrency": 1000}),
    "keys_1000": (1000, PER_KEY),
}


def rounds(
    db: str, layout: str, jobs: int, repeat: int, trees: dict[str, Path], *, old_keys: bool = True
) -> dict[str, dict[str, float]]:
    """The medians of every scenario per tree (name -> checkout), interleaved round by
    round and tree by tree."""
    from django_jobqueue.models import LimitState

    names = [*SCENARIOS, "keys_100_fresh", "keys_100_of_100k"]
    rates: dict[str, dict[str, list[float]]] = {t: {n: [] for n in names} for t in trees}
    for _round in range(repeat):
        for name, (keys, limit) in SCENARIOS.items():
            for tree, root in trees.items():
                rates[tree][name].append(drain(db, layout, jobs, keys, limit, root))
        if old_keys:
            for tree, root in trees.items():
                LimitState.objects.all().delete()
                rates[tree]["keys_100_fresh"].append(drain(db, layout, jobs, 100, PER_KEY, root))
    if old_keys:
        keys_ever_used(100_000)
        for _round in range(repeat):
            # The drain clears the jobs: the 100,000 limit rows stay (keys seen before).
            for tree, root in trees.items():
                rates[tree]["keys_100_of_100k"].append(drain(db, layout, jobs, 100, PER_KEY, root))
    _set(None)
    return {
        tree: {name: statistics.median(values) for name, values in by_name.items() if values}
        for tree, by_name in rates.items()
    }


def round_trips(jobs: int) -> dict[str, dict[str, float]]:
    """Drain ``jobs`` in-process (1 x 4) per scenario; statements and round trips per job.

    Counted by wrapping Django's cursor (every ``execute``; one inside a psycopg
    pipeline is no round trip of its own), the connection's commit, psycopg's own
    ``BEGIN`` (sent before a statement when autocommit is off and no transaction is
    open) and psycopg's pipelines (one round trip each).
    """
    from django.db import connections
    from django.db.backends import utils
    from django.db.backends.base.base import BaseDatabaseWrapper

    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    counts = {"statements": 0, "round_trips": 0}
    lock = threading.Lock()
    patched: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, make: Any) -> None:
        original = getattr(owner, name)
        patched.append((owner, name, original))
        setattr(owner, name, make(original))

    def pipelined(wrapper: Any) -> bool:
        raw = getattr(wrapper.db, "connection", None)
        return getattr(raw, "_pipeline", None) is not None

    def counting_execute(original: Any) -> Any:
        def execute(self: Any, sql: str, params: Any = None) -> Any:
            raw = self.db.connection
            implicit_begin = (
                self.db.vendor == "postgresql"
                and not raw.autocommit
                and raw.info.transaction_status == 0  # IDLE: psycopg sends BEGIN first
            )
            with lock:
                counts["statements"] += 1
                if not pipelined(self):
                    counts["round_trips"] += 1 + int(implicit_begin)
            return original(self, sql, params)

        return execute

    def counting_commit(original: Any) -> Any:
        def commit(self: Any) -> Any:
            with lock:
                counts["round_trips"] += 1
            return original(self)

        return commit

    for cls in (utils.CursorWrapper, utils.CursorDebugWrapper):
        patch(cls, "execute", counting_execute)
    patch(BaseDatabaseWrapper, "commit", counting_commit)
    if connections["default"].vendor == "postgresql":
        import psycopg

        def counting_pipeline(original: Any) -> Any:
            def pipeline(self: Any) -> Any:
                with lock:
                    counts["round_trips"] += 1
                return original(self)

            return pipeline

        patch(psycopg.Connection, "pipeline", counting_pipeline)
    out: dict[str, dict[str, float]] = {}
    try:
        for name, (keys, limit) in SCENARIOS.items():
            _set(limit)
            fill(jobs, keys)
            counts.update(statements=0, round_trips=0)
            began, cpu = time.perf_counter(), time.process_time()
            Foreman(ForemanOptions(burst=True, concurrency=4)).run(install_signals=False)
            wall_s, cpu_s = time.perf_counter() - began, time.process_time() - cpu
            from django_jobqueue.models import Job, JobStatus

            done = (
                Job.objects.exclude(limit_key__startswith=OLD).filter(status=JobStatus.DONE).count()
            )
            if done != jobs:
                raise SystemExit(f"in-process drain {name}: {done} of {jobs} jobs done")
            out[name] = {key: value / jobs for key, value in counts.items()}
            # The in-process drain's own rate, and its process's CPU per job (the
            # workers' Python, not the server's): steadier than wall time under load.
            out[name]["jobs_per_s"] = jobs / wall_s
            out[name]["cpu_us_per_job"] = cpu_s / jobs * 1e6
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)
        _set(None)
    return out


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
    parser.add_argument("--compare", type=Path, help="Another checkout, measured alongside.")
    parser.add_argument("--no-old-keys", action="store_true", help="Skip the 100,000-key drains.")
    parser.add_argument("--statements", action="store_true")
    parser.add_argument("--statements-jobs", type=int, default=2000)
    parser.add_argument("--statements-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    setup(args.db)
    if args.statements_only:  # this tree's statements, for another run's --compare
        print(json.dumps(round_trips(args.statements_jobs)))
        return
    print(f"load average at start: {os.getloadavg()}")
    if args.rate:
        result = rate_window(args.db, args.rate, args.seconds, args.processes)
        print(f"{args.db} rate {args.rate}/s: measured {result['measured_per_s']:.1f}/s")
        print(json.dumps(result))
        return
    trees = {"this": ROOT}
    if args.compare is not None:
        trees["compare"] = args.compare.resolve()
    medians = rounds(
        args.db, args.layout, args.jobs, args.repeat, trees, old_keys=not args.no_old_keys
    )
    report: dict[str, Any] = {"db": args.db, "layout": args.layout, "trees": {}}
    for tree, rates in medians.items():
        ratios = {
            "global_1000/unlimited": rates["global_1000"] / rates["unlimited"],
            "keys_1000/unlimited": rates["keys_1000"] / rates["unlimited"],
        }
        if "keys_100_of_100k" in rates:
            ratios["keys_100_of_100k/keys_100_fresh"] = (
                rates["keys_100_of_100k"] / rates["keys_100_fresh"]
            )
        for name, value in rates.items():
            print(f"{tree} {args.db} {args.layout} {name}: {value:,.0f} jobs/s")
        for name, value in ratios.items():
            print(f"{tree} {args.db} {name}: {value:.2f}")
        report["trees"][tree] = {"root": str(trees[tree]), "rates": rates, "ratios": ratios}
    if args.statements:
        for tree, root in trees.items():
            if tree == "this":
                per_job = round_trips(args.statements_jobs)
            else:
                env = {**os.environ, "JQ_BENCH_ROOT": str(root)}
                proc = subprocess.run(  # noqa: S603
                    [sys.executable, __file__, "--db", args.db, "--statements-only"]
                    + ["--statements-jobs", str(args.statements_jobs)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                per_job = json.loads(proc.stdout.strip().splitlines()[-1])
            for name, figures in per_job.items():
                ratio = figures["jobs_per_s"] / per_job["unlimited"]["jobs_per_s"]
                print(
                    f"{tree} {args.db} {name}: {figures['statements']:.2f} statements/job, "
                    f"{figures['round_trips']:.2f} round trips/job, in-process "
                    f"{figures['jobs_per_s']:,.0f} jobs/s ({ratio:.2f}x unlimited), "
                    f"{figures['cpu_us_per_job']:.0f} us CPU/job"
                )
            report["trees"][tree]["per_job"] = per_job
    report["loadavg_end"] = os.getloadavg()
    print(f"load average at end: {report['loadavg_end']}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()

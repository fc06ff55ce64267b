"""Drain no-op jobs with real ``runworkers --burst`` processes; print jobs/s.

Run by hand (minutes; not part of ``make test``)::

    .venv/bin/python bench/drain.py --db postgres --jobs 5000 --layout 1x4 --layout 4x1
    .venv/bin/python bench/drain.py --db mariadb --statements

Each round deletes every job of the scratch database (``bench.common.URLS``),
enqueues ``--jobs`` no-op jobs in one transaction, then times ``runworkers --burst
--processes P --concurrency C`` from its start to its exit, and steady from the first
job's start to the last one's end (the rows' timestamps), and checks every job is
``done``. ``--statements`` also drains once in-process and counts the SQL statements
the worker sent per job (every ``cursor.execute``; transaction BEGIN/COMMIT that a
driver sends by itself are not counted) and, on PostgreSQL, the transactions the
server counted per job (``pg_stat_database``). ``--profile FILE`` drains once more
with ``py-spy record`` attached once it has started (collapsed stacks); that round
gives no rate. Jobs are enqueued with ``enqueue_many`` where the tree has it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import ROOT, clear_jobs, env_for, runworkers, setup


def fill(jobs: int, job_type: str = "bench.noop") -> None:
    """Enqueue ``jobs`` jobs of ``job_type`` (a no-op) in one transaction
    (``enqueue_many`` where it exists)."""
    from django.db import transaction

    import django_jobqueue
    from django_jobqueue import enqueue_job

    clear_jobs()
    many = getattr(django_jobqueue, "enqueue_many", None)
    with transaction.atomic():
        if many is not None and "enqueue_many" in getattr(django_jobqueue, "__all__", ()):
            for start in range(0, jobs, 1000):
                many([{"job_type": job_type}] * min(1000, jobs - start))
        else:
            for _ in range(jobs):
                enqueue_job(None, job_type)


def done_count() -> int:
    """Return how many jobs are done."""
    from django_jobqueue.models import Job, JobStatus

    return Job.objects.filter(status=JobStatus.DONE).count()


def steady_rate(jobs: int) -> float:
    """Return ``jobs`` over the time from the first job's start to the last one's end.

    Read from the rows (``started_at``, ``finished_at``: the database's clock), so the
    start-up of runworkers and its exit weigh on it not at all.
    """
    from django.db.models import Max, Min

    from django_jobqueue.models import Job

    span = Job.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
    return jobs / max((span["last"] - span["first"]).total_seconds(), 1e-6)


def drain_once(
    db: str,
    jobs: int,
    processes: int,
    concurrency: int,
    extra: tuple[str, ...] = (),
    job_type: str = "bench.noop",
) -> tuple[float, float]:
    """Fill, drain with runworkers (``extra``: more of its options), check; return
    (jobs/s from its start to its exit, steady jobs/s from the first job's start to
    the last one's end)."""
    fill(jobs, job_type)
    started = time.monotonic()
    proc = runworkers(
        db, "--burst", "--processes", str(processes), "--concurrency", str(concurrency), *extra
    )
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"runworkers failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    finished = done_count()
    if finished != jobs:
        raise SystemExit(f"{finished} of {jobs} jobs done")
    return jobs / elapsed, steady_rate(jobs)


def server_transactions() -> int | None:
    """Return PostgreSQL's committed plus rolled-back transactions of this database.

    ``pg_stat_database`` counts every transaction the server ran in the scratch
    database, autocommit statements included, whoever sent them (only the benchmark
    uses it). Django's connection of this thread is closed first and the statistics
    are read 1.5 s later from a new connection to the ``postgres`` database, so the
    backends' counters have been flushed (PostgreSQL 15+ flushes an idle backend's
    within a second). Returns None on MariaDB and SQLite (their server counters are
    server-wide or absent).
    """
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    import psycopg

    name = connection.settings_dict["NAME"]
    connection.close()
    time.sleep(1.5)
    with psycopg.connect(
        host="127.0.0.1", port=5432, user="postgres", dbname="postgres"
    ) as admin:  # fmt: skip
        row = admin.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            [name],
        ).fetchone()
    return int(row[0]) if row else None


def profile_drain(
    db: str,
    jobs: int,
    processes: int,
    concurrency: int,
    out: Path,
    extra: tuple[str, ...] = (),
    job_type: str = "bench.noop",
) -> dict[str, Any]:
    """Drain ``jobs`` with ``py-spy record`` attached (raw collapsed stacks to ``out``).

    runworkers ``--burst`` starts alone; once 5% of the jobs are done py-spy attaches
    to it and its children (``--subprocesses``) and samples them 100 times a second
    without pausing them (``--nonblocking``), idle threads left out, until it exits:
    the start-up's imports are not in the profile. py-spy needs ptrace: when it cannot
    attach (or is not installed) the drain still ends and the answer says why there is
    no profile. Returns ``{"file", "samples", "jobs"}`` or ``{"error"}``.
    """
    from django.db import connection

    fill(jobs, job_type)
    pyspy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    log = tempfile.TemporaryFile(mode="w+")  # a pipe nobody reads would block its logging
    worker = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "django", "runworkers", "--burst"]
        + ["--processes", str(processes), "--concurrency", str(concurrency), *extra],
        cwd=ROOT,
        env=env_for(db),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        while done_count() < jobs // 20 and worker.poll() is None:
            time.sleep(0.02)
        connection.close()
        if pyspy is None:
            error = "py-spy is not installed (scripts/bootstrap bench)"
        elif worker.poll() is not None:
            error = "the drain ended before py-spy could attach"
        else:
            command = [
                pyspy, "record", "--pid", str(worker.pid), "--format", "raw", "--rate", "100",
                "--subprocesses", "--nonblocking", "--output", str(out),
            ]  # fmt: skip
            proc = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
            lines = (proc.stderr or proc.stdout).strip().splitlines()
            error = (
                ""
                if proc.returncode == 0 and out.exists()
                else f"py-spy exited {proc.returncode}: {' | '.join(lines[-3:])}"
            )
        worker.wait(600)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        log.close()
    if error:
        return {"error": error}
    samples = sum(
        int(line.rsplit(" ", 1)[1])
        for line in out.read_text(encoding="utf-8").splitlines()
        if line.strip() and line.rsplit(" ", 1)[-1].isdigit()
    )
    return {"file": str(out), "samples": samples, "jobs": done_count()}


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

    transactions_before = server_transactions()
    for cls, original in originals.items():
        cls.execute = counting(original)  # type: ignore[method-assign]
    try:
        foreman = Foreman(ForemanOptions(burst=True, concurrency=concurrency))
        foreman.run(install_signals=False)
    finally:
        for cls, original in originals.items():
            cls.execute = original  # type: ignore[method-assign]
    transactions_after = server_transactions()
    if done_count() != jobs:
        raise SystemExit("in-process drain left jobs undone")
    per_job = {verb: count / jobs for verb, count in sorted(counts.items())}
    per_job["total"] = sum(counts.values()) / jobs
    if transactions_before is not None and transactions_after is not None:
        per_job["server_transactions_per_job"] = (transactions_after - transactions_before) / jobs
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
    parser.add_argument("--profile", type=Path, help="py-spy the first layout into this file")
    parser.add_argument(
        "--worker-arg",
        action="append",
        default=[],
        help="one more runworkers option, e.g. --worker-arg=--no-log-success",
    )
    parser.add_argument(
        "--job-type", default="bench.noop", help="bench.noop, or bench.anoop (async def)"
    )
    args = parser.parse_args()
    extra = tuple(args.worker_arg)
    setup(args.db)
    report: dict[str, Any] = {"db": args.db, "jobs": args.jobs, "layouts": {}}
    for layout in args.layout or ["1x4", "4x1"]:
        processes, concurrency = (int(n) for n in layout.split("x"))
        rounds = [
            drain_once(args.db, args.jobs, processes, concurrency, extra, args.job_type)
            for _ in range(args.repeat)
        ]
        rates, steady = [r for r, _ in rounds], [r for _, r in rounds]
        report["layouts"][layout] = {
            "rates": rates,
            "median": statistics.median(rates),
            "steady_rates": steady,
            "steady_median": statistics.median(steady),
        }
        print(
            f"{args.db} {layout}: {statistics.median(steady):,.0f} jobs/s steady, "
            f"{statistics.median(rates):,.0f} from start to exit  {rates}"
        )
    if args.statements:
        report["statements_per_job"] = statements_per_job(min(args.jobs, 2000), 4)
        print("statements per job:", report["statements_per_job"])
    if args.profile:
        processes, concurrency = (int(n) for n in (args.layout or ["1x4"])[0].split("x"))
        report["profile"] = profile_drain(
            args.db, args.jobs, processes, concurrency, args.profile, extra, args.job_type
        )
        print("profile:", report["profile"])
    print(json.dumps(report))


if __name__ == "__main__":
    main()

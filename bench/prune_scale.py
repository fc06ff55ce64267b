"""``jobqueue prune`` on millions of done rows while a claimer keeps claiming (PostgreSQL).

Run by hand (minutes; not part of ``make test``)::

    .venv/bin/python bench/prune_scale.py                     # 10,000,000 done rows
    .venv/bin/python bench/prune_scale.py --rows 1000000 --batch-size 5000

On the scratch database (bench/common.py; ``JQ_BENCH_DB_SUFFIX`` keeps runs apart) it
empties the job table, fills ``--rows`` done jobs finished 30 days ago with ``INSERT
... SELECT generate_series`` (in statements of a million rows, every index in place),
runs ``VACUUM ANALYZE``, then starts a claimer thread and, after a baseline of
``--baseline-s`` seconds, the real ``manage.py jobqueue prune --retention 1d`` in a
subprocess. The claimer loops: enqueue one job, claim it (``storage.claim``), store
it done (``storage.complete``); it records how long each claim took. A sampler reads
``pg_current_wal_lsn()`` once a second: the WAL a replica would have to replay.

Prints: the fill time; the prune's time and rows per second; the claims' p50, p99
and longest during the baseline and during the prune; the WAL written per second
(largest second, and the mean) during the prune; and checks that every old row is
gone and every claimer row stayed. Then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from typing import Any

from common import ROOT, clear_jobs, env_for, setup
from pickup import percentile

FILL_CHUNK = 1_000_000


def fill(rows: int) -> float:
    """Insert ``rows`` done jobs finished 30+ days ago; return the seconds it took."""
    from django.db import connection

    from django_jobqueue.models import Job

    table = connection.ops.quote_name(Job._meta.db_table)
    started = time.monotonic()
    for first in range(0, rows, FILL_CHUNK):
        last = min(rows, first + FILL_CHUNK)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (jid, queue, job_type, payload, result, message, errors, "  # noqa: S608
                "status, waiting, priority, attempt, max_retry, timeout_ms, secure, run_at, "
                "unique_mode, lease_owner, lease_token, cancel_requested, rerun, created_at, "
                "started_at, finished_at, updated_at) "
                "SELECT 'p' || lpad(i::text, 31, '0'), 'default', 'bench.noop', NULL, NULL, '', "
                "'[]', 'done', false, 100, 1, 0, 300000, false, t, '', '', '', false, false, "
                "t, t, t, t FROM generate_series(%s, %s) AS i, "
                "LATERAL (SELECT now() - interval '40 days' + i * interval '1 ms') AS s(t)",
                [first + 1, last],
            )
        print(f"  filled {last:,} rows ({time.monotonic() - started:.0f} s)", flush=True)
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {table}")
    return time.monotonic() - started


class Claimer(threading.Thread):
    """Enqueue one job, claim it, store it done; record each claim's duration (ms)."""

    def __init__(self) -> None:
        super().__init__(name="prune-claimer", daemon=True)
        self.stop = threading.Event()
        self.claims: list[tuple[float, float]] = []  # (time.time() at start, ms)
        self.jids: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from django.db import connection

        from django_jobqueue import enqueue_job, storage

        try:
            while not self.stop.is_set():
                self.jids.append(enqueue_job(None, "bench.noop").jid)
                at = time.time()
                began = time.perf_counter()
                jobs = storage.claim("default", owner="prune-bench", limit=1)
                self.claims.append((at, (time.perf_counter() - began) * 1000))
                for job in jobs:
                    storage.complete(job, None)
                time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
            self.error = exc
        finally:
            connection.close()


def wal_sampler(stop: threading.Event, out: list[tuple[float, int]]) -> None:
    """Append (time.time(), WAL position in bytes) once a second until ``stop``."""
    import psycopg
    from django.db import connection

    params = connection.settings_dict
    with psycopg.connect(
        host=params["HOST"], port=params["PORT"] or 5432, user=params["USER"],
        dbname=params["NAME"], autocommit=True,
    ) as conn:  # fmt: skip
        while not stop.is_set():
            lsn = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]
            out.append((time.time(), int(lsn)))
            stop.wait(1.0)


def summary(values: list[float]) -> dict[str, float]:
    """Return p50, p99 and max of ``values`` (ms); zeros when empty."""
    if not values:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0, "claims": 0}
    return {
        "p50_ms": percentile(values, 0.5),
        "p99_ms": percentile(values, 0.99),
        "max_ms": max(values),
        "claims": len(values),
    }


def main() -> None:
    """Fill, prune under a claimer, print the figures and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batch-size", type=int, default=1_000)
    parser.add_argument("--pause-ms", type=int, default=0)
    parser.add_argument("--baseline-s", type=float, default=20.0)
    args = parser.parse_args()
    setup("postgres")
    from django.db import connection

    from django_jobqueue.models import Job, JobStatus

    clear_jobs()
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM {connection.ops.quote_name(Job._meta.db_table)}")  # noqa: S608
    print(f"filling {args.rows:,} done rows", flush=True)
    fill_s = fill(args.rows)
    connection.close()
    claimer = Claimer()
    stop_wal = threading.Event()
    wal: list[tuple[float, int]] = []
    sampler = threading.Thread(target=wal_sampler, args=(stop_wal, wal), daemon=True)
    claimer.start()
    sampler.start()
    time.sleep(args.baseline_s)
    command = [
        sys.executable, "-m", "django", "jobqueue", "prune", "--retention", "1d",
        "--batch-size", str(args.batch_size), "--pause-ms", str(args.pause_ms),
    ]  # fmt: skip
    prune_start = time.time()
    proc = subprocess.run(
        command, cwd=ROOT, env=env_for("postgres"), capture_output=True, text=True, check=False
    )  # noqa: S603
    prune_end = time.time()
    claimer.stop.set()
    stop_wal.set()
    claimer.join(60)
    sampler.join(10)
    if proc.returncode != 0:
        raise SystemExit(f"prune failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    if claimer.error is not None:
        raise SystemExit(f"the claimer failed: {claimer.error!r}")
    left_old = Job.objects.filter(jid__startswith="p", status=JobStatus.DONE).count()
    kept = Job.objects.filter(jid__in=claimer.jids).count()
    baseline = [ms for at, ms in claimer.claims if at < prune_start]
    during = [ms for at, ms in claimer.claims if prune_start <= at < prune_end]
    rates = [
        (b[1] - a[1]) / max(b[0] - a[0], 1e-6) / 1024 / 1024
        for a, b in zip(wal, wal[1:], strict=False)
        if a[0] >= prune_start and b[0] <= prune_end
    ]
    prune_s = prune_end - prune_start
    result: dict[str, Any] = {
        "rows": args.rows,
        "batch_size": args.batch_size,
        "pause_ms": args.pause_ms,
        "fill_s": fill_s,
        "prune_s": prune_s,
        "rows_per_s": args.rows / prune_s,
        "prune_output": proc.stdout.strip(),
        "baseline": summary(baseline),
        "during": summary(during),
        "wal_mb_per_s_max": max(rates, default=0.0),
        "wal_mb_per_s_mean": sum(rates) / len(rates) if rates else 0.0,
        "old_rows_left": left_old,
        "claimer_rows_kept": f"{kept}/{len(claimer.jids)}",
        "load": " ".join(open("/proc/loadavg").read().split()[:3]),  # noqa: PTH123, SIM115
    }
    print(f"fill: {args.rows:,} rows in {fill_s:.0f} s")
    print(
        f"prune: {prune_s:.0f} s, {result['rows_per_s']:,.0f} rows/s ({proc.stdout.strip()}); "
        f"old rows left {left_old}; claimer rows kept {result['claimer_rows_kept']}"
    )
    for name in ("baseline", "during"):
        row = result[name]
        print(
            f"claims {name:<8}: {row['claims']:>6}  p50 {row['p50_ms']:.1f} ms  "
            f"p99 {row['p99_ms']:.1f} ms  longest {row['max_ms']:.1f} ms"
        )
    print(
        f"WAL during the prune: {result['wal_mb_per_s_mean']:.1f} MB/s mean, "
        f"{result['wal_mb_per_s_max']:.1f} MB/s largest second; load {result['load']}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Time every console page and the metrics endpoint over a big job table on PostgreSQL.

Modelled on bench/admin_changelist.py (whose fill and measure it reuses): a scratch
database of ``--rows`` jobs, then all but ``--waiting`` of the waiting ones are made
done, and a day of JobStat rows is added (``--stats-days``). Each page is fetched as a
superuser::

    .venv/bin/python bench/console_pages.py                    # 1,000,000 jobs, 10,000 waiting
    .venv/bin/python bench/console_pages.py --vacuum --stats-days 7 --stats-keys 20
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admin_changelist import ensure_database, fill, measure  # noqa: E402

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jq_bench_console"


def fill_stats(minutes: int, keys: int) -> None:
    """Replace the JobStat rows by ``minutes`` minutes of ``keys`` (queue, job type) rows,
    and the JobTotal rows by their sums (as the flush's upsert keeps them).

    One INSERT ... SELECT over generate_series: a week of 20 pairs is 201,600 rows.
    """
    from django.db import connection

    from django_jobqueue.models import JobStat, JobTotal
    from django_jobqueue.store.jobstats import COUNTERS

    table, totals = JobStat._meta.db_table, JobTotal._meta.db_table
    buckets = "le_10, le_100, le_1000, le_10000, le_60000, le_300000, le_inf"
    pickups = (
        "pickup_ms_sum, pickup_le_100, pickup_le_1000, pickup_le_10000, pickup_le_60000, "
        "pickup_le_300000, pickup_le_3600000, pickup_le_inf"
    )
    counters = ", ".join(COUNTERS)
    sums = ", ".join(f"SUM({name})" for name in COUNTERS)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table}")  # noqa: S608
        cursor.execute(
            f"INSERT INTO {table} (minute, queue, job_type, done, failed, retried, "  # noqa: S608
            f"deduplicated, duration_ms_sum, {buckets}, {pickups}) "
            "SELECT date_trunc('minute', now()) - make_interval(mins => m), "
            "(ARRAY['default','emails','reports','webhooks'])[1 + k %% 4], "
            "'type' || (k / 4), 5, 1, 1, k %% 2, 1500, 1, 1, 1, 2, 1, 0, 0, "
            "1200, 3, 2, 1, 1, 0, 0, 0 "
            "FROM generate_series(0, %s) m, generate_series(0, %s) k",
            [minutes - 1, keys - 1],
        )
        cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute(f"DELETE FROM {totals}")  # noqa: S608
        cursor.execute(
            f"INSERT INTO {totals} (queue, job_type, {counters}) "  # noqa: S608
            f"SELECT queue, job_type, {sums} FROM {table} GROUP BY queue, job_type"
        )
        cursor.execute(f"VACUUM ANALYZE {totals}")
    print(f"stats: {minutes * keys:,} JobStat rows ({minutes // 1440} days x {keys} pairs)")


def main() -> int:
    """Fill (if needed) and time the console pages."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="Scratch PostgreSQL database URL.")
    parser.add_argument("--rows", type=int, default=1_000_000, help="Jobs in the table.")
    parser.add_argument("--waiting", type=int, default=10_000, help="Waiting jobs among them.")
    parser.add_argument("--repeat", type=int, default=5, help="Timed requests per page.")
    parser.add_argument(
        "--stats-days", type=int, default=1, help="Days of per-minute JobStat rows (7: a week)."
    )
    parser.add_argument(
        "--stats-keys", type=int, default=4, help="(queue, job type) pairs with stats each minute."
    )
    parser.add_argument(
        "--vacuum",
        action="store_true",
        help="VACUUM ANALYZE the jobs first (the steady state autovacuum reaches; without it "
        "the pages run right after the fill's mass UPDATE, no visibility map set).",
    )
    args = parser.parse_args()

    ensure_database(args.url)
    os.environ["DATABASE_URL"] = args.url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from django_jobqueue.models import Job, JobStat

    call_command("migrate", verbosity=0)
    if Job.objects.count() != args.rows:
        fill(args.rows)
        table = Job._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET status = 'done', waiting = false, finished_at = now() "  # noqa: S608
                f"WHERE waiting AND id > (SELECT id FROM {table} WHERE waiting "
                "ORDER BY id OFFSET %s LIMIT 1)",
                [args.waiting - 1],  # the row at OFFSET n is the (n+1)th: it stays waiting
            )
            cursor.execute(f"ANALYZE {table}")
    if args.vacuum:
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
    minutes = args.stats_days * 24 * 60
    if JobStat.objects.count() != minutes * args.stats_keys:
        fill_stats(minutes, args.stats_keys)
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench")
    client = Client()
    client.force_login(user)
    dead = Job.objects.filter(status="max_retry").values_list("jid", flat=True).first()
    pages = [
        "/console/",
        "/console/jobs/",
        "/console/jobs/?state=dead",
        "/console/jobs/?state=waiting&queue=emails",
        "/console/jobs/?queue=reports&job_type=reports.build&sort=id",
        f"/console/jobs/?q={dead}",
        f"/console/jobs/{dead}/",
        "/console/workers/",
        "/console/schedules/",
        "/metrics/",
    ]
    waiting = Job.objects.filter(waiting=True).count()
    print(f"{Job.objects.count():,} jobs, {waiting:,} waiting")
    print(f"{'page':60} {'median ms':>10} {'max ms':>8} {'SQL ms':>8} {'stmts':>6} status")
    for page in pages:
        median, slowest, sql, statements, status = measure(client, page, args.repeat)
        print(f"{page:60} {median:10.1f} {slowest:8.1f} {sql:8.1f} {statements:6d} {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time every console page and the metrics endpoint over a big job table.

PostgreSQL, MariaDB or SQLite, by ``--url``.

Modelled on bench/admin_changelist.py (whose fill and measure it reuses): a scratch
database of ``--rows`` jobs, then all but ``--waiting`` of the waiting ones are made
done, and a day of JobStat rows is added (``--stats-days``). Each page is fetched as a
superuser::

    .venv/bin/python bench/console_pages.py                    # 1,000,000 jobs, 10,000 waiting
    .venv/bin/python bench/console_pages.py --vacuum --stats-days 7 --stats-keys 20
    .venv/bin/python bench/console_pages.py --url mysql://root@127.0.0.1:3306/jq_bench_console
    .venv/bin/python bench/console_pages.py --url sqlite:////tmp/jq_bench_console.sqlite3
    .venv/bin/python bench/console_pages.py --vacuum --migration 0026   # indexes before 0027

The waiting jobs are the oldest rows (a backlog under the work done since): the lists of
waiting jobs must not walk the finished ones to find them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admin_changelist import ensure_database, fill, measure  # noqa: E402

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jq_bench_console"


def fill_stats(minutes: int, keys: int) -> None:
    """Replace the JobStat rows by ``minutes`` minutes of ``keys`` (queue, job type) rows,
    and the JobTotal rows by their sums (as the flush's upsert keeps them).

    One INSERT ... SELECT over two number sequences (``generate_series`` on PostgreSQL,
    ``seq_0_to_N`` on MariaDB): a week of 20 pairs is 201,600 rows.
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
    values = "5, 1, 1, k %% 2, 1500, 1, 1, 1, 2, 1, 0, 0, 1200, 3, 2, 1, 1, 0, 0, 0"
    if connection.vendor == "mysql":
        pairs = (
            "DATE_FORMAT(UTC_TIMESTAMP(), '%%Y-%%m-%%d %%H:%%i:00') - INTERVAL m MINUTE, "
            "ELT(1 + k %% 4, 'default', 'emails', 'reports', 'webhooks'), "
            f"CONCAT('type', k DIV 4), {values} "
            f"FROM (SELECT seq AS m FROM seq_0_to_{minutes - 1}) AS ms, "
            f"(SELECT seq AS k FROM seq_0_to_{keys - 1}) AS ks"
        )
        params: list[int] = []
        analyze = "ANALYZE TABLE {}"
    elif connection.vendor == "sqlite":
        pairs = (
            "strftime('%%Y-%%m-%%d %%H:%%M:00', 'now', '-' || m || ' minutes'), "
            'json_extract(\'["default","emails","reports","webhooks"]\', '
            f"'$[' || (k %% 4) || ']'), 'type' || (k / 4), {values} "
            "FROM (WITH RECURSIVE ms(m) AS (SELECT 0 UNION ALL SELECT m + 1 FROM ms "
            "WHERE m < %s) SELECT m FROM ms), (WITH RECURSIVE ks(k) AS (SELECT 0 UNION ALL "
            "SELECT k + 1 FROM ks WHERE k < %s) SELECT k FROM ks)"
        )
        params = [minutes - 1, keys - 1]
        analyze = "ANALYZE {}"
    else:
        pairs = (
            "date_trunc('minute', now()) - make_interval(mins => m), "
            "(ARRAY['default','emails','reports','webhooks'])[1 + k %% 4], "
            f"'type' || (k / 4), {values} "
            "FROM generate_series(0, %s) m, generate_series(0, %s) k"
        )
        params = [minutes - 1, keys - 1]
        analyze = "VACUUM ANALYZE {}"
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table}")  # noqa: S608
        cursor.execute(
            f"INSERT INTO {table} (minute, queue, job_type, done, failed, retried, "  # noqa: S608
            f"deduplicated, duration_ms_sum, {buckets}, {pickups}) SELECT {pairs}",
            params,
        )
        _run(cursor, analyze.format(table))
        cursor.execute(f"DELETE FROM {totals}")  # noqa: S608
        cursor.execute(
            f"INSERT INTO {totals} (queue, job_type, {counters}) "  # noqa: S608
            f"SELECT queue, job_type, {sums} FROM {table} GROUP BY queue, job_type"
        )
        _run(cursor, analyze.format(totals))
    print(f"stats: {minutes * keys:,} JobStat rows ({minutes // 1440} days x {keys} pairs)")


def _run(cursor: Any, sql: str) -> None:
    """Execute ``sql``, reading the result set MariaDB's ANALYZE TABLE answers."""
    cursor.execute(sql)
    if cursor.description:
        cursor.fetchall()


def keep_waiting(waiting: int) -> None:
    """Make every waiting job but the ``waiting`` oldest done, then ANALYZE: the waiting
    ones are the oldest rows, a backlog under all the work done since."""
    from django.db import connection

    from django_jobqueue.models import Job

    table = Job._meta.db_table
    if connection.vendor == "mysql":
        sql = (
            f"UPDATE {table} SET status = 'done', waiting = false, "  # noqa: S608
            f"finished_at = UTC_TIMESTAMP(6) WHERE waiting AND id > (SELECT id FROM "
            f"(SELECT id FROM {table} WHERE waiting ORDER BY id LIMIT 1 OFFSET %s) AS nth)"
        )
        analyze = f"ANALYZE TABLE {table}"
    elif connection.vendor == "sqlite":
        sql = (
            f"UPDATE {table} SET status = 'done', waiting = 0, "  # noqa: S608
            "finished_at = strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') WHERE waiting AND id > "
            f"(SELECT id FROM {table} WHERE waiting ORDER BY id LIMIT 1 OFFSET %s)"
        )
        analyze = f"ANALYZE {table}"
    else:
        sql = (
            f"UPDATE {table} SET status = 'done', waiting = false, finished_at = now() "  # noqa: S608
            f"WHERE waiting AND id > (SELECT id FROM {table} WHERE waiting "
            "ORDER BY id OFFSET %s LIMIT 1)"
        )
        analyze = f"ANALYZE {table}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [waiting - 1])  # the row at OFFSET n is the (n+1)th: it stays
        _run(cursor, analyze)


def main() -> int:
    """Fill (if needed) and time the console pages."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", default=DEFAULT_URL, help="Scratch PostgreSQL, MariaDB or SQLite database URL."
    )
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
    parser.add_argument(
        "--migration",
        default=None,
        help="Migrate django_jobqueue to this migration (e.g. 0026: the indexes before "
        "0027) instead of the latest, to compare a migration's indexes on the same rows.",
    )
    args = parser.parse_args()

    ensure_database(args.url)
    os.environ["DATABASE_URL"] = args.url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client, override_settings

    from django_jobqueue.models import Job, JobStat

    migrate(args.migration)
    if Job.objects.count() != args.rows:
        fill(args.rows)
        keep_waiting(args.waiting)
    if args.vacuum and connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
    minutes = args.stats_days * 24 * 60
    if JobStat.objects.count() != minutes * args.stats_keys:
        fill_stats(minutes, args.stats_keys)
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench")
    client = Client()
    client.force_login(user)
    plan = ensure_plan_and_limit()
    dead = Job.objects.filter(status="max_retry").values_list("jid", flat=True).first()
    running = Job.objects.filter(status="processing").values_list("jid", flat=True)[:50]
    waiting_n = Job.objects.filter(waiting=True, queue="emails").values_list("payload", flat=True)
    some_n = waiting_n.first()["n"]
    pages = [
        "/console/",
        "/console/jobs/",
        "/console/jobs/?state=dead",
        "/console/jobs/?state=failed&queue=emails",
        "/console/jobs/?state=waiting&queue=emails",
        "/console/jobs/?state=waiting",
        "/console/jobs/?state=scheduled&queue=emails",
        "/console/jobs/?state=running&queue=emails",
        "/console/jobs/?queue=reports&job_type=reports.build&sort=id",
        f"/console/jobs/?q={dead}",
        f"/console/jobs/?q=state:waiting+queue:emails+payload.n:{some_n}",
        f"/console/jobs/{dead}/",
        "/console/progress/?" + "&".join(f"jid={jid}" for jid in running),
        "/console/workers/",
        "/console/schedules/",
        f"/console/schedule/{plan}",
        "/console/audit/",
        "/console/limits/",
        "/metrics/",
    ]
    pro_pages = ["/console/pro/locks/", "/console/pro/dedupe/", "/console/pro/bulk/?state=failed"]
    waiting = Job.objects.filter(waiting=True).count()
    print(f"{Job.objects.count():,} jobs, {waiting:,} waiting")
    print(f"load average: {', '.join(f'{n:.2f}' for n in os.getloadavg())}")
    print(f"{'page':60} {'median ms':>10} {'max ms':>8} {'SQL ms':>8} {'stmts':>6} status")
    for page in pages:
        median, slowest, sql, statements, status = measure(client, page, args.repeat)
        print(f"{page[:60]:60} {median:10.1f} {slowest:8.1f} {sql:8.1f} {statements:6d} {status}")
    with override_settings(JOBQUEUE=pro_settings()):
        for page in pro_pages:
            median, slowest, sql, statements, status = measure(client, page, args.repeat)
            print(f"{page:60} {median:10.1f} {slowest:8.1f} {sql:8.1f} {statements:6d} {status}")
        # The bulk page's confirmation: the selection's count, bounded at BULK_COUNT_LIMIT.
        confirm = {"state": "failed", "action": "retry"}
        median, slowest, sql, statements, status = measure(
            client, "/console/pro/bulk/", args.repeat, data=confirm
        )
        page = "POST /console/pro/bulk/ state=failed action=retry (count)"
        print(f"{page:60} {median:10.1f} {slowest:8.1f} {sql:8.1f} {statements:6d} {status}")
    print(f"load average: {', '.join(f'{n:.2f}' for n in os.getloadavg())}")
    return 0


def migrate(target: str | None) -> None:
    """Migrate every app to its latest; ``target``: django_jobqueue to that migration
    instead (forward or back), without first going past it when it is applied already
    (0027 back to 0026 rebuilds seven indexes of the million rows; twice would double it)."""
    from django.core.management import call_command
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    if target is None:
        call_command("migrate", verbosity=0)
        return
    executor = MigrationExecutor(connection)
    name = executor.loader.get_migration_by_prefix("django_jobqueue", target).name
    if ("django_jobqueue", name) not in executor.recorder.applied_migrations():
        call_command("migrate", verbosity=0)  # a new database: every app's tables first
    call_command("migrate", "django_jobqueue", target, verbosity=0)


def ensure_plan_and_limit() -> str:
    """Make one cron plan (its page reads its history) and one run-time limit (the
    limits page counts its due jobs); return the plan's name."""
    from django_jobqueue.models import LimitOverride, ScheduleJob
    from django_jobqueue.store import limits

    name = "bench-plan"
    if not ScheduleJob.objects.filter(name=name).exists():
        ScheduleJob.objects.create(
            name=name, queue="emails", job_type="emails.send", cron="0 3 * * *", source="api"
        )
    if not LimitOverride.objects.exists():
        limits.set_limit("default", "queue:emails", {"concurrency": 5}, by="bench")
    return name


def pro_settings() -> dict[str, object]:
    """A JOBQUEUE with a licence of a key pair made here, so the Pro pages answer."""
    from datetime import UTC, datetime, timedelta

    from django_jobqueue.store.licence import generate_key_pair, issue_licence

    private_pem, public_pem = generate_key_pair()
    key = issue_licence(
        private_pem, licensee="bench", expires_at=datetime.now(UTC) + timedelta(days=1)
    )
    return {"LICENCE_KEY": key, "LICENCE_PUBLIC_KEYS": [public_pem]}


if __name__ == "__main__":
    raise SystemExit(main())

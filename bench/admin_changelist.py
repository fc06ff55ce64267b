"""Time the Job admin changelist over a big job table on PostgreSQL.

Not a test (it would take minutes in CI): run it by hand against a scratch
database, which it creates, migrates and fills once::

    .venv/bin/python bench/admin_changelist.py                # 1,000,000 jobs
    .venv/bin/python bench/admin_changelist.py --rows 200000 --url postgres://...

Rows are inserted by one ``INSERT ... SELECT generate_series`` (about half a
minute for a million), then the table is ANALYZEd. Each page is fetched through
the Django test client as a superuser, ``--repeat`` times after one warm-up; the
script prints the median and the slowest time and the number of SQL statements.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jq_bench_admin"


def ensure_database(url: str) -> None:
    """Create the scratch database of ``url`` (PostgreSQL or MariaDB) if it does not
    exist; a SQLite file is made by its first connection."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if parts.scheme == "sqlite":
        return
    if parts.scheme.startswith("mysql"):
        import MySQLdb

        conn = MySQLdb.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=parts.username or "root",
        )
        try:
            conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
        finally:
            conn.close()
        return

    import psycopg

    admin_url = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")


#: The fill's column expressions of ``g`` (1..rows) per vendor: PostgreSQL's and
#: MariaDB's spelling of one mix (``%%`` is ``%``: the statement takes parameters).
#: Status mix: 80% done, 10% init, 5% max_retry, 3% retry, 2% processing.
_STATUS = (
    "CASE WHEN g %% 100 < 80 THEN 'done' WHEN g %% 100 < 90 THEN 'init' "
    "WHEN g %% 100 < 95 THEN 'max_retry' WHEN g %% 100 < 98 THEN 'retry' "
    "ELSE 'processing' END"
)
_MIX = {
    "status": _STATUS,
    "waiting": "(g %% 100 BETWEEN 80 AND 89) OR (g %% 100 BETWEEN 95 AND 97)",
    "attempt": "CASE WHEN g %% 100 < 80 THEN 1 WHEN g %% 100 < 90 THEN 0 ELSE 2 END",
    "unique_mode": "CASE WHEN g %% 50 = 0 THEN 'while_locked' ELSE '' END",
}
EXPRESSIONS = {
    "postgresql": {
        **_MIX,
        "jid": "md5(g::text)",
        "queue": "(ARRAY['default','emails','reports','webhooks'])[1 + g %% 4]",
        "job_type": "(ARRAY['emails.send','reports.build','hooks.post','maint.noop',"
        "'images.resize'])[1 + g %% 5]",
        "payload": "jsonb_build_object('n', g, 'to', 'user' || g || '@example.com')",
        "run_at": "now() - (g || ' seconds')::interval",
        "finished_at": "CASE WHEN g %% 100 < 80 OR g %% 100 BETWEEN 90 AND 94 "
        "THEN now() - (g || ' seconds')::interval END",
        "unique_key": "CASE WHEN g %% 50 = 0 THEN 'k' || g END",
        "unique_key_hash": "CASE WHEN g %% 50 = 0 THEN md5('k' || g) || md5('k' || g) END",
        "unique_expires_at": "CASE WHEN g %% 50 = 0 THEN now() + interval '1 hour' END",
    },
    "mysql": {
        **_MIX,
        "jid": "md5(g)",
        "queue": "ELT(1 + g %% 4, 'default', 'emails', 'reports', 'webhooks')",
        "job_type": "ELT(1 + g %% 5, 'emails.send', 'reports.build', 'hooks.post', "
        "'maint.noop', 'images.resize')",
        "payload": "JSON_OBJECT('n', g, 'to', CONCAT('user', g, '@example.com'))",
        "run_at": "UTC_TIMESTAMP(6) - INTERVAL g SECOND",
        "finished_at": "CASE WHEN g %% 100 < 80 OR g %% 100 BETWEEN 90 AND 94 "
        "THEN UTC_TIMESTAMP(6) - INTERVAL g SECOND END",
        "unique_key": "CASE WHEN g %% 50 = 0 THEN CONCAT('k', g) END",
        "unique_key_hash": "CASE WHEN g %% 50 = 0 THEN "
        "CONCAT(md5(CONCAT('k', g)), md5(CONCAT('k', g))) END",
        "unique_expires_at": "CASE WHEN g %% 50 = 0 THEN UTC_TIMESTAMP(6) + INTERVAL 1 HOUR END",
    },
    # Times as Django stores them on SQLite: text, UTC, "YYYY-MM-DD HH:MM:SS.SSS".
    "sqlite": {
        **_MIX,
        "jid": "printf('%%032x', g)",
        "queue": 'json_extract(\'["default","emails","reports","webhooks"]\', '
        "'$[' || (g %% 4) || ']')",
        "job_type": 'json_extract(\'["emails.send","reports.build","hooks.post",'
        "\"maint.noop\",\"images.resize\"]', '$[' || (g %% 5) || ']')",
        "payload": "json_object('n', g, 'to', 'user' || g || '@example.com')",
        "run_at": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || g || ' seconds')",
        "finished_at": "CASE WHEN g %% 100 < 80 OR g %% 100 BETWEEN 90 AND 94 "
        "THEN strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-' || g || ' seconds') END",
        "unique_key": "CASE WHEN g %% 50 = 0 THEN 'k' || g END",
        "unique_key_hash": "CASE WHEN g %% 50 = 0 THEN printf('%%064x', g) END",
        "unique_expires_at": "CASE WHEN g %% 50 = 0 THEN "
        "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+1 hour') END",
    },
}


def fill(rows: int, overrides: dict[str, str] | None = None) -> None:
    """Replace the job table's rows by ``rows`` generated jobs, then ANALYZE.

    PostgreSQL (``generate_series``), MariaDB (its ``seq_1_to_N`` sequence table) or
    SQLite (a recursive CTE).
    ``overrides``: field name -> SQL expression of ``g`` (1..rows; ``%%`` for ``%``)
    replacing the mix of :data:`EXPRESSIONS`, e.g. ``{"status": "'init'"}``; ``"NULL"``
    leaves a column NULL. bench/bigdrain.py seeds a million waiting no-op jobs this way.
    """
    from django.db import connection
    from django.db.models import NOT_PROVIDED

    from django_jobqueue.models import Job

    table = connection.ops.quote_name(Job._meta.db_table)
    expressions = {**EXPRESSIONS[connection.vendor], **(overrides or {})}
    columns, values, params = [], [], []
    for field in Job._meta.concrete_fields:
        if field.primary_key:
            continue
        if field.name in expressions:
            columns.append(connection.ops.quote_name(field.column))
            values.append(expressions[field.name])
        elif field.db_default is not NOT_PROVIDED:
            continue
        elif field.null and field.default is NOT_PROVIDED:
            continue
        else:
            columns.append(connection.ops.quote_name(field.column))
            values.append("%s")
            params.append(field.get_db_prep_save(field.get_default(), connection))
    truncate = f"TRUNCATE {table}"
    if connection.vendor == "mysql":
        source = f"(SELECT seq AS g FROM seq_1_to_{int(rows)}) AS s"
        analyze = f"ANALYZE TABLE {table}"
    elif connection.vendor == "sqlite":
        source = (
            "(WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq "
            f"WHERE g < {int(rows)}) SELECT g FROM seq) AS s"
        )
        analyze, truncate = f"ANALYZE {table}", f"DELETE FROM {table}"  # noqa: S608
    else:
        source, analyze = "generate_series(1, %s) AS g", f"ANALYZE {table}"
        params.append(rows)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} FROM {source}"
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(truncate)
        cursor.execute(sql, params)
        cursor.execute(analyze)
        if connection.vendor == "mysql":
            cursor.fetchall()
    print(f"inserted {rows:,} jobs in {time.perf_counter() - started:.1f} s")


def measure(
    client: Any, url: str, repeat: int, data: dict[str, str] | None = None
) -> tuple[float, float, float, int, int]:
    """Return (median ms, max ms, median SQL ms, statements, status) of GET ``url``
    (POST ``data`` to it when given)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def fetch() -> Any:
        return client.get(url) if data is None else client.post(url, data)

    fetch()  # warm-up
    times, sql_times = [], []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = fetch()
            times.append((time.perf_counter() - started) * 1000)
        sql_times.append(sum(float(q["time"]) for q in queries.captured_queries) * 1000)
    return (
        statistics.median(times),
        max(times),
        statistics.median(sql_times),
        len(queries),
        response.status_code,
    )


def main() -> int:
    """Fill (if needed) and time the changelist pages."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help="Scratch PostgreSQL database URL.")
    parser.add_argument("--rows", type=int, default=1_000_000, help="Jobs in the table.")
    parser.add_argument("--repeat", type=int, default=5, help="Timed requests per page.")
    parser.add_argument("--refill", action="store_true", help="Refill even if the count fits.")
    args = parser.parse_args()

    ensure_database(args.url)
    os.environ["DATABASE_URL"] = args.url
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.urls import reverse

    from django_jobqueue.admin import EstimatedCountPaginator
    from django_jobqueue.models import Job

    settings.ALLOWED_HOSTS = ["testserver"]
    setup_test_environment()
    call_command("migrate", verbosity=0)
    estimate = EstimatedCountPaginator(Job.objects.order_by("-pk"), 100).count
    if args.refill or abs(estimate - args.rows) > args.rows * 0.05:
        fill(args.rows)
    user, _created = User.objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)

    changelist = reverse("admin:django_jobqueue_job_changelist")
    some = Job.objects.order_by("-pk").values_list("pk", "jid")[500]
    pages = {
        "changelist (unfiltered, page 1)": changelist,
        "changelist page 50": changelist + "?p=50",
        "filter status=max_retry": changelist + "?status=max_retry",
        "filter queue=emails": changelist + "?queue=emails",
        "filter job_type=hooks.post": changelist + "?job_type=hooks.post",
        "filter holds a unique key": changelist + "?unique_held=yes",
        "search by jid": changelist + f"?q={some[1]}",
        "search by job id (none matches)": changelist + "?q=invoice:nope",
        "job detail": reverse("admin:django_jobqueue_job_change", args=[some[0]]),
    }
    print(f"jobs: {Job.objects.order_by().count():,} (exact, for the record)")
    print(f"load average: {os.getloadavg()[0]:.1f} (rendering is CPU-bound; SQL ms is not)")
    print(f"{'page':36} {'median ms':>10} {'max ms':>8} {'SQL ms':>7} {'SQL':>4} {'HTTP':>5}")
    for name, url in pages.items():
        median, worst, sql_ms, statements, status = measure(client, url, args.repeat)
        print(f"{name:36} {median:10.1f} {worst:8.1f} {sql_ms:7.1f} {statements:4d} {status:5d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

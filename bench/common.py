"""Shared helpers of the benchmarks: scratch databases, Django set-up, workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: The checkout whose code runs (``JQ_BENCH_ROOT``: another one, e.g. a base commit's
#: worktree, to measure before and after with the same script).
ROOT = Path(os.environ.get("JQ_BENCH_ROOT") or Path(__file__).resolve().parent.parent)
BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT), str(BENCH.parent)]

#: Appended to every scratch database's name (``JQ_BENCH_DB_SUFFIX``), so two benchmark
#: runs against one server do not empty each other's tables.
SUFFIX = os.environ.get("JQ_BENCH_DB_SUFFIX", "")
NAME = f"jq_bench{SUFFIX and '_' + SUFFIX}"

#: Scratch databases, one per vendor; created (and migrated) on first use.
URLS = {
    "postgres": f"postgres://postgres@127.0.0.1:5432/{NAME}",
    "mariadb": f"mysql://root@127.0.0.1:3306/{NAME}",
    "sqlite": f"sqlite:////tmp/{NAME}.sqlite3",
}


def env_for(db: str) -> dict[str, str]:
    """Return the environment of a Django process on ``db``'s scratch database."""
    return {
        **os.environ,
        "DATABASE_URL": URLS[db],
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(BENCH.parent)]),
    }


def create_database(db: str) -> None:
    """Create ``db``'s scratch database if missing (SQLite: its file is made on connect)."""
    if db == "postgres":
        subprocess.run(  # noqa: S603
            [
                "psql",
                "-h127.0.0.1",
                "-Upostgres",
                "-d",
                "postgres",
                "-qc",
                f"CREATE DATABASE {NAME}",
            ],  # noqa: S607
            capture_output=True,
            check=False,
        )
    elif db == "mariadb":
        subprocess.run(  # noqa: S603
            ["mysql", "-h127.0.0.1", "-uroot", "-e", f"CREATE DATABASE IF NOT EXISTS {NAME}"],  # noqa: S607
            check=True,
        )


def setup(db: str) -> None:
    """Point this process at ``db``'s scratch database, migrated, and set Django up."""
    create_database(db)
    os.environ.update(env_for(db))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def runworkers(db: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``runworkers *args`` on ``db``'s scratch database and wait for it."""
    return subprocess.run(  # noqa: S603
        [sys.executable, "-m", "django", "runworkers", *args],
        cwd=ROOT,
        env=env_for(db),
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )


def clear_jobs() -> None:
    """Delete every job of the scratch database; on PostgreSQL, then vacuum the table.

    A server with autovacuum off (a CI image's may be) would otherwise keep every
    deleted round's rows as dead tuples: after a few dozen rounds the table of 20,000
    jobs was 275 MB with 1.3 million dead ones, and each round scanned more of them
    than the last (a benchmark slower by the rounds before it, not by the code).
    """
    from django.db import connection

    from django_jobqueue.models import Job

    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Job._meta.db_table}")  # noqa: S608
        if connection.vendor == "postgresql" and not connection.in_atomic_block:
            cursor.execute(f"VACUUM (ANALYZE) {Job._meta.db_table}")

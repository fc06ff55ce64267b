"""System checks: settings (E0xx), database (E1xx/W1xx), deployment (W2xx)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

from .conf import validate_settings
from .licence import check_licence

__all__ = ["check_database", "check_deployment", "check_settings"]


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E001: the ``JOBQUEUE`` setting has an unknown key, a bad value or duration."""
    return [
        Error(
            problem,
            hint="See the configuration reference in the README.",
            id="django_jobqueue.E001",
        )
        for problem in validate_settings()
    ]


@register(Tags.database)
def check_database(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """E101: MySQL < 8.0 / MariaDB < 10.6 (no SKIP LOCKED); W102: MySQL session not UTC."""
    messages: list[CheckMessage] = []
    for alias in databases or ():
        conn = connections[alias]
        if conn.vendor != "mysql":
            continue
        if not conn.features.has_select_for_update_skip_locked:
            messages.append(
                Error(
                    f"Database {alias!r} lacks SELECT ... FOR UPDATE SKIP LOCKED.",
                    hint="django-jobqueue needs MySQL 8.0+ or MariaDB 10.6+.",
                    id="django_jobqueue.E101",
                )
            )
        with conn.cursor() as cursor:
            cursor.execute("SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())")
            offset = cursor.fetchone()[0]
        if offset:
            messages.append(
                Warning(
                    f"Database {alias!r} session time zone is {offset} s off UTC, so leases "
                    "and run times computed by the database would be off by as much.",
                    hint='Add "init_command": "SET time_zone=\'+00:00\'" to its OPTIONS.',
                    id="django_jobqueue.W102",
                )
            )
    return messages


@register(Tags.compatibility)
def check_deployment(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W201: USE_TZ is False; W202: SQLite without an IMMEDIATE transaction mode."""
    messages: list[CheckMessage] = []
    if not settings.USE_TZ:
        messages.append(
            Warning(
                "USE_TZ is False; job times are stored in UTC and compared by the database clock.",
                hint="Set USE_TZ = True.",
                id="django_jobqueue.W201",
            )
        )
    for alias, db in settings.DATABASES.items():
        if db.get("ENGINE", "").endswith("sqlite3"):
            mode = str(db.get("OPTIONS", {}).get("transaction_mode", "")).upper()
            if mode != "IMMEDIATE":
                messages.append(
                    Warning(
                        f"SQLite database {alias!r} does not use transaction_mode IMMEDIATE, so "
                        "concurrent workers fail more often with 'database is locked' and retry.",
                        hint="Set DATABASES[...]['OPTIONS'] = {'transaction_mode': 'IMMEDIATE', "
                        "'timeout': 20}.",
                        id="django_jobqueue.W202",
                    )
                )
    return messages


# The licence check lives beside the licence; registering it here keeps every
# check of the app registered from one module.
register(check_licence, Tags.compatibility)

"""System checks: settings (E0xx), database (E1xx/W1xx), deployment (W2xx)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

from .core.conf import get_config, validate_settings
from .store.licence import check_licence

__all__ = [
    "MYSQL_PACKET_OVERHEAD",
    "check_database",
    "check_deployment",
    "check_settings",
    "check_sizes",
]

#: Bytes of a MySQL packet kept for the rest of the statement around one payload or
#: result (the other columns, the SQL text, a rerun payload's neighbours).
MYSQL_PACKET_OVERHEAD = 65_536
#: Largest JSON each vendor stores in one value: PostgreSQL's jsonb (2^28 - 1 bytes),
#: SQLite's default SQLITE_MAX_LENGTH (10^9). MySQL's is read from the server.
_VENDOR_MAX_BYTES = {"postgresql": 268_435_455, "sqlite": 1_000_000_000}


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E001: the ``JOBQUEUE`` setting has an unknown key, a bad value or duration; a
    bad ``limits`` entry's hint gives the shape of a limit (docs/limits.md)."""
    return [
        Error(
            problem,
            hint=_LIMITS_HINT if "['limits']" in problem else _SETTINGS_HINT,
            id="django_jobqueue.E001",
        )
        for problem in validate_settings()
    ]


_SETTINGS_HINT = "See the configuration reference in the README."
_LIMITS_HINT = (
    'A limit is a dict such as {"concurrency": 10, "rate": "100/s", "burst": 20, '
    '"partition": "payload.customer_id", "fair": True} (concurrency and burst integers '
    "from 1 to 1,000,000, a rate N/s, N/m or N/h, a partition payload.<field> or key); "
    'see docs/limits.md "Declaring a limit".'
)


@register(Tags.database)
def check_database(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """E101: MySQL < 8.0 / MariaDB < 10.6 (no SKIP LOCKED); W102: MySQL session not UTC;
    W104: MySQL sessions not READ COMMITTED."""
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
        isolation = _mysql_isolation(conn)
        if isolation != "READ-COMMITTED":
            messages.append(
                Warning(
                    f"Database {alias!r} sessions are {isolation}: a job's end there reads "
                    "the edges of its dependents as they were when its transaction first "
                    "read, so two upstream jobs ending at once can each leave their "
                    "dependent blocked until the repair pass (30 s), and the lock order "
                    "of ends and enqueues with after does not cover its gap locks.",
                    hint='Use "isolation_level": "read committed" in its OPTIONS (Django\'s '
                    'default; docs/workflows.md "Lock order").',
                    id="django_jobqueue.W104",
                )
            )
    return messages


def _mysql_isolation(conn: Any) -> str:
    """The session's isolation level, as MySQL spells it (``READ-COMMITTED``): MySQL
    8 names the variable ``transaction_isolation``, MariaDB before 11.1
    ``tx_isolation``."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SHOW SESSION VARIABLES WHERE Variable_name IN "
            "('transaction_isolation', 'tx_isolation')"
        )
        values = [str(value).upper() for _name, value in cursor.fetchall()]
    return values[0] if values else "READ-COMMITTED"


@register(Tags.database)
def check_sizes(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """E103: ``MAX_PAYLOAD_BYTES`` or ``MAX_RESULT_BYTES`` above what a database takes.

    On MySQL/MariaDB the bound is ``@@max_allowed_packet`` less
    :data:`MYSQL_PACKET_OVERHEAD`: a bigger statement breaks the caller's connection
    (error 1153, then 2013 on its next query).
    """
    try:
        config = get_config()
    except Exception:  # noqa: BLE001 - E001 reports a bad setting
        return []
    messages: list[CheckMessage] = []
    for alias in databases or ():
        conn = connections[alias]
        if conn.vendor == "mysql":
            with conn.cursor() as cursor:
                cursor.execute("SELECT @@max_allowed_packet")
                packet = int(cursor.fetchone()[0])
            bound = packet - MYSQL_PACKET_OVERHEAD
            where = f"max_allowed_packet ({packet}) less {MYSQL_PACKET_OVERHEAD} bytes"
        elif conn.vendor in _VENDOR_MAX_BYTES:
            bound = _VENDOR_MAX_BYTES[conn.vendor]
            where = f"the largest {conn.vendor} JSON value"
        else:
            continue
        for key in ("MAX_PAYLOAD_BYTES", "MAX_RESULT_BYTES"):
            value = getattr(config, key)
            if value > bound:
                messages.append(
                    Error(
                        f"JOBQUEUE[{key!r}] is {value} bytes, over what database {alias!r} "
                        f"takes: {bound} bytes ({where}).",
                        hint=f"Lower JOBQUEUE[{key!r}], or raise the server's "
                        "max_allowed_packet (MySQL/MariaDB).",
                        id="django_jobqueue.E103",
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
                        "'timeout': 20, 'init_command': 'PRAGMA journal_mode=WAL;'} (README, "
                        "Quickstart).",
                        id="django_jobqueue.W202",
                    )
                )
    return messages


# The licence check lives beside the licence; registering it here keeps every
# check of the app registered from one module.
register(check_licence, Tags.compatibility)

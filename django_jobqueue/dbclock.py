"""The database clock: one ``Now`` expression for every time the package writes or
compares (run_at, leases, expiry, id holds, unique expiry, schedules, prune).

Why not ``django.db.models.functions.Now``: on SQLite it renders
``STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW')``, millisecond text (``...:33.126``), while
SQLite stores every other datetime as text in Django's own form, ``str(value)``:
``YYYY-MM-DD HH:MM:SS.ffffff``, or ``YYYY-MM-DD HH:MM:SS`` when the microsecond is 0
(``DatabaseOperations.adapt_datetimefield_value``). ``Now() + timedelta`` goes
through Django's ``django_format_dtdelta``, which returns ``str(datetime)`` too. So
a job enqueued with ``run_at = Now() + 0`` stored ``...:33.126000``, and a claim in
the same millisecond compared ``'...:33.126000' <= '...:33.126'``: false, as text.
SQLite's own clock has millisecond resolution, so no SQL expression can close that
gap; the time has to come from Python.

What this module does: on SQLite, ``Now`` renders ``django_jobqueue_now()``, a
function registered on every connection (``connection_created``, connected in
``AppConfig.ready()``) that returns ``adapt_datetimefield_value(timezone.now())``:
the current time, to the microsecond, in exactly the text Django stores for a
Python datetime (same time zone, same optional fraction). With one text form on
both sides, text order is time order: two values of the same second differ at the
first character where one has ``.`` and the other ends, and the shorter one (the
whole second, microsecond 0) is the earlier time. ``Now() + timedelta`` keeps the
form, since ``django_format_dtdelta`` parses this text and returns ``str()`` of the
sum. The function is not deterministic: SQLite calls it for each use in a
statement, so two uses in one ``UPDATE`` may differ by microseconds, never by
going back.

PostgreSQL (``STATEMENT_TIMESTAMP()``, ``timestamp with time zone``) and
MySQL/MariaDB (``CURRENT_TIMESTAMP(6)``, ``datetime(6)`` columns) already compare
typed values to the microsecond, so ``Now`` renders as Django's there. MySQL's
session time zone must be UTC for Python-written times to match it: the E1xx
system check in ``checks`` says so.

``created_at``/``updated_at`` keep Django's ``Now()`` as ``db_default`` (a column
default in the migration must not call a per-connection function): they are shown
and ordered, never compared against the clock.
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from django.db.models.functions import Now as DjangoNow
from django.utils import timezone

__all__ = ["SQLITE_FUNCTION", "Now", "connect", "install"]

#: The SQL function that ``Now`` calls on SQLite.
SQLITE_FUNCTION = "django_jobqueue_now"


class Now(DjangoNow):
    """The database's current time, to the microsecond on every database.

    Use it wherever Django's ``Now()`` would go (filters, updates, ``+ timedelta``).
    On SQLite it needs :func:`install` on the connection, which the app does for
    every connection Django opens.
    """

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, template=f"{SQLITE_FUNCTION}()", **extra_context)


def install(connection: BaseDatabaseWrapper) -> None:
    """Register ``django_jobqueue_now()`` on an open SQLite ``connection``.

    Parameters
    ----------
    connection
        A Django database wrapper whose ``connection`` (the DB-API connection) is
        open. Other vendors are left alone.
    """
    if connection.vendor != "sqlite" or connection.connection is None:
        return
    ops = connection.ops

    def now() -> str:
        # Django's own write path for a Python datetime: naive in the connection's
        # time zone, str() of it, "YYYY-MM-DD HH:MM:SS[.ffffff]".
        return ops.adapt_datetimefield_value(timezone.now())

    connection.connection.create_function(SQLITE_FUNCTION, 0, now, deterministic=False)


def _on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    install(connection)


def connect() -> None:
    """Install the clock on every SQLite connection, open now or opened later.

    Called once from ``AppConfig.ready()``; calling it again does nothing new.
    """
    connection_created.connect(_on_connection_created, dispatch_uid=__name__)
    for connection in connections.all(initialized_only=True):
        install(connection)

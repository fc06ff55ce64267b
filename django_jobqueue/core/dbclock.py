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

What this module does: on SQLite, ``Now`` renders ``django_jobqueue_now(n)``, a
function registered on every connection (``connection_created``, connected in
``AppConfig.ready()``) that returns ``adapt_datetimefield_value(timezone.now())``:
the current time, to the microsecond, in exactly the text Django stores for a
Python datetime (same time zone, same optional fraction). With one text form on
both sides, text order is time order: two values of the same second differ at the
first character where one has ``.`` and the other ends, and the shorter one (the
whole second, microsecond 0) is the earlier time. ``Now() + timedelta`` keeps the
form, since ``django_format_dtdelta`` parses this text and returns ``str()`` of the
sum.

One statement, one instant, as on the other databases: each compilation of a
statement passes its own number to every ``Now`` in it (``django_jobqueue_now(7)``),
and the connection's function answers the same time for the same number, a fresh
one for a new number. So ``started_at`` and ``heartbeat_at`` of one claim are equal,
and so are ``created_at`` and ``run_at`` of one insert. The number is a parameter,
so the SQL text, and SQLite's statement cache, stays the same. The function is
registered ``deterministic=False``: SQLite must call it, never fold it.

PostgreSQL (``STATEMENT_TIMESTAMP()``, ``timestamp with time zone``) and
MySQL/MariaDB (``CURRENT_TIMESTAMP(6)``, ``datetime(6)`` columns) already compare
typed values to the microsecond, so ``Now`` renders as Django's there. MySQL's
session time zone must be UTC for Python-written times to match it: the E1xx
system check in ``checks`` says so.

``created_at``/``updated_at`` keep Django's ``Now()`` as ``db_default`` (a column
default in the migration must not call a per-connection function), and are never
compared against the clock; enqueue writes both with this ``Now`` anyway, so a
job's times from one insert are one instant (``unique_expires_at - created_at`` is
the TTL exactly).
"""

from __future__ import annotations

import itertools
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from django.db.models.functions import Now as DjangoNow
from django.utils import timezone

__all__ = ["SQLITE_FUNCTION", "Now", "connect", "install", "statement_number"]

#: The SQL function that ``Now`` calls on SQLite.
SQLITE_FUNCTION = "django_jobqueue_now"

_STATEMENT_ATTR = "_django_jobqueue_clock_statement"
_statements = itertools.count(1)


def statement_number() -> int:
    """Return a fresh statement number for ``django_jobqueue_now(%s)`` in raw SQL.

    A raw statement that calls the SQLite clock passes one such number to every
    call in it, as a compiled ``Now`` does, so all its times are one instant.
    """
    return next(_statements)


class Now(DjangoNow):
    """The database's current time, to the microsecond on every database.

    Use it wherever Django's ``Now()`` would go (filters, updates, ``+ timedelta``).
    On SQLite it needs :func:`install` on the connection, which the app does for
    every connection Django opens.
    """

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        # One number per compiled statement (its compiler): one instant per statement.
        statement = getattr(compiler, _STATEMENT_ATTR, None)
        if statement is None:
            statement = statement_number()
            setattr(compiler, _STATEMENT_ATTR, statement)
        return f"{SQLITE_FUNCTION}(%s)", (statement,)


def install(connection: BaseDatabaseWrapper) -> None:
    """Register ``django_jobqueue_now(statement)`` on an open SQLite ``connection``.

    Parameters
    ----------
    connection
        A Django database wrapper whose ``connection`` (the DB-API connection) is
        open. Other vendors are left alone.
    """
    if connection.vendor != "sqlite" or connection.connection is None:
        return
    ops = connection.ops
    last: list[Any] = [None, ""]  # the statement number last asked, and its time

    def now(statement: int | None) -> str:
        if statement is None or statement != last[0]:
            # Django's own write path for a Python datetime: naive in the
            # connection's time zone, str() of it, "YYYY-MM-DD HH:MM:SS[.ffffff]".
            last[:] = [statement, ops.adapt_datetimefield_value(timezone.now())]
        return last[1]

    connection.connection.create_function(SQLITE_FUNCTION, 1, now, deterministic=False)


def _on_connection_created(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    install(connection)


def connect() -> None:
    """Install the clock on every SQLite connection, open now or opened later.

    Called once from ``AppConfig.ready()``; calling it again does nothing new.
    """
    connection_created.connect(_on_connection_created, dispatch_uid=__name__)
    for connection in connections.all(initialized_only=True):
        install(connection)

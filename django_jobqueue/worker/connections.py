"""Database connections of long-running worker threads.

Django's ``close_old_connections()`` is built for requests: with the default
``CONN_MAX_AGE = 0`` it closes every connection each time, which would make a
worker reconnect before every job. A worker is not a request, so between jobs it
keeps a healthy connection and closes it only when:

- it is broken (an error occurred and it no longer answers), or a transaction was
  left open on it (a handler that forgot to commit: the rollback frees its locks);
- it is older than ``CONN_MAX_AGE`` when that is set above 0, else older than
  :data:`WORKER_CONN_MAX_AGE_S` (so a worker that runs for weeks still renews its
  connections, for example after a failover or a password rotation).

Before each handler, :func:`check_before_handler` makes sure the connections the
handler will find open still answer, so its first query does not meet one that
the server closed while the worker was idle (an idle timeout, a killed backend).

While the handler runs, :func:`handler_statements` gives each statement outside
``atomic()`` that follows :data:`IDLE_CHECK_S` or more of idleness on its
connection the same check, as Django's ``CONN_HEALTH_CHECKS`` does at the start
of a request: a handler that computes for a while and then writes through the
ORM gets one transparent reconnect when the server (``idle_session_timeout``,
``wait_timeout``), a pooler or a failover closed its idle session meanwhile, on
every database. Inside ``atomic()`` a dead connection stays an error: the
transaction's earlier work is gone with it, so only the caller can start it again
(README "Database notes").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..core.reconnect import close_dead, mark_wrapper_used, wrapper_idle_for

__all__ = [
    "IDLE_CHECK_S",
    "WORKER_CONN_MAX_AGE_S",
    "check_before_handler",
    "handler_statements",
    "recycle_connections",
]

logger = logging.getLogger(__name__)

#: Age (s) after which a worker renews a connection whose CONN_MAX_AGE is 0.
WORKER_CONN_MAX_AGE_S = 300.0

#: Idle time (s) past which a connection is checked before a handler runs on it.
#: A connection that answered within it (the claim just made in the same thread)
#: is not: a busy worker pays no check per job. See :func:`check_before_handler`.
IDLE_CHECK_S = 1.0


#: This thread's connection wrappers, one per alias (:func:`_open_connections`).
_wrappers = threading.local()


def _open_connections() -> list[BaseDatabaseWrapper]:
    """This thread's open connection wrappers (``connections.all()``, cached per thread).

    Django keeps one wrapper per alias and thread for the thread's life (closing it
    keeps the wrapper), so the list is built once per thread: a lookup through
    ``connections`` goes through asgiref's ``Local`` per alias, which cost a no-op
    drain a twelfth of its CPU at three lookups per job.
    """
    cached: list[BaseDatabaseWrapper] | None = getattr(_wrappers, "all", None)
    if cached is None:
        cached = _wrappers.all = [connections[alias] for alias in connections]
    return [conn for conn in cached if conn.connection is not None]


def recycle_connections() -> None:
    """Close this thread's connections that are broken, mid-transaction or too old.

    Call between jobs, in the thread that ran them.
    """
    for conn in _open_connections():
        conn.health_check_done = False  # type: ignore[attr-defined]  # Django 5.1+, not in the stubs
        # As Django's close_if_unusable_or_obsolete(), but for the age rule.
        if conn.in_atomic_block or conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]:
            conn.close()
            continue
        if conn.errors_occurred:
            if not conn.is_usable():
                close_dead(conn.alias)
                continue
            conn.errors_occurred = False
        if conn.close_at is None:
            continue  # CONN_MAX_AGE None: unlimited persistent connections
        # With CONN_MAX_AGE 0, Django sets close_at to the connect time.
        max_age = conn.settings_dict.get("CONN_MAX_AGE", 0)
        limit = conn.close_at if max_age else conn.close_at + WORKER_CONN_MAX_AGE_S
        if time.monotonic() >= limit:
            conn.close()


def check_before_handler(idle_s: float = IDLE_CHECK_S) -> int:
    """Close this thread's open connections that no longer answer; return how many.

    Call in the thread that runs the handler, just before it. A connection that
    answered a worker call (claim, outcome write, an earlier check) less than
    ``idle_s`` seconds ago is taken as alive with no round trip; any other open
    one is checked with Django's ``is_usable()`` (``SELECT 1`` on PostgreSQL, a
    ping on MySQL) and closed when dead, so the handler's first query opens a new
    one. Connections inside a transaction are left alone (a handler never starts
    in one: :func:`recycle_connections` ran before).

    Parameters
    ----------
    idle_s:
        Seconds of idleness after which a connection is checked; 0: always.

    Returns
    -------
    int
        The dead connections closed. Never raises.

    Implements: docs/design.md#execution.
    """
    closed = 0
    for conn in _open_connections():
        if conn.in_atomic_block:
            continue
        idle = wrapper_idle_for(conn)
        if idle is not None and idle < idle_s:
            continue
        if conn.is_usable():
            # Django's own health check (CONN_HEALTH_CHECKS) need not ask again.
            conn.health_check_done = True  # type: ignore[attr-defined]  # Django 5.1+
        else:
            close_dead(conn.alias)
            closed += 1
        mark_wrapper_used(conn)
    return closed


#: Whether this thread runs a handler now (:func:`handler_statements`).
_in_handler = threading.local()
#: Attribute of a connection wrapper that carries the idle check already.
_CHECKED = "_jq_idle_checked"


def _check_idle(execute: Any, sql: Any, params: Any, many: bool, context: dict[str, Any]) -> Any:
    """Django execute wrapper: the idle check of :func:`handler_statements`, and the
    connection's last use noted after every statement."""
    conn = context["connection"]
    if (
        getattr(_in_handler, "active", False)
        and not conn.in_atomic_block
        and conn.get_autocommit()
        and (wrapper_idle_for(conn) or 0.0) >= IDLE_CHECK_S
        and not conn.is_usable()
    ):
        logger.warning(
            "database connection lost while idle in a handler on %s: reconnecting before "
            "the statement",
            conn.alias,
        )
        close_dead(conn.alias)
        conn.ensure_connection()
        # The statement's cursor was opened on the dead session: the wrapper the caller
        # holds gets one of the new session (Django's CursorWrapper reads .cursor at
        # each call), and the statement runs there, once.
        context["cursor"].cursor = conn.create_cursor()
    try:
        return execute(sql, params, many, context)
    finally:
        mark_wrapper_used(conn)


@contextmanager
def handler_statements() -> Iterator[None]:
    """Run a handler's statements in this thread with the idle check (module docstring).

    A statement outside ``atomic()`` on a connection idle for :data:`IDLE_CHECK_S`
    or more is preceded by Django's ``is_usable()`` (``SELECT 1``, or a ping on
    MySQL); a dead connection is closed and opened again, and the statement runs on
    the new one. Statements after a shorter idleness, and every statement inside
    ``atomic()``, run as they are. Never raises by itself.

    Implements: docs/design.md#execution.
    """
    if not getattr(_in_handler, "installed", False):
        # Once per thread: its connection wrappers (one per alias) live as long as it.
        for conn in connections.all():
            if not getattr(conn, _CHECKED, False):
                conn.execute_wrappers.append(_check_idle)
                setattr(conn, _CHECKED, True)
        _in_handler.installed = True
    _in_handler.active = True
    try:
        yield
    finally:
        _in_handler.active = False

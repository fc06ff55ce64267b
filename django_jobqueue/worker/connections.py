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
"""

from __future__ import annotations

import time

from django.db import connections

from ..core.reconnect import close_dead, idle_for, mark_used

__all__ = [
    "IDLE_CHECK_S",
    "WORKER_CONN_MAX_AGE_S",
    "check_before_handler",
    "recycle_connections",
]

#: Age (s) after which a worker renews a connection whose CONN_MAX_AGE is 0.
WORKER_CONN_MAX_AGE_S = 300.0

#: Idle time (s) past which a connection is checked before a handler runs on it.
#: A connection that answered within it (the claim just made in the same thread)
#: is not: a busy worker pays no check per job. See :func:`check_before_handler`.
IDLE_CHECK_S = 1.0


def recycle_connections() -> None:
    """Close this thread's connections that are broken, mid-transaction or too old.

    Call between jobs, in the thread that ran them.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
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
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or conn.in_atomic_block:
            continue
        idle = idle_for(conn.alias)
        if idle is not None and idle < idle_s:
            continue
        if conn.is_usable():
            # Django's own health check (CONN_HEALTH_CHECKS) need not ask again.
            conn.health_check_done = True  # type: ignore[attr-defined]  # Django 5.1+
        else:
            close_dead(conn.alias)
            closed += 1
        mark_used(conn.alias)
    return closed

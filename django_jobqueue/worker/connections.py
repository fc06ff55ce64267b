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
"""

from __future__ import annotations

import time

from django.db import connections

__all__ = ["WORKER_CONN_MAX_AGE_S", "recycle_connections"]

#: Age (s) after which a worker renews a connection whose CONN_MAX_AGE is 0.
WORKER_CONN_MAX_AGE_S = 300.0


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
                conn.close()
                continue
            conn.errors_occurred = False
        if conn.close_at is None:
            continue  # CONN_MAX_AGE None: unlimited persistent connections
        # With CONN_MAX_AGE 0, Django sets close_at to the connect time.
        max_age = conn.settings_dict.get("CONN_MAX_AGE", 0)
        limit = conn.close_at if max_age else conn.close_at + WORKER_CONN_MAX_AGE_S
        if time.monotonic() >= limit:
            conn.close()

"""Sending wake-ups: tell idle workers that a queue has a job, after the write commits.

Polling alone finds every job; a wake-up only shortens the wait. On PostgreSQL a
``NOTIFY`` on channel :data:`CHANNEL` carries the queue name (never the payload:
NOTIFY payloads are capped at 8,000 bytes), sent from ``on_commit`` so a rolled-back
job wakes nobody. Every backend also sets an in-process event, :data:`local_event`,
so foremen running in the writing process wake at once. The listening side is
:mod:`django_jobqueue.worker.wakeup`.
"""

from __future__ import annotations

import threading

from django.db import DatabaseError, connections, transaction

from ..core.conf import get_config

__all__ = ["CHANNEL", "local_event", "notify_on_commit"]

#: PostgreSQL channel of the wake-ups.
CHANNEL = "django_jobqueue"

#: Set whenever a job is committed in this process; foremen wait on it when idle.
local_event = threading.Event()


def notify_on_commit(using: str, queue: str) -> None:
    """Wake idle workers of ``queue`` once the current transaction on ``using`` commits.

    Outside a transaction the wake-up is sent at once. A wake-up that cannot be
    sent (a database error) is dropped: the job waits for the next poll.
    """
    transaction.on_commit(lambda: _notify(using, queue), using=using)


def _notify(using: str, queue: str) -> None:
    local_event.set()
    conn = connections[using]
    if conn.vendor != "postgresql" or not get_config().NOTIFY:
        return
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, queue])
    except DatabaseError:
        # A lost wake-up only delays the job until the next poll.
        pass

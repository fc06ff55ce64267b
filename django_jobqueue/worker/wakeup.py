"""Wake-ups: tell idle workers that a queue has a job, after the enqueue commits.

Polling alone finds every job; a wake-up only shortens the wait. On PostgreSQL a
``NOTIFY`` on channel :data:`CHANNEL` carries the queue name (never the payload:
NOTIFY payloads are capped at 8,000 bytes), sent from ``on_commit`` so a rolled-back
job wakes nobody. Every backend also sets an in-process event, so foremen running
in the enqueuing process wake at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import DatabaseError, connections, transaction

from ..conf import get_config

__all__ = ["CHANNEL", "listen", "local_event", "notify_on_commit"]

logger = logging.getLogger(__name__)

#: PostgreSQL channel of the wake-ups.
CHANNEL = "django_jobqueue"

#: Set whenever a job is committed in this process; foremen wait on it when idle.
local_event = threading.Event()


def notify_on_commit(using: str, queue: str) -> None:
    """Wake idle workers of ``queue`` once the current transaction on ``using`` commits.

    Outside a transaction the wake-up is sent at once.
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


def listen(using: str, on_wakeup: Callable[[str], None], stop: threading.Event) -> None:
    """Call ``on_wakeup(queue)`` for each wake-up on ``using`` until ``stop`` is set.

    On PostgreSQL (psycopg 3) a dedicated session connection, outside Django's
    pool, runs ``LISTEN`` on :data:`CHANNEL`; a lost connection is reopened after
    a pause. Elsewhere, or with ``JOBQUEUE["NOTIFY"]`` off, it returns at once:
    the in-process :data:`local_event` and polling still find every job. It blocks:
    run it in its own thread.

    Implements: seed 004 Foreman.Serve (wake idle workers), DESIGN "LISTEN/NOTIFY".
    """
    wrapper = connections[using]
    if wrapper.vendor != "postgresql" or not get_config().NOTIFY:
        return
    while not stop.is_set():
        raw = None
        try:
            raw = wrapper.get_new_connection(wrapper.get_connection_params())
            if not hasattr(raw, "notifies") or not callable(raw.notifies):
                logger.info("LISTEN needs psycopg 3; idle workers poll instead")
                return
            raw.autocommit = True
            raw.execute(f'LISTEN "{CHANNEL}"')
            logger.debug("listening on channel %s", CHANNEL)
            while not stop.is_set():
                for notify in raw.notifies(timeout=0.5, stop_after=1):
                    on_wakeup(notify.payload)
        except Exception:  # a lost listener only slows wake-ups; polling goes on
            logger.warning("LISTEN connection failed; retrying in 5 s", exc_info=True)
            stop.wait(5)
        finally:
            if raw is not None:
                try:
                    raw.close()
                except Exception:  # noqa: S110 (already broken)
                    pass

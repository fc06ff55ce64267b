"""Listening for wake-ups: the worker's side of :mod:`django_jobqueue.wakeups`.

Writers send a wake-up after their job commits
(:func:`~django_jobqueue.wakeups.notify_on_commit`): a PostgreSQL ``NOTIFY`` on
:data:`CHANNEL` carrying the queue name, and the in-process :data:`local_event`.
Here foremen listen for the first; they wait on the second when idle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import connections

from ..conf import get_config
from ..wakeups import CHANNEL, local_event
from . import pooler

__all__ = ["CHANNEL", "listen", "local_event"]

logger = logging.getLogger(__name__)


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
    if not pooler.listen_supported(using):  # a transaction pooler: poll instead
        pooler.poll_instead(on_wakeup, stop)
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

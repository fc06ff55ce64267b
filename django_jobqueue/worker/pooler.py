"""LISTEN behind a transaction pooler: find out at listener start, then poll.

A transaction pooler (PgBouncer with ``pool_mode = transaction``) lends a server
session for one transaction only. A ``LISTEN`` runs on whichever session the
pooler lends, which goes back to the pool at once; the listening client has no
session while it waits, so no notification ever reaches it. Nothing fails: wake-ups
just never come, and idle workers sleep up to ``MAX_SLEEP_MS`` before each poll.

:func:`listen_supported` tells the two apart with one round trip: it listens on a
private channel on one new connection, notifies that channel from a second one, and
waits up to :data:`PROBE_TIMEOUT_S` for the notification. On the server itself (or a
session pooler) it arrives within milliseconds. When it does not,
:func:`poll_instead` stands in for the listener: it wakes idle workers every
``MIN_SLEEP_MS``, so a new job waits at most that long, whatever ``MAX_SLEEP_MS`` is.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from django.db import connections

from ..core.conf import get_config

__all__ = ["PROBE_TIMEOUT_S", "listen_supported", "poll_instead"]

logger = logging.getLogger(__name__)

#: How long :func:`listen_supported` waits for its own notification, seconds.
PROBE_TIMEOUT_S = 1.0


def listen_supported(using: str, *, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Return whether a ``LISTEN`` on database ``using`` receives notifications.

    Opens two connections of its own (outside Django's pool, closed before it
    returns): ``LISTEN`` on a private channel on the first, ``NOTIFY`` on it from
    the second, then waits up to ``timeout_s`` seconds for the notification on the
    first. False means a transaction pooler stands between the worker and the
    server, and logs one warning that says so. A probe that cannot connect or
    fails otherwise returns True: the listener's own reconnect loop deals with a
    server that is down, and this must never keep a listener from starting.
    Only meaningful on PostgreSQL with psycopg 3 (elsewhere it returns True).
    """
    wrapper = connections[using]
    if wrapper.vendor != "postgresql":
        return True
    channel = f"jobqueue_probe_{uuid.uuid4().hex}"
    listener: Any = None
    sender: Any = None
    try:
        params = wrapper.get_connection_params()
        listener = wrapper.get_new_connection(params)
        if not callable(getattr(listener, "notifies", None)):
            return True  # psycopg 2: listen() says so itself
        listener.autocommit = True
        listener.execute(f'LISTEN "{channel}"')
        sender = wrapper.get_new_connection(params)
        sender.autocommit = True
        sender.execute(f'NOTIFY "{channel}"')
        for _notify in listener.notifies(timeout=timeout_s, stop_after=1):
            return True
    except Exception:  # noqa: BLE001 (see the docstring: never block the listener)
        logger.debug("LISTEN probe failed; assuming LISTEN works", exc_info=True)
        return True
    finally:
        for raw in (sender, listener):
            if raw is not None:
                try:
                    raw.close()
                except Exception:  # noqa: S110 (already broken)
                    pass
    db = wrapper.settings_dict
    logger.warning(
        "LISTEN receives no notification on %s:%s (a transaction pooler such as "
        "PgBouncer in transaction mode?); idle workers poll every %d ms instead",
        db.get("HOST") or "localhost",
        db.get("PORT") or 5432,
        get_config().MIN_SLEEP_MS,
    )
    return False


def poll_instead(on_wakeup: Callable[[str], None], stop: threading.Event) -> None:
    """Call ``on_wakeup("")`` every ``MIN_SLEEP_MS`` until ``stop`` is set.

    The listener's stand-in when :func:`listen_supported` is False: each call wakes
    the idle workers for a poll, as a notification would. It blocks: run it in the
    listener's thread.
    """
    interval_s = max(get_config().MIN_SLEEP_MS, 1) / 1000
    while not stop.wait(interval_s):
        on_wakeup("")

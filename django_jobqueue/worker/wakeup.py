"""Listening for wake-ups: the worker's side of :mod:`django_jobqueue.store.wakeups`.

Writers send a wake-up after their job commits
(:func:`~django_jobqueue.store.wakeups.notify_on_commit`): a PostgreSQL ``NOTIFY`` on
:data:`CHANNEL` carrying the queue name, and the in-process :data:`local_event`.
Here foremen listen for the first; they wait on the second when idle.

A notification sent while no ``LISTEN`` session is up is gone for good, so the
listener keeps a :class:`ListenerHealth` that idle workers read before each sleep:
while it is down they poll every ``MIN_SLEEP_MS`` instead of sleeping up to
``MAX_SLEEP_MS``. A lost session is reopened at once, then after
:data:`RETRY_FIRST_S`, doubling up to :data:`RETRY_MAX_S` between failed tries;
each ``LISTEN`` that succeeds wakes every idle worker for a catch-up poll, which
finds what was enqueued while nobody listened.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import connections

from ..core.conf import get_config
from ..core.reconnect import in_one_line
from ..store.wakeups import CHANNEL, local_event
from . import pooler

__all__ = [
    "CHANNEL",
    "RETRY_FIRST_S",
    "RETRY_MAX_S",
    "ListenerHealth",
    "listen",
    "local_event",
    "retry_pause_s",
]

logger = logging.getLogger(__name__)

#: The pause before the second try to reopen a lost ``LISTEN`` session, seconds
#: (the first try is at once); it doubles after each failed try.
RETRY_FIRST_S = 0.1
#: The longest pause between two tries to reopen the ``LISTEN`` session, seconds.
RETRY_MAX_S = 5.0


def retry_pause_s(failures: int) -> float:
    """Return the pause (s) before the next try after ``failures`` failed tries in a row.

    ``failures``: tries that failed since the last successful ``LISTEN`` (0 right
    after a session was lost). 0 gives 0 (reconnect at once), then 0.1, 0.2, 0.4 ...
    capped at :data:`RETRY_MAX_S`. Raises ValueError for a negative count.

    Implements: docs/design.md#execution.
    """
    if failures < 0:
        raise ValueError(f"failures must be >= 0, got {failures!r}")
    if failures == 0:
        return 0.0
    return min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** min(failures - 1, 32))


class ListenerHealth:
    """Whether idle workers can count on wake-ups from the listener.

    :attr:`healthy` is True until :func:`listen` marks it down (before its first
    ``LISTEN``, and whenever the session is lost), and True again after each
    successful ``LISTEN``. Where no listener runs (not PostgreSQL, ``NOTIFY`` off)
    it stays True: polling at the adaptive sleep is the design there. Reading it is
    lock-free (an :class:`threading.Event` flag), cheap enough for every idle cycle.

    Implements: docs/design.md#execution.
    """

    def __init__(self) -> None:
        self._down = threading.Event()

    @property
    def healthy(self) -> bool:
        """True unless a listener that should be listening is not."""
        return not self._down.is_set()

    def mark_down(self) -> None:
        """Record that wake-ups may be missed (no ``LISTEN`` session up)."""
        self._down.set()

    def mark_up(self) -> None:
        """Record that a ``LISTEN`` session is up."""
        self._down.clear()


def listen(
    using: str,
    on_wakeup: Callable[[str], None],
    stop: threading.Event,
    health: ListenerHealth | None = None,
) -> None:
    """Call ``on_wakeup(queue)`` for each wake-up on ``using`` until ``stop`` is set.

    On PostgreSQL (psycopg 3) a dedicated session connection, outside Django's
    pool, runs ``LISTEN`` on :data:`CHANNEL`. After each successful ``LISTEN`` it
    calls ``on_wakeup("")`` (every queue: a catch-up poll for every idle worker).
    A lost session marks ``health`` down, calls ``on_wakeup("")`` so sleeping
    workers go over to polling at ``MIN_SLEEP_MS``, and is reopened at once, then
    after the pauses of :func:`retry_pause_s` (100 ms doubling to 5 s) while tries
    fail; the pause resets after a success. Elsewhere, or with
    ``JOBQUEUE["NOTIFY"]`` off, it returns at once with ``health`` left healthy:
    the in-process :data:`local_event` and polling still find every job. Behind a
    transaction pooler, or with psycopg 2, ``health`` stays down (idle workers
    poll at ``MIN_SLEEP_MS``). It blocks: run it in its own thread. It raises
    nothing: failures are logged and retried, each a line with the error's first
    line; the first of a run of failures also logs its traceback, unless it is the
    driver's ``OperationalError`` (a connection that failed or was lost).

    Implements: docs/design.md#execution.
    """
    health = health if health is not None else ListenerHealth()
    wrapper = connections[using]
    if wrapper.vendor != "postgresql" or not get_config().NOTIFY:
        return
    health.mark_down()  # until the first LISTEN: a job enqueued now is polled for
    if not pooler.listen_supported(using):  # a transaction pooler: poll instead
        pooler.poll_instead(on_wakeup, stop)
        return
    failures = 0
    while not stop.is_set():
        raw = None
        try:
            raw = wrapper.get_new_connection(wrapper.get_connection_params())
            if not hasattr(raw, "notifies") or not callable(raw.notifies):
                logger.info("LISTEN needs psycopg 3; idle workers poll instead")
                return
            raw.autocommit = True
            raw.execute(f'LISTEN "{CHANNEL}"')
            if failures:
                logger.info("LISTEN connection back after %d failed tries", failures)
            failures = 0
            health.mark_up()
            logger.debug("listening on channel %s", CHANNEL)
            on_wakeup("")  # catch up: a wake-up sent while nobody listened is lost
            while not stop.is_set():
                for notify in raw.notifies(timeout=0.5, stop_after=1):
                    on_wakeup(notify.payload)
        except Exception as exc:  # a lost listener only slows wake-ups; polling goes on
            if health.healthy:
                health.mark_down()
                on_wakeup("")  # sleeping workers now poll at MIN_SLEEP_MS
            pause = retry_pause_s(failures)
            # The driver's OperationalError is a connection that failed or was lost
            # (refused, ended, refused a login): its first line says why; another
            # error's first traceback is worth reading.
            driver = getattr(wrapper, "Database", None)
            lost = driver is not None and isinstance(exc, driver.OperationalError)
            logger.warning(
                "LISTEN connection failed; idle workers poll at their shortest sleep; "
                "retrying in %.1f s (%s)",
                pause,
                in_one_line(exc),
                exc_info=failures == 0 and not lost,
            )
            failures += 1
            stop.wait(pause)
        finally:
            if raw is not None:
                try:
                    raw.close()
                except Exception:  # noqa: S110 (already broken)
                    pass

"""Queue pause and resume.

Policy
------
A queue is paused while a :class:`~django_jobqueue.models.QueuePause` row names it.
Workers stop claiming its jobs; enqueueing into it still works. The claim statement
reads the pause rows itself (``django_jobqueue.storage.claim``), so once
:func:`pause_queue` has committed, no worker of any process claims a job of the queue
until :func:`resume_queue`: a job enqueued a moment after the pause waits.

:func:`paused_queues` is a process-local cache of the paused set per database alias,
refreshed at most every :data:`CACHE_SECONDS` (0.5 s): a claim whose queues are all
paused by it sends no statement at all, and ``jobqueue status``, the console and
the metrics read it. :func:`pause_queue` and :func:`resume_queue` refresh this
process's cache at once.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import IntegrityError, transaction

from ..core.exceptions import InvalidOption
from ..models import QueuePause

__all__ = ["CACHE_SECONDS", "clear_cache", "pause_queue", "paused_queues", "resume_queue"]

logger = logging.getLogger(__name__)

#: Longest time (s) a process's cached set of paused queues is used without a read.
CACHE_SECONDS = 0.5

_lock = threading.Lock()
_cache: dict[str, tuple[float, frozenset[str]]] = {}


def _check_queue(queue: object) -> str:
    if not isinstance(queue, str) or not 0 < len(queue) <= 100:
        raise InvalidOption(f"A queue name must be 1 to 100 characters: got {queue!r}.")
    return queue


def clear_cache() -> None:
    """Forget every cached paused set; the next :func:`paused_queues` reads the table."""
    with _lock:
        _cache.clear()


def pause_queue(using: str, queue: str, *, by: str = "") -> bool:
    """Pause ``queue``: workers claim none of its jobs from within a second on.

    Parameters
    ----------
    using
        Database alias of the jobs.
    queue
        The queue name (1 to 100 characters; it need not have jobs yet).
    by
        Who paused it, shown by the console (a user name, ``cli``, a token's name).

    Returns
    -------
    bool
        True if it was running and is now paused; False if it was already paused.

    Raises
    ------
    InvalidOption
        If ``queue`` is not a queue name.
    """
    _check_queue(queue)
    try:
        with transaction.atomic(using=using):
            QueuePause.objects.using(using).create(queue=queue, paused_by=by[:200])
    except IntegrityError:
        paused = False
    else:
        paused = True
        logger.info("queue paused queue=%s by=%s", queue, by)
    clear_cache()
    return paused


def resume_queue(using: str, queue: str) -> bool:
    """Resume ``queue``; return True if it was paused.

    Raises
    ------
    InvalidOption
        If ``queue`` is not a queue name.
    """
    _check_queue(queue)
    deleted, _ = QueuePause.objects.using(using).filter(queue=queue).delete()
    clear_cache()
    if deleted:
        logger.info("queue resumed queue=%s", queue)
    return bool(deleted)


def paused_queues(using: str, *, max_age_s: float = CACHE_SECONDS) -> frozenset[str]:
    """Return the names of the paused queues, read at most every ``max_age_s`` seconds.

    Parameters
    ----------
    using
        Database alias of the jobs.
    max_age_s
        How old (s) the cached set may be; 0 reads the table now.

    Returns
    -------
    frozenset of str
        The paused queue names, as of at most ``max_age_s`` ago. A claim skips the
        named queues in it, and its statement leaves out the queues paused by then.
    """
    now = time.monotonic()
    with _lock:
        cached = _cache.get(using)
    if cached is not None and now - cached[0] < max_age_s:
        return cached[1]
    names = frozenset(QueuePause.objects.using(using).values_list("queue", flat=True))
    with _lock:
        _cache[using] = (now, names)
    return names

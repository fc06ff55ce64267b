"""The worker registry (the job statistics are in :mod:`.jobstats`).

Policy
------
- **Registry.** A worker process registers a :class:`~django_jobqueue.models.Worker`
  row when it starts (:func:`register_worker`) and refreshes it on each heartbeat
  (:func:`beat_worker`, an upsert: a row pruned meanwhile comes back). It is *live*
  while ``last_seen_at`` is within three heartbeats (``3 * HEARTBEAT_MS``) of the
  database clock, *gone* after that, and deleted by :func:`prune_workers` once
  unseen for ``older_than``.
- **Statistics** live in :mod:`django_jobqueue.store.jobstats` (one path for every
  worker); their names are re-exported here for existing imports.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Q

from ..core.conf import get_config
from ..core.dbclock import Now
from ..core.exceptions import InvalidOption
from ..models import Worker
from .jobstats import (
    BUCKET_FIELDS,
    FLUSH_S,
    OUTCOMES,
    ProcessStats,
    StatsBuffer,
    bucket_of,
    count_deduplicated,
    process_stats,
    prune_stats,
)

__all__ = [
    "BUCKET_FIELDS",
    "CREATE_STATS_FLUSH_S",
    "OUTCOMES",
    "CreateStats",
    "StatsBuffer",
    "beat_worker",
    "bucket_of",
    "count_deduplicated",
    "create_stats",
    "gone_workers",
    "live_workers",
    "prune_stats",
    "prune_workers",
    "register_worker",
    "stop_worker",
]

logger = logging.getLogger(__name__)

#: The process's statistics under their former names (:mod:`.jobstats`).
CreateStats = ProcessStats
create_stats = process_stats
CREATE_STATS_FLUSH_S = FLUSH_S


def _heartbeat_window() -> timedelta:
    return timedelta(milliseconds=3 * get_config().HEARTBEAT_MS)


def register_worker(
    using: str,
    name: str,
    *,
    kind: str = "runworkers",
    host: str = "",
    pid: int | None = None,
    queues: Iterable[str] = (),
    job_types: Iterable[str] = (),
    languages: Iterable[str] = (),
    concurrency: int = 1,
    version: str = "",
) -> Worker:
    """Create or restart the registry row of worker ``name``; return it.

    Parameters
    ----------
    using
        Database alias of the jobs.
    name
        The worker's unique name (``host:pid`` for a foreman), 1 to 200 characters.
    kind
        ``runworkers`` or ``gateway``.
    host, pid, queues, job_types, languages, concurrency, version
        What the row shows; ``queues`` empty means every queue.

    Returns
    -------
    Worker
        The row, its ``started_at`` and ``last_seen_at`` now (database clock) and its
        counters (busy, done, failed) back at zero.

    Raises
    ------
    InvalidOption
        If ``name`` is empty or longer than 200 characters, or ``concurrency`` < 1.

    Implements: docs/design.md#execution.
    """
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise InvalidOption(f"A worker name must be 1 to 200 characters: got {name!r}.")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidOption(f"A worker's concurrency must be an integer >= 1: got {concurrency!r}.")
    values: dict[str, Any] = {
        "kind": kind,
        "host": host,
        "pid": pid,
        "queues": sorted(queues),
        "job_types": sorted(job_types),
        "languages": sorted(languages),
        "concurrency": concurrency,
        "version": version,
        "started_at": Now(),
        "last_seen_at": Now(),
        "busy": 0,
        "done": 0,
        "failed": 0,
        "stopped_at": None,
    }
    workers = Worker.objects.using(using)
    with transaction.atomic(using=using):
        if not workers.filter(name=name).update(**values):
            try:
                with transaction.atomic(using=using):
                    workers.create(name=name, **values)
            except DatabaseError:  # another process registered the same name first
                workers.filter(name=name).update(**values)
    logger.info(
        "worker registered name=%s kind=%s queues=%s",
        name,
        kind,
        ",".join(values["queues"]) or "*",  # as the foreman's start line: * is every queue
    )
    return workers.get(name=name)


def beat_worker(using: str, name: str, *, busy: int, done: int, failed: int) -> bool:
    """Mark worker ``name`` seen now with its current counters (a heartbeat).

    Parameters
    ----------
    using
        Database alias of the jobs.
    name
        The name given to :func:`register_worker`.
    busy
        Slots running a job now.
    done, failed
        Jobs done and failed since the worker started (totals, not increments).

    Returns
    -------
    bool
        True if the row existed; False if it had been pruned and was made again (an
        upsert: the worker shows as live either way).

    Implements: docs/design.md#execution.
    """
    values = {"last_seen_at": Now(), "busy": busy, "done": done, "failed": failed}
    workers = Worker.objects.using(using)
    if workers.filter(name=name).update(**values):
        return True
    try:
        with transaction.atomic(using=using):
            workers.create(name=name, **values)
    except DatabaseError:  # made meanwhile by a concurrent beat
        workers.filter(name=name).update(**values)
    return False


def stop_worker(
    using: str,
    name: str,
    *,
    done: int | None = None,
    failed: int | None = None,
    kind: str | None = None,
) -> bool:
    """Mark worker ``name`` stopped now (a clean stop), with its final counters when
    given (a gateway worker's are counted as it reports, so it gives none).

    A stopped worker is gone at once, not three heartbeats later. ``kind``: only a
    row of that kind. Returns False if no such row is running (pruned, or already
    stopped: nothing is written then).
    """
    values: dict[str, Any] = {"last_seen_at": Now(), "stopped_at": Now(), "busy": 0}
    if done is not None:
        values["done"] = done
    if failed is not None:
        values["failed"] = failed
    rows = Worker.objects.using(using).filter(name=name, stopped_at__isnull=True)
    if kind is not None:
        rows = rows.filter(kind=kind)
    return bool(rows.update(**values))


def live_workers(using: str) -> list[Worker]:
    """Return the workers seen within three heartbeats (database clock) and not stopped.

    Implements: docs/design.md#execution.
    """
    since = Now() - _heartbeat_window()
    live = Worker.objects.using(using).filter(last_seen_at__gte=since, stopped_at__isnull=True)
    return list(live.order_by("name"))


def gone_workers(using: str, *, limit: int = 100) -> list[Worker]:
    """Return up to ``limit`` workers stopped or unseen for three heartbeats, last seen first."""
    since = Now() - _heartbeat_window()
    gone = Worker.objects.using(using).filter(
        Q(last_seen_at__lt=since) | Q(stopped_at__isnull=False)
    )
    return list(gone.order_by("-last_seen_at")[:limit])


def prune_workers(using: str, *, older_than: timedelta = timedelta(days=1)) -> int:
    """Delete workers unseen for ``older_than`` (database clock); return how many."""
    deleted, _ = Worker.objects.using(using).filter(last_seen_at__lt=Now() - older_than).delete()
    return deleted

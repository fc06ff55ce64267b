"""Deleting many jobs in short batches that each start where the last one ended.

A prune of millions of rows (docs/horizon.md, "Prune at scale") must neither hold a
long lock nor slow down with every batch. Each batch here is two short statements,
each its own transaction outside a caller's: a ``SELECT`` of the next ``batch_size``
primary keys in key order, after the last key the batch before saw (a keyset, never
an ``OFFSET`` and never a fresh start), and a ``DELETE`` of those keys that still
match the jobs' filter (a row changed in between, e.g. retried, stays).

Starting each batch at the last key is what keeps a long prune linear: a scan that
started from the beginning of the index every batch would walk the entries of every
row deleted so far (dead until vacuum reclaims them), so the n-th batch would cost n
times the first.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db.models import Q, QuerySet

from ..models import Job
from . import locks

__all__ = ["delete_in_batches"]

logger = logging.getLogger(__name__)


def delete_in_batches(
    jobs: QuerySet[Job],
    batch_size: int,
    *,
    key: str | None = None,
    pause_ms: int = 0,
) -> int:
    """Delete ``jobs`` at most ``batch_size`` rows per statement; return how many went.

    Parameters
    ----------
    jobs
        The jobs to delete (any filter); evaluated again by every batch's DELETE.
    batch_size
        Most primary keys per DELETE statement, >= 1 (checked by the caller).
    key
        A non-null column that an index of ``jobs``' filter keeps in order (for
        ``status = 'done'``, ``finished_at`` of the ``(status, finished_at)`` index):
        the batches walk (key, pk) order, each from the last pair the one before
        saw, so a batch reads only the index range it deletes. None: primary key
        order. Rows whose ``key`` is NULL are not deleted by a keyed walk.
    pause_ms
        Sleep between two batches, ms: spreads a big prune's writes (and the WAL
        that replicas must replay) over time. 0: none.

    Returns
    -------
    int
        Jobs deleted. Outside a caller's transaction each batch commits on its own.
    """
    using = jobs.db
    order = (key, "pk") if key else ("pk",)
    jobs = jobs.order_by()
    if key:
        jobs = jobs.filter(**{f"{key}__isnull": False})
    deleted = 0
    last: tuple[Any, ...] | None = None
    while True:
        page = jobs
        if last is not None and key:
            # (key, pk) > (value, pk): the >= bound is what an index range can use.
            page = page.filter(Q(**{f"{key}__gt": last[0]}) | Q(pk__gt=last[1]))
            page = page.filter(**{f"{key}__gte": last[0]})
        elif last is not None:
            page = page.filter(pk__gt=last[0])
        rows = locks.retry_when_locked(
            using,
            lambda page=page: list(page.order_by(*order).values_list(*order)[:batch_size]),
        )
        if not rows:
            return deleted
        pks = [row[-1] for row in rows]
        count, _by_model = locks.retry_when_locked(
            using,
            lambda: jobs.filter(pk__in=pks).delete(),  # noqa: B023
        )
        deleted += count
        logger.debug("deleted batch=%s total=%s", count, deleted)
        if len(rows) < batch_size:
            return deleted
        last = rows[-1]
        if pause_ms:
            time.sleep(pause_ms / 1000)

"""What ``get`` and ``list`` show (docs/design.md#ids): state words, ``JobView``, ``Page``, cursors.

``list`` orders by creation (oldest first), except ``state="failed"``: latest failure
first. A prefix is matched in the database (``LIKE``, with ``%``, ``_`` and ``\\``
escaped; ``LIKE BINARY`` on MySQL/MariaDB) and checked again in Python on the code
points, which for UTF-8 is the bytes: SQLite's ``LIKE`` ignores ASCII case.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..core.exceptions import InvalidOption
from ..store import states
from ..store.states import FAILED

__all__ = [
    "DEFAULT_PAGE_JOBS",
    "MAX_PAGE_BYTES",
    "MAX_PAGE_JOBS",
    "STATES",
    "JobView",
    "Page",
    "job_view",
    "list_page",
    "state_word",
]

#: The state words (docs/design.md#states): one table, :mod:`django_jobqueue.store.states`.
STATES = states.STATES
#: Page limits (docs/design.md#ids): jobs per page, and bytes of values (JSON).
MAX_PAGE_JOBS = 1_000
DEFAULT_PAGE_JOBS = 100
MAX_PAGE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class JobView:
    """A job as ``get`` and ``list`` show it (docs/design.md#ids)."""

    #: The job's id in its queue (docs/design.md#ids), or None for a job without one.
    id: str | None
    #: The job's value (its JSON payload).
    value: Any
    #: scheduled, waiting, running, failed, done or cancelled.
    state: str
    #: When it runs (waiting, scheduled) or last became due.
    at: datetime
    #: Attempts started so far (0 before the first run).
    attempt: int
    #: The job's public handle.
    jid: str
    queue: str
    job_type: str
    priority: int
    max_retry: int
    #: The handler's return value, once done.
    result: Any
    #: The last failure's message, if any.
    message: str
    #: True once ``cancel`` asked the running job to stop.
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class Page:
    """One page of ``list``: its jobs and an opaque cursor for the next page, or None."""

    #: The jobs of this page, in the list's order.
    jobs: list[JobView]
    #: Pass as ``after=`` to get the following page; None on the last page.
    next: str | None


def state_word(job: Any, now: datetime) -> str:
    """Return the state word (one of :data:`STATES`) for ``job`` at database time ``now``."""
    return states.state_word(job, now)


def job_view(job: Any) -> JobView:
    """Return the :class:`JobView` of a ``Job`` row annotated with ``db_now``."""
    return JobView(
        id=job.job_id,
        value=job.payload,
        state=state_word(job, job.db_now),
        at=job.run_at,
        attempt=job.attempt,
        jid=job.jid,
        queue=job.queue,
        job_type=job.job_type,
        priority=job.priority,
        max_retry=job.max_retry,
        result=job.result,
        message=job.message,
        cancel_requested=job.cancel_requested,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def list_page(
    jobs: QuerySet[Any], *, prefix: str | None, state: str | None, limit: int, after: str | None
) -> Page:
    """Return the page of ``jobs`` (annotated ``db_now``) after cursor ``after``.

    ``prefix``, ``state`` and ``limit`` were checked by ``Queue.list``; ``jobs`` is
    already narrowed to the queue (and job type) and to ``prefix`` in the database.

    Raises
    ------
    InvalidOption
        If ``after`` is not a cursor of a list with this ``state``.
    """
    jobs = _filter_state(jobs, state)
    failed_order = state == FAILED
    key = None if after is None else _decode_cursor(after, failed_order)
    picked: list[Any] = []
    size = 0
    more = False
    for row in _scan(jobs, failed_order, key, limit, prefix):
        if len(picked) == limit:
            more = True
            break
        row_size = len(json.dumps(row.payload).encode("utf-8"))
        if picked and size + row_size > MAX_PAGE_BYTES:
            more = True
            break
        picked.append(row)
        size += row_size
    cursor = _encode_cursor(picked[-1], failed_order) if more else None
    return Page(jobs=[job_view(row) for row in picked], next=cursor)


def _filter_state(jobs: QuerySet[Any], state: str | None) -> QuerySet[Any]:
    return jobs if state is None else jobs.filter(states.state_filter(state))


def _scan(
    jobs: QuerySet[Any], failed_order: bool, key: Any, limit: int, prefix: str | None
) -> Iterator[Any]:
    """Yield ``jobs`` after ``key`` in the list's order, prefix checked on the bytes."""
    batch = limit + 1
    while True:
        rows = jobs
        if failed_order:
            if key is not None:
                finished_at, pk = key
                rows = rows.filter(
                    Q(finished_at__lt=finished_at) | Q(finished_at=finished_at, pk__lt=pk)
                )
            rows = rows.order_by("-finished_at", "-pk")
        else:
            if key is not None:
                rows = rows.filter(pk__gt=key)
            rows = rows.order_by("pk")
        fetched = list(rows[:batch])
        for row in fetched:
            key = (row.finished_at, row.pk) if failed_order else row.pk
            # Code points compare as UTF-8 bytes do; SQLite's LIKE ignores ASCII case.
            if prefix is None or (row.job_id is not None and row.job_id.startswith(prefix)):
                yield row
        if len(fetched) < batch:
            return


def _encode_cursor(row: Any, failed_order: bool) -> str:
    if failed_order:
        payload = {"o": "f", "t": row.finished_at.isoformat(), "k": row.pk}
    else:
        payload = {"o": "c", "k": row.pk}
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, failed_order: bool) -> Any:
    bad = InvalidOption(
        f"after={cursor!r} is not a cursor of this list; pass the next of a page listed "
        "with the same state."
    )
    if not isinstance(cursor, str):
        raise bad
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        pk = data["k"]
        # A pk every database compares (BigAutoField: signed 64 bits).
        if isinstance(pk, bool) or not isinstance(pk, int) or not 0 <= pk < 2**63:
            raise bad
        if failed_order:
            if data["o"] != "f":
                raise bad
            finished_at = parse_datetime(data["t"])
            if finished_at is None or timezone.is_naive(finished_at):
                raise bad
            return finished_at, pk
        if data["o"] != "c":
            raise bad
        return pk
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise bad from exc

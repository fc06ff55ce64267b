"""Bulk creation: many validated jobs in one transaction, under all their locks at once.

:func:`create_many` is the body of :func:`django_jobqueue.enqueue.enqueue_many`. It
keeps the guarantees of one creation (:mod:`django_jobqueue.store.managers`) for a whole
batch:

1. every lock name of the batch (its ids and unique keys) is taken once, in sorted
   order, by one :func:`~django_jobqueue.store.locks.creation_lock` around the batch's
   transaction (the caller's, when open: a savepoint of it);
2. the holders of all the batch's hashes are read in one query per chunk of
   hashes; stale holds are cleared;
3. the jobs are walked in order: a job whose id or key is held, by a live row of
   the table or by an earlier job of the batch, is answered ``deduplicated`` with
   the holder's jid, and takes no row;
4. the others are inserted by multi-row INSERTs
   (:func:`~django_jobqueue.store.rawinsert.insert_rows`), with one wake-up per queue
   that has a due job, sent when the transaction commits.

The unique indexes over (queue, hash) stay the last line: an insert they refuse
(a MySQL creator the locks let through) rolls the batch's savepoint back, and the
batch is made again from step 2.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any

from django.db import DatabaseError, IntegrityError, connections, transaction
from django.db.models import BooleanField, ExpressionWrapper, Q

from .core import prepared
from .core.conf import get_config
from .core.dbclock import Now
from .store import locks
from .store.jobstats import count_deduplicated
from .store.managers import (
    EnqueueResult,
    JobSpec,
    check_transaction,
    hold_hash,
    hold_lock_names,
    id_held,
)
from .store.rawcopy import copy_rows, uses_copy
from .store.rawinsert import Row, insert_rows, new_jids

__all__ = ["STREAM_ROWS", "create_many", "create_streamed"]

logger = logging.getLogger(__name__)

#: Batches made again when the unique index refused an insert the locks let through.
_INTEGRITY_RETRIES = 3
#: Hashes per holder query (SQLite's oldest variable limit is 999).
_HASHES_PER_QUERY = 400
#: Jobs per statement of a streamed batch (:func:`create_streamed`): smaller chunks
#: start the server sooner and cost a statement each (500 against 1,000, batches
#: of 5,000, as measured: 96,000 against 85,000 jobs/s).
STREAM_ROWS = 500


def create_many(specs: Sequence[JobSpec], *, refuse_held_ids: bool = False) -> list[EnqueueResult]:
    """Insert the jobs of ``specs`` in one transaction; answer each, in order.

    Parameters
    ----------
    specs:
        Validated jobs (:func:`~django_jobqueue.enqueue.build_job`), all on one
        database alias.
    refuse_held_ids:
        Refuse the batch, writing nothing, at its first job whose id a job of the
        table holds (the gateway's batch, as ``POST /sdk/jobs`` refuses one),
        instead of answering it ``deduplicated``. Decided under the batch's locks,
        from the same read of the holders as the dedupe.

    Returns
    -------
    list of EnqueueResult
        One per spec, in order: ``enqueued`` with the new jid, or ``deduplicated``
        with the jid of the job holding its id or unique key (a row of the table or
        an earlier job of the batch).

    Raises
    ------
    LockTimeout
        If the creation locks, or SQLite's write lock, were not had in time.
        Nothing is written.
    WrongDatabase
        If the caller's transaction is open on another alias than the jobs'.
    DuplicateJob
        With ``refuse_held_ids``: the first job whose id is held, its ``index`` and
        the ``holder_jid``. Nothing is written.

    Implements: docs/design.md#creation.
    """
    if not specs:
        return []
    using = specs[0].using
    check_transaction(using)
    timeout_ms = get_config().LOCK_TIMEOUT_MS
    results = locks.retry_when_locked(
        using, _create, specs, timeout_ms, refuse_held_ids, timeout_ms=timeout_ms
    )
    if any(result["status"] == "deduplicated" for result in results):
        count_deduplicated(specs, results)  # for the dedupe audit, written in batches
    return results


def create_streamed(specs: Iterable[JobSpec]) -> list[EnqueueResult]:
    """Insert the jobs ``specs`` yields, one transaction, sending each chunk of
    :data:`STREAM_ROWS` as soon as it is had (docs/design.md#bulk-stream).

    ``specs`` is validated as it is read (:func:`django_jobqueue.enqueue.enqueue_many`
    passes a generator): on PostgreSQL with psycopg 3 the inserts go in one pipeline,
    so the server writes a chunk while the next one is validated and built, and
    nothing waits for a statement's answer until the last is sent. The answers and
    the rows are those of :func:`create_many`; a job that :func:`create_many` places
    under the batch's locks (an id or a unique key) or one on another alias rolls
    back what was sent, and the whole batch goes through :func:`create_many`.
    Elsewhere every spec is read first, then :func:`create_many`.

    Returns
    -------
    list of EnqueueResult
        One per spec, in order.

    Raises
    ------
    JobQueueError
        Whatever reading ``specs`` raises (an invalid job): nothing is written, the
        transaction (or the caller's savepoint) is rolled back.
    LockTimeout, WrongDatabase
        As :func:`create_many`; nothing is written.
    """
    chunks = iter(specs)
    seen = list(islice(chunks, STREAM_ROWS))
    if not seen:
        return []
    using = seen[0].using
    conn = connections[using]
    if not prepared.pipelines(conn):
        return create_many([*seen, *chunks])
    check_transaction(using)
    results: list[EnqueueResult] = []
    woken: set[str] = set()
    try:
        with (
            transaction.atomic(using=using),
            conn.wrap_database_errors,
            conn.connection.pipeline(),
        ):
            chunk = list(seen)
            while chunk:
                if any(
                    spec.using != using or spec.job_id is not None or spec.unique_key is not None
                    for spec in chunk
                ):
                    raise _NotPlain
                jids = new_jids(len(chunk))
                wake = [
                    q for q in dict.fromkeys(s.queue for s in chunk if s.due_now) if q not in woken
                ]
                woken.update(wake)
                insert_rows(
                    using,
                    [Row(s, jid) for s, jid in zip(chunk, jids, strict=True)],
                    wake_queues=wake,
                )
                results.extend([EnqueueResult(status="enqueued", jid=jid) for jid in jids])
                chunk = list(islice(chunks, STREAM_ROWS))
                seen.extend(chunk)
    except _NotPlain:
        return create_many([*seen, *chunks])
    except DatabaseError as exc:
        if not prepared.statement_lost(exc):
            raise
        # A prepared insert the session no longer had (a pooler's reset, a DISCARD
        # ALL psycopg did not see): in a pipeline it cannot be run again where it
        # failed. What was sent is rolled back; create_many runs its statements one
        # at a time, and the prepared cursor repeats a lost one (docs/design.md#bulk-stream).
        return create_many([*seen, *chunks])
    return results


class _NotPlain(Exception):  # noqa: N818 - control flow, never leaves this module
    """A streamed batch met a job that needs :func:`create_many`'s locks."""


def _create(
    specs: Sequence[JobSpec], timeout_ms: int, refuse_held_ids: bool
) -> list[EnqueueResult]:
    using = specs[0].using
    names = sorted(
        {
            name
            for spec in specs
            for name in hold_lock_names(spec.queue, job_id=spec.job_id, unique_key=spec.unique_key)
        }
    )
    for attempt in range(1, _INTEGRITY_RETRIES + 1):
        try:
            if names:
                try:
                    with locks.creation_lock(using, names, timeout_ms=timeout_ms):
                        results = _create_locked(specs, refuse_held_ids)
                        if not any(result.status == "enqueued" for result in results):
                            # All deduplicated: roll the savepoint back, which frees a
                            # PostgreSQL lock now, not when the caller's transaction ends.
                            raise _NothingWritten(results)
                        return results
                except _NothingWritten as nothing:
                    return nothing.results
            with transaction.atomic(using=using):
                return _create_locked(specs, refuse_held_ids)
        except IntegrityError:
            if attempt == _INTEGRITY_RETRIES or connections[using].needs_rollback:
                raise
            logger.info("a hold was taken meanwhile, making the batch again (%s jobs)", len(specs))
    raise AssertionError("unreachable")  # pragma: no cover


class _NothingWritten(Exception):  # noqa: N818 - control flow, never leaves this module
    """A batch that inserted nothing: leave the lock's savepoint by a rollback."""

    def __init__(self, results: list[EnqueueResult]) -> None:
        super().__init__()
        self.results = results


def _create_locked(specs: Sequence[JobSpec], refuse_held_ids: bool) -> list[EnqueueResult]:
    using = specs[0].using
    if not any(spec.job_id is not None or spec.unique_key is not None for spec in specs):
        # No id, no key: no holder to look for, every job goes in.
        all_jids = new_jids(len(specs))
        _insert(
            using,
            [Row(spec, jid) for spec, jid in zip(specs, all_jids, strict=True)],
            [spec.queue for spec in specs if spec.due_now],
        )
        return [EnqueueResult(status="enqueued", jid=jid) for jid in all_jids]
    live = _live_holders(using, specs)
    if refuse_held_ids:
        _refuse_held_ids(specs, live)
    results: list[EnqueueResult] = []
    rows: list[Row] = []
    jids = iter(new_jids(len(specs)))
    for spec in specs:
        holds = _holds(spec)
        holder = next((live[hold] for hold in holds if hold in live), None)
        if holder is not None:
            results.append(EnqueueResult(status="deduplicated", jid=holder))
            continue
        jid = next(jids)
        for hold in holds:
            live[hold] = jid  # later jobs of the batch with this id or key: deduplicated
        rows.append(Row(spec, jid))
        results.append(EnqueueResult(status="enqueued", jid=jid))
    _insert(using, rows, [row.spec.queue for row in rows if row.spec.due_now])
    return results


def _insert(using: str, rows: list[Row], wake_queues: list[str]) -> None:
    """Insert ``rows`` the faster way for their number (docs/design.md#bulk-copy): by
    ``COPY`` on PostgreSQL from :data:`~django_jobqueue.store.rawcopy.COPY_MIN_ROWS`
    rows on (as measured, no size), else by multi-row INSERTs."""
    if uses_copy(using, len(rows)):
        copy_rows(using, rows, wake_queues=wake_queues)
    else:
        insert_rows(using, rows, wake_queues=wake_queues)


def _refuse_held_ids(specs: Sequence[JobSpec], live: dict[tuple[str, str, str], str]) -> None:
    """Raise DuplicateJob for the first job whose id a job of the table holds
    (``live``: the table's live holds, before any job of the batch is placed)."""
    for index, spec in enumerate(specs):
        if spec.job_id is None:
            continue
        holder = live.get(("id", spec.queue, hold_hash(spec.job_id)))
        if holder is not None:
            raise id_held(spec, holder, index)


def _holds(spec: JobSpec) -> list[tuple[str, str, str]]:
    """The holds of a job: ("id" | "uk", queue, hash), the id's first."""
    holds = []
    if spec.job_id is not None:
        holds.append(("id", spec.queue, hold_hash(spec.job_id)))
    if spec.unique_key is not None:
        holds.append(("uk", spec.queue, hold_hash(spec.unique_key)))
    return holds


def _live_holders(using: str, specs: Sequence[JobSpec]) -> dict[tuple[str, str, str], str]:
    """Return the jid of each live hold of the batch's ids and keys; clear the stale ones."""
    from .models import Job  # deferred: models need the app registry

    wanted = {hold for spec in specs for hold in _holds(spec)}
    if not wanted:
        return {}
    hashes = sorted({hold[2] for hold in wanted})
    queues = sorted({hold[1] for hold in wanted})
    id_live = Q(id_held_until__isnull=True) | Q(id_held_until__gt=Now())
    key_live = Q(unique_expires_at__gt=Now())
    live: dict[tuple[str, str, str], str] = {}
    stale_ids: list[int] = []
    stale_keys: list[int] = []
    for start in range(0, len(hashes), _HASHES_PER_QUERY):
        chunk = hashes[start : start + _HASHES_PER_QUERY]
        rows = (
            Job.objects.using(using)
            .filter(Q(job_id_hash__in=chunk) | Q(unique_key_hash__in=chunk), queue__in=queues)
            .annotate(
                id_live=ExpressionWrapper(id_live, output_field=BooleanField()),
                key_live=ExpressionWrapper(key_live, output_field=BooleanField()),
            )
            .values_list(
                "pk", "jid", "queue", "job_id_hash", "unique_key_hash", "id_live", "key_live"
            )
        )
        for pk, jid, queue, id_hash, key_hash, id_is_live, key_is_live in rows:
            _note(live, stale_ids, wanted, ("id", queue, id_hash), pk, jid, id_is_live)
            _note(live, stale_keys, wanted, ("uk", queue, key_hash), pk, jid, key_is_live)
    _clear(using, stale_ids, "job_id_hash", Q(id_held_until__lte=Now()))
    _clear(using, stale_keys, "unique_key_hash", Q(unique_expires_at__lte=Now()))
    return live


def _note(
    live: dict[tuple[str, str, str], str],
    stale: list[int],
    wanted: set[tuple[str, str, str]],
    hold: tuple[str, str, Any],
    pk: int,
    jid: str,
    is_live: Any,
) -> None:
    if hold[2] is None or hold not in wanted:
        return
    if is_live:
        # An id holder answers before a key holder: the id's hold is noted first.
        live.setdefault(hold, jid)
    else:
        stale.append(pk)


def _clear(using: str, pks: list[int], column: str, still_stale: Q) -> None:
    from .models import Job  # deferred: models need the app registry

    for start in range(0, len(pks), _HASHES_PER_QUERY):
        Job.objects.using(using).filter(
            still_stale, pk__in=pks[start : start + _HASHES_PER_QUERY]
        ).update(**{column: None, "updated_at": Now()})

# ruff: noqa: S608 (every interpolated piece is a quoted identifier or %s placeholders)
"""Done jobs that are not kept: ``JOBQUEUE["RETENTION"] = 0`` (docs/design.md#retention).

With a retention of zero a done job's row is deleted by the worker's batched
completion instead of updated to ``done``: the row nothing reads again is not
written again. A delete writes no new row version and no index entry, where the
``done`` update wrote a version with an entry in five indexes; on PostgreSQL that
was about a fifth of the server's CPU per no-op job (docs/design.md#retention).

A job is deleted only when nothing needs its row after its end (:func:`deletable`):
no result to read, no id held past the end (``DEDUPE``), no unique key held after
it (``while_locked``), no batch, workflow or dependent, not a batch's callback. The
others are written ``done`` as with any retention, and ``jobqueue prune`` deletes
them later. Job statistics (``JobStat``) count every done job either way: the
worker counts them as it stores them.

The delete has the ``done`` update's guards: the row is still ``processing`` under
the job's own lease token, no rerun was asked, and no dependent was enqueued while
it ran (``awaited = false``); a job the delete did not remove goes down the update
path, which then finds what changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import connections

from .core import prepared
from .core.conf import get_config
from .core.origin import BATCH_CALLBACK
from .models import Job, JobStatus
from .storage_sql import _mysql_transaction, lock_owned, owned_where
from .store import unique
from .store.pgarrays import bigint_array, text_array

__all__ = ["deletable", "delete_done_rows", "keeps_done"]


def keeps_done() -> bool:
    """Whether done jobs are kept (``JOBQUEUE["RETENTION"]`` above zero)."""
    return get_config().RETENTION > timedelta(0)


def deletable(job: Job, result: Any, dedupe: timedelta | None) -> bool:
    """Whether ``job``'s row may go at its end (``done`` with ``result``; ``dedupe``:
    how long its id, if it holds one, stays held after it, None or zero: freed at
    the end).

    The caller has already set linked jobs (a batch's, a workflow's, an awaited
    one's) apart; this checks the copy's own holds.
    """
    if result is not None or (dedupe and job.job_id_hash is not None):
        return False  # a result to read, or an id held past the end (none: no id)
    if job.origin.startswith(BATCH_CALLBACK):
        # A batch's callback: the repair pass makes again one whose row is gone
        # within REPAIR_WINDOW (docs/workflows.md "Repair").
        return False
    return job.unique_key_hash is None or job.unique_mode == unique.UNTIL_EXECUTED


def delete_done_rows(using: str, jobs: Sequence[Job]) -> set[int]:
    """Delete the rows of ``jobs``, each finished ``done`` and still owned; return the
    pks deleted.

    Each row goes only while it is ``processing`` under the job's own lease token,
    with no rerun asked and ``awaited`` false; a job missing from the answer was not
    deleted (lease lost, a rerun, a dependent enqueued while it ran). One statement
    on PostgreSQL and SQLite; on MySQL/MariaDB the rows are locked by the primary
    key in pk order first (docs/workflows.md "Lock order"), then deleted by the
    primary key too, in one transaction. Raises the database's errors.
    """
    if not jobs:
        return set()
    conn = connections[using]
    table = conn.ops.quote_name(Job._meta.db_table)
    if conn.vendor == "postgresql":
        sql = (
            f"DELETE FROM {table} AS j USING ROWS FROM (unnest(%s::bigint[]), "
            "unnest(%s::text[])) AS u(id, token) WHERE j.id = u.id AND j.status = %s "
            "AND j.rerun = false AND j.awaited = false AND j.lease_token = u.token "
            "RETURNING j.id"
        )
        params: list[Any] = [
            bigint_array([j.pk for j in jobs]),
            text_array([j.lease_token for j in jobs]),
        ]
        with prepared.cursor(conn) as cursor:  # the same text every flush
            cursor.execute(sql, [*params, JobStatus.PROCESSING])
            return {row[0] for row in cursor.fetchall()}
    where, params = owned_where(sorted(jobs, key=lambda job: job.pk), plain=True)
    if conn.vendor == "mysql":
        with _mysql_transaction(using), conn.cursor() as cursor:
            owned = lock_owned(cursor, table, where, params)
            if owned:
                # By the primary key, as the ``done`` UPDATE is: a plain DELETE whose
                # list is a fair share of the table (16 of 40 rows, 600 of 3,000) is
                # planned as a full scan, which waits for the rows other foremen's
                # batches hold while it holds its own: two such deletes deadlock
                # (1213). The hint leaves a scan only where InnoDB's estimate says the
                # table is about empty; that rarer deadlock is retried, and a batch
                # failing again is deleted one job at a time (worker/completer.py).
                mine = ", ".join(["%s"] * len(owned))
                cursor.execute(
                    f"DELETE j FROM {table} AS j FORCE INDEX (PRIMARY) WHERE j.id IN ({mine})",
                    sorted(owned),
                )
        return owned
    with conn.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} {where} RETURNING id", params)
        return {row[0] for row in cursor.fetchall()}

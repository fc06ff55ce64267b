"""The one call each terminal write of a job makes into batches and workflows.

:mod:`django_jobqueue.storage` (``done``, dead letters, ``cancelled``),
:mod:`django_jobqueue.reaping` (a lease expired for good) and
:mod:`django_jobqueue.maintenance` (an operator's cancel and retry) write a job's
end through these, so :func:`~django_jobqueue.flows.endings.ended` runs in the
same transaction as the write (docs/workflows.md "Guarantees").

The plain path stays as it was: a job whose own columns say it has no batch, no
workflow and no dependent (:func:`~django_jobqueue.flows.endings.linked`) is
written by the same single guarded ``UPDATE``, with one more guard,
``awaited = false``. That guard is what makes a dependent enqueued while its
upstream ran safe: the enqueue sets ``awaited`` on the upstream row under its
lock, so the worker's end write, made from a copy read before, updates nothing
and is made again here, on the linked path. Only a write that updated nothing
(a lost lease, a rerun, or that race) pays the one more read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet

from .. import storage_retention, storage_sql
from ..models import Job, JobStatus
from .endings import CANCELLED, Ended, ended, ended_of, linked, outcome_of
from .reopen import reopen

__all__ = ["cancel_waiting", "complete_rows", "restart_dead", "write_end"]

#: Jobs per IN list.
_CHUNK = 500


def write_end(rows: QuerySet[Job], job: Job, fields: dict[str, Any]) -> int:
    """Write ``fields`` (an attempt's outcome) to ``rows``, ``job``'s guarded row; return
    the rows updated (0 or 1).

    A terminal status (``done``, a dead letter, ``cancelled``) of a linked job is
    written in one transaction with its :func:`~.endings.ended`; any other write
    (a retry) is the plain ``UPDATE``. A plain job's terminal write is guarded by
    ``awaited = false`` (see the module's docstring). Raises the database's errors.
    """
    status = fields.get("status")
    if status is None or outcome_of(status) is None:
        return int(rows.update(**fields))
    if not linked(job):
        updated = int(rows.filter(awaited=False).update(**fields))
        if updated or not rows.filter(awaited=True).exists():
            return updated
        job.awaited = True  # a dependent was enqueued while it ran
    using = rows.db
    with transaction.atomic(using=using):
        updated = int(rows.update(**fields))
        if updated:
            ended(using, [ended_of(job, status)])
    return updated


def complete_rows(using: str, items: Sequence[tuple[Job, Any, timedelta | None]]) -> set[int]:
    """:func:`storage_sql.complete_rows` of many jobs' ``done``, with their ends.

    The plain jobs are written as before, guarded by ``awaited = false``; the linked
    ones by the same statement in a transaction with their :func:`~.endings.ended`
    (their batches' counts grow by one ``UPDATE`` per batch). With a retention of
    zero, the plain jobs whose rows nothing needs are deleted instead
    (:mod:`django_jobqueue.storage_retention`). Returns the pks stored; a job not
    stored goes through ``storage.complete`` alone, as before.
    """
    # In pk order: the rows are locked in the order written, and an enqueue with
    # ``after`` locks its upstream rows in pk order (docs/workflows.md "Lock order").
    ordered = sorted(items, key=lambda item: item[0].pk)
    plain = [item for item in ordered if not linked(item[0])]
    tied = [item for item in ordered if linked(item[0])]
    stored: set[int] = set()
    if plain and not storage_retention.keeps_done():
        gone = [item for item in plain if storage_retention.deletable(*item)]
        stored |= storage_retention.delete_done_rows(using, [job for job, _r, _d in gone])
        plain = [item for item in plain if item[0].pk not in stored]
    if plain:
        stored |= storage_sql.complete_rows(using, plain, plain=True)
    if tied:
        with transaction.atomic(using=using):
            done = storage_sql.complete_rows(using, tied)
            ended(using, [ended_of(job, JobStatus.DONE) for job, _r, _d in tied if job.pk in done])
        stored |= done
    return stored


def cancel_waiting(jobs: QuerySet[Job], fields: dict[str, Any]) -> int:
    """Cancel the waiting and blocked jobs among ``jobs`` with ``fields``; return how many.

    The plain ones by one ``UPDATE`` as before; the linked ones (a batch's, a
    workflow's, a dependent's upstream) under their row locks, in one transaction
    with their ends, :data:`_CHUNK` at a time. A blocked job is cancelled too (it
    is waiting for its upstream jobs, and an operator's cancel ends it).
    """
    using = jobs.db
    waiting = Q(waiting=True) | Q(status=JobStatus.BLOCKED)
    tied = Q(batch_id__isnull=False) | Q(workflow_id__isnull=False) | Q(awaited=True)
    cancelled = int(jobs.filter(waiting).exclude(tied).update(**fields))
    last = 0
    while True:
        with transaction.atomic(using=using):
            rows = list(
                jobs.filter(waiting, tied, pk__gt=last)
                .order_by("pk")
                .select_for_update()
                .values_list("pk", "batch_id", "workflow_id", "awaited")[:_CHUNK]
            )
            if not rows:
                return cancelled
            pks = [row[0] for row in rows]
            cancelled += int(Job.objects.using(using).filter(waiting, pk__in=pks).update(**fields))
            ended(using, [Ended(pk, b, w, bool(a), CANCELLED) for pk, b, w, a in rows])
            last = pks[-1]


def restart_dead(jobs: QuerySet[Job], fields: dict[str, Any]) -> int:
    """Start the dead letters among ``jobs`` again with ``fields``; return how many.

    A dead letter of a batch or a workflow, or one others waited for, is reopened
    in the same transaction (:func:`~.reopen.reopen`): its count moves back from
    ``failed`` to pending, and the dependents its death cancelled or skipped wait
    for it again, so a retried step resumes its workflow (docs/workflows.md
    "Retrying a failed step").
    """
    from ..models import DEAD_STATUSES

    using = jobs.db
    dead = jobs.filter(status__in=DEAD_STATUSES)
    tied = Q(batch_id__isnull=False) | Q(workflow_id__isnull=False) | Q(awaited=True)
    restarted = int(dead.exclude(tied).update(**fields))
    last = 0
    while True:
        with transaction.atomic(using=using):
            rows = list(
                dead.filter(tied, pk__gt=last)
                .order_by("pk")
                .select_for_update()
                .values_list("pk", "batch_id", "workflow_id", "awaited")[:_CHUNK]
            )
            if not rows:
                return restarted
            pks = [row[0] for row in rows]
            restarted += int(
                Job.objects.using(using)
                .filter(pk__in=pks, status__in=DEAD_STATUSES)
                .update(**fields)
            )
            reopen(using, [Ended(pk, b, w, bool(a), "failed") for pk, b, w, a in rows])
            last = pks[-1]

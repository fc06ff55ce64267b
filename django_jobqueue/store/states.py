"""The one table of state words: what people read for each stored status (docs/design.md#states).

A job stores one of eight statuses (:class:`~django_jobqueue.models.JobStatus`); people
read one of seven state words, the public words of the id verbs (``Queue.list(state=...)``)
and of the gateway's ``state`` field:

==============  ======================================================
stored status   state word
==============  ======================================================
``init``        ``scheduled`` while ``run_at`` is in the future, else ``waiting``
``retry``       ``scheduled`` while ``run_at`` is in the future, else ``waiting``
``processing``  ``running``
``error``       ``failed`` (a dead letter)
``max_retry``   ``failed`` (a dead letter)
``done``        ``done``
``cancelled``   ``cancelled``
==============  ======================================================

The console, the admin and the CLI show the word, and the stored status beside it
where the two differ: ``failed (max_retry)``, ``waiting (retry)``. Stored values and
the gateway's JSON field values never change here; this module only names them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F, Q
from django.db.models.lookups import Exact

from ..core.dbclock import Now
from ..models import DEAD_STATUSES, WAITING_STATUSES, JobStatus

__all__ = [
    "BLOCKED",
    "CANCELLED",
    "DONE",
    "FAILED",
    "RUNNING",
    "SCHEDULED",
    "STATES",
    "STATE_OF_STATUS",
    "WAITING",
    "is_waiting",
    "state_filter",
    "state_label",
    "state_word",
    "status_filter",
    "status_label",
    "waiting_rows",
]

#: The state words, in the order a job lives through them.
SCHEDULED, WAITING, RUNNING, FAILED, DONE, CANCELLED = (
    "scheduled",
    "waiting",
    "running",
    "failed",
    "done",
    "cancelled",
)
#: A job waiting for its upstream jobs (docs/workflows.md): before it is waiting.
BLOCKED = "blocked"
#: Every state word (the values ``Queue.list(state=...)`` and the console's filter take).
STATES = (SCHEDULED, WAITING, RUNNING, FAILED, DONE, CANCELLED, BLOCKED)

#: Each stored status's state word; ``init`` and ``retry`` are ``waiting`` here and
#: ``scheduled`` while their ``run_at`` is in the future (:func:`state_word`).
STATE_OF_STATUS: dict[str, str] = {
    JobStatus.INIT: WAITING,
    JobStatus.RETRY: WAITING,
    JobStatus.PROCESSING: RUNNING,
    JobStatus.ERROR: FAILED,
    JobStatus.MAX_RETRY: FAILED,
    JobStatus.DONE: DONE,
    JobStatus.CANCELLED: CANCELLED,
    JobStatus.BLOCKED: BLOCKED,
}


def state_word(job: Any, now: datetime) -> str:
    """Return the state word of ``job`` at ``now``.

    Parameters
    ----------
    job
        A ``Job`` (or anything with ``status``, ``waiting`` and ``run_at``).
    now
        An aware datetime: the database's clock where the caller has it.

    Returns
    -------
    str
        One of :data:`STATES`.
    """
    if job.waiting or job.status in (JobStatus.INIT, JobStatus.RETRY):
        return SCHEDULED if job.run_at is not None and job.run_at > now else WAITING
    return STATE_OF_STATUS.get(job.status, str(job.status))


def status_label(word: str, status: str) -> str:
    """Return ``word`` with the stored ``status`` beside it where they differ.

    ``("failed", "max_retry")`` gives ``"failed (max_retry)"``; ``("done", "done")``
    gives ``"done"``.
    """
    return word if word == status else f"{word} ({status})"


def state_label(job: Any, now: datetime) -> str:
    """Return the state word of ``job`` at ``now`` with its stored status where they differ."""
    return status_label(state_word(job, now), str(job.status))


class _FewRows(Exact):
    """``lhs = rhs``, which SQLite's planner is told few rows pass (``unlikely()``).

    SQLite's statistics (``ANALYZE``) put half the table behind each value of a
    boolean, so for ``waiting = ?`` it read the whole table (a list newest first by
    id) or a whole index (the overview's counts per queue) to find the 10,000
    waiting jobs among 1,000,000 (docs/console.md "Speed at a million jobs"). Told
    that the term is rare it reads them over the claim indexes, which ``waiting``
    leads. The condition is the same; elsewhere the SQL is the same too.
    """

    def as_sqlite(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        sql, params = self.as_sql(compiler, connection)
        return f"unlikely({sql})", list(params)


def is_waiting() -> Exact:
    """Return the condition ``waiting = true`` for a filter (``jobs.filter(is_waiting())``
    or inside a ``Q``), in the shape each database finds the waiting jobs by
    (:class:`_FewRows`): an index, not the table, where the waiting jobs are few."""
    return _FewRows(F("waiting"), True)  # noqa: FBT003 (a lookup's right-hand side)


def waiting_rows() -> Q:
    """Return the filter of the waiting jobs (scheduled or due) for a list of them:
    :func:`is_waiting` and their statuses (``init``, ``retry``: the same rows).

    The statuses are the predicate of PostgreSQL's waiting list index
    (``jq_job_waiting_idx``, ids newest first; docs/design.md#indexes), stated so
    that the list reads it; the claim states only ``waiting``, so it never does
    (docs/horizon.md).
    """
    return Q(is_waiting(), status__in=list(WAITING_STATUSES))


def state_filter(word: str) -> Q:
    """Return the filter of the jobs in state ``word`` (one of :data:`STATES`), by the
    database clock.

    Raises
    ------
    KeyError
        If ``word`` is not a state word.
    """
    return {
        SCHEDULED: Q(waiting_rows(), run_at__gt=Now()),
        WAITING: Q(waiting_rows(), run_at__lte=Now()),
        RUNNING: Q(status=JobStatus.PROCESSING),
        FAILED: Q(status__in=DEAD_STATUSES),
        DONE: Q(status=JobStatus.DONE),
        CANCELLED: Q(status=JobStatus.CANCELLED),
        BLOCKED: Q(status=JobStatus.BLOCKED),
    }[word]


def status_filter(status: str) -> Q:
    """Return the filter of the jobs whose stored status is ``status``.

    ``init`` and ``retry`` with :func:`waiting_rows` too: PostgreSQL then reads
    them over the waiting rows' partial indexes (docs/design.md#indexes), not the
    whole table in id order.
    """
    if status in WAITING_STATUSES:
        return Q(waiting_rows(), status=status)
    return Q(status=status)

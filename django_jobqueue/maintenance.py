"""Operators' actions on the job table: status, prune, retry, cancel, delete.

The admin's actions and ``manage.py jobqueue`` call these functions, so both
surfaces change rows the same way. Every state change is one guarded ``update()``
that filters on the expected state, so a job that a worker claimed (or another
operator changed) in the meantime is left alone and not counted.

Policy
------
- **Retry** (docs/design.md#ids): a dead
  letter (``error``, ``max_retry``) goes back to ``init``, due now, ``attempt`` 0 (its
  next run is attempt 1), ``started_at`` and ``finished_at`` cleared; its ``errors``
  list stays as history (the audit log records the retry itself). An id it still
  holds is held again until it finishes. A waiting job (``init``, ``retry``)
  becomes due now.
- **Cancel**: a waiting job becomes ``cancelled`` at once and frees its id
  (docs/design.md#ids) and its unique key (:func:`~django_jobqueue.store.unique.cancel_release`),
  so an identical enqueue is accepted again; a running job gets ``cancel_requested``
  and its worker stops it, freeing both then. A dead letter is not cancelled here: it
  keeps its unique key until the TTL (docs/design.md#unique-keys).
- **Delete**: any job but a running one (cancel it first), in batches.
- **Prune**: ``done`` and ``cancelled`` jobs finished more than ``RETENTION`` ago; dead
  letters past their ``keep`` only when ``CLEAN_ERROR`` (or asked). A job that still
  holds its id (``dedupe``) or its unique key is kept until the hold ends. Deletes
  run ``batch_size`` primary keys per statement, each its own short transaction, so
  a big prune never holds a long lock.
- **Status**: per queue, counts by status, the age of the oldest due waiting job
  and the busy workers (distinct ``lease_owner`` of running jobs whose lease has not
  expired, by the database clock: workers holding a job now; an idle worker holds
  none and is not counted, since no registry of workers exists).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from django.db.models import Count, Min, Q, QuerySet
from django.utils import timezone

from . import storage
from .core.conf import get_config
from .core.dbclock import Now
from .flows import hooks
from .models import DEAD_STATUSES, Job, JobStatus, ScheduleJob
from .schedules import set_enabled_plans
from .store import locks, states
from .store.batches import delete_in_batches
from .store.unique import cancel_release

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "CancelCount",
    "DeleteCount",
    "PruneCount",
    "QueueStatus",
    "RetryCount",
    "cancel_jobs",
    "check_batch_size",
    "dead_jobs",
    "delete_jobs",
    "disable_schedules",
    "enable_schedules",
    "busy_workers",
    "prune",
    "queue_status",
    "release_unique_keys",
    "retry_jobs",
    "run_schedules_now",
]

logger = logging.getLogger(__name__)

#: Primary keys per DELETE statement.
DEFAULT_BATCH_SIZE = 1_000

_T = TypeVar("_T")


@dataclass(frozen=True)
class RetryCount:
    """What :func:`retry_jobs` changed."""

    #: Dead letters that start again from attempt 1.
    dead: int
    #: Waiting jobs made due now.
    waiting: int

    @property
    def total(self) -> int:
        """All jobs changed."""
        return self.dead + self.waiting


@dataclass(frozen=True)
class CancelCount:
    """What :func:`cancel_jobs` changed."""

    #: Waiting jobs now ``cancelled``.
    cancelled: int
    #: Running jobs whose worker was asked to stop them.
    requested: int


@dataclass(frozen=True)
class DeleteCount:
    """What :func:`delete_jobs` did."""

    #: Jobs deleted.
    deleted: int
    #: Running jobs left alone (cancel them first).
    running: int


@dataclass(frozen=True)
class PruneCount:
    """Jobs deleted (or, on a dry run, that would be) by :func:`prune`, per kind."""

    #: ``done`` jobs older than the retention.
    done: int
    #: ``cancelled`` jobs older than the retention.
    cancelled: int
    #: Dead letters past their ``keep``; 0 when dead letters were not pruned.
    dead: int
    #: Whether dead letters were considered at all.
    dead_included: bool

    @property
    def total(self) -> int:
        """All jobs deleted."""
        return self.done + self.cancelled + self.dead


@dataclass(frozen=True)
class QueueStatus:
    """One queue at a glance."""

    #: Queue name.
    queue: str
    #: Jobs per status, every :class:`JobStatus` value present (0 when none).
    counts: dict[str, int] = field(default_factory=dict)
    #: Jobs per state word (docs/console.md#states), every word present: ``scheduled``
    #: and ``waiting`` split the ``init`` and ``retry`` jobs by their ``run_at``.
    states: dict[str, int] = field(default_factory=dict)
    #: Seconds the oldest due waiting job has waited since its ``run_at``; None: none due.
    oldest_waiting_s: float | None = None
    #: Workers holding a job of this queue now: distinct ``lease_owner`` values of
    #: running jobs with an unexpired lease (idle workers are not counted).
    busy_workers: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Return the status as JSON-ready data."""
        return {
            "queue": self.queue,
            "counts": dict(self.counts),
            "states": dict(self.states),
            "oldest_waiting_s": self.oldest_waiting_s,
            "busy_workers": self.busy_workers,
        }


def retry_jobs(jobs: QuerySet[Job]) -> RetryCount:
    """Run the dead letters and waiting jobs among ``jobs`` again, due now.

    Parameters
    ----------
    jobs
        Any queryset of jobs (e.g. the admin's selection); jobs in other states
        (running, done, cancelled) are left alone.

    Returns
    -------
    RetryCount
        How many dead letters start again (``init``, ``attempt`` 0 so the next run
        is attempt 1, ``finished_at`` cleared, id held again until it finishes) and
        how many waiting jobs were made due now.

    Implements: docs/design.md#ids.
    """
    using = jobs.db
    # A dead letter of a batch or a workflow resumes it (docs/workflows.md).
    dead = locks.retry_when_locked(
        using,
        hooks.restart_dead,
        jobs,
        storage.restart_fields(run_at=Now(), message="", started_at=None),
    )
    # The dead letters just made waiting are already due now: skip them here.
    waiting = locks.retry_when_locked(
        using,
        lambda: jobs.filter(waiting=True, run_at__gt=Now()).update(run_at=Now(), updated_at=Now()),
    )
    logger.info("jobs retried dead=%s waiting=%s", dead, waiting)
    return RetryCount(dead=dead, waiting=waiting)


def dead_jobs(
    using: str,
    *,
    queue: str | None = None,
    job_type: str | None = None,
    jids: Iterable[str] | None = None,
) -> QuerySet[Job]:
    """Return the dead letters on ``using``, narrowed by queue, job type and jids.

    Parameters
    ----------
    using
        Database alias of the jobs.
    queue, job_type
        Exact names to keep; None: any.
    jids
        Jids to keep; None: any.

    Returns
    -------
    QuerySet
        Jobs in ``error`` or ``max_retry`` matching every given filter.
    """
    jobs = Job.objects.using(using).dead()
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    if job_type is not None:
        jobs = jobs.filter(job_type=job_type)
    if jids is not None:
        jobs = jobs.filter(jid__in=list(jids))
    return jobs


def cancel_jobs(jobs: QuerySet[Job]) -> CancelCount:
    """Cancel the waiting jobs among ``jobs`` and ask the running ones to stop.

    Parameters
    ----------
    jobs
        Any queryset of jobs; finished jobs are left alone.

    Returns
    -------
    CancelCount
        Waiting jobs now ``cancelled`` (their id and unique key freed), and running jobs newly
        flagged ``cancel_requested`` (the worker's heartbeat sees the flag and tells
        the handler through ``ctx.cancelled``).

    Implements: docs/design.md#ids.
    """
    using = jobs.db
    fields = {
        "status": JobStatus.CANCELLED,
        "waiting": False,
        **cancel_release(),
        "finished_at": Now(),
        "message": "cancelled by an operator",
        "updated_at": Now(),
    }
    # Waiting and blocked jobs; those of batches and workflows end with their counts
    # and dependents in the same transaction (docs/workflows.md).
    cancelled = locks.retry_when_locked(using, hooks.cancel_waiting, jobs, fields)
    requested = locks.retry_when_locked(
        using,
        lambda: jobs.filter(status=JobStatus.PROCESSING, cancel_requested=False).update(
            cancel_requested=True, updated_at=Now()
        ),
    )
    logger.info("jobs cancelled cancelled=%s requested=%s", cancelled, requested)
    return CancelCount(cancelled=cancelled, requested=requested)


def check_batch_size(batch_size: int) -> None:
    """Raise ValueError unless ``batch_size`` is an integer >= 1."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1: got {batch_size!r}.")


def delete_jobs(jobs: QuerySet[Job], *, batch_size: int = DEFAULT_BATCH_SIZE) -> DeleteCount:
    """Delete the jobs among ``jobs`` that are not running, in batches.

    Parameters
    ----------
    jobs
        Any queryset of jobs.
    batch_size
        Primary keys per DELETE statement, >= 1.

    Returns
    -------
    DeleteCount
        Jobs deleted, and running jobs left alone (cancel those first, so their
        worker stops before the row goes).

    Raises
    ------
    ValueError
        If ``batch_size`` is not an integer >= 1.
    """
    check_batch_size(batch_size)
    running = jobs.filter(status=JobStatus.PROCESSING).count()
    deleted = delete_in_batches(jobs.exclude(status=JobStatus.PROCESSING), batch_size)
    logger.info("jobs deleted deleted=%s running_kept=%s", deleted, running)
    return DeleteCount(deleted=deleted, running=running)


def _finished_before(cutoff: Any) -> Q:
    """Jobs that finished before ``cutoff`` (``updated_at`` when never stamped)."""
    return Q(finished_at__lte=cutoff) | Q(finished_at__isnull=True, updated_at__lte=cutoff)


#: Jobs whose id (docs/design.md#ids) or unique key (docs/design.md#unique-keys) is not held now.
def _no_live_hold() -> Q:
    id_free = Q(job_id_hash__isnull=True) | Q(id_held_until__lte=Now())
    key_free = Q(unique_key_hash__isnull=True) | Q(unique_expires_at__lte=Now())
    return id_free & key_free


def _dead_past_keep(keep: timedelta | None) -> Q:
    """Dead letters past their ``keep``: the given one, else each job's own.

    A dead letter's own ``keep`` (its job type's, else its queue's) was stamped as
    ``id_held_until`` when it died; rows without that stamp use their queue's keep.
    """
    if keep is not None:
        return _finished_before(Now() - keep)
    config = get_config()
    named = list(config.QUEUES)
    by_queue = Q()
    for name, options in config.QUEUES.items():
        by_queue |= Q(queue=name) & _finished_before(Now() - options.keep)
    default_keep = config.KEEP
    other_queues = _finished_before(Now() - default_keep)
    if named:
        other_queues &= ~Q(queue__in=named)
    by_queue |= other_queues
    return Q(id_held_until__lte=Now()) | (Q(id_held_until__isnull=True) & by_queue)


def prune(
    using: str,
    *,
    retention: timedelta | None = None,
    keep: timedelta | None = None,
    dead: bool | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    dry_run: bool = False,
    pause_ms: int = 0,
) -> PruneCount:
    """Delete finished jobs past their retention, in batches.

    Parameters
    ----------
    using
        Database alias of the jobs.
    retention
        Age (since ``finished_at``) past which ``done`` and ``cancelled`` jobs go;
        None: ``JOBQUEUE["RETENTION"]``.
    keep
        Age past which dead letters go; None: each dead letter's own ``keep`` (its
        job type's, else its queue's, else ``JOBQUEUE["KEEP"]``).
    dead
        Whether to prune dead letters; None: ``JOBQUEUE["CLEAN_ERROR"]`` (README,
        "Configuration").
    batch_size
        Primary keys per DELETE statement, >= 1.
    dry_run
        Count what would go, delete nothing.
    pause_ms
        Sleep between two batches, ms (>= 0): spreads a big prune's writes, and the
        WAL replicas replay, over time.

    Returns
    -------
    PruneCount
        Jobs deleted (or that would be), per kind. Jobs that still hold their id or
        unique key are kept until the hold ends.

    Raises
    ------
    ValueError
        If ``batch_size`` is not an integer >= 1, or ``pause_ms`` not one >= 0.

    Each kind is deleted in batches that each start after the last key the batch
    before saw, in ``(finished_at, pk)`` order over the ``(status, finished_at)``
    index (:func:`~django_jobqueue.store.batches.delete_in_batches`), so a prune of
    millions of rows stays linear and no batch holds its locks long
    (docs/horizon.md, "Prune at scale").

    Implements: docs/design.md#execution, docs/design.md#ids.
    """
    check_batch_size(batch_size)
    if isinstance(pause_ms, bool) or not isinstance(pause_ms, int) or pause_ms < 0:
        raise ValueError(f"pause_ms must be an integer >= 0: got {pause_ms!r}.")
    config = get_config()
    retention = config.RETENTION if retention is None else retention
    include_dead = config.CLEAN_ERROR if dead is None else dead
    base = Job.objects.using(using).filter(_no_live_hold())
    cutoff = Now() - retention
    # Per kind, its parts and the key each is walked by: the rows stamped with
    # finished_at in (status, finished_at) order, the few never stamped by pk.
    kinds: dict[str, list[tuple[QuerySet[Job], str | None]]] = {
        kind: [
            (base.filter(status=status, finished_at__lte=cutoff), "finished_at"),
            (base.filter(status=status, finished_at__isnull=True, updated_at__lte=cutoff), None),
        ]
        for kind, status in (("done", JobStatus.DONE), ("cancelled", JobStatus.CANCELLED))
    }
    if include_dead:
        past_keep = _dead_past_keep(keep)
        kinds["dead"] = [
            part
            for status in DEAD_STATUSES
            for part in (
                (base.filter(past_keep, status=status, finished_at__isnull=False), "finished_at"),
                (base.filter(past_keep, status=status, finished_at__isnull=True), None),
            )
        ]
    counts: dict[str, int] = {}
    for kind, parts in kinds.items():
        counts[kind] = 0
        for jobs, key in parts:
            if dry_run:
                counts[kind] += jobs.count()
            else:
                counts[kind] += delete_in_batches(jobs, batch_size, key=key, pause_ms=pause_ms)
    result = PruneCount(
        done=counts["done"],
        cancelled=counts["cancelled"],
        dead=counts.get("dead", 0),
        dead_included=include_dead,
    )
    logger.info(
        "jobs pruned done=%s cancelled=%s dead=%s dry_run=%s",
        result.done,
        result.cancelled,
        result.dead,
        dry_run,
    )
    return result


def queue_status(using: str, *, queues: Iterable[str] | None = None) -> list[QueueStatus]:
    """Return every queue's counts by status, oldest due waiting age and busy workers.

    Parameters
    ----------
    using
        Database alias of the jobs.
    queues
        Queue names to report; None: every queue that has a job.

    Returns
    -------
    list of QueueStatus
        One per queue, by name. The oldest waiting age is in seconds since the
        job's ``run_at``; busy workers count distinct ``lease_owner`` values of
        running jobs whose lease has not expired by the database clock (workers
        holding a job now; idle workers are not counted).
    """
    jobs = Job.objects.using(using).order_by()
    if queues is not None:
        jobs = jobs.filter(queue__in=list(queues))
    counts: dict[str, dict[str, int]] = {}
    for queue, status, number in jobs.values_list("queue", "status").annotate(n=Count("*")):
        counts.setdefault(queue, dict.fromkeys(JobStatus.values, 0))[status] = number
    # The state words (docs/console.md#states) split the waiting jobs (``init`` and
    # ``retry``) by their run_at: a second count over the claim index, which
    # ``waiting`` leads; one GROUP BY of the whole table is cheaper than a count per
    # index once the done jobs are most of it.
    by_state: dict[str, dict[str, int]] = {}
    for queue, number in (
        jobs.filter(waiting=True, run_at__lte=Now()).values_list("queue").annotate(n=Count("*"))
    ):
        by_state[queue] = {states.WAITING: number}
    for queue, by_status in counts.items():
        words = dict.fromkeys(states.STATES, 0)
        for status, number in by_status.items():
            words[states.STATE_OF_STATUS[status]] += number
        due = by_state.get(queue, {}).get(states.WAITING, 0)
        words[states.SCHEDULED] = words[states.WAITING] - due
        words[states.WAITING] = due
        by_state[queue] = words
    now = timezone.now()
    oldest = {
        queue: (now - run_at).total_seconds()
        for queue, run_at in jobs.due()
        .order_by()
        .values_list("queue")
        .annotate(oldest=Min("run_at"))
        if run_at is not None
    }
    workers = dict(
        jobs.filter(status=JobStatus.PROCESSING, lease_expires_at__gt=Now())
        .order_by()
        .values_list("queue")
        .annotate(n=Count("lease_owner", distinct=True))
    )
    names = sorted(counts) if queues is None else sorted(set(queues))
    return [
        QueueStatus(
            queue=name,
            counts=counts.get(name, dict.fromkeys(JobStatus.values, 0)),
            states=by_state.get(name, dict.fromkeys(states.STATES, 0)),
            oldest_waiting_s=None if name not in oldest else max(0.0, round(oldest[name], 3)),
            busy_workers=workers.get(name, 0),
        )
        for name in names
    ]


def busy_workers(using: str) -> int:
    """Return how many workers hold a job now: distinct ``lease_owner`` of running jobs.

    An idle worker holds no job and is not counted: no registry of workers exists,
    so this is not the number of workers running.

    Parameters
    ----------
    using
        Database alias of the jobs.

    Returns
    -------
    int
        Distinct owners of ``processing`` jobs whose lease has not expired by the
        database clock (a worker thread with a job in hand).
    """
    return (
        Job.objects.using(using)
        .filter(status=JobStatus.PROCESSING, lease_expires_at__gt=Now())
        .values("lease_owner")
        .distinct()
        .count()
    )


def enable_schedules(schedules: QuerySet[ScheduleJob]) -> int:
    """Enable ``schedules``; return how many were disabled before.

    A cron plan restarts at its next tick from now (ticks passed while disabled
    never run, even with ``catch_up``); see :func:`schedules.set_enabled_plans`.
    """
    return set_enabled_plans(schedules, enabled=True)


def disable_schedules(schedules: QuerySet[ScheduleJob]) -> int:
    """Disable ``schedules``; return how many were enabled before."""
    return schedules.filter(enabled=True).update(enabled=False, updated_at=Now())


def run_schedules_now(schedules: QuerySet[ScheduleJob]) -> int:
    """Make ``schedules`` due now (``schedule_at`` = now); return how many.

    The scheduler makes their next job on its next pass; a disabled schedule
    stays disabled and makes none.
    """
    return schedules.update(schedule_at=Now(), updated_at=Now())


def release_unique_keys(jobs: QuerySet[Job]) -> int:
    """End the unique-key holds of ``jobs`` (docs/design.md#core-and-pro); return how many.

    The jobs themselves are left as they are; a new job with the key can then be
    enqueued. One guarded ``update()`` on the rows that hold a key.
    """
    released = jobs.filter(unique_key_hash__isnull=False).update(
        unique_key_hash=None, unique_expires_at=None, updated_at=Now()
    )
    logger.info("unique keys released count=%s", released)
    return released

"""The job that holds an id: locked lookup, its kind, and the guarded writes on it.

Each verb of :class:`~django_jobqueue.ids.Queue` runs its body through :func:`locked`
(the creation lock of its (queue, id)), reads the holder with :func:`holder`
(``SELECT ... FOR UPDATE`` by primary key), and changes it with one ``UPDATE`` or
``DELETE`` that filters on the state read (:func:`same_hold` plus ``waiting=True``,
``processing`` and the lease token, or a dead status). A write that finds the row
moved on answers False, and the verb reads it again, at most :data:`ROUNDS` times.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.db.models import BooleanField, Case, Q, QuerySet, Value, When

from ..core.conf import get_config
from ..core.dbclock import Now
from ..core.exceptions import LockTimeout
from ..models import DEAD_STATUSES, Job, JobStatus, hold_hash
from ..storage import restart_fields
from ..store import locks
from ..store.managers import JobSpec, check_transaction, hold_lock_names
from ..store.wakeups import notify_on_commit

__all__ = [
    "ROUNDS",
    "Kind",
    "busy",
    "holder",
    "insert",
    "kind_of",
    "locked",
    "release",
    "restart_failed",
    "same_hold",
    "set_running",
    "set_waiting",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Guarded writes that find the row changed under them re-read it; only a worker can
#: change a row we do not hold, and each change moves it forward, so few rounds do.
ROUNDS = 8


class Kind:
    """The rows of the table of four calls (docs/design.md#ids): what the id's holder is."""

    NONE = "none"
    WAITING = "waiting"
    RUNNING = "running"
    FAILED = "failed"
    DONE = "done"


def busy(queue: str, job_id: str) -> LockTimeout:
    """Return the error of a verb whose holder kept changing for :data:`ROUNDS` reads."""
    return LockTimeout(
        f"The job of id {job_id!r} on queue {queue!r} kept changing under the call; retry it."
    )


def locked(
    using: str,
    queue: str,
    job_id: str,
    body: Callable[[], T],
    *,
    wrote: Callable[[T], bool] = lambda _result: True,
) -> T:
    """Run ``body`` in a transaction holding the creation lock of (queue, id); return its result.

    ``wrote(result)`` says whether the body wrote anything. When it did not (an
    ``add`` that found the id taken, an ``update`` or ``cancel`` with nothing to
    change), the lock's savepoint is rolled back rather than released, so the lock
    ends at once: on PostgreSQL an advisory lock (and a row lock) taken in a
    rolled-back subtransaction is freed, while a released savepoint keeps them
    until the caller's transaction ends and every later caller of the id would
    queue behind it. MySQL's ``GET_LOCK`` is released when the body ends anyway. A
    body that raises rolls its savepoint back too.

    Raises
    ------
    WrongDatabase
        If the caller's open transaction is on another database than ``using``.
    LockTimeout
        If the lock is not had within ``JOBQUEUE["LOCK_TIMEOUT_MS"]``.
    """
    check_transaction(using)
    timeout_ms = get_config().LOCK_TIMEOUT_MS
    names = hold_lock_names(queue, job_id=job_id)

    def attempt() -> T:
        try:
            with locks.creation_lock(using, names, timeout_ms=timeout_ms):
                result = body()
                if not wrote(result):
                    raise _NothingWritten(result)
                return result
        except _NothingWritten as nothing:
            return nothing.result

    return locks.retry_when_locked(using, attempt, timeout_ms=timeout_ms)


class _NothingWritten(Exception):  # noqa: N818 - control flow, never leaves this module
    """The body wrote nothing: leave the lock's savepoint by a rollback, freeing the lock."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result


def holder(using: str, queue: str, job_id: str, *, lock: bool = True) -> Any:
    """Return the row holding (queue, id), locked, annotated ``held`` and ``db_now``; or None.

    The row is found by the hash of the id's bytes, so ids compare byte for byte on
    every database. It is locked by primary key only (no gap locks on MySQL);
    ``lock=False`` reads it without a lock.
    """
    id_hash = hold_hash(job_id)
    pk = (
        Job.objects.using(using)
        .filter(queue=queue, job_id_hash=id_hash)
        .values_list("pk", flat=True)
        .first()
    )
    if pk is None:
        return None
    rows = Job.objects.using(using).filter(pk=pk, queue=queue, job_id_hash=id_hash)
    if lock:
        rows = rows.select_for_update()
    return rows.annotate(
        db_now=Now(),
        held=Case(
            When(Q(id_held_until__isnull=True) | Q(id_held_until__gt=Now()), then=Value(True)),  # noqa: FBT003
            default=Value(False),  # noqa: FBT003
            output_field=BooleanField(),
        ),
    ).first()


def kind_of(row: Any) -> str:
    """Return the :class:`Kind` of a :func:`holder` row (None: ``Kind.NONE``)."""
    if row is None or not row.held:
        return Kind.NONE
    if row.waiting:
        return Kind.WAITING
    if row.status == JobStatus.PROCESSING:
        return Kind.RUNNING
    if row.status in DEAD_STATUSES:
        return Kind.FAILED
    if row.status == JobStatus.DONE:
        return Kind.DONE
    return Kind.NONE  # cancelled: the cancel ended the id's job


def same_hold(row: Any) -> QuerySet[Any]:
    """Return ``row`` as a queryset that matches only while it still holds its id."""
    return Job.objects.using(row._state.db).filter(
        pk=row.pk, queue=row.queue, job_id_hash=row.job_id_hash
    )


def release(using: str, row: Any) -> None:
    """End the hold of a row that no longer takes its id (stale, cancelled or done)."""
    if row is not None:
        same_hold(row).update(job_id_hash=None, updated_at=Now())


def insert(spec: JobSpec, hold_fields: dict[str, Any]) -> str:
    """Insert ``spec``'s job under the (queue, id) lock the calling verb holds; return its jid.

    ``hold_fields`` are ``dedupe_ms`` and ``keep_ms`` (int milliseconds or None).
    """
    jid = Job.objects.insert_held(spec, **hold_fields)
    logger.debug("job added jid=%s queue=%s type=%s", jid, spec.queue, spec.job_type)
    return jid


def _wake_if_due(using: str, queue: str, due: bool) -> None:
    if due:
        notify_on_commit(using, queue)


def set_waiting(row: Any, value: Any, run_at: Any) -> bool:
    """Replace a waiting job's value (and run time, unless None); False if it moved on."""
    fields: dict[str, Any] = {
        "payload": value,
        "rerun": False,
        "rerun_payload": None,
        "rerun_at": None,
        "updated_at": Now(),
    }
    if run_at is not None:
        fields["run_at"] = run_at
    updated = same_hold(row).filter(waiting=True).update(**fields)
    if updated:
        _wake_if_due(row._state.db, row.queue, isinstance(run_at, Now))
    return bool(updated)


def set_running(row: Any, value: Any, run_at: Any) -> bool:
    """Ask a running job for one run more with ``value``; False if it finished."""
    return bool(
        same_hold(row)
        .filter(status=JobStatus.PROCESSING, lease_token=row.lease_token)
        .update(rerun=True, rerun_payload=value, rerun_at=run_at, updated_at=Now())
    )


def restart_failed(row: Any, value: Any, run_at: Any) -> bool:
    """Start a failed (dead letter) job again with ``value``, attempts from one."""
    updated = (
        same_hold(row)
        .filter(status__in=DEAD_STATUSES)
        .update(
            **restart_fields(
                payload=value,
                run_at=run_at,
                result=None,
                message="",
                started_at=None,
                rerun=False,
                rerun_payload=None,
                rerun_at=None,
                steps=None,  # a new value: its handler starts its steps afresh
            )
        )
    )
    if updated:
        _wake_if_due(row._state.db, row.queue, isinstance(run_at, Now))
    return bool(updated)

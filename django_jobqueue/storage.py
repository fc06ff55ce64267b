"""The worker's side of the job table (docs/design.md#execution): claim, heartbeat,
complete, fail and hand back (the lease reaper is :mod:`django_jobqueue.reaping`).

Every state change is one guarded ``UPDATE`` that filters on the job's pk, the
``processing`` status and the claim's ``lease_token``, and checks the row count: a
worker that lost its lease (paused, partitioned, too slow, reaped) writes nothing
over the new owner's run, and learns so from the ``False`` it gets back.

Claim (docs/design.md#creation; the code is :mod:`django_jobqueue.storage_claim`,
re-exported here): one short transaction that selects due
jobs in (priority, run_at, pk) order over the claim index with ``FOR UPDATE SKIP
LOCKED`` (PostgreSQL, MySQL 8, MariaDB 10.6+), then moves them to ``processing``
with a fresh lease token. SQLite has no row locks: its write transaction serialises
claims (``transaction_mode`` IMMEDIATE, else the guarded update makes a second
claimer of the same row update nothing), and "database is locked" is retried.

Leases are deadlines by the database clock (``Now() + LEASE_MS``).

Every outcome stored here, whoever the worker, and every claim's pickup latency are
counted once in the job statistics (:mod:`django_jobqueue.store.jobstats`).

Every statement here that meets a dead connection (an idle timeout, a killed
backend, a restart) outside the caller's transaction is repeated once on a new
connection (:mod:`django_jobqueue.core.reconnect`): the lease-token guard makes a repeat
of a write that did land update nothing, and a repeated claim first takes back
the rows its lost first try leased (:func:`claimed_under`).
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, F, JSONField, Q, Value, When
from django.db.models.functions import Coalesce

from . import storage_limits, storage_sql
from .core import reconnect
from .core.backoff import backoff_ms
from .core.conf import get_config
from .core.dbclock import Now
from .core.validation import check_json, hold_hash
from .flows import hooks
from .models import Job, JobStatus
from .storage_claim import claim, claim_recheck_ms, claimed_under
from .store import claimfloor, locks, unique
from .store.errorlog import describe, error_entry, escaped
from .store.jobstats import count_done, count_outcome
from .store.registry import UNSET, get_job_description
from .store.wakeups import notify_on_commit

__all__ = [
    "claim",
    "claim_recheck_ms",
    "claimed_under",
    "restart_fields",
    "complete",
    "complete_many",
    "dead_hold_until",
    "fail",
    "finish_cancelled",
    "hand_back",
    "hand_back_many",
    "heartbeat",
    "mark_started",
    "LEASE_ENDED",
    "retrying",
    "unclaim",
    "unclaim_fields",
]

logger = logging.getLogger(__name__)

_LEASE_CLEARED: dict[str, Any] = {"lease_owner": "", "lease_token": "", "lease_expires_at": None}
#: A lease that ends with its attempt: ``lease_owner`` stays, so a finished job still
#: says which worker ran it last (the console's "run by"); the token and expiry go.
LEASE_ENDED: dict[str, Any] = {"lease_token": "", "lease_expires_at": None}


def _id_hold_options(job: Job) -> tuple[timedelta | None, timedelta]:
    """Return (dedupe, keep) of ``job``: stored on it by a ``Queue(name, dedupe=, keep=)``
    handle, else its job type's, else its queue's."""
    options = get_config().queue_options(job.queue)
    dedupe, keep = options.dedupe, options.keep
    try:
        desc = get_job_description(job.job_type)
    except Exception:  # unknown job type: the queue's options  # noqa: S110
        pass
    else:
        if desc.dedupe is not UNSET:
            dedupe = desc.dedupe
        if desc.keep is not None:
            keep = desc.keep
    if job.dedupe_ms is not None:
        dedupe = timedelta(milliseconds=job.dedupe_ms) if job.dedupe_ms else None
    if job.keep_ms is not None:
        keep = timedelta(milliseconds=job.keep_ms)
    return dedupe, keep


def dead_hold_until(job: Job) -> dict[str, Any]:
    """Return the field updates that keep a dead letter's id held for ``keep``."""
    _dedupe, keep = _id_hold_options(job)
    return {"id_held_until": Now() + keep}


def _database(job: Job) -> str:
    """Return the alias of the database ``job`` was read from.

    Raises
    ------
    ValueError
        If ``job`` was never saved or read (a worker only holds claimed rows).
    """
    using = job._state.db
    if using is None:
        raise ValueError(f"Job pk={job.pk} was not read from a database; claim it first.")
    return using


def retrying(using: str, func: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one worker write: "database is locked" and MySQL lock errors retried
    (:func:`locks.retry_when_locked`), a dead connection reconnected and the write
    repeated once (:func:`reconnect.retry_on_disconnect`; see there why a repeat
    stores nothing twice)."""
    # partial: an update's field names (say ``timeout_ms``) never meet the helper's.
    call = functools.partial(func, *args, **kwargs)
    return reconnect.retry_on_disconnect(using, locks.retry_when_locked, using, call)


def _guarded(job: Job) -> Any:
    return Job.objects.using(_database(job)).filter(
        pk=job.pk, status=JobStatus.PROCESSING, lease_token=job.lease_token
    )


def heartbeat(
    jobs: Sequence[Job],
    *,
    lease_ms: int | None = None,
    started: Collection[int] = (),
    progress: Mapping[int, dict[str, Any]] | None = None,
) -> tuple[set[int], set[int]]:
    """Extend the leases of ``jobs``; return (pks still owned, pks asked to cancel).

    ``started`` are pks of ``jobs`` that started since a claim that did not start
    them (``claim(started=False)``) and whose start is not stored yet: the same
    statement stores it (``started_at``, if still NULL), so a claimer records the
    starts of short jobs with no write of their own.

    A job missing from the first set lost its lease: its worker must not write its
    outcome (the guarded updates would refuse anyway). ``lease_ms`` is the new
    lease in ms (None: ``JOBQUEUE["LEASE_MS"]``). Each owned job's
    ``lease_expires_at`` becomes the expiry its row now holds (read with the cancel
    flags), so the worker's copy follows the database's lease: the completer retries
    a ``done`` write through an outage until that expiry, not the claim's. Raises
    :class:`LockTimeout` if SQLite stays locked, and the ``DatabaseError`` of a
    database still unreachable after one reconnect.

    ``progress`` maps pks of ``jobs`` to their latest ``{"done", "total", "message"}``
    (docs/console.md "Progress"), stored by the same statement.
    """
    if not jobs:
        return set(), set()
    using = _database(jobs[0])
    lease = timedelta(milliseconds=lease_ms or get_config().LEASE_MS)
    owned = Q()
    for job in jobs:
        owned |= Q(pk=job.pk, lease_token=job.lease_token)
    rows = Job.objects.using(using).filter(owned, status=JobStatus.PROCESSING)
    by_pk = {job.pk: job for job in jobs}

    fields: dict[str, Any] = {}
    if started:  # first: MySQL assigns left to right, and it reads the claim's heartbeat_at
        fields["started_at"] = Case(
            When(pk__in=list(started), then=Coalesce(F("started_at"), F("heartbeat_at"))),
            default=F("started_at"),
        )
    fields.update(lease_expires_at=Now() + lease, heartbeat_at=Now())
    if progress:
        fields["progress"] = Case(
            *(
                When(pk=pk, then=Value(value, output_field=JSONField()))
                for pk, value in progress.items()
            ),
            default=F("progress"),
            output_field=JSONField(),
        )

    def beat() -> tuple[set[int], set[int]]:
        rows.update(**fields)
        alive: set[int] = set()
        cancel: set[int] = set()
        for pk, cancel_requested, expires_at in rows.values_list(
            "pk", "cancel_requested", "lease_expires_at"
        ):
            alive.add(pk)
            if cancel_requested:
                cancel.add(pk)
            by_pk[pk].lease_expires_at = expires_at
        return alive, cancel

    return retrying(using, beat)


def mark_started(job: Job) -> bool:
    """Store that ``job``, claimed not started (``claim(started=False)``), starts now.

    One guarded write of ``started_at``: from now on an expired lease spends the
    attempt (:func:`~django_jobqueue.reaping.reap_expired`). The value stored is the claim's time
    (``heartbeat_at`` as the claim wrote it, by the database clock), as every start
    of a claimed job is (:func:`heartbeat`, the outcomes), so the start a handler
    sees and the stored one agree. Returns False, writing nothing, if the lease was
    lost meanwhile: the job is not the caller's to run.
    """
    return _write(job, {"started_at": job.heartbeat_at or Now()}, "start")


#: An outcome's ``started_at``: a job started without a write of its own
#: (:func:`heartbeat`'s ``started``) has none stored yet; the claim's time stands in.
_START_AT_THE_LATEST: dict[str, Any] = {"started_at": Coalesce(F("started_at"), F("heartbeat_at"))}


def complete(job: Job, result: Any = None, *, run_ms: int | None = None) -> bool:
    """Store ``job``'s success (status ``done``); return False if its lease was lost.

    The id's hold lasts ``dedupe`` more (docs/design.md#ids), else ends now; an
    ``until_executed`` unique key frees now (docs/design.md#unique-keys). A stored
    success is counted ``done`` with ``run_ms`` (ms; None: since the claim).
    """
    # InvalidPayload (a ValueError) before any write: the executor stores it as the
    # job's failure, rather than leaving the job processing until its lease expires.
    check_json(
        result,
        "The handler's result",
        max_bytes=get_config().MAX_RESULT_BYTES,
        setting="MAX_RESULT_BYTES",
    )
    dedupe, _keep = _id_hold_options(job)
    fields: dict[str, Any] = {
        "status": JobStatus.DONE,
        "result": result,
        "finished_at": Now(),
        "updated_at": Now(),
        "message": "",
        **_START_AT_THE_LATEST,
        **LEASE_ENDED,
    }
    if dedupe:
        fields["id_held_until"] = Now() + dedupe
    else:
        fields["job_id_hash"] = None
    fields.update(unique.complete_release(job.unique_mode))
    stored = _write_or_rerun(job, fields, "complete", {"result": result}) is not None
    if stored:
        count_outcome(job, "done", run_ms=run_ms)
    return stored


def complete_many(
    items: Sequence[tuple[Job, Any]], *, run_ms: Sequence[int | None] | None = None
) -> list[bool]:
    """Store the successes of many jobs in one guarded write; return one flag per item.

    ``items`` are (job, result) pairs of one database alias, results already JSON
    (:func:`check_json`). Each flag means what :func:`complete` returns for that job:
    True if its outcome (or the rerun a ``set`` asked for) was stored, False if its
    lease was lost. Rows still owned are written by one ``UPDATE`` guarded per row by
    the job's lease token; a job it did not write (a rerun to store, or a lost
    lease) then goes through :func:`complete` alone. Database errors propagate.
    ``run_ms``: each job's run time in ms, as :func:`complete` takes it.
    """
    if not items:
        return []
    times = list(run_ms) if run_ms is not None else [None] * len(items)
    using = items[0][0]._state.db or "default"
    stored: set[int] = set()
    if storage_sql.supported(using):
        rows = [(job, result, _id_hold_options(job)[0]) for job, result in items]
        # Jobs of batches and workflows end with their counts and dependents
        # (docs/workflows.md); the others as before, by one statement.
        stored = retrying(using, hooks.complete_rows, using, rows)
    count_done(using, [(j, ms) for (j, _r), ms in zip(items, times, strict=True) if j.pk in stored])
    flags = []
    freed: set[str] = set()
    for (job, result), ms in zip(items, times, strict=True):
        if job.pk in stored:
            if job.queue not in freed and storage_limits.saturated(using, job.job_type, job.queue):
                freed.add(job.queue)
                notify_on_commit(using, job.queue)  # a slot they wait for is free
            flags.append(True)
        else:
            flags.append(complete(job, result, run_ms=ms))
    return flags


def fail(
    job: Job,
    exc: BaseException | None,
    *,
    message: str = "",
    retryable: bool = True,
    exception_class: str = "",
    run_ms: int | None = None,
) -> str | None:
    """Store a failed attempt of ``job``; return its new status, or None if the lease was lost.

    ``exception_class`` is the class a remote worker reported (gateway), stored in
    the attempt's entry when there is no ``exc`` to name it.

    A retryable failure with retries left goes to ``retry`` at ``now + backoff``;
    otherwise the job is a dead letter: ``error`` when not retryable, ``max_retry``
    when its retries are spent. A dead letter keeps its id for ``keep`` and its
    unique key until the key's TTL (docs/design.md#unique-keys: an ``until_executed``
    lock is not freed by a failure). A stored failure is counted ``retried`` (or
    ``failed`` for a dead letter) with ``run_ms`` (ms; None: since the claim).
    """
    message = escaped(message or (describe(exc) if exc is not None else "failed"))
    errors = [*job.errors, error_entry(job, exc, message, exception_class)]
    fields: dict[str, Any] = {
        "errors": errors,
        "message": "<secure>" if job.secure else message[:10_000],
        "updated_at": Now(),
        **_START_AT_THE_LATEST,
        **LEASE_ENDED,
    }
    if retryable and job.attempt <= job.max_retry:
        status = JobStatus.RETRY
        delay = timedelta(milliseconds=backoff_ms(job.attempt))
        fields.update(status=status, waiting=True, run_at=Now() + delay)
    else:
        status = JobStatus.MAX_RETRY if retryable else JobStatus.ERROR
        fields.update(status=status, finished_at=Now(), **dead_hold_until(job))
    extra = {"errors": errors, "message": fields["message"]}
    outcome = _write_or_rerun(job, fields, "fail", extra)
    if outcome is None:
        return None
    dead = outcome and status != JobStatus.RETRY
    count_outcome(job, "failed" if dead else "retried", run_ms=run_ms)
    return status if outcome else JobStatus.INIT


def finish_cancelled(job: Job, *, message: str = "cancelled while running") -> bool:
    """Store that ``job`` stopped after a cancel request (status ``cancelled``).

    Returns False if its lease was lost. The job is finished, and like every
    cancelled job it frees its unique key and its id at once (a key is kept
    only for a dead letter).
    """
    fields: dict[str, Any] = {
        "status": JobStatus.CANCELLED,
        "finished_at": Now(),
        "updated_at": Now(),
        "message": message,
        **unique.cancel_release(),  # a cancelled job frees its unique key and its id
        **_START_AT_THE_LATEST,
        **LEASE_ENDED,
    }
    return _write_or_rerun(job, fields, "finish_cancelled", {"message": message}) is not None


def hand_back(job: Job, *, message: str | None = "", keep_place: bool = False) -> bool:
    """Return a claimed job to the queue unrun (graceful shutdown); False if lease lost.

    The claim is undone: ``attempt`` goes back by one and the job is due now; with
    ``keep_place`` its ``run_at`` stays, so it keeps its place in claim order (a
    batch claim's job over its type's ``concurrent`` limit, a prefetched job that
    did not start). ``message`` None leaves the stored message. An ``until_executing``
    job takes its unique key's hold again, which the claim ended (docs/design.md#unique-keys), if
    its
    TTL has not passed: an identical enqueue is deduplicated again. The key was
    free while the job was claimed; if another job took it then, that newer holder
    keeps it and this job waits without a hold (the unique index's refusal is
    caught, never raised), since the newer job was enqueued and cannot be undone.
    """
    fields = unclaim_fields(job, message, keep_place=keep_place)
    handed = unclaim(job, _guarded(job), fields, "hand_back")
    if handed and keep_place:
        _back_below_floor([job])
    return handed


def hand_back_many(jobs: Sequence[Job], *, message: str | None = None) -> int:
    """Hand back claimed jobs no runner started, each keeping its place; return how
    many were still this worker's (the rest lost their lease, and are logged so).

    What :func:`hand_back` with ``keep_place`` does to each, in one ``UPDATE`` for
    all of them: a worker returning a dozen prefetched jobs under its claim lock
    (docs/prefetch.md) holds its claims one round trip, not a dozen. A job holding
    an ``until_executing`` unique key again goes through :func:`hand_back`, after
    the others; one whose write fails is logged and left leased, for the reaper to
    return unspent. ``jobs`` come from one database, as one foreman's do;
    ``message`` None leaves each stored message. Raises what the ``UPDATE`` raised.
    """
    keyed = [j for j in jobs if j.unique_mode == unique.UNTIL_EXECUTING and j.unique_key]
    plain = [j for j in jobs if j not in keyed]
    given = _hand_back_plain(plain, message) if plain else 0
    for job in keyed:
        try:
            given += hand_back(job, message=message, keep_place=True)
        except Exception:
            reconnect.log_failure(
                logger, job._state.db or "default", "handing back a held job failed jid=%s", job.jid
            )
    return given


def _hand_back_plain(plain: Sequence[Job], message: str | None) -> int:
    """:func:`hand_back_many`'s one ``UPDATE`` of the jobs without a unique key to
    hold again; return how many it handed back."""
    using = _database(plain[0])
    mine = functools.reduce(operator.or_, (Q(pk=j.pk, lease_token=j.lease_token) for j in plain))
    rows = Job.objects.using(using).filter(mine, status=JobStatus.PROCESSING)
    fields = unclaim_fields(plain[0], message, keep_place=True)
    # Per row, from the claim's attempt. ``status`` stays the first field: MySQL
    # assigns left to right, and ``attempt`` goes back after it.
    fields["status"] = Case(
        When(attempt__gt=1, then=Value(JobStatus.RETRY)), default=Value(JobStatus.INIT)
    )
    updated = int(retrying(using, rows.update, **fields))
    if updated < len(plain):
        lost = len(plain) - updated
        logger.warning("lease lost, hand_back not stored for %d of %d held jobs", lost, len(plain))
    if updated:
        for job in plain:
            _slot_freed(job)
        _back_below_floor(plain if updated == len(plain) else _waiting(using, plain))
    return updated


def _waiting(using: str, jobs: Sequence[Job]) -> list[Job]:
    """The jobs of ``jobs`` waiting now (one read), not those another worker runs."""
    pks = Job.objects.using(using).filter(pk__in=[j.pk for j in jobs], waiting=True)
    found = set(retrying(using, lambda: list(pks.values_list("pk", flat=True))))
    return [job for job in jobs if job.pk in found]


def _back_below_floor(jobs: Sequence[Job]) -> None:
    """Jobs handed back in their place may be below where this process's claims
    start (store/claimfloor.py): lower those floors, so the next claim takes them
    rather than the next look below finding them."""
    for job in jobs:
        claimfloor.floors.lower(
            _database(job), (job.priority, job.run_at, job.pk), job.queue, job.job_type
        )


def unclaim_fields(job: Job, message: str | None, *, keep_place: bool) -> dict[str, Any]:
    """The fields that undo ``job``'s claim: waiting again, its attempt not spent."""
    fields: dict[str, Any] = {
        "status": JobStatus.RETRY if job.attempt > 1 else JobStatus.INIT,
        "waiting": True,
        "attempt": F("attempt") - 1,
        "run_at": F("run_at") if keep_place else Now(),
        "updated_at": Now(),
        **_LEASE_CLEARED,
    }
    if message is not None:
        fields["message"] = message
    return fields


def unclaim(job: Job, rows: Any, fields: dict[str, Any], what: str) -> bool:
    """Write ``fields`` (:func:`unclaim_fields`) to ``rows`` (``job``'s guarded row),
    the unique key held again when it is an ``until_executing`` one."""
    if job.unique_mode == unique.UNTIL_EXECUTING and job.unique_key is not None:
        held = _write_holding_key(job, rows, fields, what)
        if held is not None:
            if held:
                _slot_freed(job)
            return held
    updated = retrying(_database(job), rows.update, **fields)
    if not updated and what:
        _log_lease_lost(job, what)
    if updated:
        _slot_freed(job)
    return bool(updated)


def _write_holding_key(job: Job, rows: Any, fields: dict[str, Any], what: str) -> bool | None:
    """:func:`hand_back`'s write to ``rows`` with the unique key held again while its
    TTL lasts; None (nothing written) if another job holds the key."""
    using = _database(job)
    hold = Case(When(unique_expires_at__gt=Now(), then=Value(hold_hash(job.unique_key or ""))))

    def write() -> int | None:
        try:  # its own savepoint; the hash is the only unique column this UPDATE sets
            with transaction.atomic(using=using):
                return int(rows.update(**fields, unique_key_hash=hold))
        except IntegrityError:
            return None

    updated = retrying(using, write)
    if updated is None:
        logger.info("unique key held by another job; handed back without it jid=%s", job.jid)
    elif not updated and what:
        _log_lease_lost(job, what)
    return None if updated is None else bool(updated)


def restart_fields(**changes: Any) -> dict[str, Any]:
    """Return the field updates that start a job again from attempt one, after ``changes``.

    The one meaning of "starts again", shared by the rerun a ``set`` asked for while
    the job ran, ``set`` on a dead letter (docs/design.md#ids) and "retry now" (admin, CLI):
    ``init`` and waiting, attempts from one, no lease, not finished, no cancel
    request, the id held again until the job finishes. ``changes`` come first:
    MySQL assigns left to right, so they may still read a column the restart clears.
    """
    return {
        **changes,
        "status": JobStatus.INIT,
        "waiting": True,
        "attempt": 0,
        "finished_at": None,
        "id_held_until": None,
        "cancel_requested": False,
        "updated_at": Now(),
        **_LEASE_CLEARED,
    }


def _rerun_fields(extra: dict[str, Any]) -> dict[str, Any]:
    return restart_fields(
        payload=F("rerun_payload"),
        run_at=Coalesce(F("rerun_at"), Now()),
        rerun=False,
        rerun_payload=None,
        rerun_at=None,
        started_at=None,
        steps=None,  # a new value: its handler starts its steps afresh
        **extra,
    )


def _write_or_rerun(
    job: Job, fields: dict[str, Any], what: str, rerun_extra: dict[str, Any]
) -> bool | None:
    """Store the end of ``job``'s run, or the rerun a ``set`` asked for while it ran.

    An id's ``set`` on a running job (docs/design.md#ids) means one run more after this one, with
    the
    set's value, whatever this run's outcome. ``ids.Queue.set`` flags it (``rerun``)
    with a guarded update; here the outcome's update filters ``rerun=False``, and when
    it updates nothing while the lease is still ours, a second guarded update moves
    the job back to waiting with the rerun's value and time, attempts from one. A
    ``set`` racing the end of the run thus lands either before (the rerun happens) or
    after (``set`` finds the job done or failed and acts on that). ``rerun_extra`` are
    the outcome's fields kept on the rerun (result, errors, message).

    Returns True if the outcome was stored, False if the job will run again, None if
    the lease was lost.
    """
    for _round in range(8):
        # hooks.write_end: the guarded UPDATE, with the end of a batch's or a
        # workflow's job in its transaction (docs/workflows.md).
        if retrying(
            _database(job), hooks.write_end, _guarded(job).filter(rerun=False), job, fields
        ):
            _slot_freed(job)
            return True
        if retrying(
            _database(job), _guarded(job).filter(rerun=True).update, **_rerun_fields(rerun_extra)
        ):
            logger.info("rerun requested, job waits again jid=%s type=%s", job.jid, job.job_type)
            notify_on_commit(_database(job), job.queue)
            return False
        if not retrying(_database(job), _guarded(job).exists):
            break
    _log_lease_lost(job, what)
    return None


def _slot_freed(job: Job) -> None:
    """Wake the idle workers of ``job``'s queue if its end freed a slot they wait for:
    a limit over it was at its concurrency at this process's last claim (docs/limits.md
    "Waiting"). A memory read; the wake-up is sent after the commit."""
    using = _database(job)
    if storage_limits.saturated(using, job.job_type, job.queue):
        notify_on_commit(using, job.queue)


def _write(job: Job, fields: dict[str, Any], what: str) -> bool:
    updated = retrying(_database(job), _guarded(job).update, **fields)
    if not updated:
        _log_lease_lost(job, what)
    return bool(updated)


def _log_lease_lost(job: Job, what: str) -> None:
    logger.warning(
        "lease lost, %s not stored jid=%s type=%s attempt=%s",
        what,
        job.jid,
        job.job_type,
        job.attempt,
    )

"""Taking back the jobs of dead workers: the lease reaper (docs/design.md#execution).

A job whose worker stopped heartbeating (SIGKILL, OOM, power loss, a partition) is
claimed by nobody once its lease expires by the database clock; every path that
reaps (``runworkers``' housekeeping, the gateway's claim route) calls
:func:`reap_expired`, which returns such jobs to the queue or to the dead letters
with the same guarded writes as :mod:`django_jobqueue.storage`.
"""

from __future__ import annotations

import logging
from typing import Any

from . import storage
from .core import reconnect
from .core.dbclock import Now
from .flows import hooks
from .models import Job, JobStatus
from .store import limits
from .store.errorlog import error_entry
from .store.jobstats import count_outcome
from .store.wakeups import notify_on_commit

__all__ = ["UNSTARTED_EXPIRY", "expired_before_start", "reap_expired"]

#: ``exception_class`` of the ``errors`` entry a job gets when its lease expired
#: before any start of it was stored (:func:`reap_expired` returns it unspent).
UNSTARTED_EXPIRY = "django_jobqueue.LeaseExpiredBeforeStart"


def expired_before_start(job: Job) -> bool:
    """Whether a lease of ``job`` already expired with no start stored.

    A worker then stores the job's start before it runs it, whatever its job type:
    a job of a short type starts without a write of its own (its start is stored
    with its next heartbeat or its outcome), so a job that ends its process before
    either is returned unspent once, never again (docs/prefetch.md).
    """
    errors = job.errors
    return bool(errors) and any(e.get("exception_class") == UNSTARTED_EXPIRY for e in errors)


logger = logging.getLogger(__name__)


def reap_expired(using: str, *, limit: int = 100) -> int:
    """Return jobs whose lease expired to the queue (or dead letter); return how many.

    A job whose worker died (SIGKILL, OOM, power loss) is taken back once its lease
    expires: ``retry``, due now, if it has retries left, else ``max_retry`` with the
    message "lease expired". Delivery is at least once.

    An attempt is spent only by a start (docs/design.md#execution): a job claimed
    but never started (``started_at`` NULL: held by a worker that died before it
    ran it, see :func:`storage.claim`'s ``started``) goes back to waiting in its place in
    claim order, its attempt count as before the claim, no backoff, as
    :func:`storage.hand_back` returns it, with one ``errors`` entry
    (:data:`UNSTARTED_EXPIRY`) that makes its next start a stored one.

    Bounded per statement, not per call: it reads at most ``limit`` expired jobs at a
    time and loops until a batch takes none back, so one call recovers a whole fleet
    of dead workers' jobs. A batch that takes none back ends it even if it read some:
    their leases moved (a heartbeat) or another reaper took them, and that reaper
    loops on.
    """
    total = 0
    while reaped := _reap_batch(using, limit):
        total += reaped
    return total


def _reap_batch(using: str, limit: int) -> int:
    """Take back at most ``limit`` jobs whose lease expired; return how many."""
    expired = reconnect.retry_on_disconnect(
        using,
        lambda: list(Job.objects.using(using).lease_expired().order_by("lease_expires_at")[:limit]),
    )
    reaped = 0
    for job in expired:
        stale = Job.objects.using(using).filter(
            pk=job.pk,
            status=JobStatus.PROCESSING,
            lease_token=job.lease_token,
            lease_expires_at__lt=Now(),
        )
        if job.started_at is None:
            # Never started: its holder died first. The guard on started_at loses
            # to a heartbeat that stored the start meanwhile (and moved the lease).
            unspent = storage.unclaim_fields(job, None, keep_place=True)
            # Remembered on the row: its next start is stored before it runs
            # (expired_before_start), so a job that kills its process before any
            # write is returned unspent once only.
            message = "lease expired before the job started; returned unspent"
            unspent["errors"] = [*job.errors, error_entry(job, None, message, UNSTARTED_EXPIRY)]
            if storage.unclaim(job, stale.filter(started_at__isnull=True), unspent, ""):
                reaped += 1
                logger.warning(
                    "lease expired before the job started, returned unspent "
                    "jid=%s type=%s owner=%s attempt=%s",
                    job.jid,
                    job.job_type,
                    job.lease_owner,
                    job.attempt - 1,
                )
            continue
        message = f"lease expired (worker {job.lease_owner} stopped heartbeating)"
        entry = error_entry(job, None, message)
        fields: dict[str, Any] = {
            "errors": [*job.errors, entry],
            "message": message,
            "updated_at": Now(),
            **storage.LEASE_ENDED,
        }
        retried = job.attempt <= job.max_retry
        if retried:
            fields.update(status=JobStatus.RETRY, waiting=True, run_at=Now())
        else:
            fields.update(
                status=JobStatus.MAX_RETRY, finished_at=Now(), **storage.dead_hold_until(job)
            )
        if storage.retrying(using, hooks.write_end, stale, job, fields):  # docs/workflows.md
            reaped += 1
            if limits.active(using).limited(job.job_type, job.queue):
                # Its limit's slot is free now (docs/limits.md): wake the waiting.
                notify_on_commit(using, job.queue)
            count_outcome(job, "retried" if retried else "failed", timed=False)
            logger.warning(
                "lease expired, job taken back jid=%s type=%s owner=%s",
                job.jid,
                job.job_type,
                job.lease_owner,
            )
    return reaped

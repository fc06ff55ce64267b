"""The claim (docs/design.md#creation): due jobs moved to ``processing`` under a fresh
lease, in claim order, by one short transaction.

One statement of :mod:`django_jobqueue.storage_sql` where the database has one (the
limits' claim of :mod:`django_jobqueue.storage_limits` while a flow-control limit is
active), else the ORM's ``select_for_update(skip_locked=True)`` and a guarded update.
A claim that meets a dead connection is repeated once, after taking back what its lost
first try leased (:func:`claimed_under`). :mod:`django_jobqueue.storage` re-exports
both functions: callers use ``storage.claim``.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Collection, Sequence
from datetime import timedelta

from django.db import connections, transaction
from django.db.models import F

from . import storage_limits, storage_sql
from .core import reconnect
from .core.conf import get_config
from .core.dbclock import Now
from .models import Job, JobStatus, QueuePause
from .store import claimfloor, limits, locks, unique
from .store.jobstats import count_pickups
from .store.pauses import paused_queues

__all__ = ["claim", "claim_recheck_ms", "claimed_under"]


def claim(
    using: str,
    *,
    owner: str,
    limit: int = 1,
    queues: Sequence[str] | None = None,
    exclude_types: Collection[str] = (),
    lease_ms: int | None = None,
    started: bool = True,
) -> list[Job]:
    """Claim up to ``limit`` due jobs for ``owner`` and return them, lease set.

    Parameters
    ----------
    using:
        Database alias of the jobs.
    owner:
        The claiming worker's name (``host:pid:thread``), stored as ``lease_owner``.
    limit:
        Most jobs to claim, >= 1.
    queues:
        Queues to claim from; None: every queue.
    exclude_types:
        Job types not to claim (those at their ``concurrent`` limit,
        Governor.Spawn's ignore list).
    lease_ms:
        Lease of the claimed jobs in ms; None: ``JOBQUEUE["LEASE_MS"]``.
    started:
        True: the jobs start now (``started_at`` is the claim's time; a gateway
        worker's claim). False: claimed, not started yet (``started_at`` NULL):
        the claimer records each start with :func:`mark_started`, or with the
        next :func:`heartbeat` or outcome; until then :func:`~django_jobqueue.reaping.reap_expired`
        returns the job unspent (docs/design.md#execution).

    Returns
    -------
    list[Job]
        The claimed jobs in claim order, each ``processing`` with ``attempt``
        incremented and a ``lease_token`` that guards its later updates. While any
        flow-control limit is active (docs/limits.md), the claim takes only what every
        limit over a job allows, in the same transaction
        (:mod:`django_jobqueue.storage_limits`); with none, it is the one statement
        of :mod:`django_jobqueue.storage_sql`. Jobs of a
        paused queue are never claimed: the claim statement itself leaves out the
        queues of the pause table, so a job enqueued after a pause committed (in any
        process) waits until the resume. The process's cache of the paused set
        (:func:`~django_jobqueue.store.pauses.paused_queues`, read at most every half
        second) only spares the statement when every queue asked for is paused.

    Implements: docs/design.md#creation.
    """
    paused = reconnect.retry_on_disconnect(using, paused_queues, using)
    exclude_queues: list[str] = []
    if paused:
        if queues:
            asked = queues
            queues = [name for name in queues if name not in paused]
            if not queues:
                # Every queue asked for is paused: nothing to claim, and nothing below a
                # floor of these queues either until the resume (store/claimfloor.py).
                if connections[using].vendor == "postgresql":
                    claimfloor.floors.looked_from_start(
                        claimfloor.filter_set(using, asked, (), exclude_types)
                    )
                return []
        else:
            exclude_queues = sorted(paused)
    token = uuid.uuid4().hex
    view: limits.LimitsView | None = reconnect.retry_on_disconnect(using, limits.active, using)
    if view is not None and not storage_limits.applies(view, queues, exclude_types):
        view = None
    args = (
        using, owner, limit, queues, exclude_types, lease_ms, exclude_queues, token, started, view,
    )  # fmt: skip

    def claim_once() -> list[Job]:
        return locks.retry_when_locked(using, functools.partial(_claim, *args))

    def claim_again() -> list[Job]:
        # The first try met a dead connection: if its COMMIT landed, its rows are
        # leased under this token (a read over the few processing rows, on this
        # rare path only); else nothing is: claim afresh, with the same token.
        return claimed_under(using, token) or claim_once()

    jobs: list[Job] = reconnect.retry_on_disconnect(using, claim_once, repeat=claim_again)
    count_pickups(using, jobs)
    return jobs


def claimed_under(using: str, token: str) -> list[Job]:
    """Return the jobs leased under claim ``token`` (``processing``), in claim order.

    A claim repeated after a disconnect calls this first, so a claim whose first
    try committed is not made twice. When the first try commits only after the
    repeat has looked (the old session still ran on the server), its rows stay
    leased to a claim nobody knows of, and are reaped once their lease expires
    (:func:`~django_jobqueue.reaping.reap_expired`), counting that attempt.
    """
    rows = Job.objects.using(using).filter(status=JobStatus.PROCESSING, lease_token=token)
    return sorted(rows, key=lambda job: (job.priority, job.run_at, job.pk))


def claim_recheck_ms(using: str) -> int | None:
    """Return ms until a claim on ``using`` should run again to see what a short
    claim did not.

    While dead index entries slow PostgreSQL's claim, a claim may start at a floor
    and skip the rows below it (docs/horizon.md); a short answer from such a claim
    proves nothing about them until a look below the floor (a read in the process's
    looker thread) has been there. 0: claim again now (the next claim sends that
    look, or a look found rows there); None: nothing is left unproven (always so on
    MariaDB and SQLite). A worker that found nothing sleeps no longer than this, and
    a burst run does not end before it. Only the last claim's filters count; a
    limits' claim (no floor) and a claim of paused queues only prove theirs.
    """
    return claimfloor.floors.recheck_ms(using)


def _claim(
    using: str,
    owner: str,
    limit: int,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    lease_ms: int | None,
    exclude_queues: Sequence[str],
    token: str,
    started: bool,
    view: limits.LimitsView | None,
) -> list[Job]:
    lease = timedelta(milliseconds=lease_ms or get_config().LEASE_MS)
    if storage_sql.supported(using):
        # One statement per vendor; while a limit is active, the limits' claim.
        claim_rows = (
            functools.partial(storage_limits.claim_limited, view=view)
            if view is not None
            else storage_sql.claim_rows
        )
        jobs: list[Job] = claim_rows(
            using,
            owner=owner[:200],
            token=token,
            limit=limit,
            queues=queues,
            exclude_types=exclude_types,
            exclude_queues=exclude_queues,
            lease=lease,
            started=started,
        )
        if view is not None and connections[using].vendor == "postgresql":
            # The limits' claim has no floor: it looked from the start, so what a short
            # claim above the floor left unproven is proven (store/claimfloor.py).
            claimfloor.floors.looked_from_start(
                claimfloor.filter_set(using, queues, exclude_queues, exclude_types)
            )
        return jobs
    with transaction.atomic(using=using):
        due = Job.objects.using(using).filter(waiting=True, run_at__lte=Now())
        if queues:
            due = due.filter(queue__in=list(queues))
        if exclude_queues:
            due = due.exclude(queue__in=list(exclude_queues))
        # Read by the claim's own statement, as storage_sql's claims do.
        due = due.exclude(queue__in=QueuePause.objects.using(using).values("queue"))
        if exclude_types:
            due = due.exclude(job_type__in=list(exclude_types))
        due = due.order_by("priority", "run_at", "id")
        if connections[using].features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        pks = list(due.values_list("pk", flat=True)[:limit])
        if not pks:
            return []
        Job.objects.using(using).filter(pk__in=pks, waiting=True).update(
            status=JobStatus.PROCESSING,
            waiting=False,
            attempt=F("attempt") + 1,
            lease_owner=owner[:200],
            lease_token=token,
            lease_expires_at=Now() + lease,
            heartbeat_at=Now(),
            started_at=Now() if started else None,
            updated_at=Now(),
            # docs/design.md#unique-keys: an until_executing lock frees the moment a worker claims
            # the job.
            **unique.claim_release(),
        )
        claimed = {
            job.pk: job for job in Job.objects.using(using).filter(pk__in=pks, lease_token=token)
        }
    return [claimed[pk] for pk in pks if pk in claimed]

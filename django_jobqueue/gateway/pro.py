"""Pro routes (docs/design.md#core-and-pro): unique locks and bulk operations, 402 without a
licence.

Each route checks the licence first (``licence.require_pro``), then the ``admin``
scope and the queue. ``DELETE /sdk/unique-locks/{queue}/{key}`` releases a held unique
key by ending its hold on the holder's row (the hash set to NULL), as the claim of an
``until_executing`` job or the success of an ``until_executed`` one does; the job
itself is left alone.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.http import HttpRequest
from ninja import Query, Router, Schema
from pydantic import ConfigDict, Field

from ..core.dbclock import Now
from ..core.exceptions import JobQueueError
from ..core.validation import check_queue, check_text
from ..enqueue import jobs_database
from ..models import DEAD_STATUSES, Job, JobStatus, hold_hash
from ..operations import act_in_batches
from ..store import states
from ..store.audit import run_audited
from ..store.jobfilter import FilterError, parse_filter
from ..store.licence import require_pro
from .auth import actor_of, require, token_of
from .errors import bad_parameter, from_jobqueue_error
from .schemas import ERRORS, BulkIn, BulkOut, UniqueLocksOut, UniqueReleaseOut

__all__ = ["router"]

router = Router(tags=["pro"])


class LocksQuery(Schema):
    """Filters of ``GET /sdk/unique-locks``."""

    model_config = ConfigDict(extra="forbid")

    queue: str | None = Field(None, max_length=100)
    limit: int = Field(100, ge=1, le=1000)
    cursor: str | None = Field(None, max_length=20, pattern=r"^[0-9]{1,18}$")


def _checked_queue(request: HttpRequest, queue: str, *, in_body: bool = False) -> None:
    """Refuse a malformed ``queue`` (a path or query parameter's: ``400
    bad_request``, as ninja's own parameter checks; a body field's: ``422``), then
    check the token."""
    try:
        check_queue(queue)
    except JobQueueError as exc:
        if in_body:
            raise from_jobqueue_error(exc, field="queue") from exc
        raise bad_parameter(exc, "queue") from exc
    require(request, "admin", [queue])


@router.get(
    "/unique-locks",
    response={200: UniqueLocksOut, **ERRORS},
    summary="Who holds which unique key (Pro)",
    operation_id="unique_locks",
)
def unique_locks(request: HttpRequest, filters: Query[LocksQuery]) -> Any:
    """Held keys of the queues this token may see, by job, with mode and expiry."""
    require_pro("the gateway's unique-locks route")
    require(request, "admin")
    if filters.queue is not None:
        _checked_queue(request, filters.queue)
    from ..store.apitokens import queue_allowed
    from .auth import token_of

    token = token_of(request)
    held = (
        Job.objects.using(jobs_database())
        .filter(unique_key_hash__isnull=False, unique_expires_at__gt=Now())
        .order_by("pk")
    )
    if filters.queue is not None:
        held = held.filter(queue=filters.queue)
    if filters.cursor is not None:
        held = held.filter(pk__gt=int(filters.cursor))
    rows = list(held[: filters.limit + 1])
    more = len(rows) > filters.limit
    rows = rows[: filters.limit]
    locks = [
        {
            "queue": row.queue,
            "unique_key": row.unique_key or "",
            "mode": row.unique_mode or "while_locked",
            "jid": row.jid,
            "job_type": row.job_type,
            "status": row.status,
            "expires_at": row.unique_expires_at,
        }
        for row in rows
        if queue_allowed(token, row.queue)
    ]
    return {"locks": locks, "next": str(rows[-1].pk) if more and rows else None}


@router.delete(
    "/unique-locks/{queue}/{path:key}",
    response={200: UniqueReleaseOut, **ERRORS},
    summary="Release a held unique key (Pro)",
    operation_id="unique_lock_release",
)
def release_unique_lock(request: HttpRequest, queue: str, key: str) -> Any:
    """``released`` false when no job holds the key."""
    require_pro("the gateway's unique-locks route")
    _checked_queue(request, queue)
    try:
        check_text(key, "A unique_key")
    except JobQueueError as exc:
        raise bad_parameter(exc, "key") from exc
    using = jobs_database()
    holders = Job.objects.using(using).filter(queue=queue, unique_key_hash=hold_hash(key))
    jid = holders.values_list("jid", flat=True).first()
    released = bool(jid) and bool(
        run_audited(
            using,
            lambda: holders.filter(jid=jid).update(unique_key_hash=None, updated_at=Now()),
            actor_of(token_of(request)),
            "release",
            target=f"unique key of job {jid}",
            counts=lambda released: {"released": released},
            jids=[jid] if jid else [],
        )
    )
    return {"released": released, "jid": jid}


@router.post(
    "/jobs/bulk",
    response={200: BulkOut, **ERRORS},
    summary="Retry, cancel or delete every job matching a filter (Pro)",
    operation_id="jobs_bulk",
)
def bulk(request: HttpRequest, body: BulkIn) -> Any:
    """Retry (dead letters and scheduled jobs), cancel (waiting and running ones) or
    delete (all but running ones) every job the filter selects, in audited batches.

    ``filter`` is the filter language (docs/console.md "Search syntax"); a filter that
    cannot be read is ``422 invalid_request`` (``reason`` ``invalid_filter``). A token
    limited to some queues acts on those queues' jobs only, and is refused (403) a
    ``queue`` it may not use.
    """
    require_pro("the gateway's bulk route")
    if body.queue is not None:
        _checked_queue(request, body.queue, in_body=True)
    token = require(request, "admin")
    try:
        query = parse_filter(body.filter or "")
    except FilterError as exc:
        raise from_jobqueue_error(exc, field="filter") from exc
    for queue in query.queues:
        _checked_queue(request, queue, in_body=True)
    jobs = query.apply(Job.objects.using(jobs_database()).all())
    if body.queue is not None:
        jobs = jobs.filter(queue=body.queue)
    elif not query.queues:
        jobs = jobs.filter(_allowed_queues(token.queues))
    if body.job_type is not None:
        jobs = jobs.filter(job_type=body.job_type)
    if body.jids is not None:
        jobs = jobs.filter(jid__in=[jid for jid in body.jids if jid.isalnum()])
    if body.state == "failed":
        jobs = jobs.filter(status__in=DEAD_STATUSES)
    elif body.state == "running":
        jobs = jobs.filter(status=JobStatus.PROCESSING)
    elif body.state == "scheduled":
        jobs = jobs.filter(states.state_filter(states.SCHEDULED))
    elif body.state == "waiting":
        jobs = jobs.filter(states.state_filter(states.WAITING))
    described = ", ".join(
        f"{name}={value}"
        for name, value in (("queue", body.queue), ("type", body.job_type), ("state", body.state))
        if value
    )
    if body.filter:
        described = ", ".join(part for part in (described, query.describe()) if part)
    detail = act_in_batches(
        jobs,
        body.action,
        actor_of(token),
        target=f"jobs matching {described or 'every job'}",
    )
    keys = _COUNT_KEYS[body.action]
    detail = {key: detail.get(key, 0) for key in keys}
    changed = sum(number for key, number in detail.items() if key != "running")
    return {"action": body.action, "changed": changed, "detail": detail}


#: The counts each action answers; ``changed`` sums them (a delete's ``running``,
#: jobs left alone, is not a change).
_COUNT_KEYS = {
    "retry": ("dead", "waiting"),
    "cancel": ("cancelled", "requested"),
    "delete": ("deleted", "running"),
}


def _allowed_queues(patterns: list[str]) -> Q:
    """The jobs of the queues a token's ``patterns`` allow (exact or ``prefix*``)."""
    allowed = Q(pk__in=[])
    for pattern in patterns:
        if pattern == "*":
            return Q()
        if pattern.endswith("*"):
            allowed |= Q(queue__startswith=pattern[:-1])
        else:
            allowed |= Q(queue=pattern)
    return allowed

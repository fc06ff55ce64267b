"""Routes on jobs: enqueue one, a batch, read one, cancel it, retry it.

Enqueue goes through the producer API's own validation (``build_job``) and create
path (``create_job``), the ones ``enqueue_job`` uses; each option is checked first by
the same functions with its field named, so a 422 says which field. A job with an
``id`` (docs/design.md#ids) is created holding it, as ``add`` does: a held id is the error
``409 duplicate_job`` with the holder's jid (for "add unless taken, answer false",
use ``POST /sdk/queues/{queue}/ids/{id}/add``).
"""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Router, Status

from ..bulk import create_many
from ..core.conf import get_config
from ..core.exceptions import InvalidOption, InvalidRequest, JobQueueError, ProRequired
from ..core.origin import enqueued_by
from ..core.validation import check_delay, check_json, check_queue, check_text
from ..enqueue import EnqueueResult, JobSpec, build_job, create_job, jobs_database
from ..flows.links import create_linked, pop_link
from ..models import Job, JobStatus
from ..operations import act_in_batches
from ..store import states
from ..store.registry import get_job_description
from .auth import actor_of, origin_of, require, token_of
from .errors import GatewayError, from_jobqueue_error
from .schemas import (
    ERRORS,
    BatchIn,
    BatchOut,
    CancelOut,
    EnqueueOut,
    JobIn,
    JobOut,
    RetryOut,
)

__all__ = ["find_job", "job_state", "router", "spec_of"]

router = Router(tags=["jobs"])

_JID = re.compile(r"[0-9a-f]{32}")
#: Option names, in the order a message of ``build_job`` is searched for the field.
_FIELDS = (
    "limit_key", "unique_ttl_ms", "unique_mode", "unique_key", "expires_ms", "timeout_ms",
    "max_retry", "priority", "delay", "queue", "payload", "job_type",
)  # fmt: skip


def _guess_field(exc: JobQueueError) -> str | None:
    text = str(exc)
    if text.startswith("A job id"):
        return "id"
    for name in _FIELDS:
        if name in text:
            return "run_at" if name == "delay" and "either delay or at" in text else name
    return None


def spec_of(job: JobIn) -> JobSpec:
    """Validate one job of a request into a :class:`JobSpec`, naming the bad field.

    Raises
    ------
    JobQueueError
        ``InvalidRequest`` and its kinds, or ``ProRequired``; ``.field`` names the
        field at fault (set on the exception).
    """
    checks: list[tuple[str, Any]] = [
        ("job_type", lambda: get_job_description(job.job_type)),
        ("queue", lambda: job.queue is None or check_queue(job.queue)),
        ("payload", lambda: check_json(job.payload, f"The payload of a {job.job_type!r} job")),
        ("id", lambda: job.id is None or check_text(job.id, "A job id")),
        ("unique_key", lambda: job.unique_key is None or check_text(job.unique_key, "unique_key")),
        ("delay", lambda: job.delay is None or check_delay(job.delay)),
    ]
    for field, check in checks:
        try:
            check()
        except JobQueueError as exc:
            exc.field = field  # type: ignore[attr-defined]
            raise
    if job.delay is not None and job.run_at is not None:
        both = InvalidOption("Give either delay or run_at, not both.")
        both.field = "run_at"  # type: ignore[attr-defined]
        raise both
    try:
        return build_job(
            job.queue,
            job.job_type,
            job.payload,
            delay=job.delay,
            at=job.run_at,
            priority=job.priority,
            max_retry=job.max_retry,
            expires_ms=job.expires_ms,
            timeout_ms=job.timeout_ms,
            job_id=job.id,
            unique_key=job.unique_key,
            unique_mode=job.unique_mode,
            unique_ttl_ms=job.unique_ttl_ms,
            limit_key=job.limit_key,
        )
    except ProRequired as exc:
        exc.field = "unique_mode"  # type: ignore[attr-defined]
        raise
    except InvalidRequest as exc:
        exc.field = _guess_field(exc)  # type: ignore[attr-defined]
        raise


def _refusal(exc: JobQueueError, index: int | None = None) -> GatewayError:
    field = getattr(exc, "field", None)
    if index is not None and field:
        field = f"jobs[{index}].{field}"
    elif index is not None:
        field = f"jobs[{index}]"
    return from_jobqueue_error(exc, field=field, index=index)


@router.post(
    "/jobs",
    response={200: EnqueueOut, 201: EnqueueOut, **ERRORS},
    summary="Enqueue one job",
    operation_id="enqueue",
)
def enqueue(request: HttpRequest, spec: JobIn) -> Any:
    """Enqueue one job: 201 ``enqueued``, or 200 ``deduplicated`` with the holder's jid."""
    token = require(request, "produce")
    try:
        with enqueued_by(origin_of(token)):
            job = spec_of(spec)
    except JobQueueError as exc:
        raise _refusal(exc) from exc
    require(request, "produce", [job.queue])
    try:
        result = _create(job, spec)
    except JobQueueError as exc:
        raise _refusal(exc) from exc
    return Status(201 if result.status == "enqueued" else 200, dict(result))


def _create(job: JobSpec, spec: JobIn) -> EnqueueResult:
    """Create ``job``, joined to ``spec.batch`` and waiting for ``spec.after`` if given
    (docs/workflows.md; the path of ``enqueue_job(..., batch=, after=)``).

    Raises
    ------
    JobQueueError
        As ``create_job``; ``InvalidRequest`` with ``.field`` ``batch`` or ``after``
        for a batch or an upstream jid that does not exist. Nothing is written then.
    """
    if spec.batch is None and spec.after is None and spec.on_upstream_failure is None:
        return create_job(job)
    if spec.on_upstream_failure is not None and not spec.after:
        both = InvalidOption("on_upstream_failure is the policy of after's edges: give after.")
        both.field = "on_upstream_failure"  # type: ignore[attr-defined]
        raise both
    link = pop_link(
        {
            "batch": spec.batch,
            "after": spec.after or (),
            "on_upstream_failure": spec.on_upstream_failure or "cancel",
        }
    )
    try:
        return create_linked([job], link, many=False)[0]
    except InvalidRequest as exc:
        exc.field = "after" if str(exc).startswith("after") else "batch"  # type: ignore[attr-defined]
        raise


@router.post(
    "/jobs/batch",
    response={200: BatchOut, **ERRORS},
    summary="Enqueue up to MAX_BATCH jobs, all or nothing",
    operation_id="enqueue_batch",
)
def enqueue_batch(request: HttpRequest, batch: BatchIn) -> Any:
    """Enqueue every job or none: the first refused job (by index) refuses the batch.

    A deduplicated job is an answer in its slot. A Pro-gated job without a licence
    refuses the batch with 402, an invalid one with 422 (so is an id the batch gives
    twice on one queue), an id held by a job of the table with 409; nothing is
    stored then.
    """
    token = require(request, "produce")
    limit = get_config().GATEWAY.MAX_BATCH
    if len(batch.jobs) > limit:
        raise GatewayError(
            "invalid_request",
            f"A batch holds at most {limit} jobs: got {len(batch.jobs)}; split it.",
            field="jobs",
        )
    specs: list[JobSpec] = []
    for index, item in enumerate(batch.jobs):
        for name in ("batch", "after", "on_upstream_failure"):
            if getattr(item, name) is not None:
                raise GatewayError(
                    "invalid_request",
                    f"POST /sdk/jobs/batch takes no {name}: enqueue such a job with "
                    "POST /sdk/jobs, or a graph with POST /sdk/workflows.",
                    field=f"jobs[{index}].{name}",
                    extra={"index": index, "reason": "invalid_option"},
                )
    with enqueued_by(origin_of(token)):
        for index, item in enumerate(batch.jobs):
            try:
                specs.append(spec_of(item))
            except JobQueueError as exc:
                raise _refusal(exc, index) from exc
    _refuse_repeated_ids(specs)
    _require_queues(request, specs)
    try:
        # Bulk enqueue: every lock taken once in sorted order, multi-row INSERTs, one
        # wake-up per queue. A held id refuses the batch as it refuses POST /sdk/jobs
        # (docs/design.md#creation), decided under the batch's locks.
        results = create_many(specs, refuse_held_ids=True)
    except JobQueueError as exc:
        raise _refusal(exc, getattr(exc, "index", None)) from exc
    return {"results": [dict(result) for result in results]}


def _require_queues(request: HttpRequest, specs: list[JobSpec]) -> None:
    """Refuse a batch naming a queue the token is not allowed, by its first such job.

    Raises
    ------
    GatewayError
        ``forbidden`` (403), ``field`` ``jobs[<index>].queue`` and ``index`` the first job
        on a refused queue, as a batch's other refusals name theirs (docs/gateway.md
        "Errors").
    """
    seen: set[str] = set()
    for index, spec in enumerate(specs):
        if spec.queue in seen:
            continue
        seen.add(spec.queue)
        try:
            require(request, "produce", [spec.queue])
        except GatewayError as exc:
            raise GatewayError(
                "forbidden",
                exc.detail,
                field=f"jobs[{index}].queue",
                extra={"index": index},
            ) from exc


def _refuse_repeated_ids(specs: list[JobSpec]) -> None:
    """Refuse a batch that gives one (queue, id) to two of its jobs, by the later one.

    Raises
    ------
    GatewayError
        ``invalid_request`` (422), ``field`` the later job's ``id``, before anything
        is written.
    """
    first: dict[tuple[str, str], int] = {}
    for index, spec in enumerate(specs):
        if spec.job_id is None:
            continue
        earlier = first.setdefault((spec.queue, spec.job_id), index)
        if earlier != index:
            raise GatewayError(
                "invalid_request",
                f"Job id {spec.job_id!r} on queue {spec.queue!r} is also given to "
                f"jobs[{earlier}]; a batch names each id once.",
                field=f"jobs[{index}].id",
                extra={"index": index, "reason": "invalid_request"},
            )


def find_job(request: HttpRequest, jid: str, scope: str) -> Job:
    """Return the job ``jid`` if the token has ``scope`` and its queue.

    Raises
    ------
    GatewayError
        ``not_found`` (404) for a jid that is malformed or unknown, ``forbidden``.
    """
    require(request, scope)
    job = None
    if _JID.fullmatch(jid):
        job = Job.objects.using(jobs_database()).filter(jid=jid).first()
    if job is None:
        raise GatewayError("not_found", f"No job has jid {jid!r}.", field="jid")
    require(request, scope, [job.queue])
    return job


def job_state(job: Job) -> str:
    """The state word (docs/design.md#states) of ``job``: scheduled, waiting, running,
    failed, done or cancelled, from the one table in :mod:`django_jobqueue.store.states`."""
    return states.state_word(job, timezone.now())


def _last_error(job: Job) -> dict[str, Any] | None:
    if not job.errors or not isinstance(job.errors, list) or not isinstance(job.errors[-1], dict):
        return None
    entry = job.errors[-1]
    return {
        "attempt": entry.get("attempt"),
        "message": str(entry.get("message", "")),
        "exception_class": str(entry.get("exception_class", "")),
        "at": entry.get("at"),
    }


@router.get(
    "/jobs/{jid}", response={200: JobOut, **ERRORS}, summary="Read a job", operation_id="get_job"
)
def get_job(request: HttpRequest, jid: str) -> Any:
    """A job's state, attempts, times, result or last error (not a secure one's data)."""
    job = find_job(request, jid, "read")
    return {
        "jid": job.jid,
        "queue": job.queue,
        "job_type": job.job_type,
        "id": job.job_id,
        "status": job.status,
        "state": job_state(job),
        "attempt": job.attempt,
        "max_retry": job.max_retry,
        "priority": job.priority,
        "secure": job.secure,
        "payload": None if job.secure else job.payload,
        "result": None if job.secure else job.result,
        "last_error": _last_error(job),
        "cancel_requested": job.cancel_requested,
        "run_at": job.run_at,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "expires_at": job.expires_at,
    }


@router.post(
    "/jobs/{jid}/cancel",
    response={200: CancelOut, **ERRORS},
    summary="Cancel a waiting job, or ask a running one to stop",
    operation_id="cancel_job",
)
def cancel_job(request: HttpRequest, jid: str) -> Any:
    """``cancelled``: it was waiting and is now cancelled; ``cancel_requested``: it runs."""
    job = find_job(request, jid, "produce")
    counts = act_in_batches(
        Job.objects.using(job._state.db).filter(pk=job.pk),
        "cancel",
        actor_of(token_of(request)),
        target=f"job {job.jid}",
    )
    return {
        "cancelled": counts.get("cancelled", 0) > 0,
        "cancel_requested": counts.get("requested", 0) > 0
        or (job.status == JobStatus.PROCESSING and job.cancel_requested),
    }


@router.post(
    "/jobs/{jid}/retry",
    response={200: RetryOut, **ERRORS},
    summary="Run a dead letter again, or a scheduled job now",
    operation_id="retry_job",
)
def retry_job(request: HttpRequest, jid: str) -> Any:
    """A dead letter starts again from attempt one; a scheduled job becomes due now."""
    job = find_job(request, jid, "admin")
    counts = act_in_batches(
        Job.objects.using(job._state.db).filter(pk=job.pk),
        "retry",
        actor_of(token_of(request)),
        target=f"job {job.jid}",
    )
    return {"retried": sum(counts.values()) > 0}

"""The id verbs over HTTP: add, set, update, cancel, get, and list.

Each route calls :class:`django_jobqueue.ids.Queue` and gives the seed's answers: an
``add`` that adds nothing is ``200 {"added": false}``, not an error; ``get`` of a free
id is ``404 not_found``. The id is the rest of the path (it may hold ``/``; escape
``?``, ``#`` and ``%``); the queue is one path segment. ``add`` and ``set`` make jobs
of ``job_type``, or of the queue's one job type when it is omitted.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import ConfigDict, Field

from ..core.exceptions import InvalidPayload, JobQueueError, UnknownJobType
from ..core.origin import enqueued_by
from ..core.validation import check_queue, check_text
from ..ids import JobView, Queue
from ..models import ApiToken, Job
from ..overview import jobs_database
from ..store import pauses
from ..store.audit import run_audited
from .auth import actor_of, origin_of, require
from .errors import GatewayError, bad_parameter, from_jobqueue_error
from .schemas import (
    ERRORS,
    AddedOut,
    CancelledOut,
    IdJobOut,
    IdValueIn,
    PageOut,
    SetOut,
    UpdatedOut,
)

__all__ = ["router"]

router = Router(tags=["ids"])


class ListQuery(Schema):
    """Filters of ``GET /sdk/queues/{queue}/jobs``."""

    model_config = ConfigDict(extra="forbid")

    prefix: str | None = Field(None, max_length=1024)
    state: str | None = Field(None, description="scheduled, waiting, running, failed, ...")
    limit: int = Field(100, ge=1, le=1000)
    cursor: str | None = Field(None, max_length=4096, description="The next of a page.")


def _checked(request: HttpRequest, scope: str, queue: str, job_id: str | None = None) -> ApiToken:
    """Refuse a malformed path ``queue`` or ``id`` (``400 bad_request`` naming it),
    then check the token's ``scope`` on the queue; return the token."""
    try:
        check_queue(queue)
    except JobQueueError as exc:
        raise bad_parameter(exc, "queue") from exc
    if job_id is not None:
        try:
            check_text(job_id, "A job id")
        except JobQueueError as exc:
            raise bad_parameter(exc, "id") from exc
    return require(request, scope, [queue])


#: Words of an ``ids`` error message, and the request field each names.
_WORDS = (("job type", "job_type"), ("delay", "delay"), ("at must", "at"))


def _call(field: str | None, func: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return func(*args, **kwargs)
    except InvalidPayload as exc:
        raise from_jobqueue_error(exc, field="value") from exc
    except UnknownJobType as exc:
        raise from_jobqueue_error(exc, field="job_type") from exc
    except JobQueueError as exc:
        text = str(exc)
        named = next((name for word, name in _WORDS if word in text), field)
        raise from_jobqueue_error(exc, field=named) from exc


#: How a message of ``Queue.list`` starts, and the query parameter it names.
_QUERY_STARTS = (
    ("after=", "cursor"), ("state ", "state"), ("limit ", "limit"), ("A prefix", "prefix"),
)  # fmt: skip


def _bad_query(exc: JobQueueError, filters: ListQuery) -> GatewayError:
    """Return the ``400 bad_request`` of a list's query that ``Queue.list`` refused.

    The detail of a bad cursor names the query parameter, ``cursor``, not the
    ``after`` argument of ``Queue.list``.
    """
    text = str(exc)
    field = next((name for start, name in _QUERY_STARTS if text.startswith(start)), None)
    if field == "cursor":
        text = (
            f"cursor={filters.cursor!r} is not a cursor of this list; pass the next of a "
            "page listed with the same state."
        )
    return GatewayError("bad_request", text, field=field, extra={"reason": exc.code})


def _handle(queue: str, job_type: str | None) -> Queue:
    return Queue(queue, job_type=job_type)


def _view(view: JobView, secure: bool) -> dict[str, Any]:
    data = {name: getattr(view, name) for name in IdJobOut.model_fields}
    if secure:
        data["value"] = None
        data["result"] = None
    return data


def _secure_jids(queue: str, jids: list[str]) -> set[str]:
    from ..enqueue import jobs_database

    if not jids:
        return set()
    rows = Job.objects.using(jobs_database()).filter(queue=queue, jid__in=jids, secure=True)
    return set(rows.values_list("jid", flat=True))


@router.post(
    "/queues/{queue}/ids/{path:id}/add",
    response={200: AddedOut, 201: AddedOut, **ERRORS},
    summary="Add a job unless its id is taken",
    operation_id="id_add",
)
def id_add(request: HttpRequest, queue: str, id: str, body: IdValueIn) -> Any:  # noqa: A002
    """201 ``{"added": true}``, or 200 ``{"added": false}`` when a job holds the id."""
    token = _checked(request, "produce", queue, id)
    with enqueued_by(origin_of(token)):
        added = _call(
            None, _handle(queue, body.job_type).add, body.value, id=id, at=body.at, delay=body.delay
        )
    return Status(201 if added else 200, {"added": added})


@router.post(
    "/queues/{queue}/ids/{path:id}/set",
    response={200: SetOut, **ERRORS},
    summary="Make the id's job run with this value, whatever its state",
    operation_id="id_set",
)
def id_set(request: HttpRequest, queue: str, id: str, body: IdValueIn) -> Any:  # noqa: A002
    """Always ``{"set": true}``: added, replaced, rerun or restarted (docs/design.md#ids)."""
    token = _checked(request, "produce", queue, id)
    with enqueued_by(origin_of(token)):
        _call(None, _handle(queue, body.job_type).set, id, body.value, at=body.at, delay=body.delay)
    return {"set": True}


@router.post(
    "/queues/{queue}/ids/{path:id}/update",
    response={200: UpdatedOut, **ERRORS},
    summary="Change a scheduled or waiting job's value and time",
    operation_id="id_update",
)
def id_update(request: HttpRequest, queue: str, id: str, body: IdValueIn) -> Any:  # noqa: A002
    """``{"updated": false}`` when there is none, or it runs, failed or is done."""
    _checked(request, "produce", queue, id)
    updated = _call(
        None, _handle(queue, body.job_type).update, id, body.value, at=body.at, delay=body.delay
    )
    return {"updated": updated}


@router.post(
    "/queues/{queue}/ids/{path:id}/cancel",
    response={200: CancelledOut, **ERRORS},
    summary="Remove the id's waiting or failed job, or stop its running one",
    operation_id="id_cancel",
)
def id_cancel(request: HttpRequest, queue: str, id: str) -> Any:  # noqa: A002
    """``{"cancelled": false}`` when there was none, or it is done."""
    _checked(request, "produce", queue, id)
    return {"cancelled": _call("id", _handle(queue, None).cancel, id)}


@router.get(
    "/queues/{queue}/ids/{path:id}",
    response={200: IdJobOut, **ERRORS},
    summary="The job that holds the id",
    operation_id="id_get",
)
def id_get(request: HttpRequest, queue: str, id: str) -> Any:  # noqa: A002
    """The job (value and result null for a secure job type), or 404 when the id is free."""
    _checked(request, "read", queue, id)
    view = _call("id", _handle(queue, None).get, id)
    if view is None:
        raise GatewayError("not_found", f"No job holds id {id!r} on queue {queue!r}.", field="id")
    return _view(view, bool(_secure_jids(queue, [view.jid])))


@router.get(
    "/queues/{queue}/jobs",
    response={200: PageOut, **ERRORS},
    summary="One page of the queue's jobs",
    operation_id="list_jobs",
)
def list_jobs(request: HttpRequest, queue: str, filters: Query[ListQuery]) -> Any:
    """Oldest first (``state=failed``: latest failure first); pass ``next`` as ``cursor``.

    A malformed query parameter (``state``, ``prefix``, ``cursor``) is ``400
    bad_request`` naming it, as ninja's own query validation answers.
    """
    _checked(request, "read", queue)
    try:
        page = _handle(queue, None).list(
            prefix=filters.prefix, state=filters.state, limit=filters.limit, after=filters.cursor
        )
    except JobQueueError as exc:
        raise _bad_query(exc, filters) from exc
    secure = _secure_jids(queue, [view.jid for view in page.jobs])
    return {
        "jobs": [_view(view, view.jid in secure) for view in page.jobs],
        "next": page.next,
    }


class PauseOut(Schema):
    """Body of ``POST /sdk/queues/{queue}/pause|resume``."""

    paused: bool = Field(description="Whether the queue is paused now.")
    changed: bool = Field(description="Whether this call changed it.")


@router.post(
    "/queues/{queue}/pause",
    response={200: PauseOut, **ERRORS},
    summary="Pause a queue (admin scope)",
    operation_id="queue_pause",
)
def queue_pause(request: HttpRequest, queue: str) -> Any:
    """Workers stop claiming the queue's jobs within a second; enqueueing still works."""
    token = _checked(request, "admin", queue)
    using = jobs_database()
    changed = run_audited(
        using,
        lambda: pauses.pause_queue(using, queue, by=origin_of(token)),
        actor_of(token),
        "pause",
        target=f"queue {queue}",
        counts=lambda changed: {"changed": int(changed)},
    )
    return {"paused": True, "changed": changed}


@router.post(
    "/queues/{queue}/resume",
    response={200: PauseOut, **ERRORS},
    summary="Resume a paused queue (admin scope)",
    operation_id="queue_resume",
)
def queue_resume(request: HttpRequest, queue: str) -> Any:
    """Workers claim the queue's jobs again."""
    token = _checked(request, "admin", queue)
    using = jobs_database()
    changed = run_audited(
        using,
        lambda: pauses.resume_queue(using, queue),
        actor_of(token),
        "resume",
        target=f"queue {queue}",
        counts=lambda changed: {"changed": int(changed)},
    )
    return {"paused": False, "changed": changed}

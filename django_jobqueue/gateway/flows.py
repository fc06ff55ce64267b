"""Routes on batches and workflows (docs/gateway.md "Batches and workflows").

``POST /sdk/workflows`` builds a :class:`~django_jobqueue.flows.graph.Workflow` from
named steps given in any order: each step is validated by the same checks as
``POST /sdk/jobs`` (a 422 names ``steps[<i>].<field>``), the graph is ordered here so
that an ``after`` naming no step, or a cycle, is a 422 naming the step, and the
workflow is enqueued all or nothing by the builder. ``GET /sdk/batches/{id}`` and
``GET /sdk/workflows/{id}`` read counts and states now.

Scopes: ``produce`` (and every step's queue) to create, ``read`` to look. A token
limited to some queues reads a batch or a workflow only if every job of it is on an
allowed queue (a 403 otherwise), so a batch never tells one queue's owner about
another's jobs.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from ninja import Router, Status

from ..core.conf import get_config
from ..core.exceptions import JobQueueError
from ..core.origin import enqueued_by
from ..enqueue import jobs_database
from ..flows.batches import open_batch, seal
from ..flows.canvas import Signature
from ..flows.graph import Workflow as WorkflowBuilder
from ..flows.reading import MAX_STEPS, workflow_graph
from ..models import ApiToken, Batch, Job, Workflow
from ..store import apitokens, states
from .auth import origin_of, require
from .errors import GatewayError, from_jobqueue_error
from .flowschemas import (
    BatchOpenIn,
    BatchStateOut,
    CallbackIn,
    StepIn,
    WorkflowIn,
    WorkflowOut,
    WorkflowStateOut,
)
from .jobs import spec_of
from .schemas import ERRORS, JobIn

__all__ = ["order_steps", "router"]

#: The callbacks of a batch, in the order a refusal names them.
_CALLBACKS = ("on_finish", "on_success", "on_failure")

router = Router(tags=["workflows"])

_MAX_ID = 2**63 - 1


def order_steps(steps: list[StepIn]) -> list[int]:
    """Return the indexes of ``steps`` in an order where each comes after its ``after``.

    Raises
    ------
    GatewayError
        ``invalid_request`` (422): a name given twice (``field`` ``steps[<i>].name``),
        an ``after`` naming no step (``steps[<i>].after``), or a cycle
        (``steps[<i>].after`` of a step on it, the cycle spelt in the detail).
    """
    index: dict[str, int] = {}
    for i, step in enumerate(steps):
        if step.name in index:
            raise GatewayError(
                "invalid_request",
                f"Step {step.name!r} is also steps[{index[step.name]}]; name each step once.",
                field=f"steps[{i}].name",
            )
        index[step.name] = i
    for i, step in enumerate(steps):
        for name in step.after:
            if name not in index:
                raise GatewayError(
                    "invalid_request",
                    f"Step {step.name!r} comes after {name!r}, which is no step of this workflow.",
                    field=f"steps[{i}].after",
                )
    order: list[int] = []
    state: dict[int, int] = {}  # 1: on the path being walked, 2: ordered
    for root in range(len(steps)):
        if root in state:
            continue
        # Depth-first, iteratively (a long chain must not reach Python's recursion limit).
        path: list[tuple[int, int]] = [(root, 0)]
        state[root] = 1
        while path:
            node, next_edge = path[-1]
            upstream = steps[node].after
            if next_edge == len(upstream):
                path.pop()
                state[node] = 2
                order.append(node)
                continue
            path[-1] = (node, next_edge + 1)
            up = index[upstream[next_edge]]
            if state.get(up) == 1:
                names = [steps[n].name for n, _e in path]
                cycle = [*names[names.index(steps[up].name) :], steps[up].name]
                raise GatewayError(
                    "invalid_request",
                    f"Step {steps[node].name!r} is on a cycle: {' -> '.join(cycle)} "
                    "(each step waits for the next); a workflow has no cycle.",
                    field=f"steps[{node}].after",
                )
            if up not in state:
                state[up] = 1
                path.append((up, 0))
    return order


def _refuse(exc: JobQueueError, prefix: str) -> GatewayError:
    field = getattr(exc, "field", None)
    return from_jobqueue_error(exc, field=f"{prefix}.{field}" if field else prefix)


@router.post(
    "/workflows",
    response={201: WorkflowOut, **ERRORS},
    summary="Enqueue a workflow: named steps and the steps each waits for",
    operation_id="enqueue_workflow",
)
def enqueue_workflow(request: HttpRequest, body: WorkflowIn) -> Any:
    """Enqueue every step's job or none; answer the workflow's id and each step's jid.

    A step with ``after`` waits (state ``blocked``) until its upstream jobs are done;
    ``on_upstream_failure`` says what an upstream job's death does to it (docs/workflows.md
    "When an upstream job fails").
    """
    token = require(request, "produce")
    limit = get_config().GATEWAY.MAX_BATCH
    if len(body.steps) > limit:
        raise GatewayError(
            "invalid_request",
            f"A workflow holds at most {limit} steps over the gateway: got {len(body.steps)}.",
            field="steps",
        )
    order = order_steps(body.steps)
    builder = WorkflowBuilder(body.name, on_upstream_failure=body.on_upstream_failure)
    queues: dict[str, int] = {}
    with enqueued_by(origin_of(token)):
        for i in order:
            step = body.steps[i]
            options = step.options.model_dump(exclude_none=True) if step.options else {}
            try:
                spec = spec_of(JobIn(job_type=step.job_type, payload=step.payload, **options))
            except JobQueueError as exc:
                field = getattr(exc, "field", None)
                if field in {"job_type", "payload"} or field is None:
                    raise _refuse(exc, f"steps[{i}]") from exc
                raise _refuse(exc, f"steps[{i}].options") from exc
            queues.setdefault(spec.queue, i)
            enqueue_options = {"at" if k == "run_at" else k: v for k, v in options.items()}
            enqueue_options["queue"] = spec.queue
            try:
                builder.add(
                    step.name,
                    step.job_type,
                    step.payload,
                    after=step.after,
                    on_upstream_failure=step.on_upstream_failure,
                    **enqueue_options,
                )
            except JobQueueError as exc:
                raise _refuse(exc, f"steps[{i}]") from exc
        for queue, i in queues.items():
            try:
                require(request, "produce", [queue])
            except GatewayError as exc:
                raise GatewayError(
                    "forbidden", exc.detail, field=f"steps[{i}].options.queue"
                ) from exc
        try:
            result = builder.enqueue()
        except JobQueueError as exc:
            raise from_jobqueue_error(exc, field="steps") from exc
    return Status(201, {"id": result.id, "name": body.name, "jids": dict(result)})


def _require_queues_of(request: HttpRequest, token: ApiToken, what: str, jobs: Any) -> None:
    """Refuse a token limited to some queues when a job of ``jobs`` is on another."""
    if "*" in token.queues:
        return
    for queue in jobs.order_by().values_list("queue", flat=True).distinct():
        if not apitokens.queue_allowed(token, queue):
            raise GatewayError(
                "forbidden", f"This token is not allowed queue {queue!r}, which {what} uses."
            )


def _callback(spec: Any, jid: str) -> dict[str, str] | None:
    if not isinstance(spec, dict):
        return None
    return {"job_type": str(spec.get("job_type", "")), "jid": jid}


def _callback_signature(
    request: HttpRequest, kind: str, callback: CallbackIn, queue: str | None
) -> Signature:
    """Validate a callback as ``POST /sdk/jobs`` validates a job, naming its fields
    (``on_finish.options.delay``), and check the token may enqueue on its queue.

    Raises
    ------
    GatewayError
        ``invalid_request`` (422) or ``forbidden`` (403).
    """
    options = callback.options.model_dump(exclude_none=True) if callback.options else {}
    if "run_at" in options:
        raise GatewayError(
            "invalid_request",
            "A callback runs when its batch reaches it: give delay, not run_at.",
            field=f"{kind}.options.run_at",
        )
    try:
        spec = spec_of(JobIn(job_type=callback.job_type, payload=callback.payload, **options))
    except JobQueueError as exc:
        field = getattr(exc, "field", None)
        prefix = kind if field in {"job_type", "payload", None} else f"{kind}.options"
        raise _refuse(exc, prefix) from exc
    runs_on = options.get("queue") or queue or spec.queue
    try:
        require(request, "produce", [runs_on])
    except GatewayError as exc:
        field = f"{kind}.options.queue" if options.get("queue") else "queue"
        raise GatewayError("forbidden", exc.detail, field=field) from exc
    return Signature(callback.job_type, callback.payload, options)


def _batch_answer(row: Batch) -> dict[str, Any]:
    return {
        "id": row.pk,
        **row.counts(),
        "sealed": row.sealed,
        "created_at": row.created_at,
        "finished_at": row.finished_at,
        "on_finish": _callback(row.on_finish, row.finish_jid),
        "on_success": _callback(row.on_success, row.success_jid),
        "on_failure": _callback(row.on_failure, row.failure_jid),
    }


def _find_batch(request: HttpRequest, batch_id: int, scope: str) -> Batch:
    """Return batch ``batch_id`` if the token has ``scope`` and every queue of its jobs.

    Raises
    ------
    GatewayError
        ``not_found`` (404) or ``forbidden`` (403).
    """
    token = require(request, scope)
    using = jobs_database()
    row = Batch.objects.using(using).filter(pk=batch_id).first() if batch_id <= _MAX_ID else None
    if row is None:
        raise GatewayError("not_found", f"No batch has id {batch_id}.", field="batch_id")
    _require_queues_of(request, token, "this batch", Job.objects.using(using).filter(batch=row))
    return row


@router.post(
    "/batches",
    response={201: BatchStateOut, **ERRORS},
    summary="Open a batch: it takes jobs until sealed, then makes its callbacks",
    operation_id="open_batch",
)
def open_batch_route(request: HttpRequest, body: BatchOpenIn) -> Any:
    """Open a batch with callbacks; add jobs with ``POST /sdk/jobs`` and ``"batch": id``,
    then seal it (``POST /sdk/batches/{id}/seal``): it finishes, and makes its
    callbacks, only once sealed and every job of it ended."""
    token = require(request, "produce")
    callbacks = {
        kind: _callback_signature(request, kind, callback, body.queue)
        for kind in _CALLBACKS
        if (callback := getattr(body, kind)) is not None
    }
    with enqueued_by(origin_of(token)):
        try:
            handle = open_batch(queue=body.queue, **callbacks)
        except JobQueueError as exc:
            raise from_jobqueue_error(exc) from exc
    return Status(201, _batch_answer(Batch.objects.using(handle.using).get(pk=handle.id)))


@router.post(
    "/batches/{batch_id}/seal",
    response={200: BatchStateOut, **ERRORS},
    summary="Seal a batch: it finishes once every job of it ended",
    operation_id="seal_batch",
)
def seal_batch(request: HttpRequest, batch_id: int) -> Any:
    """Seal the batch (again: nothing more); answer its counts, read after sealing. A
    batch whose jobs all ended finishes here, and its callbacks are made."""
    row = _find_batch(request, batch_id, "produce")
    using = row._state.db or jobs_database()
    try:
        with transaction.atomic(using=using):
            seal(using, row.pk, [])
    except JobQueueError as exc:
        raise from_jobqueue_error(exc) from exc
    return _batch_answer(Batch.objects.using(using).get(pk=row.pk))


@router.get(
    "/batches/{batch_id}",
    response={200: BatchStateOut, **ERRORS},
    summary="Read a batch's counts and callbacks",
    operation_id="get_batch",
)
def get_batch(request: HttpRequest, batch_id: int) -> Any:
    """A batch's counts (total, done, failed, cancelled, pending), read now, and its
    callbacks with their jobs' jids once made."""
    return _batch_answer(_find_batch(request, batch_id, "read"))


@router.get(
    "/workflows/{workflow_id}",
    response={200: WorkflowStateOut, **ERRORS},
    summary="Read a workflow's counts and each step's state",
    operation_id="get_workflow",
)
def get_workflow(request: HttpRequest, workflow_id: int) -> Any:
    """A workflow's counts, read now, and its steps: jid, state word and upstream steps."""
    token = require(request, "read")
    using = jobs_database()
    row = None
    if workflow_id <= _MAX_ID:
        row = Workflow.objects.using(using).filter(pk=workflow_id).first()
    if row is None:
        raise GatewayError("not_found", f"No workflow has id {workflow_id}.", field="workflow_id")
    _require_queues_of(
        request, token, "this workflow", Job.objects.using(using).filter(workflow=row)
    )
    now = timezone.now()
    steps = [
        {
            "name": step.name,
            "jid": step.job.jid,
            "job_type": step.job.job_type,
            "queue": step.job.queue,
            "status": str(step.job.status),
            "state": states.state_word(step.job, now),
            "after": step.after,
        }
        for step in workflow_graph(row.pk, using, MAX_STEPS + 1)
    ]
    return {
        "id": row.pk,
        "name": row.name,
        "on_upstream_failure": row.on_upstream_failure,
        **row.counts(),
        "created_at": row.created_at,
        "finished_at": row.finished_at,
        "steps": steps[:MAX_STEPS],
        "steps_truncated": len(steps) > MAX_STEPS,
    }

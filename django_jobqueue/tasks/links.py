"""Batches and dependencies for ``django.tasks`` (docs/workflows.md "From django.tasks").

Django's ``Task.enqueue(*args, **kwargs)`` passes the task function's arguments and
nothing else, so the links of a task's job are given around the call:

- ``with batch(...) as b:`` (:func:`django_jobqueue.batch`): every task enqueued in
  the block joins the batch, as every job does;
- ``with linked(after=[result, ...], batch=id, on_upstream_failure="skip"):`` the
  tasks enqueued in the block wait for those results' jobs (``after``: ``TaskResult``
  objects, ``EnqueueResult`` objects or jids), join an existing batch (an id, or the
  handle ``with batch()`` gave), or both;
- :func:`add_task` adds a call of a task as a step of a
  :class:`~django_jobqueue.Workflow`.

A task's job that waits has the stored status ``blocked``; its ``TaskResult`` is
``READY`` (queued, not started) until it runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..core.exceptions import InvalidOption

__all__ = ["add_task", "current_links", "linked"]

_LINKS: ContextVar[dict[str, Any] | None] = ContextVar("jobqueue_task_links", default=None)


def _jid_of(item: Any) -> str:
    """A jid from a ``TaskResult`` (``.id``), an ``EnqueueResult`` (``.jid``) or a str."""
    if isinstance(item, str):
        return item
    for attribute in ("jid", "id"):
        value = getattr(item, attribute, None)
        if isinstance(value, str):
            return value
    raise InvalidOption(
        f"after takes TaskResult, EnqueueResult or jid strings: got {type(item).__name__}."
    )


@contextmanager
def linked(
    *,
    after: Iterable[Any] = (),
    batch: Any = None,
    on_upstream_failure: str | None = None,
) -> Iterator[None]:
    """Link the tasks enqueued inside the block (this thread or task only).

    Parameters
    ----------
    after
        ``TaskResult`` objects (what ``Task.enqueue`` returns), ``EnqueueResult``
        objects or jids: each task enqueued in the block waits (status ``blocked``)
        until their jobs are done, and becomes due in the transaction of the last
        one's ``done``.
    batch
        An existing batch's id (or the ``BatchHandle`` of ``with batch()``): each task
        enqueued in the block joins it (an open batch).
    on_upstream_failure
        With ``after``: ``cancel`` (default), ``skip`` or ``ignore`` (docs/workflows.md
        "When an upstream job fails").

    Raises
    ------
    InvalidOption
        At once, if an ``after`` item is not a result or jid, ``batch`` is not an id,
        or the policy is unknown (or given without ``after``). An ``after`` jid or a
        batch that does not exist raises ``InvalidRequest`` at each enqueue, which
        then writes nothing.

    Blocks nest: an inner block's ``after`` adds to the outer's; its ``batch`` and
    policy replace the outer's.
    """
    from ..flows.links import pop_link  # deferred: TASKS may load this before apps

    jids = [_jid_of(item) for item in ([after] if isinstance(after, str) else after)]
    if on_upstream_failure is not None and not jids:
        raise InvalidOption("on_upstream_failure is the policy of after's edges: give after.")
    outer = _LINKS.get() or {}
    links: dict[str, Any] = dict(outer)
    if jids:
        links["after"] = [*outer.get("after", ()), *jids]
    if batch is not None:
        links["batch"] = getattr(batch, "id", batch)
    if on_upstream_failure is not None:
        links["on_upstream_failure"] = on_upstream_failure
    pop_link(dict(links))  # validated now, not at the first enqueue
    token = _LINKS.set(links)
    try:
        yield
    finally:
        _LINKS.reset(token)


def current_links() -> dict[str, Any]:
    """Return the ``enqueue_job`` options of the open :func:`linked` blocks (``after``,
    ``batch``, ``on_upstream_failure``), or ``{}`` outside any."""
    links = _LINKS.get()
    return dict(links) if links else {}


def add_task(
    workflow: Any,
    step: str,
    task: Any,
    args: Iterable[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    after: Iterable[str] = (),
    on_upstream_failure: str | None = None,
) -> Any:
    """Add a call of ``task`` as the step ``step`` of ``workflow``; return the workflow.

    ``workflow``: a :class:`~django_jobqueue.Workflow`; ``task``: a ``@task`` of a
    :class:`~django_jobqueue.tasks.JobQueueBackend` backend (its queue, priority,
    ``run_after`` and options apply, as ``task.enqueue`` applies them); ``args`` and
    ``kwargs``: the call's JSON arguments; ``after``: names of steps added before;
    ``on_upstream_failure``: as :meth:`Workflow.add`.

    The step's ``TaskResult`` is ``task.get_result(jid)`` with the jid of
    ``workflow.enqueue()[step]``. A task step does not read ``ctx.upstream`` (a task
    function gets its arguments only): read an upstream step's result with
    ``get_result`` of its jid.

    Raises
    ------
    InvalidTask
        If ``task``'s backend is not a ``JobQueueBackend``, or the task does not fit it.
    InvalidOption
        If the task is ``unique`` (a step's job is its own, never a holder's), or as
        :meth:`Workflow.add` raises.
    TypeError
        If the arguments are not JSON-serializable.
    """
    from ..core.compat import InvalidTask
    from .backend import JobQueueBackend

    backend = task.get_backend()
    if not isinstance(backend, JobQueueBackend):
        raise InvalidTask(
            f"Task {task.module_path} uses backend {type(backend).__name__}; a workflow "
            "step needs django_jobqueue.tasks.JobQueueBackend."
        )
    payload, options = backend.job_of(task, args, kwargs or {})
    if "unique_key" in options:
        raise InvalidOption(
            f"Task {task.module_path} is unique; a workflow step's job is never deduplicated."
        )
    options.pop("unique_mode", None)
    options.pop("unique_ttl_ms", None)
    return workflow.add(
        step,
        task.module_path,
        payload,
        after=after,
        on_upstream_failure=on_upstream_failure,
        queue=task.queue_name,
        **options,
    )

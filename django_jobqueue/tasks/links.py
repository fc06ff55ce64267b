"""Batches and workflows for ``django.tasks`` beyond ``batch()`` and ``wait_for()``
(docs/workflows.md "django.tasks" and "Tasks as workflow steps").

Django's ``Task.enqueue(*args, **kwargs)`` passes the task function's arguments and
nothing else, so the links of a task's job are given around the call. The core's
blocks cover the two common cases: ``with batch(...)`` (every task enqueued inside
joins the new batch) and ``with wait_for(*results)`` (every task enqueued inside waits
for those jobs). This module adds:

- ``with in_batch(batch_id):``: the tasks enqueued inside join an existing, open
  batch (one made by ``open_batch()``, or by another process), as ``enqueue_job(...,
  batch=id)`` does;
- :func:`add_task`: a call of a task as a step of a :class:`~django_jobqueue.Workflow`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..core.exceptions import InvalidOption

__all__ = ["add_task", "current_links", "in_batch"]

_BATCH: ContextVar[int | None] = ContextVar("jobqueue_task_batch", default=None)


@contextmanager
def in_batch(batch: Any) -> Iterator[None]:
    """Make the tasks enqueued inside the block (this thread or asyncio task) join
    ``batch``: an existing batch's id, or a ``BatchHandle``.

    The batch must not have finished (its callbacks made): each enqueue checks it,
    and one that does not exist or has finished raises ``InvalidRequest`` and writes
    nothing. Combine it with ``wait_for()`` to make the tasks wait as well.

    Raises
    ------
    InvalidOption
        At once, if ``batch`` is not an id (an int >= 1) or a handle.
    """
    batch_id = getattr(batch, "id", batch)
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 1:
        raise InvalidOption(f"batch must be a batch's id (an int >= 1): got {batch!r}.")
    token = _BATCH.set(batch_id)
    try:
        yield
    finally:
        _BATCH.reset(token)


def current_links() -> dict[str, Any]:
    """Return the ``enqueue_job`` options of the open :func:`in_batch` block
    (``{"batch": id}``), or ``{}`` outside any."""
    batch_id = _BATCH.get()
    return {} if batch_id is None else {"batch": batch_id}


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

"""Django's view of a job: priority and status mapping, and ``TaskResult`` from a ``Job``.

Django's statuses are read from ours here and nowhere else.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from ..core.compat import (
    SUCCESSFUL,
    TASK_MAX_PRIORITY,
    TASK_MIN_PRIORITY,
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)

if TYPE_CHECKING:
    from ..models import Job

__all__ = [
    "find_task",
    "job_priority_to_task_priority",
    "job_status_to_task_status",
    "task_priority_to_job_priority",
    "task_result_from_job",
]

#: ``job priority = _PRIORITY_PIVOT - task priority``: Django's 100 runs first (1).
_PRIORITY_PIVOT = TASK_MAX_PRIORITY + 1
#: A dotted Python path, the only job type names resolved to tasks.
_DOTTED_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
#: The exception class given to failures that were not raised by the task (a lease
#: that expired, a job that expired before it ran): they carry a message only.
_QUEUE_FAILURE_CLASS = "django_jobqueue.core.exceptions.JobQueueError"


def task_priority_to_job_priority(priority: int) -> int:
    """Return our priority (1 runs first) for Django's ``priority`` (larger runs sooner).

    Parameters
    ----------
    priority:
        A task priority, -100 .. 100.

    Returns
    -------
    int
        ``101 - priority``: 1 .. 201, in the reverse order, so no two task priorities
        meet. Django's default 0 becomes 101, next to ``DEFAULT_PRIORITY`` (100).

    Raises
    ------
    InvalidTask
        If ``priority`` is outside -100 .. 100.

    Implements: docs/design.md#states.
    """
    if not TASK_MIN_PRIORITY <= priority <= TASK_MAX_PRIORITY:
        raise InvalidTask(
            f"priority must be a whole number between {TASK_MIN_PRIORITY} and "
            f"{TASK_MAX_PRIORITY}: got {priority!r}."
        )
    return _PRIORITY_PIVOT - int(priority)


def job_priority_to_task_priority(priority: int) -> int:
    """Return Django's priority for our job ``priority``; the inverse of the above.

    A job priority outside 1 .. 201 (changed by hand) is clamped to -100 .. 100.

    Implements: docs/design.md#states.
    """
    return max(TASK_MIN_PRIORITY, min(TASK_MAX_PRIORITY, _PRIORITY_PIVOT - priority))


def job_status_to_task_status(status: str) -> Any:
    """Return Django's ``TaskResultStatus`` for a :class:`JobStatus` value.

    Raises
    ------
    ValueError
        If ``status`` is not a :class:`JobStatus` value.

    Implements: docs/design.md#states.
    """
    # deferred: TASKS may load this before apps are ready, and models need them
    from ..models import JobStatus

    statuses: dict[str, Any] = {
        JobStatus.INIT: TaskResultStatus.READY,
        JobStatus.RETRY: TaskResultStatus.READY,
        JobStatus.BLOCKED: TaskResultStatus.READY,  # waiting for upstream jobs
        JobStatus.PROCESSING: TaskResultStatus.RUNNING,
        JobStatus.ERROR: TaskResultStatus.FAILED,
        JobStatus.MAX_RETRY: TaskResultStatus.FAILED,
        JobStatus.CANCELLED: TaskResultStatus.FAILED,
        JobStatus.DONE: SUCCESSFUL,
    }
    try:
        return statuses[status]
    except KeyError:
        raise ValueError(f"{status!r} is not a job status; use a JobStatus value.") from None


def _in_installed_app(module: str) -> bool:
    return any(
        module == config.name or module.startswith(f"{config.name}.")
        for config in apps.get_app_configs()
    )


def find_task(name: str) -> Any:
    """Return the Django ``Task`` at dotted path ``name``, or None if it is not one.

    Only dotted paths in an installed app's package (or in a module already
    imported) are imported, so a job type name from outside never imports an
    arbitrary module.

    Parameters
    ----------
    name:
        A job type name, e.g. ``"myapp.tasks.send_email"``.

    Returns
    -------
    Task or None
        The task; None if ``name`` is not a dotted path of at most 200 characters, is
        outside the installed apps, cannot be imported or is not a ``Task``.

    Implements: docs/design.md#states.
    """
    if not _DOTTED_PATH.fullmatch(name) or len(name) > 200:
        return None
    module = name.rpartition(".")[0]
    if module not in sys.modules and not _in_installed_app(module):
        return None
    try:
        found = import_string(name)
    except ImportError:
        return None
    return found if isinstance(found, Task) else None


def _rebuilt_task(task: Any, **changes: Any) -> Any:
    """Return a copy of ``task`` with ``changes``, without validating it again.

    ``Task.using`` validates against the backend's current ``QUEUES``; a stored job
    must stay readable after a queue is dropped from them.
    """
    copy = object.__new__(type(task))
    for field in dataclasses.fields(task):
        object.__setattr__(copy, field.name, changes.get(field.name, getattr(task, field.name)))
    return copy


def _task_error(entry: Mapping[str, Any]) -> Any:
    path = entry.get("exception_class") or ""
    traceback = entry.get("traceback") or ""
    if not path:
        path = _QUEUE_FAILURE_CLASS
        traceback = traceback or str(entry.get("message", ""))
    return TaskError(exception_class_path=path, traceback=traceback)


def task_result_from_job(job: Job, *, task: Any = None) -> Any:
    """Return Django's ``TaskResult`` for ``job``, a job of a task.

    Parameters
    ----------
    job:
        A ``Job`` whose job type is a task's module path.
    task:
        The ``Task``, if the caller has it; else imported from the job type.

    Raises
    ------
    TaskResultDoesNotExist
        If the job is not a task's (another job type, or a task no longer importable).

    Implements: docs/design.md#states.
    """
    payload = job.payload
    if task is None:
        task = find_task(job.job_type)
    if (
        task is None
        or not isinstance(payload, dict)
        or not isinstance(payload.get("args"), list)
        or not isinstance(payload.get("kwargs"), dict)
    ):
        raise TaskResultDoesNotExist(f"Job {job.jid} ({job.job_type}) is not a task's job.")
    run_after = payload.get("run_after")
    task = _rebuilt_task(
        task,
        priority=job_priority_to_task_priority(job.priority),
        queue_name=job.queue,
        backend=payload.get("backend") or task.backend,
        run_after=None if run_after is None else parse_datetime(run_after),
    )
    attempts = [a for a in payload.get("attempts") or [] if isinstance(a, dict)]
    started = attempts[0].get("started_at") if attempts else None
    status = job_status_to_task_status(job.status)
    result: Any = TaskResult(
        task=task,
        id=job.jid,
        status=status,
        enqueued_at=job.created_at,
        started_at=parse_datetime(started) if started else job.started_at,
        finished_at=job.finished_at if status in (SUCCESSFUL, TaskResultStatus.FAILED) else None,
        last_attempted_at=job.started_at,
        args=payload["args"],
        kwargs=payload["kwargs"],
        backend=task.backend,
        errors=[_task_error(entry) for entry in job.errors or [] if isinstance(entry, dict)],
        worker_ids=[str(a.get("worker_id", "")) for a in attempts],
    )
    if status == SUCCESSFUL:
        object.__setattr__(result, "_return_value", job.result)
    return result

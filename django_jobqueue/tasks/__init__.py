"""A backend for Django's tasks framework: ``@task`` functions run as ordinary jobs.

::

    TASKS = {
        "default": {
            "BACKEND": "django_jobqueue.tasks.JobQueueBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"max_retry": 3, "timeout": "5m"},
        }
    }

A task's enqueue creates one job through :func:`django_jobqueue.enqueue.enqueue_job`:

- job type: the task's module path (``myapp.tasks.send_email``); the registry
  resolves such a job type to :func:`run_task_job`, so no ``@job`` is needed;
- queue: ``Task.queue_name``; ``Task.run_after``: the job's ``at``;
- priority: Django's -100 .. 100 (larger runs sooner) becomes ours, 1 .. 201
  (1 runs first), by ``job priority = 101 - task priority`` (order kept both ways);
- payload: ``{"args", "kwargs", "backend", "run_after", "attempts"}`` as JSON, where
  ``attempts`` records each attempt's worker and start (Django's ``worker_ids``);
- inside ``transaction.atomic()`` the job joins the caller's transaction.

Django's statuses are read from ours here and nowhere else: ``init``/``retry`` are
READY, ``processing`` is RUNNING, ``error``/``max_retry``/``cancelled`` are FAILED,
``done`` is SUCCESSFUL. ``task_enqueued`` is sent once the job is committed,
``task_started`` by the worker before the task function runs, ``task_finished`` when
the job's final outcome is stored (not after an attempt that will be retried).

Batches and workflows (docs/workflows.md "django.tasks"): tasks enqueued in a ``with
batch()`` block join it, in a ``with wait_for(...)`` block wait for those jobs;
:func:`in_batch` joins an existing batch; :func:`add_task` adds a task's call to a
``Workflow``.

Parts: ``backend`` (:class:`JobQueueBackend`), ``links`` (:func:`in_batch`,
:func:`add_task`), ``options`` (``OPTIONS`` and
:func:`task_options`), ``results`` (priority and status mapping, ``TaskResult`` from a
job) and ``runner`` (the job type of a task and its handler on the workers). Import
from this package, not from its parts.
"""

from __future__ import annotations

from .backend import JobQueueBackend
from .links import add_task, in_batch
from .options import task_options
from .results import (
    job_priority_to_task_priority,
    job_status_to_task_status,
    task_priority_to_job_priority,
    task_result_from_job,
)
from .runner import run_task_job, task_job_description

__all__ = [
    "JobQueueBackend",
    "add_task",
    "job_priority_to_task_priority",
    "in_batch",
    "job_status_to_task_status",
    "run_task_job",
    "task_job_description",
    "task_options",
    "task_priority_to_job_priority",
    "task_result_from_job",
]

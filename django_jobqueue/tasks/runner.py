"""Running Django tasks on the workers: the job type of a task and its handler.

A task's job type is its module path; :func:`task_job_description` resolves it to a
job type whose handler is :func:`run_task_job`. The app registers that resolver with
the registry when it is ready (``django_jobqueue/apps.py``). Django's
``task_finished`` is sent from here once a task's job has its final outcome stored
(a receiver of ``job_finished``, connected when the first task's job type resolves).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..core.compat import TaskContext, normalize_json, task_backends, task_finished, task_started
from ..core.exceptions import UnknownJobType
from ..core.signals import job_finished
from ..store.registry import JobDescription, get_job_description
from .results import find_task, task_result_from_job

if TYPE_CHECKING:
    from ..models import Job

__all__ = ["run_task_job", "task_job_description"]

logger = logging.getLogger(__name__)

_descriptions: dict[str, JobDescription] = {}


def task_job_description(name: str) -> JobDescription | None:
    """Return the job type that runs the Django task at path ``name``, or None.

    Only dotted paths in an installed app's package (or in a module already
    imported) are imported, so a job type name from outside never imports an
    arbitrary module.

    Implements: docs/design.md#states.
    """
    desc = _descriptions.get(name)
    if desc is not None:
        return desc
    if find_task(name) is None:
        return None
    desc = JobDescription(name=name, handler=run_task_job)
    _descriptions[name] = desc
    # Connected once a task's job type is known here: a process that runs no task
    # sends ``job_finished`` per job to no receiver (a twentieth of a no-op job's CPU).
    job_finished.connect(_send_task_finished, dispatch_uid="django_jobqueue.task_finished")
    return desc


def _record_attempt(job: Job) -> None:
    """Store this attempt's worker and start in the payload (Django's ``worker_ids``)."""
    # deferred: TASKS may load this before apps are ready, and models need them
    from ..models import Job, JobStatus

    payload = dict(job.payload or {})
    earlier = max(job.attempt - 1, 0)
    attempts = list(payload.get("attempts") or [])[:earlier]
    # An attempt whose worker died before the task started left no entry: its
    # worker is unknown (""), but it counts, so TaskContext.attempt == job.attempt.
    attempts += [{"worker_id": "", "started_at": None}] * (earlier - len(attempts))
    attempts.append(
        {
            "worker_id": job.lease_owner,
            "started_at": None if job.started_at is None else job.started_at.isoformat(),
        }
    )
    payload["attempts"] = attempts
    Job.objects.using(job._state.db).filter(
        pk=job.pk, status=JobStatus.PROCESSING, lease_token=job.lease_token
    ).update(payload=payload)
    job.payload = payload


def run_task_job(payload: Any, ctx: Any) -> Any:
    """Run the Django task of a claimed job: the job type's handler for every task.

    Builds Django's ``TaskResult`` (RUNNING, this attempt counted in ``worker_ids``),
    sends ``task_started``, and calls the task function with the stored args and
    kwargs, with a ``TaskContext`` first when the task ``takes_context``; an async
    task runs through ``async_to_sync``.

    Parameters
    ----------
    payload:
        The job's payload (``args``, ``kwargs``, ``backend``, ...).
    ctx:
        The worker's ``JobContext``; its ``jid`` names the job.

    Returns
    -------
    Any
        The task's return value, made JSON (the job's ``result``).

    Raises
    ------
    Exception
        Whatever the task raises (a failed attempt), or ``TypeError`` if its return
        value is not JSON-serializable.

    Implements: docs/design.md#states.
    """
    job = getattr(ctx, "job", None)
    if job is None:
        # deferred: enqueue imports models, and TASKS may load this before apps are ready
        from ..enqueue import jobs_database

        # deferred: TASKS may load this before apps are ready, and models need them
        from ..models import Job

        job = Job.objects.using(jobs_database()).get(jid=ctx.jid)
    _record_attempt(job)
    result = task_result_from_job(job)
    task = result.task
    sender = type(task_backends[result.backend])
    task_started.send(sender=sender, task_result=result)
    if task.takes_context:
        value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
    else:
        value = task.call(*result.args, **result.kwargs)
    return normalize_json(value)


def _runs_a_task(job_type: str) -> bool:
    """Whether jobs of ``job_type`` run a Django task: resolved as one, not ``@job``.

    Every finished job sends ``job_finished``; for one of a ``@job`` type this is a
    dictionary lookup, where :func:`task_job_description` tried to import the name
    as a task each time (a twentieth of a no-op drain's CPU).
    """
    try:
        desc = get_job_description(job_type)
    except UnknownJobType:
        return False
    return desc.handler is run_task_job


def _send_task_finished(sender: Any, *, job: Job, status: str, **kwargs: Any) -> None:
    """Send Django's ``task_finished`` once a task's job has its final outcome stored."""
    # deferred: TASKS may load this before apps are ready, and models need them
    from ..models import FINISHED_STATUSES, Job

    if status not in FINISHED_STATUSES or not _runs_a_task(job.job_type):
        return
    try:
        stored = Job.objects.using(job._state.db).get(pk=job.pk)
        result = task_result_from_job(stored)
        backend = task_backends[result.backend]
    except Exception:
        logger.exception("task_finished not sent jid=%s type=%s", job.jid, job.job_type)
        return
    task_finished.send(sender=type(backend), task_result=result)

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
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core import checks
from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from .compat import (
    SUCCESSFUL,
    TASK_MAX_PRIORITY,
    TASK_MIN_PRIORITY,
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from .durations import parse_duration, to_ms
from .exceptions import ImproperlyConfiguredJobQueue, InvalidOption
from .registry import JobDescription
from .signals import job_finished

if TYPE_CHECKING:
    from .models import Job

__all__ = [
    "JobQueueBackend",
    "job_status_to_task_status",
    "run_task_job",
    "task_job_description",
    "task_options",
    "task_priority_to_job_priority",
    "job_priority_to_task_priority",
]

logger = logging.getLogger(__name__)

#: ``job priority = _PRIORITY_PIVOT - task priority``: Django's 100 runs first (1).
_PRIORITY_PIVOT = TASK_MAX_PRIORITY + 1


#: Keys of ``OPTIONS``, of each ``OPTIONS["task_options"]`` entry and of @task_options.
_OPTION_KEYS = frozenset({"max_retry", "timeout", "unique", "unique_mode", "unique_ttl"})
_BACKEND_KEYS = _OPTION_KEYS | {"task_options"}
_OPTIONS_ATTRIBUTE = "jobqueue_task_options"
#: A dotted Python path, the only job type names resolved to tasks.
_DOTTED_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")
#: The exception class given to failures that were not raised by the task (a lease
#: that expired, a job that expired before it ran): they carry a message only.
_QUEUE_FAILURE_CLASS = "django_jobqueue.exceptions.JobQueueError"

_descriptions: dict[str, JobDescription] = {}


# Translations -----------------------------------------------------------------------


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

    Implements: issue 7, "Enqueue" (priority mapped without losing order).
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

    Implements: issue 7, "Enqueue" (priority mapped without losing order).
    """
    return max(TASK_MIN_PRIORITY, min(TASK_MAX_PRIORITY, _PRIORITY_PIVOT - priority))


def job_status_to_task_status(status: str) -> Any:
    """Return Django's ``TaskResultStatus`` for a :class:`JobStatus` value.

    Raises
    ------
    ValueError
        If ``status`` is not a :class:`JobStatus` value.

    Implements: issue 7, "Results" (status).
    """
    from .models import JobStatus

    statuses = {
        JobStatus.INIT: TaskResultStatus.READY,
        JobStatus.RETRY: TaskResultStatus.READY,
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


# Options ----------------------------------------------------------------------------


def _parse_options(options: Any, where: str) -> dict[str, Any]:
    """Validate one options mapping; return it with durations in ms (``*_ms`` keys)."""
    from .models import UniqueMode

    if not isinstance(options, Mapping):
        raise ImproperlyConfiguredJobQueue(f"{where} must be a dict: got {type(options).__name__}.")
    unknown = sorted(set(options) - _OPTION_KEYS)
    if unknown:
        raise ImproperlyConfiguredJobQueue(
            f"{where} has unknown keys {unknown}; the keys are {sorted(_OPTION_KEYS)}."
        )
    parsed: dict[str, Any] = {}
    try:
        if options.get("max_retry") is not None:
            value = options["max_retry"]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidOption(f"max_retry must be an integer >= 0: got {value!r}.")
            parsed["max_retry"] = value
        if options.get("timeout") is not None:
            parsed["timeout_ms"] = max(1, to_ms(parse_duration(options["timeout"], name="timeout")))
        if options.get("unique") is not None:
            if not isinstance(options["unique"], bool):
                raise InvalidOption(f"unique must be True or False: got {options['unique']!r}.")
            parsed["unique"] = options["unique"]
        if options.get("unique_mode") is not None:
            if options["unique_mode"] not in UniqueMode.values:
                raise InvalidOption(
                    f"unique_mode must be one of {', '.join(UniqueMode.values)}: "
                    f"got {options['unique_mode']!r}."
                )
            parsed["unique_mode"] = options["unique_mode"]
        if options.get("unique_ttl") is not None:
            parsed["unique_ttl_ms"] = to_ms(
                parse_duration(options["unique_ttl"], name="unique_ttl")
            )
    except InvalidOption as exc:
        raise ImproperlyConfiguredJobQueue(f"{where}: {exc}") from exc
    return parsed


def task_options(
    *,
    max_retry: int | None = None,
    timeout: Any = None,
    unique: bool | None = None,
    unique_mode: str | None = None,
    unique_ttl: Any = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give one task function its job options; put it *below* ``@task``.

    ::

        @task(queue_name="emails")
        @task_options(max_retry=5, timeout="30s", unique=True)
        def send_email(to, subject): ...

    Parameters
    ----------
    max_retry:
        Retries after the first failed attempt (int >= 0).
    timeout:
        Run time limit of one attempt: a duration (``"30s"``, seconds, timedelta).
    unique:
        True: while a job of this task with the same args and kwargs holds the
        unique key, enqueueing it again returns that job's result (seed 000).
    unique_mode:
        ``while_locked`` (default), ``until_executing`` or ``until_executed`` (Pro).
    unique_ttl:
        How long the unique key is held at most: a duration (default 1 hour).

    Returns
    -------
    Callable
        A decorator that returns the function itself, marked with the options.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If an option is invalid, or if the decorator is put above ``@task``.

    Implements: issue 7, "Options for retries, timeout and unique keys".
    """
    given = {
        key: value
        for key, value in {
            "max_retry": max_retry,
            "timeout": timeout,
            "unique": unique,
            "unique_mode": unique_mode,
            "unique_ttl": unique_ttl,
        }.items()
        if value is not None
    }
    parsed = _parse_options(given, "@task_options")

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        if isinstance(func, Task):
            raise ImproperlyConfiguredJobQueue(
                f"@task_options is above @task on {func.module_path}; put it below @task, "
                "next to the function."
            )
        setattr(func, _OPTIONS_ATTRIBUTE, parsed)
        return func

    return decorator


# The backend --------------------------------------------------------------------------


class JobQueueBackend(BaseTaskBackend):
    """Run Django's ``@task`` functions as django-jobqueue jobs.

    ``OPTIONS`` (all optional): ``max_retry``, ``timeout``, ``unique``,
    ``unique_mode``, ``unique_ttl`` (defaults for every task of this backend) and
    ``task_options`` (``{"app.tasks.func": {...same keys}}``). For one task,
    ``OPTIONS["task_options"]`` wins over :func:`task_options`, which wins over the
    backend's defaults; unset options fall back to ``JOBQUEUE``'s defaults.

    Implements: issue 7, "A backend for Django's own tasks framework".
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Old backports set the alias in params and take only params; tolerated above.
        self.alias = alias
        self._parsed: tuple[dict[str, Any], dict[str, dict[str, Any]]] | None = None

    def _options(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """Return (backend defaults, per-task options), validated on first use."""
        if self._parsed is None:
            where = f"TASKS[{self.alias!r}]['OPTIONS']"
            raw = self.options
            if not isinstance(raw, Mapping):
                raise ImproperlyConfiguredJobQueue(
                    f"{where} must be a dict: got {type(raw).__name__}."
                )
            unknown = sorted(set(raw) - _BACKEND_KEYS)
            if unknown:
                raise ImproperlyConfiguredJobQueue(
                    f"{where} has unknown keys {unknown}; the keys are {sorted(_BACKEND_KEYS)}."
                )
            defaults = _parse_options({k: v for k, v in raw.items() if k != "task_options"}, where)
            per_task_raw = raw.get("task_options", {})
            if not isinstance(per_task_raw, Mapping):
                raise ImproperlyConfiguredJobQueue(
                    f"{where}['task_options'] must be a dict keyed by task path: "
                    f"got {type(per_task_raw).__name__}."
                )
            per_task = {
                path: _parse_options(options, f"{where}['task_options'][{path!r}]")
                for path, options in per_task_raw.items()
            }
            self._parsed = (defaults, per_task)
        return self._parsed

    def options_for(self, task: Any) -> dict[str, Any]:
        """Return the job options of ``task``: backend < @task_options < task_options.

        Raises
        ------
        ImproperlyConfiguredJobQueue
            If this backend's ``OPTIONS`` are invalid.
        """
        defaults, per_task = self._options()
        return {
            **defaults,
            **getattr(task.func, _OPTIONS_ATTRIBUTE, {}),
            **per_task.get(task.module_path, {}),
        }

    def validate_task(self, task: Any) -> None:
        """Check ``task`` as Django does, and that its path fits a job type (200 chars)."""
        super().validate_task(task)
        if len(task.module_path) > 200:
            raise InvalidTask(
                f"Task path {task.module_path!r} is longer than 200 characters, the longest "
                "job type; give the function or its module a shorter name."
            )

    def enqueue(self, task: Any, args: Iterable[Any], kwargs: Mapping[str, Any]) -> Any:
        """Enqueue ``task`` as a job; inside ``transaction.atomic()`` it joins it.

        Parameters
        ----------
        task:
            The ``Task`` (its queue, priority and ``run_after`` are used).
        args, kwargs:
            JSON-serializable arguments of the task function.

        Returns
        -------
        TaskResult
            The new job's result, READY; for a ``unique`` task whose key is held,
            the holder's result.

        Raises
        ------
        InvalidTask
            If the task does not fit this backend (queue, priority, run_after).
        TypeError
            If args or kwargs are not JSON-serializable (as Django raises).
        ImproperlyConfiguredJobQueue
            If this backend's ``OPTIONS`` are invalid.
        django_jobqueue.exceptions.JobQueueError
            As :func:`django_jobqueue.enqueue.enqueue_job` raises (``LockTimeout``,
            ``WrongDatabase``, ``ProRequired``). Nothing is written then.

        Implements: issue 7, "Enqueue".
        """
        from .enqueue import enqueue_job, jobs_database

        self.validate_task(task)
        args = normalize_json(list(args))
        kwargs = normalize_json(dict(kwargs))
        options = self.options_for(task)
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)
        payload = {
            "args": args,
            "kwargs": kwargs,
            "backend": self.alias,
            "run_after": None if run_after is None else run_after.isoformat(),
            "attempts": [],
        }
        enqueue_options: dict[str, Any] = {
            "at": run_after,
            "priority": task_priority_to_job_priority(task.priority),
            "max_retry": options.get("max_retry"),
            "timeout_ms": options.get("timeout_ms"),
        }
        if options.get("unique"):
            enqueue_options.update(
                unique_key=_unique_key(task.module_path, args, kwargs),
                unique_mode=options.get("unique_mode"),
                unique_ttl_ms=options.get("unique_ttl_ms"),
            )
        answer = enqueue_job(
            task.queue_name,
            task.module_path,
            payload,
            **{key: value for key, value in enqueue_options.items() if value is not None},
        )
        using = jobs_database()
        result = self._get_result(using, answer.jid, task=task)
        if not answer.deduplicated:
            transaction.on_commit(
                partial(task_enqueued.send, type(self), task_result=result), using=using
            )
        return result

    def get_result(self, result_id: str) -> Any:
        """Return the ``TaskResult`` of the job whose jid is ``result_id``.

        Raises
        ------
        TaskResultDoesNotExist
            If no job has this jid, or the job is not a task's.

        Implements: issue 7, "Results".
        """
        from .enqueue import jobs_database

        return self._get_result(jobs_database(), result_id)

    async def aget_result(self, result_id: str) -> Any:
        """Async twin of :meth:`get_result`."""
        from .enqueue import jobs_database
        from .models import Job

        try:
            job = await Job.objects.using(jobs_database()).aget(jid=_jid(result_id))
        except Job.DoesNotExist as exc:
            raise TaskResultDoesNotExist(result_id) from exc
        return task_result_from_job(job)

    def _get_result(self, using: str, result_id: str, *, task: Any = None) -> Any:
        from .models import Job

        try:
            job = Job.objects.using(using).get(jid=_jid(result_id))
        except Job.DoesNotExist as exc:
            raise TaskResultDoesNotExist(result_id) from exc
        return task_result_from_job(job, task=task)

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        """Report invalid ``OPTIONS`` (E010) and a missing ``django_jobqueue`` app (E011)."""
        yield from super().check(**kwargs)
        try:
            self._parsed = None
            self._options()
        except ImproperlyConfiguredJobQueue as exc:
            yield checks.Error(
                str(exc),
                hint="See the OPTIONS of JobQueueBackend in the django-jobqueue docs.",
                obj=f"TASKS[{self.alias!r}]",
                id="django_jobqueue.E010",
            )
        if not apps.is_installed("django_jobqueue"):
            yield checks.Error(
                "JobQueueBackend is configured in TASKS but django_jobqueue is not installed.",
                hint="Add 'django_jobqueue' to INSTALLED_APPS.",
                obj=f"TASKS[{self.alias!r}]",
                id="django_jobqueue.E011",
            )


def _jid(result_id: Any) -> str:
    """Return ``result_id`` as a jid to look up; ``Job.DoesNotExist`` if none can match.

    A jid is 32 hex digits: text no database can compare (NUL, lone surrogates) or
    longer than that matches no job, and must not reach the database as a query.
    """
    from .models import Job
    from .validation import text_problem

    text = str(result_id)
    if len(text) > 32 or text_problem(text) is not None:
        raise Job.DoesNotExist(text)
    return text


def _unique_key(path: str, args: list[Any], kwargs: dict[str, Any]) -> str:
    """Return the unique key of a call: the task path and a hash of its arguments."""
    call = json.dumps([args, kwargs], sort_keys=True, separators=(",", ":"))
    return f"task:{path}:{hashlib.sha256(call.encode('utf-8')).hexdigest()}"


# Results --------------------------------------------------------------------------------


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

    Implements: issue 7, "Results".
    """
    payload = job.payload
    if task is None:
        desc = task_job_description(job.job_type)
        task = None if desc is None else import_string(job.job_type)
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
    result = TaskResult(
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


# Running tasks on the workers ------------------------------------------------------


def _in_installed_app(module: str) -> bool:
    return any(
        module == config.name or module.startswith(f"{config.name}.")
        for config in apps.get_app_configs()
    )


def task_job_description(name: str) -> JobDescription | None:
    """Return the job type that runs the Django task at path ``name``, or None.

    Only dotted paths in an installed app's package (or in a module already
    imported) are imported, so a job type name from outside never imports an
    arbitrary module.

    Implements: issue 7, "Run" (job type = the task's module path).
    """
    desc = _descriptions.get(name)
    if desc is not None:
        return desc
    if not _DOTTED_PATH.fullmatch(name) or len(name) > 200:
        return None
    module = name.rpartition(".")[0]
    if module not in sys.modules and not _in_installed_app(module):
        return None
    try:
        found = import_string(name)
    except ImportError:
        return None
    if not isinstance(found, Task):
        return None
    desc = JobDescription(name=name, handler=run_task_job)
    _descriptions[name] = desc
    return desc


def _record_attempt(job: Job) -> None:
    """Store this attempt's worker and start in the payload (Django's ``worker_ids``)."""
    from .models import Job, JobStatus

    payload = dict(job.payload)
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

    Implements: issue 7, "Run".
    """
    job = getattr(ctx, "job", None)
    if job is None:
        from .enqueue import jobs_database
        from .models import Job

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


@receiver(job_finished)
def _send_task_finished(sender: Any, *, job: Job, status: str, **kwargs: Any) -> None:
    """Send Django's ``task_finished`` once a task's job has its final outcome stored."""
    from .models import FINISHED_STATUSES, Job

    if status not in FINISHED_STATUSES or task_job_description(job.job_type) is None:
        return
    try:
        stored = Job.objects.using(job._state.db).get(pk=job.pk)
        result = task_result_from_job(stored)
        backend = task_backends[result.backend]
    except Exception:
        logger.exception("task_finished not sent jid=%s type=%s", job.jid, job.job_type)
        return
    task_finished.send(sender=type(backend), task_result=result)

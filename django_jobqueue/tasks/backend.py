"""``JobQueueBackend``: Django's task backend that enqueues ``@task`` calls as jobs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any, cast

from django.apps import apps
from django.core import checks
from django.db import transaction
from django.utils import timezone

from ..core.compat import (
    BaseTaskBackend,
    InvalidTask,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
)
from ..core.exceptions import ImproperlyConfiguredJobQueue
from ..core.validation import QUEUE_NAME_RULE, queue_name_problem, text_problem
from .links import current_links
from .options import BACKEND_KEYS, OPTIONS_ATTRIBUTE, parse_options
from .results import task_priority_to_job_priority, task_result_from_job

__all__ = ["JobQueueBackend"]


class JobQueueBackend(BaseTaskBackend):
    """Run Django's ``@task`` functions as django-jobqueue jobs.

    ``OPTIONS`` (all optional): ``max_retry``, ``timeout``, ``unique``,
    ``unique_mode``, ``unique_ttl`` (defaults for every task of this backend) and
    ``task_options`` (``{"app.tasks.func": {...same keys}}``). For one task,
    ``OPTIONS["task_options"]`` wins over :func:`task_options`, which wins over the
    backend's defaults; unset options fall back to ``JOBQUEUE``'s defaults.

    Implements: docs/design.md#states.
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
            unknown = sorted(set(raw) - BACKEND_KEYS)
            if unknown:
                raise ImproperlyConfiguredJobQueue(
                    f"{where} has unknown keys {unknown}; the keys are {sorted(BACKEND_KEYS)}."
                )
            defaults = parse_options({k: v for k, v in raw.items() if k != "task_options"}, where)
            per_task_raw = raw.get("task_options", {})
            if not isinstance(per_task_raw, Mapping):
                raise ImproperlyConfiguredJobQueue(
                    f"{where}['task_options'] must be a dict keyed by task path: "
                    f"got {type(per_task_raw).__name__}."
                )
            per_task = {
                path: parse_options(options, f"{where}['task_options'][{path!r}]")
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
            **getattr(task.func, OPTIONS_ATTRIBUTE, {}),
            **per_task.get(task.module_path, {}),
        }

    def validate_task(self, task: Any) -> None:
        """Check ``task`` as Django does, and that its path fits a job type (200 chars)."""
        super().validate_task(task)
        problem = queue_name_problem(task.queue_name)
        if problem is not None:
            raise InvalidTask(f"Task queue_name {task.queue_name!r} {problem}: {QUEUE_NAME_RULE}.")
        if len(task.module_path) > 200:
            raise InvalidTask(
                f"Task path {task.module_path!r} is longer than 200 characters, the longest "
                "job type; give the function or its module a shorter name."
            )

    def job_of(
        self, task: Any, args: Iterable[Any], kwargs: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Return the job of a call of ``task``: its payload and ``enqueue_job`` options.

        The job type is ``task.module_path`` and the queue ``task.queue_name``; the
        options are ``at``, ``priority``, ``max_retry``, ``timeout_ms`` and, for a
        ``unique`` task, the unique key's (only those set).

        Raises
        ------
        InvalidTask
            If the task does not fit this backend (queue, priority, run_after).
        TypeError
            If args or kwargs are not JSON-serializable (as Django raises).
        ImproperlyConfiguredJobQueue
            If this backend's ``OPTIONS`` are invalid.
        """
        self.validate_task(task)
        args = cast("list[Any]", normalize_json(list(args)))
        kwargs = cast("dict[str, Any]", normalize_json(dict(kwargs)))
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
        return payload, {key: value for key, value in enqueue_options.items() if value is not None}

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
        django_jobqueue.core.exceptions.JobQueueError
            As :func:`django_jobqueue.enqueue.enqueue_job` raises (``LockTimeout``,
            ``WrongDatabase``, ``ProRequired``), and ``InvalidRequest`` inside an
            :func:`~django_jobqueue.tasks.in_batch` block whose batch does not exist
            or has finished, or a ``wait_for()`` block naming no job. Nothing is
            written then.

        Implements: docs/design.md#states.
        """
        # deferred: enqueue imports models, and TASKS may load this before apps are ready
        from ..enqueue import enqueue_job, jobs_database

        payload, enqueue_options = self.job_of(task, args, kwargs)
        # docs/workflows.md "django.tasks": inside an ``in_batch()`` block the job joins
        # that batch (``batch()`` and ``wait_for()`` blocks act in enqueue_job).
        enqueue_options.update(current_links())
        answer = enqueue_job(task.queue_name, task.module_path, payload, **enqueue_options)
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

        Implements: docs/design.md#states.
        """
        # deferred: enqueue imports models, and TASKS may load this before apps are ready
        from ..enqueue import jobs_database

        return self._get_result(jobs_database(), result_id)

    async def aget_result(self, result_id: str) -> Any:
        """Async twin of :meth:`get_result`."""
        # deferred: enqueue imports models, and TASKS may load this before apps are ready
        from ..enqueue import jobs_database

        # deferred: TASKS may load this before apps are ready, and models need them
        from ..models import Job

        try:
            job = await Job.objects.using(jobs_database()).aget(jid=_jid(result_id))
        except Job.DoesNotExist as exc:
            raise TaskResultDoesNotExist(result_id) from exc
        return task_result_from_job(job)

    def _get_result(self, using: str, result_id: str, *, task: Any = None) -> Any:
        # deferred: TASKS may load this before apps are ready, and models need them
        from ..models import Job

        try:
            job = Job.objects.using(using).get(jid=_jid(result_id))
        except Job.DoesNotExist as exc:
            raise TaskResultDoesNotExist(result_id) from exc
        return task_result_from_job(job, task=task)

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:  # type: ignore[override]
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
    # deferred: TASKS may load this before apps are ready, and models need them
    from ..models import Job

    text = str(result_id)
    if len(text) > 32 or text_problem(text) is not None:
        raise Job.DoesNotExist(text)
    return text


def _unique_key(path: str, args: Iterable[Any], kwargs: Mapping[str, Any]) -> str:
    """Return the unique key of a call: the task path and a hash of its arguments."""
    call = json.dumps([args, kwargs], sort_keys=True, separators=(",", ":"))
    return f"task:{path}:{hashlib.sha256(call.encode('utf-8')).hexdigest()}"

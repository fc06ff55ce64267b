"""Version-dependent imports, in one place: Django's tasks framework.

Django 6.0 ships the tasks framework as ``django.tasks``; on Django 5.2 the same API
comes from the ``django-tasks`` backport package (``django_tasks``). This module
imports whichever is there and re-exports the names :mod:`django_jobqueue.tasks`
uses. With neither, importing it raises :class:`TasksFrameworkMissing`, an
``ImproperlyConfigured`` that names both ways out.

The backport spells some names differently (``InvalidTaskError``; before 0.12 the
``SUCCEEDED`` status); they are read under Django 6's names here. pyproject.toml's
``tasks-backport`` extra pins the releases this works with (0.9, 0.10, 0.12+).
"""

from __future__ import annotations

from typing import Any

from .exceptions import ImproperlyConfiguredJobQueue

__all__ = [
    "BACKPORT",
    "SUCCESSFUL",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "TasksFrameworkMissing",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


class TasksFrameworkMissing(ImproperlyConfiguredJobQueue):
    """Neither ``django.tasks`` (Django 6) nor the ``django_tasks`` backport is installed."""

    code = "tasks_framework_missing"


_MISSING_MESSAGE = (
    "django_jobqueue.tasks.JobQueueBackend needs Django's tasks framework, which this "
    "Django ({version}) does not have: upgrade to Django 6.0 or later, or install the "
    "backport with `pip install django-jobqueue[tasks-backport]` (the django-tasks package)."
)

try:
    from django.tasks import Task, TaskContext, TaskResult, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, TaskError
    from django.tasks.base import TaskResultStatus as _Status
    from django.tasks.exceptions import (
        InvalidTask,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    #: True when the API comes from the ``django_tasks`` backport (Django 5.2).
    BACKPORT = False
except ImportError:
    try:
        import django_tasks as _backport  # type: ignore[import-not-found,unused-ignore]
        from django_tasks import base as _base  # type: ignore[import-not-found,unused-ignore]
        from django_tasks import exceptions as _exceptions  # type: ignore[import-not-found,unused-ignore]
        from django_tasks import signals as _signals  # type: ignore[import-not-found,unused-ignore]
        from django_tasks import utils as _utils  # type: ignore[import-not-found,unused-ignore]
        from django_tasks.backends.base import (  # type: ignore[import-not-found,no-redef,unused-ignore]
            BaseTaskBackend,
        )
    except ImportError as exc:
        import django

        raise TasksFrameworkMissing(_MISSING_MESSAGE.format(version=django.get_version())) from exc
    BACKPORT = True
    Task = _base.Task  # type: ignore[misc,assignment,unused-ignore]
    TaskContext = _base.TaskContext  # type: ignore[misc,assignment,unused-ignore]
    TaskError = _base.TaskError  # type: ignore[misc,assignment,unused-ignore]
    TaskResult = _base.TaskResult  # type: ignore[misc,assignment,unused-ignore]
    task = _base.task  # type: ignore[misc,assignment,unused-ignore]
    _Status = getattr(_base, "TaskResultStatus", None) or _base.ResultStatus  # type: ignore[misc,assignment,unused-ignore]
    TASK_MAX_PRIORITY = getattr(_base, "TASK_MAX_PRIORITY", None) or _base.MAX_PRIORITY  # type: ignore[misc,assignment,unused-ignore]
    TASK_MIN_PRIORITY = getattr(_base, "TASK_MIN_PRIORITY", None) or _base.MIN_PRIORITY  # type: ignore[misc,assignment,unused-ignore]
    task_backends = getattr(_backport, "task_backends", None) or _backport.tasks  # type: ignore[misc,assignment,unused-ignore]
    InvalidTask = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError  # type: ignore[misc,assignment,unused-ignore]
    TaskResultDoesNotExist = (  # type: ignore[misc,assignment,unused-ignore]
        getattr(_exceptions, "TaskResultDoesNotExist", None) or _exceptions.ResultDoesNotExist
    )
    TaskResultMismatch = (  # type: ignore[misc,assignment,unused-ignore]
        getattr(_exceptions, "TaskResultMismatch", None) or _exceptions.TaskIntegrityError
    )
    task_enqueued = _signals.task_enqueued  # type: ignore[misc,assignment,unused-ignore]
    task_finished = _signals.task_finished  # type: ignore[misc,assignment,unused-ignore]
    task_started = _signals.task_started  # type: ignore[misc,assignment,unused-ignore]
    normalize_json = getattr(_utils, "normalize_json", None) or _utils.json_normalize  # type: ignore[misc,assignment,unused-ignore]

#: Django's result statuses (``TaskResultStatus``).
TaskResultStatus: Any = _Status
#: The status of a task that ran to completion (``SUCCEEDED`` in old backports).
SUCCESSFUL: Any = getattr(_Status, "SUCCESSFUL", None) or getattr(_Status, "SUCCEEDED")  # noqa: B009

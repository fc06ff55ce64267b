"""Django ``@task`` functions run by the django.tasks backend tests (tests/test_tasks.py).

Module-level, as Django requires. Defined only where a tasks framework exists
(Django 6, or the ``django_tasks`` backport on 5.2): elsewhere this module is empty,
so every other test keeps importing ``tests.testapp.jobs``.
"""

from __future__ import annotations

from typing import Any

from django_jobqueue import job
from django_jobqueue.core.exceptions import ImproperlyConfiguredJobQueue


@job("tasks_test.plain")
def plain(payload: Any, ctx: Any) -> Any:
    """A plain job type: its jobs are not task results."""
    return payload


try:
    from django_jobqueue.core.compat import task
except ImproperlyConfiguredJobQueue:  # Django 5.2 without the backport
    task = None

if task is not None:
    from django_jobqueue.core.exceptions import NonRetryableError
    from django_jobqueue.tasks import task_options

    @task
    def add(a: int, b: int) -> int:
        return a + b

    @task(queue_name="tasks-other", priority=50)
    def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"args": list(args), "kwargs": kwargs}

    @task(takes_context=True)
    def context_info(context: Any, label: str) -> dict[str, Any]:
        return {
            "label": label,
            "attempt": context.attempt,
            "id": context.task_result.id,
            "status": str(context.task_result.status),
            "worker_ids": list(context.task_result.worker_ids),
        }

    @task(takes_context=True)
    @task_options(max_retry=3)
    def flaky(context: Any, key: str, failures: int) -> dict[str, Any]:
        """Fail ``failures`` times, then return the attempt that succeeded."""
        if context.attempt <= failures:
            raise ValueError(f"attempt {context.attempt} fails on purpose")
        return {"key": key, "attempt": context.attempt}

    @task
    @task_options(max_retry=0)
    def boom(message: str) -> None:
        raise KeyError(message)

    @task
    def give_up(message: str) -> None:
        raise NonRetryableError(message)

    @task
    async def async_mul(a: int, b: int) -> int:
        return a * b

    @task
    @task_options(max_retry=0)
    def not_json() -> object:
        return object()

    @task
    @task_options(unique=True)
    def unique_add(a: int, b: int) -> int:
        return a + b

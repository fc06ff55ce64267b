"""Job options of Django tasks: parsing ``OPTIONS`` mappings and ``@task_options``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..core.compat import Task
from ..core.durations import parse_duration, to_ms
from ..core.exceptions import ImproperlyConfiguredJobQueue, InvalidOption

__all__ = ["BACKEND_KEYS", "OPTIONS_ATTRIBUTE", "OPTION_KEYS", "parse_options", "task_options"]

#: Keys of ``OPTIONS``, of each ``OPTIONS["task_options"]`` entry and of @task_options.
OPTION_KEYS = frozenset({"max_retry", "timeout", "unique", "unique_mode", "unique_ttl"})
#: Keys of a backend's ``OPTIONS``: the option keys and ``task_options``.
BACKEND_KEYS = OPTION_KEYS | {"task_options"}
#: The attribute ``@task_options`` sets on a task function: its parsed options.
OPTIONS_ATTRIBUTE = "jobqueue_task_options"


def parse_options(options: Any, where: str) -> dict[str, Any]:
    """Validate one options mapping; return it with durations in ms (``*_ms`` keys).

    Parameters
    ----------
    options:
        A mapping with keys among ``max_retry``, ``timeout``, ``unique``,
        ``unique_mode`` and ``unique_ttl`` (``None`` values are skipped).
    where:
        Where the mapping comes from, e.g. ``"TASKS['default']['OPTIONS']"``; it starts
        every error message.

    Returns
    -------
    dict
        ``max_retry``, ``timeout_ms``, ``unique``, ``unique_mode``, ``unique_ttl_ms``:
        only the keys that were given.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If ``options`` is not a mapping, has an unknown key or an invalid value.
    """
    # deferred: TASKS may load this before apps are ready, and models need them
    from ..models import UniqueMode

    if not isinstance(options, Mapping):
        raise ImproperlyConfiguredJobQueue(f"{where} must be a dict: got {type(options).__name__}.")
    unknown = sorted(set(options) - OPTION_KEYS)
    if unknown:
        raise ImproperlyConfiguredJobQueue(
            f"{where} has unknown keys {unknown}; the keys are {sorted(OPTION_KEYS)}."
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
        unique key, enqueueing it again returns that job's result (docs/design.md#unique-keys).
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

    Implements: docs/design.md#states.
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
    parsed = parse_options(given, "@task_options")

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        if isinstance(func, Task):
            raise ImproperlyConfiguredJobQueue(
                f"@task_options is above @task on {func.module_path}; put it below @task, "
                "next to the function."
            )
        setattr(func, OPTIONS_ATTRIBUTE, parsed)
        return func

    return decorator

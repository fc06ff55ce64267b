"""The ``@job`` decorator and the JobHandle it returns: a job type's verbs.

``@job("emails.send", ...)`` describes and registers a job type
(:func:`django_jobqueue.store.registry.register`) and returns a :class:`JobHandle`, which
runs the handler when called and carries the producer verbs of its type: enqueue,
schedule (:mod:`django_jobqueue.schedules`), and add, set, update, cancel, get, list
by id (:mod:`django_jobqueue.ids`), each with an async twin.

This module is in the producer layer, above the registry, which never imports it:
apps' ``jobs`` modules import it while the registry autodiscovers them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from .core.durations import Duration
from .core.exceptions import ImproperlyConfiguredJobQueue, InvalidOption
from .core.validation import check_batch
from .enqueue import EnqueueResult, enqueue_job, enqueue_many
from .flows.canvas import Signature, signature
from .ids import JobView, Page, Queue
from .schedules import add_job_with_schedule, validate_cron, validate_timezone
from .store.registry import UNSET, JobDescription, describe, register

if TYPE_CHECKING:
    from .models import ScheduleJob

__all__ = ["JobHandle", "job"]


class JobHandle:
    """What ``@job`` returns: call it to run the handler, or enqueue jobs of its type."""

    def __init__(self, description: JobDescription) -> None:
        self.description = description
        self.__wrapped__ = description.handler
        self.__doc__ = description.handler.__doc__
        self.__name__ = getattr(description.handler, "__name__", description.name)

    @property
    def name(self) -> str:
        """The job type's name."""
        return self.description.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.description.handler(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<JobHandle {self.name!r}>"

    def enqueue(self, payload: Any = None, **options: Any) -> EnqueueResult:
        """Enqueue a job of this type; see :func:`django_jobqueue.enqueue.enqueue_job`.

        ``queue`` defaults to the job type's queue. Returns an ``EnqueueResult``.
        """
        queue = options.pop("queue", None)
        return enqueue_job(queue, self.name, payload, **options)

    def enqueue_many(self, payloads: Iterable[Any], **options: Any) -> list[EnqueueResult]:
        """Enqueue one job of this type per payload, all or nothing; see :func:`enqueue_many`.

        Parameters
        ----------
        payloads:
            The jobs' payloads (JSON values), in order.
        **options:
            ``queue`` and the options of :func:`~django_jobqueue.enqueue.enqueue_job`,
            the same for every job (a ``unique_key`` given here would deduplicate
            every job after the first).

        Returns
        -------
        list of EnqueueResult
            One per payload, in order.

        Raises
        ------
        InvalidRequest
            If ``payloads`` is a mapping or a string (one payload is ``[payload]``),
            or as :func:`django_jobqueue.enqueue.enqueue_many`; nothing is written.
        LockTimeout, WrongDatabase
            As :func:`django_jobqueue.enqueue.enqueue_many`; nothing is written.
        """
        check_batch(payloads, "payloads")
        return enqueue_many(
            [{"job_type": self.name, "payload": payload, **options} for payload in payloads]
        )

    async def aenqueue_many(self, payloads: Iterable[Any], **options: Any) -> list[EnqueueResult]:
        """Async twin of :meth:`enqueue_many`."""
        return await sync_to_async(self.enqueue_many)(
            list(check_batch(payloads, "payloads")), **options
        )

    def schedule(self, payload: Any = None, *, at: datetime, **options: Any) -> ScheduleJob:
        """Plan one job of this type at ``at``; see :func:`schedules.add_job_with_schedule`.

        ``options``: ``queue``, ``priority``, ``name``. Returns the ``ScheduleJob``.
        """
        return add_job_with_schedule(self.name, payload, at=at, **options)

    async def aschedule(self, payload: Any = None, *, at: datetime, **options: Any) -> ScheduleJob:
        """Async twin of :meth:`schedule`."""
        return await sync_to_async(self.schedule)(payload, at=at, **options)

    def s(self, payload: Any = None, **options: Any) -> Signature:
        """Return a signature of a job of this type (docs/celery.md): for ``chain``,
        ``group``, ``chord`` and batch callbacks. ``options`` are the enqueue
        options, ``queue``, and ``step`` (its step name in the workflow)."""
        return signature(self, payload, **options)

    async def aenqueue(self, payload: Any = None, **options: Any) -> EnqueueResult:
        """Async twin of :meth:`enqueue`."""
        return await sync_to_async(self.enqueue)(payload, **options)

    # Ids (docs/design.md#ids): on the job type's queue; see django_jobqueue.ids.Queue.

    def add(self, value: Any = None, **options: Any) -> bool:
        """Add a job of this type unless its id is taken; see :meth:`ids.Queue.add`."""
        return Queue.for_job_type(self.name).add(value, **options)

    def set(self, id: str, value: Any = None, **options: Any) -> None:  # noqa: A002
        """Make the id's job run with ``value``; see :meth:`ids.Queue.set`."""
        Queue.for_job_type(self.name).set(id, value, **options)

    def update(self, id: str, value: Any = None, **options: Any) -> bool:  # noqa: A002
        """Change a waiting job's value; see :meth:`ids.Queue.update`."""
        return Queue.for_job_type(self.name).update(id, value, **options)

    def cancel(self, id: str) -> bool:  # noqa: A002
        """Remove or stop the id's job; see :meth:`ids.Queue.cancel`."""
        return Queue.for_job_type(self.name).cancel(id)

    def get(self, id: str) -> JobView | None:  # noqa: A002
        """Return the job holding ``id``; see :meth:`ids.Queue.get`."""
        return Queue.for_job_type(self.name).get(id)

    def list(self, **options: Any) -> Page:
        """Return a page of this type's jobs; see :meth:`ids.Queue.list`."""
        return Queue.for_job_type(self.name).list(**options)

    async def aadd(self, value: Any = None, **options: Any) -> bool:
        """Async twin of :meth:`add`."""
        return await Queue.for_job_type(self.name).aadd(value, **options)

    async def aset(self, id: str, value: Any = None, **options: Any) -> None:  # noqa: A002
        """Async twin of :meth:`set`."""
        await Queue.for_job_type(self.name).aset(id, value, **options)

    async def aupdate(self, id: str, value: Any = None, **options: Any) -> bool:  # noqa: A002
        """Async twin of :meth:`update`."""
        return await Queue.for_job_type(self.name).aupdate(id, value, **options)

    async def acancel(self, id: str) -> bool:  # noqa: A002
        """Async twin of :meth:`cancel`."""
        return await Queue.for_job_type(self.name).acancel(id)

    async def aget(self, id: str) -> JobView | None:  # noqa: A002
        """Async twin of :meth:`get`."""
        return await Queue.for_job_type(self.name).aget(id)

    async def alist(self, **options: Any) -> Page:
        """Async twin of :meth:`list`."""
        return await Queue.for_job_type(self.name).alist(**options)


def _plan_options(cron: str | None, timezone: str | None, catch_up: Any) -> dict[str, Any]:
    """Check the periodic plan options of ``@job`` with the schedules' own rules.

    Raises
    ------
    InvalidOption
        If ``cron`` is not a cron expression, ``timezone`` not an IANA time zone, or
        ``catch_up`` not a bool.
    """
    if cron is None:
        return {}
    if not isinstance(catch_up, bool):
        raise InvalidOption(f"catch_up must be True or False: got {catch_up!r}.")
    return {
        "cron": validate_cron(cron),
        "timezone": validate_timezone(timezone or "UTC"),
        "catch_up": catch_up,
    }


def _check_handler(name: str, func: Callable[..., Any]) -> None:
    """Refuse ``func`` as the handler of job type ``name`` unless it can be called as
    ``func(payload, ctx)``, as the worker calls it (README "Quickstart"). A callable
    whose signature Python cannot read (some builtins) is let through.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If ``func`` is not callable, or its signature does not take two positional
        arguments.
    """
    if not callable(func):
        raise ImproperlyConfiguredJobQueue(
            f"Job type {name!r}: @job decorates a function (payload, ctx): got {func!r}."
        )
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None, None)
    except TypeError as exc:
        what = getattr(func, "__qualname__", repr(func))
        raise ImproperlyConfiguredJobQueue(
            f"Job type {name!r}: its handler {what}{signature} is called as "
            f"{what}(payload, ctx) and would fail every attempt ({exc})."
        ) from None


def job(
    name: str,
    *,
    queue: str | None = None,
    max_retry: int | None = None,
    timeout: Duration | None = None,
    concurrent: int | None = None,
    priority: int | None = None,
    secure: bool = False,
    dedupe: Duration | None = UNSET,
    keep: Duration | None = None,
    cron: str | None = None,
    timezone: str | None = None,
    catch_up: bool = False,
    limits: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], JobHandle]:
    """Register the decorated function as the handler of job type ``name``.

    Parameters
    ----------
    name:
        The job type, such as ``"emails.send"`` (1 to 200 characters).
    queue:
        Queue its jobs go to (default ``JOBQUEUE["DEFAULT_QUEUE"]``).
    max_retry:
        Retries after the first failed attempt (default ``DEFAULT_MAX_RETRY``).
    timeout:
        Run time limit of one attempt: a duration (``"30s"``, seconds, timedelta).
    concurrent:
        Most jobs of this type one foreman runs at once (None: no limit).
    priority:
        Default priority, an integer >= 1; 1 runs first.
    secure:
        Never show payload or result in the admin, the console or logs.
    dedupe, keep:
        The id options (docs/design.md#ids) for this type: how long a done job keeps its id, how
        long a dead letter stays (durations).
    cron, timezone, catch_up:
        A periodic plan of this type named after it: a cron expression
        such as ``"0 3 * * *"`` read in ``timezone`` (IANA, default ``"UTC"``);
        ``catch_up`` runs once for ticks missed during downtime (default False:
        skip them). Synced to the table when a foreman starts.
    limits:
        A fleet-wide flow-control limit of the type (docs/limits.md):
        ``{"concurrency": 10, "rate": "100/s", "burst": 20,
        "partition": "payload.customer_id", "fair": True}``, any of them.

    Returns
    -------
    Callable
        A decorator returning a :class:`JobHandle`.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If an option is invalid, or ``name`` is already registered to another function;
        at once, before any decoration, if ``name`` is not a string: ``@job`` written
        without its name (README "Quickstart": ``@job("emails.send")``) would
        otherwise bind the function's name to the decorator and register nothing;
        if the function cannot be called as ``func(payload, ctx)`` (README
        "Quickstart"), which every attempt of the type would fail with a TypeError
        until its jobs are dead letters.

    Implements: docs/design.md#execution.
    """
    if not isinstance(name, str):
        what = getattr(name, "__name__", None) if callable(name) else None
        raise ImproperlyConfiguredJobQueue(
            f'@job takes the job type\'s name first: write @job("app.{what}") above {what}().'
            if what
            else f"@job takes the job type's name first, a string: got {name!r}."
        )
    options = {
        "queue": queue,
        "max_retry": max_retry,
        "timeout": timeout,
        "concurrent": concurrent,
        "priority": priority,
        "secure": secure,
        "dedupe": dedupe,
        "keep": keep,
        "limits": limits,
    }

    def decorator(func: Callable[..., Any]) -> JobHandle:
        _check_handler(name, func)
        try:
            plan = _plan_options(cron, timezone, catch_up)
        except InvalidOption as exc:
            raise ImproperlyConfiguredJobQueue(f"Job type {name!r}: {exc}") from exc
        return JobHandle(register(describe(name, func, {**options, **plan})))

    return decorator

"""Job types: the ``@job`` decorator, ``JOBQUEUE["JOB_TYPES"]`` and JobDescription.

A job type (seed 004 "title") names a handler ``handler(payload, ctx)``, sync or
async, and carries seed 004's JobDescription options. Job types come from two
places: ``@job`` in any module (each installed app's ``jobs`` module is imported on
first lookup, as the admin autodiscovers ``admin``), and ``JOBQUEUE["JOB_TYPES"]``,
read on lookup, never at import time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules, import_string

from .durations import Duration, parse_duration, to_ms
from .exceptions import ImproperlyConfiguredJobQueue, InvalidOption, UnknownJobType

if TYPE_CHECKING:
    from .enqueue import EnqueueResult
    from .ids import JobView, Page
    from .models import ScheduleJob

__all__ = ["JobDescription", "JobHandle", "get_job_description", "job", "registered_job_types"]

#: "Not given", unlike None ("none"): a ``JobDescription.dedupe`` left to the queue's.
UNSET: Any = object()
_UNSET = UNSET  # this module's own spelling
_registry: dict[str, JobDescription] = {}
_lock = threading.Lock()
#: Held while the ``jobs`` modules import: a thread that looks a job type up meanwhile
#: waits for them instead of finding the registry half filled. Reentrant: an import
#: may itself look a job type up.
_discover_lock = threading.RLock()
_discovered = False
_discovering = False

_JOB_TYPE_KEYS = frozenset(
    {
        "handler",
        "queue",
        "max_retry",
        "timeout",
        "concurrent",
        "priority",
        "secure",
        "dedupe",
        "keep",
    }
)


@dataclass(frozen=True)
class JobDescription:
    """A registered job type (seed 004 JobDescription).

    ``None`` in an option means "the ``JOBQUEUE`` default, read when used".
    """

    #: The job type's name (seed 004 Title), such as ``"emails.send"``.
    name: str
    #: ``handler(payload, ctx)``; a coroutine function runs in its own event loop.
    handler: Callable[..., Any]
    #: Queue its jobs go to unless the enqueue says otherwise.
    queue: str | None = None
    #: Retries after the first attempt (seed 004 MaxRetry).
    max_retry: int | None = None
    #: Run time limit of one attempt, ms (seed 004 TTL, there in seconds).
    timeout_ms: int | None = None
    #: Most jobs of this type one foreman runs at once (seed 004 Concurrent); None: no limit.
    concurrent: int | None = None
    #: Default priority, 1 runs first (seed 004 Priority).
    priority: int | None = None
    #: Never show payload or result in the admin, the console or logs (seed 004 Secure).
    secure: bool = False
    #: How long a done job keeps its id (seed 002 ``dedupe``); _UNSET: the queue's.
    dedupe: timedelta | None = _UNSET
    #: How long a dead letter stays (seed 002 ``keep``); None: the queue's.
    keep: timedelta | None = None
    #: A periodic plan of this type (issue 6): cron expression, or None for none.
    cron: str | None = None
    #: The IANA time zone the cron expression is read in.
    timezone: str = "UTC"
    #: After downtime, run once for the missed ticks (True) or skip them (False).
    catch_up: bool = False


def _validate(desc: JobDescription) -> JobDescription:
    name = desc.name
    if not isinstance(name, str) or not name or len(name) > 200:
        raise ImproperlyConfiguredJobQueue(
            f"Job type name {name!r} must be a non-empty string of at most 200 characters."
        )
    if not callable(desc.handler):
        raise ImproperlyConfiguredJobQueue(f"Job type {name!r}: handler must be callable.")
    for option, minimum in (("max_retry", 0), ("concurrent", 1), ("priority", 1)):
        value = getattr(desc, option)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < minimum
        ):
            raise ImproperlyConfiguredJobQueue(
                f"Job type {name!r}: {option} must be an integer >= {minimum}: got {value!r}."
            )
    if desc.queue is not None and (
        not isinstance(desc.queue, str) or not 0 < len(desc.queue) <= 100
    ):
        raise ImproperlyConfiguredJobQueue(
            f"Job type {name!r}: queue must be a name of 1 to 100 characters: got {desc.queue!r}."
        )
    return desc


def _describe(name: str, handler: Callable[..., Any], options: Mapping[str, Any]) -> JobDescription:
    try:
        timeout = options.get("timeout")
        dedupe = options.get("dedupe", _UNSET)
        keep = options.get("keep")
        return _validate(
            JobDescription(
                name=name,
                handler=handler,
                queue=options.get("queue"),
                max_retry=options.get("max_retry"),
                timeout_ms=None
                if timeout is None
                else max(1, to_ms(parse_duration(timeout, name="timeout"))),
                concurrent=options.get("concurrent"),
                priority=options.get("priority"),
                secure=bool(options.get("secure", False)),
                dedupe=dedupe
                if dedupe in (_UNSET, None)
                else parse_duration(dedupe, name="dedupe"),
                keep=None if keep is None else parse_duration(keep, name="keep"),
                **_plan_options(options),
            )
        )
    except InvalidOption as exc:
        raise ImproperlyConfiguredJobQueue(f"Job type {name!r}: {exc}") from exc


def _plan_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the periodic plan options of ``@job`` (cron, timezone, catch_up)."""
    cron = options.get("cron")
    if cron is None:
        return {}
    from .schedules import validate_cron, validate_timezone

    catch_up = options.get("catch_up", False)
    if not isinstance(catch_up, bool):
        raise InvalidOption(f"catch_up must be True or False: got {catch_up!r}.")
    return {
        "cron": validate_cron(cron),
        "timezone": validate_timezone(options.get("timezone") or "UTC"),
        "catch_up": catch_up,
    }


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
        from .enqueue import enqueue_job

        queue = options.pop("queue", None)
        return enqueue_job(queue, self.name, payload, **options)

    def schedule(self, payload: Any = None, *, at: datetime, **options: Any) -> ScheduleJob:
        """Plan one job of this type at ``at``; see :func:`schedules.add_job_with_schedule`.

        ``options``: ``queue``, ``priority``, ``name``. Returns the ``ScheduleJob``.
        """
        from .schedules import add_job_with_schedule

        return add_job_with_schedule(self.name, payload, at=at, **options)

    async def aschedule(self, payload: Any = None, *, at: datetime, **options: Any) -> ScheduleJob:
        """Async twin of :meth:`schedule`."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.schedule)(payload, at=at, **options)

    async def aenqueue(self, payload: Any = None, **options: Any) -> EnqueueResult:
        """Async twin of :meth:`enqueue`."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue)(payload, **options)

    # Seed 002 ids: on the job type's queue; see django_jobqueue.ids.Queue.

    def add(self, value: Any = None, **options: Any) -> bool:
        """Add a job of this type unless its id is taken; see :meth:`ids.Queue.add`."""
        from .ids import Queue

        return Queue.for_job_type(self.name).add(value, **options)

    def set(self, id: str, value: Any = None, **options: Any) -> None:  # noqa: A002
        """Make the id's job run with ``value``; see :meth:`ids.Queue.set`."""
        from .ids import Queue

        Queue.for_job_type(self.name).set(id, value, **options)

    def update(self, id: str, value: Any = None, **options: Any) -> bool:  # noqa: A002
        """Change a waiting job's value; see :meth:`ids.Queue.update`."""
        from .ids import Queue

        return Queue.for_job_type(self.name).update(id, value, **options)

    def cancel(self, id: str) -> bool:  # noqa: A002
        """Remove or stop the id's job; see :meth:`ids.Queue.cancel`."""
        from .ids import Queue

        return Queue.for_job_type(self.name).cancel(id)

    def get(self, id: str) -> JobView | None:  # noqa: A002
        """Return the job holding ``id``; see :meth:`ids.Queue.get`."""
        from .ids import Queue

        return Queue.for_job_type(self.name).get(id)

    def list(self, **options: Any) -> Page:
        """Return a page of this type's jobs; see :meth:`ids.Queue.list`."""
        from .ids import Queue

        return Queue.for_job_type(self.name).list(**options)

    async def aadd(self, value: Any = None, **options: Any) -> bool:
        """Async twin of :meth:`add`."""
        from .ids import Queue

        return await Queue.for_job_type(self.name).aadd(value, **options)

    async def aset(self, id: str, value: Any = None, **options: Any) -> None:  # noqa: A002
        """Async twin of :meth:`set`."""
        from .ids import Queue

        await Queue.for_job_type(self.name).aset(id, value, **options)

    async def aupdate(self, id: str, value: Any = None, **options: Any) -> bool:  # noqa: A002
        """Async twin of :meth:`update`."""
        from .ids import Queue

        return await Queue.for_job_type(self.name).aupdate(id, value, **options)

    async def acancel(self, id: str) -> bool:  # noqa: A002
        """Async twin of :meth:`cancel`."""
        from .ids import Queue

        return await Queue.for_job_type(self.name).acancel(id)

    async def aget(self, id: str) -> JobView | None:  # noqa: A002
        """Async twin of :meth:`get`."""
        from .ids import Queue

        return await Queue.for_job_type(self.name).aget(id)

    async def alist(self, **options: Any) -> Page:
        """Async twin of :meth:`list`."""
        from .ids import Queue

        return await Queue.for_job_type(self.name).alist(**options)


def job(
    name: str,
    *,
    queue: str | None = None,
    max_retry: int | None = None,
    timeout: Duration | None = None,
    concurrent: int | None = None,
    priority: int | None = None,
    secure: bool = False,
    dedupe: Duration | None = _UNSET,
    keep: Duration | None = None,
    cron: str | None = None,
    timezone: str | None = None,
    catch_up: bool = False,
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
        Seed 002 queue options for this type: how long a done job keeps its id, how
        long a dead letter stays (durations).
    cron, timezone, catch_up:
        A periodic plan of this type named after it (issue 6): a cron expression
        such as ``"0 3 * * *"`` read in ``timezone`` (IANA, default ``"UTC"``);
        ``catch_up`` runs once for ticks missed during downtime (default False:
        skip them). Synced to the table when a foreman starts.

    Returns
    -------
    Callable
        A decorator returning a :class:`JobHandle`.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If an option is invalid, or ``name`` is already registered to another function.

    Implements: seed 004 "type JobDescription", Foreman.AddWorker.
    """
    options = {
        "queue": queue,
        "max_retry": max_retry,
        "timeout": timeout,
        "concurrent": concurrent,
        "priority": priority,
        "secure": secure,
        "dedupe": dedupe,
        "keep": keep,
        "cron": cron,
        "timezone": timezone,
        "catch_up": catch_up,
    }

    def decorator(func: Callable[..., Any]) -> JobHandle:
        desc = _describe(name, func, options)
        with _lock:
            existing = _registry.get(name)
            if existing is not None and _qualname(existing.handler) != _qualname(func):
                raise ImproperlyConfiguredJobQueue(
                    f"Job type {name!r} is already registered to {_qualname(existing.handler)}; "
                    "give this one another name."
                )
            _registry[name] = desc
        return JobHandle(desc)

    return decorator


def _qualname(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def _autodiscover() -> None:
    global _discovered
    global _discovering
    if _discovered:
        return
    with _discover_lock:
        if _discovered or _discovering:  # done, or this thread's own import asking
            return
        _discovering = True
        try:
            autodiscover_modules("jobs")
        finally:
            _discovering = False
            _discovered = True


def _from_settings(name: str) -> JobDescription | None:
    from .conf import get_config

    options = get_config().JOB_TYPES.get(name)
    if options is None:
        return None
    if (
        not isinstance(options, Mapping)
        or set(options) - _JOB_TYPE_KEYS
        or "handler" not in options
    ):
        raise ImproperlyConfiguredJobQueue(
            f"JOBQUEUE['JOB_TYPES'][{name!r}] must be a dict with a 'handler' dotted path and "
            f"keys among {sorted(_JOB_TYPE_KEYS)}."
        )
    handler = options["handler"]
    if isinstance(handler, str):
        handler = import_string(handler)
    if isinstance(handler, JobHandle):
        handler = handler.description.handler
    return _describe(name, handler, {k: v for k, v in options.items() if k != "handler"})


def get_job_description(name: str) -> JobDescription:
    """Return the job type ``name``, from ``JOBQUEUE["JOB_TYPES"]`` or ``@job``.

    Settings win over decorators, so a project can retune an app's job type. A name
    that is neither but is the module path of a Django ``@task`` resolves to the job
    type that runs that task (:func:`django_jobqueue.tasks.task_job_description`).

    Raises
    ------
    UnknownJobType
        If no job type has this name.
    """
    _autodiscover()
    desc = _from_settings(name)
    if desc is None:
        desc = _registry.get(name)
    if desc is None:
        desc = _task_job_description(name)
    if desc is None:
        raise UnknownJobType(
            f"Unknown job type {name!r}: register it with @job({name!r}) or in "
            "JOBQUEUE['JOB_TYPES']."
        )
    return desc


def _task_job_description(name: str) -> JobDescription | None:
    """Return the job type running the Django task at path ``name``, if it is one."""
    if "." not in name:
        return None
    try:
        from .tasks import task_job_description
    except ImproperlyConfigured:  # no tasks framework: Django 5.2 without the backport
        return None
    return task_job_description(name)


def registered_job_types() -> dict[str, JobDescription]:
    """Return every known job type by name (decorated, then overridden by settings)."""
    from .conf import get_config

    _autodiscover()
    result = dict(_registry)
    for name in get_config().JOB_TYPES:
        result[name] = get_job_description(name)
    return result

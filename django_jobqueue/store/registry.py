"""Job types: registration, ``JOBQUEUE["JOB_TYPES"]`` and JobDescription lookup.

A job type (docs/design.md#execution) names a handler ``handler(payload, ctx)``, sync or
async, and carries the job type's options. Job types come from two
places: :func:`register`, which the ``@job`` decorator of
:mod:`django_jobqueue.handle` calls in any module (each installed app's ``jobs``
module is imported on first lookup, as the admin autodiscovers ``admin``), and
``JOBQUEUE["JOB_TYPES"]``, read on lookup, never at import time.

This module is in the store layer: it describes and finds job types, and knows no
verb that enqueues them (those are :class:`django_jobqueue.handle.JobHandle`'s).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.utils.module_loading import autodiscover_modules, import_string

from ..core.conf import get_config
from ..core.durations import parse_duration, to_ms
from ..core.exceptions import ImproperlyConfiguredJobQueue, InvalidOption, UnknownJobType
from ..core.limitspec import Limit, parse_limit
from ..core.validation import MAX_INT, QUEUE_NAME_RULE, queue_name_problem

__all__ = [
    "UNSET",
    "JobDescription",
    "describe",
    "get_job_description",
    "register",
    "registered_job_types",
    "validate",
]

__all__ = [
    "UNSET",
    "JobDescription",
    "describe",
    "get_job_description",
    "register",
    "register_job_type_resolver",
    "registered_job_types",
    "validate",
]

#: "Not given": the default of an option whose ``None`` already means something,
#: such as ``dedupe`` (None: keep no id once done; UNSET: the queue's).
UNSET: Any = object()
_registry: dict[str, JobDescription] = {}
_lock = threading.Lock()
#: Tried in order for a name neither in settings nor decorated; see
#: :func:`register_job_type_resolver`. Replaced whole under ``_lock``, read without it.
_resolvers: tuple[Callable[[str], JobDescription | None], ...] = ()
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
        "limits",
    }
)


@dataclass(frozen=True)
class JobDescription:
    """A registered job type (docs/design.md#execution).

    ``None`` in an option means "the ``JOBQUEUE`` default, read when used".
    """

    #: The job type's name (docs/design.md#execution), such as ``"emails.send"``.
    name: str
    #: ``handler(payload, ctx)``; a coroutine function runs in its own event loop.
    handler: Callable[..., Any]
    #: Queue its jobs go to unless the enqueue says otherwise.
    queue: str | None = None
    #: Retries after the first attempt (docs/design.md#execution).
    max_retry: int | None = None
    #: Run time limit of one attempt, ms (docs/design.md#execution).
    timeout_ms: int | None = None
    #: Most jobs of this type one foreman runs at once (docs/design.md#execution); None: no limit.
    concurrent: int | None = None
    #: Default priority, 1 runs first (docs/design.md#execution).
    priority: int | None = None
    #: Never show payload or result in the admin, the console or logs (docs/design.md#execution).
    secure: bool = False
    #: How long a done job keeps its id (docs/design.md#ids); UNSET: the queue's.
    dedupe: timedelta | None = UNSET
    #: How long a dead letter stays (docs/design.md#ids); None: the queue's.
    keep: timedelta | None = None
    #: A periodic plan of this type: cron expression, or None for none.
    cron: str | None = None
    #: The IANA time zone the cron expression is read in.
    timezone: str = "UTC"
    #: After downtime, run once for the missed ticks (True) or skip them (False).
    catch_up: bool = False
    #: Fleet-wide flow-control limit of the type (docs/limits.md); None: none.
    limits: Limit | None = None


def validate(desc: JobDescription) -> JobDescription:
    """Check ``desc``'s options and return it unchanged.

    The cron expression and time zone are checked here only for their type; their
    grammar belongs to :mod:`django_jobqueue.schedules`, which ``@job`` asks first.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If the name is not 1 to 200 characters, the handler is not callable, an
        integer option is outside its range (at most 2**31 - 1, a 32-bit column's
        largest; ``timeout`` too, in ms: 24.8 days), the queue name breaks
        :data:`~django_jobqueue.core.validation.QUEUE_NAME_RULE`, or a plan option has
        the wrong type.
    """
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
            isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_INT
        ):
            raise ImproperlyConfiguredJobQueue(
                f"Job type {name!r}: {option} must be an integer from {minimum} to "
                f"{MAX_INT:,}: got {value!r}."
            )
    if desc.timeout_ms is not None and desc.timeout_ms > MAX_INT:
        # The job row's timeout_ms column is a signed 32-bit integer: past it, every
        # enqueue of this type failed in the database (integer out of range).
        raise ImproperlyConfiguredJobQueue(
            f"Job type {name!r}: timeout must be at most {MAX_INT:,} ms (24.8 days): "
            f"got {desc.timeout_ms:,} ms."
        )
    if desc.queue is not None and (problem := queue_name_problem(desc.queue)) is not None:
        raise ImproperlyConfiguredJobQueue(
            f"Job type {name!r}: the queue name {desc.queue!r} {problem}: {QUEUE_NAME_RULE}."
        )
    if desc.cron is not None and (not isinstance(desc.cron, str) or not desc.cron):
        raise ImproperlyConfiguredJobQueue(
            f"Job type {name!r}: cron must be a cron expression: got {desc.cron!r}."
        )
    if not isinstance(desc.timezone, str) or not isinstance(desc.catch_up, bool):
        raise ImproperlyConfiguredJobQueue(
            f"Job type {name!r}: timezone must be a string and catch_up True or False: "
            f"got {desc.timezone!r}, {desc.catch_up!r}."
        )
    return desc


def describe(name: str, handler: Callable[..., Any], options: Mapping[str, Any]) -> JobDescription:
    """Build and :func:`validate` the JobDescription of job type ``name``.

    ``options`` holds any of ``queue``, ``max_retry``, ``concurrent``, ``priority``
    (integers or None), ``secure`` (bool), ``timeout``, ``dedupe``, ``keep``
    (durations: ``"30s"``, seconds, timedelta; ``dedupe`` may be :data:`UNSET`),
    ``limits`` (a limit dict, docs/limits.md), and
    the plan options ``cron``, ``timezone``, ``catch_up``, taken as given: the caller
    checks their grammar (``@job`` does, with :mod:`django_jobqueue.schedules`).
    Without ``cron``, ``timezone`` and ``catch_up`` are ignored. Reads no settings.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If an option is invalid; the message names the job type.
    """
    try:
        timeout = options.get("timeout")
        dedupe = options.get("dedupe", UNSET)
        keep = options.get("keep")
        limits = options.get("limits")
        cron = options.get("cron")
        plan = (
            {}
            if cron is None
            else {
                "cron": cron,
                "timezone": options.get("timezone") or "UTC",
                "catch_up": options.get("catch_up", False),
            }
        )
        return validate(
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
                dedupe=dedupe if dedupe in (UNSET, None) else parse_duration(dedupe, name="dedupe"),
                keep=None if keep is None else parse_duration(keep, name="keep"),
                limits=None if limits is None else parse_limit(limits),
                **plan,
            )
        )
    except InvalidOption as exc:
        raise ImproperlyConfiguredJobQueue(f"Job type {name!r}: {exc}") from exc


def register(description: JobDescription) -> JobDescription:
    """Add ``description`` to the registry and return it.

    Registering the same name again with the same function (by module and qualified
    name, as on a module's re-import) replaces the description. Thread safe.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If the name is already registered to another function.
    """
    name = description.name
    with _lock:
        existing = _registry.get(name)
        if existing is not None and _qualname(existing.handler) != _qualname(description.handler):
            raise ImproperlyConfiguredJobQueue(
                f"Job type {name!r} is already registered to {_qualname(existing.handler)}; "
                "give this one another name."
            )
        _registry[name] = description
    return description


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
    described = getattr(handler, "description", None)  # a @job handle: its function
    if isinstance(described, JobDescription):
        handler = described.handler
    return describe(name, handler, {k: v for k, v in options.items() if k != "handler"})


def get_job_description(name: str) -> JobDescription:
    """Return the job type ``name``, from ``JOBQUEUE["JOB_TYPES"]`` or ``@job``.

    Settings win over decorators, so a project can retune an app's job type. A name
    that is neither goes to the resolvers of :func:`register_job_type_resolver`: the
    module path of a Django ``@task`` resolves to the job type that runs that task.

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
        desc = _resolve(name)
    if desc is None:
        raise UnknownJobType(
            f"Unknown job type {name!r}: register it with @job({name!r}) or in "
            "JOBQUEUE['JOB_TYPES'], or, for a type run by gateway workers of other "
            "languages, in JOBQUEUE['GATEWAY']['JOB_TYPES']."
        )
    return desc


def register_job_type_resolver(resolver: Callable[[str], JobDescription | None]) -> None:
    """Let ``resolver`` describe job types that are neither in settings nor ``@job``.

    :func:`get_job_description` tries the resolvers in the order they were
    registered, after ``JOBQUEUE["JOB_TYPES"]`` and ``@job``; the first that returns a
    description wins. Register from ``AppConfig.ready()``, which runs in every process
    (workers included); registering the same resolver again changes nothing.

    Parameters
    ----------
    resolver:
        ``resolver(name)`` returns the :class:`JobDescription` of job type ``name``,
        or None when it does not know the name; it must not raise for an unknown name.
        The django.tasks backend registers one that resolves a task's module path.
    """
    global _resolvers
    with _lock:
        if resolver not in _resolvers:
            _resolvers = (*_resolvers, resolver)


def _resolve(name: str) -> JobDescription | None:
    """Return the first registered resolver's description of ``name``, or None."""
    for resolver in _resolvers:  # a tuple, replaced whole: safe to read unlocked
        desc = resolver(name)
        if desc is not None:
            return desc
    return None


def registered_job_types() -> dict[str, JobDescription]:
    """Return every known job type by name (decorated, then overridden by settings)."""
    _autodiscover()
    result = dict(_registry)
    for name in get_config().JOB_TYPES:
        result[name] = get_job_description(name)
    return result

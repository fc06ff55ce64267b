"""django-jobqueue: a job queue in your Django project's own SQL database.

Public API::

    from django_jobqueue import job, enqueue_job

    @job("emails.send", queue="emails", max_retry=5, timeout="30s")
    def send(payload, ctx): ...

    send.enqueue({"to": "a@example.com"}, delay="10s")

``import django_jobqueue`` loads only the exceptions, so settings or an AppConfig may
import the package before the app registry is ready. Every other public name is
imported on first use (PEP 562 ``__getattr__``), from the module that defines it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .exceptions import (
    DuplicateJob,
    InvalidJobId,
    InvalidOption,
    InvalidPayload,
    InvalidRequest,
    JobQueueError,
    LockTimeout,
    NonRetryableError,
    ProRequired,
    UnknownJobType,
    WrongDatabase,
)

if TYPE_CHECKING:
    from .enqueue import EnqueueResult, aenqueue_job, aenqueue_many, enqueue_job, enqueue_many
    from .handle import JobHandle, job
    from .registry import JobDescription

__all__ = [
    "DuplicateJob",
    "EnqueueResult",
    "InvalidJobId",
    "InvalidOption",
    "InvalidPayload",
    "InvalidRequest",
    "JobDescription",
    "JobHandle",
    "JobQueueError",
    "LockTimeout",
    "NonRetryableError",
    "ProRequired",
    "UnknownJobType",
    "WrongDatabase",
    "aenqueue_job",
    "aenqueue_many",
    "enqueue_job",
    "enqueue_many",
    "job",
]

#: The lazily imported public names and the submodule each comes from.
_LAZY = {
    "EnqueueResult": "enqueue",
    "aenqueue_job": "enqueue",
    "enqueue_job": "enqueue",
    "aenqueue_many": "enqueue",
    "enqueue_many": "enqueue",
    "JobHandle": "handle",
    "job": "handle",
    "JobDescription": "registry",
}


def __getattr__(name: str) -> Any:
    """Import the public name ``name`` from its submodule on first use.

    Raises
    ------
    AttributeError
        If ``name`` is not a lazily exported name (submodules import as usual).
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

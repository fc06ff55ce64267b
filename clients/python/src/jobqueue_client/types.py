"""The gateway's answers as dataclasses (``docs/gateway.md`` names every member).

Times are aware :class:`~datetime.datetime` objects; members the gateway adds later
are ignored, so an older client keeps working against a newer server.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, TypeVar

__all__ = [
    "BulkResult",
    "CancelResult",
    "ClaimedJob",
    "Enqueued",
    "ErrorEntry",
    "IdJob",
    "Job",
    "Page",
    "Registration",
    "from_json",
]

T = TypeVar("T")


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def from_json(cls: type[T], data: dict[str, Any]) -> T:
    """Return ``cls`` (a dataclass of this module) built from a JSON object.

    Unknown members are dropped; members typed as a datetime are parsed from ISO 8601.
    """
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name not in data:
            continue
        value = data[field.name]
        if "datetime" in str(field.type):
            value = _time(value)
        elif field.name == "last_error" and isinstance(value, dict):
            value = from_json(ErrorEntry, value)
        kwargs[field.name] = value
    return cls(**kwargs)


@dataclasses.dataclass(frozen=True)
class Enqueued:
    """The answer to one enqueued job: ``status`` is ``enqueued`` or ``deduplicated``
    (then ``jid`` is the job already holding the unique key)."""

    status: str
    jid: str

    @property
    def deduplicated(self) -> bool:
        """True when no job was added: an existing one holds the unique key."""
        return self.status == "deduplicated"


@dataclasses.dataclass(frozen=True)
class ErrorEntry:
    """A failed attempt of a job."""

    attempt: int | None = None
    message: str = ""
    exception_class: str = ""
    at: str | None = None


@dataclasses.dataclass(frozen=True)
class Job:
    """A job by jid (``GET /sdk/jobs/{jid}``); ``payload``/``result`` are None for a
    secure job type. ``state`` is the state word (docs/design.md#states), ``status`` the stored
    one."""

    jid: str
    queue: str
    job_type: str
    status: str
    state: str
    attempt: int = 0
    max_retry: int = 0
    priority: int = 0
    id: str | None = None
    secure: bool = False
    payload: Any = None
    result: Any = None
    last_error: ErrorEntry | None = None
    cancel_requested: bool = False
    run_at: datetime | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    expires_at: datetime | None = None


@dataclasses.dataclass(frozen=True)
class BulkResult:
    """A bulk action's answer: jobs ``changed``, and its counts by kind (``dead``,
    ``waiting``; ``cancelled``, ``requested``; ``deleted``, ``running`` left alone)."""

    action: str
    changed: int
    detail: dict[str, int]


@dataclasses.dataclass(frozen=True)
class CancelResult:
    """``cancelled``: a waiting job was stopped; ``cancel_requested``: a running job
    was asked to stop."""

    cancelled: bool
    cancel_requested: bool


@dataclasses.dataclass(frozen=True)
class IdJob:
    """The id verbs' ``Job``: a job by queue and id (``get``, ``list``)."""

    jid: str
    queue: str
    job_type: str
    state: str
    id: str | None = None
    value: Any = None
    at: datetime | None = None
    attempt: int = 0
    priority: int = 0
    max_retry: int = 0
    result: Any = None
    message: str = ""
    cancel_requested: bool = False
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclasses.dataclass(frozen=True)
class Page:
    """A page of :class:`IdJob`; pass ``next`` as ``cursor`` for the following one."""

    jobs: list[IdJob]
    next: str | None


@dataclasses.dataclass(frozen=True)
class Registration:
    """A worker's registration: the lease and heartbeat interval to use, ms."""

    name: str
    lease_ms: int
    heartbeat_ms: int
    max_wait_ms: int


@dataclasses.dataclass(frozen=True)
class ClaimedJob:
    """A claimed job: report on it with its ``lease_token``."""

    jid: str
    queue: str
    job_type: str
    lease_token: str
    id: str | None = None
    payload: Any = None
    attempt: int = 1
    max_retry: int = 0
    priority: int = 0
    timeout_ms: int = 0
    lease_expires_at: datetime | None = None
    cancel_requested: bool = False

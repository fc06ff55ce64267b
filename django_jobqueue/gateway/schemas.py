"""The gateway's JSON shapes: pydantic v2 models the views validate with and the
OpenAPI 3.1 document (``/sdk/openapi.json``) is generated from, so the two agree.

Inputs are strict (a number is not a string, ``true`` is not 1) and refuse unknown
members, so a misspelt option is a 422 naming it rather than silently ignored.
Durations (``delay``) are a string such as ``"500ms"``, ``"5s"``, ``"1m"``, or a
number of seconds, as in the Python API; times are ISO 8601 with an offset.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from django.utils import timezone
from ninja import Schema
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    field_validator,
)

from ..core.validation import QUEUE_NAME_RULE, queue_name_problem, text_problem

__all__ = [
    "ERRORS",
    "BatchIn",
    "BatchOut",
    "BulkIn",
    "BulkOut",
    "CancelOut",
    "ClaimIn",
    "ClaimOut",
    "ClaimedJob",
    "CompleteIn",
    "EnqueueOut",
    "ErrorOut",
    "FailIn",
    "HeartbeatIn",
    "HeartbeatOut",
    "AddedOut",
    "CancelledOut",
    "SetOut",
    "UpdatedOut",
    "IdJobOut",
    "IdValueIn",
    "JobIn",
    "JobOut",
    "OutcomeOut",
    "PageOut",
    "RegisterIn",
    "RegisterOut",
    "RetryOut",
    "UniqueLockOut",
    "UniqueLocksOut",
    "UniqueReleaseOut",
]

_MAX_INT = 2_147_483_647
_MAX_BIGINT = 2**63 - 1
#: run_at's bounds from now: every database stores dates between them.
_MAX_SPAN = timedelta(days=100 * 365)

Int = Annotated[int, Field(strict=True)]
Duration = StrictStr | Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] | Int


def _storable(value: str) -> str:
    """Refuse text no database stores as given (NUL, lone surrogates): a 422, not a 500."""
    problem = text_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _queue_name(value: str) -> str:
    """Refuse a name that breaks the queue-name rule (docs/gateway.md "Queue names")."""
    problem = queue_name_problem(value)
    if problem is not None:
        raise ValueError(f"{problem}: {QUEUE_NAME_RULE}")
    return value


#: Text that every database stores as given.
Storable = AfterValidator(_storable)
Name = Annotated[StrictStr, Field(min_length=1, max_length=200), Storable]
QueueName = Annotated[StrictStr, Field(min_length=1, max_length=100), AfterValidator(_queue_name)]
Text = Annotated[StrictStr, Field(min_length=1, max_length=1024), Storable]
#: A job's jid as the gateway answers it: 32 lowercase hex digits.
Jid = Annotated[StrictStr, Field(pattern=r"^[0-9a-f]{32}$")]


def _iso_text(value: Any) -> Any:
    """Refuse a number for a time: JSON has no time type, and pydantic would read a
    number as seconds (or ms) since 1970, a guess docs/gateway.md never promises."""
    if isinstance(value, int | float):  # bool too
        raise ValueError("must be ISO 8601 text with an offset, e.g. 2026-12-05T10:00:00Z")
    return value


#: A time in the gateway's input: ISO 8601 text with an offset (docs/gateway.md).
IsoTime = Annotated[AwareDatetime, BeforeValidator(_iso_text)]


def _bounded(value: datetime | None) -> datetime | None:
    if value is not None and abs(value - timezone.now()) > _MAX_SPAN:
        raise ValueError("must be within 100 years of now")
    return value


class _In(Schema):
    model_config = ConfigDict(extra="forbid")


class ErrorOut(Schema):
    """Every error: ``error`` is a code of ``errors.STATUS_BY_CODE``."""

    error: str
    detail: str
    field: str | None = None
    #: The refused job's position in a batch.
    index: int | None = None
    #: The package's own error code, for ``invalid_request``.
    reason: str | None = None
    #: The holder of a duplicate id (409 ``duplicate_job``).
    jid: str | None = None
    #: The scope a 403 lacked.
    scope: str | None = None


#: Error statuses every route may answer, each with the one error shape.
ERRORS: dict[int, type[ErrorOut]] = dict.fromkeys(
    (400, 401, 402, 403, 404, 409, 413, 415, 422, 429, 503), ErrorOut
)


class JobIn(_In):
    """One job to enqueue, with every option of ``enqueue_job``."""

    queue: QueueName | None = Field(None, description="None: the job type's queue, else default.")
    job_type: Name
    payload: Any = None
    priority: Annotated[int, Field(strict=True, ge=1, le=_MAX_INT)] | None = None
    delay: Duration | None = Field(None, description='"500ms", "5s", "1m", or seconds.')
    run_at: IsoTime | None = None
    expires_ms: Annotated[int, Field(strict=True, ge=1, le=_MAX_INT)] | None = None
    timeout_ms: Annotated[int, Field(strict=True, ge=1, le=_MAX_INT)] | None = None
    max_retry: Annotated[int, Field(strict=True, ge=0, le=10_000)] | None = None
    unique_key: Text | None = None
    unique_mode: Literal["while_locked", "until_executing", "until_executed"] | None = None
    unique_ttl_ms: Annotated[int, Field(strict=True, ge=0, le=10**12)] | None = None
    id: Text | None = Field(None, description="An id (docs/design.md#ids); a held id answers 409.")
    batch: Annotated[int, Field(strict=True, ge=1, le=_MAX_BIGINT)] | None = Field(
        None, description="An existing batch's id to join (docs/workflows.md); POST /sdk/jobs only."
    )
    after: Annotated[list[Jid], Field(min_length=1, max_length=1000)] | None = Field(
        None,
        description="Jids of jobs this one waits for (docs/workflows.md); POST /sdk/jobs only.",
    )
    on_upstream_failure: Literal["cancel", "skip", "ignore"] | None = Field(
        None, description="With after: what an upstream job's death does to this one."
    )
    limit_key: Name | None = Field(
        None, description="The key a partitioned limit counts the job under (docs/limits.md)."
    )

    _run_at = field_validator("run_at")(_bounded)


class EnqueueOut(Schema):
    """The enqueue's answer (docs/design.md#gateway): ``enqueued`` with the new jid, or the
    holder's jid."""

    status: Literal["enqueued", "deduplicated"]
    jid: str


class BatchIn(_In):
    """Up to ``JOBQUEUE["GATEWAY"]["MAX_BATCH"]`` jobs, stored all or nothing."""

    jobs: list[JobIn] = Field(min_length=1)


class BatchOut(Schema):
    """One answer per job, in the batch's order."""

    results: list[EnqueueOut]


class ErrorEntryOut(Schema):
    """A failed attempt (no traceback over the gateway)."""

    attempt: int | None = None
    message: str = ""
    exception_class: str = ""
    at: str | None = None


class JobOut(Schema):
    """A job by jid. ``payload`` and ``result`` are null for a ``secure`` job type."""

    jid: str
    queue: str
    job_type: str
    id: str | None
    status: str
    state: Literal["scheduled", "waiting", "running", "failed", "done", "cancelled", "blocked"]
    attempt: int
    max_retry: int
    priority: int
    secure: bool
    payload: Any = None
    result: Any = None
    last_error: ErrorEntryOut | None = None
    cancel_requested: bool
    run_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expires_at: datetime | None


class CancelOut(Schema):
    """``cancelled``: a waiting job stopped; ``cancel_requested``: a running one asked."""

    cancelled: bool
    cancel_requested: bool


class RetryOut(Schema):
    """Whether the dead letter (or scheduled job) was made due now."""

    retried: bool


class IdValueIn(_In):
    """The id verbs ``add``/``set``/``update``: a value and a time (``at`` or ``delay``)."""

    value: Any = None
    job_type: Name | None = Field(None, description="None: the queue's one job type.")
    at: IsoTime | None = None
    delay: Duration | None = None

    _at = field_validator("at")(_bounded)


class AddedOut(Schema):
    """``add``: whether a job was added (false: a job holds the id)."""

    added: bool


class SetOut(Schema):
    """``set``: always true."""

    set: bool


class UpdatedOut(Schema):
    """``update``: whether the scheduled or waiting job changed."""

    updated: bool


class CancelledOut(Schema):
    """``cancel``: whether a job was removed or told to stop."""

    cancelled: bool


class IdJobOut(Schema):
    """The id verbs' ``Job``: a job as ``get`` and ``list`` show it."""

    id: str | None
    value: Any = None
    state: str
    at: datetime
    attempt: int
    jid: str
    queue: str
    job_type: str
    priority: int
    max_retry: int
    result: Any = None
    message: str
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class PageOut(Schema):
    """The id verbs' ``Page``: ``next`` is the cursor of the following page, or null."""

    jobs: list[IdJobOut]
    next: str | None


class RegisterIn(_In):
    """A gateway worker's registration (the console's worker list shows it).

    ``name``: the worker's name, the registering token's from then on; None: the
    gateway makes one (the answer's ``name``).
    """

    name: Name | None = None
    host: Annotated[StrictStr, Field(max_length=255)] = ""
    pid: Annotated[int, Field(strict=True, ge=0, le=_MAX_INT)] | None = None
    languages: list[Annotated[StrictStr, Field(max_length=50), Storable]] = Field([], max_length=20)
    queues: list[QueueName] = Field(min_length=1, max_length=100)
    job_types: list[Name] = Field([], max_length=1000)
    concurrency: Annotated[int, Field(strict=True, ge=1, le=10_000)] = 1
    version: Annotated[StrictStr, Field(max_length=64)] = ""

    @field_validator("host", "version")
    @classmethod
    def _storable_text(cls, value: str) -> str:
        return _storable(value)


class RegisterOut(Schema):
    """What a worker should use: its lease and heartbeat interval, ms."""

    name: str
    lease_ms: int
    heartbeat_ms: int
    max_wait_ms: int


class StopIn(_In):
    """A gateway worker's clean stop: the console and ``jobqueue status`` drop it now."""

    name: Name


class StopOut(Schema):
    """Whether the worker's row was marked stopped (False: it already was)."""

    name: str
    stopped: bool


class ClaimIn(_In):
    """Claim up to ``limit`` due jobs, waiting up to ``wait_ms`` for one."""

    queues: list[QueueName] = Field(min_length=1, max_length=100)
    job_types: list[Name] = Field([], max_length=1000, description="Empty: any type.")
    limit: Annotated[int, Field(strict=True, ge=1, le=100)] = 1
    wait_ms: Annotated[int, Field(strict=True, ge=0, le=30_000)] = 0
    worker: Name | None = Field(None, description="The registered name, if any.")
    lease_ms: Annotated[int, Field(strict=True, ge=1_000, le=86_400_000)] | None = None


class ClaimedJob(Schema):
    """A claimed job: report on it with its ``lease_token``."""

    jid: str
    queue: str
    job_type: str
    id: str | None
    payload: Any = None
    attempt: int
    max_retry: int
    priority: int
    timeout_ms: int
    lease_token: str
    lease_expires_at: datetime | None
    cancel_requested: bool


class ClaimOut(Schema):
    """The claimed jobs (empty when none came within ``wait_ms``)."""

    jobs: list[ClaimedJob]


class _LeaseIn(_In):
    lease_token: Annotated[StrictStr, Field(min_length=1, max_length=64)]


class ProgressIn(_In):
    """How far a job got (docs/console.md "Progress"): ``done`` of ``total`` (0: unknown)."""

    done: Annotated[int, Field(strict=True, ge=0)]
    total: Annotated[int, Field(strict=True, ge=0)]
    message: Annotated[str, Field(max_length=200)] | None = None


class HeartbeatIn(_LeaseIn):
    """Extend the lease of a claimed job, by ``lease_ms`` (default ``LEASE_MS``); store
    ``progress`` with it when given."""

    lease_ms: Annotated[int, Field(strict=True, ge=1_000, le=86_400_000)] | None = None
    progress: ProgressIn | None = None


class HeartbeatOut(Schema):
    """Whether the job was asked to stop; stop it and report it ``cancelled``."""

    cancel_requested: bool


class CompleteIn(_LeaseIn):
    """A job's success, with its JSON result."""

    result: Any = None


class FailIn(_LeaseIn):
    """A failed attempt: ``retry`` false dead-letters it at once; ``cancelled`` true
    stores that the handler stopped on a cancel request."""

    error: Annotated[StrictStr, Field(max_length=10_000), Storable] = "failed"
    exception_class: Annotated[
        StrictStr,
        Field(
            max_length=200,
            description="The error's class, e.g. builtins.ValueError or TypeError: stored "
            "as the attempt's exception_class; the message starts with its last part.",
        ),
        Storable,
    ] = ""
    retry: StrictBool = True
    cancelled: StrictBool = False


class OutcomeOut(Schema):
    """The job's stored status after the report: done, retry, error, max_retry,
    cancelled, or init (a ``set`` asked for one run more)."""

    status: str


class UniqueLockOut(Schema):
    """A held unique key (docs/design.md#unique-keys)."""

    queue: str
    unique_key: str
    mode: str
    jid: str
    job_type: str
    status: str
    expires_at: datetime | None


class UniqueLocksOut(Schema):
    """A page of held unique keys; ``next``: the cursor of the following page."""

    locks: list[UniqueLockOut]
    next: str | None


class UniqueReleaseOut(Schema):
    """Whether a held key was released, and the jid that held it."""

    released: bool
    jid: str | None


class BulkIn(_In):
    """Retry, cancel or delete every job that matches: ``filter`` in the filter language
    (docs/console.md "Search syntax") and/or the structured members, all AND-ed."""

    action: Literal["retry", "cancel", "delete"]
    filter: str | None = Field(None, max_length=2000)
    queue: QueueName | None = None
    job_type: Name | None = None
    state: Literal["scheduled", "waiting", "running", "failed"] | None = None
    jids: list[Annotated[StrictStr, Field(max_length=32)]] | None = Field(None, max_length=1000)


class BulkOut(Schema):
    """How many jobs changed, by kind."""

    action: str
    changed: int
    detail: dict[str, int]

"""The gateway's JSON shapes of batches and workflows (docs/gateway.md "Batches and
workflows"); the shared types and rules are :mod:`.schemas`'."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import AwareDatetime, Field, field_validator

from .schemas import _MAX_INT, Duration, Name, QueueName, _bounded, _In

__all__ = [
    "BatchCallbackOut",
    "BatchOpenIn",
    "CallbackIn",
    "BatchStateOut",
    "StepIn",
    "StepOptionsIn",
    "StepOut",
    "WorkflowIn",
    "WorkflowOut",
    "WorkflowStateOut",
]

Policy = Literal["cancel", "skip", "ignore"]


class StepOptionsIn(_In):
    """A step's enqueue options: ``JobIn``'s, without an id or a unique key (a step's
    job is its own, never a holder's)."""

    queue: QueueName | None = Field(None, description="None: the job type's queue, else default.")
    priority: Annotated[int, Field(strict=True, ge=1, le=_MAX_INT)] | None = None
    delay: Duration | None = Field(None, description='"500ms", "5s", "1m", or seconds.')
    run_at: AwareDatetime | None = None
    expires_ms: Annotated[int, Field(strict=True, ge=1, le=_MAX_INT)] | None = None
    timeout_ms: Annotated[int, Field(strict=True, ge=1, le=_MAX_INT)] | None = None
    max_retry: Annotated[int, Field(strict=True, ge=0, le=10_000)] | None = None

    _run_at = field_validator("run_at")(_bounded)


class StepIn(_In):
    """One step: its name (unique in the workflow), job, and the steps it waits for."""

    name: Name
    job_type: Name
    payload: Any = None
    options: StepOptionsIn | None = None
    after: list[Name] = Field(default_factory=list, max_length=1000)
    on_upstream_failure: Policy | None = Field(
        None, description="The policy of this step's edges; None: the workflow's."
    )


class WorkflowIn(_In):
    """A workflow: up to ``JOBQUEUE["GATEWAY"]["MAX_BATCH"]`` steps, in any order."""

    name: Name
    on_upstream_failure: Policy = "cancel"
    steps: list[StepIn] = Field(min_length=1)


class CallbackIn(_In):
    """A batch's callback: a job made once when the batch reaches it (docs/workflows.md
    "Batches"). Its payload is ``{"batch", "counts", "payload": <this payload>}``."""

    job_type: Name
    payload: Any = None
    options: StepOptionsIn | None = Field(
        None, description="Its enqueue options; no run_at (it runs when the batch ends)."
    )


class BatchOpenIn(_In):
    """An open batch: it takes jobs (``POST /sdk/jobs`` with ``batch``) until sealed."""

    on_finish: CallbackIn | None = None
    on_success: CallbackIn | None = None
    on_failure: CallbackIn | None = None
    queue: QueueName | None = Field(
        None, description="The callbacks' queue when a callback names none."
    )


class WorkflowOut(Schema):
    """The enqueued workflow: its id and each step's jid."""

    id: int
    name: str
    jids: dict[str, str]


class BatchCallbackOut(Schema):
    """A callback of a batch: its job type, and its job's jid once made ("" until then)."""

    job_type: str
    jid: str


class BatchStateOut(Schema):
    """A batch's counts, read now; ``finished_at`` is null until every job ended."""

    id: int
    total: int
    done: int
    failed: int
    cancelled: int
    pending: int
    sealed: bool
    created_at: datetime
    finished_at: datetime | None
    on_finish: BatchCallbackOut | None
    on_success: BatchCallbackOut | None
    on_failure: BatchCallbackOut | None


class StepOut(Schema):
    """A step of a workflow: its job and its state word (``blocked`` while it waits)."""

    name: str
    jid: str
    job_type: str
    queue: str
    status: str
    state: str
    after: list[str]


class WorkflowStateOut(Schema):
    """A workflow's counts and steps, read now."""

    id: int
    name: str
    on_upstream_failure: str
    total: int
    done: int
    failed: int
    cancelled: int
    pending: int
    created_at: datetime
    finished_at: datetime | None
    steps: list[StepOut]
    #: True when the workflow has more steps than the answer lists (the first 2,000).
    steps_truncated: bool

"""Errors raised by django-jobqueue.

Every error a caller can act on has its own class and a stable snake_case ``code``,
which the HTTP gateway maps to a status in one table (``422 invalid_request``,
``402 pro_required``, ...). ``JobQueueError`` itself is a base: do not raise it
directly.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "DirectCreateRefused",
    "DuplicateJob",
    "ImproperlyConfiguredJobQueue",
    "InvalidJobId",
    "InvalidOption",
    "InvalidPayload",
    "PayloadTooLarge",
    "InvalidRequest",
    "InvalidStep",
    "JobQueueError",
    "LockTimeout",
    "NonRetryableError",
    "ProRequired",
    "StepLeaseLost",
    "StepOrderChanged",
    "UnknownJobType",
    "WrongDatabase",
]


class JobQueueError(Exception):
    """Base class of every django-jobqueue error; do not raise it directly."""

    #: Stable machine-readable name of the error.
    code = "jobqueue_error"


class InvalidRequest(JobQueueError, ValueError):
    """A call's arguments are invalid; nothing was written (gateway: 422)."""

    code = "invalid_request"


class InvalidOption(InvalidRequest):
    """An enqueue option (delay, priority, expires_ms, unique_mode, ...) is invalid."""

    code = "invalid_option"


class InvalidPayload(InvalidRequest):
    """A payload cannot be stored as JSON."""

    code = "invalid_payload"


class PayloadTooLarge(InvalidPayload):
    """A payload or result is JSON, but over ``MAX_PAYLOAD_BYTES``/``MAX_RESULT_BYTES``.

    Its ``code`` stays ``invalid_payload``: callers that handle that code need nothing new.
    """


class InvalidJobId(InvalidRequest):
    """A job id (docs/design.md#ids) is not 1 to 1,024 bytes of UTF-8."""

    code = "invalid_job_id"


class UnknownJobType(InvalidRequest, LookupError):
    """No handler is registered under this job type."""

    code = "unknown_job_type"


class DuplicateJob(JobQueueError):
    """A job with this (queue, id) already holds the id (docs/design.md#creation).

    ``holder_jid`` is the jid of the job that holds it, when known; ``index`` the
    refused job's place in its batch, when it came in one.
    """

    code = "duplicate_job"

    def __init__(
        self, message: str, *, holder_jid: str | None = None, index: int | None = None
    ) -> None:
        super().__init__(message)
        self.holder_jid = holder_jid
        self.index = index


class DirectCreateRefused(JobQueueError):
    """``Job.objects.create()``/``bulk_create()`` were called: jobs are made by ``enqueue_job``.

    A job made straight in the table would have no creation lock, no id or unique
    key hold, no validation and no wake-up; ``enqueue_job`` (or a ``Queue`` verb)
    makes it with all four.
    """

    code = "use_enqueue_job"


class LockTimeout(JobQueueError):
    """Waiting for a creation lock timed out (docs/design.md#creation)."""

    code = "lock_timeout"


class ProRequired(JobQueueError):
    """The feature needs a valid Pro licence (docs/design.md#core-and-pro)."""

    code = "pro_required"


class WrongDatabase(JobQueueError):
    """The caller's open transaction is on another database alias than the jobs'."""

    code = "wrong_database"


class ImproperlyConfiguredJobQueue(JobQueueError, ImproperlyConfigured):
    """The ``JOBQUEUE`` setting or a job type declaration is invalid."""

    code = "improperly_configured"


class NonRetryableError(JobQueueError):
    """Raised by a handler to fail its job for good at once (status ``error``).

    Any other exception counts as a failed attempt and is retried with backoff.
    """

    code = "non_retryable"


class InvalidStep(InvalidRequest):
    """A resumable step (docs/workflows.md "Resumable steps") was misused: a bad name, a
    cursor or result that is not JSON, ``step.save()`` outside its step's own
    transaction, a step begun inside the caller's ``transaction.atomic()`` on the jobs'
    database, or ``ctx.step()`` used as a ``with`` block."""

    code = "invalid_step"


class StepOrderChanged(JobQueueError):
    """A handler's steps do not match the steps its job's row recorded.

    The rule (docs/workflows.md "Resumable steps", "Order"): the k-th step an attempt
    begins must be the k-th recorded step, a step past the recorded ones must have a
    name not recorded, and an attempt that returns must have reached every recorded
    step. A step renamed, reordered or removed between deploys breaks it; the attempt
    fails (an ordinary, retryable failure), and no step is skipped silently.

    ``step`` is the name the handler asked for ("" when the attempt returned without
    reaching ``expected``), ``expected`` the recorded name it should have been (""
    when none), ``recorded`` the recorded names in order.
    """

    code = "step_order_changed"

    def __init__(self, message: str, *, step: str, expected: str, recorded: Sequence[str]) -> None:
        super().__init__(message)
        self.step = step
        self.expected = expected
        self.recorded = list(recorded)


class StepLeaseLost(JobQueueError):
    """A step's checkpoint found the job no longer leased to this worker.

    The job was reaped, timed out or handed back meanwhile, so another attempt owns
    it: the step's writes were rolled back with the refused checkpoint, and the
    handler should stop (its outcome will not be stored either).
    """

    code = "step_lease_lost"

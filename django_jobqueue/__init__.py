"""django-jobqueue: a job queue in your Django project's own SQL database.

Public API::

    from django_jobqueue import job, enqueue_job

    @job("emails.send", queue="emails", max_retry=5, timeout="30s")
    def send(payload, ctx): ...

    send.enqueue({"to": "a@example.com"}, delay="10s")
"""

from __future__ import annotations

from .enqueue import EnqueueResult, aenqueue_job, enqueue_job
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
from .registry import JobDescription, JobHandle, job

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
    "enqueue_job",
    "job",
]

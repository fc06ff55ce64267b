"""A Python client of the HTTP SDK gateway (``django_jobqueue.gateway``), importing
nothing of Django: install the ``client`` extra (httpx) in any Python process.

- :class:`Client` / :class:`AsyncClient`: producer calls (enqueue, batch, the id verbs'
  id verbs, get, cancel, retry) and the worker protocol's calls;
- :class:`Worker`: a worker loop running Python handlers with heartbeats, cancel and
  a graceful stop on SIGTERM;
- :mod:`.errors`: one exception class per gateway error code, under
  :class:`GatewayError`.

The routes and shapes are in ``docs/gateway.md``.
"""

from __future__ import annotations

from .calls import EnqueueOptions
from .errors import (
    BadRequest,
    BodyTooLarge,
    DatabaseUnavailable,
    DuplicateJob,
    Forbidden,
    GatewayError,
    GatewayUnreachable,
    InvalidRequest,
    LeaseLost,
    LockTimeout,
    MethodNotAllowed,
    NotFound,
    NotJson,
    ProRequired,
    RateLimited,
    ServiceUnavailable,
    Unauthorized,
)
from .producer import AsyncClient, Client
from .types import CancelResult, ClaimedJob, Enqueued, ErrorEntry, IdJob, Job, Page, Registration
from .worker import Cancelled, Handler, JobContext, NoRetry, Worker

__all__ = [
    "AsyncClient",
    "BadRequest",
    "BodyTooLarge",
    "CancelResult",
    "Cancelled",
    "ClaimedJob",
    "Client",
    "DatabaseUnavailable",
    "DuplicateJob",
    "EnqueueOptions",
    "Enqueued",
    "ErrorEntry",
    "Forbidden",
    "GatewayError",
    "GatewayUnreachable",
    "Handler",
    "IdJob",
    "InvalidRequest",
    "Job",
    "JobContext",
    "LeaseLost",
    "LockTimeout",
    "MethodNotAllowed",
    "NoRetry",
    "NotFound",
    "NotJson",
    "Page",
    "ProRequired",
    "RateLimited",
    "Registration",
    "ServiceUnavailable",
    "Unauthorized",
    "Worker",
]

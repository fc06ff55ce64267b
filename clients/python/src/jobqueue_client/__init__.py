"""The Python client of django-jobqueue's HTTP gateway, a distribution of its own
(``django-jobqueue-client``) that needs httpx alone: no Django, no settings, no
database driver, in any Python 3.11+ process.

- :class:`Client` / :class:`AsyncClient`: producer calls (enqueue, batch, the id
  verbs, get, cancel, retry) and the worker protocol's calls;
- :class:`Worker`: a worker loop running Python handlers with heartbeats, cancel and
  a graceful stop on SIGTERM; ``jobqueue-worker`` (:mod:`.cli`) runs one from the
  command line;
- :mod:`.errors`: one exception class per gateway error code, under
  :class:`GatewayError`.

``__version__`` is the installed distribution's version. The routes and shapes are in
the server's ``docs/gateway.md``; the Django app re-exports this package as
``django_jobqueue.client``.
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
from .types import (
    BulkResult,
    CancelResult,
    ClaimedJob,
    Enqueued,
    ErrorEntry,
    IdJob,
    Job,
    Page,
    Registration,
)
from .version import VERSION
from .worker import Cancelled, Handler, JobContext, NoRetry, Worker

#: The installed distribution's version (``importlib.metadata``).
__version__ = VERSION

__all__ = [
    "AsyncClient",
    "BadRequest",
    "BodyTooLarge",
    "BulkResult",
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
    "__version__",
]

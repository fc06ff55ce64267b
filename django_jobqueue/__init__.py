"""django-jobqueue: a job queue in your Django project's own SQL database.

Public API::

    from django_jobqueue import job, enqueue_job

    @job("emails.send", queue="emails", max_retry=5, timeout="30s")
    def send(payload, ctx): ...

    send.enqueue({"to": "a@example.com"}, delay="10s")

``import django_jobqueue`` loads only the exceptions, so settings or an AppConfig may
import the package before the app registry is ready. Every other public name is
imported on first use (PEP 562 ``__getattr__``), from the module that defines it, and
like Django's own model imports it needs the apps populating.

The design (vocabulary, states, guarantees, locking, layers) is docs/design.md; docstrings
cite its sections by anchor (``docs/design.md#ids``).

Layers (docs/design.md#layers). A module imports only from layers below its own (pyproject.toml's
``[tool.importlinter]`` contracts, checked by ``lint-imports``); modules of one layer
joined by ``|`` know nothing of each other, those joined by ``:`` may import each
other. Top to bottom:

============================  ===========================================================
layer                         modules and their purpose
============================  ===========================================================
app config                    ``apps``: the AppConfig; ``ready()`` wires checks, signals,
                              the SQLite clock and the tasks job-type resolver
surfaces (``|``)              ``admin/``: the Django admin of jobs, schedules, tokens;
                              ``management/``: ``runworkers`` and ``jobqueue`` commands;
                              ``tasks/``: the django.tasks backend and its result mapping;
                              ``checks``: system checks of settings, database, deployment;
                              ``gateway/``: the HTTP SDK gateway (routes, auth, errors);
                              ``console/``: the operators' console pages and actions;
                              ``metrics``: the Prometheus endpoint
worker                        ``worker/``: supervisor, foreman, executor, governor,
                              completer, heartbeats, job context, listening for wake-ups
producer verbs (``:``)        ``handle``: ``@job`` and ``JobHandle``'s verbs;
                              ``ids/``: ``Queue``, the verbs of job ids, pages, cursors;
                              ``schedules/``: cron and DST arithmetic, plans, declared
                              plans, materialising due plans;
                              ``maintenance``: operators' status, prune, retry, cancel;
                              ``overview``: the queues at a glance for console and metrics
create and transition (``:``) ``enqueue``: validate and build a job, then the manager
                              creates it; ``bulk``: many jobs under sorted locks at once;
                              ``storage``: claim, heartbeat, complete, fail, reap;
                              ``storage_sql``: the raw batched claim and ``done``;
                              ``flows/``: batches, workflows, dependencies, and what
                              a job's end does to them (docs/workflows.md)
store (``:``)                 ``models``: Job and ScheduleJob, where Django looks for
                              them; ``store/``: ``managers`` (creation under advisory
                              locks, the guarded plan advance), ``rawinsert`` and
                              ``rawkeyed`` (the inserts as raw SQL), ``unique`` (the
                              unique-key rules), ``locks`` (advisory and SQLite locks),
                              ``registry`` (job descriptions and lookup), ``licence/``
                              (the token, its checks, the CLI), ``wakeups`` (a queue's
                              wake-up after commit), ``apitokens`` (the gateway's
                              hashed API tokens), ``workerstats`` (the worker
                              registry), ``jobstats`` (the job statistics of a
                              process), ``statbuffer`` (their buffer and upserts),
                              ``statmodels`` and ``flowmodels`` (the tables of job
                              statistics and of batches and workflows), ``pauses``
                              (queue pause and resume), ``errorlog`` (the entry a
                              failed attempt adds)
leaves (``:``)                ``core/``: ``conf`` (the JOBQUEUE settings), ``durations``
                              (the one duration parser), ``exceptions`` (the typed
                              errors), ``validation`` (text, queue, payload and delay
                              checks), ``signals`` (the signals workers send), ``compat``
                              (the tasks framework or its backport), ``dbclock`` (the
                              database clock ``Now``), ``backoff`` (retry delays),
                              ``reconnect`` (telling a dead connection, repeating a
                              worker write once on a new one), ``prepared``
                              (PostgreSQL prepared statements of the hot paths),
                              ``stopsignals`` (SIGTERM/SIGINT relayed out of the signal
                              handler)
============================  ===========================================================

The HTTP client (``client/``) is in no layer: it re-exports ``jobqueue_client``, the
distribution ``django-jobqueue-client`` (``clients/python/``), which imports nothing of
Django, ninja or pydantic, nor anything of this package; nothing of the app imports it.

``exceptions``, ``apitokens`` and ``licence/`` at the top are the old, documented paths of
modules now in ``core/`` and ``store/``: re-exports that no module of the app imports
(CHANGELOG.md, "Module paths").

Three more contracts: the worker imports no surface, and ``store/`` and ``models`` import
no producer (``handle``, ``ids``, ``schedules``, ``enqueue``, ``storage``); ``ids`` and
``schedules`` are independent of each other.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .core.exceptions import (
    DuplicateJob,
    InvalidJobId,
    InvalidOption,
    InvalidPayload,
    InvalidRequest,
    InvalidStep,
    JobQueueError,
    LockTimeout,
    NonRetryableError,
    ProRequired,
    StepLeaseLost,
    StepOrderChanged,
    UnknownJobType,
    WrongDatabase,
)

if TYPE_CHECKING:
    from .enqueue import EnqueueResult, aenqueue_job, aenqueue_many, enqueue_job, enqueue_many
    from .flows.batches import BatchHandle, aget_batch, batch, get_batch
    from .flows.canvas import Signature, chain, chord, group, signature
    from .flows.graph import Workflow, WorkflowResult
    from .flows.links import wait_for
    from .handle import JobHandle, job
    from .store.registry import JobDescription

__all__ = [
    "BatchHandle",
    "DuplicateJob",
    "EnqueueResult",
    "InvalidJobId",
    "InvalidOption",
    "InvalidPayload",
    "InvalidRequest",
    "InvalidStep",
    "JobDescription",
    "JobHandle",
    "JobQueueError",
    "LockTimeout",
    "NonRetryableError",
    "ProRequired",
    "StepLeaseLost",
    "StepOrderChanged",
    "Signature",
    "UnknownJobType",
    "Workflow",
    "WorkflowResult",
    "WrongDatabase",
    "aenqueue_job",
    "aenqueue_many",
    "aget_batch",
    "batch",
    "chain",
    "chord",
    "enqueue_job",
    "enqueue_many",
    "get_batch",
    "group",
    "job",
    "signature",
    "wait_for",
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
    "JobDescription": "store.registry",
    "BatchHandle": "flows.batches",
    "batch": "flows.batches",
    "get_batch": "flows.batches",
    "aget_batch": "flows.batches",
    "Signature": "flows.canvas",
    "chain": "flows.canvas",
    "chord": "flows.canvas",
    "group": "flows.canvas",
    "signature": "flows.canvas",
    "Workflow": "flows.graph",
    "WorkflowResult": "flows.graph",
    "wait_for": "flows.links",
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

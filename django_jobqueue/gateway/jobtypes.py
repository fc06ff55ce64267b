"""Job types run by gateway workers in other languages ("external" job types).

A gateway worker in TypeScript or Go has no Python handler, yet its job types must be
known to the create path (``build_job`` looks every job type up). They are declared
in settings, with the options of a Python job type but no handler::

    JOBQUEUE = {"GATEWAY": {"JOB_TYPES": {
        "pdf.render": {"queue": "node", "max_retry": 5, "timeout": "2m"},
    }}}

:func:`external_job_description` is registered as a job type resolver in
``AppConfig.ready()`` (the registry's hook: the registry does not import the gateway).
Its handler never runs on a gateway worker. If a ``runworkers`` foreman claims such a
job (it claims by queue), the handler fails it for good with a message saying so:
give external job types queues of their own and start ``runworkers --queue ...``
without them.

This module imports no django-ninja.
"""

from __future__ import annotations

from typing import Any

from ..core.conf import get_config
from ..core.exceptions import NonRetryableError
from ..store.registry import JobDescription, describe

__all__ = ["external_job_description", "external_job_types"]


def _external_handler(payload: Any, ctx: Any) -> None:
    raise NonRetryableError(
        f"job type {getattr(ctx, 'job_type', '?')!r} is declared in "
        "JOBQUEUE['GATEWAY']['JOB_TYPES'] and runs on gateway workers, but a runworkers "
        f"process claimed it from queue {getattr(ctx, 'queue', '?')!r}: give external job "
        "types their own queues and leave those out of runworkers --queue"
    )


def external_job_types() -> dict[str, Any]:
    """Return ``JOBQUEUE["GATEWAY"]["JOB_TYPES"]``: name to options."""
    return dict(get_config().GATEWAY.JOB_TYPES)


def external_job_description(name: str) -> JobDescription | None:
    """Describe job type ``name`` if ``JOBQUEUE["GATEWAY"]["JOB_TYPES"]`` declares it.

    Returns None for any other name (the registry's resolver contract).

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If its options are invalid (as for a Python job type's).
    """
    options = get_config().GATEWAY.JOB_TYPES.get(name)
    if options is None:
        return None
    return describe(name, _external_handler, options)

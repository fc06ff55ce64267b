"""The ``JOBQUEUE`` setting: its defaults, its validation and a cached typed view.

Read settings only through :func:`get_config`, never at import or decoration time.
The cache is cleared when ``JOBQUEUE`` changes (``override_settings`` works).

Every duration either carries its unit in its name (``LEASE_MS``: milliseconds) or,
without one (``KEEP``, ``DEDUPE``, ``RETENTION``), takes any value that
:func:`django_jobqueue.core.durations.parse_duration` accepts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from .durations import parse_duration
from .exceptions import ImproperlyConfiguredJobQueue, InvalidOption
from .limitspec import Limit, parse_limit
from .validation import MAX_INT, QUEUE_NAME_RULE, queue_name_problem

__all__ = [
    "DEFAULTS",
    "GATEWAY_DEFAULTS",
    "MAX_CONCURRENCY",
    "GatewaySettings",
    "JobQueueSettings",
    "QueueOptions",
    "get_config",
    "validate_settings",
]

#: Defaults of every ``JOBQUEUE`` key. Units are in the names or said beside them.
DEFAULTS: dict[str, Any] = {
    # Database alias that stores jobs; None asks the routers (db_for_write(Job)).
    "DATABASE": None,
    # Job types declared in settings: {"emails.send": {"handler": "app.jobs.send", ...}}.
    "JOB_TYPES": {},
    # Per-queue options: {"emails": {"dedupe": "1h", "keep": "7d", "limits": {...}}};
    # "limits" is a flow-control limit on the whole queue (docs/limits.md).
    "QUEUES": {},
    # Dotted paths of middleware (docs/design.md#execution), outermost first.
    "MIDDLEWARE": [],
    # Worker threads per foreman.
    "CONCURRENCY": 4,
    # Pause between two claims of one worker, ms.
    "BREAK_TIME_MS": 0,
    # Least time between two worker spawns, ms.
    "RAMP_TIME_MS": 100,
    # Prefetch budget (ms; 0: no prefetch): README "Prefetch", docs/prefetch.md.
    "PREFETCH_MS": 2,
    # Whether a worker logs "job finished ... status=done" (INFO) for every success;
    # False (or `runworkers -v 0`) drops that line, which costs a no-op drain about a
    # tenth of its rate (README "Speed"). Failures are always logged.
    "LOG_SUCCESS": True,
    # Young-generation threshold of Python's cyclic garbage collector in a worker
    # process (container objects allocated, less those freed, between two
    # collections); 0 leaves Python's own (700, 2,000 from 3.13). README "Speed".
    "WORKER_GC_THRESHOLD": 50_000,
    # Governor idle sleep bounds (ms): grows from MIN to MAX while no job is found.
    "MIN_SLEEP_MS": 50,
    "MAX_SLEEP_MS": 2_000,
    # Whether `jobqueue prune` deletes dead letters.
    "CLEAN_ERROR": False,
    # Lease of a claimed job (ms) and the heartbeat interval that extends it (ms, at most
    # a third of the lease, so two heartbeats can be lost before the lease expires).
    "LEASE_MS": 60_000,
    "HEARTBEAT_MS": 15_000,
    "DEFAULT_QUEUE": "default",
    # Priority 1 runs first (docs/design.md#execution).
    "DEFAULT_PRIORITY": 100,
    "DEFAULT_MAX_RETRY": 3,
    # Default run time limit of one attempt (ms).
    "DEFAULT_TIMEOUT_MS": 300_000,
    # Retry backoff (ms): min(MAX, BASE * 2 ** (attempt - 1)), then +/- JITTER fraction.
    "BACKOFF_BASE_MS": 1_000,
    "BACKOFF_MAX_MS": 3_600_000,
    "BACKOFF_JITTER": 0.25,
    # How long a dead letter stays (docs/design.md#ids); how long a done job keeps its
    # id (docs/design.md#ids); how long prune keeps done jobs (0: a worker deletes a
    # done job's row as it finishes, where nothing needs it: docs/design.md#retention).
    "KEEP": "7d",
    "DEDUPE": None,
    "RETENTION": "7d",
    # How long creation waits for an advisory lock (ms).
    "LOCK_TIMEOUT_MS": 10_000,
    # Largest payload and result (bytes of JSON as stored); at most what the database
    # takes (system check E103: MariaDB's max_allowed_packet less an overhead).
    "MAX_PAYLOAD_BYTES": 1_048_576,
    "MAX_RESULT_BYTES": 1_048_576,
    # Pro licence token (docs/design.md#core-and-pro) and extra trusted public keys.
    "LICENCE_KEY": "",
    "LICENCE_PUBLIC_KEYS": [],
    # Declarative periodic plans: {"digest": {"job_type": ..., "cron": ..., ...}}.
    "SCHEDULES": {},
    # PostgreSQL LISTEN/NOTIFY wake-ups (polling still finds every job).
    "NOTIFY": True,
    # Grace period of a graceful shutdown (ms) before running jobs are handed back.
    "SHUTDOWN_TIMEOUT_MS": 30_000,
    # The HTTP SDK gateway (django_jobqueue.gateway); keys in GATEWAY_DEFAULTS.
    "GATEWAY": {},
    # How long the per-minute job statistics (JobStat: overview, charts) are kept.
    "STATS_RETENTION": "7d",
    # Bearer token of the Prometheus endpoint (django_jobqueue.metrics); "": staff only.
    "METRICS_TOKEN": "",
    # How long the audit log of operators' actions (AuditEntry) is kept; pruned by
    # `jobqueue prune` (docs/console.md "Audit log").
    "AUDIT_KEEP": "90d",
    # How long after a batch finished the workers' repair pass still makes a callback
    # whose job row is missing (a restored backup, a row deleted by hand):
    # docs/workflows.md "Repair". Keep prune's cutoff for done jobs above it.
    "REPAIR_WINDOW": "1h",
}

#: Defaults of ``JOBQUEUE["GATEWAY"]``.
GATEWAY_DEFAULTS: dict[str, Any] = {
    # Most jobs in one POST /sdk/jobs/batch.
    "MAX_BATCH": 1_000,
    # Largest request body (bytes); Django's DATA_UPLOAD_MAX_MEMORY_SIZE must allow it.
    "MAX_BODY_BYTES": 1_048_576,
    # Requests per minute one token may make; 0: no limit.
    "RATE_PER_MINUTE": 0,
    # How often (ms) a process looks for due jobs of the queues its claims wait on
    # (one query per queue, whatever the number of claims; gateway/waiting.py).
    "CLAIM_POLL_MS": 500,
    # Most claims that wait at once per process under WSGI, where each holds a thread:
    # keep it below the thread count (gunicorn --threads) so producers get a thread.
    # A claim over it answers at once with no jobs and Retry-After. Not used under ASGI.
    "MAX_WAITING_CLAIMS": 2,
    # Job types run by gateway workers in other languages, which have no Python
    # handler: {"pdf.render": {"queue": "node", "max_retry": 5, "timeout": "2m"}}.
    "JOB_TYPES": {},
}
#: Integer keys of ``JOBQUEUE["GATEWAY"]``: (least, largest or None: no bound).
_GATEWAY_INT_KEYS: dict[str, tuple[int, int | None]] = {
    "MAX_BATCH": (1, None),
    "MAX_BODY_BYTES": (1, None),
    "RATE_PER_MINUTE": (0, None),
    "CLAIM_POLL_MS": (10, MAX_INT),
    "MAX_WAITING_CLAIMS": (0, None),
}

#: Most worker threads of one process (``CONCURRENCY``, ``runworkers --concurrency``).
MAX_CONCURRENCY = 10_000

#: Integer keys of ``JOBQUEUE``: (least, largest or None: no bound). Every ms key,
#: the priority and the retries stop at :data:`~.validation.MAX_INT` (a signed 32-bit
#: column's largest, 24.8 days in ms): a larger one passed, and every worker then
#: retried a failing step for ever (a lease past the largest date, a wait that
#: overflows, an integer column out of range).
_INT_KEYS: dict[str, tuple[int, int | None]] = {
    "CONCURRENCY": (1, MAX_CONCURRENCY),
    "BREAK_TIME_MS": (0, MAX_INT),
    "RAMP_TIME_MS": (0, MAX_INT),
    "PREFETCH_MS": (0, MAX_INT),
    "MIN_SLEEP_MS": (1, MAX_INT),
    "MAX_SLEEP_MS": (1, MAX_INT),
    "LEASE_MS": (1_000, MAX_INT),
    "HEARTBEAT_MS": (100, MAX_INT),
    "DEFAULT_PRIORITY": (1, MAX_INT),
    "DEFAULT_MAX_RETRY": (0, MAX_INT),
    "DEFAULT_TIMEOUT_MS": (1, MAX_INT),
    "BACKOFF_BASE_MS": (0, MAX_INT),
    "BACKOFF_MAX_MS": (0, MAX_INT),
    "LOCK_TIMEOUT_MS": (0, MAX_INT),
    "SHUTDOWN_TIMEOUT_MS": (0, MAX_INT),
    "MAX_PAYLOAD_BYTES": (1, None),
    "MAX_RESULT_BYTES": (1, None),
    "WORKER_GC_THRESHOLD": (0, MAX_INT),
}


def _int_problem(value: Any, least: int, largest: int | None) -> str | None:
    """Say what an integer key must be when ``value`` is not such an integer, else None."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if is_int and value >= least and (largest is None or value <= largest):
        return None
    if largest is None:
        return f"must be an integer >= {least}"
    return f"must be an integer from {least} to {largest:,}"


_DURATION_KEYS = ("KEEP", "RETENTION", "STATS_RETENTION", "AUDIT_KEEP", "REPAIR_WINDOW")
_QUEUE_OPTION_KEYS = frozenset({"dedupe", "keep", "limits"})


@dataclass(frozen=True)
class QueueOptions:
    """Options of one queue (docs/design.md#ids): how long done and failed jobs keep their id."""

    #: How long a done job keeps its id taken; None: it frees at once.
    dedupe: timedelta | None
    #: How long a failed (dead letter) job stays and keeps its id.
    keep: timedelta
    #: The queue's declared flow-control limit (docs/limits.md); None: none.
    limits: Limit | None = None


@dataclass(frozen=True)
class GatewaySettings:
    """The validated ``JOBQUEUE["GATEWAY"]``: see :data:`GATEWAY_DEFAULTS`."""

    MAX_BATCH: int
    MAX_BODY_BYTES: int
    RATE_PER_MINUTE: int
    CLAIM_POLL_MS: int
    MAX_WAITING_CLAIMS: int
    JOB_TYPES: Mapping[str, Mapping[str, Any]]


def _parse_gateway(raw: Any, errors: list[str]) -> GatewaySettings:
    if not isinstance(raw, Mapping):
        errors.append(f"JOBQUEUE['GATEWAY'] must be a dict: got {type(raw).__name__}.")
        raw = {}
    unknown = sorted(set(raw) - set(GATEWAY_DEFAULTS))
    if unknown:
        errors.append(
            f"JOBQUEUE['GATEWAY'] has unknown keys {unknown}; the known keys are "
            f"{sorted(GATEWAY_DEFAULTS)}."
        )
    values = {**GATEWAY_DEFAULTS, **raw}
    for key, (least, largest) in _GATEWAY_INT_KEYS.items():
        problem = _int_problem(values[key], least, largest)
        if problem is not None:
            errors.append(f"JOBQUEUE['GATEWAY'][{key!r}] {problem}: got {values[key]!r}.")
    job_types = values["JOB_TYPES"]
    if not isinstance(job_types, Mapping) or not all(
        isinstance(options, Mapping) and "handler" not in options for options in job_types.values()
    ):
        errors.append(
            "JOBQUEUE['GATEWAY']['JOB_TYPES'] must map job type names to dicts of "
            "options (queue, max_retry, timeout, priority, secure, dedupe, keep), "
            "without a handler: gateway workers run them."
        )
        job_types = {}
    return GatewaySettings(
        MAX_BATCH=values["MAX_BATCH"],
        MAX_BODY_BYTES=values["MAX_BODY_BYTES"],
        RATE_PER_MINUTE=values["RATE_PER_MINUTE"],
        CLAIM_POLL_MS=values["CLAIM_POLL_MS"],
        MAX_WAITING_CLAIMS=values["MAX_WAITING_CLAIMS"],
        JOB_TYPES=dict(job_types),
    )


@dataclass(frozen=True)
class JobQueueSettings:
    """The validated ``JOBQUEUE`` setting. Attribute names are the setting's keys."""

    DATABASE: str | None
    JOB_TYPES: Mapping[str, Mapping[str, Any]]
    QUEUES: Mapping[str, QueueOptions]
    MIDDLEWARE: tuple[str, ...]
    CONCURRENCY: int
    BREAK_TIME_MS: int
    RAMP_TIME_MS: int
    PREFETCH_MS: int
    LOG_SUCCESS: bool
    MIN_SLEEP_MS: int
    MAX_SLEEP_MS: int
    CLEAN_ERROR: bool
    LEASE_MS: int
    HEARTBEAT_MS: int
    DEFAULT_QUEUE: str
    DEFAULT_PRIORITY: int
    DEFAULT_MAX_RETRY: int
    DEFAULT_TIMEOUT_MS: int
    BACKOFF_BASE_MS: int
    BACKOFF_MAX_MS: int
    BACKOFF_JITTER: float
    KEEP: timedelta
    DEDUPE: timedelta | None
    RETENTION: timedelta
    LOCK_TIMEOUT_MS: int
    MAX_PAYLOAD_BYTES: int
    MAX_RESULT_BYTES: int
    WORKER_GC_THRESHOLD: int
    LICENCE_KEY: str
    LICENCE_PUBLIC_KEYS: tuple[str, ...]
    SCHEDULES: Mapping[str, Mapping[str, Any]]
    NOTIFY: bool
    SHUTDOWN_TIMEOUT_MS: int
    GATEWAY: GatewaySettings
    STATS_RETENTION: timedelta
    METRICS_TOKEN: str
    AUDIT_KEEP: timedelta
    REPAIR_WINDOW: timedelta
    _queue_defaults: QueueOptions = field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    def queue_options(self, queue: str) -> QueueOptions:
        """Return the options of ``queue``: its ``QUEUES`` entry, else the defaults."""
        return self.QUEUES.get(queue, self._queue_defaults)


def _parse(raw: Mapping[str, Any]) -> tuple[JobQueueSettings | None, list[str]]:
    errors: list[str] = []
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        errors.append(
            f"JOBQUEUE has unknown keys {unknown}; the known keys are {sorted(DEFAULTS)}."
        )
    values = {**DEFAULTS, **raw}
    for key, (least, largest) in _INT_KEYS.items():
        problem = _int_problem(values[key], least, largest)
        if problem is not None:
            errors.append(f"JOBQUEUE[{key!r}] {problem}: got {values[key]!r}.")
    for key in ("CLEAN_ERROR", "NOTIFY", "LOG_SUCCESS"):
        if not isinstance(values[key], bool):
            errors.append(f"JOBQUEUE[{key!r}] must be True or False: got {values[key]!r}.")
    jitter = values["BACKOFF_JITTER"]
    if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
        errors.append(f"JOBQUEUE['BACKOFF_JITTER'] must be a number in 0..1: got {jitter!r}.")
    for key in ("DEFAULT_QUEUE", "LICENCE_KEY", "METRICS_TOKEN"):
        if not isinstance(values[key], str):
            errors.append(f"JOBQUEUE[{key!r}] must be a string: got {values[key]!r}.")
    if values["DATABASE"] is not None and not isinstance(values["DATABASE"], str):
        errors.append(f"JOBQUEUE['DATABASE'] must be an alias or None: got {values['DATABASE']!r}.")
    for key in ("JOB_TYPES", "QUEUES", "SCHEDULES"):
        if not isinstance(values[key], Mapping):
            errors.append(f"JOBQUEUE[{key!r}] must be a dict: got {type(values[key]).__name__}.")
            values[key] = {}
    for key in ("MIDDLEWARE", "LICENCE_PUBLIC_KEYS"):
        if isinstance(values[key], str) or not isinstance(values[key], list | tuple):
            errors.append(f"JOBQUEUE[{key!r}] must be a list of strings: got {values[key]!r}.")
            values[key] = ()
    durations: dict[str, timedelta | None] = {}
    for key in (*_DURATION_KEYS, "DEDUPE"):
        if key == "DEDUPE" and values[key] is None:
            durations[key] = None
            continue
        try:
            durations[key] = parse_duration(values[key], name=f"JOBQUEUE[{key!r}]")
        except InvalidOption as exc:
            errors.append(str(exc))
    audit_keep = durations.get("AUDIT_KEEP")
    if audit_keep is not None and audit_keep < timedelta(hours=1):
        errors.append(
            "JOBQUEUE['AUDIT_KEEP'] must be at least an hour (the audit log of operators' "
            f"actions would be pruned as it is written): got {values['AUDIT_KEEP']!r}."
        )
    if not errors and values["HEARTBEAT_MS"] * 3 > values["LEASE_MS"]:
        errors.append(
            "JOBQUEUE['HEARTBEAT_MS'] must be at most a third of LEASE_MS, so a lease is "
            f"extended before it expires: got {values['HEARTBEAT_MS']} and {values['LEASE_MS']}."
        )
    if not errors and values["MIN_SLEEP_MS"] > values["MAX_SLEEP_MS"]:
        errors.append("JOBQUEUE['MIN_SLEEP_MS'] must not exceed MAX_SLEEP_MS.")
    queues: dict[str, QueueOptions] = {}
    defaults = QueueOptions(
        dedupe=durations.get("DEDUPE"), keep=durations.get("KEEP") or timedelta(0)
    )
    if isinstance(values["DEFAULT_QUEUE"], str) and (
        problem := queue_name_problem(values["DEFAULT_QUEUE"])
    ):
        errors.append(
            f"JOBQUEUE['DEFAULT_QUEUE'] {values['DEFAULT_QUEUE']!r} {problem}: {QUEUE_NAME_RULE}."
        )
    for name, options in values["QUEUES"].items():
        if (problem := queue_name_problem(name)) is not None:
            errors.append(f"JOBQUEUE['QUEUES'] key {name!r} {problem}: {QUEUE_NAME_RULE}.")
            continue
        if not isinstance(options, Mapping) or set(options) - _QUEUE_OPTION_KEYS:
            errors.append(
                f"JOBQUEUE['QUEUES'][{name!r}] must be a dict with keys among "
                f"{sorted(_QUEUE_OPTION_KEYS)}: got {options!r}."
            )
            continue
        try:
            limits = options.get("limits")
            limit = None if limits is None else parse_limit(limits, allow_callable=False)
        except InvalidOption as exc:
            errors.append(f"JOBQUEUE['QUEUES'][{name!r}]['limits']: {exc}")
            continue
        try:
            dedupe = options.get("dedupe", defaults.dedupe)
            queues[name] = QueueOptions(
                dedupe=None if dedupe is None else parse_duration(dedupe, name="dedupe"),
                keep=parse_duration(options.get("keep", defaults.keep), name="keep"),
                limits=limit,
            )
        except InvalidOption as exc:
            errors.append(f"JOBQUEUE['QUEUES'][{name!r}]: {exc}")
    for name, options in values["JOB_TYPES"].items():
        if isinstance(options, Mapping) and options.get("limits") is not None:
            try:
                parse_limit(options["limits"], allow_callable=False)
            except InvalidOption as exc:
                errors.append(f"JOBQUEUE['JOB_TYPES'][{name!r}]['limits']: {exc}")
    gateway = _parse_gateway(values["GATEWAY"], errors)
    if errors:
        return None, errors
    return (
        JobQueueSettings(
            DATABASE=values["DATABASE"],
            JOB_TYPES=dict(values["JOB_TYPES"]),
            QUEUES=queues,
            MIDDLEWARE=tuple(values["MIDDLEWARE"]),
            CONCURRENCY=values["CONCURRENCY"],
            BREAK_TIME_MS=values["BREAK_TIME_MS"],
            RAMP_TIME_MS=values["RAMP_TIME_MS"],
            PREFETCH_MS=values["PREFETCH_MS"],
            LOG_SUCCESS=values["LOG_SUCCESS"],
            MIN_SLEEP_MS=values["MIN_SLEEP_MS"],
            MAX_SLEEP_MS=values["MAX_SLEEP_MS"],
            CLEAN_ERROR=values["CLEAN_ERROR"],
            LEASE_MS=values["LEASE_MS"],
            HEARTBEAT_MS=values["HEARTBEAT_MS"],
            DEFAULT_QUEUE=values["DEFAULT_QUEUE"],
            DEFAULT_PRIORITY=values["DEFAULT_PRIORITY"],
            DEFAULT_MAX_RETRY=values["DEFAULT_MAX_RETRY"],
            DEFAULT_TIMEOUT_MS=values["DEFAULT_TIMEOUT_MS"],
            BACKOFF_BASE_MS=values["BACKOFF_BASE_MS"],
            BACKOFF_MAX_MS=values["BACKOFF_MAX_MS"],
            BACKOFF_JITTER=float(values["BACKOFF_JITTER"]),
            KEEP=durations["KEEP"],  # type: ignore[arg-type]
            DEDUPE=durations["DEDUPE"],
            RETENTION=durations["RETENTION"],  # type: ignore[arg-type]
            LOCK_TIMEOUT_MS=values["LOCK_TIMEOUT_MS"],
            MAX_PAYLOAD_BYTES=values["MAX_PAYLOAD_BYTES"],
            MAX_RESULT_BYTES=values["MAX_RESULT_BYTES"],
            WORKER_GC_THRESHOLD=values["WORKER_GC_THRESHOLD"],
            LICENCE_KEY=values["LICENCE_KEY"],
            LICENCE_PUBLIC_KEYS=tuple(values["LICENCE_PUBLIC_KEYS"]),
            SCHEDULES=dict(values["SCHEDULES"]),
            NOTIFY=values["NOTIFY"],
            SHUTDOWN_TIMEOUT_MS=values["SHUTDOWN_TIMEOUT_MS"],
            GATEWAY=gateway,
            STATS_RETENTION=durations["STATS_RETENTION"],  # type: ignore[arg-type]
            METRICS_TOKEN=values["METRICS_TOKEN"],
            AUDIT_KEEP=durations["AUDIT_KEEP"],  # type: ignore[arg-type]
            REPAIR_WINDOW=durations["REPAIR_WINDOW"],  # type: ignore[arg-type]
            _queue_defaults=defaults,
        ),
        [],
    )


def validate_settings() -> list[str]:
    """Return the problems of the current ``JOBQUEUE`` setting, one sentence each.

    Used by the system checks (``django_jobqueue.E001``); an empty list means valid.
    """
    raw = getattr(settings, "JOBQUEUE", {})
    if not isinstance(raw, Mapping):
        return [f"JOBQUEUE must be a dict: got {type(raw).__name__}."]
    return _parse(raw)[1]


@functools.cache
def get_config() -> JobQueueSettings:
    """Return the validated ``JOBQUEUE`` setting, merged over :data:`DEFAULTS`.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If the setting has an unknown key, a value of the wrong type or an
        unparsable duration (the system check reports the same problems).
    """
    raw = getattr(settings, "JOBQUEUE", {})
    if not isinstance(raw, Mapping):
        raise ImproperlyConfiguredJobQueue(f"JOBQUEUE must be a dict: got {type(raw).__name__}.")
    config, errors = _parse(raw)
    if config is None:
        raise ImproperlyConfiguredJobQueue(" ".join(errors))
    return config


@receiver(setting_changed)
def _clear_cache(*, setting: str, **kwargs: Any) -> None:
    if setting == "JOBQUEUE":
        get_config.cache_clear()

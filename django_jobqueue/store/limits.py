"""Flow-control limits: declared, set at run time, and the view every claim reads.

Policy (docs/limits.md)
-----------------------
A limit caps the jobs of one *target*, a job type (``type:sms.send``) or a queue
(``queue:sms``), fleet-wide: ``concurrency`` (jobs ``processing`` at once) and ``rate``
(starts per window, a token bucket), globally or per partition key.

Where a target's limit comes from, first match wins:

1. a :class:`~django_jobqueue.models.LimitOverride` row (``jobqueue limits set``, the
   console, the gateway), until it is deleted (``limits clear``); a row with neither a
   concurrency nor a rate lifts the declared limit;
2. the declaration: ``@job(limits=...)`` or ``JOBQUEUE["JOB_TYPES"][name]["limits"]``
   for a job type, ``JOBQUEUE["QUEUES"][name]["limits"]`` for a queue.

:func:`active` is a process-local cache of the effective limits per database alias,
read again at most every :data:`CACHE_SECONDS` (0.5 s), so a change reaches every
claim of the fleet within a second. :func:`set_limit` and :func:`clear_limit`
refresh this process's cache at once.

A job's partition key is, in order: the ``limit_key=`` given at enqueue; else, for a
``payload.<field>`` partition, that field of the payload (stored at enqueue when the
declaration names it; read by the claim's SQL otherwise, so a partition set at run
time applies to jobs already waiting); else, for a callable partition, its answer at
enqueue. A job with no key (the field is missing) counts under the key "".
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction
from django.db.models import Q
from django.db.models.expressions import RawSQL

from ..core.conf import get_config
from ..core.exceptions import InvalidOption
from ..core.limitspec import MAX_KEY_LENGTH, Limit, parse_limit, parse_target
from ..core.validation import text_problem
from ..models import Job, JobStatus, LimitOverride, LimitState
from .registry import registered_job_types

__all__ = [
    "CACHE_SECONDS",
    "LimitsView",
    "active",
    "clear_cache",
    "clear_limit",
    "declared_limits",
    "enqueue_key",
    "key_sql",
    "limit_rows",
    "partition_key",
    "prune_states",
    "set_limit",
]

logger = logging.getLogger(__name__)

#: Longest time (s) a process's cached view of the limits is used without a read.
CACHE_SECONDS = 0.5

_lock = threading.Lock()
_cache: dict[str, tuple[float, LimitsView]] = {}


@dataclass(frozen=True)
class LimitsView:
    """The effective limits of one database alias: by job type and by queue."""

    #: Active limits of job types, by job type.
    types: Mapping[str, Limit] = field(default_factory=dict)
    #: Active limits of queues, by queue.
    queues: Mapping[str, Limit] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.types or self.queues)

    def targets(self) -> dict[str, Limit]:
        """Every active limit by target (``type:<name>``, ``queue:<name>``)."""
        return {
            **{f"type:{name}": limit for name, limit in self.types.items()},
            **{f"queue:{name}": limit for name, limit in self.queues.items()},
        }

    def limited(self, job_type: str, queue: str) -> bool:
        """Whether a job of ``job_type`` in ``queue`` is under any limit."""
        return job_type in self.types or queue in self.queues


def declared_limits() -> dict[str, Limit]:
    """Return the declared limits by target: ``@job``/``JOB_TYPES`` and ``QUEUES``.

    A job type whose description cannot be loaded (a settings entry with a bad
    handler) is left out and logged; ``manage.py check`` reports it.
    """
    declared: dict[str, Limit] = {}
    try:
        types = registered_job_types()
    except Exception:  # a broken JOB_TYPES entry: reported by checks, not by claims
        logger.warning("job types could not be read for their limits", exc_info=True)
        types = {}
    for name, desc in types.items():
        if desc.limits is not None and desc.limits.active:
            declared[f"type:{name}"] = desc.limits
    for name, options in get_config().QUEUES.items():
        if options.limits is not None and options.limits.active:
            declared[f"queue:{name}"] = options.limits
    return declared


def _override_limit(row: LimitOverride) -> Limit:
    """The limit of an override row; :class:`InvalidOption` for a row written by hand
    with a bad target or value (a claim ignores it, the listings show it)."""
    parse_target(row.target)
    raw: dict[str, Any] = {}
    if row.concurrency is not None:
        raw["concurrency"] = row.concurrency
    if row.rate:
        raw["rate"] = row.rate
        if row.burst is not None:
            raw["burst"] = row.burst
    if row.partition:
        raw["partition"] = row.partition
        raw["fair"] = row.fair
    if not raw.keys() & {"concurrency", "rate"}:
        return Limit()  # lifts the declared limit
    return parse_limit(raw, allow_callable=False)


def _read(using: str) -> LimitsView:
    targets = declared_limits()
    for row in LimitOverride.objects.using(using).all():
        try:
            targets[row.target] = _override_limit(row)
        except InvalidOption as exc:  # written by hand: ignored, said once per read
            logger.warning("limit override ignored target=%r (invalid: %s)", row.target, exc)
    types: dict[str, Limit] = {}
    queues: dict[str, Limit] = {}
    for target, limit in targets.items():
        if not limit.active:
            continue
        kind, name = target.split(":", 1)
        (types if kind == "type" else queues)[name] = limit
    return LimitsView(types=types, queues=queues)


def active(using: str, *, max_age_s: float = CACHE_SECONDS) -> LimitsView:
    """Return the effective limits of ``using``, read at most every ``max_age_s`` s.

    Parameters
    ----------
    using
        Database alias of the jobs.
    max_age_s
        How old (s) the cached view may be; 0 reads the overrides now.
    """
    now = time.monotonic()
    with _lock:
        cached = _cache.get(using)
    if cached is not None and now - cached[0] < max_age_s:
        return cached[1]
    view = _read(using)
    with _lock:
        _cache[using] = (now, view)
    return view


def clear_cache() -> None:
    """Forget every cached view; the next :func:`active` reads the overrides."""
    with _lock:
        _cache.clear()


def set_limit(using: str, target: str, limit: Mapping[str, Any], *, by: str = "") -> Limit:
    """Set ``target``'s limit at run time; it wins over the declared one until cleared.

    Parameters
    ----------
    using
        Database alias of the jobs.
    target
        ``"type:<job type>"`` or ``"queue:<queue>"``.
    limit
        A limit dict (docs/limits.md): ``concurrency``, ``rate``, ``burst``,
        ``partition`` (``"payload.<field>"`` or ``"key"``), ``fair``; ``{}`` lifts the
        declared limit until cleared.
    by
        Who set it (a user name, ``cli``, a gateway token's name).

    Returns
    -------
    Limit
        The limit now in force for ``target``.

    Raises
    ------
    InvalidOption
        If ``target`` or ``limit`` is invalid; nothing is written.
    """
    parse_target(target)
    parsed = parse_limit(limit, allow_callable=False) if limit else Limit()
    fields = {
        "concurrency": parsed.concurrency,
        "rate": "" if parsed.rate is None else str(parsed.rate),
        "burst": parsed.burst,
        "partition": parsed.partition if isinstance(parsed.partition, str) else "",
        "fair": parsed.fair,
        "set_by": by[:200],
    }
    with transaction.atomic(using=using):
        LimitOverride.objects.using(using).update_or_create(target=target, defaults=fields)
    clear_cache()
    logger.info("limit set target=%s limit=%s by=%s", target, parsed.as_dict(), by)
    return parsed


def clear_limit(using: str, target: str) -> bool:
    """Delete ``target``'s run-time limit (the declared one applies again).

    Returns True if there was one. Raises :class:`InvalidOption` for a bad target.
    """
    parse_target(target)
    deleted, _ = LimitOverride.objects.using(using).filter(target=target).delete()
    clear_cache()
    if deleted:
        logger.info("limit cleared target=%s", target)
    return bool(deleted)


def limit_rows(using: str) -> list[dict[str, Any]]:
    """Return every declared or overridden limit, with its current use.

    One dict per target, sorted: ``target``, ``declared`` and ``override`` (limit
    dicts or None), ``effective`` (the limit dict in force, ``{}``: none),
    ``in_flight`` (``processing`` jobs of the target), ``waiting`` (due jobs of the
    target), ``keys`` (the in-flight count per key, most loaded first, at most 10).

    An override row written by hand with a bad target or value is shown with
    ``override`` ``{"invalid": <why>}``; the claims ignore it, so ``effective`` is the
    declared limit (``{}``: none), and a bad target counts no job.
    """
    declared = declared_limits()
    overrides = {row.target: row for row in LimitOverride.objects.using(using).all()}
    rows = []
    for target in sorted(set(declared) | set(overrides)):
        row = overrides.get(target)
        override: dict[str, Any] | None = None
        effective = declared.get(target, Limit())
        if row is not None:
            try:
                effective = _override_limit(row)
                override = effective.as_dict()
            except InvalidOption as exc:
                override = {"invalid": str(exc)}
        try:
            kind, name = parse_target(target)
        except InvalidOption:
            kind, name = "", ""
        column = {"type": "job_type", "queue": "queue"}.get(kind)
        jobs = Job.objects.using(using).all()
        jobs = jobs.filter(**{column: name}) if column else jobs.none()
        running = jobs.filter(status=JobStatus.PROCESSING)
        keys: dict[str, int] = {}
        if effective.partitioned:
            # The claim's own key (key_sql): a partition set at run time reads the
            # payload's field, which the jobs enqueued without it have not stored.
            # key_sql's text is constant; the field's path goes as a parameter.
            sql, params = key_sql(using, effective)
            claim_keys = running.annotate(claim_key=RawSQL(sql, params))  # noqa: S611
            for value in claim_keys.values_list("claim_key", flat=True):
                key = "" if value is None else str(value)
                keys[key] = keys.get(key, 0) + 1
        rows.append(
            {
                "target": target,
                "declared": declared[target].as_dict() if target in declared else None,
                "override": override,
                "effective": effective.as_dict(),
                "in_flight": running.count(),
                "waiting": jobs.due().count(),
                "keys": sorted(keys.items(), key=lambda item: (-item[1], item[0]))[:10],
            }
        )
    return rows


def key_sql(using: str, limit: Limit) -> tuple[str, list[Any]]:
    """The SQL of a job's key under ``limit`` and its parameters.

    The stored ``limit_key`` when not "", else for a ``payload.<field>`` partition that
    field of the payload as text (so a partition set at run time applies to jobs
    enqueued before it), else "". The field's text is cut to
    :data:`~django_jobqueue.core.limitspec.MAX_KEY_LENGTH` characters, the
    ``LimitState.limit_key`` column's: a longer value (or an object's JSON text) is
    counted under its first 200 characters rather than failing every claim of the
    queue. A missing field, a JSON null and a payload that is not an object give "".
    """
    partition = limit.partition
    if not isinstance(partition, str) or partition == "key":
        return "limit_key", []
    path = partition.split(".")[1:]
    vendor = connections[using].vendor
    extract: str
    params: list[Any]
    if vendor == "postgresql":
        extract, params = f"LEFT(payload #>> %s, {MAX_KEY_LENGTH})", [path]
    else:
        quoted = "$" + "".join(f'."{part}"' for part in path)
        if vendor == "mysql":
            # JSON_UNQUOTE of a JSON null is the text 'null': null gives "" as elsewhere.
            extract = (
                "LEFT(CASE WHEN JSON_TYPE(JSON_EXTRACT(payload, %s)) = 'NULL' THEN NULL "
                f"ELSE JSON_UNQUOTE(JSON_EXTRACT(payload, %s)) END, {MAX_KEY_LENGTH})"
            )
            params = [quoted, quoted]
        else:
            extract = f"SUBSTR(CAST(json_extract(payload, %s) AS TEXT), 1, {MAX_KEY_LENGTH})"
            params = [quoted]
    return f"CASE WHEN limit_key <> '' THEN limit_key ELSE COALESCE({extract}, '') END", params


def _field(payload: Any, path: str) -> Any:
    value = payload
    for part in path.split(".")[1:]:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def partition_key(limit: Limit, payload: Any) -> str:
    """Return ``payload``'s key under ``limit``'s partition ("" when it has none).

    ``payload.<field>`` reads that field (docs/limits.md "Partition keys"): a string as
    is, an integer in decimal, any other JSON value (a float, a boolean, an object, a
    list) as its compact JSON text; cut to :data:`MAX_KEY_LENGTH` characters, as the
    claim's SQL cuts it. A missing field, a null and a payload that is not an object
    give "". A callable partition is called with the payload.

    Raises
    ------
    InvalidOption
        If a callable partition answers something other than a string or an integer,
        or a key longer than :data:`MAX_KEY_LENGTH` characters.
    """
    partition = limit.partition
    if partition is None or partition == "key":
        return ""
    if isinstance(partition, str):
        return _field_text(_field(payload, partition))
    return _key_text(partition(payload))


def _field_text(value: Any) -> str:
    """A payload field's key: never refused, so a limit never refuses a job."""
    if value is None:
        return ""
    if isinstance(value, str):
        text = value
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text[:MAX_KEY_LENGTH]


def _key_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidOption(
            f"A limit's partition key must be a string or an integer: got {value!r}."
        )
    text = str(value)
    if len(text) > MAX_KEY_LENGTH or text_problem(text) is not None:
        raise InvalidOption(
            f"A limit key must be at most {MAX_KEY_LENGTH} characters, without NUL: got "
            f"{len(text)} characters."
        )
    return text


def enqueue_key(job_type: str, limit: Limit | None, payload: Any, explicit: Any) -> str:
    """Return the ``limit_key`` a new job of ``job_type`` stores.

    ``explicit`` (the enqueue's ``limit_key=``, None when not given) wins; else the
    key of the job type's *declared* ``limit`` partition (``limit``; None: none). No
    table is read: a partition set at run time on a ``payload.<field>`` is read by the
    claim itself (see the module docstring).

    Raises
    ------
    InvalidOption
        If ``explicit`` is not a string of 1 to 200 characters without NUL, or the key
        is invalid.
    """
    if explicit is not None:
        if (
            not isinstance(explicit, str)
            or not 0 < len(explicit) <= MAX_KEY_LENGTH
            or text_problem(explicit) is not None
        ):
            shown = repr(explicit)
            shown = shown if len(shown) <= 60 else shown[:60] + "..."
            raise InvalidOption(
                f"limit_key must be a string of 1 to {MAX_KEY_LENGTH} characters, without "
                f"NUL: got {shown}."
            )
        return explicit
    if limit is None or not limit.partitioned:
        return ""
    return partition_key(limit, payload)


def prune_states(using: str) -> int:
    """Delete the limit rows whose token bucket is full for sure; return how many.

    A row untouched for an hour (the longest rate window) holds a full bucket, which
    is what a new row starts with, and it holds no count (running jobs are counted
    from the job table): deleting it changes nothing a claim decides. A claim
    creates the row again when it needs it. The cost of claims does not grow with
    the number of keys ever used either way: rows are found by their unique index.
    """
    from datetime import timedelta

    from ..core.dbclock import Now

    stale = LimitState.objects.using(using).filter(
        Q(refilled_at__isnull=True) | Q(refilled_at__lt=Now() - timedelta(hours=1))
    )
    deleted, _ = stale.delete()
    return deleted

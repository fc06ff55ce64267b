"""The producer API: validate, then create a job, race-free (seeds 000, 002, 004).

``enqueue_job`` joins the caller's open transaction on the jobs' database: the job
exists if and only if the caller's data commits. A job with an id or a unique key
is created under :func:`django_jobqueue.locks.creation_lock`:

1. a cheap pre-check, without locks (seed 004 CheckDuplicateJob);
2. the locks of its (queue, id) and (queue, unique key), in sorted order;
3. a re-check of the holders, clearing any stale hold (an id past ``dedupe``/``keep``,
   a unique key past its TTL);
4. the insert. The unique indexes over (queue, hash) are the last line: an insert
   that loses a race the locks let through (MySQL, caller's transaction held open)
   fails there and is answered as the duplicate it is.

Unique keys (seed 000): the TTL is clamped to 1 s .. 7 days (default 1 hour); the
Pro modes need a valid licence, checked before anything is written.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connections, router
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.utils import timezone

from . import locks
from .conf import get_config
from .dbclock import Now
from .durations import Duration, parse_duration
from .exceptions import (
    DuplicateJob,
    InvalidJobId,
    InvalidOption,
    InvalidPayload,
    InvalidRequest,
    UnknownJobType,
    WrongDatabase,
)
from .registry import get_job_description

__all__ = [
    "MAX_DELAY",
    "MAX_ID_BYTES",
    "MAX_JSON_DEPTH",
    "EnqueueResult",
    "JobSpec",
    "aenqueue_job",
    "build_job",
    "check_delay",
    "check_json",
    "check_queue",
    "create_job",
    "enqueue_job",
    "hold_lock_names",
    "jobs_database",
]

logger = logging.getLogger(__name__)

#: Longest id (seed 002) and unique key, in bytes of UTF-8.
MAX_ID_BYTES = 1024
#: Deepest nesting of lists and objects in a payload or result: MariaDB's JSON
#: columns refuse documents nested deeper than 31.
MAX_JSON_DEPTH = 31
#: Longest ``delay``: now plus it must stay a date every database stores (< year 10000).
MAX_DELAY = timedelta(days=100 * 365)
#: Unique key TTL bounds and default (seed 000), ms.
UNIQUE_TTL_MIN_MS = 1_000
UNIQUE_TTL_MAX_MS = 7 * 86_400_000
UNIQUE_TTL_DEFAULT_MS = 3_600_000
_MAX_PRIORITY = 2_147_483_647
_PRO_MODES = ("until_executing", "until_executed")
_MODES = ("while_locked", *_PRO_MODES)


class EnqueueResult(dict[str, str]):
    """The answer of an enqueue: ``{"status": "enqueued" | "deduplicated", "jid": ...}``.

    A dict (seed 000's shape) with attribute access. ``jid`` of a deduplicated
    enqueue is the jid of the job holding the unique key.
    """

    @property
    def status(self) -> str:
        """``"enqueued"`` or ``"deduplicated"``."""
        return self["status"]

    @property
    def jid(self) -> str:
        """The new job's jid, or the holder's when deduplicated."""
        return self["jid"]

    @property
    def deduplicated(self) -> bool:
        """Whether an identical job held the unique key and nothing was stored."""
        return self["status"] == "deduplicated"


@dataclass(frozen=True)
class JobSpec:
    """A validated job, ready to insert. Built only by :func:`build_job`."""

    using: str
    queue: str
    job_type: str
    payload: Any
    priority: int
    max_retry: int
    timeout_ms: int
    secure: bool
    #: Absolute run time, or None for "now plus ``delay``" by the database clock.
    at: datetime | None
    delay: timedelta
    expires_ms: int | None
    job_id: str | None
    unique_key: str | None
    unique_mode: str
    unique_ttl_ms: int

    def model_fields(self, jid: str) -> dict[str, Any]:
        """Return the ``Job`` fields of this spec, times as database expressions."""
        from .models import hold_hash

        run_at: Any = self.at if self.at is not None else Now() + self.delay
        return {
            "jid": jid,
            "queue": self.queue,
            "job_type": self.job_type,
            "payload": self.payload,
            "priority": self.priority,
            "max_retry": self.max_retry,
            "timeout_ms": self.timeout_ms,
            "secure": self.secure,
            "run_at": run_at,
            "expires_at": None
            if self.expires_ms is None
            else Now() + timedelta(milliseconds=self.expires_ms),
            "job_id": self.job_id,
            "job_id_hash": None if self.job_id is None else hold_hash(self.job_id),
            "unique_key": self.unique_key,
            "unique_key_hash": None if self.unique_key is None else hold_hash(self.unique_key),
            "unique_mode": self.unique_mode if self.unique_key is not None else "",
            "unique_expires_at": None
            if self.unique_key is None
            else Now() + timedelta(milliseconds=self.unique_ttl_ms),
            # Not the columns' db_default (Django's Now, milliseconds on SQLite):
            # the insert's one instant of the package's clock, as run_at's.
            "created_at": Now(),
            "updated_at": Now(),
        }


def jobs_database() -> str:
    """Return the alias that stores jobs: ``JOBQUEUE["DATABASE"]``, else the routers'."""
    from .models import Job

    return get_config().DATABASE or router.db_for_write(Job)


def _check_transaction(using: str) -> None:
    if connections[using].in_atomic_block:
        return
    for conn in connections.all(initialized_only=True):
        if conn.alias != using and conn.in_atomic_block:
            raise WrongDatabase(
                f"A transaction is open on database {conn.alias!r} but jobs are stored on "
                f"{using!r}, so this job would not roll back with your data; open the "
                f"transaction with transaction.atomic(using={using!r}) or set "
                "JOBQUEUE['DATABASE']."
            )


def _text_problem(value: str) -> str | None:
    """Say why ``value`` cannot be stored as text on every database, else None."""
    if "\x00" in value:
        return "contains a NUL character, which PostgreSQL cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8 text (it contains a lone surrogate)"
    return None


def check_text(value: Any, what: str) -> str:
    """Return ``value`` if it is 1 to 1,024 bytes of UTF-8 without NUL, else raise.

    Raises
    ------
    InvalidJobId
        If ``value`` is not a string, is empty, is longer than 1,024 UTF-8 bytes,
        contains a NUL character or a lone surrogate.
    """
    if not isinstance(value, str):
        raise InvalidJobId(f"{what} must be a string: got {type(value).__name__}.")
    problem = _text_problem(value)
    if problem is not None:
        raise InvalidJobId(f"{what} {problem}: got {value!r}; remove that character.")
    size = len(value.encode("utf-8"))
    if not 1 <= size <= MAX_ID_BYTES:
        raise InvalidJobId(f"{what} must be 1 to {MAX_ID_BYTES} bytes of UTF-8: got {size} bytes.")
    return value


def check_queue(queue: Any) -> str:
    """Return ``queue`` if it is a queue name every database stores, else raise.

    Raises
    ------
    InvalidOption
        If ``queue`` is not a string of 1 to 100 characters without NUL or lone
        surrogates.
    """
    if not isinstance(queue, str) or not 0 < len(queue) <= 100:
        raise InvalidOption(f"queue must be a name of 1 to 100 characters: got {queue!r}.")
    problem = _text_problem(queue)
    if problem is not None:
        raise InvalidOption(f"The queue name {problem}: got {queue!r}; remove that character.")
    return queue


def check_json(value: Any, what: str) -> Any:
    """Return ``value`` if PostgreSQL, MariaDB and SQLite all store it as the same JSON.

    JSON types only (no NaN or infinity), at most :data:`MAX_JSON_DEPTH` nested
    lists and objects, and no string or key with a NUL character or a lone surrogate.

    Raises
    ------
    InvalidPayload
        If ``value`` is not such JSON; the message names ``what`` and the reason.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            texts = [item]
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                raise InvalidPayload(
                    f"{what} nests lists and objects deeper than {MAX_JSON_DEPTH} levels, "
                    "which MariaDB refuses; flatten it."
                )
            inner = list(item.values()) if isinstance(item, dict) else list(item)
            stack.extend((child, depth + 1) for child in inner)
            texts = [key for key in item if isinstance(key, str)] if isinstance(item, dict) else []
        else:
            continue
        for text in texts:
            problem = _text_problem(text)
            if problem is not None:
                raise InvalidPayload(
                    f"{what} has a string that {problem}: {text[:50]!r}; remove that character."
                )
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"{what} is not JSON: {exc}.") from exc
    return value


def check_delay(delay: Any) -> timedelta:
    """Parse ``delay`` (see :func:`~django_jobqueue.durations.parse_duration`), bounded.

    Raises
    ------
    InvalidOption
        If ``delay`` is not a duration, is negative, or is longer than 100 years.
    """
    parsed = parse_duration(delay, name="delay")
    if parsed > MAX_DELAY:
        raise InvalidOption(
            f"delay must be at most {MAX_DELAY.days} days: got {delay!r}; use at= for a fixed date."
        )
    return parsed


def _positive_int(value: Any, name: str, minimum: int = 1, maximum: int = _MAX_PRIORITY) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidOption(
            f"{name} must be an integer from {minimum} to {maximum}: got {value!r}."
        )
    return value


def build_job(
    queue: str | None,
    job_type: str,
    payload: Any = None,
    *,
    delay: Duration | None = None,
    at: datetime | None = None,
    priority: int | None = None,
    max_retry: int | None = None,
    expires_ms: int | None = None,
    timeout_ms: int | None = None,
    job_id: str | None = None,
    unique_key: str | None = None,
    unique_mode: str | None = None,
    unique_ttl_ms: int | None = None,
) -> JobSpec:
    """Validate an enqueue's arguments into a :class:`JobSpec`; see :func:`enqueue_job`.

    Raises
    ------
    UnknownJobType, InvalidPayload, InvalidOption, InvalidJobId, InvalidRequest, ProRequired
        As described in :func:`enqueue_job`. Nothing is written.
    """
    if not isinstance(job_type, str):
        raise UnknownJobType(
            f"job_type must be the name of a registered job type: got {job_type!r}."
        )
    desc = get_job_description(job_type)
    config = get_config()
    queue = check_queue(queue if queue is not None else (desc.queue or config.DEFAULT_QUEUE))
    check_json(payload, f"The payload of a {job_type!r} job")
    if delay is not None and at is not None:
        raise InvalidOption("Give either delay or at, not both.")
    if at is not None:
        if not isinstance(at, datetime):
            raise InvalidOption(f"at must be a datetime: got {type(at).__name__}.")
        if timezone.is_naive(at):
            raise InvalidOption(f"at must be an aware datetime (with tzinfo): got {at!r}.")
    delay_td = timedelta(0) if delay is None else check_delay(delay)
    if expires_ms is not None:
        _positive_int(expires_ms, "expires_ms")
    if timeout_ms is not None:
        _positive_int(timeout_ms, "timeout_ms")
    if max_retry is not None:
        _positive_int(max_retry, "max_retry", minimum=0, maximum=10_000)
    if job_id is not None:
        check_text(job_id, "A job id")
    mode = ""
    ttl_ms = UNIQUE_TTL_DEFAULT_MS
    if unique_key is not None:
        check_text(unique_key, "A unique_key")
        mode = "while_locked" if unique_mode is None else unique_mode
        if mode not in _MODES:
            raise InvalidRequest(
                f"unique_mode must be one of {', '.join(_MODES)}: got {unique_mode!r}."
            )
        if unique_ttl_ms is not None:
            if (
                isinstance(unique_ttl_ms, bool)
                or not isinstance(unique_ttl_ms, int | float)
                or unique_ttl_ms != unique_ttl_ms  # NaN
            ):
                raise InvalidOption(f"unique_ttl_ms must be a number of ms: got {unique_ttl_ms!r}.")
            ttl_ms = int(min(max(unique_ttl_ms, UNIQUE_TTL_MIN_MS), UNIQUE_TTL_MAX_MS))
        if mode in _PRO_MODES:
            from .licence import require_pro

            require_pro(f"unique_mode={mode!r}")
    return JobSpec(
        using=jobs_database(),
        queue=queue,
        job_type=job_type,
        payload=payload,
        priority=_positive_int(
            priority if priority is not None else (desc.priority or config.DEFAULT_PRIORITY),
            "priority",
        ),
        max_retry=max_retry
        if max_retry is not None
        else (desc.max_retry if desc.max_retry is not None else config.DEFAULT_MAX_RETRY),
        timeout_ms=timeout_ms or desc.timeout_ms or config.DEFAULT_TIMEOUT_MS,
        secure=desc.secure,
        at=at,
        delay=delay_td,
        expires_ms=expires_ms,
        job_id=job_id,
        unique_key=unique_key,
        unique_mode=mode,
        unique_ttl_ms=ttl_ms,
    )


def hold_lock_names(
    queue: str, *, job_id: str | None = None, unique_key: str | None = None
) -> list[str]:
    """Return the creation lock names of an id and a unique key on ``queue``."""
    from .models import hold_hash

    names = []
    if job_id is not None:
        names.append(f"id\x00{queue}\x00{hold_hash(job_id)}")
    if unique_key is not None:
        names.append(f"uk\x00{queue}\x00{hold_hash(unique_key)}")
    return names


def _live_holder(spec: JobSpec) -> tuple[str, str] | None:
    """Return ("id" | "unique_key", jid) of a live holder of spec's id or key, if any."""
    from .models import Job, hold_hash

    id_held = Q(pk__in=[])
    if spec.job_id is not None:
        id_held = Q(job_id_hash=hold_hash(spec.job_id)) & (
            Q(id_held_until__isnull=True) | Q(id_held_until__gt=Now())
        )
    key_held = Q(pk__in=[])
    if spec.unique_key is not None:
        key_held = Q(unique_key_hash=hold_hash(spec.unique_key), unique_expires_at__gt=Now())
    # One query; which hold each row has is computed by the database, so a row whose
    # id hold went stale while its unique key is live answers as the key's holder.
    rows = (
        Job.objects.using(spec.using)
        .filter(id_held | key_held, queue=spec.queue)
        .annotate(holds_id=ExpressionWrapper(id_held, output_field=BooleanField()))
        .values_list("jid", "holds_id")
    )
    found = list(rows)
    for jid, holds_id in found:
        if holds_id:
            return "id", jid
    for jid, _holds_id in found:
        return "unique_key", jid
    return None


def _clear_stale_holds(spec: JobSpec) -> None:
    from .models import Job, hold_hash

    jobs = Job.objects.using(spec.using).filter(queue=spec.queue)
    if spec.job_id is not None:
        jobs.filter(job_id_hash=hold_hash(spec.job_id), id_held_until__lte=Now()).update(
            job_id_hash=None, updated_at=Now()
        )
    if spec.unique_key is not None:
        jobs.filter(
            unique_key_hash=hold_hash(spec.unique_key), unique_expires_at__lte=Now()
        ).update(unique_key_hash=None, updated_at=Now())


def _answer_holder(spec: JobSpec, holder: tuple[str, str]) -> EnqueueResult:
    kind, jid = holder
    if kind == "id":
        raise DuplicateJob(
            f"Job id {spec.job_id!r} is already held on queue {spec.queue!r} by job {jid}.",
            holder_jid=jid,
        )
    logger.debug("deduplicated queue=%s type=%s holder=%s", spec.queue, spec.job_type, jid)
    return EnqueueResult(status="deduplicated", jid=jid)


def create_job(spec: JobSpec) -> EnqueueResult:
    """Insert the job of ``spec``, race-free when it carries an id or a unique key.

    Returns
    -------
    EnqueueResult
        ``enqueued`` with the new jid, or ``deduplicated`` with the jid of the job
        holding the unique key.

    Raises
    ------
    DuplicateJob
        If another job holds ``spec.job_id`` on its queue (seed 004 DUPLICATE_JOB).
    LockTimeout
        If a creation lock, or SQLite's write lock, was not had in time.
    WrongDatabase
        If the caller's transaction is open on another alias than the jobs'.

    Implements: seed 004 JobStorage CheckDuplicateJob + CreateJob; seed 000 unique jobs.
    """
    _check_transaction(spec.using)
    timeout_ms = get_config().LOCK_TIMEOUT_MS
    return locks.retry_when_locked(spec.using, _create, spec, timeout_ms, timeout_ms=timeout_ms)


def _create(spec: JobSpec, timeout_ms: int) -> EnqueueResult:
    from .models import Job

    jid = uuid.uuid4().hex
    names = hold_lock_names(spec.queue, job_id=spec.job_id, unique_key=spec.unique_key)
    if not names:
        Job.objects.using(spec.using).create(**spec.model_fields(jid))
        _wake(spec)
        return EnqueueResult(status="enqueued", jid=jid)
    holder = _live_holder(spec)  # seed 004 CheckDuplicateJob: cheap, lock-free
    if holder is not None:
        return _answer_holder(spec, holder)
    for attempt in range(1, _INTEGRITY_RETRIES + 1):
        try:
            with locks.creation_lock(spec.using, names, timeout_ms=timeout_ms):
                holder = _live_holder(spec)
                if holder is not None:
                    # Leave by an exception: the savepoint rolls back, which frees a
                    # PostgreSQL lock now rather than when the caller's transaction ends.
                    raise _Held(holder)
                _clear_stale_holds(spec)
                Job.objects.using(spec.using).create(**spec.model_fields(jid))
        except _Held as held:
            return _answer_holder(spec, held.holder)
        except IntegrityError:
            # The unique index caught a creator the locks let through: answer it.
            holder = _live_holder(spec)
            if holder is not None:
                return _answer_holder(spec, holder)
            # Its hold ended before we could see it (done, rolled back): try again.
            if attempt == _INTEGRITY_RETRIES or connections[spec.using].needs_rollback:
                raise
            logger.info("hold gone after a unique violation, retrying queue=%s", spec.queue)
            continue
        break
    _wake(spec)
    return EnqueueResult(status="enqueued", jid=jid)


#: Creations retried when the unique index refused an insert whose holder is gone.
_INTEGRITY_RETRIES = 3


class _Held(Exception):  # noqa: N818 - control flow, never leaves this module
    """A live holder found under the creation lock: leave the lock's savepoint."""

    def __init__(self, holder: tuple[str, str]) -> None:
        super().__init__(holder)
        self.holder = holder


def _wake(spec: JobSpec) -> None:
    if spec.at is None and spec.delay == timedelta(0):
        from .worker.wakeup import notify_on_commit

        notify_on_commit(spec.using, spec.queue)


def enqueue_job(
    queue: str | None,
    job_type: str,
    payload: Any = None,
    **options: Any,
) -> EnqueueResult:
    """Enqueue one job; inside ``transaction.atomic()`` it joins that transaction.

    Parameters
    ----------
    queue:
        Queue name (1 to 100 characters); None: the job type's queue, else
        ``JOBQUEUE["DEFAULT_QUEUE"]``.
    job_type:
        A registered job type, such as ``"emails.send"``.
    payload:
        Any JSON value (dicts, lists, strings, numbers, booleans, None; no NaN).
    **options:
        ``delay`` (duration: ``"10s"``, seconds, timedelta) or ``at`` (aware
        datetime); ``priority`` (int >= 1, 1 runs first); ``max_retry`` (int >= 0);
        ``expires_ms`` (ms from now after which the job is not started);
        ``timeout_ms`` (run time limit of one attempt, ms); ``unique_key`` (1 to
        1,024 bytes), ``unique_mode`` (``while_locked``, ``until_executing``,
        ``until_executed``), ``unique_ttl_ms`` (ms, clamped to 1 s .. 7 days,
        default 1 hour).

    Returns
    -------
    EnqueueResult
        ``{"status": "enqueued", "jid": ...}``, or ``"deduplicated"`` with the
        holder's jid when the unique key is locked.

    Raises
    ------
    UnknownJobType
        If ``job_type`` is not registered.
    InvalidPayload
        If ``payload`` is not JSON.
    InvalidOption
        If an option is unknown or out of range (a negative delay, say).
    InvalidRequest
        If ``unique_mode`` is not one of the three modes.
    ProRequired
        If a Pro ``unique_mode`` is used with a unique key and no valid licence.
    LockTimeout, WrongDatabase
        See :func:`create_job`.

    Nothing is written when an error is raised.

    Implements: seed 000 (enqueue_job, unique jobs); seed 004 Foreman.AddJob.
    """
    allowed = {
        "delay", "at", "priority", "max_retry", "expires_ms", "timeout_ms",
        "unique_key", "unique_mode", "unique_ttl_ms",
    }  # fmt: skip
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidOption(
            f"Unknown enqueue options {unknown}; the options are {sorted(allowed)}."
        )
    return create_job(build_job(queue, job_type, payload, **options))


async def aenqueue_job(
    queue: str | None, job_type: str, payload: Any = None, **options: Any
) -> EnqueueResult:
    """Async twin of :func:`enqueue_job`."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(enqueue_job)(queue, job_type, payload, **options)

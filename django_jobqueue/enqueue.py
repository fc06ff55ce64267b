"""The producer API: validate, then create a job, race-free (seeds 000, 002, 004).

``enqueue_job`` joins the caller's open transaction on the jobs' database: the job
exists if and only if the caller's data commits. :func:`build_job` validates the
arguments into a :class:`~django_jobqueue.store.managers.JobSpec` (the checks of
:mod:`django_jobqueue.core.validation`, the unique-key rules of
:mod:`django_jobqueue.store.unique`); :func:`create_job` hands it to
``Job.objects.create_job``, which creates it under its advisory locks
(:mod:`django_jobqueue.store.managers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import router
from django.utils import timezone

from .core.conf import get_config
from .core.durations import Duration
from .core.exceptions import InvalidOption, InvalidRequest, JobQueueError, UnknownJobType
from .core.origin import current_origin
from .core.validation import (
    check_batch,
    check_delay,
    check_positive_int,
    check_queue,
    check_text,
    json_text,
)
from .flows.current import open_block
from .flows.links import FLOW_OPTIONS, create_linked, pop_link, pop_wait
from .models import Job
from .store.jobstats import count_deduplicated
from .store.limits import enqueue_key
from .store.managers import EnqueueResult, JobSpec
from .store.registry import JobDescription, get_job_description
from .store.unique import unique_options

__all__ = [
    "EnqueueResult",
    "JobSpec",
    "aenqueue_job",
    "aenqueue_many",
    "build_job",
    "create_job",
    "enqueue_job",
    "enqueue_many",
    "jobs_database",
]


def jobs_database() -> str:
    """Return the alias that stores jobs: ``JOBQUEUE["DATABASE"]``, else the routers'."""
    return get_config().DATABASE or router.db_for_write(Job)


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
    limit_key: str | None = None,
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
    payload_json = json_text(
        payload, f"The payload of a {job_type!r} job", max_bytes=config.MAX_PAYLOAD_BYTES
    )
    if delay is not None and at is not None:
        raise InvalidOption("Give either delay or at, not both.")
    if at is not None:
        if not isinstance(at, datetime):
            raise InvalidOption(f"at must be a datetime: got {type(at).__name__}.")
        if timezone.is_naive(at):
            raise InvalidOption(f"at must be an aware datetime (with tzinfo): got {at!r}.")
    delay_td = timedelta(0) if delay is None else check_delay(delay)
    if expires_ms is not None:
        check_positive_int(expires_ms, "expires_ms")
    if timeout_ms is not None:
        check_positive_int(timeout_ms, "timeout_ms")
    if max_retry is not None:
        check_positive_int(max_retry, "max_retry", minimum=0, maximum=10_000)
    if job_id is not None:
        check_text(job_id, "A job id")
    mode, ttl_ms = unique_options(unique_key, unique_mode, unique_ttl_ms)
    return JobSpec.of(
        {
            "using": jobs_database(),
            "queue": queue,
            "job_type": job_type,
            "payload": payload,
            "priority": check_positive_int(
                priority if priority is not None else (desc.priority or config.DEFAULT_PRIORITY),
                "priority",
            ),
            "max_retry": max_retry
            if max_retry is not None
            else (desc.max_retry if desc.max_retry is not None else config.DEFAULT_MAX_RETRY),
            "timeout_ms": timeout_ms or desc.timeout_ms or config.DEFAULT_TIMEOUT_MS,
            "secure": desc.secure,
            "at": at,
            "delay": delay_td,
            "expires_ms": expires_ms,
            "job_id": job_id,
            "unique_key": unique_key,
            "unique_mode": mode,
            "unique_ttl_ms": ttl_ms,
            "payload_json": payload_json,  # see JobSpec.payload_json
            "origin": current_origin(),  # see JobSpec.origin
            "limit_key": _limit_key(job_type, queue, payload, limit_key, desc),
        }
    )


def _keyed_by_payload(spec: JobSpec) -> bool:
    """Whether ``spec``'s limit key comes from its payload (a declared partition)."""
    limit = get_job_description(spec.job_type).limits
    if limit is None or not limit.partitioned:
        limit = get_config().queue_options(spec.queue).limits
    return limit is not None and limit.partitioned and limit.partition != "key"


def _limit_key(
    job_type: str, queue: str, payload: Any, explicit: Any, desc: JobDescription | None = None
) -> str:
    """The ``limit_key`` of a new job (docs/limits.md "Partition keys"): ``explicit``,
    else the key of its job type's declared partition, else its queue's. ``desc``:
    the job type's description, when the caller has it."""
    if explicit is None:
        limit = (desc if desc is not None else get_job_description(job_type)).limits
        if limit is None or not limit.partitioned:
            limit = get_config().queue_options(queue).limits
        return enqueue_key(job_type, limit, payload, None)
    return enqueue_key(job_type, None, payload, explicit)


def create_job(spec: JobSpec) -> EnqueueResult:
    """Insert the job of ``spec``, race-free when it carries an id or a unique key.

    A thin public name for the manager's creation: answers and errors are those of
    :meth:`django_jobqueue.store.managers.JobManager.create_job`.

    Implements: docs/design.md#creation, docs/design.md#unique-keys.
    """
    result = Job.objects.create_job(spec)
    if result.deduplicated:  # counted for the dedupe audit, written in batches
        count_deduplicated([spec], [result])
    return result


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
        default 1 hour); ``limit_key`` (1 to 200 characters: the key a partitioned
        limit counts the job under, over the partition's own, docs/limits.md).

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

    Implements: docs/design.md#unique-keys, docs/design.md#execution.
    """
    _check_options(options, _OPTIONS)
    link = pop_link(options)  # docs/workflows.md: after, batch, on_upstream_failure
    spec = build_job(queue, job_type, payload, **options)
    if link is None and open_block() is None:
        return create_job(spec)
    result = create_linked([spec], link, many=False)[0]
    if result.deduplicated:
        count_deduplicated([spec], [result])
    return result


#: The options of :func:`enqueue_job`.
_OPTIONS = frozenset(
    {
        "delay", "at", "priority", "max_retry", "expires_ms", "timeout_ms",
        "unique_key", "unique_mode", "unique_ttl_ms", "limit_key",
    }
)  # fmt: skip
#: The options of a job of :func:`enqueue_many`: those, and an id.
_MANY_OPTIONS = _OPTIONS | {"job_id"}
_OPTIONS |= FLOW_OPTIONS  # docs/workflows.md
_MANY_OPTIONS |= FLOW_OPTIONS


def _check_options(options: dict[str, Any], allowed: frozenset[str]) -> None:
    if options.keys() <= allowed:
        return
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise InvalidOption(
            f"Unknown enqueue options {unknown}; the options are {sorted(allowed)}."
        )


def enqueue_many(jobs: Sequence[Mapping[str, Any]]) -> list[EnqueueResult]:
    """Enqueue a batch of jobs, all or nothing; inside ``transaction.atomic()`` it joins it.

    All or nothing: an invalid job raises, and nothing is written. A list of more than
    ``bulk.STREAM_ROWS`` jobs without links, ids or unique keys is streamed on
    PostgreSQL (validated and sent a chunk at a time, in one transaction:
    docs/design.md#bulk-stream); every other batch is validated whole first. Ids and
    unique keys are deduplicated against the table and within the batch (the first job
    of the batch that carries an id or key takes it), under all the batch's creation locks taken
    once in sorted order; the rows go in by multi-row INSERTs; each queue with a due
    job gets one wake-up when the transaction commits (:mod:`django_jobqueue.bulk`).

    Parameters
    ----------
    jobs:
        One mapping per job: ``{"queue": ..., "job_type": ..., "payload": ...,
        **options}``, with the options of :func:`enqueue_job` and ``job_id`` (an
        id, 1 to 1,024 bytes: docs/design.md#ids). ``after`` and
        ``on_upstream_failure`` are each job's own; a ``batch`` must be the same
        for every job that gives one (docs/workflows.md). ``queue`` may be left out or None (the job
        type's queue); ``payload`` defaults to None.

    Returns
    -------
    list of EnqueueResult
        One per job, in order: ``enqueued`` with the new jid, or ``deduplicated``
        with the jid of the job holding its unique key or its id (where
        :func:`enqueue_job` would raise ``DuplicateJob`` for an id, a batch answers).

    Raises
    ------
    InvalidRequest
        If ``jobs`` is not a list, tuple or other iterable of mappings (a mapping
        or a string of its own is refused whole, not read as its keys or letters).
    UnknownJobType, InvalidPayload, InvalidOption, InvalidJobId, InvalidRequest, ProRequired
        As :func:`enqueue_job`, for the first invalid job; the error's ``index``
        attribute is its position in ``jobs`` and its message starts
        ``jobs[<index>]: ``. Nothing is written.
    LockTimeout, WrongDatabase
        See :func:`create_job`; nothing is written.

    Implements: docs/design.md#unique-keys, docs/design.md#creation.
    """
    from .bulk import create_many, create_streamed  # deferred: needs the models at call time

    check_batch(jobs, "jobs")
    batches: set[Any] = set()
    waits: list[Any] = []  # per job: (upstream jids, policy) or None (docs/workflows.md)
    plain_wait = pop_wait({})  # a job with no after waits for an open wait_for() block's
    validated = _validated(jobs, batches, waits, plain_wait)
    if plain_wait is None and open_block() is None and _streamable(jobs):
        # No job of the batch links to another: its chunks are validated and sent
        # in turn, the database inserting one while the next is validated.
        return create_streamed(validated)
    specs = list(validated)
    if len(batches) > 1:
        raise InvalidRequest("jobs: every job of one enqueue_many joins the same batch.")
    link = pop_link({"batch": batches.pop()}) if batches else None
    if link is None and open_block() is None and not any(waits):
        return create_many(specs)
    return create_linked(specs, link, many=True, waits=waits) if specs else []


#: Options that keep a batch of :func:`enqueue_many` from streaming: links, ids, keys.
_NOT_STREAMED = frozenset({"batch", "after", "on_upstream_failure", "job_id", "unique_key"})


def _streamable(jobs: Any) -> bool:
    """Whether :func:`enqueue_many` may stream ``jobs`` (docs/design.md#bulk-stream):
    a list or tuple of more than one statement's jobs, each a dict without a link,
    an id or a unique key (those are placed under the batch's locks, from one read
    of their holders before any row is written)."""
    from .bulk import STREAM_ROWS

    return (
        isinstance(jobs, list | tuple)
        and len(jobs) > STREAM_ROWS
        and all(type(job) is dict and _NOT_STREAMED.isdisjoint(job) for job in jobs)
    )


def _validated(
    jobs: Iterable[Any], batches: set[Any], waits: list[Any], plain_wait: Any
) -> Iterator[JobSpec]:
    """The validated spec of each of ``jobs``, in order, as :func:`enqueue_many` reads
    them; each job's ``batch`` is added to ``batches`` and its wait appended to
    ``waits`` as its spec is yielded (``plain_wait`` for a job without ``after``).

    Raises
    ------
    JobQueueError
        Those of :func:`enqueue_many`, with the job's ``index`` and a message that
        starts ``jobs[<index>]: ``, when the invalid job is reached.
    """
    # Jobs of a batch mostly share their type, queue and options: those are validated
    # once per distinct set (keyed with their types, so 1 and True stay apart), and
    # each job's payload on its own. A job with an id or a key is validated whole.
    templates: dict[Any, JobSpec] = {}
    #: Per template: whether each job's limit key is read from its own payload.
    keyed_by_payload: dict[Any, bool] = {}
    max_bytes = get_config().MAX_PAYLOAD_BYTES
    # The last plain job's queue and type objects and its template: a batch of one
    # type (JobHandle.enqueue_many's) finds it by identity, hashing nothing per job.
    last: tuple[Any, Any, JobSpec, bool, str] | None = None
    for index, job in enumerate(jobs):
        try:
            if type(job) is dict and len(job) <= 3 and job.keys() <= _PLAIN:
                # The common job (a queue, a type, a payload, no option): its
                # template's key without copying the mapping.
                job_type = job.get("job_type")
                queue = job.get("queue")
                if last is not None and job_type is last[1] and queue is last[0]:
                    waits.append(plain_wait)  # one per spec: create_linked zips them
                    yield _from_template(last[2], job.get("payload"), *last[3:], max_bytes)
                    continue
                plain = (type(queue), queue, type(job_type), job_type, ())
                template = templates.get(plain) if _hashable(plain) else None
                if template is not None:
                    last = (queue, job_type, template, keyed_by_payload[plain], _what(template))
                    waits.append(plain_wait)
                    yield _from_template(template, job.get("payload"), *last[3:], max_bytes)
                    continue
            if not isinstance(job, Mapping):
                raise InvalidRequest(
                    f"A job must be a mapping with 'job_type': got {type(job).__name__}."
                )
            options = dict(job)
            if "batch" in options:
                batches.add(options.pop("batch"))
            waits.append(pop_wait(options))
            queue = options.pop("queue", None)
            job_type = options.pop("job_type", None)
            payload = options.pop("payload", None)
            key = _template_key(queue, job_type, options)
            template = templates.get(key) if key is not None else None
            if template is not None:
                yield _from_template(
                    template, payload, keyed_by_payload[key], _what(template), max_bytes
                )
                continue
            _check_options(options, _MANY_OPTIONS)
            spec = build_job(queue, job_type, payload, **options)
            if key is not None:
                templates[key] = spec
                keyed_by_payload[key] = "limit_key" not in options and _keyed_by_payload(spec)
        except JobQueueError as exc:
            exc.args = (f"jobs[{index}]: {exc.args[0] if exc.args else exc}", *exc.args[1:])
            exc.index = index  # type: ignore[attr-defined]
            raise
        yield spec


def _what(template: JobSpec) -> str:
    """How an error names the payload of a job like ``template``."""
    return f"The payload of a {template.job_type!r} job"


def _from_template(
    template: JobSpec, payload: Any, keyed: bool, what: str, max_bytes: int
) -> JobSpec:
    """A job of a batch like ``template`` but for its ``payload`` (checked here, at
    most ``max_bytes`` bytes of JSON, named ``what`` in an error: :func:`_what`) and,
    when ``keyed``, the partition key read from that payload (docs/limits.md).

    Raises
    ------
    InvalidPayload
        If ``payload`` is not JSON or is over ``MAX_PAYLOAD_BYTES``.
    """
    payload_json = json_text(payload, what, max_bytes=max_bytes)
    spec = template.with_payload(payload, payload_json)
    if keyed:
        limit_key = _limit_key(spec.job_type, spec.queue, payload, None)
        object.__setattr__(spec, "limit_key", limit_key)
    return spec


#: The keys of a job of :func:`enqueue_many` that has no option.
_PLAIN = frozenset({"queue", "job_type", "payload"})


def _hashable(key: Any) -> bool:
    """Whether ``key`` can key a dict (a queue or type that is a list cannot)."""
    try:
        hash(key)
    except TypeError:
        return False
    return True


#: Options that make each job of a batch its own (no shared validation).
_KEYED = frozenset({"job_id", "unique_key"})


def _template_key(queue: Any, job_type: Any, options: dict[str, Any]) -> Any:
    """The key of the options a batch's jobs may share, or None: not shareable."""
    if not options.keys().isdisjoint(_KEYED):
        return None
    try:
        key = (
            type(queue), queue, type(job_type), job_type,
            tuple(
                (name, type(value), value, _instant(value))
                for name, value in sorted(options.items())
            ),
        )  # fmt: skip
        hash(key)
    except TypeError:  # an unhashable option value, or an option name that is not text
        return None  # (which sorted() cannot order): validated (and refused) alone
    return key


def _instant(value: Any) -> Any:
    """What tells apart two equal datetimes that are different instants: the two
    readings of a wall time a DST change repeats (``fold``) compare and hash equal in
    the same zone, an hour apart; None for any other value."""
    return value.utcoffset() if isinstance(value, datetime) else None


async def aenqueue_many(jobs: Sequence[Mapping[str, Any]]) -> list[EnqueueResult]:
    """Async twin of :func:`enqueue_many`."""
    from asgiref.sync import sync_to_async

    return await sync_to_async(enqueue_many)(jobs)


async def aenqueue_job(
    queue: str | None, job_type: str, payload: Any = None, **options: Any
) -> EnqueueResult:
    """Async twin of :func:`enqueue_job`."""
    return await sync_to_async(enqueue_job)(queue, job_type, payload, **options)

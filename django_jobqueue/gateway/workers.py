"""The worker protocol: a process in any language claims, heartbeats and reports jobs.

Every state change is the Python workers' own :mod:`django_jobqueue.storage`
function (claim, heartbeat, complete, fail, finish_cancelled, hand_back,
reap_expired), so leases, fencing, retries and backoff, dead letters and the release
of unique keys are the same. A report carries the claim's ``lease_token``: when the
job is no longer held under it (the lease expired and the job was reaped, or another
worker claimed it), the answer is ``409 lease_lost`` and nothing is stored.

``job_types``: a claim may name the job types it runs. ``storage.claim`` filters by
excluded types only, so the claim excludes every job type this process knows
(``@job``, ``JOBQUEUE["JOB_TYPES"]``, ``JOBQUEUE["GATEWAY"]["JOB_TYPES"]``) that is
not named; a job of another type claimed anyway (a ``@task``'s, found by resolver) is
handed back unrun, its attempt not counted, and its type is excluded from then on.

Expired leases are reaped here too (at most every ``LEASE_MS / 2`` per process), so a
deployment with gateway workers and no ``runworkers`` still takes back dead workers'
jobs. A job whose ``expires_ms`` passed before it was claimed is dead-lettered as the
Python executor does and not handed out.
"""

from __future__ import annotations

import hmac
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.db.models import F
from django.http import HttpRequest, HttpResponse
from ninja import Router

from .. import reaping, storage
from ..core.conf import get_config
from ..core.dbclock import Now
from ..core.exceptions import JobQueueError
from ..core.signals import job_finished, job_started
from ..enqueue import jobs_database
from ..models import ApiToken, Job, JobStatus, Worker
from ..store import workerstats
from ..store.progress import progress_value
from ..store.registry import registered_job_types
from ..worker.executor import expire_if_due
from . import identity, pools, waiting
from .auth import require
from .errors import GatewayError, from_jobqueue_error
from .jobs import find_job
from .jobtypes import external_job_types
from .schemas import (
    ERRORS,
    ClaimIn,
    ClaimOut,
    CompleteIn,
    FailIn,
    HeartbeatIn,
    HeartbeatOut,
    OutcomeOut,
    RegisterIn,
    RegisterOut,
    StopIn,
    StopOut,
)

__all__ = ["router"]

logger = logging.getLogger(__name__)

router = Router(tags=["worker"])

#: ``lease_owner`` of the jobs a gateway worker claims: this, then its name.
OWNER_MARK = "gateway:"
#: Longest ``wait_ms`` of a claim.
MAX_WAIT_MS = 30_000

_reaped_at = 0.0
_reap_lock = threading.Lock()
#: Job types claimed by a claim that did not name them: excluded from later claims.
_learned: set[str] = set()


def _reap_now_and_then(using: str) -> None:
    global _reaped_at
    every = get_config().LEASE_MS / 2000
    with _reap_lock:
        if time.monotonic() - _reaped_at < every:
            return
        _reaped_at = time.monotonic()
    reaping.reap_expired(using)


def _excluded(job_types: list[str]) -> set[str]:
    if not job_types:
        return set()
    known = set(registered_job_types()) | set(external_job_types()) | _learned
    return known - set(job_types)


def _claim_once(using: str, owner: str, body: ClaimIn) -> list[Job]:
    jobs = storage.claim(
        using,
        owner=owner,
        limit=body.limit,
        queues=body.queues,
        exclude_types=_excluded(body.job_types),
        lease_ms=body.lease_ms,
    )
    kept = []
    for job in jobs:
        if body.job_types and job.job_type not in body.job_types:
            if len(_learned) < 10_000:
                _learned.add(job.job_type)
            storage.hand_back(job, message="handed back: the gateway worker does not run it")
            continue
        if expire_if_due(job) is not False:
            continue  # expired before it started: dead-lettered, as runworkers does
        job_started.send_robust(sender=job.job_type, job=job)
        kept.append(job)
    return kept


def _claimed(job: Job) -> dict[str, Any]:
    return {
        "jid": job.jid,
        "queue": job.queue,
        "job_type": job.job_type,
        "id": job.job_id,
        "payload": job.payload,
        "attempt": job.attempt,
        "max_retry": job.max_retry,
        "priority": job.priority,
        "timeout_ms": job.timeout_ms,
        "lease_token": job.lease_token,
        "lease_expires_at": job.lease_expires_at,
        "cancel_requested": job.cancel_requested,
    }


def _check_worker_name(using: str, token: ApiToken, name: str) -> None:
    """403 if worker ``name`` is registered and ``token`` may not act as it."""
    row = Worker.objects.using(using).select_related("owner_token").filter(name=name).first()
    if row is not None:
        identity.check_may_act(token, row)


def _seen(using: str, name: str, **changes: Any) -> None:
    Worker.objects.using(using).filter(name=name).update(last_seen_at=Now(), **changes)


@router.post(
    "/worker/register",
    response={200: RegisterOut, **ERRORS},
    summary="Register a worker process",
    operation_id="worker_register",
)
def register(request: HttpRequest, body: RegisterIn) -> Any:
    """Store (or refresh) the worker under its name; answer the lease and heartbeat.

    The name is the token's from then on (:mod:`.identity`); no name: one is made.
    403 for a name another token registered, unless this one is an admin over it.
    """
    token = require(request, "work", body.queues)
    name = body.name or identity.generated_name(token)
    identity.register_owned(
        jobs_database(),
        token,
        name,
        host=body.host,
        pid=body.pid,
        queues=body.queues,
        job_types=body.job_types,
        languages=body.languages,
        concurrency=body.concurrency,
        version=body.version,
    )
    config = get_config()
    return {
        "name": name,
        "lease_ms": config.LEASE_MS,
        "heartbeat_ms": config.HEARTBEAT_MS,
        "max_wait_ms": MAX_WAIT_MS,
    }


@router.post(
    "/worker/stop",
    response={200: StopOut, **ERRORS},
    summary="Mark a registered worker stopped (a clean exit)",
    operation_id="worker_stop",
)
def stop(request: HttpRequest, body: StopIn) -> Any:
    """Mark the gateway worker ``name`` stopped now; its counters stay. 404 for a name
    no gateway worker registered (a ``runworkers`` row is not stopped over HTTP)."""
    token = require(request, "work")  # the scope first: no name is confirmed without it
    using = jobs_database()
    row = (
        Worker.objects.using(using)
        .select_related("owner_token")
        .filter(name=body.name, kind="gateway")
        .first()
    )
    if row is None:
        raise GatewayError("not_found", f"No gateway worker is registered as {body.name!r}.")
    require(request, "work", row.queues)
    identity.check_may_act(token, row)
    stopped = workerstats.stop_worker(using, body.name, kind="gateway")
    return {"name": body.name, "stopped": stopped}


@router.post(
    "/worker/claim",
    response={200: ClaimOut, **ERRORS},
    summary="Claim due jobs, waiting up to wait_ms for one",
    operation_id="worker_claim",
)
async def claim(request: HttpRequest, body: ClaimIn, response: HttpResponse) -> Any:
    """Up to ``limit`` jobs of ``queues`` (and ``job_types``), each with a lease token.

    Long-polls up to ``wait_ms`` (at most 30 s) when none is due, with no query of
    its own: the process's watcher (:mod:`.waiting`) wakes it when it finds a job for
    it, at once on NOTIFY (PostgreSQL), else within ``CLAIM_POLL_MS``. An ``async``
    view: under ASGI the wait holds no thread. Under WSGI at most
    ``MAX_WAITING_CLAIMS`` claims of a process wait at once; one more answers at once
    with no jobs and ``Retry-After`` (s: its ``wait_ms``, rounded up, at least 1), so
    producers' requests keep a thread.
    """
    token = require(request, "work", body.queues)
    using = jobs_database()
    asgi = isinstance(request, ASGIRequest)
    run = _in_claim_pool if asgi else _in_request_thread
    if asgi and not pools.served_by_gateway_entry.get():
        # Django's handler: the site's middleware may have opened a connection in
        # this request's thread; a waiting claim must not hold it.
        await sync_to_async(_release_connections)()
    owner = (OWNER_MARK + (body.worker or token.name))[:200]
    jobs = await run(_first_claim, using, token, owner, body)
    if not jobs and body.wait_ms > 0:
        if asgi:
            jobs = await _wait_for_jobs(run, using, owner, body)
        else:
            with waiting.wsgi_slot() as free:
                if free:
                    jobs = await _wait_for_jobs(run, using, owner, body)
                else:
                    response["Retry-After"] = str(capped_retry_after_s(body.wait_ms))
    if body.worker and (jobs or _due_to_be_seen(using, body.worker)):
        await run(_seen, using, body.worker)
    return {"jobs": [_claimed(job) for job in jobs]}


def capped_retry_after_s(wait_ms: int) -> int:
    """``Retry-After`` (s) of a claim over the WSGI cap: the wait it asked for, >= 1.

    The claim is answered as if it had waited ``wait_ms`` for nothing, so a fleet
    of workers over the cap comes back at the pace of its long-polls (200 workers
    waiting 5 s: 40 claims a second) rather than every second (200 a second), and
    their claims keep the process's threads for producers.
    """
    return max(1, math.ceil(wait_ms / 1000))


def _first_claim(using: str, token: ApiToken, owner: str, body: ClaimIn) -> list[Job]:
    """The claim route's work before any wait, in one trip to a thread: the worker
    name's check (403), the occasional reap, and the first claim."""
    if body.worker:
        _check_worker_name(using, token, body.worker)
    _reap_now_and_then(using)
    return _claim_once(using, owner, body)


#: When this process last refreshed each worker's ``last_seen_at`` from a claim that
#: got no job (time.monotonic() s), so an idle worker's claims write it at most every
#: ``HEARTBEAT_MS / 2``: well within the three heartbeats that count it alive.
_seen_at: dict[tuple[str, str], float] = {}
_seen_lock = threading.Lock()


def _due_to_be_seen(using: str, name: str) -> bool:
    every_s = get_config().HEARTBEAT_MS / 2000
    now = time.monotonic()
    with _seen_lock:
        if now - _seen_at.get((using, name), -every_s) < every_s:
            return False
        if len(_seen_at) >= 10_000:
            _seen_at.clear()
        _seen_at[(using, name)] = now
    return True


def _release_connections() -> None:
    """Close this thread's connections (back to the pool, with one) outside a transaction."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close()


async def _in_claim_pool(func: Callable[..., Any], *args: Any) -> Any:
    """Run ``func(*args)`` in a thread of the claim pool (under ASGI, :mod:`.pools`)."""
    return await pools.in_pool(pools.claim_pool, func, *args)


async def _in_request_thread(func: Callable[..., Any], *args: Any) -> Any:
    """Run ``func(*args)`` in the request's thread and connection (under WSGI)."""
    return await sync_to_async(func)(*args)


async def _wait_for_jobs(
    run: Callable[..., Awaitable[Any]], using: str, owner: str, body: ClaimIn
) -> list[Job]:
    """After a claim found nothing: claim again each time the process's watcher finds
    a job for this claim (:mod:`.waiting`), until jobs come or ``wait_ms`` passed.
    No query runs while it waits."""
    deadline = time.monotonic() + body.wait_ms / 1000
    with waiting.registered(using, body.queues):
        since = waiting.generation(body.queues)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            woken_for = await waiting.wait_async(since, left, body.queues, body.job_types)
            if woken_for is None:
                return []
            since = waiting.generation(body.queues)
            try:
                jobs: list[Job] = await run(_claim_once, using, owner, body)
            finally:
                if woken_for:
                    waiting.claimed(woken_for)
            if jobs:
                return jobs


def _held(request: HttpRequest, jid: str, lease_token: str) -> Job:
    """Return the job ``jid`` if it is running under ``lease_token``, else 409."""
    job = find_job(request, jid, "work")
    if job.status != JobStatus.PROCESSING or not hmac.compare_digest(
        job.lease_token.encode(), lease_token.encode("utf-8", "replace")
    ):
        raise _lease_lost(job)
    return job


def _lease_lost(job: Job) -> GatewayError:
    return GatewayError(
        "lease_lost",
        f"Job {job.jid} is no longer held under this lease token (status {job.status}); "
        "drop its outcome.",
        field="lease_token",
    )


#: Stored status -> the Worker row's counter it adds to, as a foreman counts them:
#: ``done``, and ``failed`` for dead letters only (a retried or cancelled attempt
#: counts in neither). Storage counts the job statistics (docs/metrics.md).
_WORKER_COUNTER = {
    JobStatus.DONE: "done",
    JobStatus.ERROR: "failed",
    JobStatus.MAX_RETRY: "failed",
}


def _finished(job: Job, status: str) -> None:
    job_finished.send_robust(sender=job.job_type, job=job, status=status)
    if job.lease_owner.startswith(OWNER_MARK):
        counter = _WORKER_COUNTER.get(JobStatus(status))
        changes = {} if counter is None else {counter: F(counter) + 1}
        _seen(job._state.db or jobs_database(), job.lease_owner[len(OWNER_MARK) :], **changes)


@router.post(
    "/worker/jobs/{jid}/heartbeat",
    response={200: HeartbeatOut, **ERRORS},
    summary="Extend a claimed job's lease",
    operation_id="worker_heartbeat",
)
def heartbeat(request: HttpRequest, jid: str, body: HeartbeatIn) -> Any:
    """``cancel_requested``: stop the handler and report the job ``cancelled``."""
    job = _held(request, jid, body.lease_token)
    progress = None
    if body.progress is not None:
        try:
            progress = progress_value(
                body.progress.done, body.progress.total, body.progress.message
            )
        except JobQueueError as exc:
            raise from_jobqueue_error(exc, field="progress") from exc
    alive, cancel = storage.heartbeat(
        [job], lease_ms=body.lease_ms, progress={job.pk: progress} if progress else None
    )
    if job.pk not in alive:
        raise _lease_lost(job)
    if job.lease_owner.startswith(OWNER_MARK):
        _seen(job._state.db or jobs_database(), job.lease_owner[len(OWNER_MARK) :])
    return {"cancel_requested": job.pk in cancel}


@router.post(
    "/worker/jobs/{jid}/complete",
    response={200: OutcomeOut, **ERRORS},
    summary="Store a job's success and result",
    operation_id="worker_complete",
)
def complete(request: HttpRequest, jid: str, body: CompleteIn) -> Any:
    """``done`` (or ``init`` when an id's ``set`` asked for one run more)."""
    job = _held(request, jid, body.lease_token)
    try:  # storage checks the result (JSON, MAX_RESULT_BYTES) before it writes
        stored_it = storage.complete(job, body.result)
    except JobQueueError as exc:
        raise from_jobqueue_error(exc, field="result") from exc
    if not stored_it:
        raise _lease_lost(job)
    status = Job.objects.using(job._state.db).filter(pk=job.pk).values_list("status", flat=True)
    stored = status.first() or JobStatus.DONE
    _finished(job, JobStatus.DONE)
    return {"status": stored}


@router.post(
    "/worker/jobs/{jid}/fail",
    response={200: OutcomeOut, **ERRORS},
    summary="Store a failed attempt (retried with backoff unless retry is false)",
    operation_id="worker_fail",
)
def fail(request: HttpRequest, jid: str, body: FailIn) -> Any:
    """``retry`` (backoff), ``max_retry`` or ``error`` (dead letters), ``cancelled``."""
    job = _held(request, jid, body.lease_token)
    if body.cancelled:
        if not storage.finish_cancelled(job, message=body.error or "cancelled while running"):
            raise _lease_lost(job)
        status: str | None = JobStatus.CANCELLED
    else:
        # The message names the class as an in-process failure does ("ValueError: ..."),
        # the attempt's entry keeps the class the client reported (maybe dotted).
        name = body.exception_class.rsplit(".", 1)[-1]
        message = f"{name}: {body.error}" if name else body.error
        status = storage.fail(
            job,
            None,
            message=message,
            retryable=body.retry,
            exception_class=body.exception_class,
        )
        if status is None:
            raise _lease_lost(job)
    _finished(job, str(status))
    return {"status": str(status)}

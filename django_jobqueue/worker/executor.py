"""The executor: run one claimed job's handler and store its outcome.

Outcomes, each stored by a lease-guarded write of :mod:`django_jobqueue.storage`:

==========================================  =======================================
what happened                               stored status
==========================================  =======================================
handler returned                            ``done`` (the return value is the result)
handler raised :class:`NonRetryableError`   ``error``
handler raised anything else                ``retry`` after backoff, else ``max_retry``
attempt ran past ``timeout_ms``             as a raised error (``retry``/``max_retry``)
job type unknown at run time                ``error``
``expires_at`` passed before it started     ``error`` (never run)
cancel requested, handler stopped           ``cancelled``
==========================================  =======================================

A handler runs in a *runner* thread of its worker slot, so the worker can give up
on it at its timeout. Python cannot kill a thread: a handler stuck past its
timeout keeps its runner thread until it returns, but its slot gets a new runner
and its late outcome is never stored (the lease is gone). ``async def`` handlers
run on the foreman's event loop (:mod:`.aio`), which uses :func:`begin`,
:func:`store_outcome` and :func:`time_out` from here; with middleware that cannot
wrap them, and for sync functions that return an awaitable, they run in the runner
thread through ``async_to_sync``.

A ``secure`` job's payload and result never reach a log line.
"""

from __future__ import annotations

import functools
import inspect
import logging
import queue as queue_mod
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.db import connections

from .. import storage
from ..core.conf import get_config
from ..core.exceptions import NonRetryableError, PayloadTooLarge, UnknownJobType
from ..core.reconnect import write_through_outage
from ..core.signals import job_finished, job_started
from ..core.validation import check_json
from ..models import Job, JobStatus
from ..store.registry import JobDescription, get_job_description
from .completer import Completer
from .connections import check_before_handler, handler_statements, recycle_connections
from .context import JobContext
from .middleware import Handler, Middleware, apply_middleware

__all__ = [
    "OFF_LOOP",
    "PENDING",
    "Runner",
    "begin",
    "execute",
    "expire_if_due",
    "result_problem",
    "store_outcome",
    "time_out",
]

#: What :func:`execute` returns when a success was handed to a completer.
PENDING = "pending"
#: What :func:`store_outcome` returns, with ``on_loop``, for a success the closed
#: completer did not take: nothing stored, the caller stores it off the loop.
OFF_LOOP = "off_loop"

logger = logging.getLogger(__name__)


class _Call:
    """One call submitted to a :class:`Runner`: its outcome once ``done`` is set."""

    def __init__(self, func: Callable[[], Any]) -> None:
        self.func = func
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class Runner:
    """A daemon thread that runs submitted calls one at a time.

    A worker slot owns one runner and replaces it when a handler overruns its
    timeout (:meth:`abandon`); the abandoned thread exits once the stuck call
    returns, closing its database connections.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._inbox: queue_mod.SimpleQueue[_Call | None] = queue_mod.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while True:
                call = self._inbox.get()
                if call is None:
                    return
                try:
                    call.value = call.func()
                except BaseException as exc:  # noqa: BLE001 (handed to the submitter)
                    call.error = exc
                finally:
                    call.done.set()
        finally:
            connections.close_all()

    def submit(self, func: Callable[[], Any]) -> _Call:
        """Queue ``func`` to run in this runner's thread; return its pending call."""
        call = _Call(func)
        self._inbox.put(call)
        return call

    def abandon(self) -> None:
        """Let the thread exit after its current call; submit nothing more."""
        self._inbox.put(None)

    def stop(self, timeout_s: float) -> None:
        """Let the thread exit and wait up to ``timeout_s`` seconds for it (and its
        connections) to close."""
        self.abandon()
        self._thread.join(timeout_s)

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` seconds for the thread to end."""
        self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()


#: Result types that are never awaitable (JSON's, and None).
_PLAIN_RESULTS = frozenset({type(None), dict, list, str, int, float, bool})


def _sync_handler(func: Callable[..., Any]) -> Handler:
    # async_to_sync (not asyncio.run): the handler's sync_to_async ORM calls then
    # run back in this runner thread, on its connection, which the worker recycles
    # and closes; asyncio.run would send them to asgiref's shared executor thread,
    # whose connection nobody closes.
    if inspect.iscoroutinefunction(func):
        return async_to_sync(func)

    def run(payload: Any, ctx: JobContext) -> Any:
        result = func(payload, ctx)
        # No awaitable is one of JSON's types: those (None above all) skip
        # isawaitable's ABC check, 4% of a no-op job's time holding the GIL.
        if type(result) not in _PLAIN_RESULTS and inspect.isawaitable(result):

            async def wait() -> Any:
                return await result

            return async_to_sync(wait)()
        return result

    return run


@functools.lru_cache(maxsize=1024)
def _wrapped_handler(func: Callable[..., Any], middleware: tuple[Middleware, ...]) -> Handler:
    """``func`` as a sync handler wrapped in ``middleware``, built once per pair
    (per job type and middleware list), not per job."""
    return apply_middleware(_sync_handler(func), middleware)


def _log_start(job: Job) -> None:
    # DEBUG: "job finished" (INFO) says the same with the outcome and the duration;
    # two INFO lines per job cost a fifth of a no-op drain's CPU.
    logger.debug(
        "job started jid=%s type=%s attempt=%s queue=%s",
        job.jid,
        job.job_type,
        job.attempt,
        job.queue,
    )


def _log_end(job: Job, status: str | None, started: float, log_success: bool = True) -> None:
    if status == JobStatus.DONE and not log_success:
        return  # JOBQUEUE["LOG_SUCCESS"] False or runworkers --no-log-success
    logger.info(
        "job finished jid=%s type=%s attempt=%s status=%s duration_ms=%d",
        job.jid,
        job.job_type,
        job.attempt,
        status or "lease_lost",
        (time.monotonic() - started) * 1000,
    )


def _ms_since(started: float) -> int:
    """Milliseconds since ``started`` (``time.monotonic()``): an attempt's run time."""
    return int((time.monotonic() - started) * 1000)


def _finished(job: Job, status: str | None) -> None:
    if status is not None and job_finished.receivers:  # as send()'s own first test
        job_finished.send(sender=job.job_type, job=job, status=status)


def expire_if_due(job: Job) -> str | None | bool:
    """Dead-letter ``job`` if its ``expires_at`` passed before it started.

    Both times come from the database clock: the start is ``started_at``, or the
    claim's time (``heartbeat_at`` as the claim wrote it) for a job claimed not
    started. Returns False when the job has not expired, else the stored status
    (``error``) or None if the lease was lost.
    """
    started_at = job.started_at or job.heartbeat_at
    if job.expires_at is None or started_at is None or job.expires_at >= started_at:
        return False
    message = (
        f"expired: the job expired at {job.expires_at.isoformat()} before it started "
        f"at {started_at.isoformat()}, so it was not run"
    )
    return storage.fail(job, None, message=message, retryable=False)


def _after_store(
    job: Job,
    started: float,
    on_stored: Callable[[str | None], None] | None,
    log_success: bool = True,
) -> Callable[[bool], None]:
    def stored(ok: bool) -> None:
        status = JobStatus.DONE if ok else None
        _log_end(job, status, started, log_success)
        _finished(job, status)
        if on_stored is not None:
            on_stored(status)

    return stored


def execute(
    job: Job,
    ctx: JobContext,
    *,
    middleware: Sequence[Middleware] = (),
    completer: Completer | None = None,
    on_stored: Callable[[str | None], None] | None = None,
    log_success: bool | None = None,
) -> str | None:
    """Run ``job``'s handler in this thread and store its outcome.

    Parameters
    ----------
    job:
        A job claimed by this worker (``processing``, lease held).
    ctx:
        Its context; a lost lease or cancel request is flagged on it.
    middleware:
        Loaded middleware, outermost first.
    completer:
        Where a success is stored, batched (:class:`Completer`); None: stored here.
        Its finished log line and ``job_finished`` signal then follow the batched
        write, from the completer's thread, and ``on_stored(status)`` is called.
    log_success:
        Whether a success gets its "job finished" INFO line; None:
        ``JOBQUEUE["LOG_SUCCESS"]``.

    Returns
    -------
    str | None
        The stored status (a :class:`JobStatus` value), None if nothing was
        stored because the lease was lost (reaped, timed out, handed back), or
        :data:`PENDING` when a success went to ``completer``.

    Implements: docs/design.md#execution.
    """
    if log_success is None:
        log_success = get_config().LOG_SUCCESS
    started, desc, status = begin(job, ctx, log_success)
    if desc is None:
        return status
    handler = _wrapped_handler(desc.handler, tuple(middleware))
    error: BaseException | None = None
    result: Any = None
    check_before_handler()  # its first query meets no connection that died idle
    try:
        with handler_statements():  # nor one that died while the handler computed
            result = handler(job.payload, ctx)
            ctx.finish_steps()  # a returning attempt reached every recorded step
    except Exception as exc:  # noqa: BLE001 (stored as the attempt's failure)
        error = exc
    finally:
        recycle_connections()
    return store_outcome(
        job,
        ctx,
        started=started,
        error=error,
        result=result,
        completer=completer,
        on_stored=on_stored,
        log_success=log_success,
    )


def begin(
    job: Job, ctx: JobContext, log_success: bool = True
) -> tuple[float, JobDescription | None, str | None]:
    """Start an attempt of ``job``: its start line and ``job_started`` signal, then
    the checks made before any handler runs.

    Returns
    -------
    tuple[float, JobDescription | None, str | None]
        ``(started, description, status)``: ``started`` is ``time.monotonic()`` at
        the start; ``description`` is the job type's, whose handler is to run, or
        None when the attempt ended here (expired before it started, or a job type
        this process does not know), its outcome stored: then ``status`` is the
        stored status (None: the lease was lost).
    """
    started = time.monotonic()
    _log_start(job)
    if job_started.receivers:  # send()'s own first test, without the call: once per job
        job_started.send(sender=job.job_type, job=job)
    status: str | None
    ctx.storing = True  # an expiry or an unknown job type is stored before any handler
    expired = expire_if_due(job)
    if expired is not False:
        status = expired  # type: ignore[assignment]
        _log_end(job, status, started, log_success)
        _finished(job, status)
        return started, None, status
    try:
        desc = get_job_description(job.job_type)
    except UnknownJobType as exc:
        status = storage.fail(job, exc, retryable=False, run_ms=_ms_since(started))
        logger.error("unknown job type jid=%s type=%s", job.jid, job.job_type)
        _log_end(job, status, started, log_success)
        _finished(job, status)
        return started, None, status
    ctx.storing = False
    return started, desc, None


def result_problem(result: Any) -> Exception | None:
    """Return why ``result`` cannot be stored (not JSON, or over ``MAX_RESULT_BYTES``:
    the error to store), or None when it can. Reads no database."""
    if result is None:  # JSON null: no encoding to check it
        return None
    try:
        check_json(
            result,
            "The handler's result",
            max_bytes=get_config().MAX_RESULT_BYTES,
            setting="MAX_RESULT_BYTES",
        )
    except (TypeError, ValueError) as exc:  # PayloadTooLarge is a ValueError too
        return exc
    return None


def store_outcome(
    job: Job,
    ctx: JobContext,
    *,
    started: float,
    error: BaseException | None,
    result: Any,
    completer: Completer | None = None,
    on_stored: Callable[[str | None], None] | None = None,
    log_success: bool = True,
    on_loop: bool = False,
) -> str | None:
    """Store what the handler of ``job`` did: raised ``error`` (None: it returned
    ``result``), was cancelled, or ran with its lease lost (nothing is stored).

    ``started`` is the attempt's ``time.monotonic()`` start; ``completer``,
    ``on_stored`` and ``log_success`` as :func:`execute` takes them. Returns what
    :func:`execute` returns. A success handed to ``completer`` reads no database
    here (:func:`result_problem` passed): the async path calls it on its event loop,
    with ``on_loop``: a completer closed meanwhile (a stop) then returns
    :data:`OFF_LOOP`, nothing stored, where it would write in this thread.
    """
    if ctx.lease_lost:
        # Timed out, handed back or reaped meanwhile: the outcome is not ours to store.
        # A timeout was stored and logged (time_out); its late return is no news.
        logger.log(
            logging.DEBUG if ctx.timed_out else logging.WARNING,
            "job outcome dropped, lease lost jid=%s type=%s attempt=%s",
            job.jid,
            job.job_type,
            job.attempt,
        )
        return None
    run_ms = _ms_since(started)
    ctx.storing = True  # from here a heartbeat may cross the outcome's write
    status: str | None
    problem = None if error is not None or ctx.cancelled else result_problem(result)
    if ctx.cancelled:
        status = _through_outage(
            job, lambda: JobStatus.CANCELLED if storage.finish_cancelled(job) else None
        )
    elif error is not None:
        retryable = not isinstance(error, NonRetryableError)
        status = _through_outage(
            job, lambda: storage.fail(job, error, retryable=retryable, run_ms=run_ms)
        )
        logger.error(
            "job failed jid=%s type=%s attempt=%s status=%s",
            job.jid,
            job.job_type,
            job.attempt,
            status,
            exc_info=None if job.secure else error,
        )
    elif problem is not None:  # not JSON, or JSON over MAX_RESULT_BYTES
        if isinstance(problem, PayloadTooLarge):
            message = str(problem)
        else:
            message = (
                f"the handler's result is not JSON ({type(problem).__name__}); "
                "return dicts, lists, strings, numbers, booleans or None"
            )
        status = _through_outage(
            job,
            lambda: storage.fail(job, problem, message=message, retryable=False, run_ms=run_ms),
        )
        # The handler ran to its end: without this line the job's end says only
        # status=error, and the reason is on the job's page alone.
        logger.error(
            "job failed jid=%s type=%s attempt=%s status=%s: %s: %r",
            job.jid,
            job.job_type,
            job.attempt,
            status,
            message,
            problem,  # repr: the encoder's words may quote the odd value itself
        )
    elif completer is not None:
        callback = _after_store(job, started, on_stored, log_success)
        if completer.submit(job, result, callback, run_ms=run_ms, inline=not on_loop):
            return PENDING
        return OFF_LOOP
    else:
        status = _through_outage(
            job, lambda: JobStatus.DONE if storage.complete(job, result, run_ms=run_ms) else None
        )
    _log_end(job, status, started, log_success)
    _finished(job, status)
    return status


_T = TypeVar("_T")


def _through_outage(job: Job, write: Callable[[], _T]) -> _T:
    """Store ``job``'s outcome with ``write``, tried again while the database is out
    of reach, until 1 s before the job's lease ends (as the batched successes are,
    :class:`Completer`): a failure or a cancellation lost to an outage shorter than
    the lease would leave the job to the reaper, and a job of a short type whose
    start was not stored yet would go back unspent although it ran
    (docs/prefetch.md). Raises what the last try raised."""
    expires = job.lease_expires_at
    return write_through_outage(
        logger,
        job._state.db or "default",
        write,
        until=expires - timedelta(seconds=1) if expires else None,
        what=f"storing the outcome of jid={job.jid}",
    )


def time_out(job: Job, ctx: JobContext, *, started: float) -> str | None:
    """Store a failed attempt of ``job`` that ran past its ``timeout_ms``.

    The handler's thread is abandoned (flagged through ``ctx``), so whatever it
    returns later is not stored. Returns the stored status or None if the lease
    was lost.
    """
    ctx.mark_lease_lost(timed_out=True)
    exc = TimeoutError(
        f"job {job.jid} ran past its timeout of {job.timeout_ms} ms; raise the job "
        "type's timeout (@job(timeout=...)) or the enqueue's timeout_ms, or make the "
        "handler faster"
    )
    status = storage.fail(job, exc, message=f"TimeoutError: {exc}", run_ms=_ms_since(started))
    logger.error(
        "job timed out jid=%s type=%s attempt=%s timeout_ms=%s status=%s",
        job.jid,
        job.job_type,
        job.attempt,
        job.timeout_ms,
        status,
    )
    _log_end(job, status, started)
    _finished(job, status)
    return status

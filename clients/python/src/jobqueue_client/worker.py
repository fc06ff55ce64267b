"""A worker loop over the gateway's worker protocol: run job handlers written in Python
in a process that has no database credentials, only a URL and a token.

::

    from jobqueue_client import Worker

    def send(payload, ctx):
        ...                       # ctx.jid, ctx.attempt; stop early if ctx.cancelled
        return {"sent": True}     # the job's JSON result

    Worker({"emails.send": send}, url="https://app.example.com/sdk", token="jqt_...",
           queues=["emails"], concurrency=4).run()

:meth:`Worker.run` registers the worker (the console lists it), long-polls
``/worker/claim`` for as many jobs as it has free threads, runs each handler in a
thread, heartbeats every running job every ``heartbeat_ms`` (a ``cancel_requested``
answer sets ``ctx.cancelled``) and reports ``complete`` with the handler's return
value or ``fail`` with its exception: :class:`NoRetry` dead-letters the job at once,
:class:`Cancelled` (or any exception once a cancel was asked) reports it cancelled,
anything else is retried with the server's backoff. A ``409 lease_lost`` (the lease
expired and the job was taken back) drops the outcome: the job runs again elsewhere.

SIGTERM or SIGINT (or :meth:`Worker.stop`) stops claiming; running jobs finish and
are reported, then ``run`` returns. A claim in flight ends within ``wait_ms``.

Its messages go to the ``jobqueue_client`` logger: ``registered <name>: queues=...``
once the gateway accepted it, a warning per failed job or refused call, ``stopped:
claimed=... completed=...`` at the end. The ``jobqueue-worker`` command
(:mod:`jobqueue_client.cli`) prints them to stderr.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import (
    BadRequest,
    GatewayError,
    InvalidRequest,
    LeaseLost,
    RateLimited,
    ServiceUnavailable,
)
from .errors import GatewayUnreachable as _Unreachable
from .producer import Client
from .signals import SignalRelay
from .types import ClaimedJob, Registration
from .version import DISTRIBUTION, VERSION

__all__ = ["Cancelled", "Handler", "JobContext", "NoRetry", "Worker"]

logger = logging.getLogger("jobqueue_client")

T = TypeVar("T")

#: Reports (complete, fail) are tried this many times on a 503 or no answer.
REPORT_TRIES = 4
#: The shortest time between two progress reports of one job sent, s.
PROGRESS_INTERVAL_S = 1.0

#: The lease a worker may ask for, ms: the gateway's bounds (docs/gateway.md).
LEASE_MS_MIN = 1_000
LEASE_MS_MAX = 86_400_000


class NoRetry(Exception):
    """Raise from a handler to dead-letter the job at once (``fail`` with retry false)."""


class Cancelled(Exception):
    """Raise from a handler that stopped because ``ctx.cancelled`` became true."""


@dataclass
class JobContext:
    """What a handler knows of its job; ``cancelled`` and ``stopping`` change while it
    runs (read them in long loops)."""

    jid: str
    queue: str
    job_type: str
    id: str | None
    attempt: int
    max_retry: int
    priority: int
    timeout_ms: int
    lease_token: str
    worker: str
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    _lost: threading.Event = field(default_factory=threading.Event, repr=False)
    _stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    #: Set once the handler returned and its outcome is being sent: heartbeats stop,
    #: and a 409 to one already in flight is the report's own doing, not a lost lease.
    _reporting: threading.Event = field(default_factory=threading.Event, repr=False)
    #: The latest progress report not sent yet, and when one was last sent (monotonic s).
    _progress: dict[str, Any] | None = field(default=None, repr=False)
    _progress_sent_at: float = field(default=float("-inf"), repr=False)
    _progress_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def progress(self, done: int, total: int, message: str | None = None) -> None:
        """Report how far the job got: ``done`` of ``total`` units (0: unknown).

        Sends nothing itself: the latest report goes with the next heartbeat, at most
        once a second (the server's docs/console.md "Progress"). Raises ``ValueError``
        if the numbers are not ints >= 0 or ``done`` exceeds a known ``total``.
        """
        for name, number in (("done", done), ("total", total)):
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise ValueError(f"progress {name} must be an integer >= 0, got {number!r}")
        if total and done > total:
            raise ValueError(f"progress done ({done}) must not exceed total ({total})")
        if message is not None and not isinstance(message, str):
            raise ValueError(f"progress message must be a string or None, got {message!r}")
        with self._progress_lock:
            self._progress = {"done": done, "total": total, "message": message and message[:200]}

    def _take_progress(self, now: float) -> dict[str, Any] | None:
        with self._progress_lock:
            if self._progress is None or now - self._progress_sent_at < PROGRESS_INTERVAL_S:
                return None
            report, self._progress, self._progress_sent_at = self._progress, None, now
            return report

    def _progress_waits(self, now: float) -> bool:
        with self._progress_lock:
            return self._progress is not None and now - self._progress_sent_at >= (
                PROGRESS_INTERVAL_S
            )

    @property
    def cancelled(self) -> bool:
        """True once a heartbeat answered ``cancel_requested``: stop and raise
        :class:`Cancelled`."""
        return self._cancel.is_set()

    @property
    def lease_lost(self) -> bool:
        """True once a heartbeat answered 409: the outcome will be dropped."""
        return self._lost.is_set()

    @property
    def stopping(self) -> bool:
        """True once the worker was asked to stop (it still waits for this job)."""
        return self._stopping.is_set()


#: A job handler: ``handler(payload, ctx)`` returns the job's JSON result.
Handler = Callable[[Any, JobContext], Any]


class Worker:
    """Run ``handlers`` for jobs claimed from the gateway (see the module docstring).

    Parameters
    ----------
    handlers:
        ``{job_type: handler}``; the claim names these job types only.
    url, token:
        The gateway's base URL (``.../sdk``) and a token with the ``work`` scope;
        default: the environment's ``JOBQUEUE_URL`` and ``JOBQUEUE_TOKEN``.
    queues:
        The queues to claim from.
    concurrency:
        Handler threads (and the most jobs held at once).
    name:
        The registered name (default ``python-<host>-<pid>``).
    wait_ms:
        Longest wait of one claim, ms (capped by the server's ``max_wait_ms``); also
        the longest a stop waits for a claim in flight.
    lease_ms:
        The lease asked for at claim and heartbeat (None: the server's ``LEASE_MS``).
    client:
        A :class:`Client` to use (None: one made from ``url`` and ``token``).
    install_signals:
        Stop gracefully on SIGTERM and SIGINT (only from the main thread).

    Raises
    ------
    ValueError
        If no handler, queue, URL or token is given, the URL is not http(s) with a
        host, ``concurrency`` < 1, or ``lease_ms`` is outside the gateway's bounds
        (:data:`LEASE_MS_MIN` to :data:`LEASE_MS_MAX`).
    TypeError
        If a handler is not callable.
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        *,
        url: str | None = None,
        token: str | None = None,
        queues: Sequence[str],
        concurrency: int = 1,
        name: str | None = None,
        wait_ms: int = 5_000,
        lease_ms: int | None = None,
        client: Client | None = None,
        install_signals: bool = True,
    ) -> None:
        if not handlers:
            raise ValueError("Worker needs at least one handler")
        not_callable = sorted(t for t, h in handlers.items() if not callable(h))
        if not_callable:
            raise TypeError(f"the handler of {', '.join(map(repr, not_callable))} is not callable")
        if not queues:
            raise ValueError("Worker needs at least one queue")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if lease_ms is not None and not LEASE_MS_MIN <= lease_ms <= LEASE_MS_MAX:
            raise ValueError(
                f"lease_ms must be between {LEASE_MS_MIN} and {LEASE_MS_MAX} "
                f"(the gateway's bounds), got {lease_ms}"
            )
        if client is None:
            url = url or os.environ.get("JOBQUEUE_URL")
            token = token or os.environ.get("JOBQUEUE_TOKEN")
            if not url or not token:
                raise ValueError("Worker needs url and token (or JOBQUEUE_URL/JOBQUEUE_TOKEN)")
            client = Client(url, token)
            self._own_client = True
        else:
            self._own_client = False
        self.client = client
        self.handlers = dict(handlers)
        self.queues = list(queues)
        self.concurrency = concurrency
        self.name = name or f"python-{socket.gethostname()}-{os.getpid()}"
        self.wait_ms = wait_ms
        self.lease_ms = lease_ms
        self.install_signals = install_signals
        #: Counts so far: jobs claimed, and their outcomes: completed, failed, cancelled,
        #: lost (409: the lease was lost, the outcome dropped), unreported (the gateway
        #: never took the report).
        self.stats = {
            "claimed": 0,
            "completed": 0,
            "failed": 0,
            "cancelled": 0,
            "lost": 0,
            "unreported": 0,
        }
        self._stop = threading.Event()
        self._slot = threading.Condition()
        self._running: dict[str, JobContext] = {}
        self._stats_lock = threading.Lock()

    # Control ------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to stop: no more claims; running jobs finish, then run returns."""
        if not self._stop.is_set():
            logger.info("stopping: %s running job(s) finish first", len(self._running))
        self._stop.set()
        with self._slot:
            for ctx in self._running.values():
                ctx._stopping.set()
            self._slot.notify_all()

    def _on_signal(self, signum: int) -> None:
        # Relayed by SignalRelay's thread, not run inside the signal handler: stop()
        # takes the locks the main thread may hold when the signal lands.
        logger.info("%s received", signal.Signals(signum).name)
        self.stop()

    def run(self) -> dict[str, int]:
        """Register, then claim and run jobs until stopped; return :attr:`stats`.

        The registration is tried again while the gateway is unreachable or answers
        503 or 429 (0.5 s doubling to 10 s, or its ``Retry-After``), until it answers
        or the worker is stopped (then the stats, all zero, are returned).

        Raises
        ------
        GatewayError
            If the registration is refused (``Unauthorized``, ``Forbidden``,
            ``InvalidRequest``...), or a claim is refused as malformed (``BadRequest``,
            ``InvalidRequest``: the same claim would be refused again). Other errors
            after it are logged and retried, never raised.
        """
        relay = SignalRelay(self._on_signal)
        try:
            if self.install_signals:
                relay.install()  # only from the main thread
            return self._run()
        finally:
            relay.close()
            if self._own_client:
                self.client.close()

    # The loop -------------------------------------------------------------------

    def _register(self) -> Registration | None:
        """Register; None if stopped before the gateway answered (see :meth:`run`)."""
        failures = 0
        while not self._stop.is_set():
            try:
                return self.client.register(
                    name=self.name,
                    host=socket.gethostname()[:255],
                    pid=os.getpid(),
                    languages=["python"],
                    queues=self.queues,
                    job_types=list(self.handlers),
                    concurrency=self.concurrency,
                    version=VERSION,
                )
            except (ServiceUnavailable, RateLimited, _Unreachable) as exc:
                failures += 1
                pause = _pause(exc, failures)
                logger.warning("cannot register yet (%s); trying again in %.1f s", exc, pause)
                self._stop.wait(pause)
        return None

    def _run(self) -> dict[str, int]:
        registration = self._register()
        if registration is None:
            logger.info("stopped before registering")
            return dict(self.stats)
        wait_ms = max(0, min(self.wait_ms, registration.max_wait_ms))
        heartbeat_s = max(registration.heartbeat_ms, 100) / 1000
        logger.info(
            "registered %s: queues=%s job_types=%s concurrency=%s (%s %s at %s, "
            "heartbeat every %.1f s)",
            self.name,
            ",".join(self.queues),
            ",".join(self.handlers),
            self.concurrency,
            DISTRIBUTION,
            VERSION,
            self.client.url,
            heartbeat_s,
        )
        beating = threading.Thread(
            target=self._heartbeats, args=(heartbeat_s,), name=f"{self.name}-heartbeat"
        )
        beating.start()
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=self.name)
        failures = 0
        try:
            while not self._stop.is_set():
                with self._slot:
                    free = self.concurrency - len(self._running)
                    if free <= 0:
                        self._slot.wait(1.0)
                        continue
                try:
                    asked = time.monotonic()
                    jobs = self.client.claim(
                        self.queues,
                        job_types=list(self.handlers),
                        limit=min(free, 100),
                        wait_ms=wait_ms,
                        worker=self.name,
                        lease_ms=self.lease_ms,
                    )
                    failures = 0
                    if not jobs and wait_ms and time.monotonic() - asked < wait_ms / 2000:
                        # No jobs long before the wait ended: a WSGI server at its cap of
                        # waiting claims answered at once (Retry-After: the wait asked
                        # for); claim again after that wait, as if it had been waited.
                        self._stop.wait(max(_CAPPED_PAUSE_S, wait_ms / 1000))
                        continue
                except (BadRequest, InvalidRequest):
                    # The claim as this worker asks it is refused, and asking again
                    # cannot change that: stop (run() raises it) rather than loop.
                    raise
                except GatewayError as exc:
                    failures += 1
                    pause = _pause(exc, failures)
                    logger.warning(
                        "worker %s: claim failed (%s); again in %.1f s", self.name, exc, pause
                    )
                    self._stop.wait(pause)
                    continue
                self._count("claimed", len(jobs))
                for job in jobs:
                    ctx = _context(job, self.name)
                    if self._stop.is_set():
                        ctx._stopping.set()
                    with self._slot:
                        self._running[job.jid] = ctx
                    pool.submit(self._execute, job, ctx)
        finally:
            pool.shutdown(wait=True)
            self._stop.set()
            beating.join()
            try:  # gone from the console and `jobqueue status` at once
                self.client.stop_worker(self.name)
            except GatewayError as exc:
                logger.warning("worker %s: could not report its stop: %s", self.name, exc)
        logger.info("stopped: %s", " ".join(f"{k}={v}" for k, v in self.stats.items()))
        return dict(self.stats)

    def _heartbeats(self, every_s: float) -> None:
        # Every ``every_s`` each running job is beaten; between two rounds, each
        # second, the jobs with a progress report waiting are beaten with it.
        due = time.monotonic() + every_s
        while not self._stop.wait(max(0.0, min(due - time.monotonic(), PROGRESS_INTERVAL_S))) or (
            self._running
        ):
            now = time.monotonic()
            round_due = now >= due or self._stop.is_set()
            if round_due:
                due = now + every_s
            with self._slot:
                running = list(self._running.values())
            for ctx in running:
                if ctx.lease_lost or ctx._reporting.is_set():
                    continue
                if not round_due and not ctx._progress_waits(now):
                    continue
                report = ctx._take_progress(now)
                try:
                    if self.client.heartbeat(
                        ctx.jid, ctx.lease_token, lease_ms=self.lease_ms, progress=report
                    ):
                        if not ctx.cancelled:
                            logger.info("worker %s: job %s asked to stop", self.name, ctx.jid)
                        ctx._cancel.set()
                except LeaseLost:
                    if ctx._reporting.is_set():
                        # The outcome was stored while this heartbeat was on its way.
                        continue
                    logger.warning("worker %s: lease of job %s lost", self.name, ctx.jid)
                    ctx._lost.set()
                except GatewayError as exc:
                    logger.warning("worker %s: heartbeat of %s failed: %s", self.name, ctx.jid, exc)
                    if report is not None:
                        with ctx._progress_lock:  # sent with the next beat, unless newer
                            ctx._progress = ctx._progress or report
                            ctx._progress_sent_at = float("-inf")
            if self._stop.is_set():
                time.sleep(min(every_s, 0.2))

    def _execute(self, job: ClaimedJob, ctx: JobContext) -> None:
        try:
            self._execute_job(job, ctx)
        except Exception:  # a bug here must not kill the pool thread silently
            logger.exception("worker %s: job %s: unexpected error", self.name, job.jid)
        finally:
            with self._slot:
                self._running.pop(job.jid, None)
                self._slot.notify_all()

    def _execute_job(self, job: ClaimedJob, ctx: JobContext) -> None:
        handler = self.handlers.get(job.job_type)
        if ctx.cancelled or job.cancel_requested:
            ctx._cancel.set()
        if handler is None:
            message = f"no handler for job type {job.job_type!r} in worker {self.name}"
            self._report(
                ctx,
                "failed",
                lambda: self.client.fail(
                    job.jid, job.lease_token, message, exception_class="NoHandler", retry=False
                ),
            )
            return
        try:
            result = handler(job.payload, ctx)
        except Exception as exc:
            cancelled = isinstance(exc, Cancelled) or ctx.cancelled
            kind = "cancelled" if cancelled else "failed"
            error = str(exc) or type(exc).__name__
            cls = type(exc).__name__
            # Module and qualified name, as an in-process worker stores it.
            qualified = f"{type(exc).__module__}.{type(exc).__qualname__}"
            retry = not isinstance(exc, NoRetry)
            if not cancelled:
                logger.warning("worker %s: job %s failed: %s: %s", self.name, job.jid, cls, error)
            self._report(
                ctx,
                kind,
                lambda: self.client.fail(
                    job.jid,
                    job.lease_token,
                    error,
                    exception_class=qualified,
                    retry=retry,
                    cancelled=cancelled,
                ),
            )
            return
        self._report(
            ctx, "completed", lambda: self.client.complete(job.jid, job.lease_token, result)
        )

    def _report(self, ctx: JobContext, kind: str, send: Callable[[], str]) -> None:
        ctx._reporting.set()
        if ctx.lease_lost:
            self._count("lost")
            return
        for attempt in range(1, REPORT_TRIES + 1):
            try:
                send()
            except LeaseLost:
                logger.warning("worker %s: job %s: lease lost, outcome dropped", self.name, ctx.jid)
                self._count("lost")
                return
            except (ServiceUnavailable, RateLimited, _Unreachable) as exc:
                if attempt == REPORT_TRIES:
                    logger.error("worker %s: job %s not reported: %s", self.name, ctx.jid, exc)
                    self._count("unreported")
                    return
                time.sleep(_pause(exc, attempt))
                continue
            except GatewayError as exc:
                logger.error("worker %s: job %s: report refused: %s", self.name, ctx.jid, exc)
                self._count("unreported")
                return
            self._count(kind)
            return

    def _count(self, kind: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[kind] += n


def _context(job: ClaimedJob, worker: str) -> JobContext:
    ctx = JobContext(
        jid=job.jid,
        queue=job.queue,
        job_type=job.job_type,
        id=job.id,
        attempt=job.attempt,
        max_retry=job.max_retry,
        priority=job.priority,
        timeout_ms=job.timeout_ms,
        lease_token=job.lease_token,
        worker=worker,
    )
    if job.cancel_requested:
        ctx._cancel.set()
    return ctx


#: Shortest pause (s) after a claim answered empty at once; the pause is the claim's
#: ``wait_ms``, the server's Retry-After.
_CAPPED_PAUSE_S = 1.0


def _pause(exc: GatewayError, failures: int) -> float:
    """Seconds to wait after ``failures`` errors in a row: Retry-After, else 0.5 s
    doubling up to 10 s."""
    if exc.retry_after is not None:
        return min(max(exc.retry_after, 0.1), 60.0)
    return min(0.5 * 2 ** (failures - 1), 10.0)

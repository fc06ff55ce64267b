"""JobContext: what a running handler knows about its job and can ask of its worker."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from .. import storage
from ..enqueue import EnqueueResult, aenqueue_job, enqueue_job
from ..flows.batches import BatchHandle
from ..flows.results import Upstream, upstream_results
from ..store.progress import ProgressSlot, progress_value
from .steps import Step, StepLog

if TYPE_CHECKING:
    from ..models import Job

__all__ = ["JobContext"]

#: Serializes the making of a job's progress slot (:meth:`JobContext._progress`).
_SLOT_LOCK = threading.Lock()


class JobContext:
    """The second argument of every handler: ``handler(payload, ctx)``.

    Attributes
    ----------
    jid:
        The job's public handle.
    job_id:
        Its caller-chosen id (docs/design.md#ids), or None.
    attempt:
        This attempt's number, 1 for the first (docs/design.md#execution).
    queue, job_type:
        The job's queue and type.
    worker:
        The lease owner's name (``host:pid:thread``).
    logger:
        A logger for the handler (``django_jobqueue.job.<job type>``).

    Implements: docs/design.md#execution.
    """

    def __init__(self, job: Job, *, worker: str = "", lease_ms: int | None = None) -> None:
        self.job = job
        self.jid: str = job.jid
        self.job_id: str | None = job.job_id
        self.attempt: int = job.attempt
        self.queue: str = job.queue
        self.job_type: str = job.job_type
        self.worker = worker
        self._lease_ms = lease_ms
        # Plain flags, not Events: set by the heartbeat thread, read by the handler;
        # nothing waits on them, and two Events per job were a no-op job's cost.
        self._cancelled = False
        self._lease_lost = False
        #: Set with the lease flag when the job ran past its timeout (stored as such).
        self.timed_out = False
        #: Set by the worker once it began storing this attempt's outcome: a
        #: heartbeat that then finds the job no longer processing crossed that
        #: write, which reports a lost lease itself if there was one.
        self.storing = False
        # Made when first needed (most jobs report no progress and have no steps):
        # making both was two fifths of a claimed job's context (0.7 of 1.7 us).
        self._progress_slot: ProgressSlot | None = None
        self._step_log: StepLog | None = None
        self._upstream: Upstream | None = None
        #: Of an async job on the foreman's loop: cancels its task (a cancel request,
        #: a lost lease); None otherwise.
        self.on_cancel: Callable[[], None] | None = None

    @property
    def step_log(self) -> StepLog:
        """This attempt's place in the job's recorded steps (:meth:`step`); made at the
        first use, in the handler's thread (the only one that uses it)."""
        log = self._step_log
        if log is None:
            log = self._step_log = StepLog(self.job.steps)
        return log

    def finish_steps(self) -> None:
        """Check that a returning attempt reached every recorded step
        (:meth:`StepLog.finish`); without a step asked for, that none was recorded.

        Raises
        ------
        StepOrderChanged
            If a recorded step was not reached.
        """
        if self._step_log is not None or self.job.steps:
            self.step_log.finish()

    def _progress(self) -> ProgressSlot:
        """The job's progress slot (docs/console.md "Progress"), made at the first
        report; under a lock, as a handler's own threads may report at once."""
        slot = self._progress_slot
        if slot is None:
            with _SLOT_LOCK:
                slot = self._progress_slot
                if slot is None:
                    slot = self._progress_slot = ProgressSlot()
        return slot

    def progress_ready(self, now: float | None = None) -> bool:
        """Whether a progress report waits to be stored (:meth:`ProgressSlot.ready`)."""
        slot = self._progress_slot
        return slot is not None and slot.ready(now)

    def take_progress(self, now: float | None = None) -> dict[str, Any] | None:
        """Hand out the waiting progress report, if any (:meth:`ProgressSlot.take`)."""
        slot = self._progress_slot
        return None if slot is None else slot.take(now)

    def put_back_progress(self, report: dict[str, Any]) -> None:
        """Return a report whose write failed (:meth:`ProgressSlot.put_back`)."""
        self._progress().put_back(report)

    @property
    def logger(self) -> logging.Logger:
        """A logger for the handler: ``django_jobqueue.job.<job type>``.

        Looked up when asked for: ``logging.getLogger`` takes the logging module's
        lock, and one look-up per job was a tenth of a no-op drain's GIL time.
        """
        return logging.getLogger(f"django_jobqueue.job.{self.job_type}")

    def __repr__(self) -> str:
        return f"<JobContext {self.job_type} jid={self.jid} attempt={self.attempt}>"

    @property
    def payload(self) -> Any:
        """The job's payload (JSON)."""
        return self.job.payload

    @property
    def cancelled(self) -> bool:
        """Whether a cancel of this job was requested; a handler should stop soon."""
        return self._cancelled

    @property
    def lease_lost(self) -> bool:
        """Whether this worker lost the job's lease: its outcome will not be stored."""
        return self._lease_lost

    def mark_cancelled(self) -> None:
        """Flag a cancel request (called by the heartbeat); an async handler's task
        is cancelled too."""
        self._cancelled = True
        if self.on_cancel is not None:
            self.on_cancel()

    def mark_lease_lost(self, *, timed_out: bool = False) -> None:
        """Flag a lost lease (called by the heartbeat), or a timeout already stored."""
        self.timed_out = self.timed_out or timed_out
        self._lease_lost = True
        if self.on_cancel is not None:
            self.on_cancel()

    def progress(self, done: int, total: int, message: str | None = None) -> None:
        """Report how far the job got: ``done`` of ``total`` units, and a short message.

        Costs no statement: the latest report waits in memory and the worker's next
        heartbeat round stores it, at most once a second per job; the console shows it
        as a bar on running jobs (docs/console.md "Progress").

        Parameters
        ----------
        done
            Units done, an int >= 0.
        total
            Units in all, an int >= ``done`` (0: unknown).
        message
            Up to 200 characters, or None.

        Raises
        ------
        InvalidRequest
            If the numbers are not non-negative ints or ``done`` exceeds ``total``.
        """
        self._progress().put(progress_value(done, total, message))

    def step(self, name: str) -> Step:
        """Return the resumable step ``name``: decorate the function that does it.

        ::

            @ctx.step("charge")
            def charge(step):
                return {"charge_id": gateway.charge(order.pk)}

        The function runs at once, in one transaction with its checkpoint on the
        jobs' database, and ``charge`` is bound to its return value; on a later
        attempt a done step is not run again, and ``charge`` is bound to the value
        its run stored. ``step.cursor`` and ``step.save(cursor)`` resume a step in
        the middle. The rules, the order check included, are in
        docs/workflows.md "Resumable steps" and :mod:`django_jobqueue.worker.steps`.

        Parameters
        ----------
        name
            The step's name, unique within the handler, 1 to 200 characters.

        Raises
        ------
        InvalidStep
            If ``name`` is not such a string.
        """
        return Step(self, name)

    def heartbeat(self) -> bool:
        """Extend the job's lease now; return False if the lease was lost.

        Long handlers may call it between steps; the foreman also beats every
        ``HEARTBEAT_MS``. A cancel request seen here sets :attr:`cancelled`; a
        progress report waiting (:meth:`progress`) is stored with it.
        """
        report = self.take_progress()
        try:
            alive, cancel = storage.heartbeat(
                [self.job],
                lease_ms=self._lease_ms,
                progress={self.job.pk: report} if report else None,
            )
        except Exception:
            if report:
                self.put_back_progress(report)
            raise
        if self.job.pk in cancel:
            self.mark_cancelled()
        if self.job.pk not in alive:
            self.mark_lease_lost()
            return False
        return True

    @property
    def batch(self) -> BatchHandle | None:
        """The batch this job belongs to (docs/workflows.md "Batches"), or None.

        An open batch: ``ctx.batch.enqueue(job_type, payload, **options)`` adds a
        job to it, counted before this job's own end, so the batch cannot finish
        before the jobs it adds.
        """
        if self.job.batch_id is None:
            return None
        return BatchHandle(self.job.batch_id, self.job._state.db or "default")

    @property
    def upstream(self) -> Upstream:
        """The results of the jobs this one waited for (docs/workflows.md), by step.

        ``ctx.upstream["fetch"]`` is the result of the upstream job of step
        ``fetch`` (a job with no step name: by its jid); read from the database
        once, on first use. A skipped or failed upstream job's result is None.
        Raises ``KeyError`` for a name that is not an upstream step.
        """
        if self._upstream is None:
            self._upstream = upstream_results(self.job)
        return self._upstream

    async def aheartbeat(self) -> bool:
        """:meth:`heartbeat` for ``async def`` handlers (its write in a sync thread)."""
        return await sync_to_async(self.heartbeat)()

    async def aenqueue_job(
        self, queue: str | None, job_type: str, payload: Any = None, **options: Any
    ) -> EnqueueResult:
        """:meth:`enqueue_job` for ``async def`` handlers."""
        return await aenqueue_job(queue, job_type, payload, **options)

    def enqueue_job(
        self, queue: str | None, job_type: str, payload: Any = None, **options: Any
    ) -> EnqueueResult:
        """Enqueue another job; see :func:`django_jobqueue.enqueue.enqueue_job`.

        Returns
        -------
        EnqueueResult
            ``{"status": "enqueued", "jid": ...}`` (or ``"deduplicated"``).
        """
        return enqueue_job(queue, job_type, payload, **options)

"""Batches (docs/workflows.md "Batches"): ``with batch(...) as b:`` and ``get_batch(id)``.

A batch groups the jobs enqueued inside its block (``enqueue_job``,
``enqueue_many``, a handle's ``enqueue``, a ``Workflow``'s ``enqueue``) and makes
callback jobs when they end: ``on_finish`` once every job ended, ``on_success``
once every job is done, ``on_failure`` at the first dead letter. The block is one
transaction on the jobs' database (a savepoint inside the caller's
``transaction.atomic()``): the batch and its jobs exist if and only if it commits,
and no job of it can end before the batch is complete and sealed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from ..core.exceptions import InvalidOption, InvalidRequest
from ..core.validation import check_queue
from ..enqueue import EnqueueResult, enqueue_job, enqueue_many, jobs_database
from ..models import Batch
from ..store.managers import check_transaction
from ..store.registry import get_job_description
from . import current
from .links import attach

__all__ = ["BatchHandle", "aget_batch", "batch", "callback_spec", "get_batch", "open_batch"]


def callback_spec(callback: Any, what: str) -> dict[str, Any] | None:
    """Return the stored form of a callback: ``{"job_type", "payload", "options"}``.

    ``callback``: None, a job type's name, a ``JobHandle`` or a ``Signature``
    (``handle.s(payload, **options)``). ``what`` names it in errors.

    Raises
    ------
    UnknownJobType
        If the job type is not registered.
    InvalidOption
        If ``callback`` is none of those.
    """
    if callback is None:
        return None
    if isinstance(callback, str):
        job_type, payload, options = callback, None, {}
    elif hasattr(callback, "job_type") and hasattr(callback, "options"):  # a Signature
        job_type, payload, options = callback.job_type, callback.payload, dict(callback.options)
    elif hasattr(callback, "description") and hasattr(callback, "name"):  # a JobHandle
        job_type, payload, options = callback.name, None, {}
    else:
        raise InvalidOption(
            f"{what} must be a job type name, a JobHandle or a signature "
            f"(handle.s(...)): got {type(callback).__name__}."
        )
    get_job_description(job_type)
    return {"job_type": job_type, "payload": payload, "options": options}


class BatchHandle:
    """An existing batch: its ``id``, its counts, and jobs added to it.

    Returned by ``with batch() as b`` and by a job's ``ctx.batch``. Inside the
    block, jobs enqueued anywhere (in this thread or task) join the batch; after
    it, :meth:`enqueue` adds jobs to the batch while it has not finished (an open
    batch: a job of the batch adding more).
    """

    def __init__(self, batch_id: int, using: str) -> None:
        self.id = batch_id
        self.using = using

    def __repr__(self) -> str:
        return f"<BatchHandle {self.id}>"

    def enqueue(self, job_type: Any, payload: Any = None, **options: Any) -> EnqueueResult:
        """Enqueue one job of ``job_type`` (a name or a ``JobHandle``) into this batch.

        ``options`` are :func:`~django_jobqueue.enqueue.enqueue_job`'s, ``queue``
        among them. Raises as ``enqueue_job`` does, and ``InvalidRequest`` if the
        batch no longer exists.
        """
        queue = options.pop("queue", None)
        name = getattr(job_type, "name", job_type)
        return enqueue_job(queue, name, payload, batch=self.id, **options)

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[EnqueueResult]:
        """Enqueue many jobs into this batch, all or nothing; see ``enqueue_many``."""
        return enqueue_many([{**job, "batch": self.id} for job in jobs])

    def seal(self) -> None:
        """Seal a batch made by :func:`open_batch`: it finishes once every job it has
        ended (at once if they all have). Sealing a sealed batch does nothing more.

        Raises
        ------
        InvalidRequest
            If the batch does not exist.
        """
        with transaction.atomic(using=self.using):
            if not Batch.objects.using(self.using).filter(pk=self.id).exists():
                raise InvalidRequest(f"No batch has id {self.id}.")
            seal(self.using, self.id, [])

    def get(self) -> Batch:
        """Return the batch's row, read now (its counts, ``finished_at``, callbacks)."""
        return Batch.objects.using(self.using).get(pk=self.id)

    def counts(self) -> dict[str, int]:
        """Return ``{"total", "done", "failed", "cancelled", "pending"}``, read now."""
        return self.get().counts()


@contextmanager
def batch(
    on_finish: Any = None,
    on_success: Any = None,
    on_failure: Any = None,
    queue: str | None = None,
) -> Iterator[BatchHandle]:
    """Group the jobs enqueued inside the block into one batch with callbacks.

    Parameters
    ----------
    on_finish, on_success, on_failure
        Callbacks: a job type's name, a ``JobHandle`` or a signature
        (``handle.s(payload, **options)``), or None. Each is an ordinary job (own
        retries, queue, priority) made once: ``on_finish`` when every job ended,
        ``on_success`` when every job is done, ``on_failure`` at the first dead
        letter. Its payload is ``{"batch": <id>, "counts": {"total", "done",
        "failed", "cancelled", "pending"}, "payload": <the signature's payload>}``.
    queue
        The callbacks' queue when a signature names none; None: each callback job
        type's own.

    Yields
    ------
    BatchHandle
        Its ``id`` is readable inside the block and after it.

    Raises
    ------
    UnknownJobType, InvalidOption
        If a callback is not a registered job type; nothing is written.
    WrongDatabase
        If the caller's transaction is open on another database than the jobs'.

    The block is a transaction on the jobs' database: an exception inside it rolls
    the batch and its jobs back; inside the caller's ``atomic()`` they commit with
    the caller's data. A batch with no job finishes when the block ends.
    """
    using = jobs_database()
    check_transaction(using)
    with transaction.atomic(using=using):
        handle = open_batch(on_finish, on_success, on_failure, queue)
        block = current.OpenBlock(batch_id=handle.id, using=using)
        token = current.set_block(block)
        try:
            yield handle
        finally:
            current.reset_block(token)
        seal(using, handle.id, block.jids)


def open_batch(
    on_finish: Any = None,
    on_success: Any = None,
    on_failure: Any = None,
    queue: str | None = None,
) -> BatchHandle:
    """Make a batch that takes jobs until its handle's :meth:`~BatchHandle.seal`.

    For producers that add jobs over several requests or transactions (the
    gateway, say): ``enqueue_job(..., batch=handle.id)`` adds one; the batch cannot
    finish before it is sealed, however many of its jobs ended. Arguments and
    errors are :func:`batch`'s; the batch is made in the caller's transaction (if
    any) on the jobs' database.
    """
    callbacks = {
        "on_finish": callback_spec(on_finish, "on_finish"),
        "on_success": callback_spec(on_success, "on_success"),
        "on_failure": callback_spec(on_failure, "on_failure"),
    }
    queue_name = "" if queue is None else check_queue(queue)
    using = jobs_database()
    check_transaction(using)
    row = Batch(queue=queue_name, **callbacks)
    row.save(using=using)
    return BatchHandle(row.pk, using)


def seal(using: str, batch_id: int, jids: list[str]) -> None:
    """Join ``jids`` to the batch, count them, and seal it (in the caller's transaction).

    A batch whose jobs all ended already (or that has none) finishes here.
    """
    from .endings import settle_tallies  # endings imports the enqueue path

    attach(using, jids, batch_id=batch_id)
    Batch.objects.using(using).filter(pk=batch_id).update(sealed=True)
    settle_tallies(using, batches=[batch_id])


def get_batch(batch_id: int) -> Batch | None:
    """Return the batch ``batch_id`` with its counts, read now; None if there is none.

    The row's ``total``, ``done``, ``failed``, ``cancelled``, ``pending`` (a
    property), ``finished_at`` (None until every job ended), ``sealed`` and the
    callbacks' jids (``finish_jid``, ``success_jid``, ``failure_jid``; "" until made).

    Raises
    ------
    InvalidRequest
        If ``batch_id`` is not an int >= 1.
    """
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 1:
        raise InvalidRequest(f"A batch id is an int >= 1: got {batch_id!r}.")
    return Batch.objects.using(jobs_database()).filter(pk=batch_id).first()


async def aget_batch(batch_id: int) -> Batch | None:
    """Async twin of :func:`get_batch`."""
    return await sync_to_async(get_batch)(batch_id)

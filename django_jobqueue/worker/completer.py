"""Batched ``done`` writes: the completer thread of one foreman.

A runner whose handler returned hands (job, result, callback) to :meth:`Completer.submit`
and goes on to its next job. The completer's thread writes what has gathered in one
lease-guarded statement (:func:`storage.complete_many`) as soon as no other handler
runs, when ``max_batch`` results wait, or ``max_wait_ms`` after the first one came,
whichever is first; then it calls each job's callback with whether its outcome was
stored, so the finished log line and the ``job_finished`` signal still follow the
stored write, with the stored status.

The foreman's heartbeat calls :meth:`flush` before each beat, so a job's result and
its unique-key release are never later than its next heartbeat; a job waiting here
is still heartbeated (it stays among the foreman's running jobs until stored).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import connections

from .. import storage
from ..core.reconnect import close_dead, in_one_line, unreachable, write_through_outage
from ..models import Job
from .connections import recycle_connections

__all__ = ["DEFAULT_MAX_BATCH", "MAX_BATCH", "Completer", "max_batch_for"]

logger = logging.getLogger(__name__)

#: Most done outcomes in one write, by database vendor (:func:`max_batch_for`).
#: PostgreSQL's statement binds arrays, a fixed number of parameters for any batch:
#: 256 rather than 64 took about a seventh off PostgreSQL's CPU and a tenth off the
#: workers' per no-op job in a 2 x 12 drain with a large prefetch (README "Speed").
#: MySQL's and SQLite's statements grow by about six parameters a job, and SQLite
#: builds may allow no more than 999 in all: they stay at 64.
MAX_BATCH = {"postgresql": 256}
#: Most done outcomes in one write on any other vendor.
DEFAULT_MAX_BATCH = 64


def max_batch_for(vendor: str) -> int:
    """The most done outcomes one write of a ``vendor`` database takes (:data:`MAX_BATCH`)."""
    return MAX_BATCH.get(vendor, DEFAULT_MAX_BATCH)


#: Called with True once the job's outcome is stored, False if its lease was lost.
Callback = Callable[[bool], None]
#: (job, result, callback, run time in ms or None) waiting to be written.
_Item = tuple[Job, Any, Callback, "int | None"]


class Completer:
    """Gather done outcomes and store them in batches from its own thread.

    Parameters
    ----------
    busy:
        Returns how many handlers run now (not counting those waiting here): with
        none running, a flush starts at once instead of waiting for more.
    max_batch:
        Most jobs in one write, >= 1.
    max_wait_ms:
        Longest a result waits for others before it is written, ms.
    """

    def __init__(
        self,
        *,
        busy: Callable[[], int],
        max_batch: int = DEFAULT_MAX_BATCH,
        max_wait_ms: float = 2.0,
    ) -> None:
        self._busy = busy
        self.max_batch = max(1, max_batch)
        self.max_wait_s = max_wait_ms / 1000
        self._cond = threading.Condition()
        self._pending: list[_Item] = []
        self._write_lock = threading.Lock()
        self._closed = False
        self._thread: threading.Thread | None = None
        #: Writes done and jobs written, for statement counts and tests.
        self.flushes = 0
        self.written = 0

    def start(self) -> None:
        """Start the completer thread."""
        self._thread = threading.Thread(target=self._loop, name="jq-completer", daemon=True)
        self._thread.start()

    def submit(
        self,
        job: Job,
        result: Any,
        callback: Callback,
        *,
        run_ms: int | None = None,
        inline: bool = True,
    ) -> bool:
        """Queue ``job``'s success (``result`` already checked as JSON) for the next write.

        ``callback(stored)`` runs in the completer's thread after the write (in the
        caller's, once the completer is closed). ``run_ms``: the handler's run time
        in ms, for the statistics (None: since the claim). Returns False, with
        nothing written and no callback, when the completer is closed and not
        ``inline``: an event loop's thread, where the ORM refuses to run, stores the
        outcome elsewhere (:mod:`.aio`); else True.
        """
        with self._cond:
            if not self._closed:
                self._pending.append((job, result, callback, run_ms))
                # Woken only when it may write now: for the first outcome it waits
                # for, a full batch, or no handler left running. Any other outcome
                # waits for the write its deadline starts anyway; a wake-up per job
                # was a thread switch per job.
                waiting = len(self._pending)
                if waiting == 1 or waiting >= self.max_batch or self._busy() <= 0:
                    self._cond.notify_all()
                return True
        if not inline:
            return False
        self._write([(job, result, callback, run_ms)])
        return True

    def flush(self) -> None:
        """Write every outcome waiting now, in this thread; return once stored, and
        once a write the completer's thread has in flight is done too."""
        with self._cond:
            batch, self._pending = self._pending, []
        if batch:
            # max_batch at a time, as the thread writes: a heartbeat's flush of a
            # large prefetch's ends stays within MySQL's and SQLite's statement sizes.
            for start in range(0, len(batch), self.max_batch):
                self._write(batch[start : start + self.max_batch])
        else:
            with self._write_lock:
                pass

    def close(self) -> None:
        """Write what waits, stop the thread; later submits are written at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        self.flush()

    def _loop(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(lambda: self._pending or self._closed)
                    if not self._pending:
                        return
                    deadline = time.monotonic() + self.max_wait_s
                    while (
                        not self._closed
                        and len(self._pending) < self.max_batch
                        and self._busy() > 0
                    ):
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    batch = self._pending[: self.max_batch]
                    del self._pending[: self.max_batch]
                self._write(batch)
                recycle_connections()
        finally:
            connections.close_all()

    def _write(self, batch: list[_Item]) -> None:
        if not batch:
            return
        with self._write_lock:
            try:
                flags = self._write_through_outage(batch)
            except Exception as exc:
                using = _alias(batch)
                if unreachable(exc, using):
                    # Still unreachable at a stop or near the leases' end: one by one
                    # fails the same. Whether a write whose answer was lost landed is
                    # unknown; a job whose result was not stored is the reaper's.
                    logger.warning(
                        "database unreachable; %d results not stored, the reaper takes "
                        "back their jobs if they were not (%s)",
                        len(batch),
                        in_one_line(exc),
                    )
                    close_dead(using)
                    flags = [False] * len(batch)
                else:
                    logger.warning("batched completion failed; storing one by one", exc_info=True)
                    recycle_connections()
                    flags = [self._one(job, result, ms) for job, result, _cb, ms in batch]
            self.flushes += 1
            self.written += len(batch)
        for (job, _result, callback, _ms), stored in zip(batch, flags, strict=True):
            try:
                callback(stored)
            except Exception:
                logger.exception("completion callback failed jid=%s", job.jid)

    def _write_through_outage(self, batch: list[_Item]) -> list[bool]:
        """:func:`storage.complete_many`, tried again while the database is unreachable.

        ``complete_many`` already reconnects once. A server restart or a failover
        lasts longer than that: then the write is tried again, 0.1 s, 0.2 s ... 1 s
        apart, until 1 s before the batch's earliest lease expires: each job's
        ``lease_expires_at``, which the claim set and each heartbeat moves to the
        expiry its row then holds (:func:`storage.heartbeat`), so a job that ran
        past its first lease still has the whole of its current one. Not longer: a
        write after the lease is refused by the lease token anyway, the job being
        the reaper's. Giving up at once would leave every job of the batch to be
        reaped and run a second time after an outage shorter than the lease.
        """
        items = [(job, result) for job, result, _cb, _ms in batch]
        run_ms = [ms for _job, _result, _cb, ms in batch]
        expiries = [job.lease_expires_at for job, _r, _cb, _ms in batch if job.lease_expires_at]
        return write_through_outage(
            logger,
            _alias(batch),
            lambda: storage.complete_many(items, run_ms=run_ms),
            until=min(expiries) - timedelta(seconds=1) if expiries else None,
            what=f"storing {len(items)} results",
            stopped=lambda: self._closed,
        )

    @staticmethod
    def _one(job: Job, result: Any, run_ms: int | None) -> bool:
        # complete_many of one job, not storage.complete: with a retention of zero
        # its row is deleted as the batch would have deleted it, rather than kept
        # ``done`` because another job of its batch failed the write
        # (docs/design.md#retention).
        try:
            [stored] = storage.complete_many([(job, result)], run_ms=[run_ms])
            return stored
        except Exception:
            # Left processing: its lease expires and the reaper takes it back.
            logger.exception("storing the result failed jid=%s type=%s", job.jid, job.job_type)
            return False


def _alias(batch: list[_Item]) -> str:
    """The database alias of a batch's jobs (one foreman's: one alias)."""
    return batch[0][0]._state.db or "default"

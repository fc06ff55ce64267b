"""How a foreman's runners get their next job: held ones first, else a batch claim.

A claim takes up to the free slots plus the prefetch in one statement
(:func:`django_jobqueue.storage.claim`); the claiming runner keeps the first job
and the rest wait in the foreman's inbox, in claim order, for the next runner that
is free (the in-memory hand-off). One claim at a time per
foreman, under its claim lock; a held job is taken without that lock.

A runner that takes the last held job while the queue was not found drained
claims the next batch before it runs its own job, so the round trip overlaps the
other runners' jobs instead of making them all wait at an empty inbox.

Not used alone: :class:`~.foreman.Foreman` sets the attributes annotated here.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable

from .. import storage
from ..models import Job
from .context import JobContext
from .governor import Governor
from .options import HOLD_MS, MAX_EXTRA_PER_SLOT, _Running

__all__ = ["ForemanClaims"]

logger = logging.getLogger(__name__)


class ForemanClaims:
    """The claim side of a foreman: :meth:`_next_job` for its runners."""

    using: str
    queues: tuple[str, ...] | None
    concurrency: int
    prefetch: int
    lease_ms: int
    governor: Governor
    external_types: frozenset[str]
    recent_run_ms: float
    claims: int
    largest_claim: int
    _adaptive_prefetch: bool
    _busy: int
    _inbox: collections.deque[_Running]
    _claim_lock: threading.Lock
    _claim_seq: int
    _last_claim_short: bool
    _slot_asked: float
    _stopping: threading.Event
    _running: dict[int, _Running]
    _running_lock: threading.Lock

    # Of ForemanThreads (annotations only: the mixin must not shadow them).
    wake: Callable[..., None]
    _wake_runners: Callable[[int], None]
    _unregister: Callable[[_Running], None]  # Foreman

    def _next_job(self, worker: str) -> _Running | None:
        """In a runner thread: take a held job, else claim a batch; None: nothing due.

        A claim takes at most the free slots plus :attr:`prefetch` (more while jobs
        are short, see :data:`~.options.HOLD_MS`), minus jobs already held,
        cut to what every limited job type still allows
        (:meth:`Governor.reserve_batch`). A runner that waited for the lock while
        another claim came back short does not claim again: that claim saw the
        queue drained.
        """
        seen = self._claim_seq
        held = self._take_held()
        if held is not None:
            if (
                not self._inbox
                and not self._last_claim_short
                and self._claim_lock.acquire(blocking=False)
            ):
                # The last held job: claim the next batch now, for the runners
                # that finish meanwhile (this job waits one round trip).
                try:
                    self._claim_batch(worker, keep_first=False)
                except Exception:
                    # Not this job's failure: it runs; the next claim meets the
                    # error again, where the slot's loop backs off.
                    logger.warning("claiming ahead failed worker=%s", worker, exc_info=True)
                finally:
                    self._claim_lock.release()
            return held
        with self._claim_lock:
            held = self._take_held()
            if held is not None:
                return held
            if self._claim_seq != seen and self._last_claim_short:
                return None
            return self._claim_batch(worker, keep_first=True)

    def _extra_prefetch(self) -> int:
        """Jobs a default-prefetch claim takes beyond :attr:`prefetch`: as many as the
        recent jobs fit in :data:`~.options.HOLD_MS` across the slots, bounded."""
        fits = HOLD_MS * self.concurrency / max(self.recent_run_ms, 0.01)
        return min(MAX_EXTRA_PER_SLOT * self.concurrency, int(fits))

    def _take_held(self) -> _Running | None:
        try:
            return self._inbox.popleft()  # atomic: no lock needed
        except IndexError:
            return None

    def _claim_batch(self, worker: str, *, keep_first: bool) -> _Running | None:
        """Under the claim lock: claim a batch; return its first job when
        ``keep_first``, holding the rest (all of it otherwise)."""
        if self._stopping.is_set():
            return None
        prefetch = self.prefetch
        if self._adaptive_prefetch:
            prefetch += self._extra_prefetch()
        # A claim ahead is made by a runner holding a job it has not started: its
        # slot is not free, and the claim is only the prefetch when no other is.
        # A runner's own claim is for its free slot at least.
        free = self.concurrency - self._busy - (0 if keep_first else 1)
        want = max(1 if keep_first else 0, free) + prefetch - len(self._inbox)
        if want <= 0:
            return None
        skipped = self.governor.reserve_batch()
        jobs: list[Job] = []
        accepted: list[bool] = []
        try:
            jobs = storage.claim(
                self.using,
                owner=worker,
                limit=want,
                queues=self.queues,
                exclude_types=self.external_types.union(skipped),
                lease_ms=self.lease_ms,
            )
        finally:
            accepted = self.governor.settle_batch(skipped, [j.job_type for j in jobs])
        over = [job for job, ok in zip(jobs, accepted, strict=True) if not ok]
        jobs = [job for job, ok in zip(jobs, accepted, strict=True) if ok]
        for job in over:  # more of a limited type than its room: back, in place
            storage.hand_back(job, message="over its concurrent limit", keep_place=True)
        if over:
            self.wake()  # claim again: others may be due behind them
        self._claim_seq += 1
        self._last_claim_short = len(jobs) + len(over) < want
        self._slot_asked = 0.0  # this claim now says whether more are due
        self.claims += 1
        self.largest_claim = max(self.largest_claim, len(jobs))
        if not jobs:
            return None
        claimed = [
            _Running(job=job, ctx=JobContext(job, worker=worker, lease_ms=self.lease_ms))
            for job in jobs
        ]
        with self._running_lock:
            for running in claimed:
                self._running[running.job.pk] = running
        if self._stopping.is_set():
            # Stopped during the round trip: a forced stop's hand-back may have taken
            # its snapshot before these were registered, so they go back from here
            # (a second hand-back of a job is refused by its lease token).
            for running in claimed:
                running.ctx.mark_lease_lost()
                storage.hand_back(running.job, message="handed back at worker shutdown")
                self._unregister(running)
            return None
        first = claimed.pop(0) if keep_first else None
        self._inbox.extend(claimed)
        if claimed:
            self._wake_runners(len(claimed))  # idle runners take them
        return first

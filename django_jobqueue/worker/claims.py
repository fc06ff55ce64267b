"""How a foreman's runners get their next job: held ones first, else a batch claim.

A claim takes up to the free slots plus the prefetch in one statement
(:func:`django_jobqueue.storage.claim`); the claiming runner keeps the first job
and the rest wait in the foreman's inbox, in claim order, for the next runner that
is free (the in-memory hand-off). One claim at a time per
foreman, under its claim lock; a held job is taken without that lock.

The prefetch never hurts (README "Prefetch", docs/prefetch.md): the claim is made
"not started" (an attempt is spent only by a start, which the runner stores), jobs
beyond the free slots are kept only when their job type is short
(:data:`~.options.SHORT_TYPE_MS`), the others go back at once in their place, and
a kept one that has not started within the hold time goes back too
(:meth:`ForemanClaims._hold_loop`), so a foreman with a free slot can take it.

A runner that takes the last held job while the queue was not found drained
claims the next batch before it runs its own job, so the round trip overlaps the
other runners' jobs instead of making them all wait at an empty inbox.

Not used alone: :class:`~.foreman.Foreman` sets the attributes annotated here.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from .. import reaping, storage
from ..core.reconnect import log_failure
from ..models import Job
from ..store.wakeups import notify_on_commit
from .completer import Completer
from .context import JobContext
from .governor import Governor
from .options import MAX_EXTRA_PER_SLOT, MIN_EXTRA_CAP, SHORT_TYPE_MS, _Running

__all__ = ["ForemanClaims"]

#: How many of a job type's last run times its median is taken over.
_TYPE_RUNS = 5
#: While the take rate says no held job would start within the hold time, one claim
#: in this many still holds one: the pace is measured only from held jobs.
_PROBE_EVERY = 8

logger = logging.getLogger(__name__)


class ForemanClaims:
    """The claim side of a foreman: :meth:`_next_job` for its runners."""

    using: str
    queues: tuple[str, ...] | None
    concurrency: int
    prefetch: int
    prefetch_ms: int
    hold_ms: int
    lease_ms: int
    governor: Governor
    external_types: frozenset[str]
    recent_run_ms: float
    type_run_ms: dict[str, float]
    _type_runs: dict[str, tuple[float, ...]]
    claims: int
    largest_claim: int
    take_rate: float
    _take_mark: tuple[float, int, int] | None
    _taken_count: int
    _prefetched_taken: int
    _adaptive_prefetch: bool
    _busy: int
    _inbox: collections.deque[_Running]
    _held_lock: threading.Lock
    _hold_cond: threading.Condition
    _held_batches: collections.deque[tuple[float, list[_Running]]]
    _done: threading.Event
    _claim_lock: threading.Lock
    _claim_seq: int
    _last_claim_short: bool
    _slot_asked: float
    _stopping: threading.Event
    _running: dict[int, _Running]
    _running_lock: threading.Lock
    _async_running: int

    shutdown_timeout_ms: int
    completer: Completer | None
    _forced: threading.Event
    _threads: list[threading.Thread]

    # Of ForemanThreads (annotations only: the mixin must not shadow them).
    wake: Callable[..., None]
    _wake_runners: Callable[[int], None]
    _unregister: Callable[[_Running], None]  # Foreman
    _wait: Callable[..., None]  # Foreman
    _snapshot: Callable[[], list[_Running]]
    _count: Callable[[str], None]

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
                    log_failure(logger, self.using, "claiming ahead failed worker=%s", worker)
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

    def is_short(self, job_type: str) -> bool:
        """Whether ``job_type``'s recent run time here is known and at most
        :data:`~.options.SHORT_TYPE_MS` (its jobs may be prefetched, and start
        without a write of their own)."""
        run_ms = self.type_run_ms.get(job_type)
        return run_ms is not None and run_ms <= SHORT_TYPE_MS

    def _record_run(self, job_type: str, run_ms: float) -> None:
        """Note a run of ``job_type`` that took ``run_ms`` ms (its handler, from its start).

        The median of the last :data:`_TYPE_RUNS` runs: a first run slowed by a
        process's warm-up does not keep a short type from being short.
        """
        # Tuples, replaced whole: runners record at once without a lock (a lost
        # update only steers the prefetch a little).
        runs = (*self._type_runs.get(job_type, ())[1 - _TYPE_RUNS :], run_ms)
        self._type_runs[job_type] = runs
        self.type_run_ms[job_type] = sorted(runs)[len(runs) // 2]

    def _prefetch_now(self) -> int:
        """Jobs the next claim may take beyond the free slots: none until a short job
        type is known; else :attr:`prefetch` when set, or as many as the recent jobs
        fit in ``prefetch_ms`` across the slots, at most
        :data:`~.options.MAX_EXTRA_PER_SLOT` per slot or
        :data:`~.options.MIN_EXTRA_CAP` in all, whichever is more; either at most
        what the slots start in half the hold time (:meth:`_starts_within_hold`)."""
        known = list(self.type_run_ms.values())  # one C-level copy: runners add types
        if not any(run_ms <= SHORT_TYPE_MS for run_ms in known):
            return 0
        if not self._adaptive_prefetch:
            # A set prefetch is a most: held beyond what the slots take in half the
            # hold time, jobs would go back and be claimed again, each a write,
            # claim after claim (docs/prefetch.md, "The pace").
            return min(self.prefetch, self._starts_within_hold())
        fits = self.prefetch_ms * self.concurrency / max(self.recent_run_ms, 0.01)
        fits = min(fits, self._starts_within_hold())
        return min(max(MAX_EXTRA_PER_SLOT * self.concurrency, MIN_EXTRA_CAP), int(fits))

    def _starts_within_hold(self) -> int:
        """How many held jobs this foreman starts in half the hold time at its recent
        pace (:attr:`take_rate`): a held job then starts well within the hold time,
        not handed back after it. No bound while the pace is unknown. When not even
        one would start, none is held, but one on every :data:`_PROBE_EVERY`-th
        claim, so that a faster pace is seen again."""
        if self.take_rate <= 0:
            return 1 << 30
        fits = int(self.take_rate * self.hold_ms / 2)
        if fits:
            return fits
        return 1 if self.claims % _PROBE_EVERY == 0 else 0

    def _take_held(self) -> _Running | None:
        while True:
            try:
                running = self._inbox.popleft()  # atomic: no lock needed
            except IndexError:
                return None
            with self._held_lock:  # the hold loop may be withdrawing it
                taken = not running.withdrawn
                if taken:
                    running.taken = True
                    self._taken_count += 1
                    if running.hold_until:
                        self._prefetched_taken += 1
            if not self._inbox:
                self._note_take_rate()
            if taken:
                return running

    def _note_take_rate(self, *, went_back: bool = False) -> None:
        """Note how fast this foreman's slots took jobs from its inbox since the last
        claim landed (:attr:`take_rate`, a moving average in jobs per ms, at most
        doubled by one sample), when the inbox runs empty, if a prefetched job was
        among them: a claim that held none was taken at once, whatever the pace.

        ``went_back``: held jobs went back unstarted, the pace slower than the
        prefetch assumed. The sample is then the prefetched jobs taken (no fewer
        than 1: an upper bound) over the time since the landing, and the rate
        moves halfway down to it, not a fifth of the way, so the next claims
        hold about half as many too many at most; one late start (a pause of the
        process) does not stop the prefetch.
        """
        with self._held_lock:  # the hold thread and a runner may both get here
            mark = self._take_mark
            if mark is None:
                return
            landed, taken_before, prefetched_before = mark
            prefetched = self._prefetched_taken - prefetched_before
            if went_back:
                taken = max(prefetched, 1)  # of the held jobs, what the hold time saw
            elif prefetched > 0:
                taken = self._taken_count - taken_before
            else:
                return  # none held was taken: nothing to tell; the mark stays
            self._take_mark = None
        elapsed_ms = (time.monotonic() - landed) * 1000
        if elapsed_ms <= 0:
            return
        rate = taken / elapsed_ms
        if not self.take_rate:
            self.take_rate = rate
        elif went_back:
            self.take_rate = min(self.take_rate, (self.take_rate + rate) / 2)
        else:
            # At most doubled by one claim: a held job a runner took the moment the
            # claim landed (its slot freed during the round trip) says little of the
            # pace, and would let the next claims hold far too many.
            self.take_rate = min(self.take_rate * 0.8 + rate * 0.2, self.take_rate * 2)

    def _start(self, running: _Running) -> bool:
        """Record that ``running``'s job starts now; False: its lease was lost, not ours.

        The claim did not start it (an attempt is spent only by a start,
        docs/design.md#execution). A job of a short type (:meth:`is_short`) starts
        with no write: its start is stored by the next heartbeat or its outcome,
        whichever is first. Any other job stores its start first (one guarded
        write, after the batched successes waiting), so a job that kills its process
        counts that attempt, and the jobs done before it do not run again.
        """
        job = running.job
        if job.started_at is None:
            if self.is_short(job.job_type) and not reaping.expired_before_start(job):
                running.start_unrecorded = True
            else:
                if self.completer is not None:
                    # The successes waiting to be written land first: were this job
                    # to end the process, they would run again.
                    self.completer.flush()
                if not storage.mark_started(job):
                    running.ctx.mark_lease_lost()
                    return False
        # The claim's time by the database clock: what expiry and the attempt log read.
        job.started_at = job.started_at or job.heartbeat_at
        return True

    def _withdraw(self, held: list[_Running]) -> list[_Running]:
        """Mark the jobs of ``held`` that no runner took as withdrawn; return them."""
        withdrawn = []
        with self._held_lock:
            for running in held:
                if not (running.taken or running.withdrawn):
                    running.withdrawn = True
                    withdrawn.append(running)
        return withdrawn

    def _give_back(self, held: list[_Running], message: str | None) -> int:
        """Hand back withdrawn jobs unstarted, their attempt not spent; return how many.

        One statement for them all (:func:`storage.hand_back_many`): it runs under
        the claim lock. Each keeps its place in claim order; its queue's idle
        workers are woken, on every foreman (a NOTIFY on PostgreSQL), since they may
        have a free slot.
        """
        given = 0
        for running in held:
            running.ctx.mark_lease_lost()
        try:
            given = storage.hand_back_many([running.job for running in held], message=message)
            for queue in {running.job.queue for running in held}:
                notify_on_commit(self.using, queue)
        except Exception:
            # Left leased: their leases expire and the reaper returns them unspent.
            logger.warning(
                "handing back held jobs failed jids=%s",
                ",".join(running.job.jid for running in held),
            )
        for running in held:
            self._unregister(running)
        return given

    def _hand_back_held(self, message: str | None) -> int:
        """Hand back every held job no runner took yet (a stop, a crash); return how many.

        Under the claim lock as the hold thread's hand-backs, but a claim stuck on an
        unreachable database delays a stop by 5 s at most.
        """
        locked = self._claim_lock.acquire(timeout=5)
        try:
            held = self._withdraw(list(self._drain_inbox()))
            with self._hold_cond:
                self._held_batches.clear()
            return self._give_back(held, message)
        finally:
            if locked:
                self._claim_lock.release()

    def _drain_inbox(self) -> list[_Running]:
        taken: list[_Running] = []
        while True:
            try:
                taken.append(self._inbox.popleft())
            except IndexError:
                return taken

    def _hold_loop(self) -> None:
        """The hold thread: a prefetched job not started by its ``hold_until`` goes
        back to the queue (a foreman with a free slot takes it), its attempt not spent.

        Claims that prefetch queue their held jobs here as one batch; the thread
        sleeps until the oldest batch's deadline, then withdraws what no runner took.
        """
        try:
            while not self._done.is_set():
                with self._hold_cond:
                    if not self._held_batches:
                        self._hold_cond.wait(1.0)
                        continue
                    deadline, batch = self._held_batches[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._done.wait(left)
                    continue
                with self._hold_cond:
                    if self._held_batches and self._held_batches[0][1] is batch:
                        self._held_batches.popleft()
                # Under the claim lock: no claim runs while they are withdrawn but still
                # leased, so the next claim takes them again first (claim order holds).
                with self._claim_lock:
                    late = self._withdraw(batch)
                    if late:  # before a claim under this lock sets a new mark
                        self._note_take_rate(went_back=True)
                    given = self._give_back(late, None) if late else 0
                if late:
                    logger.info(
                        "prefetched jobs not started within hold_ms=%d went back jobs=%d",
                        self.hold_ms,
                        given,
                    )
        finally:
            connections.close_all()  # the hand-backs' session of this thread

    def _claim_batch(self, worker: str, *, keep_first: bool) -> _Running | None:
        """Under the claim lock: claim a batch; return its first job when
        ``keep_first``, holding the rest (all of it otherwise)."""
        if self._stopping.is_set():
            return None
        # A claim ahead is made by a runner holding a job it has not started: its
        # slot is not free, and the claim is only the prefetch when no other is.
        # A runner's own claim is for its free slot at least.
        free = self.concurrency - self._busy - (0 if keep_first else 1)
        held = len(self._inbox)
        # The first ``for_slots`` jobs have a free slot now; on a claim ahead the next
        # one waits for the claimer's slot, behind the (short) job it holds. Any
        # other is prefetched: of a short type only, and held no longer than hold_ms.
        for_slots = max(1 if keep_first else 0, free - held)
        any_type = for_slots if keep_first else max(1, for_slots)
        want = max(1 if keep_first else 0, free) + self._prefetch_now() - held
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
                started=False,  # each start is stored by its runner (Foreman._start)
            )
        finally:
            accepted = self.governor.settle_batch(skipped, [j.job_type for j in jobs])
        over = [job for job, ok in zip(jobs, accepted, strict=True) if not ok]
        kept = []
        for position, (job, ok) in enumerate(zip(jobs, accepted, strict=True)):
            if ok and position >= any_type and not self.is_short(job.job_type):
                # Beyond the free slots, of a job type not known short: a prefetch
                # must not make it wait a long job's time. Back, in place, unspent.
                self.governor.del_job(job.job_type)
                over.append(job)
            elif ok:
                kept.append(job)
        prefetched = {job.pk for job in kept[for_slots:]}  # held against the hold time
        jobs = kept
        if over:  # more than the room of a limited type, or not short: back
            storage.hand_back_many(over)
            self.wake()  # claim again: others may be due behind them
        self._claim_seq += 1
        self._last_claim_short = len(jobs) + len(over) < want
        self._slot_asked = 0.0  # this claim now says whether more are due
        self.claims += 1
        self.largest_claim = max(self.largest_claim, len(jobs))
        if not jobs:
            return None
        hold_until = time.monotonic() + self.hold_ms / 1000
        claimed = [
            _Running(
                job=job,
                ctx=JobContext(job, worker=worker, lease_ms=self.lease_ms),
                hold_until=hold_until if job.pk in prefetched else 0.0,
            )
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
        if first is not None:
            first.taken = True
        self._take_mark = (time.monotonic(), self._taken_count, self._prefetched_taken)
        self._inbox.extend(claimed)
        late = [running for running in claimed if running.hold_until]
        if late:
            with self._hold_cond:
                self._held_batches.append((hold_until, late))
                if len(self._held_batches) == 1:
                    self._hold_cond.notify()  # the hold thread sleeps without a deadline
        if claimed:
            self._wake_runners(len(claimed))  # idle runners take them
        return first

    def _drain(self) -> None:
        """Stop: held jobs go back now; running ones get ``shutdown_timeout_ms``, then
        go back unless their success waits in the completer (docs/design.md#execution)."""
        # Jobs no slot took yet go back at once: another foreman may have room now.
        handed = self._hand_back_held("handed back at worker shutdown")
        if handed:
            logger.info("held jobs handed back at shutdown jobs=%d", handed)
        deadline = time.monotonic() + self.shutdown_timeout_ms / 1000
        while not self._forced.is_set() and time.monotonic() < deadline:
            alive = [t for t in self._threads if t.is_alive()]
            if not alive and not self._async_running:  # async jobs end on the loop
                break
            self._wait(0.05)
        if self.completer is not None:
            self.completer.close()  # stored successes are not handed back
        # Not those whose outcome is being written (batched, or by their runner
        # through an outage: ctx.storing covers both): their handlers ran, and a
        # hand-back would undo that.
        left = [r for r in self._snapshot() if not r.ctx.storing]
        for running in left:
            running.ctx.mark_lease_lost()
            if storage.hand_back(running.job, message="handed back at worker shutdown"):
                self._count("handed_back")
                logger.warning(
                    "job handed back at shutdown jid=%s type=%s attempt=%s",
                    running.job.jid,
                    running.job.job_type,
                    running.job.attempt,
                )

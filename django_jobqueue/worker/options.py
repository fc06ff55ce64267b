"""Options of a foreman, and what its worker slots run (see :mod:`.foreman`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..models import Job
from .context import JobContext

__all__ = [
    "HOLD_FACTOR",
    "HOLD_MS",
    "MAX_EXTRA_PER_SLOT",
    "MIN_EXTRA_CAP",
    "MIN_HOLD_MS",
    "SHORT_JOB_MS",
    "SHORT_TYPE_MS",
    "ForemanOptions",
]

#: Default of ``JOBQUEUE["PREFETCH_MS"]`` (README "Prefetch", docs/prefetch.md): how
#: long (ms) a job held in memory may wait for a slot, on average. A claim takes that
#: many more jobs than the free slots as the foreman's recent jobs fit in this time
#: across its slots, at most :data:`MAX_EXTRA_PER_SLOT` per slot or
#: :data:`MIN_EXTRA_CAP` in all, whichever is more, and keeps only those of short job
#: types (:data:`SHORT_TYPE_MS`). No-op jobs then fill a claim round trip (up to 64
#: more at concurrency 4); 10 ms jobs at concurrency 4 take none.
HOLD_MS = 2
#: Most extra jobs per worker slot a prefetching claim takes ...
MAX_EXTRA_PER_SLOT = 3
#: ... unless the slots are few: a claim may always take this many extra. A claim's
#: round trip (about 2 ms on PostgreSQL) is worth this many no-op jobs; with 3 per
#: slot, a foreman of 1 to 4 slots spent most of a no-op drain waiting for claims of
#: 4 to 16 jobs. The budget's fit and the take rate still bound it (the hold time).
MIN_EXTRA_CAP = 64
#: Assumed run time (ms) of a foreman's jobs before it has run any (the claim's
#: fit only; no job type counts as short before one of its jobs ran here).
SHORT_JOB_MS = 5
#: A job type is *short* while its recent run time in this foreman (a moving
#: average, ms) is known and at most this: only short types are prefetched, and a
#: short job starts without a write of its own (its start is stored with its
#: outcome or the next heartbeat). Any other job stores its start before its
#: handler runs: one statement, about 1% of a job this long.
SHORT_TYPE_MS = 100
#: A prefetched job that has not started this many prefetch budgets
#: (``PREFETCH_MS``) after its claim goes back to the queue, ...
HOLD_FACTOR = 5
#: ... and never sooner than this (ms).
MIN_HOLD_MS = 10


@dataclass(frozen=True)
class ForemanOptions:
    """Settings of one foreman (docs/design.md#execution); None: the ``JOBQUEUE`` value."""

    #: Database alias of the jobs; None: ``JOBQUEUE["DATABASE"]`` or the routers'.
    using: str | None = None
    #: Queues to claim from; None or empty: every queue.
    queues: tuple[str, ...] | None = None
    #: Most worker threads (docs/design.md#execution).
    concurrency: int | None = None
    #: Pause of a worker between two jobs, ms (docs/design.md#execution).
    break_time_ms: int | None = None
    #: Least time between two spawns, ms (docs/design.md#execution).
    ramp_time_ms: int | None = None
    #: Idle sleep bounds, ms.
    min_sleep_ms: int | None = None
    max_sleep_ms: int | None = None
    #: Lease of a claimed job, ms.
    lease_ms: int | None = None
    #: Heartbeat interval, ms; None: ``HEARTBEAT_MS``, at most a third of the lease.
    heartbeat_ms: int | None = None
    #: Grace period of a graceful shutdown, ms.
    shutdown_timeout_ms: int | None = None
    #: Drain what is due and return.
    burst: bool = False
    #: Middleware dotted paths; None: ``JOBQUEUE["MIDDLEWARE"]``.
    middleware: tuple[str, ...] | None = None
    #: Jobs a claim may take beyond the free slots, held (and heartbeated) until a
    #: slot is free, of short job types only (:data:`SHORT_TYPE_MS`); None: as many
    #: as the foreman's recent jobs fit in ``prefetch_ms`` across its slots.
    prefetch: int | None = None
    #: The prefetch budget, ms (see :data:`HOLD_MS`); 0: no prefetch unless
    #: ``prefetch`` is set; None: ``JOBQUEUE["PREFETCH_MS"]``.
    prefetch_ms: int | None = None
    #: Store successes in batches (:class:`~.completer.Completer`).
    batch_completions: bool = True
    #: Log "job finished" (INFO) for each success; None: ``JOBQUEUE["LOG_SUCCESS"]``.
    log_success: bool | None = None


@dataclass
class _Running:
    job: Job
    ctx: JobContext
    started: float = 0.0
    deadline: float = float("inf")
    #: Its success waits in the completer: not handed back at shutdown.
    storing: bool = False
    #: Prefetched (beyond the free slots): the monotonic time by which it must have
    #: started, else it goes back to the queue; 0.0: held for a free slot.
    hold_until: float = 0.0
    #: Taken by a runner from the inbox / withdrawn from it to go back (under the
    #: foreman's hold lock: exactly one of them happens).
    taken: bool = False
    withdrawn: bool = False
    #: Started without a write of its own, the start not stored yet: the next
    #: heartbeat stores it (storage.heartbeat's ``started``).
    start_unrecorded: bool = False
    #: It holds one of the foreman's worker slots (counted in ``Foreman._busy``).
    holds_slot: bool = False
    #: An async job whose handler ignored its timeout's cancellation: its time-out
    #: was stored and its slot freed without it (:meth:`.aio.ForemanAsync._abandon`).
    abandoned: bool = False
    #: Past its deadline by ``OVERDUE_S`` and still running: no longer heartbeated
    #: (:meth:`.housekeeping.ForemanThreads._leases_to_extend`).
    overdue: bool = False


class _Slot:
    """What a worker slot's runner is doing now, seen by its supervisor."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: _Running | None = None
        #: The foreman's wake-up generation when the runner's last claim began: a
        #: wake-up after it is not slept through.
        self.gen = 0

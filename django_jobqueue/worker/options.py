"""Options of a foreman, and what its worker slots run (see :mod:`.foreman`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..models import Job
from .context import JobContext

__all__ = ["HOLD_MS", "MAX_EXTRA_PER_SLOT", "PREFETCH", "SHORT_JOB_MS", "ForemanOptions"]

#: Default of :attr:`ForemanOptions.prefetch`.
PREFETCH = 1
#: With the default prefetch, how long (ms) a job held in memory may wait for a slot,
#: on average: a claim takes that many more jobs than the free slots as the
#: foreman's recent jobs fit in this time across its slots, at most
#: :data:`MAX_EXTRA_PER_SLOT` per slot. No-op jobs (0.2 ms) then fill a claim round
#: trip (12 more at concurrency 4); 10 ms jobs at concurrency 4 take none.
HOLD_MS = 2
#: Most extra jobs per worker slot a default-prefetch claim takes.
MAX_EXTRA_PER_SLOT = 3
#: Assumed run time (ms) of a foreman's jobs before it has run any.
SHORT_JOB_MS = 5


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
    #: slot is free; None: :data:`PREFETCH`, plus as many as the foreman's recent
    #: jobs fit in :data:`HOLD_MS` across its slots (see there).
    prefetch: int | None = None
    #: Store successes in batches (:class:`~.completer.Completer`).
    batch_completions: bool = True


@dataclass
class _Running:
    job: Job
    ctx: JobContext
    started: float = 0.0
    deadline: float = float("inf")
    #: Its success waits in the completer: not handed back at shutdown.
    storing: bool = False


class _Slot:
    """What a worker slot's runner is doing now, seen by its supervisor."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: _Running | None = None
        #: The foreman's wake-up generation when the runner's last claim began: a
        #: wake-up after it is not slept through.
        self.gen = 0

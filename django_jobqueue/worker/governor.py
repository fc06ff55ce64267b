"""The governor: when a foreman spawns a worker thread and how long idle workers sleep.

Policy (docs/design.md#execution):

- **Spawn on demand.** A foreman starts with no worker. :meth:`Governor.spawn`
  allows one more worker while ``workers < max_workers``, at most one per
  ``ramp_time_ms`` (docs/design.md#execution), and only while there is demand: no worker
  runs yet, or the last claim found a job (the queue is not idle).
- **Adaptive idle sleep.** Each claim that finds nothing (:meth:`no_job`) doubles
  the sleep, ``sleep = min(max_sleep_ms, max(min_sleep_ms, 2 * sleep))``; a claim
  that finds a job (:meth:`found_job`) or a wake-up snaps it back to
  ``min_sleep_ms``.
- **Shrink when idle.** An idle worker retires (:meth:`retire`) while other
  workers remain, so an idle foreman keeps one polling worker.
- **Per-type limit.** A job type with ``concurrent = n`` runs at most ``n`` jobs at
  once in one foreman. Claims run in parallel, so each claim first *reserves* one
  place in every limited type that has room (:meth:`reserve`): a type is skipped
  (docs/design.md#execution) when ``running + reserved >= n``. When the
  claim returns, :meth:`settle` drops the reservations and counts the job claimed.
  A limit is never overshot, and no lock is held across the claim's round trip.

The governor holds no database state; every method is thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

__all__ = ["Governor"]


class Governor:
    """Decide spawns, idle sleep and per-type limits of one foreman.

    Parameters
    ----------
    max_workers:
        Most worker threads (docs/design.md#execution), >= 1.
    min_sleep_ms, max_sleep_ms:
        Bounds of the idle sleep, ms.
    ramp_time_ms:
        Least time between two spawns, ms (docs/design.md#execution).
    concurrent:
        Per job type, most jobs running at once (docs/design.md#execution);
        a type missing here has no limit but the worker count.
    clock:
        Monotonic clock in seconds (tests pass a fake one).

    Implements: docs/design.md#execution.
    """

    def __init__(
        self,
        max_workers: int,
        *,
        min_sleep_ms: int,
        max_sleep_ms: int,
        ramp_time_ms: int = 0,
        concurrent: Mapping[str, int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1: got {max_workers!r}.")
        if not 0 < min_sleep_ms <= max_sleep_ms:
            raise ValueError(
                f"min_sleep_ms must be > 0 and <= max_sleep_ms: got {min_sleep_ms!r} "
                f"and {max_sleep_ms!r}."
            )
        self.max_workers = max_workers
        self.min_sleep_ms = min_sleep_ms
        self.max_sleep_ms = max_sleep_ms
        self.ramp_time_ms = ramp_time_ms
        self.concurrent: dict[str, int] = dict(concurrent or {})
        self._clock = clock
        self._lock = threading.Lock()
        self._sleep_ms = min_sleep_ms
        self._workers = 0
        self._running: dict[str, int] = {}
        self._reserved: dict[str, int] = {}
        self._demand = True
        self._last_spawn: float | None = None

    # Workers ---------------------------------------------------------------

    @property
    def workers(self) -> int:
        """Worker threads alive now (docs/design.md#execution)."""
        return self._workers

    def spawn(self) -> bool:
        """Return whether to start one more worker now, and count it if so.

        Implements: docs/design.md#execution.
        """
        with self._lock:
            if self._workers >= self.max_workers:
                return False
            if self._workers and not self._demand:
                return False
            now = self._clock()
            if (
                self._workers
                and self._last_spawn is not None
                and (now - self._last_spawn) * 1000 < self.ramp_time_ms
            ):
                return False
            self._workers += 1
            self._last_spawn = now
            return True

    def retire(self) -> bool:
        """Return whether an idle worker should exit now, and uncount it if so.

        The last worker never retires: it keeps polling.
        """
        with self._lock:
            if self._workers > 1:
                self._workers -= 1
                return True
            return False

    def worker_exited(self) -> None:
        """Uncount a worker that exits for another reason (shutdown, burst, crash)."""
        with self._lock:
            self._workers = max(0, self._workers - 1)

    # Sleep -------------------------------------------------------------------

    @property
    def sleep_ms(self) -> int:
        """The current idle sleep, ms."""
        return self._sleep_ms

    def no_job(self) -> int:
        """Record a claim that found nothing; return the (grown) idle sleep in ms.

        Implements: docs/design.md#execution.
        """
        with self._lock:
            self._demand = False
            self._sleep_ms = min(self.max_sleep_ms, max(self.min_sleep_ms, self._sleep_ms * 2))
            return self._sleep_ms

    def found_job(self) -> None:
        """Record a claim that found a job: snap the sleep back, allow spawns."""
        with self._lock:
            self._demand = True
            self._sleep_ms = self.min_sleep_ms

    def woken(self) -> None:
        """Record a wake-up (NOTIFY or in-process): a job may be waiting."""
        self.found_job()

    # Per-type limits ---------------------------------------------------------

    def add_job(self, job_type: str) -> None:
        """Count a running job of ``job_type`` (docs/design.md#execution)."""
        with self._lock:
            self._running[job_type] = self._running.get(job_type, 0) + 1

    def del_job(self, job_type: str) -> None:
        """Uncount a finished job of ``job_type`` (docs/design.md#execution)."""
        with self._lock:
            left = self._running.get(job_type, 0) - 1
            if left > 0:
                self._running[job_type] = left
            else:
                self._running.pop(job_type, None)

    def running(self, job_type: str) -> int:
        """Return how many jobs of ``job_type`` run now."""
        return self._running.get(job_type, 0)

    def excluded_types(self) -> list[str]:
        """Return the job types at their ``concurrent`` limit, counting reservations."""
        with self._lock:
            return sorted(self._full())

    def _full(self) -> set[str]:
        return {
            name
            for name, limit in self.concurrent.items()
            if self._running.get(name, 0) + self._reserved.get(name, 0) >= limit
        }

    def reserve(self) -> frozenset[str]:
        """Reserve a place for one claim in every limited type with room.

        Returns
        -------
        frozenset[str]
            The job types the claim must skip (at their limit). Pass it back to
            :meth:`settle` once the claim has returned, whatever it found.
        """
        with self._lock:
            full = frozenset(self._full())
            for name in self.concurrent:
                if name not in full:
                    self._reserved[name] = self._reserved.get(name, 0) + 1
            return full

    def settle(self, skipped: frozenset[str], claimed_type: str | None) -> None:
        """Drop the reservations of a claim made with ``skipped``; count what it claimed."""
        with self._lock:
            for name in self.concurrent:
                if name not in skipped:
                    left = self._reserved.get(name, 0) - 1
                    if left > 0:
                        self._reserved[name] = left
                    else:
                        self._reserved.pop(name, None)
            if claimed_type is not None:
                self._running[claimed_type] = self._running.get(claimed_type, 0) + 1

    def reserve_batch(self) -> frozenset[str]:
        """Reserve a place for one batch claim in every limited type with room.

        Returns the job types the claim must skip (at their limit); pass it to
        :meth:`settle_batch` once the claim has returned, whatever it found.
        """
        return self.reserve()

    def settle_batch(self, skipped: frozenset[str], claimed_types: list[str]) -> list[bool]:
        """Drop a batch claim's reservations; count the jobs it may run; return which.

        ``claimed_types`` are the claimed jobs' types in claim order. A job of a
        limited type is accepted (counted running) while its type has room left,
        counting other claims' reservations; the rest (False) must be handed back
        unrun, so a batch never brings more of a type than its limit allows.
        """
        accepted: list[bool] = []
        with self._lock:
            for name in self.concurrent:
                if name not in skipped:
                    left = self._reserved.get(name, 0) - 1
                    if left > 0:
                        self._reserved[name] = left
                    else:
                        self._reserved.pop(name, None)
            for name in claimed_types:
                limit = self.concurrent.get(name)
                running = self._running.get(name, 0)
                ok = limit is None or running + self._reserved.get(name, 0) < limit
                if ok:
                    self._running[name] = running + 1
                accepted.append(ok)
        return accepted

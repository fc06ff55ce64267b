"""Where a PostgreSQL claim starts its index scan while dead index entries pile up.

Every claim leaves the old version of each row it takes behind in the claim index
(``waiting`` true, the job's priority, ``run_at`` and id), and a finished job leaves
more. Vacuum removes those entries, but not while any transaction holds a snapshot
older than them (an idle-in-transaction session, a long report, a lagging
replication slot). Until then every claim's index scan starts at the lowest key and
visits each dead entry's heap row before it reaches a live one: docs/horizon.md
measured the claim falling to about half the offered rate after two minutes of one
held snapshot.

A claim that found its rows starting at key ``k`` (priority, run_at, id) proved that
no unlocked waiting due row was below ``k``; a later claim may start its scan there
(``(priority, run_at, id) >= k``, a bound the index positions on) and skip every
dead entry behind it. Rows can appear below ``k`` afterwards only by being written
there: a job enqueued with a more urgent priority, or with a ``run_at`` in the past,
or committed by a transaction that took its ``run_at`` before the claim ran. So the
floor is used only while looking from the start is slow (the last look took
:data:`SLOW_CLAIM_MS` or more: the dead entries are there), and something looks
below it regularly: the next look runs :data:`LOOK_GAP` times the last one's
duration after it, and at most :data:`LOOK_EVERY_S` later. A look is a read,
not a claim, made by the process's one :data:`looker` thread on its own
connection: the claims go on at the floor meanwhile, so the walk over the garbage
delays no claim (a claim from the start held the worker's claims for the whole
walk, hundreds of ms at a few hundred thousand dead entries). A look that finds a
row lowers the floor to it, and the next claim takes it; one that finds none proves
the rows below, and a fast one turns the floor off (claims start from the start
again). A job written below the floor waits at most the gap plus a look, and the
walk costs the database about a tenth of its time, however much garbage there is.
A job this process hands back in its place (a prefetched job no runner started)
lowers its floors to it at once (:meth:`ClaimFloors.lower`). A claim with a floor
keeps the claim's order above it. A claim above the floor that
came back short proves nothing below it: the caller asks
:meth:`ClaimFloors.recheck_ms` how long until a look has been there, and sleeps no
longer (only the last claim's filters of an alias count). A claim that proved its
rows without a floor (the limits' claim, a claim of paused queues only) says so with
:meth:`ClaimFloors.looked_from_start`.

One :class:`ClaimFloors` per process (:data:`floors`); each set of claim filters
(alias, queues, excluded job types and queues) has its own floor, since a claim
that left rows out by a filter proved nothing about them.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections

__all__ = [
    "FLOOR_LAG_S",
    "LATE_LOOK_POLL_S",
    "LOOKER_IDLE_S",
    "LOOK_EVERY_S",
    "LOOK_GAP",
    "SLOW_CLAIM_MS",
    "ClaimFloors",
    "Key",
    "Looker",
    "filter_set",
    "floors",
    "looker",
]

#: A claim from the start of the index, or a look below the floor, that takes this
#: long (ms) or longer turns the floor on for its filters: above a claim's usual 1 to
#: 3 ms, far below the hundreds of ms of a scan over a few hundred thousand dead
#: entries.
SLOW_CLAIM_MS = 5.0
#: While the floor is on, the next look below it runs this many times the last
#: one's duration after it: the database spends about ``1 / LOOK_GAP`` of its time
#: walking dead entries for it.
LOOK_GAP = 10.0
#: ... and at the latest this long (s) after it: the longest a job written below
#: the floor waits, besides the look's own time.
LOOK_EVERY_S = 1.0
#: A looker thread with nothing to do for this long (s) ends, and its connection
#: with it; the next look starts another.
LOOKER_IDLE_S = 5.0
#: How far below its floor's ``run_at`` a claim with a floor starts (s): a job whose
#: producer took its ``run_at`` before a claim ran but committed after it is written
#: just below that claim's first row. Within this margin the next claim sees it;
#: further below, it waits for the claim from the start. The margin costs each claim
#: the dead entries of this many seconds of claims, not of all of them.
FLOOR_LAG_S = 0.1
#: While a look is later than the last one's time (it waits behind another filter
#: set's look in the looker thread, or the walk grew), a worker whose short claim
#: waits for it claims again at most this often (s), not every millisecond.
LATE_LOOK_POLL_S = 0.05
#: Filter sets remembered per process (least recently used dropped first).
MAX_FILTER_SETS = 64

LAG = timedelta(seconds=FLOOR_LAG_S)

logger = logging.getLogger(__name__)

#: (priority, run_at, id) of a job: the claim's order.
Key = tuple[int, datetime, int]


def filter_set(
    using: str,
    queues: Sequence[str] | None,
    exclude_queues: Sequence[str],
    exclude_types: Collection[str],
) -> tuple[str, tuple[str, ...], tuple[str, ...], frozenset[str]]:
    """The key of a claim's floor: its alias, queues (empty: every queue), excluded
    queues (the paused ones) and excluded job types."""
    return (using, tuple(queues or ()), tuple(exclude_queues), frozenset(exclude_types))


def _bound(key: Key) -> Key:
    """Where a claim with its floor at ``key`` starts: its priority, its ``run_at``
    less :data:`FLOOR_LAG_S`, id 0 (below every row of that instant)."""
    return (key[0], key[1] - LAG, 0)


@dataclass
class _Floor:
    key: Key | None = None
    #: The last look from the start (a claim with the floor off, or a look below
    #: it): when (monotonic s), how long it took (ms).
    last_full: float = 0.0
    full_ms: float = 0.0
    #: A claim above the floor came back short since the last look.
    unproven: bool = False
    #: The bound the last look found nothing below, while no claim came back short
    #: since (None: none such): the next short claim that started at or below it is
    #: covered by it (the two together looked at every row, as a claim from the
    #: start would have). One that started above it, at a floor claims moved up
    #: since, skipped the rows between.
    covered: Key | None = None
    #: When (monotonic s) that cover ends: the claim it covers is the one a worker
    #: waiting for the look makes when it is back (:meth:`ClaimFloors.recheck_ms`),
    #: within a poll of it. A later short claim (the filters were away, a wake-up for
    #: a job written below the floor since) is not covered: rows below the floor
    #: written after the look are unproven.
    covered_until: float = 0.0
    #: A look found a row below the floor and lowered it there: the next claim is due
    #: at once (:meth:`ClaimFloors.recheck_ms` says 0) until a claim started there.
    lowered: bool = False
    #: When (monotonic s) :meth:`ClaimFloors.due_look` sent a look that has not
    #: settled yet; None: none in flight.
    look_from: float | None = None

    def lower_to(self, key: Key) -> None:
        """A waiting row at ``key`` is below the floor: the floor goes down to it, and
        the next claim is due at once, proving nothing below until a look has been."""
        self.key = key
        self.lowered = self.unproven = True
        self.covered = None

    def gap_s(self) -> float:
        """Seconds from the last look to the next one."""
        return min(LOOK_EVERY_S, LOOK_GAP * self.full_ms / 1000)

    def on(self) -> bool:
        """Whether claims start at the floor: slow looks from the start, and a key."""
        return self.key is not None and self.full_ms >= SLOW_CLAIM_MS

    def in_flight(self, now: float) -> bool:
        """Whether a look is under way (sent less than :data:`LOOK_EVERY_S` plus its
        last time ago: one that failed or hangs is not waited for longer)."""
        return (
            self.look_from is not None and now - self.look_from < LOOK_EVERY_S + self.full_ms / 1000
        )


class ClaimFloors:
    """Floors of the claims of one process, per filter set; safe across threads."""

    def __init__(self) -> None:
        self._floors: OrderedDict[Hashable, _Floor] = OrderedDict()
        #: The filter set of the last claim per alias (a filter set's first item).
        self._last: dict[Any, Hashable] = {}
        self._lock = threading.Lock()

    def start(self, filters: Hashable) -> Key | None:
        """Return the key the next claim with ``filters`` may start at; None: the start.

        The key is :func:`_bound` of the floor: the claim's first row, less a margin
        for jobs committed late. Pass the claim on to :meth:`settle`, then ask
        :meth:`due_look` whether to look below it."""
        with self._lock:
            floor = self._floors.get(filters)
            if floor is None or not floor.on() or floor.key is None:
                return None
            return _bound(floor.key)

    def due_look(self, filters: Hashable) -> Key | None:
        """Return the bound to look below if a look with ``filters`` is due now (the
        gap since the last one passed, and none under way), and count it under way;
        None: not due, or the floor is off. Pass the look on to :meth:`looked`, or to
        :meth:`abandon` if it failed."""
        with self._lock:
            floor = self._floors.get(filters)
            if floor is None or not floor.on() or floor.key is None:
                return None
            now = time.monotonic()
            if now - floor.last_full < floor.gap_s() or floor.in_flight(now):
                return None
            floor.look_from = now
            return _bound(floor.key)

    def abandon(self, filters: Hashable) -> None:
        """A look :meth:`due_look` sent failed: the next claim sends another."""
        with self._lock:
            floor = self._floors.get(filters)
            if floor is not None:
                floor.look_from = None

    def looked(self, filters: Hashable, *, below: Key, found: Key | None, took_ms: float) -> None:
        """Record a look below the floor: the bound it looked below (what
        :meth:`due_look` returned), the first waiting due row it found there (None:
        none), and its time (ms).

        A row found lowers the floor to it: the next claim starts there and takes it.
        None proves the rows below the floor, as a claim from the start would, if the
        floor is still at ``below`` or lower; claims that moved it up while the look
        waited or ran passed rows between that were written after them, so those
        stay unproven until the next look. Its time says whether the floor stays on
        and when the next look is due.
        """
        with self._lock:
            floor = self._floors.get(filters)
            if floor is None:
                return
            floor.last_full = time.monotonic()
            floor.full_ms = took_ms
            floor.look_from = None
            if found is None:
                floor.covered = None
                if floor.key is None or _bound(floor.key) <= below:
                    floor.unproven = False
                    floor.covered = below
                    floor.covered_until = floor.last_full + 2 * max(
                        LATE_LOOK_POLL_S, took_ms / 1000
                    )
            elif floor.key is None or found < floor.key:
                floor.lower_to(found)

    def lower(self, using: str, key: Key, queue: str, job_type: str) -> None:
        """A job of ``queue`` and ``job_type`` at ``key`` is waiting again, written back
        by this process (a hand-back that keeps its place): every floor on ``using``
        whose claims could take it and that is above it goes down to it, and the next
        claim with those filters is due at once (:meth:`recheck_ms` says 0)."""
        with self._lock:
            for filters, floor in self._floors.items():
                if not (isinstance(filters, tuple) and len(filters) == 4):
                    continue
                alias, queues, excluded_queues, excluded_types = filters
                if (
                    alias != using
                    or (queues and queue not in queues)
                    or queue in excluded_queues
                    or job_type in excluded_types
                    or floor.key is None
                    or key >= floor.key
                ):
                    continue
                floor.lower_to(key)

    def settle(
        self,
        filters: Hashable,
        *,
        started: Key | None,
        first: Key | None,
        took_ms: float,
        short: bool = False,
    ) -> None:
        """Record a claim: where it started, the key of its first row, its time (ms).

        ``started`` None: it scanned from the start, so its time says whether dead
        entries slow the claim (floor on) or not (off), and how soon the next look
        below runs. ``first`` None: it claimed nothing, and the floor stays where it
        was (still no live row below it). ``short``: it took fewer jobs than it
        asked for; above a floor that leaves the rows below unproven
        (:meth:`recheck_ms`). A claim that started above the floor as it is now (a
        look lowered it meanwhile) proves nothing about the rows between: the floor
        stays.
        """
        with self._lock:
            floor = self._floors.get(filters)
            if floor is None:
                floor = self._floors[filters] = _Floor()
                while len(self._floors) > MAX_FILTER_SETS:
                    self._floors.popitem(last=False)
            else:
                self._floors.move_to_end(filters)
            now = time.monotonic()
            if isinstance(filters, tuple) and filters:
                self._last[filters[0]] = filters
            if started is None:
                floor.last_full = now
                floor.full_ms = took_ms
                floor.unproven = floor.lowered = False
                floor.covered = None
            else:
                if floor.key is not None and started > floor.key:
                    return  # a look lowered the floor below where this claim started
                floor.lowered = False
                if (
                    short
                    and floor.covered is not None
                    and started <= floor.covered
                    and now < floor.covered_until
                ):
                    floor.covered = None  # the look before it saw below where it started
                elif short:
                    floor.unproven = True
                    floor.covered = None
            if first is not None:
                floor.key = first

    def recheck_ms(self, using: str) -> int | None:
        """Return ms until a look has been below the floor that the last claim on
        ``using`` started at, if it came back short (0: the next claim may find rows
        a look found there); None: the last claim looked from the start, or was not
        short.

        A worker that found nothing sleeps no longer than this (a job written below
        the floor would otherwise wait out its whole idle sleep), and a ``--burst``
        run does not end on a claim that did not look from the start. Only the last
        claim counts: a worker whose filters changed since (a job type's limit
        reached or freed) claims with the new ones, whose answer is the one to trust.
        """
        now = time.monotonic()
        with self._lock:
            last = self._last.get(using)
            floor = self._floors.get(last) if last is not None else None
            if floor is None or not floor.unproven:
                return None
            soonest = 0.0 if floor.lowered else self._due_in(floor, now)
        return math.ceil(soonest * 1000) if soonest > 0 else 0

    @staticmethod
    def _due_in(floor: _Floor, now: float) -> float:
        """Seconds until a claim with ``floor``'s filters should run again: the end of
        a look under way (about the last one's time; past it, every
        :data:`LATE_LOOK_POLL_S` or the last look's time, whichever is longer, until
        the look is given up on), else the next look's due time (0: the next claim
        sends it)."""
        if floor.look_from is not None and floor.in_flight(now):
            back = floor.look_from + floor.full_ms / 1000 - now
            if back > 0:
                return back
            given_up = floor.look_from + LOOK_EVERY_S + floor.full_ms / 1000 - now
            return max(0.001, min(given_up, max(LATE_LOOK_POLL_S, floor.full_ms / 1000)))
        return max(0.0, floor.last_full + floor.gap_s() - now)

    def looked_from_start(self, filters: Hashable) -> None:
        """Record a claim with ``filters`` that proved every row it could take without
        :func:`~django_jobqueue.storage_sql.claim_rows`: the limits' claim (its own
        statements, no floor), or a claim whose every queue is paused (no statement).
        The rows below its floor are proven (:meth:`recheck_ms`)."""
        with self._lock:
            if isinstance(filters, tuple) and filters:
                self._last[filters[0]] = filters
            floor = self._floors.get(filters)
            if floor is not None:
                floor.unproven = floor.lowered = False
                floor.covered = None

    def clear(self) -> None:
        """Forget every floor: the next claims scan from the start."""
        with self._lock:
            self._floors.clear()
            self._last.clear()

    def after_fork(self) -> None:
        """In a forked child: no floor (its looks were the parent's), a new lock."""
        self._lock = threading.Lock()
        self._floors = OrderedDict()
        self._last = {}


class Looker:
    """The process's one thread that looks below claim floors, on its own connection.

    A look is a callable that runs one read and reports to :data:`floors`
    (:func:`django_jobqueue.storage_sql.claim_rows` makes them). At most one look per
    filter set waits; a newer one replaces it. The thread starts with the first look
    and ends after :data:`LOOKER_IDLE_S` with none; it closes its database
    connections after each look, so it holds none between looks (a dropped test
    database, a pooler's limits).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: OrderedDict[Hashable, Callable[[], None]] = OrderedDict()
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, filters: Hashable, look: Callable[[], None]) -> bool:
        """Run ``look`` in the looker thread, soon; return False if it will not run: no
        thread could start (the process's limits reached, logged), and the caller
        abandons the look (:meth:`ClaimFloors.abandon`) for the next claim to send.
        The next look tries to start the thread again."""
        with self._cond:
            if self._thread is None:
                thread = threading.Thread(
                    target=self._run, name="jobqueue-claim-looker", daemon=True
                )
                try:
                    thread.start()
                except RuntimeError:  # "can't start new thread"
                    logger.warning(
                        "could not start the thread that looks below claim floors; "
                        "the next look tries again",
                        exc_info=True,
                    )
                    return False
                self._thread = thread
            self._pending[filters] = look
            self._cond.notify()
            return True

    def wait(self, timeout_s: float) -> bool:
        """Wait until no look is waiting or running (at most ``timeout_s`` s); return
        whether none is."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
            return True

    def after_fork(self) -> None:
        """In a forked child (``runworkers --processes``): the parent's thread did not
        survive the fork, nor its looks; the child's first look starts its own."""
        self._cond = threading.Condition()
        self._pending = OrderedDict()
        self._busy = False
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                idle_until = time.monotonic() + LOOKER_IDLE_S
                while not self._pending:
                    left = idle_until - time.monotonic()
                    if left <= 0:
                        self._thread = None
                        return
                    self._cond.wait(left)
                _filters, look = self._pending.popitem(last=False)
                self._busy = True
            try:
                look()
            except Exception:  # noqa: BLE001 - the look reports its own failure
                logger.warning("looking below a claim floor failed", exc_info=True)
            finally:
                connections.close_all()  # this thread's connections only
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


#: The process's floors, used by :func:`django_jobqueue.storage_sql.claim_rows`.
floors = ClaimFloors()
#: The process's looker thread, fed by :func:`django_jobqueue.storage_sql.claim_rows`.
looker = Looker()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=floors.after_fork)
    os.register_at_fork(after_in_child=looker.after_fork)

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
floor is used only while claims are slow (the last claim from the start took
:data:`SLOW_CLAIM_MS` or more: the dead entries are there), and only between claims
from the start: the next one runs :data:`FULL_CLAIM_GAP` times its own duration
after it, and at most :data:`FULL_CLAIM_EVERY_S` later (one claim of the process at a
time: the others keep the floor until it settles). A job written below the floor
waits at most that long, and the claim spends about a tenth of its time walking the
garbage, however much there is. A claim with a floor keeps the claim's order above
it. A claim above the floor that came back short proves nothing below it: the
caller asks :meth:`ClaimFloors.recheck_ms` how long until a claim from the start
would look there, and sleeps no longer (only the last claim's filters of an alias
count). A claim that proved its rows without a floor (the limits' claim, a claim of
paused queues only) says so with :meth:`ClaimFloors.looked_from_start`.

One :class:`ClaimFloors` per process (:data:`floors`); each set of claim filters
(alias, queues, excluded job types and queues) has its own floor, since a claim
that left rows out by a filter proved nothing about them.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

__all__ = [
    "FLOOR_LAG_S",
    "FULL_CLAIM_EVERY_S",
    "FULL_CLAIM_GAP",
    "SLOW_CLAIM_MS",
    "ClaimFloors",
    "Key",
    "filter_set",
    "floors",
]

#: A claim from the start of the index that takes this long (ms) or longer turns
#: the floor on for its filters: above a claim's usual 1 to 3 ms, far below the
#: hundreds of ms of a scan over a few hundred thousand dead entries.
SLOW_CLAIM_MS = 5.0
#: While the floor is on, the next claim from the start runs this many times the
#: last one's duration after it: the share of the claim's time spent walking dead
#: entries stays near ``1 / FULL_CLAIM_GAP``.
FULL_CLAIM_GAP = 10.0
#: ... and at the latest this long (s) after it: the longest a job written below
#: the floor waits for a claim that sees it.
FULL_CLAIM_EVERY_S = 1.0
#: How far below its floor's ``run_at`` a claim with a floor starts (s): a job whose
#: producer took its ``run_at`` before a claim ran but committed after it is written
#: just below that claim's first row. Within this margin the next claim sees it;
#: further below, it waits for the claim from the start. The margin costs each claim
#: the dead entries of this many seconds of claims, not of all of them.
FLOOR_LAG_S = 0.1
#: Filter sets remembered per process (least recently used dropped first).
MAX_FILTER_SETS = 64

LAG = timedelta(seconds=FLOOR_LAG_S)

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


@dataclass
class _Floor:
    key: Key | None = None
    #: The last claim from the start: when (monotonic s), how long it took (ms).
    last_full: float = 0.0
    full_ms: float = 0.0
    #: A claim above the floor came back short since the last claim from the start.
    unproven: bool = False
    #: When (monotonic s) :meth:`ClaimFloors.start` sent a claim from the start that
    #: has not settled yet; None: none in flight.
    full_from: float | None = None

    def gap_s(self) -> float:
        """Seconds from the last claim from the start to the next one."""
        return min(FULL_CLAIM_EVERY_S, FULL_CLAIM_GAP * self.full_ms / 1000)

    def on(self) -> bool:
        """Whether claims start at the floor: slow claims from the start, and a key."""
        return self.key is not None and self.full_ms >= SLOW_CLAIM_MS

    def in_flight(self, now: float) -> bool:
        """Whether a claim from the start is under way (sent less than
        :data:`FULL_CLAIM_EVERY_S` ago: one that failed is not waited for longer)."""
        return self.full_from is not None and now - self.full_from < FULL_CLAIM_EVERY_S


class ClaimFloors:
    """Floors of the claims of one process, per filter set; safe across threads."""

    def __init__(self) -> None:
        self._floors: OrderedDict[Hashable, _Floor] = OrderedDict()
        #: The filter set of the last claim per alias (a filter set's first item).
        self._last: dict[Any, Hashable] = {}
        self._lock = threading.Lock()

    def start(self, filters: Hashable) -> Key | None:
        """Return the key the next claim with ``filters`` may start at; None: the start.

        The key is the floor's priority, its ``run_at`` less :data:`FLOOR_LAG_S`, and
        id 0: the claim's first row, less a margin for jobs committed late. Once the
        gap since the last claim from the start has passed, one claim of the process
        looks from the start; the claims sent while it is under way keep the floor, so
        claimers of one process (the gateway's claim threads) walk the garbage once
        a gap, not each at once. Pass the claim on to :meth:`settle`, or to
        :meth:`abandon` if it failed."""
        with self._lock:
            floor = self._floors.get(filters)
            if floor is None or not floor.on() or floor.key is None:
                return None
            now = time.monotonic()
            if now - floor.last_full >= floor.gap_s() and not floor.in_flight(now):
                floor.full_from = now  # this claim looks from the start
                return None
            priority, run_at, _id = floor.key
            return (priority, run_at - LAG, 0)

    def abandon(self, filters: Hashable) -> None:
        """A claim :meth:`start` sent from the start failed: the next one looks from
        the start in its place."""
        with self._lock:
            floor = self._floors.get(filters)
            if floor is not None:
                floor.full_from = None

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
        entries slow the claim (floor on) or not (off), and how soon the next claim
        from the start runs. ``first`` None: it claimed nothing, and the floor stays
        where it was (still no live row below it). ``short``: it took fewer jobs than
        it asked for; above a floor that leaves the rows below unproven
        (:meth:`recheck_ms`).
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
                floor.unproven = False
                floor.full_from = None
            elif short:
                floor.unproven = True
            if first is not None:
                floor.key = first

    def recheck_ms(self, using: str) -> int | None:
        """Return ms until a claim from the start looks below the floor that the last
        claim on ``using`` started at, if it came back short (0: the next claim does);
        None: the last claim looked from the start, or was not short.

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
            soonest = self._due_in(floor, now)
        return math.ceil(soonest * 1000) if soonest > 0 else 0

    @staticmethod
    def _due_in(floor: _Floor, now: float) -> float:
        """Seconds until a claim with ``floor``'s filters would look from the start;
        while one that does is under way, about its time (it proves the rows)."""
        due_in = floor.last_full + floor.gap_s() - now
        if due_in <= 0 and floor.in_flight(now):
            return max(floor.full_ms / 1000, 0.001)
        return max(0.0, due_in)

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
                floor.unproven = False

    def clear(self) -> None:
        """Forget every floor: the next claims scan from the start."""
        with self._lock:
            self._floors.clear()
            self._last.clear()


#: The process's floors, used by :func:`django_jobqueue.storage_sql.claim_rows`.
floors = ClaimFloors()

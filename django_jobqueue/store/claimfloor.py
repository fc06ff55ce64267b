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
floor is used only while claims are slow (a claim from the start took
:data:`SLOW_CLAIM_MS` or more: the dead entries are there), and a claim from the
start still runs every :data:`FULL_CLAIM_EVERY_S` seconds: such a job waits at most
that long, and the first claim from the start that is fast again turns the floor
off. A claim with a floor keeps the claim's order above it.

One :class:`ClaimFloors` per process (:data:`floors`); each set of claim filters
(alias, queues, excluded job types and queues) has its own floor, since a claim
that left rows out by a filter proved nothing about them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["FLOOR_LAG_S", "FULL_CLAIM_EVERY_S", "SLOW_CLAIM_MS", "ClaimFloors", "Key", "floors"]

#: A claim from the start of the index that takes this long (ms) or longer turns
#: the floor on for its filters: far above a claim's usual 1 ms, far below the
#: hundreds of ms of a scan over a few hundred thousand dead entries.
SLOW_CLAIM_MS = 25.0
#: While the floor is on, a claim from the start runs at least this often (s): the
#: longest a job written below the floor waits for a claim that sees it.
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


@dataclass
class _Floor:
    key: Key | None = None
    on: bool = False
    last_full: float = 0.0
    #: The next claim scans from the start, however recent the last such claim.
    full_due: bool = False


class ClaimFloors:
    """Floors of the claims of one process, per filter set; safe across threads."""

    def __init__(self) -> None:
        self._floors: OrderedDict[Hashable, _Floor] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, filters: Hashable) -> Key | None:
        """Return the key the next claim with ``filters`` may start at; None: the start.

        The key is the floor's priority, its ``run_at`` less :data:`FLOOR_LAG_S`, and
        id 0: the claim's first row, less a margin for jobs committed late."""
        with self._lock:
            floor = self._floors.get(filters)
            if floor is None or not floor.on or floor.key is None or floor.full_due:
                return None
            if time.monotonic() - floor.last_full >= FULL_CLAIM_EVERY_S:
                return None
            priority, run_at, _id = floor.key
            return (priority, run_at - LAG, 0)

    def settle(
        self, filters: Hashable, *, started: Key | None, first: Key | None, took_ms: float
    ) -> None:
        """Record a claim: where it started, the key of its first row, its time (ms).

        ``started`` None: it scanned from the start, so its time says whether dead
        entries slow the claim (floor on) or not (off). ``first`` None: it claimed
        nothing, and the floor stays where it was (still no live row below it).
        """
        with self._lock:
            floor = self._floors.get(filters)
            if floor is None:
                floor = self._floors[filters] = _Floor()
                while len(self._floors) > MAX_FILTER_SETS:
                    self._floors.popitem(last=False)
            else:
                self._floors.move_to_end(filters)
            if started is None:
                floor.last_full = time.monotonic()
                floor.full_due = False
                floor.on = took_ms >= SLOW_CLAIM_MS
            if first is not None:
                floor.key = first

    def expire(self, filters: Hashable) -> None:
        """Make the next claim with ``filters`` scan from the start (it keeps its key)."""
        with self._lock:
            floor = self._floors.get(filters)
            if floor is not None:
                floor.full_due = True

    def clear(self) -> None:
        """Forget every floor: the next claims scan from the start."""
        with self._lock:
            self._floors.clear()

    def is_on(self, filters: Hashable) -> bool:
        """Whether claims with ``filters`` start at a floor now (for the console and tests)."""
        return self.start(filters) is not None


#: The process's floors, used by :func:`django_jobqueue.storage_sql.claim_rows`.
floors = ClaimFloors()

"""The claim under flow-control limits (docs/limits.md "How a claim enforces the limits").

When any limit is active (:func:`django_jobqueue.store.limits.active`), a claim is one
write transaction on every database; its statements are those of
:mod:`django_jobqueue.storage_limits_sql`, sent there in flights (on PostgreSQL a
flight is one round trip). This module decides what the claim takes:

1. **Global room.** When every limit the claim may meet is a global concurrency
   (PostgreSQL, SQLite), the claim is one flight, its own transaction: the limits'
   rows locked, their ``processing`` jobs counted, and the plain claim's own
   statement, which leaves out the jobs of a limit without room for the whole
   claim (by a count of its own, after the locks). On PostgreSQL that is three
   statements in one round trip, in the pipeline's implicit transaction. When a
   count shows a limit without that room, the rest of the claim goes on as below.
2. **Candidates.** Otherwise the global limits' rows are locked and every target
   counted (per key for a partitioned one: a hint, as those keys are not locked
   yet); then the due jobs of the claimer's queues, in claim order (priority,
   run_at, id), ``FOR UPDATE SKIP LOCKED`` (SQLite: its write transaction), leaving
   out the targets and keys at their limit (on PostgreSQL without a ``fair``
   target, by counts in that statement itself, in the locks' flight). Each
   candidate has its (target, key) pairs: one per limit over it (its job type's,
   its queue's).
3. **Locks and counts.** The :class:`~django_jobqueue.models.LimitState` row of every
   pair the candidates meet is locked, made if missing, in sorted order, and the
   ``processing`` jobs of those pairs counted again, in one flight. Global rows are
   locked before keyed ones, each group sorted: one lock order, and no claim waits
   on a job row (SKIP LOCKED), so there is no deadlock. No counter is kept: a job
   that ends, is handed back or is reaped leaves ``processing``, and its slot is
   free, once, with its lease.
4. **Accept.** In claim order, a candidate is taken while every pair of it has a
   free slot (``concurrency - in flight``) and a token (``rate``, a token bucket
   refilled by the database clock); jobs under no limit are always taken. A round
   whose candidates were refused reads a second one without them.
5. **Claim.** One flight: the buckets' new levels, one ``UPDATE`` of the accepted
   ids, COMMIT.

A throttled claim records in this process when its rate allows the next start
(:func:`throttled_ms`), so an idle worker sleeps until then rather than polling.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from django.db import DatabaseError, connections

from . import storage_limits_sql as sql
from . import storage_limits_update as update
from . import storage_sql
from .core import prepared, reconnect
from .core.limitspec import Limit
from .models import Job
from .storage_limits_sql import Pair, Target, key_sql
from .store import flights as flight
from .store.flights import Sql
from .store.limits import LimitsView

__all__ = [
    "applies",
    "claim_limited",
    "clear_throttled",
    "in_flight",
    "key_sql",
    "saturated",
    "throttled_ms",
]

#: Most candidates one claim locks beyond the jobs it wants, when some may be refused
#: (a key near its limit, a rate).
MAX_EXTRA_CANDIDATES = 100

logger = logging.getLogger(__name__)

T = TypeVar("T")

_hints_lock = threading.Lock()
#: alias -> monotonic time before which no rate-limited job may start.
_throttled: dict[str, float] = {}
#: alias -> targets this process's last claim found at their concurrency (a key or
#: the whole target): a job of theirs that ends wakes the idle workers of its queue.
_saturated: dict[str, frozenset[str]] = {}


def throttled_ms(using: str) -> int | None:
    """Return in how many ms a rate-limited job of ``using`` may start, per this
    process's last claim that was held back by a rate; None: no such claim is
    pending."""
    with _hints_lock:
        until = _throttled.get(using)
    if until is None:
        return None
    left = until - time.monotonic()
    if left <= 0:
        with _hints_lock:
            _throttled.pop(using, None)
        return None
    return max(1, int(left * 1000))


def clear_throttled() -> None:
    """Forget every note of a throttled claim (tests)."""
    with _hints_lock:
        _throttled.clear()
        _saturated.clear()


def in_flight(using: str, target: str, limit: Limit, key: str) -> int:
    """Count the ``processing`` jobs of ``target`` (``type:x``, ``queue:y``) under
    ``limit``: all of them, or those of ``key`` when it is partitioned (one read)."""
    kind, _sep, name = target.partition(":")
    column = "job_type" if kind == "type" else "queue"
    counts = sql.count(using, [Target(target, column, name, limit)], {target: [key]})
    return sum(counts.values()) if not limit.partitioned else counts.get((target, key), 0)


def _note_saturated(using: str, pairs: Collection[Pair]) -> None:
    names = frozenset(name for name, _key in pairs)
    with _hints_lock:
        _saturated[using] = names


def saturated(using: str, job_type: str, queue: str) -> bool:
    """Whether this process's last limited claim on ``using`` found a limit over jobs
    of ``job_type`` in ``queue`` at its concurrency: the end of such a job frees a
    slot that idle workers wait for (:func:`django_jobqueue.storage.complete` and
    the other outcomes then wake them). Reads no table."""
    names = _saturated.get(using, frozenset())
    return f"type:{job_type}" in names or f"queue:{queue}" in names


def _targets(
    view: LimitsView, queues: Sequence[str] | None, exclude_types: Collection[str]
) -> list[Target]:
    found = [
        Target(f"type:{name}", "job_type", name, limit)
        for name, limit in sorted(view.types.items())
        if name not in exclude_types
    ]
    found += [
        Target(f"queue:{name}", "queue", name, limit)
        for name, limit in sorted(view.queues.items())
        if not queues or name in queues
    ]
    return found


def applies(view: LimitsView, queues: Sequence[str] | None, exclude_types: Collection[str]) -> bool:
    """Whether a claim of ``queues`` (None: all) without ``exclude_types`` may meet a
    job under one of ``view``'s limits (then it takes :func:`claim_limited`)."""
    return bool(view) and bool(_targets(view, queues, exclude_types))


def claim_limited(
    using: str,
    *,
    view: LimitsView,
    owner: str,
    token: str,
    limit: int,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    exclude_queues: Sequence[str],
    lease: timedelta,
    started: bool,
) -> list[Job]:
    """Claim up to ``limit`` due jobs within every active limit; see the module docstring.

    Arguments as :func:`django_jobqueue.storage.claim` takes them (``lease`` a
    timedelta, ``token`` the claim's new lease token), ``view`` the limits in force.
    Returns the claimed jobs in claim order. Call inside
    :func:`~django_jobqueue.store.locks.retry_when_locked`: it opens its own write
    transaction (:func:`~django_jobqueue.store.flights.transaction`), or two, each
    by :func:`_transaction`.
    """
    claim: dict[str, Any] = {
        "owner": owner,
        "token": token,
        "limit": limit,
        "queues": queues,
        "exclude_types": exclude_types,
        "exclude_queues": exclude_queues,
        "lease": lease,
        "started": started,
    }
    targets = _targets(view, queues, exclude_types)
    if connections[using].vendor != "mysql" and all(
        not t.limit.partitioned and t.limit.rate is None for t in targets
    ):
        # Every limit is a global concurrency: one flight, its own transaction, takes
        # the whole claim when each target has room for it (by its count, taken
        # after the locks). A target without that room had its jobs left out: the
        # claim takes the rest as below, in a transaction of its own.
        pairs = sorted((t.name, "") for t in targets)
        claimed, counts = _transaction(
            using, lambda flights: sql.guarded_claim(flights, pairs, targets, claim=claim)
        )
        if len(claimed) >= limit or not _tight(targets, counts, limit):
            _note_saturated(using, _full(targets, counts) if len(claimed) < limit else ())
            return claimed
        rest = {**claim, "limit": limit - len(claimed)}
        try:
            more = _transaction(using, lambda flights: _claim(flights, targets, rest))
        except DatabaseError as exc:
            _keep_committed(using, claimed, exc)
            return claimed
        return storage_sql.order(claimed + more) if claimed else more
    return _transaction(using, lambda flights: _claim(flights, targets, claim))


def _transaction(using: str, body: Callable[[flight.Flights], T]) -> T:
    """Run ``body`` in a write transaction of flights on ``using``; return its result.

    A transaction whose prepared statement PostgreSQL refused because a migration on
    another session changed a returned column's type (inside a pipelined transaction
    the cursor cannot repeat it) is rolled back whole, then run once more with the
    session's prepared statements forgotten. Any other error propagates.
    """
    try:
        with flight.transaction(using) as flights:
            return body(flights)
    except DatabaseError as exc:
        if not prepared.forget_if_plan_changed(connections[using], exc):
            raise
    with flight.transaction(using) as flights:
        return body(flights)


def _keep_committed(using: str, claimed: list[Job], exc: DatabaseError) -> None:
    """Let a claim that committed ``claimed`` return them although a later statement
    of it failed with ``exc``; re-raise ``exc`` when ``claimed`` is empty or ``exc``
    is a disconnect (the caller's repeat finds them by their lease token,
    :func:`django_jobqueue.storage_claim.claimed_under`). Raised otherwise (a lock
    timeout, "database is locked"), they would stay leased to no one until their
    lease expired, holding their limits' slots."""
    if not claimed or reconnect.is_disconnect(exc, using):
        raise exc
    logger.warning(
        "limited claim on %s keeps the %d jobs it committed; the rest failed: %s",
        using,
        len(claimed),
        exc,
    )


def _tight(targets: Sequence[Target], counts: dict[Pair, int], limit: int) -> bool:
    """Whether a limit may refuse part of a claim of ``limit`` jobs (with
    ``counts``, the in-flight counts of the global limits, taken under their locks)."""
    return any(
        t.limit.partitioned
        or t.limit.rate is not None
        or (t.limit.concurrency or 0) - counts.get((t.name, ""), 0) < limit
        for t in targets
    )


def _full(targets: Sequence[Target], counts: dict[Pair, int]) -> set[Pair]:
    by_name = {target.name: target for target in targets}
    return {
        pair
        for pair, count in counts.items()
        if (concurrency := by_name[pair[0]].limit.concurrency) is not None and count >= concurrency
    }


def _claim(
    flights: flight.Flights, targets: list[Target], claim: dict[str, Any], *, again: bool = True
) -> list[Job]:
    using = flights.using
    limit: int = claim["limit"]
    by_name = {target.name: target for target in targets}
    # Global limits first: their rows are known before any candidate, so they are
    # locked, then counted once, exactly. Every claim locks global rows before keyed
    # ones, each group in sorted order: one lock order, no deadlock. Keyed counts
    # are a hint until their rows are locked: they keep the keys at their limit (and
    # their backlog) out of the candidates.
    global_pairs = sorted((t.name, "") for t in targets if not t.limit.partitioned)
    rated = any(t.limit.rate is not None for t in targets)
    want = min(limit * 2, limit + MAX_EXTRA_CANDIDATES)
    # PostgreSQL without a fair target: the first candidates ride in the locks'
    # flight, the targets and keys at their concurrency left out by counts in their
    # own statement (run after the locks); the clock too, for a rate.
    merged = connections[using].vendor == "postgresql" and not any(
        t.limit.fair and t.limit.partitioned for t in targets
    )
    then: list[Sql] = []
    ticking = sql.clock_statement(using) if rated else None
    if merged:
        then.append(
            sql.candidates_statement(
                using,
                targets,
                want,
                claim["queues"],
                claim["exclude_types"],
                claim["exclude_queues"],
            )
        )
        then += [ticking] if ticking is not None else []
    # Merged, the candidates' own counts leave out the keys at their limit, and the
    # keys met are counted under their locks below: a count of every key here would
    # only repeat them. A short claim counts them in its last flight instead, for
    # the wake-ups (:func:`saturated`).
    keyed_targets = [t for t in targets if t.limit.partitioned]
    if (
        connections[using].vendor == "sqlite"
        and not rated
        and not global_pairs
        and len(keyed_targets) == 1
        and not keyed_targets[0].limit.fair
    ):
        # SQLite's write transaction is the lock: the due candidates, their keys'
        # counts and the update are one statement.
        return _claim_keyed_sqlite(flights, keyed_targets[0], targets, claim, want)
    counted = [t for t in targets if not t.limit.partitioned] if merged else targets
    states, counts, answers = sql.lock_and_count(
        flights, global_pairs, counted, {}, states=rated, then=then
    )
    full = _full(targets, counts)
    if not merged and not _tight(targets, counts, limit):
        # Every limit here is global, a concurrency only, with room for the whole claim
        # (checked under its lock): every job the plain claim would take is allowed.
        # (MariaDB only: elsewhere the guarded claim of claim_limited took it.)
        kwargs = {name: value for name, value in claim.items() if name != "limit"}
        claimed = storage_sql.claim_rows(using, limit=limit, **kwargs)
        _note_saturated(using, full if len(claimed) < limit else ())
        return claimed
    first_rows = answers[0] if merged else None
    if merged and not rated and not global_pairs and len(keyed_targets) == 1:
        return _claim_keyed(
            flights, keyed_targets[0], first_rows or [], claim, want=want, again=again
        )
    now = None
    if rated:
        now = sql.clock(using, answers[1] if merged and ticking is not None else None)
    tokens: dict[Pair, float] = {}
    free: dict[Pair, int] = {}
    accepted: list[int] = []
    refused: set[Pair] = set()
    seen: list[int] = []

    def admit(pair: Pair) -> None:  # its free slots and tokens, once counted and locked
        limit_of = by_name[pair[0]].limit
        free[pair] = (limit_of.concurrency or 1 << 30) - counts.get(pair, 0)
        if limit_of.rate is not None and now is not None:
            level, refilled_at = states.get(pair, (None, None))
            bucket = float(limit_of.bucket)
            if level is None or refilled_at is None:
                tokens[pair] = bucket
            else:
                elapsed = max((now - refilled_at).total_seconds(), 0.0)
                tokens[pair] = min(bucket, level + elapsed * limit_of.rate.per_s)

    for pair in global_pairs:
        admit(pair)
    # Two rounds: a round whose candidates were refused (a key or type now at its
    # limit) reads the next ones without them, so the claim fills with other jobs.
    for round_ in range(2):
        if round_ == 0 and first_rows is not None:
            rows = first_rows
        else:
            rows = sql.candidates(
                flights,
                targets,
                want,
                claim["queues"],
                claim["exclude_types"],
                claim["exclude_queues"],
                frozenset(full),
                seen,
            )
        seen += [row[0] for row in rows]
        pairs_of: dict[int, list[Pair]] = {}
        for row in rows:
            pk, job_type, queue, keys = row[0], row[1], row[2], row[3:]
            pairs_of[pk] = [
                (target.name, (key or "") if target.limit.partitioned else "")
                for target, key in zip(targets, keys, strict=True)
                if (target.column == "job_type" and job_type == target.value)
                or (target.column == "queue" and queue == target.value)
            ]
        keyed = sorted({p for ps in pairs_of.values() for p in ps if p not in free})
        if keyed:
            grouped: dict[str, list[str]] = {}
            for name, key in keyed:
                grouped.setdefault(name, []).append(key)
            # The second round holds locks already: it takes only rows no other claim
            # holds (SKIP LOCKED), never waits, so the lock order cannot deadlock.
            got, recount, _rows = sql.lock_and_count(
                flights,
                keyed,
                [by_name[name] for name in grouped],
                grouped,
                skip_locked=round_ > 0,
                states=rated,
            )
            locked = [pair for pair in keyed if pair in got or round_ == 0]
            states.update(got)
            for pair in locked:
                # Counted under its lock: a pair with no row in the answer has none
                # in flight, whatever the hint said.
                counts[pair] = recount.get(pair, 0)
                admit(pair)
        refused_before = len(refused)
        for row in rows:
            if len(accepted) >= limit:
                break
            pairs = pairs_of[row[0]]
            blocked = [
                p for p in pairs if p not in free or free[p] <= 0 or tokens.get(p, 1.0) < 1.0
            ]
            if blocked:
                refused.update(p for p in blocked if p in free)
                continue
            for pair in pairs:
                free[pair] -= 1
                if pair in tokens:
                    tokens[pair] -= 1.0
            accepted.append(row[0])
        if len(accepted) >= limit or len(rows) < want or len(refused) == refused_before:
            break
        full |= {p for p in free if free[p] <= 0 or tokens.get(p, 1.0) < 1.0}
    statements = update.update_statements(
        using,
        accepted,
        claim["owner"],
        claim["token"],
        claim["lease"],
        claim["started"],
        tokens,
        now,
    )
    count_keys = merged and bool(keyed_targets) and len(accepted) < limit
    if count_keys:
        statements.append(sql.count_statement(using, keyed_targets, {}))
    answers = flights.run(statements, commit=True)
    if count_keys:
        full |= _full(targets, sql.counts_of(keyed_targets, answers.pop()))
    _note_waits(using, by_name, tokens, free, refused, full, accepted, limit)
    if not accepted:
        return []
    return storage_sql.claimed(using, answers[-1])


def _claim_keyed(
    flights: flight.Flights,
    target: Target,
    rows: Sequence[Sequence[Any]],
    claim: dict[str, Any],
    *,
    want: int,
    again: bool,
) -> list[Job]:
    """PostgreSQL, the claim's one limit a partitioned concurrency: lock the rows of
    the candidates' keys, then one statement takes the candidates the limit admits
    (:func:`~django_jobqueue.storage_limits_update.keyed_claim_statement`), committed
    in the same flight. ``rows`` are the candidates, ``want`` the most read.

    A claim that came back short although the candidates filled their read had some
    refused: a key reached its limit within it, and more due jobs may wait behind
    that key's backlog. When ``again`` and that flight committed (pipelined), the
    rest of the claim is once more a new transaction, whose candidates leave such
    keys out by their own counts (docs/limits.md "No head-of-line blocking").
    Otherwise a short claim counts the target's keys afterwards (a hint) for the
    wake-ups (:func:`saturated`)."""
    using = flights.using
    limit: int = claim["limit"]
    # A candidate row: id, job_type, queue, then its key under the target.
    column = 2 if target.column == "queue" else 1
    keyed = sorted({(target.name, row[3] or "") for row in rows if row[column] == target.value})
    if not rows:
        flights.run([], commit=True)
        claimed: list[Job] = []
    else:
        statements = [sql.lock_statement(using, keyed)] if keyed else []
        statements.append(
            update.keyed_claim_statement(
                using,
                target,
                claim,
                ids=[row[0] for row in rows],
                keys=[key for _name, key in keyed],
            )
        )
        claimed = storage_sql.claimed(using, flights.run(statements, commit=True)[-1])
    if again and flights.pipelined and len(claimed) < limit and len(rows) >= want:
        rest = {**claim, "limit": limit - len(claimed)}
        try:
            more = _transaction(using, lambda flights: _claim(flights, [target], rest, again=False))
        except DatabaseError as exc:
            _keep_committed(using, claimed, exc)
            return claimed
        return storage_sql.order(claimed + more) if claimed else more
    return _noted_keyed(using, target, claimed, limit)


def _claim_keyed_sqlite(
    flights: flight.Flights,
    target: Target,
    targets: list[Target],
    claim: dict[str, Any],
    want: int,
) -> list[Job]:
    """SQLite, the claim's one limit a partitioned concurrency: one statement takes the
    due candidates the limit admits (:func:`~django_jobqueue.storage_limits_update.
    keyed_claim_statement` over :func:`~django_jobqueue.storage_limits_sql.due_rows`);
    no ``LimitState`` row is needed (they hold a rate's tokens, and the write
    transaction is the lock). A short claim runs it once more in the same
    transaction: a key that reached its limit within the first, its backlog filling
    the candidates, is then in flight and left out, and the keys behind it are read.
    A claim still short counts the keys, for the wake-ups."""
    using = flights.using
    claimed: list[Job] = []
    for _round in range(2):
        rest = {**claim, "limit": claim["limit"] - len(claimed)}
        due = sql.due_rows(
            using, targets, want, rest["queues"], rest["exclude_types"], rest["exclude_queues"]
        )
        (rows,) = flights.run([update.keyed_claim_statement(using, target, rest, due=due)])
        claimed += storage_sql.claimed(using, rows)
        if len(claimed) >= claim["limit"] or not rows:
            break
    return _noted_keyed(using, target, storage_sql.order(claimed), claim["limit"])


def _noted_keyed(using: str, target: Target, claimed: list[Job], limit: int) -> list[Job]:
    """Record what a claim under ``target`` alone found; return its ``claimed`` jobs.

    A claim shorter than ``limit`` counts the target's keys (a hint): those at their
    concurrency wake the idle workers when a job of theirs ends (:func:`saturated`).
    A count that fails keeps the claimed jobs (:func:`_keep_committed`)."""
    full: set[Pair] = set()
    if len(claimed) < limit:
        try:
            full = _full([target], sql.count(using, [target], {}))
        except DatabaseError as exc:
            _keep_committed(using, claimed, exc)
    _note_saturated(using, full)
    if claimed:
        with _hints_lock:
            _throttled.pop(using, None)
    return claimed


def _note_waits(
    using: str,
    by_name: dict[str, Target],
    tokens: dict[Pair, float],
    free: dict[Pair, int],
    refused: set[Pair],
    full: set[Pair],
    accepted: list[int],
    limit: int,
) -> None:
    """Record what a short claim waits for: the slots of ``full`` and ``refused``
    targets, and the next token of a refused rate."""
    waits = [
        (1.0 - tokens[p]) / by_name[p[0]].limit.rate.per_s  # type: ignore[union-attr]
        for p in refused
        if p in tokens and tokens[p] < 1.0 and free[p] > 0
    ]
    # Only a claim that came back short leaves workers waiting for a slot.
    _note_saturated(using, [*full, *refused] if len(accepted) < limit else ())
    with _hints_lock:
        if waits:
            _throttled[using] = time.monotonic() + min(waits)
        elif accepted:
            _throttled.pop(using, None)

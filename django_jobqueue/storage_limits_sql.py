# ruff: noqa: S608 (every interpolated piece is a quoted identifier or %s placeholders)
"""The statements of the limits' claim (:mod:`django_jobqueue.storage_limits`), per vendor.

:mod:`django_jobqueue.storage_limits` decides what a limited claim takes; this module
holds its SQL, per vendor, and how it reaches the database (docs/limits.md "How a
claim enforces the limits"):

- **Flights.** Each step's statements go together in one flight of
  :mod:`django_jobqueue.store.flights` (one round trip on PostgreSQL), in the claim's
  write transaction (:func:`django_jobqueue.store.flights.transaction`).
- **Locks.** A (target, key) pair's :class:`~django_jobqueue.models.LimitState`
  row is its lock. PostgreSQL takes it with ``INSERT ... ON CONFLICT DO UPDATE ...
  WHERE false``, which makes a missing row and locks an existing one (PostgreSQL
  locks every conflicting row of that clause, updated or not) in one statement, in
  the order of the pairs given (sorted by the caller); MariaDB and SQLite read the
  rows ``FOR UPDATE`` (SQLite: its write transaction) and make the missing ones.
- **Counts.** The ``processing`` jobs of each pair, counted by a statement that
  runs after the lock's (PostgreSQL and MariaDB at READ COMMITTED then see every
  claim committed before the lock was granted): no counter is kept.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.utils import timezone

from . import storage_sql
from .core.limitspec import Limit
from .models import Job, JobStatus, LimitState, QueuePause
from .store.flights import Flights, Sql
from .store.limits import key_sql

__all__ = [
    "RUNNING",
    "Pair",
    "Target",
    "candidates",
    "candidates_statement",
    "clock",
    "clock_statement",
    "count",
    "count_statement",
    "counts_of",
    "due_rows",
    "guarded_claim",
    "guarded_claim_statement",
    "key_sql",
    "lock_and_count",
    "lock_statement",
]

Pair = tuple[str, str]


@dataclass(frozen=True)
class Target:
    """One active limit as a claim meets it."""

    #: ``type:<job type>`` or ``queue:<queue>``.
    name: str
    #: The job column it selects on: ``job_type`` or ``queue``.
    column: str
    #: That column's value.
    value: str
    #: The limit in force.
    limit: Limit


#: The running jobs a limit counts, ``processing`` as a literal: on PostgreSQL the
#: indexes of the running rows are partial (``jq_job_running_idx`` (queue, id),
#: ``jq_job_lease_idx``, ``WHERE status = 'processing'``), and a prepared statement's
#: generic plan matches one only to a literal; with ``status = $1`` it read the whole
#: table (docs/design.md#indexes).
RUNNING = f"status = '{JobStatus.PROCESSING.value}'"


def _in(values: Collection[Any]) -> str:
    return ", ".join(["%s"] * len(values))


def _now_sql(using: str) -> tuple[str, list[Any]]:
    vendor = connections[using].vendor
    if vendor == "postgresql":
        return "STATEMENT_TIMESTAMP()", []
    if vendor == "mysql":
        return "CURRENT_TIMESTAMP(6)", []
    return "%s", [storage_sql._sqlite_now(using)]


def clock_statement(using: str) -> Sql | None:
    """The statement that reads the database's clock now (None on SQLite: the host's);
    its rows go to :func:`clock`."""
    vendor = connections[using].vendor
    if vendor == "sqlite":
        return None
    return Sql("SELECT CLOCK_TIMESTAMP()" if vendor == "postgresql" else "SELECT SYSDATE(6)")


def clock(using: str, rows: Sequence[Sequence[Any]] | None = None) -> datetime:
    """The database's current time (aware UTC), read now (not the statement's start),
    or from ``rows``, the answer of :func:`clock_statement` in a flight."""
    statement = clock_statement(using)
    if statement is None:
        return timezone.now()
    if rows is None:
        with connections[using].cursor() as cursor:
            cursor.execute(statement.text)
            rows = cursor.fetchall()
    value = rows[0][0]
    if timezone.is_naive(value):  # MySQL: the session's UTC (checks E1xx)
        value = value.replace(tzinfo=UTC)
    return value


def count_statement(using: str, targets: Sequence[Target], keys: dict[str, list[str]]) -> Sql:
    """The statement that counts the ``processing`` jobs of ``targets``: per target,
    or per key for a partitioned one (only ``keys[target name]`` when given, else every
    key in flight). Its rows go to :func:`counts_of`."""
    conn = connections[using]
    table = conn.ops.quote_name(Job._meta.db_table)
    parts: list[str] = []
    params: list[Any] = []
    for index, target in enumerate(targets):
        where = f"{RUNNING} AND {target.column} = %s"
        if target.limit.partitioned:
            sql, key_params = key_sql(using, target.limit)
            only = keys.get(target.name)
            part_params = [*key_params, target.value]
            if only:
                where += f" AND {sql} IN ({_in(only)})"
                part_params += [*key_params, *only]
            parts.append(f"SELECT {index}, {sql}, COUNT(*) FROM {table} WHERE {where} GROUP BY 2")
            params += part_params
        else:
            parts.append(f"SELECT {index}, '', COUNT(*) FROM {table} WHERE {where}")
            params.append(target.value)
    return Sql(" UNION ALL ".join(parts), params, prepare=not keys)


def counts_of(targets: Sequence[Target], rows: Sequence[Sequence[Any]]) -> dict[Pair, int]:
    """The in-flight count of each (target, key) from :func:`count_statement`'s rows."""
    return {(targets[int(index)].name, key or ""): int(n) for index, key, n in rows}


def count(using: str, targets: Sequence[Target], keys: dict[str, list[str]]) -> dict[Pair, int]:
    """Count the ``processing`` jobs of ``targets`` now (one statement); see
    :func:`count_statement`."""
    if not targets:
        return {}
    flights = Flights(using, pipelined=False)
    (rows,) = flights.run([count_statement(using, targets, keys)])
    return counts_of(targets, rows)


def lock_statement(using: str, pairs: Sequence[Pair]) -> Sql:
    """PostgreSQL: make and lock the rows of ``pairs``, in their order (see the module
    docstring); no row comes back. Each row takes a value of the table's id sequence
    (a bigint) whether it is made or not."""
    table = connections[using].ops.quote_name(LimitState._meta.db_table)
    values = ", ".join(["(%s, %s, 0.0)"] * len(pairs))
    return Sql(
        f"INSERT INTO {table} AS s (target, limit_key, tokens) VALUES {values} "
        "ON CONFLICT (target, limit_key) DO UPDATE SET tokens = s.tokens WHERE false",
        [value for pair in pairs for value in pair],
        prepare=len(pairs) <= 2,
    )


def _states_sql(using: str, pairs: Sequence[Pair], *, lock: str = "") -> Sql:
    table = connections[using].ops.quote_name(LimitState._meta.db_table)
    match = " OR ".join(["(target = %s AND limit_key = %s)"] * len(pairs))
    return Sql(
        f"SELECT target, limit_key, tokens, refilled_at FROM {table} WHERE {match} "
        f"ORDER BY target, limit_key{lock}",
        [value for pair in pairs for value in pair],
    )


State = tuple[float | None, datetime | None]


def _states(using: str, rows: Sequence[Sequence[Any]]) -> dict[Pair, State]:
    conn = connections[using]
    col = LimitState._meta.get_field("refilled_at").get_col(LimitState._meta.db_table)
    converters = conn.ops.get_db_converters(col)
    found: dict[Pair, State] = {}
    for target, key, level, refilled_at in rows:
        when = refilled_at
        for converter in converters:
            when = converter(when, col, conn)
        found[(target, key)] = (None if when is None else float(level), when)
    return found


def lock_and_count(
    flights: Flights,
    pairs: Sequence[Pair],
    count_targets: Sequence[Target],
    keys: dict[str, list[str]],
    *,
    skip_locked: bool = False,
    states: bool = True,
    then: Sequence[Sql] = (),
) -> tuple[dict[Pair, State], dict[Pair, int], list[list[tuple[Any, ...]]]]:
    """Lock the state rows of the sorted ``pairs``, then count ``count_targets``.

    Returns (the state of each locked pair: tokens and refilled_at, both None for a
    new row, whose bucket is full; the counts of :func:`count_statement`; the rows
    of each of ``then``, statements run after the count). On PostgreSQL one flight:
    the lock (made if missing), the states when ``states``, the count, ``then``.
    ``skip_locked``: leave out, without waiting, the rows another transaction holds,
    and make none (a claim that holds locks already never waits, so the one lock
    order cannot deadlock); only the pairs in the answer are locked then. The count
    may cover pairs left out: the caller admits locked ones.
    """
    using = flights.using
    counting = [count_statement(using, count_targets, keys)] if count_targets else []
    locking: list[Sql] = []
    found: dict[Pair, State] = {}
    if pairs and connections[using].vendor == "postgresql":
        if skip_locked:
            locking = [_states_sql(using, pairs, lock=" FOR UPDATE SKIP LOCKED")]
        else:
            locking = [lock_statement(using, pairs)]
            locking += [_states_sql(using, pairs)] if states else []
            found = dict.fromkeys(pairs, (None, None))
    elif pairs:
        found = _lock_states(flights, pairs, skip_locked=skip_locked)
    answers = flights.run([*locking, *counting, *then])
    if locking and (skip_locked or states):
        found.update(_states(using, answers[len(locking) - 1]))
    counted = counts_of(count_targets, answers[len(locking)]) if counting else {}
    return found, counted, answers[len(locking) + len(counting) :]


def _lock_states(
    flights: Flights, pairs: Sequence[Pair], *, skip_locked: bool
) -> dict[Pair, State]:
    """MariaDB and SQLite: lock the rows of ``pairs`` (made if missing) in the
    database's order; ``skip_locked`` as :func:`lock_and_count`."""
    using = flights.using
    lock = " FOR UPDATE" if connections[using].vendor != "sqlite" else ""
    if lock and skip_locked:
        lock += " SKIP LOCKED"
    manager = LimitState.objects.using(using)
    found: dict[Pair, State] = {}
    for _round in range(3):
        missing = [pair for pair in pairs if pair not in found]
        if not missing:
            break
        (rows,) = flights.run([_states_sql(using, missing, lock=lock)])
        got = _states(using, rows)
        found.update(got)
        absent = [pair for pair in missing if pair not in got]
        if skip_locked:  # no insert: MariaDB's duplicate check would wait on a holder
            break
        if absent:
            # A new row's bucket is full: tokens None (see the accept step).
            manager.bulk_create(
                [LimitState(target=t, limit_key=k, tokens=0.0) for t, k in absent],
                ignore_conflicts=True,
            )
    return found


def guarded_claim(
    flights: Flights,
    pairs: Sequence[Pair],
    targets: Sequence[Target],
    *,
    claim: dict[str, Any],
) -> tuple[list[Job], dict[Pair, int]]:
    """One flight, its own transaction: lock the global ``pairs``, count ``targets``,
    claim; returns the claimed jobs and the counts.

    Every target is a global concurrency. The claim is the plain claim's statement
    (:func:`~django_jobqueue.storage_sql.claim_statement`, ``claim`` its keyword
    arguments) guarded per target: it takes none of a target's jobs unless the
    target has room for the whole claim (``claim["limit"]`` jobs) by a count of its
    own, after the locks; other jobs it takes as the plain claim does. The caller
    tells a target without that room from the counts returned. PostgreSQL and SQLite
    (whose write transaction is the lock).
    """
    using = flights.using
    conn = connections[using]
    text, params = guarded_claim_statement(using, targets, claim)
    locking = [lock_statement(using, pairs)] if conn.vendor == "postgresql" else []
    answers = flights.run(
        [*locking, count_statement(using, targets, {}), Sql(text, params, prepare=True)],
        commit=True,
    )
    return storage_sql.claimed(using, answers[-1]), counts_of(targets, answers[-2])


def guarded_claim_statement(
    using: str, targets: Sequence[Target], claim: dict[str, Any]
) -> tuple[str, list[Any]]:
    """The claim of :func:`guarded_claim`: SQL and parameters of the plain claim's
    statement, guarded per target by a count of its running jobs."""
    table = connections[using].ops.quote_name(Job._meta.db_table)
    guard = ""
    guard_params: list[Any] = []
    for target in targets:
        guard += (
            f" AND ({target.column} <> %s OR "
            f"(SELECT COUNT(*) FROM {table} WHERE {RUNNING} AND {target.column} = %s) <= %s)"
        )
        room = (target.limit.concurrency or 0) - claim["limit"]
        guard_params += [target.value, target.value, room]
    return storage_sql.claim_statement(using, guard=(guard, guard_params), **claim)


def _where(
    using: str,
    targets: Sequence[Target],
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    exclude_queues: Sequence[str],
    full: frozenset[Pair],
    *,
    counted: bool = False,
) -> tuple[str, list[Any]]:
    """The due filter of a limited claim: the claimer's queues and types, no paused
    queue, no target or key in ``full``; ``counted``: nor any at its concurrency by
    a count in the statement itself (PostgreSQL: an uncorrelated subquery, run once,
    and not locked by the statement's ``FOR UPDATE``)."""
    conn = connections[using]
    now, now_params = _now_sql(using)
    # TRUE written out: PostgreSQL's claim index is partial (WHERE waiting), and a
    # prepared plan matches that only to a literal (docs/design.md#indexes).
    where = f"waiting = TRUE AND run_at <= {now}"
    params: list[Any] = [*now_params]
    if queues:
        where += f" AND queue IN ({_in(queues)})"
        params += list(queues)
    if exclude_queues:
        where += f" AND queue NOT IN ({_in(exclude_queues)})"
        params += list(exclude_queues)
    paused = conn.ops.quote_name(QueuePause._meta.db_table)
    where += f" AND queue NOT IN (SELECT queue FROM {paused})"
    if exclude_types:
        where += f" AND job_type NOT IN ({_in(exclude_types)})"
        params += list(exclude_types)
    by_name = {target.name: target for target in targets}
    full_keys: dict[str, list[str]] = {}
    for name, key in sorted(full):
        if name in by_name:
            full_keys.setdefault(name, []).append(key)
    for name, keys in full_keys.items():
        target = by_name[name]
        if target.limit.partitioned:
            sql, key_params = key_sql(using, target.limit)
            where += f" AND NOT ({target.column} = %s AND {sql} IN ({_in(keys)}))"
            params += [target.value, *key_params, *keys]
        else:
            where += f" AND {target.column} <> %s"
            params.append(target.value)
    table = conn.ops.quote_name(Job._meta.db_table)
    for target in targets if counted else ():
        concurrency = target.limit.concurrency
        if concurrency is None:
            continue
        running = f"FROM {table} WHERE {RUNNING} AND {target.column} = %s"
        if target.limit.partitioned:
            sql, key_params = key_sql(using, target.limit)
            where += (
                f" AND NOT ({target.column} = %s AND {sql} IN (SELECT {sql} {running} "
                "GROUP BY 1 HAVING COUNT(*) >= %s))"
            )
            params += [target.value, *key_params, *key_params]
        else:
            where += f" AND NOT ({target.column} = %s AND (SELECT COUNT(*) {running}) >= %s)"
            params.append(target.value)
        params += [target.value, concurrency]
    return where, params


def _columns(using: str, targets: Sequence[Target]) -> tuple[str, list[Any]]:
    select: list[str] = []
    select_params: list[Any] = []
    for target in targets:
        if target.limit.partitioned:
            sql, key_params = key_sql(using, target.limit)
            select.append(sql)
            select_params += key_params
        else:
            select.append("''")
    return f"id, job_type, queue{''.join(', ' + s for s in select)}", select_params


def candidates_statement(
    using: str,
    targets: Sequence[Target],
    want: int,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    exclude_queues: Sequence[str],
) -> Sql:
    """PostgreSQL: the statement of :func:`candidates` when no target is ``fair``, for
    a flight after the global limits' locks (:func:`lock_and_count`'s ``then``): the
    targets and keys at their concurrency are left out by counts in the statement
    itself, which runs after the locks."""
    columns, select_params = _columns(using, targets)
    text, params = _first_due(using, columns, targets, want, queues, exclude_types, exclude_queues)
    return Sql(f"{text} FOR UPDATE SKIP LOCKED", [*select_params, *params], prepare=True)


def due_rows(
    using: str,
    targets: Sequence[Target],
    want: int,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    exclude_queues: Sequence[str],
) -> tuple[str, list[Any]]:
    """SQLite: a ``FROM`` item of the claim's first ``want`` due jobs, whole rows, in
    claim order, the targets and keys at their concurrency left out by counts in the
    statement itself (no row lock: the write transaction is the lock)."""
    text, params = _first_due(using, "*", targets, want, queues, exclude_types, exclude_queues)
    return f"({text}) AS d", params


def _first_due(  # noqa: PLR0913 (the claim's filters, as its callers take them)
    using: str,
    columns: str,
    targets: Sequence[Target],
    want: int,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    exclude_queues: Sequence[str],
) -> tuple[str, list[Any]]:
    """``SELECT columns`` of the first ``want`` due jobs in claim order, the targets
    and keys at their concurrency left out by counts in the statement itself."""
    table = connections[using].ops.quote_name(Job._meta.db_table)
    where, params = _where(
        using, targets, queues, exclude_types, exclude_queues, frozenset(), counted=True
    )
    return (
        f"SELECT {columns} FROM {table} WHERE {where} ORDER BY priority, run_at, id LIMIT %s",
        [*params, want],
    )


def candidates(
    flights: Flights,
    targets: Sequence[Target],
    want: int,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    exclude_queues: Sequence[str],
    full: frozenset[Pair],
    seen: Sequence[int] = (),
) -> list[tuple[Any, ...]]:
    """Lock and return up to ``want`` due candidates: (id, job_type, queue, key...),
    none of the ids ``seen`` (an earlier round's, locked by this transaction).

    The jobs of a ``fair`` target come first, one per key per round (the oldest of
    each key, then the second of each, ...: docs/limits.md "Fairness"); the others in
    claim order.
    """
    using = flights.using
    conn = connections[using]
    table = conn.ops.quote_name(Job._meta.db_table)
    columns, select_params = _columns(using, targets)
    lock = " FOR UPDATE SKIP LOCKED" if conn.vendor != "sqlite" else ""
    where, params = _where(using, targets, queues, exclude_types, exclude_queues, full)
    if seen:
        where += f" AND id NOT IN ({_in(seen)})"
        params = [*params, *seen]
    rows: list[tuple[Any, ...]] = []
    fair = [t for t in targets if t.limit.fair and t.limit.partitioned]
    for target in fair:
        if len(rows) >= want:
            break
        ids = _fair_ids(flights, target, where, params, want - len(rows))
        if ids:
            (found,) = flights.run(
                [
                    Sql(
                        f"SELECT {columns} FROM {table} WHERE id IN ({_in(ids)}) "
                        f"AND waiting = %s{lock}",
                        [*select_params, *ids, True],
                    )
                ]
            )
            locked = {row[0]: row for row in found}
            rows += [locked[pk] for pk in ids if pk in locked]
    for target in fair:  # the plain scan leaves them to the rounds above
        where += f" AND {target.column} <> %s"
        params = [*params, target.value]
    if len(rows) < want:
        sql = f"SELECT {columns} FROM {table} WHERE {where} ORDER BY priority, run_at, id LIMIT %s"
        (found,) = flights.run([Sql(sql + lock, [*select_params, *params, want - len(rows)])])
        rows += found
    return rows


def _fair_ids(
    flights: Flights, target: Target, where: str, params: list[Any], want: int
) -> list[int]:
    """The ids of ``target``'s next ``want`` due jobs in rounds over its keys: each
    key's first job (in claim order), then each key's second, ...; rounds in claim
    order of their jobs. Reads every due job of the target (a window function; no
    lock: the caller locks the ids it gets)."""
    using = flights.using
    table = connections[using].ops.quote_name(Job._meta.db_table)
    key, key_params = key_sql(using, target.limit)
    sql = (
        "SELECT id FROM (SELECT id, priority, run_at, ROW_NUMBER() OVER "
        f"(PARTITION BY {key} ORDER BY priority, run_at, id) AS jq_round FROM {table} "
        f"WHERE {where} AND {target.column} = %s) AS due "
        "ORDER BY jq_round, priority, run_at, id LIMIT %s"
    )
    (rows,) = flights.run([Sql(sql, [*key_params, *params, target.value, want])])
    return [row[0] for row in rows]

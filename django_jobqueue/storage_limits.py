# ruff: noqa: S608 (every interpolated piece is a quoted identifier or %s placeholders)
"""The claim under flow-control limits (docs/limits.md "How a claim enforces a limit").

When any limit is active (:func:`django_jobqueue.store.limits.active`), a claim is one
write transaction on every database:

1. **Candidates.** The due jobs of the claimer's queues, in claim order (priority,
   run_at, id), ``FOR UPDATE SKIP LOCKED`` (SQLite: its write transaction), leaving
   out the targets and keys at their limit. Each candidate has its (target, key)
   pairs: one per limit over it (its job type's, its queue's).
2. **Locks.** The :class:`~django_jobqueue.models.LimitState` row of every pair, made
   if missing, is locked (``SELECT ... FOR UPDATE``): the rows of global limits first,
   before the candidates are read, then those of the candidates' keys, each group
   in sorted order. Two claims of the same key take turns; claims of other keys do
   not wait. No claim waits on a job row (SKIP LOCKED), so this is the only lock
   order and there is no deadlock. The keys at their limit that step 1 leaves out
   come from a count before their rows are locked: a hint, checked in step 3.
3. **Count.** After the locks, the ``processing`` jobs of each pair are counted in the
   job table (PostgreSQL and MariaDB at READ COMMITTED read the claims committed
   before the lock was granted). No counter is kept: a job that ends, is handed back
   or is reaped leaves ``processing``, and its slot is free, once, with its lease.
4. **Accept.** In claim order, a candidate is taken while every pair of it has a
   free slot (``concurrency - in flight``) and a token (``rate``, a token bucket
   refilled by the database clock); jobs under no limit are always taken.
5. **Claim.** One ``UPDATE`` of the accepted ids, as the plain claim's; the buckets'
   new levels are written; COMMIT.

A throttled claim records in this process when its rate allows the next start
(:func:`throttled_ms`), so an idle worker sleeps until then rather than polling.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.utils import timezone

from . import storage_sql
from .core.limitspec import MAX_KEY_LENGTH, Limit
from .models import Job, JobStatus, LimitState, QueuePause
from .store import locks, unique
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

_hints_lock = threading.Lock()
#: alias -> monotonic time before which no rate-limited job may start.
_throttled: dict[str, float] = {}
#: alias -> targets this process's last claim found at their concurrency (a key or
#: the whole target): a job of theirs that ends wakes the idle workers of its queue.
_saturated: dict[str, frozenset[str]] = {}

Pair = tuple[str, str]


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
    counts = _count(using, [_Target(target, column, name, limit)], {target: [key]})
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


def key_sql(using: str, limit: Limit) -> tuple[str, list[Any]]:
    """The SQL of a job's key under ``limit`` and its parameters.

    The stored ``limit_key`` when not "", else for a ``payload.<field>`` partition that
    field of the payload as text (so a partition set at run time applies to jobs
    enqueued before it), else "". The field's text is cut to
    :data:`~django_jobqueue.core.limitspec.MAX_KEY_LENGTH` characters, the
    ``LimitState.limit_key`` column's: a longer value (or an object's JSON text) is
    counted under its first 200 characters rather than failing every claim of the
    queue. A missing field, a JSON null and a payload that is not an object give "".
    """
    partition = limit.partition
    if not isinstance(partition, str) or partition == "key":
        return "limit_key", []
    path = partition.split(".")[1:]
    vendor = connections[using].vendor
    extract: str
    params: list[Any]
    if vendor == "postgresql":
        extract, params = f"LEFT(payload #>> %s, {MAX_KEY_LENGTH})", [path]
    else:
        quoted = "$" + "".join(f'."{part}"' for part in path)
        if vendor == "mysql":
            # JSON_UNQUOTE of a JSON null is the text 'null': null gives "" as elsewhere.
            extract = (
                "LEFT(CASE WHEN JSON_TYPE(JSON_EXTRACT(payload, %s)) = 'NULL' THEN NULL "
                f"ELSE JSON_UNQUOTE(JSON_EXTRACT(payload, %s)) END, {MAX_KEY_LENGTH})"
            )
            params = [quoted, quoted]
        else:
            extract = f"SUBSTR(CAST(json_extract(payload, %s) AS TEXT), 1, {MAX_KEY_LENGTH})"
            params = [quoted]
    return f"CASE WHEN limit_key <> '' THEN limit_key ELSE COALESCE({extract}, '') END", params


@dataclass(frozen=True)
class _Target:
    name: str  # type:x / queue:y
    column: str  # job_type / queue
    value: str
    limit: Limit


def _targets(
    view: LimitsView, queues: Sequence[str] | None, exclude_types: Collection[str]
) -> list[_Target]:
    found = [
        _Target(f"type:{name}", "job_type", name, limit)
        for name, limit in sorted(view.types.items())
        if name not in exclude_types
    ]
    found += [
        _Target(f"queue:{name}", "queue", name, limit)
        for name, limit in sorted(view.queues.items())
        if not queues or name in queues
    ]
    return found


def applies(view: LimitsView, queues: Sequence[str] | None, exclude_types: Collection[str]) -> bool:
    """Whether a claim of ``queues`` (None: all) without ``exclude_types`` may meet a
    job under one of ``view``'s limits (then it takes :func:`claim_limited`)."""
    return bool(view) and bool(_targets(view, queues, exclude_types))


def _now_sql(using: str) -> tuple[str, list[Any]]:
    vendor = connections[using].vendor
    if vendor == "postgresql":
        return "STATEMENT_TIMESTAMP()", []
    if vendor == "mysql":
        return "CURRENT_TIMESTAMP(6)", []
    return "%s", [storage_sql._sqlite_now(using)]


def _clock(using: str) -> datetime:
    """The database's current time (aware UTC), read now (not the statement's start)."""
    vendor = connections[using].vendor
    if vendor == "sqlite":
        return timezone.now()
    sql = "SELECT CLOCK_TIMESTAMP()" if vendor == "postgresql" else "SELECT SYSDATE(6)"
    with connections[using].cursor() as cursor:
        cursor.execute(sql)
        value = cursor.fetchone()[0]
    if timezone.is_naive(value):  # MySQL: the session's UTC (checks E1xx)
        value = value.replace(tzinfo=UTC)
    return value


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
    transaction.
    """
    targets = _targets(view, queues, exclude_types)
    with locks.write_transaction(using):
        return _claim(
            using, targets, owner, token, limit, queues, exclude_types, exclude_queues, lease,
            started,
        )  # fmt: skip


def _claim(
    using: str,
    targets: list[_Target],
    owner: str,
    token: str,
    limit: int,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    exclude_queues: Sequence[str],
    lease: timedelta,
    started: bool,
) -> list[Job]:
    by_name = {target.name: target for target in targets}
    # Global limits first: their rows are known before any candidate, so they are
    # locked, then counted once, exactly. Every claim locks global rows before keyed
    # ones, each group in sorted order: one lock order, no deadlock.
    global_pairs = sorted((t.name, "") for t in targets if not t.limit.partitioned)
    states = _lock_states(using, global_pairs)
    counts = _count(using, targets, {})
    full = {
        pair
        for pair, count in counts.items()
        if (concurrency := by_name[pair[0]].limit.concurrency) is not None and count >= concurrency
    }
    # Keyed counts are a hint until their rows are locked: they keep the keys at their
    # limit (and their backlog) out of the candidates.
    tight = any(
        t.limit.partitioned
        or t.limit.rate is not None
        or (t.limit.concurrency or 0) - counts.get((t.name, ""), 0) < limit
        for t in targets
    )
    if not tight:
        # Every limit here is global, a concurrency only, with room for the whole claim
        # (checked under its lock): every job the plain claim would take is allowed, so
        # it is the plain claim's own statement, in this transaction.
        claimed = storage_sql.claim_rows(
            using,
            owner=owner,
            token=token,
            limit=limit,
            queues=queues,
            exclude_types=exclude_types,
            lease=lease,
            exclude_queues=exclude_queues,
            started=started,
        )
        _note_saturated(using, full if len(claimed) < limit else ())
        return claimed
    want = min(limit * 2, limit + MAX_EXTRA_CANDIDATES)
    now = _clock(using) if any(t.limit.rate is not None for t in targets) else None
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
        rows = _candidates(
            using, targets, want, queues, exclude_types, exclude_queues, frozenset(full), seen
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
            # The second round holds locks already: it takes only rows no other claim
            # holds (SKIP LOCKED), never waits, so the lock order cannot deadlock.
            got = _lock_states(using, keyed, skip_locked=round_ > 0)
            locked = [pair for pair in keyed if pair in got or round_ == 0]
            states.update(got)
            grouped: dict[str, list[str]] = {}
            for name, key in locked:
                grouped.setdefault(name, []).append(key)
            counts.update(_count(using, [by_name[name] for name in grouped], grouped))
            for pair in locked:
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
    if tokens and now is not None:
        _store_tokens(using, tokens, now)
    if not accepted:
        return []
    return _update(using, accepted, owner, token, lease, started)


def _candidates(
    using: str,
    targets: list[_Target],
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
    conn = connections[using]
    table = conn.ops.quote_name(Job._meta.db_table)
    select: list[str] = []
    select_params: list[Any] = []
    for target in targets:
        if target.limit.partitioned:
            sql, key_params = key_sql(using, target.limit)
            select.append(sql)
            select_params += key_params
        else:
            select.append("''")
    columns = f"id, job_type, queue{''.join(', ' + s for s in select)}"
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
        ids = _fair_ids(using, target, where, params, want - len(rows))
        if ids:
            with conn.cursor() as cursor:
                cursor.execute(
                    f"SELECT {columns} FROM {table} WHERE id IN ({_in(ids)}) AND waiting = %s"
                    f"{lock}",
                    [*select_params, *ids, True],
                )
                locked = {row[0]: tuple(row) for row in cursor.fetchall()}
            rows += [locked[pk] for pk in ids if pk in locked]
    for target in fair:  # the plain scan leaves them to the rounds above
        where += f" AND {target.column} <> %s"
        params = [*params, target.value]
    if len(rows) < want:
        sql = f"SELECT {columns} FROM {table} WHERE {where} ORDER BY priority, run_at, id LIMIT %s"
        with conn.cursor() as cursor:
            cursor.execute(sql + lock, [*select_params, *params, want - len(rows)])
            rows += [tuple(row) for row in cursor.fetchall()]
    return rows


def _where(
    using: str,
    targets: list[_Target],
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    exclude_queues: Sequence[str],
    full: frozenset[Pair],
) -> tuple[str, list[Any]]:
    """The due filter of a limited claim: the claimer's queues and types, no paused
    queue, no target or key in ``full``."""
    conn = connections[using]
    now, now_params = _now_sql(using)
    where = f"waiting = %s AND run_at <= {now}"
    params: list[Any] = [True, *now_params]
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
    return where, params


def _fair_ids(using: str, target: _Target, where: str, params: list[Any], want: int) -> list[int]:
    """The ids of ``target``'s next ``want`` due jobs in rounds over its keys: each
    key's first job (in claim order), then each key's second, ...; rounds in claim
    order of their jobs. Reads every due job of the target (a window function; no
    lock: the caller locks the ids it gets)."""
    conn = connections[using]
    table = conn.ops.quote_name(Job._meta.db_table)
    key, key_params = key_sql(using, target.limit)
    sql = (
        "SELECT id FROM (SELECT id, priority, run_at, ROW_NUMBER() OVER "
        f"(PARTITION BY {key} ORDER BY priority, run_at, id) AS jq_round FROM {table} "
        f"WHERE {where} AND {target.column} = %s) AS due "
        "ORDER BY jq_round, priority, run_at, id LIMIT %s"
    )
    with conn.cursor() as cursor:
        cursor.execute(sql, [*key_params, *params, target.value, want])
        return [row[0] for row in cursor.fetchall()]


def _in(values: Collection[Any]) -> str:
    return ", ".join(["%s"] * len(values))


def _lock_states(
    using: str, pairs: list[Pair], *, skip_locked: bool = False
) -> dict[Pair, tuple[float | None, datetime | None]]:
    """Lock the state rows of ``pairs`` (made if missing) in sorted order; return
    each one's (tokens, refilled_at). ``skip_locked``: leave out (and do not wait
    for) the rows another transaction holds."""
    if not pairs:
        return {}
    manager = LimitState.objects.using(using)
    found: dict[Pair, tuple[float | None, datetime | None]] = {}
    for _round in range(3):
        missing = [pair for pair in pairs if pair not in found]
        if not missing:
            break
        rows = _select_states(using, missing, skip_locked=skip_locked)
        found.update(rows)
        absent = [pair for pair in missing if pair not in rows]
        if skip_locked:  # no insert: MariaDB's duplicate check would wait on a holder
            break
        if absent:
            # A new row's bucket is full: tokens None (see the accept step).
            manager.bulk_create(
                [LimitState(target=t, limit_key=k, tokens=0.0) for t, k in absent],
                ignore_conflicts=True,
            )
    return found


def _select_states(
    using: str, pairs: list[Pair], *, skip_locked: bool = False
) -> dict[Pair, tuple[float | None, datetime | None]]:
    conn = connections[using]
    table = conn.ops.quote_name(LimitState._meta.db_table)
    match = " OR ".join(["(target = %s AND limit_key = %s)"] * len(pairs))
    params = [value for pair in pairs for value in pair]
    lock = " FOR UPDATE" if conn.vendor != "sqlite" else ""
    if lock and skip_locked:
        lock += " SKIP LOCKED"
    sql = (
        f"SELECT target, limit_key, tokens, refilled_at FROM {table} WHERE {match} "
        f"ORDER BY target, limit_key{lock}"
    )
    col = LimitState._meta.get_field("refilled_at").get_col(LimitState._meta.db_table)
    converters = conn.ops.get_db_converters(col)
    with conn.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    found: dict[Pair, tuple[float | None, datetime | None]] = {}
    for target, key, level, refilled_at in rows:
        when = refilled_at
        for converter in converters:
            when = converter(when, col, conn)
        found[(target, key)] = (None if when is None else float(level), when)
    return found


def _count(using: str, targets: list[_Target], keys: dict[str, list[str]]) -> dict[Pair, int]:
    """Count the ``processing`` jobs of ``targets`` in one statement: per target, or
    per key for a partitioned one (only ``keys[target name]`` when given, else every
    key in flight)."""
    conn = connections[using]
    table = conn.ops.quote_name(Job._meta.db_table)
    parts: list[str] = []
    params: list[Any] = []
    for index, target in enumerate(targets):
        where = f"status = %s AND {target.column} = %s"
        if target.limit.partitioned:
            sql, key_params = key_sql(using, target.limit)
            only = keys.get(target.name)
            part_params = [*key_params, JobStatus.PROCESSING, target.value]
            if only:
                where += f" AND {sql} IN ({_in(only)})"
                part_params += [*key_params, *only]
            parts.append(f"SELECT {index}, {sql}, COUNT(*) FROM {table} WHERE {where} GROUP BY 2")
            params += part_params
        else:
            parts.append(f"SELECT {index}, '', COUNT(*) FROM {table} WHERE {where}")
            params += [JobStatus.PROCESSING, target.value]
    counts: dict[Pair, int] = {}
    if not parts:
        return counts
    with conn.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        for index, key, count in cursor.fetchall():
            counts[(targets[int(index)].name, key or "")] = int(count)
    return counts


def _store_tokens(using: str, levels: dict[Pair, float], now: datetime) -> None:
    manager = LimitState.objects.using(using)
    for (target, key), level in levels.items():
        manager.filter(target=target, limit_key=key).update(tokens=level, refilled_at=now)


def _update(
    using: str, ids: list[int], owner: str, token: str, lease: timedelta, started: bool
) -> list[Job]:
    """Move the accepted ``ids`` (locked by this transaction) to ``processing``."""
    conn = connections[using]
    vendor = conn.vendor
    table = conn.ops.quote_name(Job._meta.db_table)
    now_params: list[Any] = []
    lease_params: list[Any]
    if vendor == "postgresql":
        now = "STATEMENT_TIMESTAMP()"
        lease_sql, lease_params = f"{now} + %s", [lease]
    elif vendor == "mysql":
        now = "CURRENT_TIMESTAMP(6)"
        lease_sql = f"{now} + INTERVAL %s MICROSECOND"
        lease_params = [lease // timedelta(microseconds=1)]
    else:
        stamp = storage_sql._sqlite_now(using)
        now, lease_sql, now_params = "%s", "%s", [stamp]
        lease_params = [storage_sql._sqlite_now(using, lease)]
    started_sql = now if started else "NULL"
    set_params: list[Any] = [JobStatus.PROCESSING, False, owner, token, *lease_params]
    set_params += now_params  # heartbeat_at
    if started:
        set_params += now_params
    set_params += now_params  # updated_at
    sql = (
        f"UPDATE {table} SET status = %s, waiting = %s, attempt = attempt + 1, "
        f"lease_owner = %s, lease_token = %s, lease_expires_at = {lease_sql}, "
        f"heartbeat_at = {now}, started_at = {started_sql}, updated_at = {now}, "
        "unique_key_hash = CASE WHEN unique_mode = %s THEN NULL ELSE unique_key_hash END "
        f"WHERE id IN ({_in(ids)}) AND waiting = %s"
    )
    params = [*set_params, unique.UNTIL_EXECUTING, *ids, True]
    columns = storage_sql._columns(using)
    with conn.cursor() as cursor:
        if vendor == "mysql":
            cursor.execute(sql, params)
            cursor.execute(f"SELECT {columns} FROM {table} WHERE id IN ({_in(ids)})", ids)
        else:
            cursor.execute(f"{sql} RETURNING {columns}", params)
        rows = cursor.fetchall()
    jobs = storage_sql._jobs(using, rows)
    return sorted(jobs, key=lambda job: (job.priority, job.run_at, job.pk))
